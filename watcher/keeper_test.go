package watcher

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/tendhq/tend/procfs"
)

// While a leader is left unreaped (its exit record refused), the keeper
// finds its other exited children in /proc, every process's stat read: it
// does so at most every scanEvery, however many SIGCHLDs a run sends (a
// child stopped and continued in a loop), and takes every child one scan
// found before it scans again.
func TestKeeperPeekChildPastUnrecorded(t *testing.T) {
	start := func() int {
		t.Helper()
		cmd := exec.Command("/bin/true")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pid := cmd.Process.Pid
		t.Cleanup(func() { procfs.ReapChild(pid) })
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if _, ok, err := procfs.PeekChild(pid); err == nil && ok {
				return pid
			}
		}
		t.Fatalf("pid %d did not exit in 5 s", pid)
		return 0
	}
	// Which child the kernel reports first depends on the thread that
	// started it: the one left unreaped may hide the others, or not.
	// Children earlier tests left unreaped are zombies of this process
	// too: taken as left unreaped here, they are passed over as held is.
	unrecorded := map[int]bool{}
	all, err := procfs.All()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range all {
		if p.PPID == os.Getpid() && p.State == 'Z' {
			unrecorded[p.PID] = true
		}
	}
	held := start()
	unrecorded[held] = true
	k := &keeper{unrecorded: unrecorded}
	a, b := start(), start()
	got := map[int]bool{}
	scans := 0
	for range 2 {
		before := k.scanned
		pid, _, err := k.peekChild()
		if err != nil || pid == 0 || pid == held {
			t.Fatalf("peekChild = %d, %v; want %d or %d", pid, err, a, b)
		}
		if k.scanned != before {
			scans++
		}
		got[pid] = true
		procfs.ReapChild(pid)
	}
	if !got[a] || !got[b] || scans > 1 {
		t.Fatalf("peekChild found %v in %d scans; want %d and %d, in at most one", got, scans, a, b)
	}
	c := start()
	before := k.scanned
	pid, _, err := k.peekChild()
	if err != nil || pid != 0 && pid != c || k.scanned != before && !before.IsZero() {
		t.Fatalf("peekChild right after a scan = %d, %v, scanning: %v; want 0 or %d, not another scan yet", pid, err, k.scanned != before, c)
	}
	if pid == 0 {
		k.scanned = time.Now().Add(-scanEvery)
		if pid, _, err := k.peekChild(); pid != c || err != nil {
			t.Fatalf("peekChild once scanEvery passed = %d, %v; want %d", pid, err, c)
		}
	}
}
