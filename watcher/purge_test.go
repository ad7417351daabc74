package watcher

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/tendhq/tend/procfs"
)

// TestFirstProgram: a purge finds find(1) in /bin where /usr is not
// merged, and takes nothing that cannot be run for it.
func TestFirstProgram(t *testing.T) {
	dir := t.TempDir()
	mk := func(name string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if mode.IsDir() {
			if err := os.Mkdir(p, 0o755); err != nil {
				t.Fatal(err)
			}
			return p
		}
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	exe, plain, sub := mk("exe", 0o755), mk("plain", 0o644), mk("sub", os.ModeDir|0o755)
	missing := filepath.Join(dir, "missing")
	for _, tc := range []struct {
		name  string
		paths []string
		want  string
	}{
		{"the first", []string{exe, plain}, exe},
		{"past one missing", []string{missing, exe}, exe},
		{"past one not executable", []string{plain, exe}, exe},
		{"past a directory", []string{sub, exe}, exe},
		{"none", []string{missing, plain, sub}, ""},
	} {
		if got := firstProgram(tc.paths); got != tc.want {
			t.Errorf("%s: firstProgram(%q) = %q, want %q", tc.name, tc.paths, got, tc.want)
		}
	}
}

// TestPurgeHelperOutlivesItsWait: a drain lists /proc, then asks about
// each process it saw. A find reaped in between is still a purge's until
// the next look begins (a drain took one for a stray and sent it SIGTERM),
// and a process that got its PID never is.
func TestPurgeHelperOutlivesItsWait(t *testing.T) {
	p := newPurges()
	cmd := exec.Command("sleep", "0.05")
	if err := p.start(cmd); err != nil {
		t.Fatal(err)
	}
	seen, err := procfs.ReadStat(cmd.Process.Pid) // as the drain's look lists it
	if err != nil {
		t.Fatal(err)
	}
	if !p.helper(seen) {
		t.Fatalf("a find under way is not known: %+v", seen)
	}
	if err := p.wait(cmd); err != nil {
		t.Fatal(err)
	}
	if !p.helper(seen) {
		t.Errorf("a find reaped after the look listed it is no longer known")
	}
	reused := seen
	reused.StartTime++
	if p.helper(reused) {
		t.Errorf("a process with a reaped find's PID and another start time is taken for it")
	}
	p.scanning()
	if p.helper(seen) {
		t.Errorf("a find reaped before the look began is still known")
	}
}

// The reaped finds kept for a look through /proc are bounded, however
// long the watcher goes without one.
func TestPurgeEndedFindsBounded(t *testing.T) {
	p := newPurges()
	for range maxEndedFinds + 3 {
		cmd := exec.Command("true")
		if err := p.start(cmd); err != nil {
			t.Fatal(err)
		}
		p.wait(cmd)
	}
	if len(p.ended) > maxEndedFinds {
		t.Errorf("%d reaped finds kept, more than %d", len(p.ended), maxEndedFinds)
	}
}

// A drain's look through /proc forgets the finds reaped before it began
// (scanning): what it lists is afresh, and a process that has the PID of
// one of them now is not taken for it.
func TestDrainForgetsFindsReapedBefore(t *testing.T) {
	w := batchWatcher(t)
	gone := procfs.Stat{PID: 1<<22 - 1, StartTime: 42}
	w.purges.ended[gone.PID] = gone.StartTime
	if !w.purges.helper(gone) {
		t.Fatal("a find reaped since the last look is not known")
	}
	w.drain()
	if w.purges.helper(gone) {
		t.Errorf("a find reaped before the drain's look through /proc is still known after it")
	}
}

// TestPurgeFindHasSessionOfItsOwn: a purge's find runs as the deleted
// run's owner, who may take it over (ptrace); in the watcher's session it
// would have its terminal (tend watch run by root in one), to push input
// into, and could SIGCONT what is stopped there.
func TestPurgeFindHasSessionOfItsOwn(t *testing.T) {
	dir := t.TempDir()
	sid, fake, trash := filepath.Join(dir, "sid"), filepath.Join(dir, "find"), filepath.Join(dir, "trash")
	script := "#!/bin/sh\nset -- $(cat /proc/$$/stat)\necho \"$$ $6\" > " + sid + "\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(trash, 0o755); err != nil {
		t.Fatal(err)
	}
	defer func(paths []string) { findPaths = paths }(findPaths)
	findPaths = []string{fake}
	w := &watcher{purges: newPurges(), forker: newForker(0), uid: os.Geteuid()}
	if err := w.removeTree(trash); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(sid)
	if err != nil {
		t.Fatal(err)
	}
	var pid, session int
	if _, err := fmt.Sscan(string(b), &pid, &session); err != nil {
		t.Fatalf("%q: %v", b, err)
	}
	if pid != session {
		t.Errorf("a purge's find (pid %d) runs in session %d, not in one of its own", pid, session)
	}
}
