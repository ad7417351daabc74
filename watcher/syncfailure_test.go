package watcher

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tendhq/tend/tracker"
	"github.com/tendhq/tend/tracker/durable"
	"golang.org/x/sys/unix"
)

// A flush that failed in its sync is recorded in the root's unsynced
// file, once a watcher, for tend status and fsck: the flush tried again
// succeeds whatever it lost. A sync that could not open what it was to
// sync (a file a user could put in the way) is logged only.
func TestFlushFailureRecorded(t *testing.T) {
	eio := &durable.FlushError{Flush: durable.FlushHistory, Err: unix.EIO}
	tests := []struct {
		name string
		fail func(w *watcher)
		want string // in what the file records; "" for nothing
	}{
		{"history", func(w *watcher) { w.historySynced(eio) }, "history: input/output error"},
		{"history twice", func(w *watcher) {
			w.historySynced(eio)
			w.historySynced(&durable.FlushError{Flush: durable.FlushHistory, Err: unix.ENOSPC})
		}, "history: input/output error"},
		{"the notice written at the second try", func(w *watcher) {
			os.Mkdir(w.root().Unsynced(), 0o755) // cannot be appended to
			w.historySynced(eio)
			os.Remove(w.root().Unsynced())
			w.historySynced(&durable.FlushError{Flush: durable.FlushHistory, Err: unix.ENOSPC})
		}, "history: no space left on device"},
		{"a claim's directory not opened", func(w *watcher) {
			file := filepath.Join(w.cfg.Root, "file")
			os.WriteFile(file, nil, 0o644)
			w.claimDirs[filepath.Join(file, "sub")] = false
			w.settings.Durability = tracker.PowerLoss
			w.syncRestored(true, false)
		}, ""},
		{"a queued request not opened", func(w *watcher) {
			w.syncFailed(errors.New("x.start: keeping it: too many levels of symbolic links"))
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWatcher(Config{Root: t.TempDir(), Log: io.Discard})
			tt.fail(w)
			got, _ := tracker.SyncFailure(w.cfg.Root, "")
			if tt.want == "" && got != "" || !strings.Contains(got, tt.want) {
				t.Errorf("recorded %q, want %q", got, tt.want)
			}
			if b, _ := os.ReadFile(w.root().Unsynced()); strings.Count(string(b), "\n") > 1 {
				t.Errorf("recorded more than once:\n%s", b)
			}
		})
	}
}
