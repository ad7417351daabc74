package watcher

import (
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker/crashfs"
)

// A control request that recovery rejects (another user's file has its
// name in the spool) has its removal from claims/ durable once it is
// answered: a power loss must not bring it back there, for the next
// watcher to carry out what its owner was told was rejected. Checked on
// a crashfs, which keeps, at a cut, only what was synced, each half of a
// rename with its own directory: the power is cut as the answer is
// written, and claims/' sync is slowed, so that it cannot come just after
// the answer and before the cut.
func TestRestoreRejectedSyncsClaims(t *testing.T) {
	if err := crashfs.Prepare(); err != nil {
		if os.Getenv("TEND_REQUIRE_FUSE") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	backing, mnt := filepath.Join(t.TempDir(), "backing"), filepath.Join(t.TempDir(), "mnt")
	n := spool.Name{ID: "x", Verb: spool.VerbCancel, Owner: os.Getuid()}
	claimed := filepath.Join("claims", spool.ClaimedName(n))
	setup := newWatcher(Config{Root: backing, Log: io.Discard})
	for _, err := range []error{os.Mkdir(mnt, 0o755), setup.spool.Make(), setup.store.Make(), setup.spool.MakeClaims(),
		os.WriteFile(filepath.Join(backing, claimed), nil, 0o644),
		os.WriteFile(filepath.Join(backing, "spool", n.String()), nil, 0o644),
		os.Chown(filepath.Join(backing, "spool", n.String()), 4242, 4242)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	f, err := crashfs.Mount(backing, mnt)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Unmount()
	w := newWatcher(Config{Root: mnt, Log: io.Discard})
	f.SetSlowFlushes(func(fl crashfs.Flush) bool { return fl.Dir && fl.Path == "claims" }, 200*time.Millisecond)
	answers, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer answers.Close()
	if err := answers.Add(filepath.Dir(w.spool.OutcomePath(n))); err != nil {
		t.Fatal(err)
	}
	answered := make(chan bool, 1)
	go func() {
		_, ok := <-answers.Events
		if ok {
			f.Freeze()
		}
		answered <- ok
	}()
	w.restoreControls()
	select {
	case ok := <-answered:
		if !ok {
			t.Fatal("the answers' watch failed")
		}
	case <-time.After(5 * time.Second): // restoreControls has returned: it answers before
		t.Fatal("the rejected request was not answered")
	}
	if _, err := os.Lstat(filepath.Join(mnt, "rejected", n.String())); err != nil {
		t.Fatalf("the claimed request was not rejected: %v", err)
	}
	if err := f.Unmount(); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(t.TempDir(), "image")
	if _, err := f.Image(img, crashfs.Strict, rand.New(rand.NewPCG(1, 1))); err != nil {
		t.Fatal(err)
	}
	_, inRejected := os.Lstat(filepath.Join(img, "rejected", n.String()))
	_, inClaims := os.Lstat(filepath.Join(img, claimed))
	if inRejected == nil && inClaims == nil {
		t.Errorf("after a power loss, the request rejected at recovery is in claims/ again, to be carried out")
	}
}
