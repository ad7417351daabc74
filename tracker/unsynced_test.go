package tracker

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gofrs/flock"
	"github.com/tendhq/tend/procfs"
	"github.com/tendhq/tend/tracker/layout"
	"golang.org/x/sys/unix"
)

// A failed flush is found in the unsynced file after its first line, and
// only there, with whether it was of the boot asked about; a file that
// cannot be trusted or read whole counts as a failure of this boot.
func TestSyncFailure(t *testing.T) {
	when := time.Date(2026, 11, 29, 1, 2, 3, 0, time.UTC)
	long := errors.New(strings.Repeat("fsync /r/runs/x: input/output error\n", 2000))
	tests := []struct {
		name     string
		make     func(root string) error
		found    string // "" for none; else a part of what SyncFailure says
		thisBoot bool   // of boot "b1"
	}{
		{"absent", func(string) error { return nil }, "", false},
		{"marked", func(root string) error { return MarkUnsynced(root, when) }, "", false},
		{"failed once", func(root string) error {
			MarkUnsynced(root, when)
			return NoteSyncFailure(root, when, "b1", errors.New("input/output\\nerror"))
		}, "at 2026-11-29T01:02:03Z in boot b1: input/output\\nerror", true},
		{"failed in another boot", func(root string) error {
			return NoteSyncFailure(root, when, "b0", errors.New("two\nlines"))
		}, "at 2026-11-29T01:02:03Z in boot b0: two lines", false},
		{"failed in both", func(root string) error {
			NoteSyncFailure(root, when, "b0", errors.New("first"))
			return NoteSyncFailure(root, when, "b1", errors.New("second"))
		}, "in boot b0: first", true},
		{"a long error, cut", func(root string) error {
			return NoteSyncFailure(root, when, "b0", long)
		}, "input/output error fsync /r/runs/x", false},
		{"a line longer than is read", func(root string) error {
			return os.WriteFile(layout.Root(root).Unsynced(), []byte("sync failed "+strings.Repeat("x", maxUnsynced+1)+"\n"), 0o644)
		}, "cannot be read", true},
		{"a symlink", func(root string) error {
			os.WriteFile(filepath.Join(root, "elsewhere"), []byte("sync failed never\n"), 0o644)
			return os.Symlink("elsewhere", layout.Root(root).Unsynced())
		}, "cannot be read: a symbolic link", true},
		{"a directory", func(root string) error { return os.Mkdir(layout.Root(root).Unsynced(), 0o755) }, "cannot be read: a directory", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			if err := tt.make(root); err != nil {
				t.Fatal(err)
			}
			got, thisBoot := SyncFailure(root, "b1")
			if tt.found == "" && got != "" || !strings.Contains(got, tt.found) || thisBoot != tt.thisBoot {
				t.Errorf("SyncFailure = %q, %v; want %q, %v", got, thisBoot, tt.found, tt.thisBoot)
			}
			if len(got) > 2*maxFailure {
				t.Errorf("SyncFailure returned %d bytes", len(got))
			}
			problem := SyncFailureProblem(root)
			if (got == "") != (problem == "") || got != "" && !strings.Contains(problem, got) {
				t.Errorf("SyncFailureProblem = %q, for a failure %q", problem, got)
			}
		})
	}
}

// ClearSyncFailure removes the file once it has synced, unless a failure
// it records is of this boot: what that one lost still reads as written.
func TestClearSyncFailure(t *testing.T) {
	boot, err := procfs.BootID()
	if err != nil {
		t.Skip("no boot ID:", err)
	}
	root := t.TempDir()
	if err := NoteSyncFailure(root, time.Now(), "an-earlier-boot", errors.New("input/output error")); err != nil {
		t.Fatal(err)
	}
	if err := ClearSyncFailure(root); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(layout.Root(root).Unsynced()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the unsynced file is still there: %v", err)
	}
	if p := Check(root, func(int, uint64) bool { return false }); len(p) != 0 {
		t.Errorf("Check found %v", p)
	}
	if err := NoteSyncFailure(root, time.Now(), boot, errors.New("input/output error")); err != nil {
		t.Fatal(err)
	}
	if err := ClearSyncFailure(root); !errors.Is(err, ErrFailedThisBoot) {
		t.Errorf("ClearSyncFailure after a failure of this boot = %v, want ErrFailedThisBoot", err)
	}
	if p := SyncFailureProblem(root); !strings.Contains(p, "until the machine restarts") {
		t.Errorf("the problem of a failure of this boot says %q", p)
	}
}

// HoldOffWatcher keeps a watcher from taking the root's lock until it is
// released, making the lock file if it is missing, and fails while a
// watcher holds it.
func TestHoldOffWatcher(t *testing.T) {
	root := t.TempDir()
	release, err := HoldOffWatcher(root)
	if err != nil {
		t.Fatal(err)
	}
	watcher := flock.New(layout.Root(root).WatcherLock())
	if got, err := watcher.TryLock(); got || err != nil {
		t.Fatalf("a watcher took the lock held off: %v, %v", got, err)
	}
	release()
	if got, err := watcher.TryLock(); !got || err != nil {
		t.Fatalf("a watcher could not take the lock once released: %v, %v", got, err)
	}
	defer watcher.Unlock()
	if _, err := HoldOffWatcher(root); err == nil || !strings.Contains(err.Error(), "a watcher runs on") {
		t.Errorf("HoldOffWatcher while a watcher runs = %v", err)
	}
}

// The unsynced file is readable by members whatever the watcher's umask,
// and a client that cannot read it reports no failure: only one the file
// records is told as a late answer's reason.
func TestUnsyncedReadable(t *testing.T) {
	root := t.TempDir()
	old := unix.Umask(0o077)
	err := NoteSyncFailure(root, time.Now(), "b1", errors.New("EIO"))
	unix.Umask(old)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(layout.Root(root).Unsynced())
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("unsynced: %v, %v; want mode 0644", fi.Mode(), err)
	}
	if failure, thisBoot := RecordedSyncFailure(root, "b1"); !thisBoot || !strings.Contains(failure, "EIO") {
		t.Errorf("RecordedSyncFailure = %q, %v", failure, thisBoot)
	}
	os.Remove(layout.Root(root).Unsynced())
	if err := os.Mkdir(layout.Root(root).Unsynced(), 0o755); err != nil { // cannot be read as a file
		t.Fatal(err)
	}
	if failure, thisBoot := RecordedSyncFailure(root, "b1"); thisBoot || failure != "" {
		t.Errorf("an unreadable file: RecordedSyncFailure = %q, %v; want nothing", failure, thisBoot)
	}
	if _, thisBoot := SyncFailure(root, "b1"); !thisBoot {
		t.Errorf("an unreadable file: SyncFailure says no failure; fsck must count it")
	}
}
