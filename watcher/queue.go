package watcher

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
	"github.com/tendhq/tend/tracker/durable"
	"golang.org/x/sys/unix"
)

// A start request that finds no free slot (config.Settings.MaxRunning, MaxPerSession) makes a queued run:
// its record (state "queued") is written, and the request stays in the
// spool, where its writer may still edit it. When a slot frees, the
// queued runs start in arrival order, each with its request as it is at
// that moment; a session at its own cap is passed over, not waited for.
// ROOT/queue lists the queued runs in order, one ID a line, so a run's
// position is its line number.

// queuedRun is a run waiting for a slot.
type queuedRun struct {
	st  *tracker.State
	req spool.Start // the request as last read
	ino uint64      // the spool file it was last read from
	// removed is set when its request is removed from the spool, until a
	// new version is taken; gone then fires after the edit window, and
	// cancels the run unless the request is back.
	removed bool
	gone    *time.Timer
	// at fires when the run's not_before comes (see settleWaits).
	at *time.Timer
	// noted is what its reason was last made of (see settleWaits), said
	// what conditions last said of it (see queuedConditions): both
	// forgotten when its waits change.
	noted notedWait
	said  conditionsSaid
	// recheck is set while its request, held back with a slot free, is
	// due to be examined again (see heldBack).
	recheck bool
	// held is set while its request in the spool is a version that was
	// rejected (see holdQueued), and bad is that version's BodySum, as its
	// record's HeldSum says ("" when a watcher that restarted found the
	// run held by a record of a tend before held_sum: the version it holds
	// for is known by its reason then).
	held bool
	bad  string
	// copied is the copy in rejected/ of the last bad version of its
	// request (see holdQueued), which the next one's replaces.
	copied string
	// good is the body of the last good version of its request, as read
	// (nil when this watcher never read it: a run held since before it
	// started): what a held run canceled keeps as its request
	// (keepRequest), the version it waited to run with, once its writer's
	// file in the spool is a bad one.
	good []byte
}

// addQueued puts q at the end of the queue.
func (w *watcher) addQueued(q *queuedRun) {
	w.queue = append(w.queue, q)
	w.queuedByID[q.st.ID] = q
	if waits(q.st) {
		w.waiters++
	}
	w.countWaits(q.st, 1)
	if isJob(q.st) {
		w.jobs.queued++
	}
}

// removeQueued takes q out of the queue.
func (w *watcher) removeQueued(q *queuedRun) {
	q.stopGone()
	if q.at != nil {
		q.at.Stop()
		q.at = nil
	}
	w.queue = slices.DeleteFunc(w.queue, func(x *queuedRun) bool { return x == q })
	if w.queuedByID[q.st.ID] == q {
		delete(w.queuedByID, q.st.ID)
	}
	if waits(q.st) {
		w.waiters--
	}
	w.countWaits(q.st, -1)
	if w.waiters == 0 {
		clear(w.ended) // nothing waits for them any more
	}
	if isJob(q.st) {
		w.jobs.queued--
	}
}

// queued returns the queued run id, or nil.
func (w *watcher) queued(id string) *queuedRun { return w.queuedByID[id] }

// runsStarted counts the runs with a process: supervised, or being forked.
func (w *watcher) runsStarted() int {
	return len(w.runs) + len(w.spawning)
}

// slotFor reports whether a run of session may start now.
func (w *watcher) slotFor(session string) bool {
	if w.settings.MaxRunning > 0 && w.runsStarted() >= w.settings.MaxRunning {
		return false
	}
	if w.settings.MaxPerSession > 0 && session != "" {
		n := 0
		for _, r := range w.runs {
			if r.st.Session == session {
				n++
			}
		}
		for _, sp := range w.spawning {
			if sp.st.Session == session {
				n++
			}
		}
		if n >= w.settings.MaxPerSession {
			return false
		}
	}
	return true
}

// enqueue records a new run queued, leaving its request in the spool.
func (w *watcher) enqueue(n spool.Name, f spool.File, req spool.Start) {
	if err := w.store.MakeRunDir(n.ID); err != nil && !errors.Is(err, fs.ErrExist) {
		w.log.Printf("%s: %v", n, err)
		return
	}
	st := w.newRun(n.ID, f.UID, req)
	st.State, st.Reason = tracker.Queued, waitReason(st)
	st.RequestSum = spool.BodySum(f.Body)
	w.handOverQueued(st)
	w.save(st)
	w.keep(f)
	w.addQueued(&queuedRun{st: st, req: req, ino: f.Ino, good: f.Body})
	w.writeQueue()
	w.log.Printf("run %s: queued (position %d)", n.ID, len(w.queue))
	w.outcome(n, spool.Accepted, "")
}

// handOverQueued gives queued run st's directory to the account it will
// run as, as its launch does (handOver), where that is not the watcher's:
// its owner reads its record while it waits (tend start prints it).
func (w *watcher) handOverQueued(st *tracker.State) {
	as, err := w.runAs(st)
	if err == nil && as != nil {
		err = handOver(w.store.RunDir(st.ID), *as)
	}
	if err != nil {
		w.log.Printf("run %s: %v", st.ID, err) // its launch says it again, and fails
	}
}

// editQueued takes a new version of queued run q's request, named n, from
// the spool, and answers it if it is one: its content changed, or it came
// back after its removal (see queuedRequestRemoved). A slot may have freed
// while it could not be read.
func (w *watcher) editQueued(q *queuedRun, n spool.Name, f spool.File, req spool.Start) {
	back, held := q.removed, q.held
	q.stopGone()
	q.held, q.bad, q.st.HeldSum = false, "", ""
	changed := w.updateQueued(q, f, req)
	if !changed && held {
		// Mended back into the version it was held from: its reason is
		// no longer the hold's.
		q.st.Reason = editedReason(q.st)
		w.save(q.st)
	}
	if changed || back || held {
		w.keep(f)
		w.answer(n, spool.Accepted, fmt.Sprintf("edited while queued (rev %d)", q.st.Rev))
	}
	w.dequeue()
}

// heldPrefix begins the reason of a queued run held by a bad version of
// its request (see holdQueued): a watcher that restarts knows the run is
// held by it.
const heldPrefix = "held: its request "

// holdQueued takes a version of queued run q's request, named n and read
// as f, that its owner wrote and that does not parse or is refused
// (problem): a typo saved from an editor must not cost the run. A copy
// of it is set aside in rejected/ with its reason (in place of the copy
// of the run's bad version before, if this watcher made it), and it is answered
// rejected; but it stays in the spool, for its writer to mend, and the
// run stays queued, held, in its place: it starts from no version that
// is not good (startQueued refuses it), and the next good version is an
// edit. The same version, examined again, is answered once.
func (w *watcher) holdQueued(q *queuedRun, n spool.Name, f spool.File, problem string) {
	name := n.String()
	problem = strings.TrimPrefix(problem, name+": ")
	reason := heldPrefix + "does not parse or is refused (" + problem + "); it waits for a good version"
	sum := spool.BodySum(f.Body)
	if q.held && (q.bad == sum || q.bad == "" && q.st.HeldSum == "" && heldFor(q.st.Reason) == reason) {
		q.bad = sum
		q.stopGone() // back, if it was removed
		w.forget(name)
		return // answered already
	}
	dst, err := w.spool.RejectCopy(name, f.Body, f.UID, problem+" (a copy: the run stays queued, held until its request is good)")
	if err != nil {
		w.takeLater(name, "setting a copy aside in rejected/", err)
		return
	}
	if q.copied != "" {
		// One copy a run: each save of a bad version, a byte changed in a
		// file of up to a MiB, would have root write and sync another MiB
		// in rejected/, kept for keep_finished_for, every settle period.
		if err := w.spool.RemoveCopy(q.copied, q.st.OwnerUID); err != nil {
			w.log.Printf("run %s: removing the copy of its last bad version: %v", q.st.ID, err)
		}
	}
	q.copied = dst
	w.forget(name)
	delete(w.faulted, name)
	q.stopGone() // back, if it was removed: bad, but there
	q.held, q.bad = true, sum
	q.st.Reason, q.st.HeldSum = reason, sum
	w.save(q.st)
	w.log.Printf("%s: rejected, copied to %s: %s; run %s stays queued, held until its request is good", spool.Printable(name), dst, problem, q.st.ID)
	w.outcome(n, spool.Rejected, fmt.Sprintf("%s: %s; run %s stays queued, held until its request is good (rev %d; this version is copied to rejected/%s, and left in the spool to mend)",
		spool.Printable(name), problem, q.st.ID, q.st.Rev, filepath.Base(dst)))
}

// heldFor returns a held run's reason without what noteHeldUp adds.
func heldFor(reason string) string {
	r, _, _ := strings.Cut(reason, heldUp)
	return r
}

// editedReason is the reason of queued run st once its request was
// edited.
func editedReason(st *tracker.State) string {
	reason := "its request was edited while queued"
	if r := waitReason(st); r != "" {
		reason += "; " + r
	}
	return reason
}

// updateQueued takes a new version of queued run q's request: the record
// shows the new command (and the rest), and its revision grows. It
// reports whether the run changed; a new version that changes nothing
// the run is made from (a blank line, a field moved) only has the record
// name it (RequestSum), for the next watcher.
func (w *watcher) updateQueued(q *queuedRun, f spool.File, req spool.Start) bool {
	q.ino, q.good = f.Ino, f.Body
	st := q.st
	sum := spool.BodySum(f.Body)
	next := w.newRun(st.ID, f.UID, req)
	if sameRun(next, st) && maps.Equal(req.Labels, q.req.Labels) &&
		fmt.Sprint(req.Env) == fmt.Sprint(q.req.Env) && sameWaits(req, q.req) {
		if st.RequestSum != sum {
			st.RequestSum = sum
			w.save(st)
		}
		return false
	}
	old := q.req
	q.req = req
	if waits(st) {
		w.waiters--
	}
	if isJob(st) {
		w.jobs.queued--
	}
	st.Command, st.Cwd, st.Session, st.Timeout, st.Grace = next.Command, next.Cwd, next.Session, next.Timeout, next.Grace
	st.Restart, st.Health, st.ReadyFile, st.Limits, st.Output = next.Restart, next.Health, next.ReadyFile, next.Limits, next.Output
	st.Labels = relabel(st.Labels, old.Labels, req.Labels)
	st.RequestSum = sum
	if st.Slurm = next.Slurm; isJob(st) {
		w.jobs.queued++
	}
	if !sameWaits(req, old) {
		st.AfterSince = addedSince(st.After, next.After, st.AfterSince, next.CreatedAt)
		w.countWaits(st, -1)
		st.After, st.NotBefore = next.After, next.NotBefore // a new version: its not_before counts from now
		w.countWaits(st, 1)
		q.noted, q.said = notedWait{}, conditionsSaid{}
		if q.at != nil {
			q.at.Stop()
			q.at = nil
		}
	}
	if waits(st) {
		w.waiters++
	}
	st.Reason = editedReason(st)
	w.save(st)
	w.log.Printf("run %s: its queued request changed: %s", st.ID, strings.Join(st.Command, " "))
	return true
}

// addedSince returns the AfterSince of a queued run whose After goes from
// old to new in an edit taken at now: the runs the edit adds are waited
// for from now, those it keeps from when they were first named (since,
// or the run's creation), and those it drops are forgotten.
func addedSince(old, new []string, since map[string]time.Time, now time.Time) map[string]time.Time {
	had := make(map[string]bool, len(old))
	for _, name := range old {
		if d, err := spool.ParseDep(name); err == nil {
			had[d.ID] = true
		}
	}
	var out map[string]time.Time
	for _, name := range new {
		d, err := spool.ParseDep(name)
		if err != nil {
			continue
		}
		at, kept := since[d.ID]
		switch {
		case !had[d.ID]:
			at = now
		case !kept:
			continue
		}
		if out == nil {
			out = make(map[string]time.Time)
		}
		out[d.ID] = at
	}
	return out
}

// sameRun reports whether queued runs a and b, made from two versions of
// a request, run the same: the same process, the same way, under the
// same supervision. Labels, the environment and the waits are the
// request's, compared by updateQueued.
func sameRun(a, b *tracker.State) bool {
	return slices.Equal(a.Command, b.Command) && a.Cwd == b.Cwd && a.Session == b.Session &&
		a.Timeout == b.Timeout && a.Grace == b.Grace && reflect.DeepEqual(a.Slurm, b.Slurm) &&
		reflect.DeepEqual(a.Restart, b.Restart) && reflect.DeepEqual(a.Health, b.Health) &&
		a.ReadyFile == b.ReadyFile && reflect.DeepEqual(a.Limits, b.Limits) && reflect.DeepEqual(a.Output, b.Output)
}

// dequeue starts queued runs, in order, while slots are free, in one
// batch: what they start with is written in one round of fsyncs.
func (w *watcher) dequeue() {
	if w.stopping > 0 || len(w.queue) == 0 {
		return
	}
	w.batched(w.startQueuedRuns)
}

// startQueuedRuns is dequeue, inside a batch.
func (w *watcher) startQueuedRuns() {
	now := time.Now()
	changed := w.waiters > 0 && w.settleWaits(now)
	for _, q := range slices.Clone(w.queue) {
		job := isJob(q.st) // its cluster schedules it: no slot of this host's holds it back
		if !job && w.settings.MaxRunning > 0 && w.runsStarted() >= w.settings.MaxRunning {
			if w.jobs.queued == 0 {
				break
			}
			continue
		}
		if waits(q.st) {
			if waiting, never, _ := w.queuedConditions(q, now); waiting != "" || never != "" {
				continue // it waits for another run, or a time
			}
		}
		if !job && !w.slotFor(q.st.Session) {
			continue // its session is at its cap
		}
		if !w.startQueued(q) {
			w.heldBack(q) // its writer is busy with it, or it is no request now
			continue
		}
		w.removeQueued(q)
		changed = true
	}
	if changed {
		w.writeQueue()
	}
}

// startQueued claims queued run q's request as it is now and starts it.
// It reports false if the request cannot be taken now (a writer has it
// open, or it does not parse yet); the run stays queued.
// checkVersion checks req, a version of a queued run's request not taken
// before, as a new request is checked when it is taken: its own rules,
// and, where it would run on a cluster (the root's settings may send it
// there), what a run there cannot have (a health check, a ready file).
func (w *watcher) checkVersion(req spool.Start) error {
	if err := req.CheckNew(); err != nil {
		return err
	}
	return checkJob(req, w.slurmFor(req))
}

func (w *watcher) startQueued(q *queuedRun) bool {
	if q.held {
		return false // its next good version is taken as an edit first (holdQueued)
	}
	n := spool.Name{ID: q.st.ID, Verb: spool.VerbStart, Owner: q.st.OwnerUID}
	f, err := w.spool.Read(n.String())
	if err != nil || w.admit(f) != nil || f.UID != q.st.OwnerUID {
		return false // another's file is never its request: examine rejects it
	}
	req, err := spool.ParseStart(f.Body)
	if err == nil && q.st.RequestSum != spool.BodySum(f.Body) {
		err = w.checkVersion(req) // a version not taken yet: examine holds the run for one refused
	}
	if err != nil || !f.Settled || !sameWaits(req, q.req) {
		return false // a version whose waits changed is taken as an edit first
	}
	if w.cfg.claiming != nil {
		w.cfg.claiming(n.String())
	}
	claimed, err := w.spool.Claim(f, w.store.Run(n.ID).Request())
	w.claimed(err)
	if err != nil {
		return false
	}
	w.claimedInto(w.store.RunDir(n.ID), false)
	w.keepClaimed(w.store.Run(n.ID).Request(), claimed) // a version kept, or one not: see keepClaimed
	if claimed.Ino != f.Ino {
		err := w.admit(claimed)
		if err == nil && claimed.UID != q.st.OwnerUID {
			err = fmt.Errorf("owned by uid %d, not by the run's owner (uid %d)", claimed.UID, q.st.OwnerUID)
		}
		if err != nil {
			w.endQueued(q, tracker.Failed, "the request claimed to start it is not its own: "+err.Error())
			return true
		}
		req, err = spool.ParseStart(claimed.Body)
		if err == nil && q.st.RequestSum != spool.BodySum(claimed.Body) {
			err = w.checkVersion(req) // a version not taken before
		}
		if err != nil || !sameWaits(req, q.req) {
			// Edited at that very moment into a bad version (its owner's:
			// examine holds the run for a good one) or one that waits for
			// something else (taken as an edit): back to the spool.
			if w.unclaimQueued(n) {
				return false
			}
		}
		if err != nil {
			w.endQueued(q, tracker.Failed, "its request, changed as it was claimed to start it, is refused: "+err.Error())
			return true
		}
	}
	w.forget(n.String())
	w.updateQueued(q, claimed, req)
	w.claimBody(n.ID, claimed)
	kind := changed
	if q.st.Rev == 1 {
		// Its record on disk is the one its request made, changed since
		// by no label or note: see launchRecord.
		kind = w.launchRecord(q.st)
	}
	q.st.State, q.st.Reason = tracker.Starting, ""
	w.saveChange(q.st, tracker.Event{}, kind)
	w.launch(q.st, q.req.Env)
	return true
}

// unclaimQueued puts back in the spool the request of queued run n.ID just
// claimed to start it, unless a new version is there already; it
// reports whether it did.
func (w *watcher) unclaimQueued(n spool.Name) bool {
	return unix.Renameat2(unix.AT_FDCWD, w.store.Run(n.ID).Request(), unix.AT_FDCWD, filepath.Join(w.spool.Spool(), n.String()), unix.RENAME_NOREPLACE) == nil
}

// heldBack has queued run q's request examined again once the settle
// period has passed: startQueued could not take it with a slot free (a
// writer has it open, it does not parse yet, or it fails the checks any
// request does, as one with a second hard link does), and nothing may
// come to say that changed: a writer that closes without writing, or a
// link made or removed elsewhere, makes no event in the spool. examine
// then takes it as an edit, which starts it, or rejects it, which cancels
// the run. One whose request is gone waits for it (queuedRequestRemoved).
func (w *watcher) heldBack(q *queuedRun) {
	if q.recheck || q.removed {
		return
	}
	q.recheck = true
	name := spool.Name{ID: q.st.ID, Verb: spool.VerbStart, Owner: q.st.OwnerUID}.String()
	w.after(w.cfg.Settle, func() {
		q.recheck = false
		if w.queued(q.st.ID) == q {
			w.examine(name)
		}
	})
}

// cancelQueued ends queued run q canceled, answering cancel request n.
// Its request is kept as the run's, though it never ran (keepRequest).
func (w *watcher) cancelQueued(q *queuedRun, n spool.Name) {
	w.keepRequest(q)
	w.endQueued(q, tracker.Canceled, "canceled while queued; it never started")
	w.answer(n, spool.Canceled, "")
}

// keepRequest moves queued run q's request from the spool into its run
// directory, as the run's, when the run ends without starting: left in
// the spool, it would be a start request for a run that exists, held
// back meanwhile (control requests for the run wait for it: see
// startWaiting) and rejected by the next watcher over its answer
// accepted. It is checked as any request is, on the file read: one that
// is not its owner's, not a request at all (in a shared root, another
// user's file put under the name while the owner's was away), or being
// written, is left for examine to reject.
func (w *watcher) keepRequest(q *queuedRun) {
	n := spool.Name{ID: q.st.ID, Verb: spool.VerbStart, Owner: q.st.OwnerUID}
	if q.held {
		w.keepGood(q, n)
		return
	}
	f, err := w.spool.Read(n.String())
	if err != nil || w.admit(f) != nil || f.UID != q.st.OwnerUID {
		w.leaveToExamine(n)
		return
	}
	claimed, err := w.spool.Claim(f, w.store.Run(n.ID).Request())
	w.movedOut(n.ID, err) // its directory synced before the spool
	if err != nil {
		w.log.Printf("run %s: keeping its request: %v", n.ID, err)
		return
	}
	// Its content synced with the flush, as a claim's is: the sync that
	// enqueue asked for (keep) finds no file in the spool when the run
	// ends in the batch it was queued in, and its answer, accepted, goes
	// after that flush.
	w.keepClaimed(w.store.Run(n.ID).Request(), claimed)
	w.forget(n.String())
}

// keepGood is keepRequest for held queued run q, whose request n in the
// spool is a bad version (see holdQueued): the run's request is its last
// good version, the one it waited to run with, which is written as
// runs/<id>/request if this watcher read it (q.good); the bad version it
// was held for, answered and copied to rejected/ already, is removed
// from the spool, and is only there. Any other file under the name (a
// version not examined yet, another's) is left for examine, which
// decides it once the run ended: rejected, as a start of a run that
// exists, or for what is wrong with it.
func (w *watcher) keepGood(q *queuedRun, n spool.Name) {
	name := n.String()
	path := filepath.Join(w.spool.Spool(), name)
	if f, err := w.spool.Read(name); err == nil && q.bad != "" && spool.BodySum(f.Body) == q.bad && f.UID == q.st.OwnerUID && w.admit(f) == nil {
		// Removed by name, once it is seen to be that file still: the
		// spool is sticky, and the name its owner's while their file has
		// it.
		var st unix.Stat_t
		if unix.Lstat(path, &st) == nil && st.Dev == f.Dev && st.Ino == f.Ino {
			// A hard link to it is no request of root's once it is gone
			// (see spool.RemoveRequest): it is only here.
			if err := spool.RemoveRequest(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				w.log.Printf("run %s: removing its bad version from the spool: %v", q.st.ID, err)
			}
		}
		w.forget(name)
	} else {
		w.leaveToExamine(n)
	}
	if q.good == nil {
		w.log.Printf("run %s: its last good version was read by an earlier watcher: none is kept as its request", q.st.ID)
		return
	}
	err := spool.WriteVersion(w.store.Run(n.ID).Request(), q.good, q.st.OwnerUID)
	w.movedOut(n.ID, err) // its directory synced, and the spool, before its end is written
	if err != nil {
		w.log.Printf("run %s: keeping its last good version as its request: %v", n.ID, err)
	}
}

// leaveToExamine has start request n of a queued run that ended, if it
// is in the spool, examined again soon: a file that was not its run's
// request to keep, which examine then rejects (or takes, once written, if
// it is a request after all). Nothing else would look at it again: its
// events were seen. It was a version of the run's request, written while
// the run was queued, not a new start: its rejection as a second start
// leaves the answer to the name as it is (see rejectDuplicate).
func (w *watcher) leaveToExamine(n spool.Name) {
	if exists(filepath.Join(w.spool.Spool(), n.String())) {
		w.leftVersions[n.ID] = true
		w.examineAfter(n.String(), 0)
	}
}

// endQueued records queued run q ended in state, without starting it.
func (w *watcher) endQueued(q *queuedRun, state tracker.StateName, reason string) {
	w.removeQueued(q)
	w.writeQueue()
	now := time.Now()
	q.st.State, q.st.Reason, q.st.EndedAt, q.st.HeldSum = state, reason, &now, ""
	w.saveEnd(q.st)
	w.log.Printf("run %s: %s (%s)", q.st.ID, state, reason)
}

// queuedRequestRemoved handles the removal of queued run q's request from
// the spool. Editors and tools that save by removing and re-creating the
// file (vim with a backup, install(1), mv from another file system) leave
// a moment with no file, so the run is canceled only if the name stays
// empty for the settings' QueueEditWindow; a file that appears under it
// meanwhile is an edit (editQueued).
func (w *watcher) queuedRequestRemoved(q *queuedRun) {
	q.stopGone()
	q.removed = true
	w.log.Printf("run %s: its queued request was removed from the spool: it is canceled unless it is back within %v", q.st.ID, w.settings.QueueEditWindow)
	var t *time.Timer
	t = w.after(w.settings.QueueEditWindow, func() {
		if q.gone != t || w.queued(q.st.ID) != q {
			return // started, canceled, taken back or removed again meanwhile
		}
		q.gone = nil
		if exists(filepath.Join(w.spool.Spool(), spool.Name{ID: q.st.ID, Verb: spool.VerbStart}.String())) {
			return // back, and being written: its examination decides
		}
		w.queuedRequestGone(q, "its request was removed from the spool while queued")
	})
	q.gone = t
}

// stopGone forgets a removal of q's request: a new version was taken, or
// the run leaves the queue.
func (q *queuedRun) stopGone() {
	if q.gone != nil {
		q.gone.Stop()
		q.gone = nil
	}
	q.removed = false
}

// queuedRequestGone handles the removal (or rejection) of queued run q's
// request from the spool: there is nothing left to start.
func (w *watcher) queuedRequestGone(q *queuedRun, why string) {
	w.endQueued(q, tracker.Canceled, why+"; it never started")
}

// writeQueue replaces ROOT/queue. It is derived data (the records say
// which runs are queued, and since when), so it is not fsynced.
func (w *watcher) writeQueue() {
	var b strings.Builder
	for _, q := range w.queue {
		b.WriteString(q.st.ID)
		b.WriteByte('\n')
	}
	if err := durable.ReplaceUnsynced(w.root().Queue(), []byte(b.String()), durable.Perm{Mode: 0o644}); err != nil {
		w.log.Printf("%v", err)
	}
}

// recoverQueued puts run st, recorded queued by an earlier watcher, back
// in the queue, if its request is still in the spool. One whose request
// was claimed is started; one whose request is gone is queued too, and
// ends canceled unless it is back within the edit window (the watcher may
// have stopped in the middle of an editor's save).
func (w *watcher) recoverQueued(st *tracker.State) {
	n := spool.Name{ID: st.ID, Verb: spool.VerbStart, Owner: st.OwnerUID}
	if f, err := w.spool.Read(n.String()); err == nil || !errors.Is(err, fs.ErrNotExist) {
		// One that does not parse now, or is not its owner's, is decided on
		// rescan. So is one edited while no watcher ran: it is compared
		// there with what the record was made from.
		req, perr := spool.ParseStart(f.Body)
		switch {
		case st.RequestSum != "" && st.RequestSum != spool.BodySum(f.Body):
			req = recordedRequest(st)
		case st.RequestSum == "" && err == nil && perr == nil:
			// Made by a tend that kept no sum (before request_sum): the
			// version found is the only one known to have been taken, as
			// req says, and it is spared as taken (queuedAsIs) from rules
			// newer than that tend's.
			st.RequestSum = spool.BodySum(f.Body)
		}
		// One its record says is held (holdQueued) stays held until a good
		// version is taken, whatever the spool holds now: the version it
		// holds for is answered already, and its record names it.
		var good []byte // the version it was made from, if that is what is there
		if err == nil && st.RequestSum == spool.BodySum(f.Body) {
			good = f.Body
		}
		w.addQueued(&queuedRun{st: st, req: req, held: strings.HasPrefix(st.Reason, heldPrefix), bad: st.HeldSum, good: good})
		return
	}
	if _, err := os.Stat(w.store.Run(st.ID).Request()); err == nil {
		if w.hasStarted(st.ID) {
			w.ranUnrecorded(st)
			return
		}
		w.neverRan(st, "it was leaving the queue when the watcher stopped")
		return
	}
	q := &queuedRun{st: st, held: strings.HasPrefix(st.Reason, heldPrefix), bad: st.HeldSum}
	w.addQueued(q)
	w.queuedRequestRemoved(q)
}

// recordedRequest returns what queued run st's record tells of the
// request it was made from, for a new version to be compared with (see
// updateQueued): its waits, with its not_before as the time it was made;
// not its environment or labels, which a record does not keep apart from
// those set since. So a new version that sets any of them, or gives
// not_before as a duration, is taken as changing them: its duration
// counts from when it is taken, and the labels it no longer sets stay.
func recordedRequest(st *tracker.State) spool.Start {
	var req spool.Start
	for _, a := range st.After {
		if d, err := spool.ParseDep(a); err == nil {
			req.After = append(req.After, d)
		}
	}
	if st.NotBefore != nil {
		req.NotBefore = &spool.NotBefore{At: *st.NotBefore}
	}
	return req
}

// relabel returns a queued run's labels once its request's labels went
// from was to now: those the request set or removed are as it says now,
// and those set since by label requests (which the request does not
// name) are kept.
func relabel(labels, was, now map[string]string) map[string]string {
	out := maps.Clone(labels)
	for k := range was {
		if _, kept := now[k]; !kept {
			delete(out, k)
		}
	}
	for k, v := range now {
		if out == nil {
			out = make(map[string]string)
		}
		out[k] = v
	}
	return out
}

// sameWaits reports whether requests a and b wait for the same runs and
// time.
func sameWaits(a, b spool.Start) bool {
	return slices.Equal(a.After, b.After) && (a.NotBefore == nil) == (b.NotBefore == nil) &&
		(a.NotBefore == nil || a.NotBefore.At.Equal(b.NotBefore.At) && a.NotBefore.In == b.NotBefore.In)
}
