package durable

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// Replace replaces the file at path with data, atomically and durably:
// readers see the old content or the new, never a mix, and once Replace
// returns the new content survives a crash or a power loss (the file and
// its directory are fsynced, as d names them). The new file has perm (see
// Perm).
//
// It is what every record of a run is written with, so it is lean: raw
// system calls, where os.File registers every file with the runtime's
// poller (four fcntl and an epoll_ctl a file).
func Replace(path string, data []byte, perm Perm, d Durable) error {
	return ReplaceAll([]string{path}, [][]byte{data}, []Perm{perm}, nil, d)[0]
}

// A Perm says who may read a file tend writes. Mode, if not zero, is its
// mode (else a new file gets 0600, and one that replaces another keeps
// that one's mode); Owner, if above zero, is the user it is given, before
// it has its name: a file in a directory that belongs to another user must
// never be the watcher's, or that user could move it where it would be
// taken for a request of the watcher's (see docs/protocol.md, "Who may do
// what").
type Perm struct {
	Mode  uint32
	Owner int
}

// ReplaceUnsynced is Replace without the fsyncs, with perm: atomic for
// readers and across a crash of the process, but a power loss may lose the
// change (or leave the file empty). For files that are rebuilt or answered
// again after a restart.
func ReplaceUnsynced(path string, data []byte, perm Perm) error {
	return replaceUnsynced(path, data, perm, false)
}

// ReplaceStarted is ReplaceUnsynced with the new file's write-back started
// before its rename (StartWriteBack): where a file system commits a new
// file's data before its name (procfs.OrdersNewData), a power loss then
// leaves the old file or the new one, whole.
func ReplaceStarted(path string, data []byte, perm Perm) error {
	return replaceUnsynced(path, data, perm, true)
}

func replaceUnsynced(path string, data []byte, perm Perm, startWriteBack bool) error {
	fd, tmp, err := CreateTemp(path, perm)
	if err != nil {
		return err
	}
	err = WriteAll(fd, data)
	if err == nil && startWriteBack {
		StartWriteBack(fd)
	}
	if err == nil && perm.Mode == 0 {
		err = keepMode(fd, path)
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Rename(tmp, path)
	}
	if err != nil {
		unix.Unlink(tmp)
		return fmt.Errorf("%s: replacing: %w", path, err)
	}
	return nil
}

// ReplaceAll replaces several files as Replace does each, with one round
// of fsyncs: every new file is written first, then synced and renamed,
// then each directory synced, with up to syncsInFlight fsyncs at once (a
// disk serves several nearly as fast as one), the files' as d.File and the
// directories' as d.Dir. With d.RenameNew, a file whose path does not
// exist yet is renamed in as soon as it is written (renameat2's
// RENAME_NOREPLACE decides it, atomically), and synced after; so is a
// file over one that exists if early[i] says so (see Durable.RenameNew).
// errs[i] is paths[i]'s error; a file whose error is nil is replaced and
// durable. perms, if not nil, holds each file's Perm; early, if not nil,
// which files may replace theirs early.
func ReplaceAll(paths []string, data [][]byte, perms []Perm, early []bool, d Durable) (errs []error) {
	errs = make([]error, len(paths))
	fds := make([]int, len(paths))
	tmps := make([]string, len(paths))
	fail := func(i int, err error) {
		if fds[i] >= 0 {
			unix.Close(fds[i])
			fds[i] = -1
		}
		if tmps[i] != "" {
			unix.Unlink(tmps[i])
		}
		errs[i] = fmt.Errorf("%s: replacing: %w", paths[i], err)
	}
	for i, path := range paths {
		var perm Perm
		if perms != nil {
			perm = perms[i]
		}
		var err error
		if fds[i], tmps[i], err = CreateTemp(path, perm); err != nil {
			fds[i], tmps[i] = -1, ""
			errs[i] = err
			continue
		}
		if err := WriteAll(fds[i], data[i]); err != nil {
			fail(i, err)
			continue
		}
		StartWriteBack(fds[i])
		if perm.Mode == 0 {
			if err := keepMode(fds[i], path); err != nil {
				fail(i, err)
				continue
			}
		}
		if d.RenameNew && renameEarly(tmps[i], path, early != nil && early[i]) {
			tmps[i] = ""
		}
	}
	inParallel(len(paths), func(i int) {
		if errs[i] != nil {
			return
		}
		err := d.File.Fsync(fds[i])
		if cerr := unix.Close(fds[i]); err == nil {
			err = cerr
		}
		fds[i] = -1
		if err == nil && tmps[i] != "" {
			err = unix.Rename(tmps[i], paths[i])
		}
		if err != nil {
			fail(i, err)
		}
	})
	var dirs []string
	slot := make(map[string]int) // the index in dirs of each directory
	for i, path := range paths {
		if _, seen := slot[filepath.Dir(path)]; errs[i] == nil && !seen {
			slot[filepath.Dir(path)] = len(dirs)
			dirs = append(dirs, filepath.Dir(path))
		}
	}
	dirErrs := make([]error, len(dirs))
	inParallel(len(dirs), func(i int) { dirErrs[i] = d.Dir.SyncDir(dirs[i]) })
	for i, path := range paths {
		if errs[i] == nil {
			errs[i] = dirErrs[slot[filepath.Dir(path)]]
		}
	}
	return errs
}

// renameEarly renames tmp to path before tmp is synced, if path does not
// exist yet or over is set, and reports whether it did.
func renameEarly(tmp, path string, over bool) bool {
	if over {
		return unix.Rename(tmp, path) == nil
	}
	return unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, path, unix.RENAME_NOREPLACE) == nil
}

// StartWriteBack starts writing fd's data, before it is synced: a
// journaled ext4 (or XFS) allocates its blocks then, in the transaction
// that is running, so that the first of a batch's fsyncs commits every
// file's data, and the others find theirs committed. Without it each
// fsync allocated its file's blocks itself, as it started, and the
// fsyncs that did not start together (a goroutine waits for a P while
// others are in fsync) each waited for a commit of their own: a batch of
// 32 records took 20 ms on the bench's journaled ext4, 8-9 ms with it,
// 200 records 70 ms and 38-41 (performance.md, round 17). It is a hint:
// an error shows again in the fsync.
func StartWriteBack(fd int) {
	unix.SyncFileRange(fd, 0, 0, unix.SYNC_FILE_RANGE_WRITE)
}

// syncsInFlight is how many fsyncs ReplaceAll keeps going at once: a
// whole batch's (watcher.flushEvery records, and their directories). A
// journaled ext4 commits the fsyncs that wait together in one journal
// transaction, so more in flight is fewer commits: a batch of 32 records
// took 12-13 ms with 64 in flight against 20-26 ms with 8 (performance.md,
// round 15); an unjournaled disk and tmpfs are no slower for it.
const syncsInFlight = 64

// inParallel calls f(0) ... f(n-1), syncsInFlight at a time, and returns
// when all have returned. Each call must touch only its own index's data.
func inParallel(n int, f func(i int)) {
	if n == 1 {
		f(0)
		return
	}
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(n, syncsInFlight) {
		wg.Go(func() {
			for i := range next {
				f(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// TempDigits is the most digits a temporary name adds to the name of the
// file it replaces: a name tend writes must leave room for them.
const TempDigits = 10 // a uint32

// CreateTemp creates a file beside path, named path followed by digits
// (the names Leftover knows as those of an interrupted write), with
// perm. A file given to another user is theirs before anything is written
// to it.
func CreateTemp(path string, perm Perm) (fd int, tmp string, err error) {
	mode := cmp.Or(perm.Mode, 0o600)
	for range 100 {
		tmp = path + strconv.FormatUint(uint64(rand.Uint32()), 10)
		fd, err = unix.Open(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
		if !errors.Is(err, unix.EEXIST) {
			break
		}
	}
	if err != nil {
		return -1, "", &os.PathError{Op: "create", Path: tmp, Err: err}
	}
	if perm.Mode != 0 {
		err = unix.Fchmod(fd, mode) // the umask may have taken bits it asks for
	}
	if err == nil && perm.Owner > 0 {
		err = unix.Fchown(fd, perm.Owner, -1)
	}
	if err != nil {
		unix.Close(fd)
		unix.Unlink(tmp)
		return -1, "", &os.PathError{Op: "create", Path: tmp, Err: err}
	}
	return fd, tmp, nil
}

// tempName matches what an interrupted atomic write leaves: createTemp's
// "<name><digits>" and the CLI's hidden ".<name>.<random>.tmp".
var tempName = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^(state\.json|startlog|order|cut|watcher\.json|watcher\.pid|queue|list\.cache|config\.json|[^.].*\.(start|cancel|delete|label|note|signal|restart|pause|resume))\d+$|^\..*\.tmp$|^\.record-`)
}) // compiled when first needed (fsck, recovery), not at every start-up

// Leftover reports whether name is that of a temporary file an
// interrupted write leaves behind (in a root, a run's directory or
// outcomes/): nothing needs it.
func Leftover(name string) bool { return tempName().MatchString(name) }

// WriteAll writes data to fd whole, through short and interrupted writes,
// with raw system calls: what records and history appends are written
// with.
func WriteAll(fd int, data []byte) error {
	for len(data) > 0 {
		n, err := unix.Write(fd, data)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

// keepMode gives the new file behind fd the permission bits of the file at
// path, if there is one and they differ from 0600.
func keepMode(fd int, path string) error {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return nil // nothing to keep
	}
	if mode := st.Mode & 0o777; mode != 0o600 { // never setuid, setgid or sticky
		return unix.Fchmod(fd, mode)
	}
	return nil
}
