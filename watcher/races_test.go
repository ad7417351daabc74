package watcher_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tendhq/tend"
	"github.com/tendhq/tend/procfs"
	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
	"github.com/tendhq/tend/watcher"
	"github.com/tendhq/tend/watcher/config"
	"golang.org/x/sys/unix"
)

// The state machine's races, driven in this process: a watcher in a
// goroutine, real /bin/sh runs, requests through the client package. No
// tend binary is built or started, so each round costs what its runs do.

// inProcess starts a watcher on a new root and returns a client of it; the
// watcher is stopped (its runs with it) when the test ends.
func inProcess(t *testing.T) *tend.Client {
	t.Helper()
	return inProcessWith(t, watcher.Run)
}

// inProcessHolding is inProcess, with a watcher whose steps on its runs'
// processes that hold names are held back (watcher.Hold); release lets
// them all go when the test ends, before the watcher is stopped (a test
// that failed holding one would otherwise wait for its run forever).
func inProcessHolding(t *testing.T, hold watcher.Hold, release func()) *tend.Client {
	t.Helper()
	c := inProcessWith(t, func(cfg watcher.Config) error { return watcher.RunHolding(cfg, hold) })
	t.Cleanup(release) // runs before inProcessWith's, which stops the watcher
	return c
}

func inProcessWith(t *testing.T, run func(watcher.Config) error) *tend.Client {
	t.Helper()
	root := t.TempDir() + "/.tend"
	readyR, readyW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan os.Signal, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(watcher.Config{Root: root, Log: testLog{t}, Stop: stop, Ready: readyW, Settle: 50 * time.Millisecond, Settings: config.Default})
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

// The same races, each in one order, made certain by holding a step of
// the watcher's back (watcher.Hold): a signal it sends to a run's group
// waits in a channel until the test sends it, an exit waits until the
// test lets the loop hear of it.

// heldSignal is a signal the watcher sent to a run's group, held back.
type heldSignal struct {
	pgid int
	sig  syscall.Signal
}

// signalHold holds the watcher's signals in held until released; then
// it kills every group it held a signal for, and sends the watcher's
// signals on.
type signalHold struct {
	held     chan heldSignal
	mu       sync.Mutex
	released bool
	groups   map[int]bool
}

// holdSignals returns a Hold whose signals wait in the channel returned,
// and the function that releases them.
func holdSignals() (watcher.Hold, <-chan heldSignal, func()) {
	h := &signalHold{held: make(chan heldSignal, 64), groups: make(map[int]bool)}
	return watcher.Hold{Signal: h.signal}, h.held, h.release
}

func (h *signalHold) signal(pgid int, sig syscall.Signal) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.released {
		return unix.Kill(-pgid, sig)
	}
	h.groups[pgid] = true
	h.held <- heldSignal{pgid, sig}
	return nil
}

func (h *signalHold) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.released = true
	for pgid := range h.groups {
		unix.Kill(-pgid, syscall.SIGKILL)
	}
}

// nextSignal waits for the watcher's next signal sig, past others.
func nextSignal(t *testing.T, held <-chan heldSignal, sig syscall.Signal) heldSignal {
	t.Helper()
	for {
		select {
		case s := <-held:
			if s.sig == sig {
				return s
			}
		case <-deadline(t).Done():
			t.Fatalf("the watcher sent no %v", sig)
		}
	}
}

// A cancel that comes while a restart's SIGTERM is on its way: the cancel
// wins, the run ends canceled at its first attempt, the cancel is
// answered canceled and the restart not_running: canceled.
func TestHeldCancelOverRestart(t *testing.T) {
	hold, held, release := holdSignals()
	c := inProcessHolding(t, hold, release)
	ctx := deadline(t)
	grace := spool.Duration(time.Minute) // no SIGKILL of the watcher's meanwhile
	_, err := c.Start(ctx, "svc", tend.Request{
		Shell:   "trap 'exit 0' TERM; while :; do sleep 0.01; done",
		Grace:   &grace,
		Restart: &spool.Restart{Policy: "always", Limit: 100, Window: spool.Duration(time.Minute), MaxDelay: spool.Duration(time.Second)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitFor(ctx, "svc", func(r *tend.Record) bool { return r.State == tracker.Running }); err != nil {
		t.Fatal(err)
	}
	restarted := make(chan tend.Outcome, 1)
	go func() { out, _ := c.Restart(ctx, "svc", tend.Control{}); restarted <- out }()
	term := nextSignal(t, held, syscall.SIGTERM) // the restart's: it is stopping, to start again
	canceled := make(chan tend.Outcome, 1)
	go func() { out, _ := c.Cancel(ctx, "svc", tend.Control{}); canceled <- out }()
	if _, err := c.WaitFor(ctx, "svc", func(r *tend.Record) bool { return r.Stop != nil && r.Stop.Cause == tracker.CauseCanceled }); err != nil {
		t.Fatalf("the cancel did not take over the restart's stop: %v", err)
	}
	unix.Kill(-term.pgid, syscall.SIGTERM)
	st := ended(t, c, "svc")
	if st.State != tracker.Canceled || st.Attempt != 1 {
		t.Fatalf("the run ended %s at attempt %d (%s); want canceled at attempt 1", st.State, st.Attempt, st.Reason)
	}
	if out := <-canceled; out.Outcome != spool.Canceled {
		t.Errorf("the cancel was answered %s, want canceled", out)
	}
	if out := <-restarted; out.Outcome != spool.NotRunning || out.Detail != string(tracker.Canceled) {
		t.Errorf("the restart was answered %s, want not_running: canceled", out)
	}
}

// A delete that comes once the run's process has exited, before the
// watcher has heard of it: refused (still_active), with the record still
// running; once the end is recorded, the same delete is done.
func TestHeldDeleteBeforeCompletion(t *testing.T) {
	exited, release := make(chan struct{}, 1), make(chan struct{})
	var once sync.Once
	letGo := func() { once.Do(func() { close(release) }) }
	c := inProcessHolding(t, watcher.Hold{Exited: func(wait func() error) error {
		err := wait()
		exited <- struct{}{}
		<-release
		return err
	}}, letGo)
	ctx := deadline(t)
	if _, err := c.Start(ctx, "job", tend.Request{Shell: "exit 0"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-ctx.Done():
		t.Fatal("the run's process did not exit")
	}
	outs, err := c.Delete(ctx, tend.Control{}, "job")
	if err != nil || outs[0].Outcome != spool.StillActive {
		t.Fatalf("a delete after the exit, before the watcher heard of it, was answered %v, %v; want still_active", outs, err)
	}
	if st, err := c.Show(ctx, "job"); err != nil || st.State != tracker.Running {
		t.Fatalf("after a refused delete the run is %v (%v); want running", st, err)
	}
	letGo()
	if st := ended(t, c, "job"); st.State != tracker.Completed {
		t.Fatalf("the run ended %s (%s), want completed", st.State, st.Reason)
	}
	outs, err = c.Delete(ctx, tend.Control{}, "job")
	if err != nil || outs[0].Outcome != spool.Deleted {
		t.Fatalf("a delete once the end was recorded was answered %v, %v; want deleted", outs, err)
	}
	if _, err := c.Show(ctx, "job"); !errors.Is(err, tend.ErrNotFound) {
		t.Errorf("deleted, but Show says %v", err)
	}
}

// A cancel that comes while the timeout's SIGTERM is on its way: the
// timeout's stop stands, the run ends timed_out, and the cancel is
// answered already_finished: timed_out once it has.
func TestHeldCancelDuringTimeout(t *testing.T) {
	hold, held, release := holdSignals()
	c := inProcessHolding(t, hold, release)
	ctx := deadline(t)
	grace := spool.Duration(time.Minute)
	if _, err := c.Start(ctx, "slow", tend.Request{Shell: "trap '' TERM; while :; do sleep 0.01; done", Timeout: spool.Duration(50 * time.Millisecond), Grace: &grace}); err != nil {
		t.Fatal(err)
	}
	term := nextSignal(t, held, syscall.SIGTERM) // the timeout's
	canceled := make(chan tend.Outcome, 1)
	go func() { out, _ := c.Cancel(ctx, "slow", tend.Control{}); canceled <- out }()
	if _, err := c.WaitFor(ctx, "slow", func(r *tend.Record) bool { return r.Stop != nil && len(r.Stop.Requests) > 0 }); err != nil {
		t.Fatalf("the cancel did not join the timeout's stop: %v", err)
	}
	unix.Kill(-term.pgid, syscall.SIGKILL) // it ignores SIGTERM
	st := ended(t, c, "slow")
	if st.State != tracker.TimedOut {
		t.Fatalf("the run ended %s (%s), want timed_out", st.State, st.Reason)
	}
	if out := <-canceled; out.Outcome != spool.AlreadyFinished || out.Detail != string(tracker.TimedOut) {
		t.Errorf("the cancel was answered %s, want already_finished: timed_out", out)
	}
}

// A fork that fails (EAGAIN, as at the user's process limit): its run
// ends failed, saying why, with no descriptor of its launch left open in
// the watcher; the runs forked beside it are not touched.
func TestHeldForkFails(t *testing.T) {
	hold := watcher.Hold{Fork: func(id string, fork func() error) error {
		if strings.HasPrefix(id, "bad") {
			return syscall.EAGAIN
		}
		return fork()
	}}
	c := inProcessHolding(t, hold, func() {})
	ctx := deadline(t)
	var fds int
	for i := range 21 {
		if i == 1 {
			fds = openFDs(t) // once the watcher has what it keeps (its /dev/null)
		}
		for _, id := range []string{fmt.Sprintf("bad%d", i), fmt.Sprintf("good%d", i)} {
			if _, err := c.Start(ctx, id, tend.Request{Shell: "exit 0"}); err != nil && !strings.HasPrefix(id, "bad") {
				t.Fatalf("start %s: %v", id, err)
			}
		}
	}
	for i := range 21 {
		if st := ended(t, c, fmt.Sprintf("bad%d", i)); st.State != tracker.Failed || st.PID != 0 || !strings.Contains(st.Reason, "resource temporarily unavailable") {
			t.Fatalf("a run whose fork failed: %s, pid %d (%s); want failed, no pid, saying why", st.State, st.PID, st.Reason)
		}
		if st := ended(t, c, fmt.Sprintf("good%d", i)); st.State != tracker.Completed {
			t.Fatalf("a run forked beside a failed fork: %s (%s), want completed", st.State, st.Reason)
		}
	}
	if now := openFDs(t); now > fds {
		t.Errorf("%d descriptors open before 20 failed forks, %d after", fds, now)
	}
}

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(fds)
}

// A run's leader is reaped only once its end is in its record: until then
// its PID is its own, so no signal sent by it can reach another process,
// and a watcher that dies in between leaves the exit status to its
// keeper. Once it is reaped, a cancel is answered already_finished and a
// signal not_running, and no signal is sent.
func TestHeldReapAfterEnd(t *testing.T) {
	var client atomic.Pointer[tend.Client]
	atReap := make(chan string, 1)
	hold, held, release := holdSignals()
	hold.Reap = func(reap func() error) error {
		st, err := client.Load().Show(context.Background(), "job")
		if err != nil {
			atReap <- err.Error()
			return reap()
		}
		ps, err := procfs.ReadStat(st.PID)
		atReap <- fmt.Sprintf("%s %v, pid %d %c %v", st.State, st.ExitCode != nil && *st.ExitCode == 3, st.PID, ps.State, err)
		return reap()
	}
	c := inProcessHolding(t, hold, release)
	client.Store(c)
	ctx := deadline(t)
	st, err := c.Start(ctx, "job", tend.Request{Shell: "exit 3"})
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("failed true, pid %d Z <nil>", st.PID)
	select {
	case got := <-atReap:
		if got != want {
			t.Fatalf("when its leader was reaped, the run was %q; want %q (its end recorded, the leader a zombie)", got, want)
		}
	case <-ctx.Done():
		t.Fatal("the run's leader was never reaped")
	}
	if out, err := c.Cancel(ctx, "job", tend.Control{}); out.Outcome != spool.AlreadyFinished {
		t.Errorf("a cancel after the end was answered %s, %v; want already_finished", out, err)
	}
	if out, err := c.Signal(ctx, "job", "TERM", tend.Control{}); out.Outcome != spool.NotRunning {
		t.Errorf("a signal after the end was answered %s, %v; want not_running", out, err)
	}
	select {
	case sig := <-held:
		t.Errorf("signal %v sent to group %d of a run that has ended", sig.sig, sig.pgid)
	default:
	}
}
