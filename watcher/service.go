package watcher

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/tendhq/tend/procfs"
	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
)

// Services: a run may wait for readiness (a health check, or a ready file
// its process creates), and may be started again when it ends (its
// restart policy). Between attempts it is in backoff, with no process.

// readyPath is the file a run creates to say it is ready ($TEND_READY).
func (w *watcher) readyPath(id string) string {
	return w.store.Run(id).Ready()
}

// waitsForReady reports whether st is starting until a check passes.
func waitsForReady(st *tracker.State) bool {
	return st.Health != nil || st.ReadyFile
}

// watchReadiness starts r's health checks, or its wait for its ready file.
func (w *watcher) watchReadiness(r *run) {
	switch {
	case r.st.Health != nil:
		r.st.HealthStatus = &tracker.HealthStatus{Status: "starting"}
		w.scheduleCheck(r, 0)
	case r.st.ReadyFile && r.st.ReadyAt == nil:
		w.scheduleReadyPoll(r)
	}
}

// scheduleReadyPoll looks for r's ready file every 50 ms while it starts.
func (w *watcher) scheduleReadyPoll(r *run) {
	r.poll = w.after(50*time.Millisecond, func() {
		if w.runs[r.st.ID] != r || r.exit != nil || r.st.ReadyAt != nil {
			return
		}
		if _, err := os.Lstat(w.readyPath(r.st.ID)); err == nil {
			w.becameReady(r, "it created its ready file")
			return
		}
		w.scheduleReadyPoll(r)
	})
}

// becameReady records r ready: running from now on.
func (w *watcher) becameReady(r *run, how string) {
	now := time.Now()
	r.st.ReadyAt = &now
	if r.st.State == tracker.Starting {
		r.st.State = tracker.Running
	}
	w.save(r.st)
	w.log.Printf("run %s: ready (%s)", r.st.ID, how)
}

// scheduleCheck runs r's health check after d, off the loop, and takes its
// result on the loop. An exec check runs as the run does: as its owner,
// in its working directory.
func (w *watcher) scheduleCheck(r *run, d time.Duration) {
	h := *r.st.Health
	as, err := w.runAs(r.st)
	if err != nil {
		w.log.Printf("run %s: health check: %v", r.st.ID, err)
		return
	}
	check := check{health: h, cwd: r.st.Cwd, env: childEnv(as.baseEnv(), as.env()), netCheck: w.cfg.NetCheck}
	if as != nil {
		check.cred = &syscall.Credential{Uid: uint32(as.uid), Gid: uint32(as.gid), Groups: as.groups}
	}
	r.poll = time.AfterFunc(d, func() {
		start := time.Now()
		ok, detail := check.run(w.forker)
		took := time.Since(start)
		w.do <- func() { w.checked(r, ok, detail, took) }
	})
}

// checked takes one health check result of r, which took took.
func (w *watcher) checked(r *run, ok bool, detail string, took time.Duration) {
	if w.runs[r.st.ID] != r || r.exit != nil || r.st.Stop != nil {
		return
	}
	hs := r.st.HealthStatus
	h := r.st.Health
	defer w.scheduleCheck(r, h.Interval.D())
	if r.st.State == tracker.Paused {
		return // a stopped process cannot answer: the result says nothing
	}
	now := time.Now()
	if len(detail) > maxCheckDetail {
		detail = strings.ToValidUTF8(detail[:maxCheckDetail], "") // a server's status line is as long as it makes it
	}
	hs.Checks = append(hs.Checks, tracker.HealthCheck{Time: now, OK: ok, Detail: detail, DurationSeconds: took.Seconds()})
	if len(hs.Checks) > 5 {
		hs.Checks = hs.Checks[len(hs.Checks)-5:]
	}
	if ok {
		was := hs.Status
		hs.Status, hs.Failures = "healthy", 0
		if r.st.ReadyAt == nil {
			w.becameReady(r, "its health check passed")
		} else if was != "healthy" {
			w.saveHealthChange(r)
		}
		return
	}
	inStartPeriod := now.Sub(r.started) < h.StartPeriod.D()
	if inStartPeriod {
		return
	}
	hs.Failures++
	if hs.Failures < h.Retries {
		w.saveHealth(r)
		return
	}
	was := hs.Status
	hs.Status = "unhealthy"
	if r.st.Restart == nil {
		if was != "unhealthy" {
			w.saveHealthChange(r)
			w.sayUnhealthy(r, detail)
		} else {
			w.saveHealth(r)
		}
		return
	}
	w.log.Printf("run %s: unhealthy: %d checks failed in a row (%s)", r.st.ID, hs.Failures, detail)
	// The check's output stays in the record, its owner's: the reason goes
	// to the history too, which every user of a shared root reads.
	w.stop(r, tracker.CauseRestart, fmt.Sprintf("unhealthy: %d health checks failed in a row (tend show %s)", hs.Failures, r.st.ID), r.grace(), "")
}

// sayUnhealthy logs that r, which has no restart policy, became
// unhealthy: at once, or, within healthSavedEvery of the last time it
// said so (a check that passes and fails by turns would say it at each
// turn), once that time is over if r is unhealthy still. Dropped, the
// line of a service that was ready again in between would leave "ready"
// as the log's last word on a service that is down.
func (w *watcher) sayUnhealthy(r *run, detail string) {
	say := func() {
		r.unhealthyLogged = time.Now()
		w.log.Printf("run %s: unhealthy: %d checks failed in a row (%s)", r.st.ID, r.st.HealthStatus.Failures, detail)
	}
	wait := healthSavedEvery - time.Since(r.unhealthyLogged)
	if wait <= 0 {
		say()
		return
	}
	if r.unhealthySay {
		return // due already
	}
	r.unhealthySay = true
	w.after(wait, func() {
		r.unhealthySay = false
		if w.runs[r.st.ID] == r && r.exit == nil && r.st.HealthStatus.Status == "unhealthy" {
			say()
		}
	})
}

// maxCheckDetail is the most a health check's detail keeps: five of them
// are in the record, which readers take only up to a size.
const maxCheckDetail = 512

// saveHealth saves run r's record for its health checks' last results,
// at most every healthSavedEvery, and reports whether it did. Each save
// is a line in the history too, which every user of a shared root keeps:
// a check that keeps failing every 100 ms, or passing and failing by
// turns, would add ten lines a second for as long as its run lives. What
// is not saved then is saved once the time comes, if nothing else has
// been. (A run's readiness, and a stop to restart it, are saved at once.)
func (w *watcher) saveHealth(r *run) bool {
	now := time.Now()
	if wait := healthSavedEvery - now.Sub(r.healthSaved); wait > 0 {
		if r.healthSave == nil { // saved once the time comes: the last word is the checks'
			r.healthSave = w.after(wait, func() {
				r.healthSave = nil
				if w.runs[r.st.ID] == r && r.exit == nil {
					r.healthSaved = time.Now()
					w.save(r.st)
				}
			})
		}
		return false
	}
	r.healthSaved = now
	w.save(r.st)
	return true
}

// saveHealthChange saves run r's record for a change of its health
// status (healthy to unhealthy, or back) at once, so that `tend show`
// says so within a check of it, unless the last change was saved within
// healthSavedEvery: a service that is healthy and unhealthy by turns
// has its changes saved as saveHealth saves its checks.
func (w *watcher) saveHealthChange(r *run) {
	now := time.Now()
	if now.Sub(r.healthChangeSaved) < healthSavedEvery {
		w.saveHealth(r)
		return
	}
	r.healthChangeSaved, r.healthSaved = now, now
	if r.healthSave != nil { // this save is the one it waited to make
		r.healthSave.Stop()
		r.healthSave = nil
	}
	w.save(r.st)
}

// healthSavedEvery is how often at most a run's health checks, and
// changes of its health status, are saved on their own.
const healthSavedEvery = 10 * time.Second

// A check is one health check of a run, as it is performed: an exec
// check's command runs in cwd with env, as cred's user if cred is set.
type check struct {
	health   spool.Health
	cwd      string
	env      []string
	cred     *syscall.Credential
	netCheck []string // Config.NetCheck
}

// run performs the check, and says whether it passed and what it found.
// A tcp or http check of another user's run is made as that user, as an
// exec check is: from the watcher (root) it would connect as root, past
// the firewall rules that hold that user back (--uid-owner), and tell
// them what only root may reach.
func (c check) run(f *forker) (bool, string) {
	h := c.health
	ctx, cancel := context.WithTimeout(context.Background(), h.Timeout.D())
	defer cancel()
	if h.TCP == "" && h.HTTP == "" {
		cmd := exec.CommandContext(ctx, "/bin/sh", "-c", h.Exec)
		cmd.Dir, cmd.Env = c.cwd, c.env
		out, err := c.runCommand(f, cmd)
		if err != nil {
			return false, fmt.Sprintf("%v: %.100s", err, out)
		}
		return true, "exited 0"
	}
	if c.cred == nil || len(c.netCheck) == 0 {
		return CheckNetwork(ctx, h.TCP, h.HTTP)
	}
	args := slices.Clone(c.netCheck[1:])
	if h.TCP != "" {
		args = append(args, "--tcp="+h.TCP)
	} else {
		args = append(args, "--http="+h.HTTP)
	}
	cmd := exec.CommandContext(ctx, "/proc/self/exe", append(args, "--timeout", h.Timeout.D().String())...)
	cmd.Args[0] = c.netCheck[0]
	cmd.Dir, cmd.Env = "/", []string{"PATH=/usr/bin:/bin"}
	out, err := c.runCommand(f, cmd)
	detail := strings.TrimSpace(string(out))
	var exit *exec.ExitError
	switch {
	case err == nil:
		return true, detail
	case errors.As(err, &exit) && exit.ExitCode() == 1 && detail != "":
		return false, detail // the check's own failure
	}
	return false, fmt.Sprintf("checking as uid %d: %v: %.100s", c.cred.Uid, err, detail)
}

// runCommand runs cmd, a check's, as c's user, in a session (and so a
// group) of its own that its context's end kills, and returns its output.
// Not in the watcher's session: there it would have the watcher's
// terminal (tend watch run by root in one), to write to and push input
// into (TIOCSTI), and could SIGCONT what is stopped in it.
func (c check) runCommand(f *forker, cmd *exec.Cmd) ([]byte, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: c.cred}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second // what it started, or a tracer, may hold its output
	out := &headWriter{max: maxCheckDetail}
	cmd.Stdout, cmd.Stderr = out, out
	var err error
	f.run(func() { err = cmd.Start() }) // on the forker's thread: see forker
	if err == nil {
		err = cmd.Wait()
	}
	return out.b, err
}

// CheckNetwork makes a tcp health check (tcp: an address to connect to)
// or an http one (httpURL: a URL to GET, which passes with a 2xx status),
// as the calling process, and says whether it passed and what it found.
func CheckNetwork(ctx context.Context, tcp, httpURL string) (bool, string) {
	if tcp != "" {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", tcp)
		if err != nil {
			return false, err.Error()
		}
		c.Close()
		return true, "connected to " + tcp
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, httpURL, nil)
	if err != nil {
		return false, err.Error()
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, err.Error()
	}
	resp.Body.Close()
	return resp.StatusCode/100 == 2, resp.Status
}

// restartDelay returns how long run st waits before its next attempt: its
// first delay doubled for each recent restart, capped, with up to 20 %
// jitter so that services that failed together do not return together.
func restartDelay(st *tracker.State, recent int) time.Duration {
	d := baseDelay(st, recent)
	return d + time.Duration(rand.Float64()*maxJitter*float64(d))
}

// maxJitter is the most a restart delay is lengthened by, at random, so
// that services that failed together do not restart in lockstep.
const maxJitter = 0.2

// baseDelay is st's restart delay after recent restarts, before jitter:
// its own, or the floor of a restart loop (loopFloor), whichever is
// longer.
func baseDelay(st *tracker.State, recent int) time.Duration {
	floor := loopFloor(st, time.Now())
	d := st.Restart.Delay.D()
	for range recent {
		d *= 2
		if d >= st.Restart.MaxDelay.D() {
			return max(st.Restart.MaxDelay.D(), floor)
		}
	}
	return max(d, floor)
}

// loopFloor is the least delay before run st's next attempt, whatever
// its restart settings, which are its owner's: a "window" no two
// restarts fall in never reaches the "limit", and with no delay a
// service whose process ends at once restarted 200 times a second, each
// time a save of its record and two lines in the history, which every
// member of a shared root keeps. Beyond loopFreeRestarts attempts that
// ended within loopWindow, the next waits loopDelay, doubled for each
// attempt beyond, up to loopMaxDelay: a loop costs a handful of forks a
// minute.
func loopFloor(st *tracker.State, now time.Time) time.Duration {
	n := 0
	for _, a := range st.Attempts {
		if now.Sub(a.EndedAt) < loopWindow {
			n++
		}
	}
	if n <= loopFreeRestarts {
		return 0
	}
	return min(loopDelay<<min(n-loopFreeRestarts-1, 6), loopMaxDelay)
}

// The floor of a restart loop's delays (see loopFloor).
const (
	loopWindow       = time.Minute
	loopFreeRestarts = 5
	loopDelay        = time.Second
	loopMaxDelay     = 30 * time.Second
)

// maxKeptAttempts bounds the attempts a record keeps (see
// tracker.KeptAttempts, which a rebuilt record keeps too).
const maxKeptAttempts = tracker.MaxKeptAttempts

// recentRestarts counts st's attempts that ended within its restart window.
func recentRestarts(st *tracker.State, now time.Time) int {
	n := 0
	for _, a := range st.Attempts {
		if now.Sub(a.EndedAt) < st.Restart.Window.D() {
			n++
		}
	}
	return n
}

// wantsRestart reports whether run st, whose process ended as e (unknown
// if the status was lost), is to be started again by its policy.
func wantsRestart(st *tracker.State, e procfs.Exit, unknown bool) bool {
	if st.Restart == nil {
		return false
	}
	if st.Stop != nil {
		return st.Stop.Cause == tracker.CauseRestart
	}
	failed := unknown || e.Signal != 0 || e.Code != 0
	return st.Restart.Policy == spool.RestartAlways || failed && st.Restart.Policy == spool.RestartOnFailure
}

// keepAttempt moves the end of st's last attempt into st.Attempts.
func keepAttempt(st *tracker.State, reason string) {
	a := tracker.Attempt{Attempt: st.Attempt, EndedAt: time.Now(), ExitCode: st.ExitCode, Signal: st.Signal, Reason: reason}
	if st.StartedAt != nil {
		a.StartedAt = *st.StartedAt
	}
	if st.EndedAt != nil {
		a.EndedAt = *st.EndedAt
	}
	if st.Job != nil {
		a.Job = st.Job.ID
	}
	st.Attempts = append(st.Attempts, a)
	keep := tracker.KeptAttempts(st.Restart) // enough to count the window's
	if len(st.Attempts) > keep {
		st.Attempts = st.Attempts[len(st.Attempts)-keep:]
	}
}

// backoff is a run waiting, with no process, to be started again.
type backoff struct {
	st    *tracker.State
	timer *time.Timer
}

// enterBackoff records run st in backoff and schedules its next attempt.
// A restart request, or an unhealthy run, starts again at once.
func (w *watcher) enterBackoff(st *tracker.State, how string) {
	now := time.Now()
	keepAttempt(st, how)
	delay := restartDelay(st, recentRestarts(st, now)-1)
	if st.Stop != nil && st.Stop.Cause == tracker.CauseRestart && len(st.Stop.Requests) > 0 {
		delay = 0 // asked for: no backoff
	}
	next := now.Add(delay)
	st.State, st.NextStartAt = tracker.Backoff, &next
	st.Reason = fmt.Sprintf("%s; attempt %d starts in %v", how, st.Attempt+1, delay.Round(time.Millisecond))
	w.save(st)
	w.log.Printf("run %s: %s", st.ID, st.Reason)
	w.scheduleBackoff(st)
}

func (w *watcher) scheduleBackoff(st *tracker.State) {
	b := &backoff{st: st}
	// At most its delay from now, whatever the wall clock did since a
	// watcher before this one recorded it.
	d := baseDelay(st, recentRestarts(st, time.Now())-1)
	wait := min(time.Until(*st.NextStartAt), d+time.Duration(maxJitter*float64(d)))
	b.timer = w.after(wait, func() {
		if w.waiting[st.ID] == b {
			w.restartNow(st)
		}
	})
	w.waiting[st.ID] = b
}

// restartNow starts the next attempt of run st, which is in backoff.
func (w *watcher) restartNow(st *tracker.State) {
	if b := w.waiting[st.ID]; b != nil {
		b.timer.Stop()
		delete(w.waiting, st.ID)
	}
	b, _, err := w.readRequest(st.ID)
	req, perr := spool.ParseStart(b)
	if err != nil || perr != nil {
		now := time.Now()
		st.State, st.EndedAt, st.Reason = tracker.Failed, &now, "could not restart: its request is unreadable"
		w.save(st)
		return
	}
	requests := []string(nil)
	if st.Stop != nil {
		requests = st.Stop.Requests
	}
	st.Restarts++
	resetAttempt(st)
	for _, name := range requests {
		if n, err := spool.ParseKey(name); err == nil {
			markDone(st, n) // with the record the launch writes
		}
	}
	os.Remove(w.store.Run(st.ID).Started()) // the new attempt passes its own gate
	os.Remove(w.store.Run(st.ID).Gate())
	os.Remove(w.readyPath(st.ID))
	attempt := st.Attempt + 1 // counted once forked (see launch)
	w.launch(st, req.Env)
	for _, name := range requests {
		if n, err := spool.ParseKey(name); err == nil {
			w.outcome(n, spool.Restarted, fmt.Sprintf("attempt %d", attempt))
		}
	}
}

// resetAttempt clears what belongs to one attempt.
func resetAttempt(st *tracker.State) {
	st.PID, st.PGID, st.ProcStart, st.Boot = 0, 0, 0, ""
	st.StartedAt, st.EndedAt, st.ExitCode, st.Signal, st.DurationSeconds = nil, nil, nil, "", 0
	st.Stop, st.NextStartAt, st.ReadyAt, st.HealthStatus = nil, nil, nil, nil
	st.PausedAt, st.PausedFor = nil, 0
	st.State, st.Reason = tracker.Starting, ""
}

// restartLimitReached reports whether st may not be restarted again.
func restartLimitReached(st *tracker.State) bool {
	if st.Stop != nil && st.Stop.Cause == tracker.CauseRestart && len(st.Stop.Requests) > 0 {
		return false // asked for by a person or an agent
	}
	return st.Restart.Limit == 0 || recentRestarts(st, time.Now()) >= st.Restart.Limit
}

// endBackoff ends run b, in backoff, in state without starting it again.
func (w *watcher) endBackoff(b *backoff, state tracker.StateName, reason string) {
	b.timer.Stop()
	delete(w.waiting, b.st.ID)
	now := time.Now()
	b.st.State, b.st.Reason, b.st.EndedAt, b.st.NextStartAt = state, reason, &now, nil
	w.save(b.st)
	w.answerStop(b.st, string(state)) // a restart asked for, that now will not be
	w.log.Printf("run %s: %s (%s)", b.st.ID, state, reason)
}
