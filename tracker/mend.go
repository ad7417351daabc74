package tracker

import (
	"bytes"
	"errors"
	"fmt"
	"os"

	"github.com/tendhq/tend/tracker/durable"
	"github.com/tendhq/tend/tracker/layout"
	"golang.org/x/sys/unix"
)

// MendTornEnd moves the torn last line of root's history to
// history.jsonl.bad, as tend fsck --repair moves a bad line, if it begins
// as every line tend writes does: a crash or a power loss in the middle of
// an append leaves one (the kernel stops a write between its pages for a
// SIGKILL), and what it held was never acted on (an append comes before
// the records, and whatever follows them). A watcher mends it as it
// starts, so that its own crash does not keep the history from growing
// until an operator repairs it; a torn line of any other kind (a hand
// edit) is left for tend fsck --repair. It returns what it did, or "".
//
// Nothing is synced: a power loss that takes the mend back leaves the
// torn line again, for the next watcher to mend, and the copy in .bad is
// of a line nothing acted on.
func MendTornEnd(root string) (string, error) {
	lockFD := -1
	if err := lockHistory(root, &lockFD, unix.LOCK_EX); errors.Is(err, os.ErrNotExist) {
		return "", nil
	} else if err != nil {
		return "", err
	}
	defer closeLock(&lockFD)
	path := layout.Root(root).History()
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return "", nil
	}
	if err != nil {
		return "", &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size == 0 {
		return "", err
	}
	cut, err := lastLineStart(fd, st.Size, maxTorn)
	if err != nil || cut == st.Size || cut < 0 {
		// Whole, or unreadable (an append reports it), or its last line
		// longer than any append of tend's: a hand edit, for fsck.
		return "", err
	}
	torn := make([]byte, st.Size-cut)
	if _, err := unix.Pread(fd, torn, cut); err != nil {
		return "", &os.PathError{Op: "read", Path: path, Err: err}
	}
	if !bytes.HasPrefix(torn, []byte(`{"time":"`)) {
		return "", nil
	}
	side, err := openBad(path+".bad", &st) // no more readable than the history
	if err != nil {
		return "", err
	}
	err = durable.WriteAll(side, append(torn, '\n'))
	unix.Close(side)
	if err != nil {
		return "", fmt.Errorf("%s.bad: %w", path, err)
	}
	if err := unix.Ftruncate(fd, cut); err != nil {
		return "", &os.PathError{Op: "truncate", Path: path, Err: err}
	}
	return fmt.Sprintf("%s: its last line was torn by a crash in the middle of an append: moved to %s.bad", path, path), nil
}

// maxTorn bounds the torn line MendTornEnd reads and moves: far more than
// a batch's append (500 cancels at once append some 200 KB), far less
// than would hurt a watcher that starts.
const maxTorn = 16 << 20

// lastLineStart returns where the last line of the file fd (size bytes)
// starts: size if it ends with a newline, else just after the newline
// before its torn last line (0 if it has none), read backwards from the
// end, a block at a time; or -1 if that line is longer than limit, found
// having read no more than a block past it.
func lastLineStart(fd int, size, limit int64) (int64, error) {
	buf := make([]byte, 64<<10)
	for end := size; end > 0; {
		if size-end > limit {
			return -1, nil
		}
		start := max(0, end-int64(len(buf)))
		n, err := unix.Pread(fd, buf[:end-start], start)
		if err != nil {
			return 0, err
		}
		if n < int(end-start) {
			return 0, fmt.Errorf("read %d bytes at %d, wanted %d: the file shrank", n, start, end-start)
		}
		b := buf[:n]
		if end == size && b[len(b)-1] == '\n' {
			return size, nil
		}
		if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
			return start + int64(i) + 1, nil
		}
		end = start
	}
	return 0, nil
}
