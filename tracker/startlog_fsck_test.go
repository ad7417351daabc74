package tracker_test

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/tendhq/tend/tracker"
	"github.com/tendhq/tend/tracker/layout"
	"github.com/tendhq/tend/tracker/startlogtest"
)

// loggedLaunch makes, in a new root with its key, run r1's launch as a
// watcher leaves it in the start log (startlogtest.Launch). It returns
// the root, the store and the entry.
func loggedLaunch(t *testing.T) (string, *tracker.Store, tracker.LogEntry) {
	t.Helper()
	root := t.TempDir()
	key, _, err := tracker.LoadKey(root, true)
	if err != nil {
		t.Fatal(err)
	}
	s := tracker.NewStore(root)
	s.SetKey(key)
	l, _, err := tracker.OpenStartLog(root)
	if err != nil {
		t.Fatal(err)
	}
	return root, s, startlogtest.Launch(t, s, tracker.OpenHistory(root), l)
}

// noPeers is a Repair's answer that no process holds a run.
func noPeers(int, string) (uint64, bool) { return 0, false }

// tend fsck reports launches the start log holds and their files lack,
// and tend fsck --repair puts them back as a watcher would.
func TestFsckRepairsFromTheStartLog(t *testing.T) {
	root, s, e := loggedLaunch(t)
	// The power loss took the run's directory and its history lines.
	if err := os.RemoveAll(s.RunDir(e.ID)); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(layout.Root(root).History(), 0); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range tracker.Check(root, func(int, uint64) bool { return false }) {
		found = found || p.Path == layout.Root(root).StartLog() && strings.Contains(p.What, "holds 1 change of runs not yet")
	}
	if !found {
		t.Fatal("tend fsck does not report the launch the start log holds")
	}
	done, _, err := tracker.Repair(root, noPeers)
	if err != nil {
		t.Fatal(err)
	}
	if len(done) == 0 || !strings.Contains(done[0], "put back its directory, its record, its request, 2 history lines") {
		t.Fatalf("the repair did: %q", done)
	}
	if b, err := os.ReadFile(s.Run(e.ID).State()); err != nil || !bytes.Equal(b, e.Record) {
		t.Fatalf("record after the repair: %v", err)
	}
	for _, p := range tracker.Check(root, func(int, uint64) bool { return false }) {
		if p.Path == layout.Root(root).StartLog() {
			t.Errorf("after the repair: %v", p)
		}
	}
}

// A power loss that cut a logged launch's history append short leaves
// its line torn at the history's end: tend fsck --repair, which puts
// the log back first, puts that line back too, at its first try (it
// waits in the pending changes until the torn line is moved aside,
// as a watcher's append does), rather than failing with the torn end
// it is about to repair.
func TestFsckRepairsFromTheStartLogBeforeATornEnd(t *testing.T) {
	root, _, _ := loggedLaunch(t)
	// The power loss tore the second line.
	hist := layout.Root(root).History()
	b, err := os.ReadFile(hist)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(hist, b[:len(b)-20], 0o644); err != nil {
		t.Fatal(err)
	}
	done, _, err := tracker.Repair(root, noPeers)
	if err != nil {
		t.Fatalf("tend fsck --repair: %v (did %q)", err, done)
	}
	got, err := tracker.ReadAllHistory(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[1].Rev != 2 {
		t.Errorf("the history after the repair: %+v", got)
	}
}
