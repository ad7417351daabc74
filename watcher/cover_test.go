package watcher

import (
	"testing"

	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
)

// TestCoverable: an end or a stop is written without a flush only where
// the file system orders new data before names, with durability
// power_loss, for a run whose last record was written and that has no
// health check (whose checks ride along in its record unsaid).
func TestCoverable(t *testing.T) {
	run := func(id string) *tracker.State { return &tracker.State{ID: id} }
	checked := run("checked")
	checked.Health = &spool.Health{Exec: "true"}
	for _, tc := range []struct {
		name       string
		ordersData bool
		durability tracker.Durability
		st         *tracker.State
		behind     bool
		want       bool
	}{
		{"a run on ext4", true, tracker.PowerLoss, run("a"), false, true},
		{"elsewhere", false, tracker.PowerLoss, run("a"), false, false},
		{"watcher_crash", true, tracker.WatcherCrash, run("a"), false, false},
		{"its last record not written", true, tracker.PowerLoss, run("a"), true, false},
		{"with a health check", true, tracker.PowerLoss, checked, false, false},
	} {
		w := &watcher{ordersData: tc.ordersData, unsaved: unsaved{states: map[string]*tracker.State{}}}
		w.settings.Durability = tc.durability
		if tc.behind {
			w.unsaved.states[tc.st.ID] = tc.st
		}
		if got := w.coverable(tc.st) == covered; got != tc.want {
			t.Errorf("%s: coverable = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestLaunchRecord: a run's launch record is a launch (which the start
// log may keep in a flush of nothing else) with durability power_loss,
// for its first attempt only; it is renamed in before its flush only
// where the file system orders new data before names.
func TestLaunchRecord(t *testing.T) {
	first := &tracker.State{Attempt: 1}
	for _, tc := range []struct {
		name       string
		ordersData bool
		durability tracker.Durability
		st         *tracker.State
		want       saveKind
		early      bool
	}{
		{"on ext4", true, tracker.PowerLoss, first, launched, true},
		{"queued, on ext4", true, tracker.PowerLoss, &tracker.State{}, launched, true},
		{"elsewhere", false, tracker.PowerLoss, first, launched, false},
		{"watcher_crash", true, tracker.WatcherCrash, first, changed, false},
		{"a second attempt", true, tracker.PowerLoss, &tracker.State{Attempt: 2}, changed, false},
		{"a restart", true, tracker.PowerLoss, &tracker.State{Attempt: 1, Restarts: 1}, changed, false},
	} {
		w := &watcher{ordersData: tc.ordersData}
		w.settings.Durability = tc.durability
		got := w.launchRecord(tc.st)
		if got != tc.want {
			t.Errorf("%s: launchRecord = %v, want %v", tc.name, got, tc.want)
		}
		if early := w.renamesEarly(got); early != tc.early {
			t.Errorf("%s: renamesEarly = %v, want %v", tc.name, early, tc.early)
		}
	}
}
