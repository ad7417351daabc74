package tracker

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tendhq/tend/tracker/layout"
)

// A failed sync is found in the unsynced file after its first line, and
// only there; a file that cannot be trusted counts as a failure.
func TestSyncFailure(t *testing.T) {
	when := time.Date(2026, 11, 29, 1, 2, 3, 0, time.UTC)
	tests := []struct {
		name  string
		make  func(root string) error
		found string // "" for none; else a part of what SyncFailure says
	}{
		{"absent", func(string) error { return nil }, ""},
		{"marked", func(root string) error { return MarkUnsynced(root, when) }, ""},
		{"failed once", func(root string) error {
			MarkUnsynced(root, when)
			return NoteSyncFailure(root, when, errors.New("input/output\\nerror"))
		}, "at 2026-11-29T01:02:03Z: input/output\\nerror"},
		{"failed with no mark", func(root string) error {
			return NoteSyncFailure(root, when, errors.New("two\nlines"))
		}, "at 2026-11-29T01:02:03Z: two lines"},
		{"a symlink", func(root string) error {
			os.WriteFile(filepath.Join(root, "elsewhere"), []byte("sync failed never\n"), 0o644)
			return os.Symlink("elsewhere", layout.Root(root).Unsynced())
		}, "too many levels of symbolic links"},
		{"a directory", func(root string) error { return os.Mkdir(layout.Root(root).Unsynced(), 0o755) }, "is not a regular file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			if err := tt.make(root); err != nil {
				t.Fatal(err)
			}
			got := SyncFailure(root)
			if tt.found == "" && got != "" || !strings.Contains(got, tt.found) {
				t.Errorf("SyncFailure = %q, want %q", got, tt.found)
			}
			problem := SyncFailureProblem(root)
			if (got == "") != (problem == "") || got != "" && !strings.Contains(problem, got) {
				t.Errorf("SyncFailureProblem = %q, for a failure %q", problem, got)
			}
		})
	}
}

// ClearSyncFailure removes the file, failure and all, once it has synced.
func TestClearSyncFailure(t *testing.T) {
	root := t.TempDir()
	if err := NoteSyncFailure(root, time.Now(), errors.New("input/output error")); err != nil {
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
}
