package watcher

import (
	"fmt"
	"syscall"
	"time"

	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
	"golang.org/x/sys/unix"
)

// The verbs that act on a live run's process: signal, restart, pause and
// resume. Each checks the run's identity before it signals (signalGroup)
// and is idempotent: pausing a paused run answers paused, and so on.

// live returns run id's live process, or answers n not_running.
func (w *watcher) live(n spool.Name, st *tracker.State) *run {
	r := w.runs[st.ID]
	if r == nil || r.exit != nil {
		w.answer(n, spool.NotRunning, string(st.State))
		return nil
	}
	return r
}

// liveTarget is target, then live: the run request n acts on, which must
// have a live process. done removes the claimed request.
func (w *watcher) liveTarget(n spool.Name, f spool.File, session string, ifRev *int64) (*tracker.State, *run, func(), bool) {
	st, done, ok := w.target(n, f, session, ifRev)
	if !ok {
		return nil, nil, nil, false
	}
	r := w.live(n, st)
	if r == nil {
		done()
		return nil, nil, nil, false
	}
	return st, r, done, true
}

func (w *watcher) takeSignal(n spool.Name, f spool.File, req spool.Signal) {
	if w.jobs.byID[n.ID] != nil {
		w.takeJobSignal(n, f, req) // on a cluster
		return
	}
	_, r, done, ok := w.liveTarget(n, f, req.Session, req.IfRev)
	if !ok {
		return
	}
	defer done()
	w.signalGroup(r, req.Signal)
	w.answer(n, spool.Signaled, unix.SignalName(req.Signal))
}

// takeRestart stops a live run (SIGTERM, SIGKILL after the grace) and
// starts it again at once, under the same ID; a run in backoff starts at
// once. It is answered restarted when the new attempt has started.
func (w *watcher) takeRestart(n spool.Name, f spool.File, req spool.Cancel) {
	st, done, ok := w.target(n, f, req.Session, req.IfRev)
	if !ok {
		return
	}
	defer done()
	if b := w.waiting[st.ID]; b != nil {
		b.st.Stop = &tracker.Stop{Cause: tracker.CauseRestart, Requests: []string{n.Key()}, RequestedAt: time.Now()}
		w.restartNow(b.st)
		return
	}
	if w.stopFull(n, f, st) {
		return
	}
	if j := w.jobs.byID[st.ID]; j != nil {
		w.restartJob(j, n, req) // on a cluster
		return
	}
	r := w.live(n, st)
	if r == nil {
		return
	}
	if st.Restart == nil {
		st.Restart = &spool.Restart{Policy: spool.RestartNever, Limit: 0, Window: spool.DefaultRestart.Window}
	}
	grace := r.grace()
	if req.Grace != nil {
		grace = req.Grace.D()
	}
	if st.Stop != nil && st.Stop.Cause != tracker.CauseRestart {
		w.answer(n, spool.NotRunning, "it is being stopped ("+string(st.Stop.Cause)+")")
		return
	}
	w.stop(r, tracker.CauseRestart, "restart requested", grace, n.Key())
	w.log.Printf("%s: restarting (grace %s)", n, grace)
}

// takePause stops a live run's group with SIGSTOP; its timeout stops
// counting until it resumes.
func (w *watcher) takePause(n spool.Name, f spool.File, req spool.Cancel) {
	if w.jobs.byID[n.ID] != nil {
		w.takeJobSuspend(n, f, req, false) // on a cluster
		return
	}
	st, r, done, ok := w.liveTarget(n, f, req.Session, req.IfRev)
	if !ok {
		return
	}
	defer done()
	switch {
	case st.State == tracker.Paused:
		w.answer(n, spool.Paused, "already paused")
		return
	case st.Stop != nil:
		w.answer(n, spool.NotRunning, "it is being stopped")
		return
	}
	w.signalGroup(r, syscall.SIGSTOP)
	now := time.Now()
	st.PausedAt = &now
	st.Reason = "paused from " + string(st.State)
	st.State = tracker.Paused
	if r.timeout != nil {
		r.timeout.Stop()
		r.timeout = nil
	}
	w.save(st)
	w.answer(n, spool.Paused, "")
}

// takeResume continues a paused run's group with SIGCONT.
func (w *watcher) takeResume(n spool.Name, f spool.File, req spool.Cancel) {
	if w.jobs.byID[n.ID] != nil {
		w.takeJobSuspend(n, f, req, true) // on a cluster
		return
	}
	st, r, done, ok := w.liveTarget(n, f, req.Session, req.IfRev)
	if !ok {
		return
	}
	defer done()
	if st.State != tracker.Paused {
		w.answer(n, spool.Resumed, fmt.Sprintf("it was not paused (%s)", st.State))
		return
	}
	w.signalGroup(r, syscall.SIGCONT)
	st.PausedFor += spool.Duration(max(0, time.Since(*st.PausedAt)))
	st.PausedAt = nil
	st.State, st.Reason = tracker.Running, ""
	if waitsForReady(st) && st.ReadyAt == nil {
		st.State = tracker.Starting
	}
	w.save(st)
	w.scheduleTimeout(r)
	w.answer(n, spool.Resumed, "")
}
