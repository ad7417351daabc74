package tend

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// A follower of the history passes every event once, in order, whatever
// it finds at its next check: lines appended to the file it has open
// just before that file was rotated, with the new file there yet or not.
func TestHistoryFollowerAcrossRotations(t *testing.T) {
	line := func(id string) string {
		return fmt.Sprintf(`{"time":"2026-11-29T06:00:00Z","id":%q,"rev":1,"state":"queued"}`+"\n", id)
	}
	appendTo := func(t *testing.T, path string, ids ...string) {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for _, id := range ids {
			if _, err := f.WriteString(line(id)); err != nil {
				t.Fatal(err)
			}
		}
	}
	tests := []struct {
		name   string
		newOne bool // the new history.jsonl is there at the next check
	}{
		{"new file there", true},
		{"between the rename and the new file", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "history.jsonl")
			var got []string
			h := &historyFollower{path: path, emit: func(ev Event) error { got = append(got, ev.ID); return nil }}
			defer h.close()
			appendTo(t, path, "a")
			if _, err := h.check(); err != nil {
				t.Fatal(err)
			}
			appendTo(t, path, "b", "c")
			if err := os.Rename(path, filepath.Join(dir, "history.1.jsonl")); err != nil {
				t.Fatal(err)
			}
			want := []string{"a", "b", "c"}
			if tt.newOne {
				appendTo(t, path, "d")
				want = append(want, "d")
			}
			if _, err := h.check(); err != nil {
				t.Fatal(err)
			}
			if !tt.newOne {
				appendTo(t, path, "d")
				want = append(want, "d")
				if _, err := h.check(); err != nil {
					t.Fatal(err)
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("events passed: %v, want %v", got, want)
			}
		})
	}
}
