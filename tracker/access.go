package tracker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/tendhq/tend/tracker/layout"
)

// CheckAccess returns every way the root at root breaks the rules that
// keep a watcher running as uid from being used by anyone else (see "Who
// may do what" in docs/protocol.md), each with the path it concerns:
//
//   - the root and every directory above it are owned by uid or root, and
//     writable by nobody else unless sticky (as /tmp is), so that nobody
//     else can put another directory in its place;
//   - nothing at the root's top level is a symbolic link, and everything
//     there is owned by uid or root and writable by nobody else, but
//     spool/, which may be writable by others if uid is root's and it is
//     sticky (so that nobody can rename or remove another's request);
//   - the key of the records' seals is readable by nobody else.
//
// A root that does not exist has no problems: it is made as it should be.
func CheckAccess(root string, uid int) []Problem {
	abs, err := filepath.Abs(root)
	if err != nil {
		return []Problem{{root, err.Error()}}
	}
	var problems []Problem
	for dir := filepath.Dir(abs); ; dir = filepath.Dir(dir) {
		if p := checkAbove(dir, uid); p != nil {
			problems = append(problems, *p)
		}
		if dir == filepath.Dir(dir) {
			break
		}
	}
	var st unix.Stat_t
	if err := unix.Lstat(abs, &st); errors.Is(err, unix.ENOENT) {
		return problems
	} else if err != nil {
		return append(problems, Problem{abs, err.Error()})
	}
	if p := checkEntry(abs, &st, uid, false); p != nil {
		problems = append(problems, *p)
	}
	ents, err := os.ReadDir(abs)
	if err != nil {
		return append(problems, Problem{abs, err.Error()})
	}
	for _, e := range ents {
		path := filepath.Join(abs, e.Name())
		if err := unix.Lstat(path, &st); err != nil {
			continue // gone meanwhile
		}
		if p := checkEntry(path, &st, uid, path == layout.Root(abs).Spool()); p != nil {
			problems = append(problems, *p)
		}
		if path == layout.Root(abs).RecordKey() && st.Mode&0o077 != 0 {
			problems = append(problems, Problem{path, fmt.Sprintf("readable by others (mode %04o): only the watcher's user may read the key", st.Mode&0o7777)})
		}
	}
	return problems
}

// ErrUnsafe means a root breaks the access rules (see CheckAccess).
var ErrUnsafe = errors.New("not safe")

// CheckSafe returns an error satisfying errors.Is(err, ErrUnsafe) that
// names every problem CheckAccess finds for a watcher running as uid, one
// a line, or nil if there is none.
func CheckSafe(root string, uid int) error {
	problems := CheckAccess(root, uid)
	if len(problems) == 0 {
		return nil
	}
	var b strings.Builder
	for _, p := range problems {
		b.WriteString("\n  " + p.String())
	}
	return fmt.Errorf("%s is %w for a watcher running as uid %d:%s", root, ErrUnsafe, uid, b.String())
}

// checkAbove checks a directory above a root: a path through it must not
// be changed by anyone but uid and root. It follows links, as the path to
// the root does.
func checkAbove(dir string, uid int) *Problem {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return &Problem{dir, err.Error()}
	}
	if owner := int(st.Uid); owner != uid && owner != 0 {
		return &Problem{dir, fmt.Sprintf("a directory above the root is owned by uid %d: that user could put another root in its place", owner)}
	}
	if st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0 {
		return &Problem{dir, fmt.Sprintf("a directory above the root is writable by others and not sticky (mode %04o): they could put another root in its place", st.Mode&0o7777)}
	}
	return nil
}

// checkEntry checks the root itself or an entry at its top level. spool
// may be writable by others if it is sticky.
func checkEntry(path string, st *unix.Stat_t, uid int, spool bool) *Problem {
	switch {
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		return &Problem{path, "a symbolic link: tend follows no link in a root"}
	case int(st.Uid) != uid && st.Uid != 0:
		return &Problem{path, fmt.Sprintf("owned by uid %d, not by the watcher's user (uid %d) or root", st.Uid, uid)}
	case st.Mode&0o022 == 0:
		return nil
	case spool && uid != 0:
		return &Problem{path, fmt.Sprintf("writable by others (mode %04o): only a watcher running as root may share its spool (tend up --shared)", st.Mode&0o7777)}
	case spool && st.Mode&unix.S_IFMT == unix.S_IFDIR && st.Mode&unix.S_ISVTX != 0:
		return nil
	case spool:
		return &Problem{path, fmt.Sprintf("writable by others but not sticky (mode %04o): they could rename or remove each other's requests (tend up --shared sets it up)", st.Mode&0o7777)}
	}
	return &Problem{path, fmt.Sprintf("writable by others (mode %04o): only spool/ may be, with the sticky bit", st.Mode&0o7777)}
}

// Share sets the root at root up to be shared by the members of group
// gid, as CheckAccess accepts it: the root and runs/, outcomes/ and
// rejected/ become readable by the group (and the watcher's alone to
// write), spool/ writable by the group and sticky, so that nobody can
// rename or remove another's request, and the files clients read
// (watcher.json, the PID files, the history, the queue) readable; the
// locks and the key stay the watcher's alone, and so does each run's
// directory (those made before are closed to others now). The caller
// must be root, and must make the root and its directories first.
func Share(root string, gid int) error {
	r := layout.Root(root)
	for _, d := range []struct {
		path string
		mode uint32
	}{{root, 0o750}, {r.Spool(), 0o1770}, {r.Runs(), 0o750}, {r.Outcomes(), 0o750}, {r.Rejected(), 0o750}} {
		path := d.path
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return &os.PathError{Op: "open", Path: path, Err: err}
		}
		err = unix.Fchown(fd, 0, gid)
		if err == nil {
			err = unix.Fchmod(fd, d.mode)
		}
		unix.Close(fd)
		if err != nil {
			return &os.PathError{Op: "chmod", Path: path, Err: err}
		}
	}
	for path, mode := range map[string]uint32{
		r.WatcherPID(): 0o644, r.WatcherInfo(): 0o644, r.Unsynced(): 0o644, r.KeeperPID(): 0o644, r.History(): 0o644, r.Queue(): 0o644,
		r.WatcherLock(): 0o600, r.KeeperLock(): 0o600, r.HistoryLock(): 0o600, r.UpLock(): 0o600, r.WatcherLog(): 0o600, r.RecordKey(): 0o600,
	} {
		if err := chmodRegular(path, mode); err != nil {
			return err
		}
	}
	runs, err := os.ReadDir(r.Runs())
	if err != nil {
		return err
	}
	for _, e := range runs {
		if e.IsDir() {
			if err := chmodDir(string(r.Run(e.Name())), 0o700); err != nil {
				return err
			}
		}
	}
	return nil
}

// chmodRegular gives the regular file at path mode, if there is one.
func chmodRegular(path string, mode uint32) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil
	}
	if err := unix.Fchmod(fd, mode); err != nil {
		return &os.PathError{Op: "chmod", Path: path, Err: err}
	}
	return nil
}

// chmodDir gives the directory at path mode, never through a link.
func chmodDir(path string, mode uint32) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	if err := unix.Fchmod(fd, mode); err != nil {
		return &os.PathError{Op: "chmod", Path: path, Err: err}
	}
	return nil
}

// CheckWritable returns an error naming root if its file system is
// mounted read-only: a watcher writes there as it starts (its pid files,
// its log, the start log), and would stop on whichever came first, with
// an error that named that file and not why.
func CheckWritable(root string) error {
	var fs unix.Statfs_t
	if err := unix.Statfs(root, &fs); err == nil && fs.Flags&unix.ST_RDONLY != 0 {
		return fmt.Errorf("%s: its file system is read-only: no watcher can start on it until it is writable again", root)
	}
	return nil
}
