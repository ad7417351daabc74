package watcher

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tendhq/tend/procfs"
	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
	"github.com/tendhq/tend/tracker/durable"
	"github.com/tendhq/tend/tracker/layout"
	"golang.org/x/sys/unix"
)

// recoverRuns brings the records left by an earlier watcher up to date,
// before any new request is taken. The start gate (see launch) makes every
// case decidable:
//   - a request that was claimed but has no state yet is started, once;
//     so is one whose record a crash cut short (empty, or not JSON) while
//     its process had not passed its gate;
//   - a run recorded as starting never passed its gate: it is started now;
//   - a run whose process ended while no watcher ran has its end in an exit
//     record written by the keeper: it is recorded with its true status;
//   - a run whose process is still alive (same PID and start time) is
//     adopted: shown running, cancelable, its end recorded from the exit
//     record the keeper writes;
//   - a run whose process passed no gate (no runs/ID/started) never ran,
//     and is started now;
//   - but a run that never ran and waited for others is not started if
//     they are recovered as having ended otherwise (startUnlessWaitFailed);
//   - a run whose process is gone without a record is recorded failed, as
//     lost: only the loss of the keeper too can cause that;
//   - a run whose end or stop is in the history and not in its record (a
//     power loss took back a record written without a flush: see
//     coverable) is recorded as the history says, before it is looked at.
//
// It fails only if the history cannot be read for such changes: going on
// without them could record a run that ended as lost, or one canceled as
// failed.
func (w *watcher) recoverRuns() error {
	ents, err := os.ReadDir(w.store.Dir())
	if err != nil {
		w.log.Printf("recover: %v", err)
		return nil
	}
	type found struct {
		id  string
		st  *tracker.State
		err error
	}
	var runs []found
	open := make(map[string]bool)   // the runs whose end or stop the history may have
	broken := make(map[string]bool) // the runs whose record is gone or torn
	for _, e := range ents {
		if !e.IsDir() || spool.ValidID(e.Name()) != nil {
			continue
		}
		st, err := w.store.Read(e.Name())
		runs = append(runs, found{e.Name(), st, err})
		if err == nil && !tracker.Final(st.State) {
			open[e.Name()] = true
		}
		if errors.Is(err, tracker.ErrNotFound) || errors.Is(err, tracker.ErrTorn) {
			broken[e.Name()] = true
		}
	}
	w.recovering = true
	defer func() { w.recovering = false }()
	recent, err := tracker.RecentEvents(w.cfg.Root, open)
	if err != nil {
		return fmt.Errorf("recover: reading the history for ends and stops the records lack: %w", err)
	}
	before, err := tracker.EventsOf(w.cfg.Root, broken)
	if err != nil {
		return fmt.Errorf("recover: reading the history for the runs whose records are gone or torn: %w", err)
	}
	for _, f := range runs {
		id, st, err := f.id, f.st, f.err
		if broken[id] {
			if rebuilt := w.rebuildBroken(id, err, tracker.Latest(before[id])); rebuilt != nil {
				st, err = rebuilt, nil
			}
		}
		if err == nil {
			if changes := tracker.CoveredAfter(st, recent[id]); len(changes) > 0 {
				st = w.recoverCovered(st, changes)
			}
		}
		if err == nil && (!tracker.Final(st.State) || w.store.HasCuts(id)) {
			if !w.settleCuts(st) && !broken[id] && !tracker.Final(st.State) {
				w.recordBases(st, tracker.Latest(recent[id]))
			}
		}
		switch {
		case errors.Is(err, tracker.ErrNotFound):
			w.recoverClaimed(id)
		case errors.Is(err, tracker.ErrTorn) && !w.hasStarted(id):
			w.recoverTorn(id, err)
		case errors.Is(err, tracker.ErrTorn):
			w.log.Printf("recover: %v: its run may have started, and the history has nothing of it: left as it is, for tend fsck", err)
		case err != nil:
			w.log.Printf("recover: %v", err)
		case st.Job != nil && !tracker.Final(st.State) && st.State != tracker.Backoff:
			w.recoverJob(st) // submitted to a cluster, or about to be
		case st.State == tracker.Queued:
			w.recoverQueued(st)
		case st.State == tracker.Backoff && st.NextStartAt != nil:
			w.log.Printf("recover: run %s waits to start again at %s", st.ID, st.NextStartAt.Format(time.RFC3339))
			w.scheduleBackoff(st)
		case !tracker.Final(st.State):
			w.recoverLive(st)
		}
	}
	undecided := w.undecided
	w.recovering, w.undecided = false, nil
	for _, u := range undecided {
		if !w.waitFailed(u.st) {
			u.start()
		}
		if u.then != nil {
			u.then()
		}
	}
	slices.SortStableFunc(w.queue, func(a, b *queuedRun) int { return a.st.CreatedAt.Compare(b.st.CreatedAt) })
	w.retryUnsaved() // records recoverCovered could not write
	return nil
}

// recoverCovered records the changes of run st that its history events
// say (see tracker.CoveredAfter), and returns its record then: a power
// loss took back its record, written without a flush once those events
// were synced (see coverable), or the record could not be written (a full
// disk) before the watcher died. A record that cannot be written now
// either is the run's all the same, and written once it can be, as any
// record whose write failed (unsaved): recovered from the older one, a
// run canceled before a power loss would be taken for lost, and its next
// change would reuse a rev the history has.
func (w *watcher) recoverCovered(st *tracker.State, changes []tracker.Event) *tracker.State {
	now := *st
	var said []string
	for _, ev := range changes {
		tracker.ApplyCovered(&now, ev)
		said = append(said, fmt.Sprintf("%s, rev %d", ev.State, ev.Rev))
	}
	err := w.store.Write(&now)
	if err == nil {
		w.log.Printf("recover: run %s: its changes (%s) were in the history, not in its record: recorded", st.ID, strings.Join(said, "; "))
	}
	w.recorded(&now, err) // if it failed, retried until written
	return &now
}

func (w *watcher) recoverClaimed(id string) {
	dir := w.store.RunDir(id)
	b, fi, err := w.readRequest(id)
	if errors.Is(err, os.ErrNotExist) {
		removeEmpty(dir) // a claim cut short, or a launch a power loss took back
		return
	}
	n := spool.Name{ID: id, Verb: spool.VerbStart, Owner: int(fi.Uid)}
	req, perr := spool.ParseStart(b)
	if err == nil {
		// Checked again: whoever owns the run's directory could have put
		// another request there.
		err = w.admitOwner(spool.File{UID: int(fi.Uid), Links: int(fi.Nlink)})
	}
	if err == nil && perr == nil {
		var dst unix.Stat_t
		if err = unix.Lstat(dir, &dst); err == nil && int(dst.Uid) != w.uid && dst.Uid != fi.Uid {
			err = fmt.Errorf("its run directory belongs to uid %d, its request to uid %d", dst.Uid, fi.Uid)
		}
	}
	if err != nil || perr != nil {
		w.rejectClaimed(n, dir, "claimed request unreadable after restart: "+whyUnreadable(b, err, perr))
		return
	}
	// Claimed by a watcher that died before the flush that would have
	// synced it: synced with this run's record.
	w.keepClaimed(w.store.Run(id).Request(), spool.File{Dev: fi.Dev, Ino: fi.Ino})
	st := w.newRun(id, int(fi.Uid), req)
	if w.hasStarted(id) {
		w.ranUnrecorded(st)
		w.accepted(n)
		return
	}
	start := func() {
		w.log.Printf("recover: run %s was claimed but not started: starting it", id)
		w.save(st)
		w.launch(st, req.Env)
	}
	if w.recovering && waitedForRuns(st) {
		// Decided once every run is recovered, and answered then, after
		// the record that says how (see keepClaimed): not before it.
		w.undecided = append(w.undecided, undecidedStart{st, start, func() { w.accepted(n) }})
		return
	}
	w.startUnlessWaitFailed(st, start)
	w.accepted(n)
}

// rebuildBroken makes run id's record anew from events, its history since
// it was made, where the record is gone or torn (err) and that history
// says more than a first record that never came through: the run went
// past its start (an end, a stop), or its process passed its gate and the
// history has it running (its PID, to adopt it by). Such a record
// was there, and what it said is in the history: a hand removed it, or a
// file system broke its order. Taken for a first record never written,
// the run would be started again (a canceled one, one that completed),
// or one still running recorded lost and its processes ended. It returns
// the record written, or nil to recover the run as before.
func (w *watcher) rebuildBroken(id string, err error, events []tracker.Event) *tracker.State {
	running := slices.ContainsFunc(events, func(ev tracker.Event) bool { return ev.State == tracker.Running })
	if len(events) == 0 || !tracker.BeyondStart(events) && !(running && w.hasStarted(id)) {
		return nil
	}
	st := tracker.Rebuild(w.store, id, events, tracker.IdentifyRun)
	path := w.store.Run(id).State()
	if errors.Is(err, tracker.ErrTorn) {
		os.Rename(path, path+".bad")
	}
	lost := ""
	if n := tracker.UnopenedChanges(w.store, events); n > 0 {
		// Sealed with a key this root no longer has (made anew), as a
		// record sealed with it would be lost.
		lost = fmt.Sprintf(" (%d label or note changes lost: sealed with a key this root no longer has)", n)
	}
	w.log.Printf("recover: %v: rebuilt from the history: %s, rev %d%s%s", err, st.State, st.Rev, lost, tracker.UnknownBasesNote(w.store, st, events))
	st.Rev-- // Rebuild's rev is the next one, which save gives it
	// With its output's bases on its event, for a record rebuilt again.
	w.saveChange(st, outputChange(st), changed)
	return st
}

// recordBases saves run st, whose record is the one a run that goes on
// left, if its output was cut and none of events (its recent history)
// carries where its output's offsets stand: a tend before 2026-11-29
// kept that in the record alone, and a record rebuilt from the history
// would have every offset off by all that was cut (see tracker.Rebuild).
// A run whose last cut is older than the history's recent window is
// saved so at each watcher start: one line each time.
func (w *watcher) recordBases(st *tracker.State, events []tracker.Event) {
	if st.Output == nil || st.Output.Stdout == (tracker.Stream{}) && st.Output.Stderr == (tracker.Stream{}) {
		return // nothing dropped: a rebuilt record's bases are 0 as they are
	}
	for _, ev := range slices.Backward(events) {
		if ev.Output != nil {
			if *ev.Output == *st.Output {
				return
			}
			break
		}
	}
	w.log.Printf("recover: run %s: its output's bases were in its record alone: recorded in the history too", st.ID)
	w.saveChange(st, outputChange(st), changed)
}

// recoverTorn takes run id's record, which is not JSON at all (err), for
// one never written: a crash can leave a run's first record so, renamed
// in before its flush (durable.RenameNew), and a record not synced
// (watcher_crash). The caller checked that its process never passed its
// gate, so nothing was done that depended on the record: it is removed,
// and the run recovered as claimed but not started (a queued run, whose
// request is still in the spool, is taken anew from there).
func (w *watcher) recoverTorn(id string, err error) {
	w.log.Printf("recover: %v: cut short by a crash before its run started: taken as never written", err)
	if err := os.Remove(w.store.Run(id).State()); err != nil {
		w.log.Printf("recover: run %s: %v", id, err)
		return
	}
	w.recoverClaimed(id)
}

// removeEmpty removes the run directory dir of a claim that did not
// survive (a crash before the rename, a power loss after it), and the
// files a launch makes there before the run's first record (its output
// files, its gate file), if they are empty (the gate closed), and what an interrupted write
// of that record left: nothing is lost, and the request, if it comes
// again, can make the run anew.
func removeEmpty(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil || !fi.Mode().IsRegular() || fi.Size() > 0 && !durable.Leftover(e.Name()) && !closedGate(dir, e.Name()) {
			return
		}
	}
	for _, e := range ents {
		os.Remove(filepath.Join(dir, e.Name()))
	}
	os.Remove(dir)
}

// closedGate reports whether name, in run directory dir, is its gate file
// as a launch makes it, still closed.
func closedGate(dir, name string) bool {
	if name != "gate" {
		return false
	}
	return !tracker.GateSays(filepath.Join(dir, name)) // removeEmpty saw it is there, and not empty
}

// whyUnreadable says why a claimed request (b, read with err, parsed with
// perr) cannot be started from. An empty one was whole when claimed (it
// was parsed first): a power loss took back what its writer had not
// synced, before the watcher's flush did (which comes before the run's
// gate and its answer), unless the run's owner emptied it since.
func whyUnreadable(b []byte, err, perr error) string {
	if err == nil && len(b) == 0 {
		return "it is empty (a power loss takes back what its writer did not sync): send it again"
	}
	return errors.Join(err, perr).Error()
}

// readRequest reads run id's claimed request, and its stat: a regular
// file of at most spool.MaxBody bytes, read without following a link.
func (w *watcher) readRequest(id string) ([]byte, unix.Stat_t, error) {
	return durable.ReadRegular(w.store.Run(id).Request(), spool.MaxBody)
}

func (w *watcher) recoverLive(st *tracker.State) {
	// A watcher that died between launching a run and answering its start
	// request leaves a client waiting: answer it now. Outcomes are not
	// synced, so after a power loss the answer may also be there but empty.
	n := spool.Name{ID: st.ID, Verb: spool.VerbStart, Owner: st.OwnerUID}
	if fi, err := os.Stat(w.spool.OutcomePath(n)); errors.Is(err, os.ErrNotExist) || err == nil && fi.Size() == 0 {
		w.outcome(n, spool.Accepted, "")
	}
	if st.PID == 0 || st.ProcStart == 0 {
		switch {
		case w.hasStarted(st.ID):
			w.ranUnrecorded(st)
		case st.PID != 0 && !w.gateTrusted(st):
			w.recoverEnded(st, errOtherBoot) // lost, or started again by its policy
		default:
			w.neverRan(st, "the watcher stopped before its process passed the start gate")
		}
		return
	}
	// Open before looking for an exit record: the keeper writes the record
	// before it reaps, so a process found gone has its record by then.
	h, err := w.openProcess(st)
	if err != nil {
		w.recoverEnded(st, err)
		return
	}
	r := &run{st: st, proc: h, adopted: true}
	if st.Boot == "" {
		st.Boot = w.boot // alive, so of this boot: written with its next change
	}
	if st.StartedAt != nil {
		r.started = *st.StartedAt
	}
	if st.ProcStart != 0 {
		// Its age from the kernel, not from the recorded wall time, which
		// moves if the clock is set.
		r.started = time.Now().Add(-procfs.Age(st.ProcStart))
	}
	if ps, err := procfs.ReadStat(st.PID); err == nil {
		r.kept = isKeeper(ps.PPID)
	}
	if h.Exited() {
		w.log.Printf("recover: run %s (pid %d) has ended: adopted, for its status", st.ID, st.PID)
	} else {
		w.log.Printf("recover: run %s (pid %d) is alive: adopted", st.ID, st.PID)
	}
	w.watchRunDir(r)
	w.supervise(r)
	if st.Stop != nil {
		// The earlier watcher may have died between recording the stop and
		// sending SIGTERM: send it (again), and SIGKILL at most its grace
		// from now, whatever the wall clock did meanwhile.
		r.killAt, r.termSent = time.Now().Add(min(time.Until(st.Stop.KillAt), st.Grace.D())), true
		w.signalGroup(r, syscall.SIGTERM)
		r.timers = append(r.timers, w.after(time.Until(r.killAt), func() { w.killGroup(r) }))
	}
}

// recoverEnded handles run st whose process is gone (openErr says how):
// recorded with the status in its exit record, started now if it never
// ran, or lost.
func (w *watcher) recoverEnded(st *tracker.State, openErr error) {
	pastBoot := w.otherBoot(st) || !w.gateTrusted(st)
	if e, err := readExitRecord(w.cfg.Root, st.PID, st.ProcStart); err == nil {
		r := &run{st: st, adopted: true, pastBoot: pastBoot, exit: &e, exitedAt: recordTime(w.cfg.Root, st), killAt: time.Now().Add(st.Grace.D())}
		w.log.Printf("recover: run %s (pid %d) ended while no watcher ran: %s", st.ID, st.PID, describeExit(e, false))
		w.runs[st.ID] = r // drained: what is left of its group is ended, then it is finished
		return
	}
	started := w.hasStarted(st.ID)
	if !started && w.gateTrusted(st) {
		w.neverRan(st, "its process ended at the start gate")
		return
	}
	if !pastBoot && w.keeperHolds(st) {
		// A keeper that took over from a watcher which had adopted the run
		// holds a pidfd on it, and writes its record from it (see
		// KeeperConfig.Held): once its parent, init, has reaped it, so not
		// before it is gone, as a parent's is. It is awaited as an adopted
		// run's.
		now := time.Now()
		r := &run{st: st, adopted: true, kept: true, exitedAt: now, killAt: now.Add(st.Grace.D())}
		w.log.Printf("recover: run %s (pid %d) has ended; its keeper holds it, and is to write how", st.ID, st.PID)
		w.runs[st.ID] = r
		w.awaitExit(r, now, 10*time.Millisecond)
		return
	}
	if st.Restart != nil {
		// Its end is unknown (the machine restarted, or the keeper died too),
		// but a service is brought back whatever it was.
		r := &run{st: st, adopted: true, pastBoot: pastBoot, exit: &procfs.Exit{Code: -1}, unknown: true, exitedAt: time.Now(), killAt: time.Now().Add(st.Grace.D())}
		w.log.Printf("recover: run %s (pid %d) ended while no watcher or keeper ran: restarting it per its policy", st.ID, st.PID)
		w.runs[st.ID] = r
		return
	}
	reason := "lost: its process ended while no watcher or keeper ran; exit status unknown"
	if !started {
		reason = lostAtRestart
	} else if errors.Is(openErr, errOtherBoot) {
		reason = "lost: the machine restarted while it ran; exit status unknown"
	} else if errors.Is(openErr, procfs.ErrNotSame) {
		reason = "lost: its process ended while no watcher or keeper ran, and pid " + strconv.Itoa(st.PID) + " now belongs to another process; exit status unknown"
	}
	w.recordLost(st, reason)
}

// recordLost records run st failed, lost for the reason given: it ran,
// and how it ended is unknown.
func (w *watcher) recordLost(st *tracker.State, reason string) {
	now := time.Now()
	st.State, st.EndedAt, st.Reason = tracker.Failed, &now, reason
	w.save(st)
	w.log.Printf("recover: run %s: %s", st.ID, st.Reason)
	w.answerStop(st, st.Reason)
}

// recordTime is when st's exit record was written: about when it ended.
func recordTime(root string, st *tracker.State) time.Time {
	fi, err := os.Stat(filepath.Join(layout.Root(root).Exits(), exitRecordName(st.PID, st.ProcStart)))
	if err != nil {
		return time.Now()
	}
	return fi.ModTime()
}

// neverRan handles run st, whose command is known never to have run: it
// is started now, unless it was being canceled or timed out, which it then
// is; one being restarted starts its next attempt.
func (w *watcher) neverRan(st *tracker.State, why string) {
	st.PID, st.PGID, st.ProcStart, st.Boot, st.StartedAt = 0, 0, 0, "", nil
	if st.Stop != nil && st.Stop.Cause == tracker.CauseRestart {
		// Stopped to be started again: its next attempt is what was
		// asked for, and its restart requests are answered by it.
		w.log.Printf("recover: run %s never ran (%s) while it was being restarted: starting its next attempt", st.ID, why)
		w.restartNow(st)
		return
	}
	if st.Stop != nil {
		now := time.Now()
		st.State, st.EndedAt = st.Stop.Cause.Ends(), &now
		st.Reason += "; it never ran: " + why
		w.save(st)
		w.answerStop(st, string(st.State))
		return
	}
	w.startUnlessWaitFailed(st, func() { w.startNeverRan(st, why) })
}

// startNeverRan starts run st, which never ran, from its claimed request.
func (w *watcher) startNeverRan(st *tracker.State, why string) {
	n := spool.Name{ID: st.ID, Verb: spool.VerbStart, Owner: st.OwnerUID}
	b, fi, err := w.readRequest(st.ID)
	req, perr := spool.ParseStart(b)
	if err == nil && perr == nil {
		// Its record may have been written by a watcher that died before
		// the flush that syncs the request: synced with the next.
		w.keepClaimed(w.store.Run(st.ID).Request(), spool.File{Dev: fi.Dev, Ino: fi.Ino})
	}
	if err != nil || perr != nil {
		now := time.Now()
		st.State, st.EndedAt = tracker.Failed, &now
		st.Reason = "could not start: its claimed request is unreadable: " + whyUnreadable(b, err, perr)
		w.save(st)
		w.log.Printf("run %s: %s", n.ID, st.Reason)
		return
	}
	w.log.Printf("recover: run %s never ran (%s): starting it", st.ID, why)
	st.State, st.Reason = tracker.Starting, ""
	w.save(st)
	w.launch(st, req.Env)
}

// ranUnrecorded records run st as lost: its process passed its gate, so
// its command ran, but the record of its start did not survive (it is
// written, and synced, before the gate opens: so only a power loss with
// durability watcher_crash, or a file system that broke its order, can
// leave this). Started again, it would run twice.
func (w *watcher) ranUnrecorded(st *tracker.State) {
	st.PID, st.PGID, st.ProcStart, st.Boot = 0, 0, 0, ""
	w.recordLost(st, "lost: its process passed its start gate, but the record of its start did not survive; exit status unknown")
}

// startUnlessWaitFailed calls start for run st, which never ran, unless
// st waited for other runs to start (its first attempt: a restart does
// not wait) and they are now recovered as having ended otherwise: then st
// ends canceled, never started. They had ended as it asked when it was
// started (or its request claimed to start it), but a power loss can keep
// st's record of that start, synced with the end it waited for and not
// after it, and take back that end, written without a flush of its
// record once its history line was synced in the same round (see
// coverable): the run it waited to complete is then recovered as lost.
// While runs are being recovered, the decision waits until all are
// (recoverRuns), so that each is looked at as recovered.
func (w *watcher) startUnlessWaitFailed(st *tracker.State, start func()) {
	if !waitedForRuns(st) {
		start()
		return
	}
	if w.recovering {
		w.undecided = append(w.undecided, undecidedStart{st, start, nil})
		return
	}
	if !w.waitFailed(st) {
		start()
	}
}

// waitedForRuns reports whether run st's next start is one that waited
// for other runs: its first attempt (a restart waits for nothing).
func waitedForRuns(st *tracker.State) bool { return len(st.After) > 0 && st.Restarts == 0 }

// An undecidedStart is a run that never ran, waited for others, and is
// started once every run is recovered, if what it waited for still holds.
type undecidedStart struct {
	st    *tracker.State
	start func()
	then  func() // once it is started, or ended, if not nil: its answer
}

// waitFailed ends run st canceled, never started, if a condition it waits
// for can no longer hold, and reports whether it did. One that does not
// hold yet is no reason not to start (the runs it waited for had ended
// as it asked; only a run it waits to be ready can be found not ready
// yet, adopted as it is rechecked).
func (w *watcher) waitFailed(st *tracker.State) bool {
	now := time.Now()
	_, never, _ := w.conditions(st, now)
	if never == "" {
		return false
	}
	st.PID, st.PGID, st.ProcStart, st.Boot, st.StartedAt, st.Attempt = 0, 0, 0, "", nil, 0
	st.State, st.EndedAt, st.Reason = tracker.Canceled, &now, never+"; it never started"
	w.save(st)
	w.log.Printf("recover: run %s: %s", st.ID, st.Reason)
	return true
}

// sweepExitRecords removes the exit records that no run needs: those of
// processes that were no run's leader, and those already used.
func (w *watcher) sweepExitRecords() {
	names, err := os.ReadDir(w.root().Exits())
	if err != nil {
		w.log.Printf("%v", err)
		return
	}
	for _, e := range names {
		w.exitRecorded(e.Name())
	}
}

// keeperHolds reports whether a keeper of this root holds a pidfd on run
// st's process: its command line says so (tend-watch watch --hold, see
// holdArgs). The keepers are looked at once, when first asked.
func (w *watcher) keeperHolds(st *tracker.State) bool {
	if w.heldByKeepers == nil {
		w.heldByKeepers = make(map[string]bool)
		all, err := procfs.All()
		if err != nil {
			w.log.Printf("scanning /proc: %v", err)
		}
		for _, p := range all {
			if p.Comm != tracker.KeeperComm || p.State == 'Z' {
				continue
			}
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.PID))
			args := strings.Split(string(b), "\x00")
			if !slices.Contains(args, w.cfg.Root) {
				continue // another root's
			}
			for i, a := range args {
				if a != "--hold" || i+1 == len(args) {
					continue
				}
				if h, err := ParseHeld(args[i+1]); err == nil {
					w.heldByKeepers[exitRecordName(h.PID, h.Start)] = true
				}
			}
		}
	}
	return w.heldByKeepers[exitRecordName(st.PID, st.ProcStart)]
}

// takePassed takes over the pidfds the keeper passed on (Config.Held).
func (w *watcher) takePassed() {
	w.fromKeeper = make(map[string]*procfs.Handle)
	for _, held := range w.cfg.Held {
		h, err := procfs.NewHandle(held.FD, held.PID)
		if err != nil {
			w.log.Printf("recover: %v", err)
			continue
		}
		w.fromKeeper[exitRecordName(held.PID, held.Start)] = h
	}
}

// openProcess returns a handle on run st's process: the pidfd the keeper
// passed on, which refers to it even once it is reaped (and keeps its exit
// status: see takeExitInfo), or else one opened on its PID and start time.
func (w *watcher) openProcess(st *tracker.State) (*procfs.Handle, error) {
	if w.otherBoot(st) {
		return nil, fmt.Errorf("pid %d: %w", st.PID, errOtherBoot)
	}
	name := exitRecordName(st.PID, st.ProcStart)
	if h := w.fromKeeper[name]; h != nil {
		delete(w.fromKeeper, name)
		return h, nil
	}
	return procfs.Open(st.PID, st.ProcStart)
}

// errOtherBoot is why a run's process, recorded in an earlier boot, is not
// looked for: a process alive now with its PID and start time is
// another's (see otherBoot).
var errOtherBoot = errors.New("the machine has restarted since it started")

// otherBoot reports whether run st's process was started in another boot
// than this one. Its PID and start time then name no process of the run's,
// however alike: a watcher started at boot starts its runs at about the
// same ticks each time, with about the same PIDs.
func (w *watcher) otherBoot(st *tracker.State) bool {
	return st.Boot != "" && w.boot != "" && st.Boot != w.boot
}

// gateTrusted reports whether run st's gate file says whether its process
// passed its gate: the line was synced before the command ran (a record
// without a boot: an earlier tend, or a watcher that could not read the
// boot), or it was written in this boot, whose page cache every reader
// sees. A line not synced before a power loss may be gone after it: a
// run of an earlier boot recorded running may have run, whatever its gate
// file says (see openGateFile).
func (w *watcher) gateTrusted(st *tracker.State) bool {
	return st.Boot == "" || st.Boot == w.boot || durable.FlushGate.Removed() // (the power-loss trial's mutant)
}

// lostAtRestart is the reason of a run recorded running in a boot before
// the machine restarted, whose gate file does not say it passed: its
// command may have run, and is not started again.
const lostAtRestart = "lost: the machine restarted as it started or ran; whether its command ran, and how it ended, is unknown"

// closePassed closes the pidfds the keeper passed on that no run needed.
func (w *watcher) closePassed() {
	for _, h := range w.fromKeeper {
		h.Close()
	}
	w.fromKeeper = nil
}
