package tracker

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestPersisting(t *testing.T) {
	tmp := Problem{"runs/a/state.json123", "a temporary file left by an interrupted write"}
	gone := Problem{"runs/b/state.json", "recorded running, but its process (pid 9) is gone; a watcher records its end when it starts"}
	rev3 := Problem{"runs/c/state.json", "rev 3 (running) has no event in the history"}
	rev4 := Problem{"runs/c/state.json", "rev 4 (completed) has no event in the history"}
	tests := []struct {
		name           string
		earlier, later []Problem
		want           []Problem
	}{
		{"none", nil, nil, nil},
		{"a write in flight, then done", []Problem{tmp}, nil, nil},
		{"cut short: found both times", []Problem{tmp, gone}, []Problem{gone, tmp}, []Problem{gone, tmp}},
		{"found only the second time: not yet persisting", nil, []Problem{gone}, nil},
		{"same path, another problem", []Problem{rev3}, []Problem{rev4}, nil},
		{"some of each", []Problem{tmp, rev3, gone}, []Problem{rev4, gone}, []Problem{gone}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Persisting(tt.earlier, tt.later); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Persisting(%v, %v) = %v, want %v", tt.earlier, tt.later, got, tt.want)
			}
		})
	}
}

// TestCheckRunCovered: a record whose run's next changes (an end) are in
// the history is reported as lacking them, unless it has ended itself
// (fsck --repair's rebuilt record, say): recovery applies them only to
// runs not ended, and so must fsck report.
func TestCheckRunCovered(t *testing.T) {
	created := time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		state StateName
		want  bool
	}{
		{Running, true},
		{Completed, false},
	} {
		s := NewStore(t.TempDir())
		s.SetDurability(WatcherCrash)
		if err := s.MakeRunDir("a"); err != nil {
			t.Fatal(err)
		}
		st := &State{ID: "a", State: tc.state, Rev: 4, CreatedAt: created}
		if err := s.Write(st); err != nil {
			t.Fatal(err)
		}
		events := []Event{{ID: "a", Rev: 4, State: tc.state}, {ID: "a", Rev: 5, State: Completed, CreatedAt: &created}}
		got := false
		for _, p := range checkRun(s, "a", events, nil) {
			got = got || strings.Contains(p.What, "its record lacks the changes after rev 4 that the history has (completed, rev 5)")
		}
		if got != tc.want {
			t.Errorf("a %s record, the history's completed after it: reported %v, want %v", tc.state, got, tc.want)
		}
	}
}
