package tracker

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker/durable"
	"golang.org/x/sys/unix"
)

// ExpireRejected removes from root's rejected/ every refused request whose
// reason was written before cutoff, the two together, and
// what a crash left there before cutoff that fsck --repair removes (a
// reason without its request, a partial write of one). It returns how
// many requests it removed; with dryRun it removes nothing, and returns
// how many it would. A request without its reason is left, as fsck
// reports it: a loss to say, not to hide. A directory moved there goes
// only once empty (see removeRequest).
//
// Age is the time the reason was written (its modification time), just
// before the request was moved beside it. Not the request's times: it
// keeps the modification time its writer gave it, which may be any, and
// its change time is its owner's to renew (a chmod: rejected/ is open to
// a shared root's group), who would keep it, and its reason, for ever.
// Nor the reason's change time, which a link made to it and removed
// renews, where the kernel lets members link what is not theirs
// (fs.protected_hardlinks 0). The reason is the watcher's: no one but it
// and root may set its modification time. What a crash left (below) ages
// by its change time. Requests and reasons are told apart as fsck tells them
// (rejectedDir.pairs), through rejected/ opened once without following a
// link.
//
// The request goes first and its reason last: a crash in between leaves
// a reason without its request, which fsck says nothing reads (--repair
// and the next expiry remove it), never a request whose reason was lost.
// So through a power loss too: the requests' removals are flushed
// (rejected/ synced, durable.FlushRejected) before any of their reasons
// go, once a sweep, for all of them. A file system that writes a
// directory's blocks apart (ext4 without a journal) could otherwise keep
// a reason's removal and lose its request's, and fsck would report a
// lost reason for a request that was on its way out, kept by --repair a
// further keep_finished_for.
func ExpireRejected(root string, cutoff time.Time, dryRun bool) (int, error) {
	dir := spool.Dir{Root: root}.Rejected()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return 0, nil // cleared: made again with the next rejection
	}
	if err != nil {
		return 0, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	f := os.NewFile(uintptr(fd), dir)
	defer f.Close()
	list, err := f.Readdirnames(-1)
	if err != nil {
		return 0, err
	}
	var st unix.Stat_t
	if err := unix.Stat(root, &st); err != nil {
		return 0, &os.PathError{Op: "stat", Path: root, Err: err}
	}
	names := make(map[string]bool, len(list))
	for _, name := range list {
		names[name] = true
	}
	// Read through the descriptor: the directory listed is the one read.
	r := rejectedDir{dir: fmt.Sprintf("/proc/self/fd/%d", fd), names: names, watcher: st.Uid}
	x := expiry{fd: fd, dir: dir, cutoff: cutoff, dryRun: dryRun}
	pairs := r.pairs()
	reqs := make([]string, 0, len(pairs))
	for req := range pairs {
		reqs = append(reqs, req)
	}
	slices.Sort(reqs)
	n := 0
	var errs []error
	var reasons []string // of the requests removed
	for _, req := range reqs {
		reason := pairs[req]
		if !x.written(reason) {
			continue // the request's own times are its owner's to renew
		}
		if gone, err := x.removeRequest(req); err != nil || !gone {
			if err != nil {
				errs = append(errs, err)
			}
			continue // its reason stays with it
		}
		reasons = append(reasons, reason)
		n++
	}
	if err := x.flushRemoved(len(reasons)); err != nil {
		// The reasons stay, each without its request: the next sweep
		// removes them as what a removal cut short left.
		return n, errors.Join(append(errs, err)...)
	}
	for _, reason := range reasons {
		if err := x.remove(reason); err != nil {
			errs = append(errs, err)
		}
	}
	for _, name := range list {
		if names[name] && !isPaired(pairs, name) && name[0] != '.' && x.old(name) && r.unpaired(name).removed != "" {
			if err := x.remove(name); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return n, errors.Join(errs...)
}

// isPaired reports whether name is a request or a reason of pairs.
func isPaired(pairs map[string]string, name string) bool {
	if _, ok := pairs[name]; ok {
		return true
	}
	req, ok := strings.CutSuffix(name, ".error")
	return ok && pairs[req] == name
}

// expiry removes old files from rejected/ (dir, open as fd).
type expiry struct {
	fd     int
	dir    string
	cutoff time.Time
	dryRun bool
}

// flushRemoved makes the removal of n requests durable (rejected/
// synced), unless there are none or it is a dry run, before their
// reasons go.
func (x expiry) flushRemoved(n int) error {
	if n == 0 || x.dryRun {
		return nil
	}
	if err := durable.FlushRejected.Fsync(x.fd); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("syncing %s, once %d requests were removed from it: %w", x.dir, n, err)
	}
	return nil
}

// written reports whether file name, a reason, was last written before
// the cutoff (its modification time, which only its owner, the watcher,
// and root may set).
func (x expiry) written(name string) bool {
	var st unix.Stat_t
	if unix.Fstatat(x.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
		return false
	}
	return time.Unix(st.Mtim.Unix()).Before(x.cutoff)
}

// old reports whether file name last changed before the cutoff.
func (x expiry) old(name string) bool {
	var st unix.Stat_t
	if unix.Fstatat(x.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
		return false
	}
	return time.Unix(st.Ctim.Unix()).Before(x.cutoff)
}

// removeRequest removes request name, unless it is a dry run, and
// reports whether it is gone (or would be). A directory moved aside goes
// only once empty, by rmdir, which removes nothing else and follows no
// link: what it holds is its owner's, and is never opened as root. Its
// owner may empty it; in a shared root they cannot remove it themselves
// (rejected/ is the watcher's user's), and, kept, it and its reason were
// there for ever, as many as a member made.
func (x expiry) removeRequest(name string) (bool, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(x.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return false, nil // looked at again at the next sweep
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return true, x.remove(name)
	}
	if x.dryRun {
		return x.emptyDir(name), nil
	}
	err := unix.Unlinkat(x.fd, name, unix.AT_REMOVEDIR)
	switch {
	case err == nil || errors.Is(err, unix.ENOENT):
		return true, nil
	case errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST) || errors.Is(err, unix.EBUSY):
		// Its owner's to empty (or to unmount: a member may mount a FUSE
		// file system on a directory of theirs) first; not an error of
		// the sweep, which they would make fail at every round.
		return false, nil
	}
	return false, &os.PathError{Op: "remove", Path: x.dir + "/" + name, Err: err}
}

// emptyDir reports whether directory name holds nothing; it is opened
// without following a link, and only listed.
func (x expiry) emptyDir(name string) bool {
	fd, err := unix.Openat(x.fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	f := os.NewFile(uintptr(fd), x.dir+"/"+name)
	defer f.Close()
	names, err := f.Readdirnames(1)
	return len(names) == 0 && errors.Is(err, io.EOF)
}

// remove removes file name, unless it is a dry run; one gone already is
// no error.
func (x expiry) remove(name string) error {
	if x.dryRun {
		return nil
	}
	if err := unix.Unlinkat(x.fd, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return &os.PathError{Op: "remove", Path: x.dir + "/" + name, Err: err}
	}
	return nil
}
