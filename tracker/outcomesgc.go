package tracker

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker/layout"
	"golang.org/x/sys/unix"
)

// KeepTaggedAnswers is how long the answer to a tagged request (or a
// selector) is kept in outcomes/ for its client, which removes it once
// read where it may: a client that may not (a member of a shared root)
// or that died first leaves it, and its name is used once.
const KeepTaggedAnswers = time.Hour

// answerFloor is the age below which ExpireOutcomes removes no answer,
// whatever the cutoff: its client may not have read it yet.
const answerFloor = time.Minute

// TaggedAnswer reports whether an answer named name answers a tagged
// request, or a selector (tagged too, read by its client alone).
func TaggedAnswer(name string) bool {
	if _, ok := spool.ParseSelectorName(name); ok {
		return true
	}
	n, err := spool.ParseName(name)
	return err == nil && n.Tag != ""
}

// ExpireOutcomes removes the answers in root's outcomes/ (and in the
// users' directories of answers in it, outcomes/<uid>/) that the
// watcher's own sweep removes: those of tagged requests and selectors
// written before taggedCutoff, and, unless runlessCutoff is zero, the
// untagged ones written before it whose ID names no run (no directory in
// runs/: a rejected start's, a not_found, a deleted run's other
// requests). None written in the last minute goes, whatever the cutoffs.
// It returns how many it removed (with dryRun, would remove).
//
// Unlike the watcher, which sweeps between its answers, it may run
// beside a watcher that writes an answer again under a name it judged
// old (a new start of a run of that ID): so an answer is renamed aside
// first, and removed only if what was moved is the very file judged old
// (its inode and modification time); anything else is a new answer, put
// back at once unless a newer one took the name meanwhile. Its client
// may find the name empty for that moment, and then finds it there.
func ExpireOutcomes(root string, taggedCutoff, runlessCutoff time.Time, dryRun bool) (int, error) {
	now := time.Now()
	floor := now.Add(-answerFloor)
	s := answerSweep{
		root: root, tagged: earliest(taggedCutoff, floor), dryRun: dryRun,
		aside: fmt.Sprintf(".gc-%d", os.Getpid()), now: now,
	}
	if !runlessCutoff.IsZero() {
		s.runless = earliest(runlessCutoff, floor)
	}
	err := s.run()
	return s.n, err
}

// run sweeps root's outcomes/.
func (s *answerSweep) run() error {
	dir := layout.Root(s.root).Outcomes()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil // cleared: made again with the next answer
	}
	if err != nil {
		return &os.PathError{Op: "open", Path: dir, Err: err}
	}
	f := os.NewFile(uintptr(fd), dir)
	defer f.Close()
	return s.sweep(f, true)
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// answerSweep is one ExpireOutcomes.
type answerSweep struct {
	root            string
	tagged, runless time.Time // zero runless: none of those
	dryRun          bool
	now             time.Time // when the sweep began
	aside           string    // the name an answer is renamed to, to be checked
	n               int
	// judged, if set (by tests), is called once an answer is judged old,
	// before it is renamed aside: where a watcher may write it again.
	judged func(dir, name string)
}

// sweep removes the old answers in directory d, and with users those in
// its users' directories (named by a uid above 0), each opened from d
// without following a link: the directory listed is the one swept.
func (s *answerSweep) sweep(d *os.File, users bool) error {
	fd, dir := int(d.Fd()), d.Name()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return err
	}
	var errs []error
	for _, name := range names {
		var st unix.Stat_t
		if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			continue
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			if uid, err := strconv.Atoi(name); users && err == nil && uid > 0 && strconv.Itoa(uid) == name {
				errs = append(errs, s.sweepUser(d, name))
			}
		case unix.S_IFREG:
			if strings.HasPrefix(name, ".gc-") {
				errs = append(errs, s.leftover(fd, dir, name, &st))
			} else if s.old(name, &st) {
				errs = append(errs, s.remove(fd, dir, name, &st))
			}
		}
	}
	return errors.Join(errs...)
}

// sweepUser sweeps the directory of answers in d of the user named name.
func (s *answerSweep) sweepUser(d *os.File, name string) error {
	fd, err := unix.Openat(int(d.Fd()), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil // gone, or not a directory any more
	}
	u := os.NewFile(uintptr(fd), d.Name()+"/"+name)
	defer u.Close()
	return s.sweep(u, false)
}

// old reports whether answer name, whose file is st, is one to remove:
// written before its cutoff, and no more awaited.
func (s *answerSweep) old(name string, st *unix.Stat_t) bool {
	written := time.Unix(st.Mtim.Unix())
	if TaggedAnswer(name) {
		return written.Before(s.tagged)
	}
	if s.runless.IsZero() || !written.Before(s.runless) {
		return false
	}
	n, err := spool.ParseName(name)
	if err != nil || n.Tag != "" {
		return false
	}
	_, err = os.Lstat(string(layout.Root(s.root).Run(n.ID)))
	return errors.Is(err, os.ErrNotExist) // a run's (or cannot tell): its deletion removes it
}

// remove removes answer name, judged old as st, unless it was replaced
// since (see ExpireOutcomes).
func (s *answerSweep) remove(fd int, dir, name string, judged *unix.Stat_t) error {
	if s.dryRun {
		s.n++
		return nil
	}
	if s.judged != nil {
		s.judged(dir, name)
	}
	if err := unix.Renameat(fd, name, fd, s.aside); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil // the watcher's sweep took it first
		}
		return &os.PathError{Op: "rename", Path: dir + "/" + name, Err: err}
	}
	var moved unix.Stat_t
	err := unix.Fstatat(fd, s.aside, &moved, unix.AT_SYMLINK_NOFOLLOW)
	if err == nil && moved.Dev == judged.Dev && moved.Ino == judged.Ino && moved.Mtim == judged.Mtim {
		if err := unix.Unlinkat(fd, s.aside, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return &os.PathError{Op: "remove", Path: dir + "/" + s.aside, Err: err}
		}
		s.n++
		return nil
	}
	// A new answer took the name between the look and the rename: back
	// where its client reads it, unless a newer one is there already.
	if err := putBack(fd, s.aside, name); err != nil {
		unix.Unlinkat(fd, s.aside, 0)
		if !errors.Is(err, unix.EEXIST) {
			return &os.PathError{Op: "rename", Path: dir + "/" + name, Err: err}
		}
	}
	return nil
}

// putBack renames from to to, in the directory open as fd, unless to is
// there (EEXIST). Where the file system cannot rename without replacing,
// it links and unlinks.
func putBack(fd int, from, to string) error {
	err := unix.Renameat2(fd, from, fd, to, unix.RENAME_NOREPLACE)
	if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOSYS) {
		return err
	}
	if err := unix.Linkat(fd, from, fd, to, 0); err != nil {
		return err
	}
	return unix.Unlinkat(fd, from, 0)
}

// leftover removes a file an ExpireOutcomes that was stopped between its
// rename and its removal left aside (another's under way was renamed in
// the last minute: its rename changed the file's ctime).
func (s *answerSweep) leftover(fd int, dir, name string, st *unix.Stat_t) error {
	if s.dryRun || name == s.aside || !time.Unix(st.Ctim.Unix()).Before(s.now.Add(-answerFloor)) {
		return nil
	}
	if err := unix.Unlinkat(fd, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return &os.PathError{Op: "remove", Path: dir + "/" + name, Err: err}
	}
	return nil
}
