package tracker

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gofrs/flock"
	"golang.org/x/sys/unix"
)

// A history.lock removed by hand is not a lock the watcher keeps holding
// alone: the next append locks the new file, which others lock too.
func TestHistoryRelocksAReplacedLockFile(t *testing.T) {
	_, root := newStore(t)
	h := OpenHistory(root)
	if err := h.Append(Event{ID: "a", Rev: 1, State: Running, Time: time.Now()}); err != nil {
		t.Fatal(err)
	}
	lock := filepath.Join(root, "history.lock")
	os.Remove(lock)
	if err := h.Append(Event{ID: "a", Rev: 2, State: Completed, Time: time.Now()}); err != nil {
		t.Fatal(err)
	}
	var held, now unix.Stat_t
	if err := unix.Fstat(h.lockFD, &held); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(lock, &now); err != nil || held.Ino != now.Ino {
		t.Fatalf("the history holds inode %d; history.lock is %d (%v)", held.Ino, now.Ino, err)
	}
	// Another process's lock on the new file now excludes the history's.
	other := flock.New(lock)
	if ok, err := other.TryLock(); !ok || err != nil {
		t.Fatalf("TryLock: %v, %v", ok, err)
	}
	defer other.Unlock()
	done := make(chan error)
	go func() { done <- h.Append(Event{ID: "b", Rev: 1, State: Running, Time: time.Now()}) }()
	select {
	case err := <-done:
		t.Fatalf("appended while another held the lock: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	other.Unlock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
