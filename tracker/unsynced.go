package tracker

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/tendhq/tend/tracker/durable"
	"github.com/tendhq/tend/tracker/layout"
	"golang.org/x/sys/unix"
)

// The root's unsynced file (layout.Root.Unsynced) says that what a
// watcher wrote may not be on disk: with durability watcher_crash, its
// first line, written by MarkUnsynced, says since when. A watcher whose
// flush fails (the syncfs(2) that ends watcher_crash, or an fsync under
// power_loss) appends a line (NoteSyncFailure), made if it was not there,
// and from then on the file is not removed by a sync that succeeds: the
// kernel reports a write-back error to one caller only, so the flush
// that tries again succeeds whatever the failed one lost. It stays until
// tend fsck --repair finds nothing else wrong (ClearSyncFailure).

// syncFailed begins each line that records a failed sync.
const syncFailed = "sync failed "

// maxUnsynced bounds what is read of the file: a line per failed sync.
const maxUnsynced = 64 << 10

// MarkUnsynced makes root's unsynced file, if it is not there. It needs
// no flush of its own: a power loss that takes it back takes back what
// was written after it too.
func MarkUnsynced(root string, now time.Time) error {
	path := layout.Root(root).Unsynced()
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if errors.Is(err, unix.EEXIST) {
		return nil
	}
	if err != nil {
		return &os.PathError{Op: "create", Path: path, Err: err}
	}
	defer unix.Close(fd)
	line := "written with durability watcher_crash since " + now.UTC().Format(time.RFC3339) + "; the next watcher with power_loss syncs first\n"
	if err := durable.WriteAll(fd, []byte(line)); err != nil {
		return &os.PathError{Op: "write", Path: path, Err: err}
	}
	return nil
}

// NoteSyncFailure appends to root's unsynced file (made if it is not
// there) that a flush failed at now with syncErr, and syncs the file: on
// a disk whose write-back fails, that may fail too.
func NoteSyncFailure(root string, now time.Time, syncErr error) error {
	path := layout.Root(root).Unsynced()
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_APPEND|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	msg := strings.ReplaceAll(syncErr.Error(), "\n", " ")
	line := syncFailed + "at " + now.UTC().Format(time.RFC3339) + ": " + msg + "\n"
	if err := durable.WriteAll(fd, []byte(line)); err != nil {
		return &os.PathError{Op: "write", Path: path, Err: err}
	}
	if err := unix.Fsync(fd); err != nil {
		return &os.PathError{Op: "fsync", Path: path, Err: err}
	}
	return nil
}

// SyncFailure returns the first failed sync root's unsynced file records
// ("at <time>: <error>"), or "" if it records none or is not there. A
// file that cannot be read, or is not a regular file, is reported as a
// failure: nothing then says what was synced.
func SyncFailure(root string) string {
	path := layout.Root(root).Unsynced()
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if errors.Is(err, os.ErrNotExist) {
		return ""
	}
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return path + " is not a regular file"
	}
	sc := bufio.NewScanner(io.LimitReader(f, maxUnsynced))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), syncFailed); ok {
			return rest
		}
	}
	return ""
}

// SyncFailureProblem says what a failed sync that root's unsynced file
// records means, and what to do, or "" if it records none: for tend
// status.
func SyncFailureProblem(root string) string {
	if failure := SyncFailure(root); failure != "" {
		return layout.Root(root).Unsynced() + ": " + syncFailureWhat(failure)
	}
	return ""
}

// syncFailureWhat says what failure, a failed sync, means, and what to do.
func syncFailureWhat(failure string) string {
	return "a flush failed (" + failure + "): what a watcher wrote before then may be lost; " +
		"tend fsck checks the records, and tend fsck --repair, once nothing else is wrong, removes this file"
}

// ClearSyncFailure syncs root's file system and, if that succeeds,
// removes root's unsynced file: tend fsck --repair does, once it finds
// nothing else wrong, with no watcher running.
func ClearSyncFailure(root string) error {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: root, Err: err}
	}
	defer unix.Close(fd)
	if err := unix.Syncfs(fd); err != nil {
		return fmt.Errorf("syncing %s's file system: %w", root, err)
	}
	if err := os.Remove(layout.Root(root).Unsynced()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
