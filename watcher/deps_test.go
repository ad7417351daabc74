package watcher

import (
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
)

// TestHistoryFaultStill: a history found bad is not read again while it
// is the same files, for historyRetry at most.
func TestHistoryFaultStill(t *testing.T) {
	bad := errors.New("history.jsonl:2: not JSON")
	now := time.Now()
	for _, tc := range []struct {
		name  string
		fault historyFault
		files string
		want  error
	}{
		{"none", historyFault{}, "h:1:2;", nil},
		{"the same files", historyFault{bad, "h:1:2;", now}, "h:1:2;", bad},
		{"a file replaced", historyFault{bad, "h:1:2;", now}, "h:1:3;", nil},
		{"a file rotated", historyFault{bad, "h:1:2;", now}, "h.1:1:2;h:1:4;", nil},
		{"too long ago", historyFault{bad, "h:1:2;", now.Add(-historyRetry)}, "h:1:2;", nil},
	} {
		if got := tc.fault.still(tc.files); got != tc.want {
			t.Errorf("%s: still = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestAddedSince: an edit counts from its time only the runs it adds to
// what a queued run waits for.
func TestAddedSince(t *testing.T) {
	first, now := time.Unix(200, 0), time.Unix(300, 0)
	for _, tc := range []struct {
		name     string
		old, new []string
		since    map[string]time.Time
		want     map[string]time.Time
	}{
		{"reordered", []string{"a", "b"}, []string{"b", "a"}, nil, nil},
		{"one added", []string{"a"}, []string{"a", "b:ended"}, nil, map[string]time.Time{"b": now}},
		{"a condition changed", []string{"a"}, []string{"a:ended"}, nil, nil},
		{"added by an earlier edit, kept", []string{"a", "b"}, []string{"b"}, map[string]time.Time{"b": first}, map[string]time.Time{"b": first}},
		{"dropped, then added again", []string{"a"}, []string{"a", "b"}, map[string]time.Time{"b": first}, map[string]time.Time{"b": now}},
		{"dropped", []string{"a", "b"}, []string{"a"}, map[string]time.Time{"b": first}, nil},
		{"none left", []string{"a"}, nil, nil, nil},
	} {
		got := addedSince(tc.old, tc.new, tc.since, now)
		if len(got) != len(tc.want) {
			t.Errorf("%s: addedSince = %v, want %v", tc.name, got, tc.want)
			continue
		}
		for id, at := range tc.want {
			if !got[id].Equal(at) {
				t.Errorf("%s: addedSince = %v, want %v", tc.name, got, tc.want)
			}
		}
	}
}

// TestHistoryRetryArmedAgain: a turn of the queue that finds a history
// fault still held arms the retry again, so that a history mended in
// place is read once the fault is old enough, events or not.
func TestHistoryRetryArmedAgain(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "history.jsonl"), []byte("{bogus\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	w := &watcher{do: make(chan func(), 4), cfg: Config{Root: root}, log: log.New(io.Discard, "", 0)}
	if _, _, err := w.endedAs("x"); err == nil || !w.historyRetryDue {
		t.Fatalf("endedAs on a bad history: err %v, retry due %v; want an error and a retry", err, w.historyRetryDue)
	}
	// The retry fires while the fault, noted anew meanwhile, is still held.
	w.historyRetryDue = false
	w.unreadHistory.at = time.Now()
	if _, _, err := w.endedAs("x"); err == nil || !w.historyRetryDue {
		t.Fatalf("endedAs with the fault held: err %v, retry due %v; want an error and a retry", err, w.historyRetryDue)
	}
}

// TestHistoryReadOncePerTurn: the runs deleted before a watcher started,
// asked for by the runs that waited for them, cost one read of the
// history between them, not one each; a line appended since is read.
func TestHistoryReadOncePerTurn(t *testing.T) {
	root := filepath.Join(t.TempDir(), "proj:v2") // a colon, as a path may have
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	hist := tracker.OpenHistory(root)
	at := time.Now()
	var ids []string
	for i := range 50 {
		id := fmt.Sprintf("r%d", i)
		ids = append(ids, id)
		if err := hist.Append(
			tracker.Event{Time: at, ID: id, Rev: 1, State: tracker.Completed},
			tracker.Event{Time: at, ID: id, Rev: 2, State: tracker.Deleted},
		); err != nil {
			t.Fatal(err)
		}
	}
	w := &watcher{do: make(chan func(), 4), cfg: Config{Root: root}, log: log.New(io.Discard, "", 0), deletedAs: make(map[string]deletion)}
	// The runs that wait for them, which the index is made for.
	for _, id := range ids {
		w.queue = append(w.queue, &queuedRun{st: &tracker.State{ID: "after-" + id, State: tracker.Queued, After: []string{id}}})
	}
	for _, id := range ids {
		if del, ok, err := w.endedAs(id); err != nil || !ok || del.state != tracker.Completed {
			t.Fatalf("endedAs(%s) = %v, %v, %v; want completed, deleted", id, del, ok, err)
		}
	}
	if w.historyReads != 1 {
		t.Errorf("the history was read %d times for %d runs, want once", w.historyReads, len(ids))
	}
	if err := hist.Append(
		tracker.Event{Time: at, ID: "late", Rev: 1, State: tracker.Failed},
		tracker.Event{Time: at, ID: "late", Rev: 2, State: tracker.Deleted},
	); err != nil {
		t.Fatal(err)
	}
	if del, ok, err := w.endedAs("late"); err != nil || !ok || del.state != tracker.Failed {
		t.Fatalf("endedAs(late), appended after the read = %v, %v, %v; want failed, deleted", del, ok, err)
	}
	if w.historyReads != 2 {
		t.Errorf("the history was read %d times, want twice: once more for the line appended", w.historyReads)
	}
}

// The index the watcher keeps of the history's deletions says of every
// ID what deletionsIn says from the events themselves, which it no
// longer holds: a root's history may be gigabytes.
func TestIndexDeletionsAsDeletionsIn(t *testing.T) {
	at := time.Now()
	ev := func(id string, s tracker.StateName, sec int) tracker.Event {
		return tracker.Event{Time: at.Add(time.Duration(sec) * time.Second), ID: id, Rev: int64(sec + 1), State: s}
	}
	histories := map[string][]tracker.Event{
		"never deleted":       {ev("a", tracker.Running, 0), ev("a", tracker.Completed, 1)},
		"deleted":             {ev("a", tracker.Running, 0), ev("a", tracker.Failed, 1), ev("a", tracker.Deleted, 2)},
		"used again":          {ev("a", tracker.Completed, 0), ev("a", tracker.Deleted, 1), ev("a", tracker.Queued, 2)},
		"deleted twice":       {ev("a", tracker.Completed, 0), ev("a", tracker.Deleted, 1), ev("a", tracker.Canceled, 2), ev("a", tracker.Deleted, 3)},
		"deleted, no end":     {ev("a", tracker.Deleted, 0)},
		"interleaved":         {ev("a", tracker.Running, 0), ev("b", tracker.Completed, 1), ev("b", tracker.Deleted, 2), ev("a", tracker.TimedOut, 3), ev("a", tracker.Deleted, 4), ev("b", tracker.Starting, 5)},
		"deleted, then again": {ev("a", tracker.Deleted, 0), ev("a", tracker.Completed, 1), ev("a", tracker.Deleted, 2)},
	}
	for name, events := range histories {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			if err := tracker.OpenHistory(root).Append(events...); err != nil {
				t.Fatal(err)
			}
			idx, err := indexDeletions(root, map[string]bool{"a": true, "b": true, "none": true})
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range []string{"a", "b", "none"} {
				wantDels, wantUsed := deletionsIn(events, id)
				gotDels, gotUsed := idx.deletions(id)
				if len(gotDels) != len(wantDels) || gotUsed != wantUsed {
					t.Fatalf("%s: index says %v, %v; deletionsIn %v, %v", id, gotDels, gotUsed, wantDels, wantUsed)
				}
				for i := range wantDels {
					if gotDels[i].state != wantDels[i].state || !gotDels[i].at.Equal(wantDels[i].at) {
						t.Errorf("%s: deletion %d: index %v, deletionsIn %v", id, i, gotDels[i], wantDels[i])
					}
				}
			}
		})
	}
}

// TestIndexDeletionsKeepsOnlyWhatIsAsked: the index the watcher makes of
// the history holds the runs it is asked about, not every run the
// history names: it kept the last state of every run never deleted, and
// the deletions of every run ever deleted, however many and however
// long ago.
func TestIndexDeletionsKeepsOnlyWhatIsAsked(t *testing.T) {
	root := t.TempDir()
	hist := tracker.OpenHistory(root)
	at := time.Now()
	var events []tracker.Event
	for i := range 1000 {
		id := fmt.Sprintf("r%d", i)
		events = append(events, tracker.Event{Time: at, ID: id, Rev: 1, State: tracker.Completed})
		if i%2 == 0 {
			events = append(events, tracker.Event{Time: at, ID: id, Rev: 2, State: tracker.Deleted})
		}
	}
	if err := hist.Append(events...); err != nil {
		t.Fatal(err)
	}
	idx, err := indexDeletions(root, map[string]bool{"r10": true, "r11": true})
	if err != nil {
		t.Fatal(err)
	}
	if len(idx) != 2 {
		t.Errorf("the index holds %d runs for 2 asked about", len(idx))
	}
	if dels, used := idx.deletions("r10"); len(dels) != 1 || dels[0].state != tracker.Completed || used {
		t.Errorf("r10: %v, used since %v; want its deletion, completed", dels, used)
	}
	if dels, _ := idx.deletions("r11"); len(dels) != 0 {
		t.Errorf("r11, never deleted: %v", dels)
	}
}

// TestCheckDepsWalksTheQueueOnce: a run that waits for each of hundreds
// of queued runs, each of which waits for all before it, is checked for
// a cycle with one walk of the queue, not one from each run it waits for
// (the cube of their number: a member's queue held the watcher's loop
// for minutes). A cycle is still found.
func TestCheckDepsWalksTheQueueOnce(t *testing.T) {
	const n = 800
	w := &watcher{queuedByID: make(map[string]*queuedRun)}
	var deps []spool.Dep
	for i := range n {
		st := &tracker.State{ID: fmt.Sprintf("r%d", i)}
		for _, d := range deps {
			st.After = append(st.After, d.ID)
		}
		w.queuedByID[st.ID] = &queuedRun{st: st}
		deps = append(deps, spool.Dep{ID: st.ID, When: spool.Completed})
	}
	start := time.Now()
	if err := w.checkDeps("new", deps, nil); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 2*time.Second { // ~10 ms; walking from each of them, 4 s
		t.Errorf("checking %d dependencies took %v", n, took)
	}
	w.queuedByID["r0"].st.After = []string{"new"}
	if err := w.checkDeps("new", deps, nil); err == nil {
		t.Errorf("new waits for r0, which waits for new: not refused")
	}
}
