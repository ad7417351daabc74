package tend

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
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

// TestHistoryFollowerAcrossTwoRotations: a follower passes the events of
// every file, even when two rotations came between two of its checks: it
// reads the file rotated in after the one it had, not the one that is
// history.jsonl by then, which skipped the file between.
func TestHistoryFollowerAcrossTwoRotations(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "history.jsonl")
	write := func(ids ...string) {
		t.Helper()
		var b strings.Builder
		for _, id := range ids {
			fmt.Fprintf(&b, `{"time":"2026-11-29T06:00:00Z","id":%q,"rev":1,"state":"queued"}`+"\n", id)
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString(b.String()); err != nil {
			t.Fatal(err)
		}
	}
	rotate := func() {
		t.Helper()
		for _, r := range [][2]string{{"history.2.jsonl", "history.3.jsonl"}, {"history.1.jsonl", "history.2.jsonl"}, {"history.jsonl", "history.1.jsonl"}} {
			if err := os.Rename(filepath.Join(dir, r[0]), filepath.Join(dir, r[1])); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
		}
	}
	var got []string
	h := &historyFollower{path: path, emit: func(ev Event) error { got = append(got, ev.ID); return nil }}
	defer h.close()
	write("a")
	if _, err := h.check(); err != nil {
		t.Fatal(err)
	}
	write("b")
	rotate()
	write("c")
	rotate()
	write("d")
	if _, err := h.check(); err != nil {
		t.Fatal(err)
	}
	write("e")
	if _, err := h.check(); err != nil {
		t.Fatal(err)
	}
	if want := []string{"a", "b", "c", "d", "e"}; !slices.Equal(got, want) {
		t.Errorf("events passed: %v, want %v", got, want)
	}
}

// TestEventsFollowAcrossARotationAtItsStart: tend events -f passes every
// event once, in order, when the history rotates between its finding the
// files and its reading them: the rotated files are read as they were
// found, not by their names (which a rotation gives other files), and the
// file it follows is the one that was history.jsonl then.
func TestEventsFollowAcrossARotationAtItsStart(t *testing.T) {
	line := func(id string) string {
		return fmt.Sprintf(`{"time":"2026-11-29T06:00:00Z","id":%q,"rev":1,"state":"queued"}`+"\n", id)
	}
	root := t.TempDir()
	write := func(name string, ids ...string) {
		t.Helper()
		var b strings.Builder
		for _, id := range ids {
			b.WriteString(line(id))
		}
		f, err := os.OpenFile(filepath.Join(root, name), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString(b.String()); err != nil {
			t.Fatal(err)
		}
	}
	write("history.1.jsonl", "a", "b")
	write("history.jsonl", "c", "d")
	c, err := Open(root, Options{})
	if err != nil {
		t.Fatal(err)
	}
	rename := func(from, to string) {
		t.Helper()
		if err := os.Rename(filepath.Join(root, from), filepath.Join(root, to)); err != nil {
			t.Fatal(err)
		}
	}
	c.historyOpened = func() {
		// A rotation, as tracker.History makes one, and a line after it.
		rename("history.1.jsonl", "history.2.jsonl")
		rename("history.jsonl", "history.1.jsonl")
		write("history.jsonl", "e")
	}
	want := []string{"a", "b", "c", "d", "e"}
	var got []string
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = c.Events(ctx, EventFilter{}, true, func(ev Event) error {
		got = append(got, ev.ID)
		if len(got) >= len(want) {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("events passed: %v, want %v", got, want)
	}
}

// TestEventsFollowSince: tend events -f --since passes only the events
// at or after since, of the history there is and of what is appended,
// and does not read the rotated files written before it.
func TestEventsFollowSince(t *testing.T) {
	root := t.TempDir()
	since := time.Now().Add(-time.Minute).Truncate(time.Second)
	line := func(id string, at time.Time) string {
		return fmt.Sprintf(`{"time":%q,"id":%q,"rev":1,"state":"queued"}`+"\n", at.Format(time.RFC3339Nano), id)
	}
	write := func(name string, body string, mtime time.Time) {
		t.Helper()
		path := filepath.Join(root, name)
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	// Not read: a read fails closed on its torn line.
	write("history.2.jsonl", line("ancient", since.Add(-48*time.Hour))+"{torn", since.Add(-24*time.Hour))
	write("history.1.jsonl", line("old1", since.Add(-time.Second))+line("a", since), since.Add(time.Second))
	write("history.jsonl", line("old0", since.Add(-time.Hour))+line("b", since.Add(time.Second)), time.Now())
	c, err := Open(root, Options{})
	if err != nil {
		t.Fatal(err)
	}
	c.historyOpened = func() {
		f, err := os.OpenFile(filepath.Join(root, "history.jsonl"), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		f.WriteString(line("old-appended", since.Add(-time.Second)) + line("c", time.Now()))
	}
	want := []string{"a", "b", "c"}
	var got []string
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = c.Events(ctx, EventFilter{Since: since}, true, func(ev Event) error {
		got = append(got, ev.ID)
		if len(got) >= len(want) {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Events = %v, after %v", err, got)
	}
	if !slices.Equal(got, want) {
		t.Errorf("events passed: %v, want %v", got, want)
	}
}
