package watcher

import (
	"os"
	"testing"

	"github.com/tendhq/tend/tracker"
	"golang.org/x/sys/unix"
)

// A gate file holds closed for its process to write passed over, through
// a descriptor at offset 0; the line is synced (O_DSYNC) only where the
// watcher does not know the boot, which otherwise stands for the flush
// (see gateTrusted).
func TestGateSyncedOnlyWithoutBoot(t *testing.T) {
	for _, tc := range []struct {
		boot       string
		durability tracker.Durability
		synced     bool
	}{
		{"", tracker.PowerLoss, true},
		{"a-boot", tracker.PowerLoss, false},
		{"", tracker.WatcherCrash, false},
		{"a-boot", tracker.WatcherCrash, false},
	} {
		w := batchWatcher(t)
		w.boot, w.settings.Durability = tc.boot, tc.durability
		st := &tracker.State{ID: "g", OwnerUID: os.Getuid()}
		if err := os.Mkdir(w.store.RunDir(st.ID), 0o755); err != nil {
			t.Fatal(err)
		}
		fd, err := w.openGateFile(st)
		if err != nil {
			t.Fatal(err)
		}
		path := w.store.Run(st.ID).Gate()
		if b, _ := os.ReadFile(path); string(b) != gateClosed {
			t.Errorf("boot %q, %s: the gate holds %q, want %q", tc.boot, tc.durability, b, gateClosed)
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
		if err != nil {
			t.Fatal(err)
		}
		if synced := flags&unix.O_DSYNC != 0; synced != tc.synced {
			t.Errorf("boot %q, %s: the gate's descriptor synced %v, want %v", tc.boot, tc.durability, synced, tc.synced)
		}
		if _, err := unix.Write(fd, []byte(gatePassed)); err != nil {
			t.Fatal(err)
		}
		unix.Close(fd)
		if b, _ := os.ReadFile(path); string(b) != gatePassed {
			t.Errorf("boot %q, %s: once written, the gate holds %q, want %q", tc.boot, tc.durability, b, gatePassed)
		}
	}
}
