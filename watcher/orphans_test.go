package watcher

import (
	"os"
	"regexp"
	"testing"

	"github.com/tendhq/tend/procfs"
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
