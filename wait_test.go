package tend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/tendhq/tend/tracker"
	"golang.org/x/sys/unix"
)

// watchUntil checks on a timer at first: a condition that holds at once or
// after a few checks ends the wait with no more checks; so does an error.
func TestWaitUntilChecks(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name      string
		done      func(call int) (bool, error)
		wantErr   error
		wantCalls int
	}{
		{"at once", func(int) (bool, error) { return true, nil }, nil, 1},
		{"third check", func(call int) (bool, error) { return call == 3, nil }, nil, 3},
		{"error", func(int) (bool, error) { return false, boom }, boom, 1},
	}
	for _, tt := range tests {
		for _, every := range []time.Duration{spinEvery, answerEvery} {
			t.Run(tt.name+"/"+every.String(), func(t *testing.T) {
				calls := 0
				err := waiter{}.watchUntil(context.Background(), t.TempDir(), every, func() (bool, error) {
					calls++
					return tt.done(calls)
				})
				if !errors.Is(err, tt.wantErr) || calls != tt.wantCalls {
					t.Fatalf("watchUntil = %v after %d checks, want %v after %d", err, calls, tt.wantErr, tt.wantCalls)
				}
			})
		}
	}
}

// Past its timed checks, watchUntil is woken by inotify when something
// changes in the directory, not by its check every recheckEvery.
func TestWaitUntilWakesOnAChange(t *testing.T) {
	dir := t.TempDir()
	answer := filepath.Join(dir, "answer")
	start := time.Now()
	var wrote time.Time
	err := waiter{}.watchUntil(context.Background(), dir, spinEvery, func() (bool, error) {
		if _, err := os.Stat(answer); err == nil {
			return true, nil
		}
		// The timed checks are over by now (all but, rarely, the last):
		// the watch is in place.
		if wrote.IsZero() && time.Since(start) >= spinFor {
			wrote = time.Now()
			if err := os.WriteFile(answer, nil, 0o644); err != nil {
				return false, err
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(wrote); wrote.IsZero() || took >= recheckEvery {
		t.Errorf("woken %v after the change; inotify should have woken it", took)
	}
}

// watchUntil ends when its context does, during its timed checks or on
// inotify, with the context's error.
func TestWatchUntilEndsWithItsContext(t *testing.T) {
	for _, tc := range []struct{ after, every time.Duration }{
		{0, spinEvery}, {spinFor / 2, spinEvery}, {2 * spinFor, spinEvery}, {spinFor / 2, answerEvery},
	} {
		after, every := tc.after, tc.every
		ctx, cancel := context.WithCancel(context.Background())
		timer := time.AfterFunc(after, cancel)
		err := waiter{}.watchUntil(ctx, t.TempDir(), every, func() (bool, error) { return false, nil })
		timer.Stop()
		cancel()
		if !errors.Is(err, context.Canceled) {
			t.Errorf("canceled after %v: watchUntil = %v, want context.Canceled", after, err)
		}
	}
}

// A client waiting for an answer learns that no watcher runs at its next
// probe, and probes no more often than probeEvery.
func TestWatcherCheckProbesAtItsPace(t *testing.T) {
	w := watcherCheck{root: t.TempDir()} // no watcher has ever run there
	if !w.gone() {
		t.Fatal("gone() = false for a root no watcher runs on")
	}
	if !w.next.After(time.Now()) {
		t.Fatalf("after a probe, the next is due at %v, not later than now", w.next)
	}
	w.next = time.Now().Add(time.Hour)
	if w.gone() {
		t.Error("gone() probed before its time")
	}
	w.next = time.Time{}
	if !w.gone() {
		t.Error("gone() = false once its probe was due")
	}
}

// A wait whose context ends before it has looked again returns the
// record it read first, not none: the run exists.
func TestWaitForEndedContextKeepsTheRecord(t *testing.T) {
	root := filepath.Join(t.TempDir(), ".tend")
	c, err := Open(root, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(c.store.RunDir("v1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := c.store.Write(&tracker.State{ID: "v1", State: tracker.Running, Rev: 1, Command: []string{"sleep", "1"}, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	st, err := c.WaitFor(ctx, "v1", Ended)
	if !errors.Is(err, context.Canceled) || st == nil || st.ID != "v1" {
		t.Errorf("WaitFor with its context ended = %v, %v; want the record and context.Canceled", st, err)
	}
}

// A wait the kernel refuses an inotify instance (a user's 128 are held
// by as many other waits) polls instead, and ends when its condition
// holds; any other failure of inotify is still an error.
func TestWatchUntilPollsWithoutInotify(t *testing.T) {
	tests := []struct {
		name    string
		err     error
		wantErr bool
	}{
		{"instances", fmt.Errorf("couldn't initialize inotify: %w", unix.EMFILE), false},
		{"open files", fmt.Errorf("couldn't initialize inotify: %w", unix.ENFILE), false},
		{"watches", unix.ENOSPC, false},
		{"other", unix.EINVAL, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := waiter{newInotify: func() (*fsnotify.Watcher, error) { return nil, tt.err }}
			start := time.Now()
			err := w.watchUntil(context.Background(), t.TempDir(), spinEvery, func() (bool, error) {
				return time.Since(start) > 3*spinFor, nil
			})
			if gotErr := err != nil; gotErr != tt.wantErr {
				t.Fatalf("watchUntil = %v, want an error: %v", err, tt.wantErr)
			}
			if took := time.Since(start); took > recheckEvery {
				t.Errorf("took %v: it should poll every %v", took, pollEvery)
			}
		})
	}
}

// TestLastDeletionReadsALineAtATime: what a wait or a show of a deleted
// run (or of a typo) reads of a large history is its lines one at a time,
// keeping only its run's: the memory it takes does not grow with the
// files, a line far longer than tend writes included.
func TestLastDeletionReadsALineAtATime(t *testing.T) {
	root := t.TempDir()
	pad := []byte(`{"time":"2026-11-29T06:00:00Z","id":"pad","rev":1,"state":"queued"}` + "\n")
	write := func(name string, lines ...string) {
		t.Helper()
		f, err := os.Create(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for _, l := range lines {
			if _, err := f.WriteString(l); err != nil {
				t.Fatal(err)
			}
		}
	}
	block := string(bytes.Repeat(pad, 64<<10)) // 4.4 MiB
	long := `{"time":"2026-11-29T06:00:00Z","id":"pad","rev":1,"state":"queued","reason":"` + strings.Repeat("y", 2<<20) + "\"}\n"
	write("history.1.jsonl", block,
		`{"time":"2026-11-29T06:00:01Z","id":"x","rev":3,"state":"failed","exit_code":3}`+"\n",
		long, block,
		`{"time":"2026-11-29T06:00:02Z","id":"x","rev":4,"state":"deleted","reason":"tend rm"}`+"\n",
		block)
	write("history.jsonl", block, long)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	del, end, ok := lastDeletion(root, "x")
	runtime.ReadMemStats(&after)
	if !ok || del.Reason != "tend rm" || end == nil || end.State != tracker.Failed {
		t.Fatalf("lastDeletion = %+v, %+v, %v; want x's deletion, after it failed", del, end, ok)
	}
	if _, _, ok := lastDeletion(root, "typo"); ok {
		t.Fatal("a run the history does not name was deleted")
	}
	// Some 15 MiB of history: read whole, that much at least.
	if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
		t.Errorf("lastDeletion allocated %d bytes for %d of history: want a line at a time", got, 3*len(block)+len(block)+2*len(long))
	}
}

// TestWaitDeletedSaysHowItEnded: a wait on a run deleted since it ended
// (its record gone, its directory too) returns a DeletedError that
// matches ErrNotFound and carries how the history says the run ended,
// for tend wait to exit with; with no end line in the history, none.
func TestWaitDeletedSaysHowItEnded(t *testing.T) {
	root := t.TempDir()
	hist := `{"time":"2026-11-29T06:00:00Z","id":"x","rev":1,"state":"running","pid":42}` + "\n" +
		`{"time":"2026-11-29T06:00:01Z","id":"x","rev":2,"state":"failed","pid":42,"signal":"SIGKILL","reason":"killed by SIGKILL"}` + "\n" +
		`{"time":"2026-11-29T06:00:02Z","id":"x","rev":3,"state":"deleted","reason":"tend rm"}` + "\n" +
		`{"time":"2026-11-29T06:00:03Z","id":"y","rev":3,"state":"deleted","reason":"tend rm"}` + "\n"
	if err := os.WriteFile(filepath.Join(root, "history.jsonl"), []byte(hist), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Open(root, Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Wait(context.Background(), "x")
	var del *DeletedError
	if !errors.As(err, &del) || !errors.Is(err, ErrNotFound) {
		t.Fatalf("Wait(x) = %v; want a DeletedError matching ErrNotFound", err)
	}
	if e := del.Ended; e == nil || e.State != tracker.Failed || e.Signal != "SIGKILL" || e.PID != 42 || e.ExitCode != nil {
		t.Fatalf("Wait(x)'s Ended = %+v; want failed by SIGKILL, pid 42", e)
	}
	if del.Deleted.Reason != "tend rm" {
		t.Errorf("Wait(x)'s Deleted = %+v; want tend rm's line", del.Deleted)
	}
	_, err = c.Wait(context.Background(), "y")
	if !errors.As(err, &del) || del.Ended != nil {
		t.Fatalf("Wait(y) = %v (ended %+v); want a DeletedError with no end: the history has none", err, del)
	}
}
