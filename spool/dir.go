package spool

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode"

	"golang.org/x/sys/unix"

	"github.com/tendhq/tend/tracker/durable"
	"github.com/tendhq/tend/tracker/layout"
)

// Dir is the request side of a tend root: spool/ where requests arrive,
// outcomes/ where their answers go, and rejected/ where bad requests are
// kept beside the reason they were refused.
type Dir struct {
	Root string
}

// Spool, Outcomes and Rejected return the directories of d.
func (d Dir) Spool() string    { return layout.Root(d.Root).Spool() }
func (d Dir) Outcomes() string { return layout.Root(d.Root).Outcomes() }
func (d Dir) Rejected() string { return layout.Root(d.Root).Rejected() }
func (d Dir) Claims() string   { return layout.Root(d.Root).Claims() }

// MakeClaims makes claims/, the watcher's alone (mode 0700), where it
// claims control requests away from the spool, in which anyone who may
// submit could put a file in the way of a claim. A link or a file in its
// place is an error: nothing is claimed through it.
func (d Dir) MakeClaims() error {
	if err := os.Mkdir(d.Claims(), 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	fi, err := os.Lstat(d.Claims())
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s: not a directory", d.Claims())
	}
	return nil
}

// ClaimedName returns the name, in claims/, of control request n claimed:
// its owner's uid, ':', its name (no ID, tag or verb has a ':'), so that
// two users' requests of the same name never meet.
func ClaimedName(n Name) string { return strconv.Itoa(n.Owner) + ":" + n.String() }

// ParseClaimedName returns the request name of a file in claims/, and
// whether it is one (ClaimedName); a selector's chosen runs end in
// ".chosen".
func ParseClaimedName(file string) (string, bool) {
	uid, name, ok := strings.Cut(file, ":")
	if !ok || uid == "" || strings.Trim(uid, "0123456789") != "" || strings.HasSuffix(name, ".chosen") {
		return "", false
	}
	return name, true
}

// Make creates the root (mode 0700) and the request directories, as needed.
func (d Dir) Make() error {
	if err := os.MkdirAll(d.Root, 0o700); err != nil {
		return err
	}
	for _, dir := range []string{d.Spool(), d.Outcomes(), d.Rejected()} {
		if err := makeDir(dir); err != nil {
			return err
		}
	}
	return nil
}

func makeDir(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return nil
}

// writeIn calls write, and once more after making dir again if it failed
// because dir is gone: an operator may clear rejected/ or outcomes/ by
// removing it, and the answers that follow must not be lost.
func writeIn(dir string, write func() error) error {
	err := write()
	if errors.Is(err, os.ErrNotExist) && makeDir(dir) == nil {
		err = write()
	}
	return err
}

// Errors from Read. Each is final for the file as it is now, except
// ErrBusy, which clears when the writer closes the file.
var (
	ErrBusy     = errors.New("still open for writing")
	ErrTooLarge = fmt.Errorf("larger than the limit of %d bytes", MaxBody)
)

// File is a request file as read from the spool.
type File struct {
	Name string
	Body []byte
	UID  int
	Dev  uint64
	Ino  uint64
	// Links is the file's link count: a request that has another name
	// elsewhere may be a file its owner never meant as one.
	Links int
	// Marked is set for a file of root's that carries the mark root's
	// clients put on their requests (see Mark): in a spool others may
	// write, a file of root's without it may have been moved there by
	// anyone.
	Marked bool
	// Settled is true when the kernel confirmed (with a read lease) that no
	// one held the file open for writing while it was read. Where leases are
	// not available it is false, and the caller must judge completeness by
	// a quiet period instead.
	Settled bool
}

// Read reads the request file name in the spool, without following a
// symbolic link and without blocking on a FIFO or device. It returns
// ErrBusy if someone has the file open for writing,
// durable.ErrNotRegular for anything but a regular file, and ErrTooLarge
// (without reading the body) for a file over MaxBody.
func (d Dir) Read(name string) (File, error) {
	return readFile(filepath.Join(d.Spool(), name), name)
}

func readFile(path, name string) (File, error) {
	fd, st, err := durable.OpenRegular(path)
	if errors.Is(err, durable.ErrNotRegular) {
		// Its owner is known (from the handle that found it not regular):
		// the answer is that owner's.
		return File{Name: name, UID: int(st.Uid)}, fmt.Errorf("%s: %w", name, err)
	}
	if errors.Is(err, unix.EACCES) {
		return File{Name: name, UID: int(st.Uid)}, fmt.Errorf("%s: the watcher (uid %d) may not read it (mode %04o, owned by uid %d): %w",
			name, os.Geteuid(), st.Mode&0o7777, st.Uid, unix.EACCES)
	}
	if err != nil {
		return File{Name: name, UID: int(st.Uid)}, err // (its owner, if it was found)
	}
	defer unix.Close(fd)
	out := File{Name: name, UID: int(st.Uid), Dev: st.Dev, Ino: st.Ino, Links: int(st.Nlink)}
	if st.Uid == 0 {
		out.Marked = marked(fd)
	}
	if st.Size > MaxBody {
		return out, fmt.Errorf("%s: %d bytes: %w", name, st.Size, ErrTooLarge)
	}
	leased, err := takeReadLease(fd)
	if err != nil {
		return out, fmt.Errorf("%s: %w", name, err)
	}
	out.Body, err = durable.ReadUpTo(fd, st.Size, MaxBody+1)
	if err != nil {
		return out, &os.PathError{Op: "read", Path: path, Err: err}
	}
	if len(out.Body) > MaxBody {
		return out, fmt.Errorf("%s: %w", name, ErrTooLarge)
	}
	if leased {
		// A writer that opened the file while we read broke the lease: what
		// we read may be partial.
		if l, err := unix.FcntlInt(uintptr(fd), unix.F_GETLEASE, 0); err != nil || l != unix.F_RDLCK {
			return out, fmt.Errorf("%s: %w", name, ErrBusy)
		}
	}
	out.Settled = leased
	return out, nil
}

// takeReadLease takes a read lease on fd, which the kernel grants only when
// no one has the file open for writing. It returns false, nil where leases
// are not available (another user's file without CAP_LEASE, a filesystem
// without leases, leases disabled).
func takeReadLease(fd int) (bool, error) {
	_, err := unix.FcntlInt(uintptr(fd), unix.F_SETLEASE, unix.F_RDLCK)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EBUSY):
		return false, ErrBusy
	case errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS):
		return false, nil
	}
	return false, fmt.Errorf("read lease: %w", err)
}

// Claim moves the request file f.Name out of the spool to dst, atomically,
// so that no other reader can take it and a rewrite of the same name is a
// new request. If the name was replaced after f was read, Claim moves the
// replacement and reads it again from dst, so the returned File is always
// what was claimed. It never replaces what is at dst (a request of the
// same name being carried out, or anything another user put there): that
// is an error wrapping fs.ErrExist.
func (d Dir) Claim(f File, dst string) (File, error) {
	src := filepath.Join(d.Spool(), f.Name)
	if err := unix.Renameat2(unix.AT_FDCWD, src, unix.AT_FDCWD, dst, unix.RENAME_NOREPLACE); err != nil {
		return File{}, &os.LinkError{Op: "rename", Old: src, New: dst, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Lstat(dst, &st); err != nil {
		return File{}, &os.PathError{Op: "lstat", Path: dst, Err: err}
	}
	if st.Dev == f.Dev && st.Ino == f.Ino {
		return f, nil
	}
	return readFile(dst, f.Name)
}

// Keep makes the content of request f, taken and left in the spool (a
// queued run's, which it starts with), durable: it opens the file again
// without following a link and, if it is still the one read (the same
// inode, no larger than a request may be), fdatasyncs it, and reports
// true. One replaced, removed or grown since is not synced: it is taken
// as an edit, and kept then.
func (d Dir) Keep(f File) (bool, error) {
	fd, st, err := durable.OpenRegular(filepath.Join(d.Spool(), f.Name))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("%s: keeping it: %w", f.Name, err)
	}
	defer unix.Close(fd)
	if st.Dev != f.Dev || st.Ino != f.Ino || st.Size > MaxBody {
		// Another file now, or one grown past what a request may be since
		// it was read (whose writer would have the flush write it all).
		return false, nil
	}
	if sp := (unix.Stat_t{}); unix.Stat(d.Spool(), &sp) != nil || sp.Dev != st.Dev {
		// Not on the spool's file system: a file its owner mounted over
		// the request (FUSE), whose sync it answers, and whose failure
		// would be recorded as the disk's (see tracker.NoteSyncFailure).
		return false, nil
	}
	if err := durable.FlushQueued.Fdatasync(fd); err != nil {
		return false, fmt.Errorf("%s: keeping it: %w", f.Name, err)
	}
	return true, nil
}

// Reject moves the spool entry name (of any kind: it is renamed, never
// opened) into rejected/, beside a file <name>.error holding one line that
// names the request and says what is wrong. It never overwrites an earlier
// rejected file: a repeated name gets a numbered suffix, and a name too long
// to carry ".error" is shortened (the line still names it whole). The reason
// is written before the request is moved, so a request is never found in
// rejected/ without one; rejected/ is made again if it was removed. It
// returns the rejected path; with an error, the request was left where it
// was, unless a path comes with it (the move was made but could not be
// synced).
func (d Dir) Reject(name, reason string) (string, error) {
	return d.RejectFrom(filepath.Join(d.Spool(), name), name, reason)
}

// RejectFrom is Reject for a request that has already left the spool (a
// claimed request found bad after all): src is moved to rejected/ under the
// request's name.
// The request is made readable by its owner alone (see private).
func (d Dir) RejectFrom(src, name, reason string) (string, error) {
	markRejected(src)
	private(src) // before it is in rejected/, which the root's group may read
	dst, err := d.rejectAs(name, reason, func(dst string) error {
		err := unix.Renameat2(unix.AT_FDCWD, src, unix.AT_FDCWD, dst, unix.RENAME_NOREPLACE)
		if err != nil {
			return &os.LinkError{Op: "rename", Old: src, New: dst, Err: err}
		}
		private(dst) // what was moved: src may have been replaced in between
		return nil
	})
	if err == nil {
		// Its move into rejected/ is durable (rejectAs synced it): the
		// request is gone from where it was taken, and its mark is
		// spent, or a hard link to it, made before or in rejected/
		// (which the root's group may enter), would be a request of
		// root's once the rejected file expires (see spentMark).
		spend(dst, rejectedMark)
	}
	return dst, err
}

// private takes from the file or directory at path every permission but
// its owner's (root keeps its own): a request moved into rejected/ kept
// its writer's mode, often readable by all (umask 022), and in a shared
// root rejected/ is open to the root's group, whose members would read
// another's request, which may hold secrets. It is done on the inode
// opened without following a link (O_PATH: no FIFO blocks, no device
// acts), and only to a directory or to a regular file with no other name
// (a hard link to a file elsewhere, made where the kernel lets members
// link what is not theirs, is left as it is). Errors are ignored: the
// request is rejected all the same.
func private(path string) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&0o7077 == 0 {
		return
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
	case unix.S_IFREG:
		if st.Nlink != 1 {
			return
		}
	default:
		return
	}
	// A chmod through the descriptor's /proc link reaches that very inode
	// (fchmod refuses an O_PATH descriptor).
	unix.Fchmodat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", fd), st.Mode&0o700, 0)
}

// RejectCopy is Reject for a request that stays in the spool (a queued
// run's, whose writer is to mend it there): a copy of body, what was
// read of it, is made in rejected/ instead of moving it, given to owner
// (the request's: it is theirs to read, as a moved request would be)
// with mode 0600, and synced with its directory.
func (d Dir) RejectCopy(name string, body []byte, owner int, reason string) (string, error) {
	return d.rejectAs(name, reason, func(dst string) error {
		return writeNew(dst, body, owner, durable.FlushReason, rejectedMark) // flushed as its reason is
	})
}

// WriteVersion writes body, a version of a request read from the spool
// and gone from there since (the last good version of a held queued
// run, kept as its run's request when the run is canceled), to a new
// file at dst, as RejectCopy writes a copy: never over a file there nor
// through a link, owned by owner, mode 0600, synced as a claimed request
// is. One of root's carries the mark of root's requests.
func WriteVersion(dst string, body []byte, owner int) error {
	return writeNew(dst, body, owner, durable.FlushClaimed, "request")
}

// writeNew writes body to a new file at path, which it never replaces
// nor follows if it is a link, owned by owner (if above zero) before
// anything is written, and syncs it as flush. A file of root's, written
// by root, carries the mark with value mark.
func writeNew(path string, body []byte, owner int, flush durable.Flush, mark string) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return &os.PathError{Op: "create", Path: path, Err: err}
	}
	if owner > 0 {
		err = unix.Fchown(fd, owner, -1)
	} else if os.Geteuid() == 0 {
		// A copy of root's is a request, never a reason: marked as
		// markRejected marks what it moves.
		unix.Fsetxattr(fd, markAttr, []byte(mark), 0)
	}
	if err == nil {
		err = durable.WriteAll(fd, body)
	}
	if err == nil {
		err = flush.Fsync(fd)
	}
	if cerr := unix.Close(fd); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		unix.Unlink(path)
		return &os.PathError{Op: "write", Path: path, Err: err}
	}
	return nil
}

// RemoveCopy removes from rejected/ a copy RejectCopy made at dst, given
// to owner, and then its reason, as their expiry does (a crash in between
// leaves a reason without its request, which fsck says nothing reads,
// never a request without its reason). It is for a copy another
// supersedes: a queued run's bad versions are copied one at a time. A
// file there now that is not owner's regular file is not that copy (it
// expired, and another rejection took its name), and is left.
func (d Dir) RemoveCopy(dst string, owner int) error {
	if filepath.Dir(dst) != d.Rejected() {
		return fmt.Errorf("%s: not in %s", dst, d.Rejected())
	}
	var st unix.Stat_t
	if err := unix.Lstat(dst, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return &os.PathError{Op: "lstat", Path: dst, Err: err}
	}
	if owner <= 0 {
		owner = os.Geteuid() // as writeNew leaves it
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != owner {
		return nil
	}
	if err := os.Remove(dst); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.Remove(dst + ".error"); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// rejectAs is Reject with place, which puts the request at dst in
// rejected/ (never over a file there: an error wrapping unix.EEXIST
// has the next name tried).
func (d Dir) rejectAs(name, reason string, place func(dst string) error) (string, error) {
	line := fmt.Sprintf("%s: %s\n", Printable(name), oneLine(reason))
	if err := os.Mkdir(d.Rejected(), 0o755); err == nil {
		// Made again (an operator cleared it): its name is durable
		// before what it will hold.
		if err := durable.FlushRootDirs.SyncDir(d.Root); err != nil {
			return "", err
		}
	}
	for i := 0; ; i++ {
		dst := filepath.Join(d.Rejected(), rejectedName(name, i))
		if _, err := os.Lstat(dst + ".error"); err == nil {
			continue
		}
		if err := writeIn(d.Rejected(), func() error {
			return durable.Replace(dst+".error", []byte(line), durable.Perm{Mode: 0o644}, durable.Durable{File: durable.FlushReason, Dir: durable.FlushReasonDir})
		}); err != nil {
			return "", err
		}
		err := place(dst)
		if err == nil {
			return dst, durable.FlushRejected.SyncDir(d.Rejected()) // as durable as its reason
		}
		os.Remove(dst + ".error")
		if !errors.Is(err, unix.EEXIST) {
			return "", err
		}
	}
}

// nameMax is the longest file name Linux file systems take (NAME_MAX).
const nameMax = 255

// rejectedName is the name of the i-th request rejected as name: name, then
// ".i" for i > 0, cut short so that the name with ".error", and the
// temporary name that file is written under, still fit.
func rejectedName(name string, i int) string {
	suffix := ""
	if i > 0 {
		suffix = fmt.Sprintf(".%d", i)
	}
	if limit := nameMax - len(".error") - durable.TempDigits - len(suffix); len(name) > limit {
		name = name[:limit]
	}
	return name + suffix
}

// RejectedReason returns the reason request name was rejected with, if
// the file of inode ino that its writer put in the spool is in rejected/
// (Reject moves a request, so it keeps its inode): a client whose answer
// another request of the same name took finds its own there. It looks
// at the names Reject gives name in turn, up to the first that neither a
// request nor a reason holds. Only a file of this process's user is its
// own: once its file is gone (its run deleted), an inode is soon another
// file's, and a member could have theirs rejected under name in a
// shared root, to answer root's client with their request's reason.
func (d Dir) RejectedReason(name string, ino uint64) (string, bool) {
	for i := 0; i < maxRejectedLook; i++ {
		dst := filepath.Join(d.Rejected(), rejectedName(name, i))
		var st unix.Stat_t
		if err := unix.Lstat(dst, &st); err != nil {
			if _, err := os.Lstat(dst + ".error"); err != nil {
				return "", false
			}
			continue // a reason whose request expired first
		}
		if st.Ino != ino || st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != os.Geteuid() {
			continue
		}
		b, _, err := durable.ReadRegular(dst+".error", maxReasonRead)
		if err != nil || !IsReason(filepath.Base(dst), b) {
			return "see " + dst + ".error", true // rejected all the same
		}
		line := strings.TrimSuffix(string(b), "\n")
		return strings.TrimPrefix(line, Printable(name)+": "), true
	}
	return "", false
}

// maxRejectedLook bounds the names RejectedReason looks at: rejected/
// keeps requests for days, and a name rejected thousands of times has
// thousands there. maxReasonRead bounds what it reads of a reason.
const (
	maxRejectedLook = 10000
	maxReasonRead   = 1 << 20
)

// IsReason reports whether b is what Reject writes in rejected/ beside a
// request it moved there as file: one line, "<name>: <reason>", naming a
// request that file is the rejected name of (cut short, numbered).
func IsReason(file string, b []byte) bool {
	line, ok := bytes.CutSuffix(b, []byte("\n"))
	if !ok || bytes.IndexByte(line, '\n') >= 0 {
		return false
	}
	for i := 0; ; i++ {
		k := bytes.Index(line[i:], []byte(": "))
		if k < 0 || i+k > maxPrintableName {
			return false // past any name Printable makes: the rest is no name
		}
		i += k
		if name, ok := unprintable(string(line[:i])); ok && rejectedAs(name, file) {
			return true
		}
	}
}

// maxPrintableName is the longest name Printable makes of a file name:
// each byte quoted as \xNN at most, and the quotes. IsReason looks no
// further for the end of the name a reason begins with: what follows
// quotes what a request held, as long as its writer made it, and trying
// each ": " in it would be quadratic.
const maxPrintableName = 4*nameMax + 2

// unprintable returns the name Printable made s of, if it made s.
func unprintable(s string) (string, bool) {
	name := s
	if strings.HasPrefix(s, `"`) {
		var err error
		if name, err = strconv.Unquote(s); err != nil {
			return "", false
		}
	}
	return name, Printable(name) == s
}

// rejectedAs reports whether file is a name Reject gives a request
// rejected as name (rejectedName).
func rejectedAs(name, file string) bool {
	if rejectedName(name, 0) == file {
		return true
	}
	dot := strings.LastIndexByte(file, '.')
	i, err := strconv.Atoi(file[dot+1:])
	return dot >= 0 && err == nil && i > 0 && rejectedName(name, i) == file
}

// Printable quotes a name that holds bytes a terminal or a line-oriented
// reader would mangle (control characters, invalid UTF-8).
func Printable(name string) string {
	q := fmt.Sprintf("%q", name)
	if q[1:len(q)-1] == name {
		return name
	}
	return q
}

// oneLine makes s the one line of text a reason or an outcome's detail is
// written as: its runs of white space one space, bytes that are not UTF-8
// '?', and other control characters (ESC, BEL, DEL, C1) as \xNN. A reason
// quotes what a request held, which anyone who may write one chose, and
// it is read with cat, on a terminal, often root's.
func oneLine(s string) string {
	line := strings.Join(strings.Fields(strings.ToValidUTF8(s, "?")), " ")
	if !strings.ContainsFunc(line, unicode.IsControl) {
		return line
	}
	var b strings.Builder
	for _, r := range line {
		if unicode.IsControl(r) {
			fmt.Fprintf(&b, "\\x%02x", r)
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// The outcomes of requests. An outcome file holds one line: the outcome,
// then for some outcomes ": " and a detail.
const (
	Accepted        = "accepted"
	Rejected        = "rejected"
	Canceled        = "canceled"
	AlreadyFinished = "already_finished"
	NotFound        = "not_found"
	NotCancellable  = "not_cancellable"
	NotPermitted    = "not_permitted"
	StillActive     = "still_active"
	Deleted         = "deleted"
	Updated         = "updated"
	Conflict        = "conflict"
	Signaled        = "signaled"
	Restarted       = "restarted"
	Paused          = "paused"
	Resumed         = "resumed"
	NotRunning      = "not_running"
)

// Outcomes lists the outcomes, the one source docs/schema/outcome.schema.json
// is kept to (TestSchemasMatchTheCode).
var Outcomes = []string{Accepted, Rejected, Canceled, AlreadyFinished, NotFound, NotCancellable, NotPermitted,
	StillActive, Deleted, Updated, Conflict, Signaled, Restarted, Paused, Resumed, NotRunning}

// OutcomePath returns the path of the outcome file for request n, in
// the directory of its owner's answers (OutcomesOf).
func (d Dir) OutcomePath(n Name) string {
	return filepath.Join(d.OutcomesOf(n.Owner), n.String())
}

// OutcomesOf returns the directory of the answers to uid's requests:
// outcomes/ for root's and for those of the root's owner, and for every
// other user (a member of a shared root) outcomes/<uid>/, which only the
// watcher writes. So no user's request, whatever its name, is answered
// where another user's client reads its answer.
func (d Dir) OutcomesOf(uid int) string {
	if uid == 0 || uid == d.owner() {
		return d.Outcomes()
	}
	return filepath.Join(d.Outcomes(), strconv.Itoa(uid))
}

// owner returns the uid of the root's owner, or -1 if it cannot be read.
func (d Dir) owner() int {
	var st unix.Stat_t
	if err := unix.Stat(d.Root, &st); err != nil {
		return -1
	}
	return int(st.Uid)
}

// writeOutcome replaces the file of request n's answer with b, making the
// directory of its owner's answers (outcomes/<uid>/) first if it is not
// there; a link or a file in its place is not written through.
func (d Dir) writeOutcome(n Name, b []byte) error {
	dir := d.OutcomesOf(n.Owner)
	write := func() error { return durable.ReplaceUnsynced(d.OutcomePath(n), b, durable.Perm{Mode: 0o644}) }
	if dir == d.Outcomes() {
		return writeIn(dir, write)
	}
	// Only the watcher makes it (outcomes/ is the watcher's): a link or a
	// file in its place is an operator's doing, and is not written through.
	fi, err := os.Lstat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err = makeDir(d.Outcomes()); err == nil { // an operator may clear outcomes/
			err = makeUsersDir(dir)
		}
	case err == nil && !fi.IsDir():
		err = fmt.Errorf("%s: not a directory", dir)
	}
	if err != nil {
		return err
	}
	return write()
}

// makeUsersDir makes dir, the directory of a user's answers, readable
// by all who may enter outcomes/ whatever the watcher's umask: its user
// reads it, and nobody else can write there.
func makeUsersDir(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil
		}
		return err
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	if err := unix.Fchmod(fd, 0o755); err != nil {
		return &os.PathError{Op: "chmod", Path: dir, Err: err}
	}
	return nil
}

// WriteOutcome replaces the outcome of request n, atomically, readable by
// every user of the root (outcomes/ is readable by those only). It is not
// synced: an outcome answers a client on this machine, which a crash of
// the watcher does not take its answer from (the page cache outlives it)
// and a power loss takes away with the answer; what the outcome reports is
// in the run's record, which is synced first, and a start request left
// unanswered is answered again on restart. outcomes/ is made again if it
// was removed.
func (d Dir) WriteOutcome(n Name, outcome, detail string) error {
	line := outcome
	if detail != "" {
		line += ": " + oneLine(detail)
	}
	return d.writeOutcome(n, []byte(line+"\n"))
}

// WriteSelectOutcome replaces the outcome of selector request n with b
// (see SelectOutcome), as WriteOutcome does.
func (d Dir) WriteSelectOutcome(n Name, b []byte) error {
	return d.writeOutcome(n, b)
}

// ReadOutcome returns the outcome and detail of request n, or an error
// satisfying errors.Is(err, os.ErrNotExist) if it has none yet.
func (d Dir) ReadOutcome(n Name) (outcome, detail string, err error) {
	outcome, detail, _, err = d.ReadOutcomeFile(n)
	return outcome, detail, err
}

// ReadOutcomeFile is ReadOutcome, and returns the inode of the answer it
// read. An answer is replaced atomically, so a client that must tell one
// answer from the next (another's, then its own) knows the one it read
// by it: a stat of the name after the read may find the next one already.
func (d Dir) ReadOutcomeFile(n Name) (outcome, detail string, ino uint64, err error) {
	b, st, err := durable.ReadRegular(d.OutcomePath(n), 4096)
	if err != nil {
		return "", "", 0, err
	}
	line := strings.TrimSpace(string(b))
	outcome, detail, _ = strings.Cut(line, ": ")
	return outcome, detail, st.Ino, nil
}

// Submit writes a request the way every client should: under a hidden
// temporary name that the watcher ignores, then renamed to spool/<n>, so
// the watcher only ever sees it whole. With replace false it refuses to
// replace a request of the same name that is still waiting.
//
// Both names are made in the spool as it was opened, never through a
// link: a client running as root in another user's root writes nowhere
// else. The file is the writer's alone to read (mode 0600).
func (d Dir) Submit(n Name, body []byte, replace bool) error {
	_, err := d.SubmitFile(n, body, replace)
	return err
}

// SubmitFile is Submit, and returns the inode of the file it wrote: the
// watcher claims a request by renaming it, so a client finds by it where
// its own request went (a run's directory, rejected/), whoever else wrote
// a request of the same name.
func (d Dir) SubmitFile(n Name, body []byte, replace bool) (uint64, error) {
	dir, err := unix.Open(d.Spool(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, &os.PathError{Op: "open", Path: d.Spool(), Err: err}
	}
	defer unix.Close(dir)
	var suffix [6]byte
	rand.Read(suffix[:])
	// Random, not the request's name: the spool may be listed by other
	// users, who must not learn a name before its request is there.
	tmp := "." + hex.EncodeToString(suffix[:]) + ".tmp"
	dst := filepath.Join(d.Spool(), n.String())
	fd, err := unix.Openat(dir, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return 0, &os.PathError{Op: "create", Path: filepath.Join(d.Spool(), tmp), Err: err}
	}
	var st unix.Stat_t
	err = unix.Fstat(fd, &st)
	Mark(fd)
	if err == nil {
		err = durable.WriteAll(fd, body)
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err == nil && replace && exchanged(dir, tmp, n.String()) {
		return st.Ino, nil
	}
	if err == nil {
		flags := uint(unix.RENAME_NOREPLACE)
		if replace {
			flags = 0
		}
		if err = unix.Renameat2(dir, tmp, dir, n.String(), flags); errors.Is(err, unix.EEXIST) {
			err = fmt.Errorf("%s: a request with this name is already waiting in the spool", dst)
		} else if err != nil {
			err = &os.LinkError{Op: "rename", Old: filepath.Join(d.Spool(), tmp), New: dst, Err: err}
		}
	}
	if err != nil {
		unix.Unlinkat(dir, tmp, 0)
		return 0, err
	}
	return st.Ino, nil
}

// markAttr is the extended attribute root's clients put on their request
// files. Only a process with CAP_SYS_ADMIN may set or read attributes in
// the trusted namespace, so no other user can put it on a file, nor find
// one of root's files that has it outside a root's spool and runs.
const markAttr = "trusted.tend"

// Mark puts the mark of a request of root's on the file open as fd, if
// this process is root's (a shared root takes a request of root's from a
// spool others may write only with it; see docs/protocol.md, "Who may do
// what"). Where the file system has no such attributes it does nothing:
// such a request is refused there, with the reason.
func Mark(fd int) {
	if os.Geteuid() == 0 {
		unix.Fsetxattr(fd, markAttr, []byte("request"), 0)
	}
}

// rejectedMark is the value of the mark RejectFrom puts on a file of
// root's it moves into rejected/ unmarked: a request, never a reason.
const rejectedMark = "rejected"

// CarriesMark reports whether the file open as fd carries tend's mark, of
// any value: a request of root's (marked by its client, or by RejectFrom
// as it moved it into rejected/), never a reason, which tend writes
// unmarked (a reason of a tend before 2026-11-29 could not be told from
// a mark). Only root may read the mark: for any other process, and
// where the file system has no such attributes, it is false.
func CarriesMark(fd int) bool {
	_, err := unix.Fgetxattr(fd, markAttr, nil)
	return err == nil
}

// markRejected marks src, a request about to be moved into rejected/, as
// one, if it is a regular file of root's without the mark and this
// process is root's: in rejected/ a file of root's is otherwise taken
// for a reason if it reads as one (tend fsck pairs a request with its
// reason by what the reason says), and root leaves files of its own, with
// what others made it write, where they may move them into the spool. It
// is marked on the descriptor of the file it names, which no one but root
// may rename or remove (in the spool, sticky, and in claims/, root's
// alone). Where the file system has no such attributes it does nothing.
func markRejected(src string) {
	fd := openRootsFile(src)
	if fd < 0 {
		return
	}
	defer unix.Close(fd)
	if !CarriesMark(fd) {
		unix.Fsetxattr(fd, markAttr, []byte(rejectedMark), 0)
	}
}

// openRootsFile opens the regular file of root's at path, never through
// a link, checked on the descriptor; -1 if there is none, or this
// process is not root's (a member's file is not opened: they may hold a
// lease on it).
func openRootsFile(path string) int {
	var pre unix.Stat_t
	if os.Geteuid() != 0 || unix.Lstat(path, &pre) != nil || pre.Uid != 0 {
		return -1
	}
	fd, st, err := durable.OpenRegular(path)
	if err != nil {
		return -1
	}
	if st.Uid != 0 {
		unix.Close(fd)
		return -1
	}
	return fd
}

// spentMark is the value of the mark on a request of root's whose last
// name of its own is gone (its run deleted, replaced by a newer version,
// removed as carried out): no request to take from a spool any more
// (see marked). The mark is on the inode, which has every name the file
// has: where the kernel lets a member hard-link root's files
// (fs.protected_hardlinks=0), one who linked a request of root's while
// it waited in the spool would otherwise hold, once the request was
// carried out and its run deleted, a file of root's with one name and
// the mark, and move it into the spool to run root's command as root
// again, whenever they chose. It is never spent where a power loss could
// bring the request back under a name it is taken from (see
// docs/design.md, "A request's mark is spent where its last name goes").
const spentMark = "spent"

// spend changes the mark of the regular file of root's at path from
// "request" to value, on the descriptor of the file it names, never
// through a link. Where the file system has no such attributes, or this
// process is not root's, it does nothing.
func spend(path, value string) {
	if fd := openRootsFile(path); fd >= 0 {
		spendFd(fd, value)
		unix.Close(fd)
	}
}

// spendFd is spend for the file open as fd.
func spendFd(fd int, value string) {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) == nil && st.Uid == 0 && marked(fd) {
		unix.Fsetxattr(fd, markAttr, []byte(value), 0)
	}
}

// SpendAt spends the mark of the request named name in the directory
// open as dir: a run's, about to be removed with its directory (a
// deleted run's), which is its last name of its own.
func SpendAt(dir int, name string) {
	if fd := openRoots(dir, name); fd >= 0 {
		spendFd(fd, spentMark)
		unix.Close(fd)
	}
}

// openRoots opens the regular file of root's named name in dir, never
// through a link; -1 if there is none, or this process is not root's (a
// member's file is not opened: they may hold a lease on it).
func openRoots(dir int, name string) int {
	var st unix.Stat_t
	if os.Geteuid() != 0 || unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Uid != 0 || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return -1
	}
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	return fd
}

// RemoveRequest removes the request file at path (in the spool, or in
// claims/), which leaves tend for good: carried out, or a queued run's
// bad version. If it is a request of root's that another name keeps (a
// hard link; see spentMark), other than those at kept (where the request
// has names of its own: its run's request, its claim), its mark is spent
// once the removal is durable: its directory is synced first, so a power
// loss never brings it back under path spent, a request of root's
// refused as not one. Without such a link nothing is synced.
func RemoveRequest(path string, kept ...string) error {
	dir, err := unix.Open(filepath.Dir(path), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: filepath.Dir(path), Err: err}
	}
	defer unix.Close(dir)
	name := filepath.Base(path)
	fd := openRoots(dir, name)
	if fd >= 0 {
		defer unix.Close(fd)
	}
	if err := unix.Unlinkat(dir, name, 0); err != nil {
		return &os.PathError{Op: "remove", Path: path, Err: err}
	}
	if fd < 0 || !linkedElsewhere(fd, kept) {
		return nil
	}
	if err := durable.FlushClaim.Fsync(dir); err != nil {
		// Not spent: a power loss may still bring it back under path.
		return fmt.Errorf("%s: removed, but its mark not spent: %w", path, err)
	}
	spendFd(fd, spentMark)
	return nil
}

// linkedElsewhere reports whether the request of root's open as fd
// carries the mark and has a name that is not one of kept.
func linkedElsewhere(fd int, kept []string) bool {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Nlink == 0 || !marked(fd) {
		return false
	}
	own := 0
	for _, p := range kept {
		var k unix.Stat_t
		if unix.Lstat(p, &k) == nil && k.Dev == st.Dev && k.Ino == st.Ino {
			own++
		}
	}
	return int(st.Nlink) > own
}

// exchanged puts the new request tmp in place of the request of root's
// named name in the spool open as dir (a newer version by root's client:
// an edit of a queued run, a control request sent again), exchanging
// the two names, and removes the version replaced. If a hard link keeps
// that version elsewhere (see spentMark), its mark is spent once the
// spool is synced: never while a power loss could bring it back as the
// request under name, spent. It reports false, having done nothing, if
// there is no request of root's under name (taken meanwhile, or
// another's) or the file system cannot exchange names: tmp is then
// renamed in as before.
func exchanged(dir int, tmp, name string) bool {
	old := openRoots(dir, name)
	if old < 0 {
		return false
	}
	defer unix.Close(old)
	if unix.Renameat2(dir, tmp, dir, name, unix.RENAME_EXCHANGE) != nil {
		return false
	}
	// tmp now names what was under name: the version read, or one that
	// took its place meanwhile (only root may rename over a file of
	// root's in the sticky spool). Either is replaced.
	var was, st unix.Stat_t
	same := unix.Fstatat(dir, tmp, &was, unix.AT_SYMLINK_NOFOLLOW) == nil && unix.Fstat(old, &st) == nil && was.Dev == st.Dev && was.Ino == st.Ino
	unix.Unlinkat(dir, tmp, 0)
	if same && linkedElsewhere(old, nil) && durable.FlushClaim.Fsync(dir) == nil {
		spendFd(old, spentMark)
	}
	return true
}

// marked reports whether the file open as fd carries the mark.
func marked(fd int) bool {
	var buf [16]byte
	n, err := unix.Fgetxattr(fd, markAttr, buf[:])
	return err == nil && string(buf[:n]) == "request"
}
