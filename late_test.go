package tend

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/gofrs/flock"
	"golang.org/x/sys/unix"
)

// TestFullText: a client tells why an answer is late when the root's
// file system is full as tend status counts it (under 1 MiB free, or
// under 100 inodes), and says nothing otherwise.
func TestFullText(t *testing.T) {
	tests := []struct {
		name string
		fs   unix.Statfs_t
		want string
	}{
		{"no space", unix.Statfs_t{Bavail: 0, Bsize: 4096, Files: 1000, Ffree: 500}, "full (0 bytes free)"},
		{"under 1 MiB", unix.Statfs_t{Bavail: 255, Bsize: 4096, Files: 1000, Ffree: 500}, "full (1044480 bytes free)"},
		{"1 MiB", unix.Statfs_t{Bavail: 256, Bsize: 4096, Files: 1000, Ffree: 500}, ""},
		{"no inodes", unix.Statfs_t{Bavail: 1 << 20, Bsize: 4096, Files: 1000, Ffree: 3}, "out of inodes (3 free)"},
		{"no inode count", unix.Statfs_t{Bavail: 1 << 20, Bsize: 4096}, ""},
	}
	for _, tt := range tests {
		if got := fullText(tt.fs); got != tt.want {
			t.Errorf("%s: fullText = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// TestStoppedWatcher: a watcher that runs (holds its lock) but is stopped
// is told from one that runs on; a root with none has none stopped.
func TestStoppedWatcher(t *testing.T) {
	root := t.TempDir()
	if pid := stoppedWatcher(root); pid != 0 {
		t.Fatalf("no watcher: stopped pid %d", pid)
	}
	lock := flock.New(filepath.Join(root, "watcher.lock"))
	if err := lock.Lock(); err != nil {
		t.Fatal(err)
	}
	defer lock.Unlock()
	sleep := exec.Command("sleep", "60")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sleep.Process.Kill(); sleep.Wait() }()
	pid := sleep.Process.Pid
	if err := os.WriteFile(filepath.Join(root, "watcher.pid"), []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := stoppedWatcher(root); got != 0 {
		t.Fatalf("a running watcher: stopped pid %d", got)
	}
	unix.Kill(pid, unix.SIGSTOP)
	deadline := time.Now().Add(10 * time.Second)
	for stoppedWatcher(root) != pid {
		if time.Now().After(deadline) {
			t.Fatalf("watcher %d stopped, not found so", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	unix.Kill(pid, unix.SIGCONT)
	for stoppedWatcher(root) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("watcher %d continued, still found stopped", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
