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
func MendTornEnd(root string) (string, error) {
	lockFD := -1
	if err := lockHistory(root, &lockFD, unix.LOCK_EX); errors.Is(err, os.ErrNotExist) {
		return "", nil
	} else if err != nil {
		return "", err
	}
	defer closeLock(&lockFD)
	path := layout.Root(root).History()
	if _, err := checkEnd(path); !errors.Is(err, ErrTornEnd) {
		return "", err
	}
	b, _, err := durable.ReadRegular(path, DefaultMaxHistorySize*4)
	if err != nil {
		return "", err
	}
	cut := bytes.LastIndexByte(b, '\n') + 1
	torn := b[cut:]
	if !bytes.HasPrefix(torn, []byte(`{"time":"`)) {
		return "", nil
	}
	side, err := os.OpenFile(path+".bad", os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return "", err
	}
	_, err = side.Write(append(torn, '\n'))
	if err == nil {
		err = side.Sync()
	}
	if cerr := side.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("%s.bad: %w", path, err)
	}
	if err := os.Truncate(path, int64(cut)); err != nil {
		return "", err
	}
	if err := syncData(path, durable.FlushRepair); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s: its last line was torn by a crash in the middle of an append: moved to %s.bad", path, path), nil
}
