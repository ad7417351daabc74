package tracker

import (
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tendhq/tend/tracker/layout"
)

// TestEndFromEvent: the record of an end, made again from the record
// before it and the end's history line (as it is read back from the
// file), is the record that was written, for every way a run ends.
func TestEndFromEvent(t *testing.T) {
	started := time.Date(2026, 11, 27, 1, 2, 3, 456789000, time.UTC)
	code := func(c int) *int { return &c }
	for _, tc := range []struct {
		name string
		end  func(st *State)
	}{
		{"completed", func(st *State) { st.State, st.ExitCode, st.Reason = Completed, code(0), "" }},
		{"failed", func(st *State) { st.State, st.ExitCode, st.Reason = Failed, code(3), "exited with code 3" }},
		{"canceled", func(st *State) { st.State, st.Signal, st.Reason = Canceled, "SIGTERM", "canceled; killed by SIGTERM" }},
		{"timed out", func(st *State) {
			st.State, st.Signal, st.Reason = TimedOut, "SIGKILL", "timed out after 1s; killed by SIGKILL"
		}},
		{"canceled while queued", func(st *State) { st.State, st.Reason = Canceled, "canceled while queued; it never started" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := &State{ID: "r", State: Running, Rev: 3, Session: "s", Command: []string{"/bin/sh", "-c", "x"}, PID: 42, PGID: 42,
				ProcStart: 7, CreatedAt: started, StartedAt: &started, Labels: map[string]string{"k": "v"}, Attempt: 1,
				Stop: &Stop{Cause: CauseCanceled, Requests: []string{"r.cancel"}}}
			if strings.Contains(tc.name, "queued") {
				before.State, before.PID, before.PGID, before.ProcStart, before.StartedAt, before.Stop = Queued, 0, 0, 0, nil, nil
			}
			after := roundTrip(t, before)
			tc.end(after)
			ended := started.Add(1500 * time.Millisecond)
			after.Rev, after.EndedAt, after.DurationSeconds, after.CPUSeconds = 4, &ended, 1.5, 0.25
			b, err := json.Marshal(EventOf(after, ended.Add(time.Millisecond)))
			if err != nil {
				t.Fatal(err)
			}
			ev, err := parseEvent(append(b, '\n'))
			if err != nil {
				t.Fatal(err)
			}
			got := roundTrip(t, before)
			ApplyCovered(got, ev)
			if got, want := roundTrip(t, got), roundTrip(t, after); !reflect.DeepEqual(got, want) {
				t.Errorf("made again from the line:\n%+v\nwant\n%+v", got, want)
			}
		})
	}
}

func roundTrip(t *testing.T, st *State) *State {
	t.Helper()
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var c State
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return &c
}

// TestStopFromEvent: the record of a stop, made again from the record
// before it and the stop's history line, is the record that was written;
// and the end after it, from that one and the end's line.
func TestStopFromEvent(t *testing.T) {
	started := time.Date(2026, 11, 27, 1, 2, 3, 456789000, time.UTC)
	before := &State{ID: "r", State: Running, Rev: 3, Session: "s", Command: []string{"/bin/sh", "-c", "x"}, PID: 42, PGID: 42,
		ProcStart: 7, CreatedAt: started, StartedAt: &started, Labels: map[string]string{"k": "v"}, Attempt: 1}
	stopping := roundTrip(t, before)
	stopping.Rev, stopping.State, stopping.Reason = 4, Stopping, "canceled"
	stopping.Stop = &Stop{Cause: CauseCanceled, Requests: []string{"r.cancel", "r@c1.cancel"}, RequestedAt: started.Add(time.Second), KillAt: started.Add(11 * time.Second)}
	ended := roundTrip(t, stopping)
	at := started.Add(1500 * time.Millisecond)
	ended.Rev, ended.State, ended.Signal, ended.Reason = 5, Canceled, "SIGTERM", "canceled; killed by SIGTERM"
	ended.EndedAt, ended.DurationSeconds, ended.CPUSeconds = &at, 1.5, 0.25
	var events []Event
	for _, st := range []*State{stopping, ended} {
		b, err := json.Marshal(EventOf(st, at))
		if err != nil {
			t.Fatal(err)
		}
		ev, err := parseEvent(append(b, '\n'))
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, ev)
	}
	chain := CoveredAfter(before, events)
	if len(chain) != 2 {
		t.Fatalf("CoveredAfter the running record: %d changes, want 2", len(chain))
	}
	got := roundTrip(t, before)
	ApplyCovered(got, chain[0])
	if got, want := roundTrip(t, got), roundTrip(t, stopping); !reflect.DeepEqual(got, want) {
		t.Errorf("the stop made again from its line:\n%+v\nwant\n%+v", got, want)
	}
	ApplyCovered(got, chain[1])
	if got, want := roundTrip(t, got), roundTrip(t, ended); !reflect.DeepEqual(got, want) {
		t.Errorf("the end after it made again from its line:\n%+v\nwant\n%+v", got, want)
	}
}

// TestRecentEvents: the events of each run asked for,
// oldest first, in the end of history.jsonl, and before it of
// history.1.jsonl; bad lines are skipped, and nothing before EndWindow is
// read.
func TestRecentEvents(t *testing.T) {
	root := t.TempDir()
	line := func(id string, rev int, state string) string {
		return `{"time":"2026-11-27T01:00:00Z","id":"` + id + `","rev":` + strconv.Itoa(rev) + `,"state":"` + state + `"}` + "\n"
	}
	older := line("rotated", 2, "running") + line("rotated", 3, "failed") + line("both", 3, "completed")
	newest := line("ended", 2, "running") + line("ended", 3, "completed") +
		line("live", 2, "running") +
		line("kept", 3, "completed") + line("kept", 4, "deleted") +
		line("anew", 5, "completed") + line("anew", 6, "deleted") + line("anew", 1, "queued") +
		"not json\n" + `{"time":"2026-11-27T01:00:00Z","id":"torn","rev":3,"state":"comp` + "\n" +
		line("both", 4, "running") +
		line("unasked", 3, "completed")
	if err := os.WriteFile(layout.Root(root).RotatedHistory(1), []byte(older), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(layout.Root(root).History(), []byte(newest), 0o600); err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{"ended": true, "live": true, "kept": true, "anew": true, "torn": true, "rotated": true, "both": true, "none": true}
	want := "anew:completed@5,deleted@6,queued@1 both:completed@3,running@4 ended:running@2,completed@3 kept:completed@3,deleted@4 live:running@2 rotated:running@2,failed@3"
	if got := describeRecent(t, root, ids); got != want {
		t.Errorf("last events %q, want %q", got, want)
	}

	// Past the window: history.1.jsonl is not read at all, and only the
	// end of history.jsonl is.
	pad := strings.Repeat(line("pad", 1, "running"), EndWindow/len(line("pad", 1, "running"))+1)
	if err := os.WriteFile(layout.Root(root).History(), []byte(line("early", 3, "completed")+pad+line("late", 3, "completed")), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, want := describeRecent(t, root, map[string]bool{"early": true, "late": true, "rotated": true}), "late:completed@3"; got != want {
		t.Errorf("past the window: last events %q, want %q", got, want)
	}
}

func describeRecent(t *testing.T, root string, ids map[string]bool) string {
	t.Helper()
	recent, err := RecentEvents(root, ids)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for id, evs := range recent {
		var each []string
		for _, ev := range evs {
			each = append(each, string(ev.State)+"@"+strconv.FormatInt(ev.Rev, 10))
		}
		got = append(got, id+":"+strings.Join(each, ","))
	}
	slices.Sort(got)
	return strings.Join(got, " ")
}

// TestCoveredAfter: the changes taken for those a record lacks are the
// ends and stops right after it, in a row, of the same run, as its
// creation time says.
func TestCoveredAfter(t *testing.T) {
	created := time.Date(2026, 11, 27, 1, 0, 0, 123, time.UTC)
	other := created.Add(time.Hour)
	st := &State{ID: "x", State: Running, Rev: 2, CreatedAt: created}
	stop := &Stop{Cause: CauseCanceled}
	restart := &Stop{Cause: CauseRestart}
	ev := func(rev int64, state StateName, stop *Stop, created *time.Time) Event {
		return Event{ID: "x", Rev: rev, State: state, Stop: stop, CreatedAt: created}
	}
	for _, tc := range []struct {
		name string
		evs  []Event
		want string // the revs taken
	}{
		{"the end after it", []Event{ev(2, Running, nil, nil), ev(3, Failed, nil, &created)}, "3"},
		{"a stop, then its end", []Event{ev(3, Stopping, stop, &created), ev(4, Canceled, nil, &created)}, "3 4"},
		{"a stop, then another change", []Event{ev(3, Stopping, stop, &created), ev(4, Running, nil, nil)}, "3"},
		{"a stop to restart it", []Event{ev(3, Stopping, restart, &created), ev(4, Failed, nil, &created)}, ""},
		{"nothing after an end", []Event{ev(3, Failed, nil, &created), ev(4, Stopping, stop, &created)}, "3"},
		{"a gap", []Event{ev(3, Stopping, stop, &created), ev(5, Canceled, nil, &created)}, "3"},
		{"not an end or a stop", []Event{ev(3, Running, nil, &created)}, ""},
		{"a change between", []Event{ev(4, Failed, nil, &created)}, ""},
		{"the record's own", []Event{ev(2, Failed, nil, &created)}, ""},
		{"a run deleted before it, with its ID", []Event{ev(3, Failed, nil, &other)}, ""},
		{"an earlier tend's end", []Event{ev(3, Failed, nil, nil)}, ""},
		{"another run", []Event{{ID: "y", Rev: 3, State: Failed, CreatedAt: &created}}, ""},
	} {
		var got []string
		for _, ev := range CoveredAfter(st, tc.evs) {
			got = append(got, strconv.FormatInt(ev.Rev, 10))
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("%s: CoveredAfter took revs %q, want %q", tc.name, strings.Join(got, " "), tc.want)
		}
	}
}

func TestBeyondStart(t *testing.T) {
	ev := func(states ...StateName) []Event {
		var evs []Event
		for i, s := range states {
			evs = append(evs, Event{ID: "a", Rev: int64(i + 1), State: s})
		}
		return evs
	}
	tests := []struct {
		name string
		evs  []Event
		want bool
	}{
		{"no events", nil, false},
		{"queued", ev(Queued), false},
		{"its first launch", ev(Queued, Starting, Running), false},
		{"canceled while queued", ev(Queued, Canceled), true},
		{"stopping", ev(Starting, Running, Stopping), true},
		{"ended", ev(Starting, Running, Completed), true},
		{"in backoff", ev(Starting, Running, Backoff), true},
		{"paused", ev(Starting, Running, Paused), true},
		{"ended, then deleted: the ID made anew", ev(Starting, Running, Failed, Deleted, Queued), false},
		{"made anew and ended", ev(Running, Failed, Deleted, Running, Completed), true},
		{"made anew, its deletion's line lost", append(ev(Running, Failed), Event{ID: "a", Rev: 1, State: Queued}), false},
		{"ended, its deletion's line and the new run's lost", ev(Running, Failed), true},
		// A watcher that crashed after appending rev 3, before its
		// record, wrote rev 3 again: the same run, its stop not undone.
		{"stopped, then its rev repeated by the next watcher", append(ev(Starting, Running, Stopping), Event{ID: "a", Rev: 3, State: Running}), true},
		{"backing off, then its revs repeated", append(ev(Starting, Running, Running, Backoff), Event{ID: "a", Rev: 2, State: Running}, Event{ID: "a", Rev: 3, State: Running}), true},
		{"made anew at rev 1 after a repeated rev", append(ev(Starting, Running, Stopping), Event{ID: "a", Rev: 3, State: Running}, Event{ID: "a", Rev: 1, State: Queued}), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := BeyondStart(tt.evs); got != tt.want {
				t.Errorf("BeyondStart(%v) = %v, want %v", tt.evs, got, tt.want)
			}
		})
	}
}

func TestLatestKeepsARunWhoseRevRepeats(t *testing.T) {
	created := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	other := created.Add(time.Hour)
	ev := func(rev int64, state StateName, at *time.Time) Event {
		return Event{ID: "a", Rev: rev, State: state, CreatedAt: at}
	}
	tests := []struct {
		name string
		evs  []Event
		want []int64 // the revs Latest keeps
	}{
		{"one run", []Event{ev(1, Starting, nil), ev(2, Running, nil), ev(3, Completed, &created)}, []int64{1, 2, 3}},
		{"a rev repeated after a crash", []Event{ev(1, Starting, nil), ev(2, Running, nil), ev(3, Stopping, &created), ev(3, Running, nil), ev(4, Running, nil)}, []int64{1, 2, 3, 3, 4}},
		{"revs repeated from a batch", []Event{ev(1, Starting, nil), ev(2, Running, nil), ev(3, Running, nil), ev(2, Running, nil)}, []int64{1, 2, 3, 2}},
		{"a rev 1 repeated", []Event{ev(1, Starting, nil), ev(1, Starting, nil), ev(2, Running, nil)}, []int64{1, 2}},
		{"after a deletion", []Event{ev(1, Starting, nil), ev(2, Failed, &created), ev(3, Deleted, nil), ev(1, Queued, nil)}, []int64{1}},
		{"its deletion lost: made anew at rev 1", []Event{ev(5, Running, nil), ev(6, Failed, &created), ev(1, Queued, nil), ev(2, Running, nil)}, []int64{1, 2}},
		{"its deletion and rev 1 lost: created at another time", []Event{ev(5, Running, nil), ev(6, Failed, &created), ev(2, Running, nil), ev(3, Completed, &other)}, []int64{2, 3}},
		{"within one run, created at the same time", []Event{ev(3, Stopping, &created), ev(3, Running, nil), ev(4, Canceled, &created)}, []int64{3, 3, 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []int64
			for _, e := range Latest(tt.evs) {
				got = append(got, e.Rev)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("Latest kept revs %v, want %v", got, tt.want)
			}
		})
	}
}
