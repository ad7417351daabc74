package durable

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// A Flush is one of the fsyncs tend makes, by name: each protects
// something a power loss would otherwise take (docs/design.md has the
// table, and the test that fails without each). The power-loss trial
// removes them one at a time (make powerloss-mutants, a build with the
// tendmutants tag) to show that it notices each one missing.
type Flush string

const (
	// FlushRecord: a run's new state.json, before it replaces the old one.
	FlushRecord Flush = "record"
	// FlushRecordDir: a run's directory, once its new state.json is in it.
	FlushRecordDir Flush = "record-dir"
	// FlushRunsDir: runs/, once a run's directory was made in it.
	FlushRunsDir Flush = "runs-dir"
	// FlushRootDirs: the root, once tend made runs/ or rejected/ in it
	// (the watcher syncs it as it starts, having made what was missing).
	FlushRootDirs Flush = "root-dirs"
	// FlushClaim: the spool, once requests were claimed from it (renamed
	// out) or queued in it, beside the records written after, or put
	// back in it from claims/ at recovery.
	FlushClaim Flush = "claim"
	// FlushMovedOut: the spool and the run's directory, once the request
	// of a queued run that is to end without starting (canceled) was
	// moved from the one to the other, before the run's end is written.
	FlushMovedOut Flush = "moved-out"
	// FlushQueued: a queued run's request, left in the spool, beside its
	// queued record: it is what the run starts with.
	FlushQueued Flush = "queued"
	// FlushClaimed: a request claimed, beside the records of what it
	// does: a start's, in its run's directory, is what the run is started
	// from again if it never passed its gate, and what a service is
	// restarted from; a control request's, in claims/, is what is taken
	// again if its removal is lost. Its writer need not have synced it.
	FlushClaimed Flush = "claimed"
	// FlushSeen: a run's directory, by a client that read its record and
	// acts on it (tend wait), before it does.
	FlushSeen Flush = "seen"
	// FlushGate: a run's gate file, written by its process once past its
	// gate, before the command runs (a write with O_DSYNC), where the
	// watcher cannot read the boot's ID; where it can, the boot recorded
	// with the run stands for it (a run of an earlier boot may have passed
	// its gate, whatever the file says), and is left out with it.
	FlushGate Flush = "gate"
	// FlushTrash: runs/, once a deleted run's directory was renamed aside.
	FlushTrash Flush = "trash"
	// FlushHistory: history.jsonl, with the lines appended before the
	// records written with them.
	FlushHistory Flush = "history"
	// FlushHistoryDir: the root, once an append made history.jsonl (or
	// rotated it).
	FlushHistoryDir Flush = "history-dir"
	// FlushReason: rejected/<name>.error, before it has its name.
	FlushReason Flush = "reason"
	// FlushReasonDir: rejected/, once <name>.error is in it, before the
	// request joins it.
	FlushReasonDir Flush = "reason-dir"
	// FlushRejected: rejected/, once the request is in it; and once the
	// requests the retention removes are gone from it, before their
	// reasons go (tracker.ExpireRejected).
	FlushRejected Flush = "rejected-dir"
	// FlushKey: record.key, before it is used.
	FlushKey Flush = "key"
	// FlushKeyDir: the root, once record.key is in it.
	FlushKeyDir Flush = "key-dir"
	// FlushConfig: config.json as tend up --shared writes it.
	FlushConfig Flush = "config"
	// FlushConfigDir: the root, once that config.json is in it.
	FlushConfigDir Flush = "config-dir"
	// FlushRepair: a history file tend fsck --repair rewrote, before it
	// has its name, and the history once it appended to it; and the
	// reason it writes for a rejected request whose own was lost, before
	// it has its name, and rejected/ after.
	FlushRepair Flush = "repair"
	// FlushStartLog: startlog, once a run's first launch is written there
	// (its record, request and history lines), before its gate opens; and
	// once the watcher made it, every block written.
	FlushStartLog Flush = "start-log"
)

// Flushes returns every Flush tend makes.
func Flushes() []Flush {
	return []Flush{FlushRecord, FlushRecordDir, FlushRunsDir, FlushRootDirs, FlushClaim, FlushMovedOut, FlushQueued, FlushClaimed, FlushSeen, FlushGate, FlushTrash, FlushHistory, FlushHistoryDir, FlushReason, FlushReasonDir, FlushRejected,
		FlushKey, FlushKeyDir, FlushConfig, FlushConfigDir, FlushRepair, FlushStartLog}
}

// A FlushError is a flush that failed in the sync itself, not in opening
// what it was to sync. After one, what was written before may be lost
// though a flush tried again succeeds: the kernel reports a write-back
// error to one caller only.
type FlushError struct {
	Flush Flush
	Err   error
}

func (e *FlushError) Error() string { return e.Err.Error() }
func (e *FlushError) Unwrap() error { return e.Err }

// Fsync fsyncs fd, as f.
func (f Flush) Fsync(fd int) error {
	if f.removed() {
		markFD(fd)
		return nil
	}
	if err := f.failing(); err != nil {
		return err
	}
	if err := unix.Fsync(fd); err != nil {
		return &FlushError{f, err}
	}
	return nil
}

// Fdatasync fdatasyncs fd, as f: its data and size, not its other
// metadata.
func (f Flush) Fdatasync(fd int) error {
	if f.removed() {
		markFD(fd)
		return nil
	}
	if err := f.failing(); err != nil {
		return err
	}
	if err := unix.Fdatasync(fd); err != nil {
		return &FlushError{f, err}
	}
	return nil
}

// failing returns the error f fails with, without syncing, where the
// tests make it fail ($TEND_TEST_FAIL_FLUSH names it, in every tend
// process started with it): no disk here can be made to fail an fsync,
// and each of tend's flushes must have its failure recorded.
func (f Flush) failing() *FlushError {
	if string(f) != os.Getenv("TEND_TEST_FAIL_FLUSH") {
		return nil
	}
	return &FlushError{f, fmt.Errorf("flush %s: %w (TEND_TEST_FAIL_FLUSH)", f, unix.EIO)}
}

// Removed reports whether f is left out, as the power-loss trial's mutants
// leave one out (never in tend itself). What stands for a flush where it
// is not made (the boot check that stands for the gate's) is left out
// with it.
func (f Flush) Removed() bool { return f.removed() }

// SyncFlag returns the flag that makes every write to a file opened with
// it durable as f (O_DSYNC).
func (f Flush) SyncFlag() int {
	if f.removed() {
		return 0
	}
	return unix.O_DSYNC
}

// SyncDir fsyncs directory dir, as f: the names made, renamed or removed
// in it are durable once it returns.
func (f Flush) SyncDir(dir string) error {
	if f.removed() {
		markPath(dir)
		return nil
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	if err := f.failing(); err != nil {
		return &FlushError{f, fmt.Errorf("fsync %s: %w", dir, err.Err)}
	}
	if err := unix.Fsync(fd); err != nil && !errors.Is(err, unix.EINVAL) {
		return &FlushError{f, fmt.Errorf("fsync %s: %w", dir, err)}
	}
	return nil
}

// Durable names the two flushes of a durable replace (Replace,
// ReplaceAll): the new file's, before it has its name, and its
// directory's, after.
type Durable struct {
	File, Dir Flush
	// RenameNew, in ReplaceAll, gives a file that does not exist yet its
	// name before its flush, so that one journal commit makes both its
	// data and its name durable, where a file's flush and then its
	// directory's take two on a journaled ext4. Until ReplaceAll returns
	// without an error, a crash may then leave such a file empty or torn
	// on a file system that does not commit a new file's data (its blocks
	// allocated by the write-back started before the rename) before its
	// name: set it only where one does (procfs.OrdersNewData), or for
	// files whose readers take an unreadable one for a missing one.
	//
	// ReplaceAll renames a file over one that exists early too if asked
	// to (its early): a journaled ext4 in data=ordered also writes the
	// blocks of a file renamed over another before the commit that
	// renames it (its auto_da_alloc), and the rename, which changes the
	// file's inode, is in the transaction its fsync commits. A crash
	// before then leaves the old file or the new one whole; which, a
	// reader cannot know until ReplaceAll returns.
	RenameNew bool
}
