package tracker

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker/durable"
	"github.com/tendhq/tend/tracker/layout"
	"golang.org/x/sys/unix"
)

// Store is the runs/ directory of a tend root.
type Store struct {
	root       layout.Root
	dir        string     // root.Runs()
	durability Durability // "" is PowerLoss
	renameNew  bool       // see SetRenameNew

	// dirsMade counts the run directories MakeRunDir made, and dirsSynced
	// what it counted when runs/ was last fsynced: while they differ, a
	// durable write syncs runs/ too, or a power loss could take a new
	// run's directory, record and all, on a file system that does not
	// order metadata (ext4 without a journal).
	mu                   sync.Mutex
	dirsMade, dirsSynced uint64

	// readStep, for the tests of reads of output being cut, is called at
	// each step of ReadOutput named (see readStep); nil calls nothing.
	readStep func(step string)

	// key seals the records written, and is checked on those read: set
	// in the watcher's Store (SetKey), nil in readers', which cannot
	// read it.
	key []byte
}

// Durability is what a record survives once Write has returned.
type Durability string

const (
	// PowerLoss, the default: the record and its directory are fsynced,
	// so it survives a crash of the writer, of the system, or a power
	// loss.
	PowerLoss Durability = "power_loss"
	// WatcherCrash: the record is replaced atomically but not fsynced. It
	// survives a crash of the writer; a crash of the system or a power
	// loss may leave an older record, or an empty file, in its place.
	WatcherCrash Durability = "watcher_crash"
)

// ParseDurability returns the Durability named s.
func ParseDurability(s string) (Durability, error) {
	switch d := Durability(s); d {
	case PowerLoss, WatcherCrash:
		return d, nil
	}
	return "", fmt.Errorf("%q is neither %q nor %q", s, PowerLoss, WatcherCrash)
}

// NewStore returns the Store of the tend root at root, whose records are
// written durable against a power loss.
func NewStore(root string) *Store {
	return &Store{root: layout.Root(root), dir: layout.Root(root).Runs()}
}

// SetKey makes s seal every record it writes with key, and report every
// record it reads whose seal key does not verify (see ErrUnsealed).
func (s *Store) SetKey(key []byte) { s.key = key }

// SetDurability makes the records written from now on survive what d
// says.
func (s *Store) SetDurability(d Durability) { s.durability = d }

// SetRenameNew makes a run's first record, written durable, renamed in
// before its flush (durable.RenameNew): one journal commit for its data
// and its name, where synced-then-renamed takes two. Only for a file
// system that commits the data of a new file no later than its name
// (procfs.OrdersNewData), so that no crash leaves a record half-written;
// elsewhere a crash could, which recovery takes for a record never
// written while its run has not passed its gate (package watcher).
func (s *Store) SetRenameNew(on bool) { s.renameNew = on }

// ErrNotFound means there is no run with the ID asked for.
var ErrNotFound = errors.New("no such run")

// Dir returns the runs/ directory.
func (s *Store) Dir() string { return s.dir }

// Run returns the directory of run id, which names its files. The id must
// be valid (see spool.ValidID); every caller has checked it, so a bad one
// is a bug.
func (s *Store) Run(id string) layout.Run {
	if err := spool.ValidID(id); err != nil {
		panic(fmt.Sprintf("tracker: invalid run id reached the store: %v", err))
	}
	return s.root.Run(id)
}

// RunDir returns the directory of run id (see Run).
func (s *Store) RunDir(id string) string { return string(s.Run(id)) }

// Make creates runs/ if it is missing, durably unless the store's
// durability is WatcherCrash: every record durable in it is lost if it
// is.
func (s *Store) Make() error {
	err := os.Mkdir(s.dir, 0o755)
	if errors.Is(err, os.ErrExist) {
		return nil
	}
	if err == nil && s.durability != WatcherCrash {
		err = durable.FlushRootDirs.SyncDir(filepath.Dir(s.dir))
	}
	return err
}

// MakeRunDir creates run id's directory, and runs/ first if it was
// removed. A directory already there gives an error satisfying
// errors.Is(err, fs.ErrExist).
func (s *Store) MakeRunDir(id string) error {
	// Its owner's alone (and root's): in a shared root, runs/ is readable
	// by every user of it, a run's output only by the run's.
	err := os.Mkdir(s.RunDir(id), 0o700)
	if errors.Is(err, os.ErrNotExist) && s.Make() == nil {
		err = os.Mkdir(s.RunDir(id), 0o700)
	}
	if err == nil {
		s.mu.Lock()
		s.dirsMade++
		s.mu.Unlock()
	}
	return err
}

// Write replaces run st.ID's state.json: readers see the old or the new
// file, never a mix, and once Write returns the change survives what the
// store's Durability says: by default a crash or a power loss (the file
// and its directory are fsynced).
func (s *Store) Write(st *State) error {
	return s.WriteAll([]*State{st}, nil)[0]
}

// WriteAll writes the records of several runs as Write does each, with one
// round of fsyncs for them all (durable.ReplaceAll): what a storm of runs
// ending at once costs the disk. errs[i] is states[i]'s error.
//
// launches, if not nil, says which records are launches: written while
// their run's process waits at its gate, before anything it does has
// happened or been answered. Where the store renames new records early
// (SetRenameNew), a launch is renamed over its run's last record before
// its flush too, which then commits its data and its name at once; a
// power loss before WriteAll returns takes back a change that nothing
// has acted on.
func (s *Store) WriteAll(states []*State, launches []bool) (errs []error) {
	errs = make([]error, len(states))
	var paths []string
	var data [][]byte
	var perms []durable.Perm
	var early []bool
	var which []int // the index in states of each path
	for i, st := range states {
		b, err := st.encode(s.key)
		if err != nil {
			errs[i] = fmt.Errorf("run %s: %w", st.ID, err)
			continue
		}
		paths, data, which = append(paths, s.Run(st.ID).State()), append(data, b), append(which, i)
		perms = append(perms, RunPerm(st.OwnerUID))
		early = append(early, launches != nil && launches[i])
	}
	for j, err := range s.replace(paths, data, perms, early) {
		if err != nil {
			errs[which[j]] = fmt.Errorf("run %s: %w", states[which[j]].ID, err)
		}
	}
	return errs
}

// WriteCovered writes the records of states as WriteAll does, atomically,
// but with no flush of its own: for ends and stops whose history lines
// are synced, from which recovery writes the record again if a power loss
// takes it back (RecentEvents, CoveredAfter, ApplyCovered). Each file's write-back is started
// before its rename, so that a file system that orders new data before
// names (ext4 with a journal, data=ordered: procfs.OrdersNewData) commits
// the record whole with its name, at its next journal commit; anywhere
// else a power loss could leave the record torn, for tend fsck --repair
// to rebuild without what only the record held: so a watcher writes them
// so only where the file system orders them.
func (s *Store) WriteCovered(states []*State) []error {
	_, errs := s.WriteLogged(states)
	return errs
}

// WriteLogged writes the records of states as WriteCovered does, with
// no flush (a power loss may take them back, or leave them torn), and
// returns what each record holds: the start log keeps that, synced,
// until SyncLogged has made the records durable (see StartLog).
func (s *Store) WriteLogged(states []*State) ([][]byte, []error) {
	records := make([][]byte, len(states))
	errs := make([]error, len(states))
	eachInParallel(min(len(states), coveredInFlight), len(states), func(i int, _ []byte) {
		st := states[i]
		b, err := st.encode(s.key)
		if err == nil {
			err = durable.ReplaceStarted(s.Run(st.ID).State(), b, RunPerm(st.OwnerUID))
		}
		if err != nil {
			errs[i] = fmt.Errorf("run %s: %w", st.ID, err)
		}
		records[i] = b
	})
	return records, errs
}

// SyncLogged makes durable the records of runs ids that WriteLogged
// wrote, with their directories and runs/ (for a directory made since it
// was last synced), as Write's flushes do.
func (s *Store) SyncLogged(ids []string) error {
	s.mu.Lock()
	made := s.dirsMade
	s.mu.Unlock()
	errs := make([]error, len(ids))
	eachInParallel(min(len(ids), coveredInFlight), len(ids), func(i int, _ []byte) {
		errs[i] = s.syncRecord(ids[i])
	})
	err := errors.Join(errs...)
	if err == nil && made != s.dirsSyncedNow() {
		if err = durable.FlushRunsDir.SyncDir(s.dir); err == nil {
			s.mu.Lock()
			s.dirsSynced = max(s.dirsSynced, made)
			s.mu.Unlock()
		}
	}
	return err
}

func (s *Store) dirsSyncedNow() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dirsSynced
}

// syncRecord fsyncs run id's state.json, then its directory.
func (s *Store) syncRecord(id string) error {
	path := s.Run(id).State()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil // its run deleted since (its history line is synced), or its directory removed
	}
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	err = durable.FlushRecord.Fsync(fd)
	unix.Close(fd)
	if err != nil {
		return fmt.Errorf("run %s: %w", id, err)
	}
	if err := durable.FlushRecordDir.SyncDir(s.RunDir(id)); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("run %s: %w", id, err)
	}
	return nil
}

// coveredInFlight is how many records WriteCovered writes at once: a
// file's creation, its write-back's start and its rename each wait for
// the journal or the disk's queue now and then, and the others go on
// meanwhile.
const coveredInFlight = 16

// replace replaces the files at paths as the store's Durability asks.
// Durable, they are not written until runs/ is synced too if a run
// directory was made since it last was (beside the records' own fsyncs:
// the directory was made before them).
func (s *Store) replace(paths []string, data [][]byte, perms []durable.Perm, early []bool) []error {
	if s.durability == WatcherCrash {
		errs := make([]error, len(paths))
		for i := range paths {
			errs[i] = durable.ReplaceUnsynced(paths[i], data[i], perms[i])
		}
		return errs
	}
	s.mu.Lock()
	made, synced := s.dirsMade, s.dirsSynced
	s.mu.Unlock()
	record := durable.Durable{File: durable.FlushRecord, Dir: durable.FlushRecordDir, RenameNew: s.renameNew}
	if made == synced {
		return durable.ReplaceAll(paths, data, perms, early, record)
	}
	var wg sync.WaitGroup
	var syncErr error
	wg.Go(func() { syncErr = durable.FlushRunsDir.SyncDir(s.dir) })
	errs := durable.ReplaceAll(paths, data, perms, early, record)
	wg.Wait()
	if syncErr != nil {
		for i := range errs {
			errs[i] = cmp.Or(errs[i], syncErr)
		}
		return errs
	}
	s.mu.Lock()
	s.dirsSynced = max(s.dirsSynced, made)
	s.mu.Unlock()
	return errs
}

// Stamp identifies one version of a run's state.json: replacing the file
// or changing it in place gives it another. The zero Stamp is no file's.
type Stamp struct {
	dev, ino     uint64
	size         int64
	mtime, ctime unix.Timespec
}

// Stamp returns the Stamp of run id's state.json as it is now.
func (s *Store) Stamp(id string) (Stamp, error) {
	var st unix.Stat_t
	path := s.Run(id).State()
	if err := unix.Lstat(path, &st); err != nil {
		return Stamp{}, &os.PathError{Op: "lstat", Path: path, Err: err}
	}
	return stampOf(&st), nil
}

// RecordBytes returns what run id's state file holds, read only as a
// regular file of at most a record's size, without following a link or
// blocking on a FIFO: a run's directory may be its user's, who may put
// anything under the record's name. A missing file gives an error
// satisfying errors.Is(err, fs.ErrNotExist).
func (s *Store) RecordBytes(id string) ([]byte, error) {
	b, _, err := durable.ReadRegular(s.Run(id).State(), maxRecord)
	return b, err
}

// Read returns run id's state. A missing run gives an error satisfying
// errors.Is(err, ErrNotFound); a state file that does not parse gives an
// error naming the file.
func (s *Store) Read(id string) (*State, error) {
	if err := spool.ValidID(id); err != nil {
		return nil, fmt.Errorf("run %q: %w: %v", id, ErrNotFound, err)
	}
	return s.readAt(unix.AT_FDCWD, id, make([]byte, smallRecord), nil)
}

// smallRecord is the size of the buffer a record is read into: nearly
// every record fits.
const smallRecord = 2048

// readAt reads run id's record, opening it relative to dirfd when that is
// the runs/ directory's (List, which opens thousands), else by its path.
// buf is reused by the caller for the next record: nothing returned
// refers to it. If stamp is not nil, it is set to the Stamp of the file
// read, or left zero if that is not known.
func (s *Store) readAt(dirfd int, id string, buf []byte, stamp *Stamp) (*State, error) {
	path := s.Run(id).State()
	name := path
	if dirfd != unix.AT_FDCWD {
		name = id + "/state.json"
	}
	b, err := readSmall(dirfd, name, path, buf, stamp)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("run %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	st, err := s.parseSealed(path, b)
	if err != nil && !errors.Is(err, ErrEdited) && !errors.Is(err, ErrUnsealed) {
		// A read cut short by a signal looks like a torn file: read it again,
		// the long way, before saying so.
		if b, _, rerr := durable.ReadRegular(path, maxRecord); rerr == nil {
			if stamp != nil {
				*stamp = Stamp{}
			}
			return s.parseSealed(path, b)
		}
	}
	return st, err
}

// readSmall reads a file that is almost always smaller than buf with
// three system calls (open, read, close), where os.ReadFile makes six:
// tend ls reads thousands of records. name is opened relative to dirfd;
// path names the file in errors. If stamp is not nil, it is set to the
// Stamp of the file read (taken before the read, so that a change after
// it gives the file another), or left zero for a large record or one
// whose fstat failed.
func readSmall(dirfd int, name, path string, buf []byte, stamp *Stamp) ([]byte, error) {
	// Not following a link, nor blocking on a FIFO: a run's directory may
	// belong to its user, who may put anything there.
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if stamp != nil && unix.Fstat(fd, &st) == nil {
		*stamp = stampOf(&st)
	}
	n, err := unix.Read(fd, buf)
	if err != nil {
		return nil, &os.PathError{Op: "read", Path: path, Err: err}
	}
	if n < len(buf) {
		return buf[:n], nil
	}
	if stamp != nil {
		*stamp = Stamp{}
	}
	b, _, err := durable.ReadRegular(path, maxRecord) // a large record: the long way
	return b, err
}

// maxRecord bounds a record read: far more than any record tend writes
// (its fields are bounded), far less than what would hurt a reader.
const maxRecord = 16 << 20

// ParseState parses a state file's bytes; path is used in errors.
//
// It decodes with encoding/json's v2 (go-json-experiment/json until the
// standard library's leaves GOEXPERIMENT): twice as fast as v1 on a record,
// and tend ls decodes thousands. Records are written by v1 and read the
// same by both (TestParseStateReadsWhatV1Reads). What v2 is stricter about
// (a member named twice or spelled in another case, bytes that are not
// UTF-8) is never in a file tend wrote; in an edited file it makes the
// record invalid rather than untrusted.
func ParseState(path string, b []byte) (*State, error) {
	var st State
	if err := jsonv2.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("%s: %w: %v", path, ErrTorn, err)
	}
	if st.ID == "" || st.State == "" || st.Rev < 1 {
		return nil, fmt.Errorf("%s: not a valid state file: missing id, state or rev", path)
	}
	if !fileSumMatches(b, st.Sum) && st.Sum != st.checksum() {
		return &st, fmt.Errorf("%s: %w (its checksum does not match): not trusted; see tend fsck", path, ErrEdited)
	}
	return &st, nil
}

// parseSealed is ParseState for a Store with a key: a record whose seal
// does not verify is returned with an error satisfying errors.Is(err,
// ErrUnsealed).
func (s *Store) parseSealed(path string, b []byte) (*State, error) {
	st, err := ParseState(path, b)
	if err != nil || s.key == nil {
		return st, err
	}
	if !st.sealed(s.key) {
		return st, fmt.Errorf("%s: %w: not trusted; see tend fsck", path, ErrUnsealed)
	}
	return st, nil
}

// ErrTorn means a state file is not JSON at all: empty, cut short, or
// zeros, as a crash can leave a run's first record (durable.RenameNew),
// or as anything may write it.
var ErrTorn = errors.New("not a valid state file")

// ErrEdited means a state file was changed by something other than tend.
// ParseState returns the record it holds with it, for fsck to show.
var ErrEdited = errors.New("edited by hand")

// List returns every run's state, sorted by creation time then ID, and an
// error for each run directory whose state could not be read. A directory
// without a state.json yet (a run being created) is skipped.
func (s *Store) List() ([]*State, []error) { return s.list(nil) }

// list is List, taking what it can from the list cache c and bringing it
// up to date, if c is not nil (ListBrief).
func (s *Store) list(c *listCache) ([]*State, []error) {
	dir, ids, err := s.openRuns()
	if dir == nil || err != nil {
		return nil, errorsOf(err)
	}
	defer dir.Close()
	// Opened relative to runs/, the kernel walks one component of each
	// path instead of all of them.
	dirfd := int(dir.Fd())
	// Reading is mostly system calls: on several CPUs at once, a long
	// list reads in a fraction of the time.
	workers := min(runtime.GOMAXPROCS(0), len(ids)/64+1)
	stamps := make([]string, len(ids)) // stampText of each record
	if c != nil && c.read() {
		// The records' Stamps are taken while the cache is indexed.
		indexed := c.index()
		eachInParallel(workers, len(ids), func(i int, _ []byte) { stamps[i] = stampAt(dirfd, ids[i]) })
		<-indexed
	}
	states := make([]*State, len(ids))
	readErrs := make([]error, len(ids))
	lines := make([]cachedLine, len(ids)) // what c is to hold of each
	eachInParallel(workers, len(ids), func(i int, buf []byte) {
		states[i], lines[i], readErrs[i] = s.readCached(c, dirfd, ids[i], stamps[i], buf)
	})
	var out []*State
	var errs []error
	for i, st := range states {
		switch err := readErrs[i]; {
		case errors.Is(err, ErrNotFound), errors.Is(err, os.ErrPermission): // not there, or another user's
		case err != nil:
			errs = append(errs, err)
		default:
			out = append(out, st)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
	if c != nil {
		c.save(ids, lines)
	}
	return out, errs
}

// openRuns opens runs/ and returns it with the IDs of the run directories
// in it, in no order; none if there is no runs/.
func (s *Store) openRuns() (*os.File, []string, error) {
	dir, err := os.Open(s.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	ents, err := dir.ReadDir(-1) // not os.ReadDir, which sorts them
	if err != nil {
		dir.Close()
		return nil, nil, err
	}
	var ids []string
	for _, e := range ents {
		if e.IsDir() && spool.ValidID(e.Name()) == nil {
			ids = append(ids, e.Name())
		}
	}
	return dir, ids, nil
}

func errorsOf(err error) []error {
	if err == nil {
		return nil
	}
	return []error{err}
}

// eachInParallel calls f(i, buf) for every i below n, on workers
// goroutines, each with a record-sized buf of its own.
func eachInParallel(workers, n int, f func(i int, buf []byte)) {
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			buf := make([]byte, smallRecord)
			for i := w; i < n; i += workers {
				f(i, buf)
			}
		})
	}
	wg.Wait()
}

// readCached returns run id's record from the list cache c if its
// state.json's stampText is still stamp, else as readAt reads it; with
// it, its line in c, if it is to have one (never if c is nil).
func (s *Store) readCached(c *listCache, dirfd int, id, stamp string, buf []byte) (*State, cachedLine, error) {
	if c == nil {
		st, err := s.readAt(dirfd, id, buf, nil)
		return st, cachedLine{}, err
	}
	if st, l, ok := c.lookup(id, stamp); ok {
		return st, l, nil
	}
	var read Stamp
	st, err := s.readAt(dirfd, id, buf, &read)
	if err != nil {
		return st, cachedLine{}, err
	}
	return st, c.line(st, read), nil
}

// Trash takes run id's directory out of the store at once, by renaming it
// to a hidden name, so readers see the whole record or none of it; unless
// the store's durability is WatcherCrash, durably. It returns the new
// path, for the watcher to remove; with an error, the directory was
// renamed if the path is not empty, but the rename may not survive a
// power loss.
func (s *Store) Trash(id string) (string, error) {
	var buf [8]byte
	rand.Read(buf[:])
	trash := filepath.Join(s.dir, "."+id+".deleted-"+hex.EncodeToString(buf[:]))
	if err := unix.Renameat2(unix.AT_FDCWD, s.RunDir(id), unix.AT_FDCWD, trash, unix.RENAME_NOREPLACE); err != nil {
		return "", fmt.Errorf("run %s: %w", id, err)
	}
	if s.durability != WatcherCrash {
		// Gone for good before the history says so and the deletion is
		// answered: a power loss must not bring it back.
		if err := durable.FlushTrash.SyncDir(s.dir); err != nil {
			return trash, fmt.Errorf("run %s: %w", id, err)
		}
	}
	return trash, nil
}

// ReadTrashed reads the record of run id in trash, the directory Trash
// returned, and checks its seal as Read does, and that it is id's: the
// directory is its run's owner's, who may have written anything there
// since.
func (s *Store) ReadTrashed(id, trash string) (*State, error) {
	path := layout.Run(trash).State()
	b, _, err := durable.ReadRegular(path, maxRecord)
	if err != nil {
		return nil, err
	}
	st, err := s.parseSealed(path, b)
	if err == nil && st.ID != id {
		// Sealed, but another run's, put there by the owner of both.
		return nil, fmt.Errorf("%s: the record of run %s, not of %s", path, st.ID, id)
	}
	return st, err
}

// Trashed returns what Trash left behind and Purge did not remove (a crash
// in between), by run ID: more than one directory for an ID whose run
// was deleted, made anew and deleted again before the first was removed.
func (s *Store) Trashed() map[string][]string {
	paths, _ := filepath.Glob(filepath.Join(s.dir, ".*.deleted-*"))
	out := make(map[string][]string, len(paths))
	for _, p := range paths {
		name := strings.TrimPrefix(filepath.Base(p), ".")
		// The last: an ID may hold ".deleted-" itself.
		if i := strings.LastIndex(name, ".deleted-"); i > 0 {
			out[name[:i]] = append(out[name[:i]], p)
		}
	}
	return out
}

// RunPerm is the Perm of a file tend writes in the directory of a run
// that owner owns: given to owner where the writer is root and owner is
// another user (a run of a shared root, whose directory is its owner's),
// else the writer's. Nothing in a directory a user may write is ever
// root's, or that user could move it into the spool as root's request.
//
// Its mode is 0600 whatever the file it replaces had: the owner of a run's
// directory may chmod its files, and a mode kept from such a file (setgid,
// say) would be given to the watcher's file.
func RunPerm(owner int) durable.Perm {
	if owner > 0 && os.Geteuid() == 0 {
		return durable.Perm{Mode: 0o600, Owner: owner}
	}
	return durable.Perm{Mode: 0o600}
}

// CheckRunFile says why the file st describes (stat of the open file),
// found in the directory of a run of owner's, is not one tend may read or
// write for the run, or returns nil: it must be a regular file, with no
// other name, and owner's where tend runs as root. The directory may be
// the owner's, who may have renamed or linked there a file they may not
// read or write themselves (root's, another user's), for tend to use.
func CheckRunFile(st *unix.Stat_t, owner int) error {
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return errors.New("not a regular file")
	case st.Nlink != 1:
		return fmt.Errorf("it has %d links", st.Nlink)
	case RunPerm(owner).Owner > 0 && int(st.Uid) != owner:
		return fmt.Errorf("owned by uid %d, not by the run's owner (uid %d)", st.Uid, owner)
	}
	return nil
}

// OpenRunFile opens the file at path in a run's directory with flags,
// creating it (mode 0644, given to owner as RunPerm says) if it is
// missing, and never through a link, a FIFO or a device. A file that was
// there must be a regular one, with no other name, and owner's where the
// writer is root: a run's directory may be its owner's, who may put
// anything in it.
//
// What was there is checked before it is opened with flags, not after:
// an open for writing is itself an act on a device (a tape rewinds, a
// terminal becomes the opener's) and blocks on a FIFO another holds open
// for reading. It is first opened O_PATH (which opens nothing, and holds
// a link as the link itself), checked on that handle, then opened with
// flags through /proc/self/fd, the same inode whatever the name holds by
// then. The check is made again on the file opened: its links may have
// changed in between.
func OpenRunFile(path string, flags int, owner int) (int, error) {
	const safe = unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC | unix.O_NOCTTY
	fd, err := unix.Open(path, flags|unix.O_CREAT|unix.O_EXCL|safe, 0o644)
	if err == nil {
		if p := RunPerm(owner); p.Owner > 0 {
			if err := unix.Fchown(fd, p.Owner, -1); err != nil {
				unix.Close(fd)
				return -1, &os.PathError{Op: "chown", Path: path, Err: err}
			}
		}
		return fd, nil
	}
	if !errors.Is(err, unix.EEXIST) {
		return -1, &os.PathError{Op: "create", Path: path, Err: err}
	}
	pfd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(pfd)
	if err := checkRunFD(pfd, owner); err != nil {
		return -1, &os.PathError{Op: "open", Path: path, Err: err}
	}
	// No O_CREAT, O_EXCL or O_TRUNC's effect before the check: flags
	// apply to the inode checked. O_NOFOLLOW is left out, as the magic
	// link to that inode is what is followed.
	fd, err = unix.Open(fmt.Sprintf("/proc/self/fd/%d", pfd), flags&^(unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW)|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: path, Err: err}
	}
	if err := checkRunFD(fd, owner); err != nil {
		unix.Close(fd)
		return -1, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return fd, nil
}

// checkRunFD is CheckRunFile of the file fd has open.
func checkRunFD(fd, owner int) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	return CheckRunFile(&st, owner)
}

// ParseLogged returns the record b, run id's as the start log holds it,
// checked as a record read from its file is (its sum, and its seal).
func (s *Store) ParseLogged(id string, b []byte) (*State, error) {
	st, err := s.parseSealed(s.Run(id).State()+" (in the start log)", b)
	if err == nil && st.ID != id {
		err = fmt.Errorf("run %s: the start log's record is run %s's", id, st.ID)
	}
	return st, err
}

// RestoreLogged writes b, run st's record as the start log holds it, in
// place of its state.json, durably (see StartLog).
func (s *Store) RestoreLogged(st *State, b []byte) error {
	err := durable.Replace(s.Run(st.ID).State(), b, RunPerm(st.OwnerUID), durable.Durable{File: durable.FlushRecord, Dir: durable.FlushRecordDir})
	if err != nil {
		return fmt.Errorf("run %s: %w", st.ID, err)
	}
	return nil
}
