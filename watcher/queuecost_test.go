package watcher

import (
	"fmt"
	"testing"
	"time"

	"github.com/tendhq/tend/tracker"
)

// queueOfWaits is a watcher whose queue holds n runs, each waiting for
// every one before it (up to n-1 of them), the first for a run that
// runs: n²/2 dependencies in all, none of which holds.
func queueOfWaits(n int) *watcher {
	w := &watcher{queuedByID: make(map[string]*queuedRun), runs: make(map[string]*run), ended: make(map[string]endedRun)}
	at := time.Now().Add(-time.Hour)
	w.runs["gate"] = &run{st: &tracker.State{ID: "gate", State: tracker.Running, CreatedAt: at}}
	prev := []string{"gate"}
	for i := range n {
		st := &tracker.State{ID: fmt.Sprintf("r%d", i), State: tracker.Queued, CreatedAt: at.Add(time.Duration(i) * time.Millisecond)}
		st.After = append([]string(nil), prev...)
		st.Reason = waitReason(st)
		w.addQueued(&queuedRun{st: st})
		prev = append(prev, st.ID)
	}
	return w
}

// TestWaitedOnIsALookup: whether a queued run waits for a run is asked
// at every save of every run. With a thousand queued runs waiting for
// up to a thousand others each, a walk of their waits took 18 ms a
// save: a member's queue slowed every event of the watcher's.
func TestWaitedOnIsALookup(t *testing.T) {
	w := queueOfWaits(1000)
	start := time.Now()
	for range 1000 {
		if w.waitedOn("nobody") || !w.waitedOn("r500") || !w.waitedOn("gate") {
			t.Fatal("waitedOn is wrong")
		}
	}
	if took := time.Since(start); took > time.Second { // ~20 µs; a walk, 50 s
		t.Errorf("1000 looks took %v", took)
	}
}

// TestWaitedOnFollowsTheQueue: waitedOn says what a walk of the queued
// runs' waits would, as runs join the queue, change their waits, and
// leave it; a name counts for the ID before its ':'.
func TestWaitedOnFollowsTheQueue(t *testing.T) {
	w := &watcher{queuedByID: make(map[string]*queuedRun), ended: make(map[string]endedRun)}
	a := &queuedRun{st: &tracker.State{ID: "a", After: []string{"x", "y:ended"}}}
	b := &queuedRun{st: &tracker.State{ID: "b", After: []string{"y:ready", "xy"}}}
	w.addQueued(a)
	w.addQueued(b)
	check := func(when string, want map[string]bool) {
		t.Helper()
		for id, waited := range want {
			if w.waitedOn(id) != waited {
				t.Errorf("%s: waitedOn(%s) = %v, want %v", when, id, !waited, waited)
			}
		}
	}
	check("both queued", map[string]bool{"x": true, "y": true, "xy": true, "a": false, "z": false})
	w.countWaits(a.st, -1) // as updateQueued takes an edit
	a.st.After = []string{"z"}
	w.countWaits(a.st, 1)
	check("a edited", map[string]bool{"x": false, "y": true, "xy": true, "z": true})
	w.removeQueued(b)
	check("b gone", map[string]bool{"y": false, "xy": false, "z": true})
	w.removeQueued(a)
	check("none queued", map[string]bool{"z": false})
	if len(w.waitedBy) != 0 {
		t.Errorf("waitedBy keeps %v with nothing queued", w.waitedBy)
	}
}

// BenchmarkQueueTurn is a turn of a queue of a thousand runs, each
// waiting for up to a thousand others, none of which holds.
func BenchmarkQueueTurn(b *testing.B) {
	w := queueOfWaits(1000)
	for b.Loop() {
		w.startQueuedRuns()
	}
}

// TestQueueTurnCostsWhatChanged: a turn of the queue in which no run
// that queued runs wait for changed (a request taken, a run that none
// waits for ending) makes no waiting run's reason again: each was a look
// at every one of its waits, 48 ms a turn for a thousand runs waiting
// for up to a thousand others each, at every such event.
func TestQueueTurnCostsWhatChanged(t *testing.T) {
	w := queueOfWaits(1000)
	start := time.Now()
	w.startQueuedRuns() // the first makes every reason
	first := time.Since(start)
	start = time.Now()
	for range 20 {
		w.startQueuedRuns()
	}
	if took := time.Since(start); took > first { // ~10 ms, the first ~50 ms; each the first's cost, 1 s
		t.Errorf("20 turns with nothing changed took %v, the first %v", took, first)
	}
	for _, q := range w.queue {
		if q.noted.changes != 0 || !q.noted.set {
			t.Fatalf("run %s: its reason was last made at %+v", q.st.ID, q.noted)
		}
	}
}

// TestQueueTurnMetWaitsCostWhatChanged: nor does such a turn look again
// at the waits of a run that hold (runs ended as it waited for), up to
// the one that does not: a thousand runs each waiting for a thousand
// others, all ended but one, cost 250 ms a turn. Once the one it waits
// for changes, the turn looks again, and starts it.
func TestQueueTurnMetWaitsCostWhatChanged(t *testing.T) {
	w := &watcher{queuedByID: make(map[string]*queuedRun), runs: make(map[string]*run), ended: make(map[string]endedRun)}
	at := time.Now().Add(-time.Hour)
	w.runs["gate"] = &run{st: &tracker.State{ID: "gate", State: tracker.Running, CreatedAt: at}}
	var done []string
	for i := range 999 {
		id := fmt.Sprintf("d%d", i)
		w.ended[id] = endedRun{tracker.Completed, "", at}
		done = append(done, id)
	}
	for i := range 1000 {
		st := &tracker.State{ID: fmt.Sprintf("r%d", i), State: tracker.Queued, CreatedAt: at.Add(time.Minute)}
		st.After = append(append([]string(nil), done...), "gate")
		st.Reason = "waiting for gate to complete"
		w.addQueued(&queuedRun{st: st})
	}
	start := time.Now()
	w.startQueuedRuns()
	first := time.Since(start)
	start = time.Now()
	for range 20 {
		w.startQueuedRuns()
	}
	if took := time.Since(start); took > first { // ~10 ms, the first ~250 ms; each the first's cost, 5 s
		t.Errorf("20 turns with nothing changed took %v, the first %v", took, first)
	}
	// The run they wait for fails: each of them is looked at again, and
	// will never start.
	w.runs["gate"].st.State = tracker.Failed
	w.waitedChanges++ // as waitedChanged counts the save
	for _, q := range w.queue {
		if waits, never, _ := w.queuedConditions(q, time.Now()); waits != "" || never == "" {
			t.Fatalf("run %s, once gate failed: waits %q, never %q; want never", q.st.ID, waits, never)
		}
	}
}
