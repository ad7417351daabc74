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

// A start log whose records do not verify with the root's key (its
// record.key lost, and made anew) stopped every watcher, and tend fsck
// --repair, until it was removed by hand. tend fsck names it; --repair,
// as a watcher does, moves it aside with its reason, makes it anew and
// puts none of its changes back; tend fsck then names the log set aside.
// A second one is set aside beside the first, which is kept.
func TestFsckSetsAsideAnUnverifiedStartLog(t *testing.T) {
	root, _, _ := loggedLaunch(t)
	r := layout.Root(root)
	if err := os.Remove(r.RecordKey()); err != nil {
		t.Fatal(err)
	}
	if _, created, err := tracker.LoadKey(root, true); err != nil || !created {
		t.Fatalf("a new key: %v", err)
	}
	want := func(path, what string) {
		t.Helper()
		for _, p := range tracker.Check(root, func(int, uint64) bool { return false }) {
			if p.Path == path && strings.Contains(p.What, what) {
				return
			}
		}
		t.Errorf("tend fsck does not report %s: %s", path, what)
	}
	want(r.StartLog(), "holds 1 change whose records do not verify with "+r.RecordKey())
	for i, aside := range []string{r.StartLog() + ".unverified", r.StartLog() + ".unverified.2"} {
		if i > 0 { // another launch, logged under the old key
			if err := os.Rename(r.StartLog()+".unverified", r.StartLog()); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(r.StartLog()+".unverified", []byte("the first\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		done, _, err := tracker.Repair(root, noPeers)
		if err != nil {
			t.Fatalf("tend fsck --repair: %v (did %q)", err, done)
		}
		if len(done) == 0 || !strings.Contains(done[0], "moved to "+aside+", and made anew: run r1's record in it does not verify") {
			t.Errorf("the repair did: %q", done)
		}
		if n, err := tracker.PendingLaunches(root); err != nil || n != 0 {
			t.Errorf("the log made anew holds %d changes (%v)", n, err)
		}
		if b, err := os.ReadFile(aside + ".error"); err != nil || !strings.Contains(string(b), "are not put back") {
			t.Errorf("the reason beside %s: %q, %v", aside, b, err)
		}
		want(aside, "a start log set aside, unverified: run r1's record in it does not verify")
	}
	if b, _ := os.ReadFile(r.StartLog() + ".unverified"); string(b) != "the first\n" {
		t.Errorf("the first log set aside was replaced by the second")
	}
	// What a write of a reason cut short leaves is no log set aside.
	tmp := r.StartLog() + ".unverified.error123"
	if err := os.WriteFile(tmp, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range tracker.Check(root, func(int, uint64) bool { return false }) {
		if p.Path == tmp && strings.Contains(p.What, "set aside") {
			t.Errorf("a temporary file is reported as a log set aside: %v", p)
		}
	}
}
