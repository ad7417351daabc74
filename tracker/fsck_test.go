package tracker

import (
	"reflect"
	"testing"
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
