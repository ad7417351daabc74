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
			ApplyEnd(got, ev)
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

// TestLastEvents: the last event but a deletion of each run asked for,
// in the end of history.jsonl, and before it of history.1.jsonl; bad
// lines are skipped, and nothing before EndWindow is read.
func TestLastEvents(t *testing.T) {
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
	want := "anew:queued@1 both:running@4 ended:completed@3 kept:completed@3 live:running@2 rotated:failed@3"
	if got := describeLast(t, root, ids); got != want {
		t.Errorf("last events %q, want %q", got, want)
	}

	// Past the window: history.1.jsonl is not read at all, and only the
	// end of history.jsonl is.
	pad := strings.Repeat(line("pad", 1, "running"), EndWindow/len(line("pad", 1, "running"))+1)
	if err := os.WriteFile(layout.Root(root).History(), []byte(line("early", 3, "completed")+pad+line("late", 3, "completed")), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, want := describeLast(t, root, map[string]bool{"early": true, "late": true, "rotated": true}), "late:completed@3"; got != want {
		t.Errorf("past the window: last events %q, want %q", got, want)
	}
}

func describeLast(t *testing.T, root string, ids map[string]bool) string {
	t.Helper()
	last, err := LastEvents(root, ids)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for id, ev := range last {
		got = append(got, id+":"+string(ev.State)+"@"+strconv.FormatInt(ev.Rev, 10))
	}
	slices.Sort(got)
	return strings.Join(got, " ")
}

// TestEndAfter: an end is taken for a record's only if it is the change
// right after it, of the same run, as its creation time says.
func TestEndAfter(t *testing.T) {
	created := time.Date(2026, 11, 27, 1, 0, 0, 123, time.UTC)
	other := created.Add(time.Hour)
	st := &State{ID: "x", State: Running, Rev: 2, CreatedAt: created}
	for _, tc := range []struct {
		name string
		ev   Event
		want bool
	}{
		{"the end after it", Event{ID: "x", Rev: 3, State: Failed, CreatedAt: &created}, true},
		{"not an end", Event{ID: "x", Rev: 3, State: Stopping, CreatedAt: &created}, false},
		{"a change between", Event{ID: "x", Rev: 4, State: Failed, CreatedAt: &created}, false},
		{"the record's own", Event{ID: "x", Rev: 2, State: Failed, CreatedAt: &created}, false},
		{"a run deleted before it, with its ID", Event{ID: "x", Rev: 3, State: Failed, CreatedAt: &other}, false},
		{"an earlier tend's end", Event{ID: "x", Rev: 3, State: Failed}, false},
		{"another run", Event{ID: "y", Rev: 3, State: Failed, CreatedAt: &created}, false},
	} {
		if got := EndAfter(st, tc.ev); got != tc.want {
			t.Errorf("%s: EndAfter = %v, want %v", tc.name, got, tc.want)
		}
	}
}
