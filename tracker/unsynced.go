package tracker

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/tendhq/tend/procfs"
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
	unix.Fchmod(fd, 0o644) // whatever the umask: members read it (tend status)
	line := "written with durability watcher_crash since " + now.UTC().Format(time.RFC3339) + "; the next watcher with power_loss syncs first\n"
	if err := durable.WriteAll(fd, []byte(line)); err != nil {
		return &os.PathError{Op: "write", Path: path, Err: err}
	}
	return nil
}

// NoteSyncFailure appends to root's unsynced file (made if it is not
// there) that a flush failed at now, in boot (procfs.BootID), with
// syncErr (cut to maxFailure bytes), and syncs the file: on a disk whose
// write-back fails, that may fail too.
func NoteSyncFailure(root string, now time.Time, boot string, syncErr error) error {
	path := layout.Root(root).Unsynced()
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_APPEND|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	unix.Fchmod(fd, 0o644) // whatever the umask: members read it (tend status, a late answer)
	msg := strings.ReplaceAll(syncErr.Error(), "\n", " ")
	if len(msg) > maxFailure {
		msg = strings.ToValidUTF8(msg[:maxFailure], "") + "..."
	}
	line := syncFailed + "at " + now.UTC().Format(time.RFC3339) + " in boot " + boot + ": " + msg + "\n"
	if err := durable.WriteAll(fd, []byte(line)); err != nil {
		return &os.PathError{Op: "write", Path: path, Err: err}
	}
	if err := unix.Fsync(fd); err != nil {
		return &os.PathError{Op: "fsync", Path: path, Err: err}
	}
	return nil
}

// maxFailure bounds the error a failure's line keeps: a flush of many
// directories fails with all of their errors joined.
const maxFailure = 1 << 10

// SyncFailure returns the first failed flush root's unsynced file records
// ("at <time> in boot <id>: <error>"), or "" if it records none or is
// not there, and whether one of those it records failed in boot (the
// current one, for tend fsck). A file that cannot be read whole, or is
// not a regular file, is reported as a failure of this boot: nothing
// then says what was synced.
func SyncFailure(root, boot string) (failure string, thisBoot bool) {
	path := layout.Root(root).Unsynced()
	b, _, err := durable.ReadRegular(path, maxUnsynced)
	if errors.Is(err, os.ErrNotExist) {
		return "", false
	}
	if err != nil {
		return path + " cannot be read: " + strings.TrimPrefix(err.Error(), path+": "), true
	}
	return syncFailures(b, boot)
}

// RecordedSyncFailure is SyncFailure for a client that tells its user why
// an answer is late: only a failure the file records counts, not one it
// cannot read (a member of a shared root may not).
func RecordedSyncFailure(root, boot string) (failure string, thisBoot bool) {
	b, _, err := durable.ReadRegular(layout.Root(root).Unsynced(), maxUnsynced)
	if err != nil {
		return "", false
	}
	return syncFailures(b, boot)
}

// syncFailures returns the first failure the unsynced file's content b
// records, and whether one it records is of boot.
func syncFailures(b []byte, boot string) (failure string, thisBoot bool) {
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), syncFailed); ok {
			if failure == "" {
				failure = rest
			}
			thisBoot = thisBoot || boot != "" && strings.Contains(rest, " in boot "+boot+": ")
		}
	}
	return failure, thisBoot
}

// SyncFailureProblem says what a failed flush that root's unsynced file
// records means, and what to do, or "" if it records none: for tend
// status and tend top.
func SyncFailureProblem(root string) string {
	if p, ok := syncFailureProblem(root); ok {
		return p.String()
	}
	return ""
}

// syncFailureProblem is the Problem a failed flush that root's unsynced
// file records is, for tend fsck. After a write-back error the kernel
// keeps the pages it could not write, clean, in its cache: until the
// machine restarts (or the cache lets them go), tend fsck reads them as
// written.
func syncFailureProblem(root string) (Problem, bool) {
	boot, _ := procfs.BootID()
	failure, thisBoot := SyncFailure(root, boot)
	if failure == "" {
		return Problem{}, false
	}
	what := "a flush failed (" + failure + "): what a watcher wrote before then may be lost; "
	if thisBoot {
		what += "it still reads as written until the machine restarts (the page cache keeps it), so after a restart "
	}
	what += "tend fsck checks the records and the history against each other, and tend fsck --repair, once it finds nothing else wrong, removes this file"
	return Problem{layout.Root(root).Unsynced(), what}, true
}

// ErrFailedThisBoot is ClearSyncFailure's refusal: the flush failed in
// this boot, and what it lost reads as written until a restart.
var ErrFailedThisBoot = errors.New("a flush failed in this boot: what it lost reads as written until the machine restarts; run tend fsck --repair again after a restart")

// ClearSyncFailure syncs root's file system and, if that succeeds,
// removes root's unsynced file: tend fsck --repair does, once it finds
// nothing else wrong, holding watchers off (HoldOffWatcher). It fails
// (ErrFailedThisBoot) if a failure the file records is of this boot.
func ClearSyncFailure(root string) error {
	boot, err := procfs.BootID()
	if err != nil {
		return err
	}
	if _, thisBoot := SyncFailure(root, boot); thisBoot {
		return ErrFailedThisBoot
	}
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
