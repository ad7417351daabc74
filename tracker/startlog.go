package tracker

import (
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"

	"github.com/tendhq/tend/tracker/durable"
	"github.com/tendhq/tend/tracker/layout"
	"golang.org/x/sys/unix"
)

// A StartLog is a root's start log (startlog): a file of a fixed size,
// every block of it written when it is made and only overwritten after,
// so that a synced write to it changes no metadata. On a journaled ext4
// its fdatasync then waits for the data's own write and a cache flush,
// and for no journal commit, which a new record, a new directory or a
// history line's append each need (docs/performance.md, rounds 29 and
// 34).
//
// The watcher writes there, and syncs, the changes of runs it would
// otherwise flush with a commit (a start, with the request it was
// claimed from; an end): each record as written and its history lines.
// The files themselves are written unsynced, and synced later, off the
// runs' path. A power loss in between leaves the changes in the log,
// which the next watcher puts back (ReplayStartLog) before it reads a
// record. Only the watcher (and tend fsck --repair) opens it.
type StartLog struct {
	// The log is open only while it is read or written: a file open
	// for writing keeps its file system from being remounted read-only
	// (hardening/remount.txtar), so each write opens it again, as the
	// file it was (dev, ino).
	dev, ino uint64
	path     string
	slots    [startLogSlots]uint64 // each slot's entry's seq; 0 for none
	next     int                   // the slot the next entry goes to
	seq      uint64                // the last entry's
	applied  uint64                // every entry up to this one is applied
}

// A LogEntry is a change of a run as the start log keeps it.
type LogEntry struct {
	// Seq orders the entries; Applied marks those before it applied.
	Seq uint64 `json:"-"`
	// ID is the run's.
	ID string `json:"id"`
	// Record is its state.json as written.
	Record []byte `json:"record"`
	// Name is, for a run's first launch, the name in the spool its
	// request was claimed from, and Request what it held:
	// runs/<id>/request. Both are empty for any other change.
	Name    string `json:"name"`
	Request []byte `json:"request"`
	// Events are the change's history lines, in order.
	Events []Event `json:"events"`
}

// The start log's shape: a header block, then startLogSlots slots of
// startLogSlot bytes, an entry each.
const (
	startLogHeader = 4096
	startLogSlot   = 16 << 10
	startLogSlots  = 64
	startLogSize   = startLogHeader + startLogSlots*startLogSlot
	// startLogEntryHead is a slot's head: magic, seq, applied, length,
	// checksum.
	startLogEntryHead = 8 + 8 + 8 + 4 + 4
)

var (
	startLogMagic   = [8]byte{'t', 'e', 'n', 'd', 'l', 'o', 'g', '1'}
	startEntryMagic = [8]byte{'t', 'e', 'n', 'd', 'r', 'u', 'n', '1'}
	castagnoli      = crc32.MakeTable(crc32.Castagnoli)
)

// ErrStartLogNotMade is OpenStartLog's error where there was no log, or
// none to read, and one could not be made (a full disk): there is
// nothing to put back, and starts are synced the usual way.
var ErrStartLogNotMade = errors.New("could not make the start log")

// Errors from StartLog.Write: the entries were not written, and the
// caller writes the launches the usual way.
var (
	ErrStartLogFull  = errors.New("start log: no free slot")
	ErrEntryTooLarge = errors.New("start log: entry larger than a slot")
)

// OpenStartLog opens root's start log, making it if it is missing, and
// returns it with the entries it holds that were not applied, in order.
// A log that is not the watcher's own regular file of the log's size
// (made by an older tend, or by someone else) is renamed aside to
// startlog.bad and made anew; so is one that cannot be read.
func OpenStartLog(root string) (*StartLog, []LogEntry, error) {
	path := layout.Root(root).StartLog()
	l := &StartLog{path: path}
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if errors.Is(err, unix.ENOENT) {
		return l, nil, l.make()
	}
	if err != nil && !errors.Is(err, unix.ELOOP) {
		return nil, nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err == nil {
		err = unix.Fstat(fd, &st)
	}
	if err == nil {
		err = checkStartLog(root, &st)
	}
	var pending []LogEntry
	if err == nil {
		l.dev, l.ino = st.Dev, st.Ino
		pending, err = l.read(fd)
	}
	if fd >= 0 {
		unix.Close(fd)
	}
	if err != nil {
		if rerr := os.Rename(path, path+".bad"); rerr != nil {
			return nil, nil, fmt.Errorf("%s: %v; moving it aside: %w", path, err, rerr)
		}
		return l, nil, l.make()
	}
	return l, pending, nil
}

// UnverifiedSuffix ends the name a start log whose records do not
// verify is moved aside to (SetAsideUnverified), with its reason in a
// file of that name and ".error" beside it.
const UnverifiedSuffix = ".unverified"

// SetAsideUnverified moves l's file aside, to startlog.unverified (or
// startlog.unverified.N, where that is taken), with why in a file of
// that name and ".error", and makes the log anew, if a record among
// entries, its pending ones, does not verify with s's key: sealed with a
// key the root no longer has (record.key lost, and made anew), the
// changes cannot be told from forged ones, and are not put back; the
// runs' records, sealed with that key too, are not trusted until tend
// fsck --repair rebuilds them from the history, as any record sealed
// with a lost key. Left in place, the log would stop every watcher from
// starting. It returns the path the log was moved to and why, or ""
// where every record verifies.
func SetAsideUnverified(s *Store, l *StartLog, entries []LogEntry) (aside, why string, err error) {
	id, ok := unverified(s, entries)
	if !ok {
		return "", "", nil
	}
	why = fmt.Sprintf("run %s's record in it does not verify with %s (the key was lost and made anew, or replaced): the %d changes it held are not put back; the runs' records, sealed with that key too, are not trusted until tend fsck --repair rebuilds them from the history",
		id, s.root.RecordKey(), len(entries))
	aside, err = l.setAside(why)
	return aside, why, err
}

// unverified returns the ID of the first run among entries whose record
// does not verify with s's key.
func unverified(s *Store, entries []LogEntry) (string, bool) {
	for _, e := range entries {
		if _, err := s.ParseLogged(e.ID, e.Record); errors.Is(err, ErrUnsealed) {
			return e.ID, true
		}
	}
	return "", false
}

// setAside renames the log to a free name ending UnverifiedSuffix (or
// that and .N), writes why beside it, and makes the log anew.
func (l *StartLog) setAside(why string) (string, error) {
	aside := l.path + UnverifiedSuffix
	for n := 2; ; n++ {
		err := unix.Renameat2(unix.AT_FDCWD, l.path, unix.AT_FDCWD, aside, unix.RENAME_NOREPLACE)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EEXIST) || n > 1000 {
			return "", &os.LinkError{Op: "rename", Old: l.path, New: aside, Err: err}
		}
		aside = fmt.Sprintf("%s%s.%d", l.path, UnverifiedSuffix, n)
	}
	if err := durable.Replace(aside+".error", []byte(why+"\n"), durable.Perm{Mode: 0o600}, durable.Durable{File: durable.FlushReason, Dir: durable.FlushReasonDir}); err != nil {
		return aside, err
	}
	return aside, l.make() // which syncs the root, and so the rename
}

// use opens the log, as the file it was opened as, for f, and closes it.
func (l *StartLog) use(f func(fd int) error) error {
	fd, err := unix.Open(l.path, unix.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: l.path, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &os.PathError{Op: "fstat", Path: l.path, Err: err}
	}
	if st.Dev != l.dev || st.Ino != l.ino {
		return fmt.Errorf("%s: replaced since the watcher made or read it", l.path)
	}
	return f(fd)
}

// checkStartLog returns why st, root's start log's, is not one: a
// regular file of the log's size, with one link, of the user's who
// reads it or of the root's owner (the watcher's user, where root reads
// it), whom alone the root lets make files in it.
func checkStartLog(root string, st *unix.Stat_t) error {
	var rootSt unix.Stat_t
	if err := unix.Stat(root, &rootSt); err != nil {
		return &os.PathError{Op: "stat", Path: root, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || (int(st.Uid) != os.Geteuid() && st.Uid != rootSt.Uid) || st.Nlink != 1 || st.Size != startLogSize {
		return fmt.Errorf("not the watcher's own start log (mode %o, uid %d, %d links, %d bytes)", st.Mode, st.Uid, st.Nlink, st.Size)
	}
	return nil
}

// PendingLaunches returns how many changes root's start log holds that
// are not applied (see StartLog): 0 where there is none. It only reads:
// for tend fsck and tend status.
func PendingLaunches(root string) (int, error) {
	entries, err := pendingEntries(root)
	return len(entries), err
}

// pendingEntries returns the changes root's start log holds that are not
// applied, reading it only.
func pendingEntries(root string) ([]LogEntry, error) {
	path := layout.Root(root).StartLog()
	fd, st, err := durable.OpenRegular(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	if err := checkStartLog(root, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	l := &StartLog{path: path}
	return l.read(fd)
}

// make writes the log anew beside its path, zeros in every block, syncs
// it and gives it its name: its blocks are written, so that its entries
// are overwrites.
func (l *StartLog) make() error {
	fd, tmp, err := durable.CreateTemp(l.path, durable.Perm{Mode: 0o600})
	if err != nil {
		return err
	}
	buf := make([]byte, startLogSize)
	copy(buf, l.header(0))
	err = durable.WriteAll(fd, buf)
	if err == nil {
		err = durable.FlushStartLog.Fsync(fd)
	}
	if err == nil {
		err = unix.Rename(tmp, l.path)
	}
	if err == nil {
		err = durable.FlushRootDirs.SyncDir(filepath.Dir(l.path))
	}
	var st unix.Stat_t
	if err == nil {
		err = unix.Fstat(fd, &st)
	}
	unix.Close(fd)
	if err != nil {
		unix.Unlink(tmp)
		return fmt.Errorf("%s: %w: %w", l.path, ErrStartLogNotMade, err)
	}
	l.dev, l.ino = st.Dev, st.Ino
	return nil
}

// header returns the log's header saying every entry up to applied is.
func (l *StartLog) header(applied uint64) []byte {
	b := make([]byte, 20)
	copy(b, startLogMagic[:])
	binary.LittleEndian.PutUint64(b[8:], applied)
	binary.LittleEndian.PutUint32(b[16:], crc32.Checksum(b[:16], castagnoli))
	return b
}

// read reads the whole log from fd, and returns the entries not applied. The
// header's mark is the last applied written with a flush; each entry
// also carries the mark as it was when written, so a torn header costs
// at most the entries after the last one written (which applying again
// leaves as they are: see the watcher's replay).
func (l *StartLog) read(fd int) ([]LogEntry, error) {
	buf := make([]byte, startLogSize)
	if _, err := unix.Pread(fd, buf, 0); err != nil {
		return nil, &os.PathError{Op: "read", Path: l.path, Err: err}
	}
	if [8]byte(buf[:8]) == startLogMagic && binary.LittleEndian.Uint32(buf[16:]) == crc32.Checksum(buf[:16], castagnoli) {
		l.applied = binary.LittleEndian.Uint64(buf[8:])
	}
	var entries []LogEntry
	for i := range startLogSlots {
		slot := buf[startLogHeader+i*startLogSlot:][:startLogSlot]
		e, applied, ok := parseEntry(slot)
		if !ok {
			continue
		}
		l.slots[i] = e.Seq
		l.applied = max(l.applied, applied)
		if e.Seq > l.seq {
			l.seq, l.next = e.Seq, (i+1)%startLogSlots
		}
		entries = append(entries, e)
	}
	entries = slices.DeleteFunc(entries, func(e LogEntry) bool { return e.Seq <= l.applied })
	slices.SortFunc(entries, func(a, b LogEntry) int { return cmp.Compare(a.Seq, b.Seq) })
	return entries, nil
}

// parseEntry returns the entry in slot, and the mark written with it; ok
// is false for a slot with none, or one a crash tore.
func parseEntry(slot []byte) (e LogEntry, applied uint64, ok bool) {
	if [8]byte(slot[:8]) != startEntryMagic {
		return e, 0, false
	}
	n := binary.LittleEndian.Uint32(slot[24:])
	if n > startLogSlot-startLogEntryHead {
		return e, 0, false
	}
	sum := crc32.Checksum(slot[8:28], castagnoli)
	sum = crc32.Update(sum, castagnoli, slot[startLogEntryHead:][:n])
	if sum != binary.LittleEndian.Uint32(slot[28:]) {
		return e, 0, false
	}
	if json.Unmarshal(slot[startLogEntryHead:][:n], &e) != nil {
		return e, 0, false
	}
	e.Seq = binary.LittleEndian.Uint64(slot[8:])
	return e, binary.LittleEndian.Uint64(slot[16:]), e.Seq > 0
}

// Write writes entries into free slots, and syncs the log: once it
// returns nil they survive a power loss. It gives each its Seq. With
// ErrStartLogFull or ErrEntryTooLarge nothing was written.
func (l *StartLog) Write(entries []LogEntry) error {
	if len(entries) > l.Free() {
		return ErrStartLogFull // (Free is at most its slots: its last entries never take its first's)
	}
	slots := make([][]byte, len(entries))
	for i := range entries {
		payload, err := json.Marshal(&entries[i])
		if err != nil {
			return fmt.Errorf("start log: run %s: %w", entries[i].ID, err)
		}
		if len(payload) > startLogSlot-startLogEntryHead {
			return fmt.Errorf("run %s: %w", entries[i].ID, ErrEntryTooLarge)
		}
		slots[i] = payload
	}
	return l.use(func(fd int) error { return l.write(fd, slots, entries) })
}

// write writes the payloads of entries, slots, and syncs fd, the log.
func (l *StartLog) write(fd int, slots [][]byte, entries []LogEntry) error {
	for i, payload := range slots {
		seq := l.seq + 1
		b := make([]byte, startLogEntryHead+len(payload))
		copy(b, startEntryMagic[:])
		binary.LittleEndian.PutUint64(b[8:], seq)
		binary.LittleEndian.PutUint64(b[16:], l.applied)
		binary.LittleEndian.PutUint32(b[24:], uint32(len(payload)))
		copy(b[startLogEntryHead:], payload)
		sum := crc32.Checksum(b[8:28], castagnoli)
		binary.LittleEndian.PutUint32(b[28:], crc32.Update(sum, castagnoli, payload))
		if _, err := unix.Pwrite(fd, b, int64(startLogHeader+l.next*startLogSlot)); err != nil {
			return &os.PathError{Op: "write", Path: l.path, Err: err}
		}
		l.slots[l.next], l.seq, l.next = seq, seq, (l.next+1)%startLogSlots
		entries[i].Seq = seq
	}
	return durable.FlushStartLog.Fdatasync(fd)
}

// Free returns how many entries the log can take now.
func (l *StartLog) Free() int {
	n := 0
	for i := range startLogSlots {
		if l.slots[(l.next+i)%startLogSlots] > l.applied {
			break
		}
		n++
	}
	return n
}

// Seq returns the last entry written's Seq.
func (l *StartLog) Seq() uint64 { return l.seq }

// Applied marks every entry up to seq applied: its files and history
// lines are durable where they belong. The mark is not flushed: lost, it
// costs the next watcher a replay that finds each launch's files as they
// are, or a later line in its run's history (it went on, or was deleted:
// see ReplayStartLog), and leaves them so. Each entry written later
// carries it too.
func (l *StartLog) Applied(seq uint64) error {
	err := l.use(func(fd int) error {
		_, err := unix.Pwrite(fd, l.header(seq), 0)
		return err
	})
	if err != nil {
		return fmt.Errorf("%s: marking: %w", l.path, err)
	}
	l.applied = max(l.applied, seq)
	return nil
}
