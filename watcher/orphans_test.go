package watcher

import (
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/tendhq/tend/procfs"
	"github.com/tendhq/tend/tracker"
)

func TestMarkVar(t *testing.T) {
	a, b := MarkVar("/srv/a/.tend"), MarkVar("/srv/b/.tend")
	if !regexp.MustCompile(`^TEND_MARK_[0-9a-f]{16}$`).MatchString(a) {
		t.Fatalf("MarkVar = %q, not a TEND_MARK_ name with 16 hex digits", a)
	}
	if a == b || a != MarkVar("/srv/a/.tend") {
		t.Fatalf("MarkVar: %q and %q: want one name per root, always the same", a, b)
	}
}

// TestWithoutMarks: a request's env cannot make its run pass for another
// root's (tend start captures its caller's environment, marks and all).
func TestWithoutMarks(t *testing.T) {
	got := withoutMarks(map[string]string{"A": "1", MarkVar("/x"): "other", "TEND_MARK_": "y", "TEND_MARKS": "z"})
	if len(got) != 2 || got["A"] != "1" || got["TEND_MARKS"] != "z" {
		t.Fatalf("withoutMarks = %v", got)
	}
	if withoutMarks(nil) != nil {
		t.Fatal("withoutMarks(nil) is not nil")
	}
}

// TestDescendants: a process is in the watcher's tree if a parent of it,
// however far up, is the watcher or a keeper; not if the chain reaches
// init first, and a loop in a racy snapshot of /proc ends.
func TestDescendants(t *testing.T) {
	self := os.Getpid()
	const keeper = 100
	all := []procfs.Stat{
		{PID: keeper, PPID: 1},
		{PID: 200, PPID: self},   // a run of this watcher
		{PID: 201, PPID: 200},    // its child
		{PID: 202, PPID: 201},    // and grandchild
		{PID: 300, PPID: keeper}, // a run the keeper kept
		{PID: 400, PPID: 1},      // gone to init
		{PID: 401, PPID: 400},
		{PID: 500, PPID: 501}, // a loop
		{PID: 501, PPID: 500},
	}
	w := &watcher{}
	got := w.descendants(all, map[int]bool{keeper: true})
	for pid, want := range map[int]bool{200: true, 201: true, 202: true, 300: true, keeper: false, 400: false, 401: false, 500: false, 501: false} {
		if got[pid] != want {
			t.Errorf("pid %d: in the tree = %v, want %v", pid, got[pid], want)
		}
	}
}

// TestKeeperHolds: a watcher knows the processes a keeper of its root
// holds by the keeper's --hold arguments, and not another root's.
func TestKeeperHolds(t *testing.T) {
	dir := t.TempDir()
	sh := filepath.Join(dir, tracker.KeeperComm) // so that its comm is a keeper's
	b, err := os.ReadFile("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sh, b, 0o755); err != nil {
		t.Fatal(err)
	}
	keeper := func(root, held string) {
		cmd := exec.Command(sh, "-c", "sleep 100; :", "tend", "--root", root, "watch", "--hold", held)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	}
	keeper("/srv/a/.tend", "7:4242:100")
	keeper("/srv/b/.tend", "7:4343:100")
	// Start returns once each has exec'd, its comm set.
	w := &watcher{cfg: Config{Root: "/srv/a/.tend"}, log: log.New(io.Discard, "", 0)}
	for _, tt := range []struct {
		pid   int
		start uint64
		want  bool
	}{{4242, 100, true}, {4242, 101, false}, {4343, 100, false}} {
		if got := w.keeperHolds(&tracker.State{PID: tt.pid, ProcStart: tt.start}); got != tt.want {
			t.Errorf("keeperHolds(pid %d, start %d) = %v, want %v", tt.pid, tt.start, got, tt.want)
		}
	}
}
