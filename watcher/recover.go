package watcher

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/tendhq/tend/procfs"
	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
)

// recoverRuns brings the records left by an earlier watcher up to date,
// before any new request is taken:
//   - a request that was claimed but has no state yet is started, once;
//   - a run recorded as starting may or may not have started: it is never
//     started again, and is recorded failed;
//   - a run whose process is still alive (same PID and start time) is
//     adopted: shown running, cancelable, its end recorded (its exit status
//     is unknown, since it is not this watcher's child);
//   - a run whose process is gone is recorded failed, as lost.
func (w *watcher) recoverRuns() {
	ents, err := os.ReadDir(w.store.Dir())
	if err != nil {
		w.log.Printf("recover: %v", err)
		return
	}
	for _, e := range ents {
		if !e.IsDir() || spool.ValidID(e.Name()) != nil {
			continue
		}
		id := e.Name()
		st, err := w.store.Read(id)
		switch {
		case errors.Is(err, tracker.ErrNotFound):
			w.recoverClaimed(id)
		case err != nil:
			w.log.Printf("recover: %v", err)
		case !tracker.Final(st.State):
			w.recoverLive(st)
		}
	}
}

func (w *watcher) recoverClaimed(id string) {
	dir := w.store.RunDir(id)
	b, err := os.ReadFile(filepath.Join(dir, "request"))
	if errors.Is(err, os.ErrNotExist) {
		os.Remove(dir) // an empty directory from a claim cut short
		return
	}
	n := spool.Name{ID: id, Verb: spool.VerbStart}
	req, perr := spool.ParseStart(b)
	if err != nil || perr != nil {
		w.rejectClaimed(n, dir, "claimed request unreadable after restart: "+errors.Join(err, perr).Error())
		return
	}
	fi, _ := os.Stat(filepath.Join(dir, "request"))
	st := w.newRun(id, ownerOf(fi), req)
	w.log.Printf("recover: run %s was claimed but not started: starting it", id)
	w.save(st)
	w.launch(st, req.Env)
	w.outcome(n, spool.Accepted, "")
}

func (w *watcher) recoverLive(st *tracker.State) {
	lost := func(reason string) {
		now := time.Now()
		st.State, st.Reason, st.EndedAt = tracker.Failed, reason, &now
		w.save(st)
		w.log.Printf("recover: run %s: %s", st.ID, reason)
		w.answerStop(st, reason)
	}
	if st.PID == 0 || st.ProcStart == 0 {
		lost("lost: the watcher stopped while starting it; whether it ran is unknown")
		return
	}
	h, err := procfs.Open(st.PID, st.ProcStart)
	switch {
	case errors.Is(err, procfs.ErrNotSame):
		lost("lost: its process ended while no watcher ran, and pid " + strconv.Itoa(st.PID) + " now belongs to another process; exit status unknown")
		return
	case err != nil:
		lost("lost: its process ended while no watcher ran; exit status unknown")
		return
	}
	r := &run{st: st, proc: h, adopted: true}
	w.log.Printf("recover: run %s (pid %d) is alive: adopted", st.ID, st.PID)
	w.supervise(r)
	if st.Stop != nil {
		r.killAt, r.termSent = st.Stop.KillAt, true
		r.timers = append(r.timers, w.after(time.Until(st.Stop.KillAt), func() { w.killGroup(r) }))
	}
}
