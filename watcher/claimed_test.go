package watcher

import (
	"io"
	"log"
	"os"
	"path/filepath"
	"testing"

	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
	"golang.org/x/sys/unix"
)

// TestKeepClaimed: a claimed request is kept to sync only if it is the
// file claimed, no larger than a request may be; what is kept is closed
// by the next writeRecords, synced or (watcher_crash) not.
func TestKeepClaimed(t *testing.T) {
	for _, tc := range []struct {
		name     string
		size     int
		replaced bool
		crash    bool // the durability turned to watcher_crash before the flush
		kept     bool
	}{
		{name: "the file claimed", size: 20, kept: true},
		{name: "replaced since", size: 20, replaced: true},
		{name: "larger than a request", size: 2 * spool.MaxBody},
		{name: "durability changed before the flush", size: 20, crash: true, kept: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			w := &watcher{do: make(chan func(), 4), cfg: Config{Root: root}, store: tracker.NewStore(root), log: log.New(io.Discard, "", 0)}
			w.settings.Durability = tracker.PowerLoss
			path := filepath.Join(root, "request")
			if err := os.WriteFile(path, make([]byte, tc.size), 0o600); err != nil {
				t.Fatal(err)
			}
			var st unix.Stat_t
			if err := unix.Stat(path, &st); err != nil {
				t.Fatal(err)
			}
			claimed := spool.File{Dev: st.Dev, Ino: st.Ino}
			if tc.replaced {
				claimed.Ino++
			}
			w.keepClaimed(path, claimed)
			if kept := len(w.unsyncedClaims) == 1; kept != tc.kept {
				t.Fatalf("kept to sync: %v, want %v", kept, tc.kept)
			}
			if !tc.kept {
				return
			}
			fd := w.unsyncedClaims[0].fd
			if tc.crash {
				w.settings.Durability = tracker.WatcherCrash
			}
			w.writeRecords(nil, nil)
			if len(w.unsyncedClaims) != 0 {
				t.Errorf("still kept after writeRecords: %d", len(w.unsyncedClaims))
			}
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil {
				t.Errorf("descriptor %d still open after writeRecords", fd)
			}
		})
	}
}

// TestHasContent: a control request's content is synced only if a power
// loss could take back something it says.
func TestHasContent(t *testing.T) {
	for body, want := range map[string]bool{
		"":                    false,
		"\n":                  false,
		"{}":                  false,
		" {}\n":               false,
		"{\"session\":\"s\"}": true,
		"USR1\n":              true,
		"a=b\n":               true,
	} {
		if got := hasContent([]byte(body)); got != want {
			t.Errorf("hasContent(%q) = %v, want %v", body, got, want)
		}
	}
}
