package watcher_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tendhq/tend"
	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
	"github.com/tendhq/tend/watcher"
)

// The state machine's races, driven in this process: a watcher in a
// goroutine, real /bin/sh runs, requests through the client package. No
// tend binary is built or started, so each round costs what its runs do.

// inProcess starts a watcher on a new root and returns a client of it; the
// watcher is stopped (its runs with it) when the test ends.
func inProcess(t *testing.T) *tend.Client {
	t.Helper()
	root := t.TempDir() + "/.tend"
	readyR, readyW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan os.Signal, 1)
	done := make(chan error, 1)
	go func() {
		done <- watcher.Run(watcher.Config{Root: root, Log: testLog{t}, Stop: stop, Ready: readyW, Settle: 50 * time.Millisecond, Settings: watcher.DefaultSettings})
	}()
	line := make([]byte, 16)
	if _, err := readyR.Read(line); err != nil {
		t.Fatalf("the watcher did not get ready: %v (%v)", err, <-done)
	}
	readyR.Close()
	t.Cleanup(func() {
		stop <- syscall.SIGTERM
		if err := <-done; err != nil {
			t.Errorf("watcher: %v", err)
		}
	})
	c, err := tend.Open(root, tend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// testLog is the watcher's log, in the test's (shown if it fails).
type testLog struct{ t *testing.T }

func (l testLog) Write(b []byte) (int, error) {
	l.t.Log(strings.TrimSuffix(string(b), "\n"))
	return len(b), nil
}

func deadline(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// ended waits until run id has ended, and returns its record.
func ended(t *testing.T, c *tend.Client, id string) *tend.Record {
	t.Helper()
	st, err := c.Wait(deadline(t), id)
	if err != nil {
		t.Fatalf("run %s: %v", id, err)
	}
	return st
}

// A cancel that lands while a service restarts (its old process stopping,
// or the new one not yet started): the run ends canceled, once, and no
// attempt starts after the cancel's answer.
func TestRaceCancelOverRestart(t *testing.T) {
	c := inProcess(t)
	ctx := deadline(t)
	for i := range 10 {
		id := fmt.Sprintf("svc%d", i)
		grace := spool.Duration(100 * time.Millisecond)
		_, err := c.Start(ctx, id, tend.Request{
			Shell:   "trap 'exit 0' TERM; while :; do sleep 0.01; done",
			Grace:   &grace,
			Restart: &spool.Restart{Policy: "always", Limit: 100, Window: spool.Duration(time.Minute), Delay: spool.Duration(time.Duration(i%3) * 5 * time.Millisecond), MaxDelay: spool.Duration(time.Second)},
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.WaitFor(ctx, id, func(r *tend.Record) bool { return r.State == tracker.Running }); err != nil {
			t.Fatal(err)
		}
		restarted := make(chan error, 1)
		go func() { _, err := c.Restart(ctx, id, tend.Control{}); restarted <- err }()
		time.Sleep(time.Duration(i) * time.Millisecond)
		out, err := c.Cancel(ctx, id, tend.Control{})
		if err != nil && !errors.Is(err, tend.ErrFinished) {
			t.Fatalf("run %s: cancel: %v", id, err)
		}
		<-restarted // restarted, or not_running: either is an answer
		t.Logf("run %s: cancel answered %s, %v", id, out, err)
		st := ended(t, c, id)
		if st.State != tracker.Canceled {
			t.Fatalf("run %s: canceled (%s) during a restart, but it ended %s (%s)", id, out, st.State, st.Reason)
		}
		attempt := st.Attempt
		time.Sleep(50 * time.Millisecond)
		if st, _ := c.Show(ctx, id); st.State != tracker.Canceled || st.Attempt != attempt {
			t.Fatalf("run %s: after its cancel, it is %s at attempt %d (was %d)", id, st.State, st.Attempt, attempt)
		}
	}
}

// A delete that lands as its run completes: either refused (still_active,
// and the run then completes) or done (its record gone, its history
// ending completed, deleted); never a record left of a deleted run.
func TestRaceDeleteCompletion(t *testing.T) {
	c := inProcess(t)
	ctx := deadline(t)
	for i := range 20 {
		id := fmt.Sprintf("del%d", i)
		if _, err := c.Start(ctx, id, tend.Request{Shell: fmt.Sprintf("sleep 0.00%d", i%10)}); err != nil {
			t.Fatal(err)
		}
		outs, err := c.Delete(ctx, tend.Control{}, id)
		if err != nil {
			t.Fatal(err)
		}
		switch o := outs[0]; o.Outcome {
		case spool.StillActive:
			if st := ended(t, c, id); st.State != tracker.Completed {
				t.Fatalf("run %s: %s after a refused delete", id, st.State)
			}
		case spool.Deleted:
			if _, err := c.Show(ctx, id); !errors.Is(err, tend.ErrNotFound) {
				t.Fatalf("run %s: deleted, but Show says %v", id, err)
			}
		default:
			t.Fatalf("run %s: delete answered %s", id, o)
		}
	}
}

// A cancel that lands as the run's timeout stops it: the run ends once,
// and the cancel's answer agrees with how (canceled, or already_finished:
// timed_out).
func TestRaceCancelDuringTimeout(t *testing.T) {
	c := inProcess(t)
	ctx := deadline(t)
	for i := range 10 {
		id := fmt.Sprintf("to%d", i)
		grace := spool.Duration(50 * time.Millisecond)
		if _, err := c.Start(ctx, id, tend.Request{Shell: "trap '' TERM; while :; do sleep 0.01; done", Timeout: spool.Duration(100 * time.Millisecond), Grace: &grace}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(90+2*i) * time.Millisecond)
		out, err := c.Cancel(ctx, id, tend.Control{})
		st := ended(t, c, id)
		switch {
		case err == nil && st.State == tracker.Canceled:
		case errors.Is(err, tend.ErrFinished) && st.State == tracker.TimedOut && strings.Contains(out.String(), "timed_out"):
		case err == nil && st.State == tracker.TimedOut && out.Outcome == spool.AlreadyFinished:
		default:
			t.Fatalf("run %s: cancel answered %s (%v), but the run ended %s (%s)", id, out, err, st.State, st.Reason)
		}
	}
}
