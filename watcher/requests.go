package watcher

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
	"github.com/tendhq/tend/tracker/durable"
	"golang.org/x/sys/unix"
)

// pending is a spool entry that has been seen but not yet taken or rejected.
type pending struct {
	lastChange time.Time     // the last event for it (or when it was first seen)
	retry      *time.Timer   // the next examination, if one is scheduled
	busyDelay  time.Duration // backoff while a writer holds it open
}

func (w *watcher) pendingFor(name string) *pending {
	p := w.pending[name]
	if p == nil {
		p = &pending{lastChange: time.Now()}
		w.pending[name] = p
	}
	return p
}

func (w *watcher) forget(name string) {
	if p := w.pending[name]; p != nil && p.retry != nil {
		p.retry.Stop()
	}
	delete(w.pending, name)
}

// faultRetry is how often a request that a fault kept from being taken is
// tried again. Nothing reports the end of a fault (a file system made
// writable again, space freed), so it is polled, and only while a request
// waits on it.
const faultRetry = time.Second

// takeLater leaves request name in the spool after a fault (a read-only
// or full file system, ...) kept it from being taken or rejected, and
// examines it again in a while: nothing is lost, and it is taken once the
// fault is gone. The fault is logged once for each request.
func (w *watcher) takeLater(name, what string, err error) {
	w.noteFlushFailure(err) // a rejection's reason that could not be synced
	if w.faulted[name] != err.Error() {
		w.log.Printf("%s: %s: %v (it stays in the spool; retrying every %v)", spool.Printable(name), what, err, faultRetry)
		w.faulted[name] = err.Error()
	}
	w.examineAfter(name, faultRetry)
}

// examineAfter examines name again after d, replacing any earlier schedule.
func (w *watcher) examineAfter(name string, d time.Duration) {
	p := w.pendingFor(name)
	if p.retry != nil {
		p.retry.Stop()
	}
	p.retry = w.after(d, func() {
		if w.pending[name] == p {
			w.examine(name)
		}
	})
}

// examine decides what to do with spool entry name now. The rule for when
// a request is complete:
//   - the kernel grants a read lease, so no one has it open for writing, and
//   - its content parses.
//
// A request that is open for writing is examined again soon (and on its
// next event). One that does not parse is rejected only once it has been
// unchanged for the settle period, so a writer that closes and reopens the
// file between writes, or an editor's temporary name about to be renamed,
// is not cut off. Where leases are not available, the settle period also
// applies to requests that parse.
func (w *watcher) examine(name string) {
	if w.stopping > 0 {
		return
	}
	if w.historyHeld() {
		// Nothing is answered, taken or rejected before the history can
		// be appended: it waits in the spool (releaseHeld examines it).
		w.holdPending(name)
		return
	}
	n, nameErr := spool.ParseName(name)
	if sn, ok := spool.ParseSelectorName(name); ok {
		n, nameErr = sn, nil
	}
	f, err := w.spool.Read(name)
	n.Owner = f.UID // it is answered as its owner's (see spool.Name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		w.forget(name) // taken, renamed away or removed
		delete(w.faulted, name)
		if nameErr == nil && n.Verb == spool.VerbStart {
			delete(w.leftVersions, n.ID)
		}
		if nameErr == nil {
			if q := w.queued(n.ID); q != nil && n.Verb == spool.VerbStart {
				w.queuedRequestRemoved(q)
			}
			w.afterStartDecided(n) // a removed start is decided too
		}
		return
	case errors.Is(err, durable.ErrNotRegular):
		w.reject(name, n, nameErr, err.Error())
		return
	case errors.Is(err, spool.ErrBusy):
		p := w.pendingFor(name)
		p.busyDelay = min(max(2*p.busyDelay, time.Millisecond), 100*time.Millisecond)
		w.examineAfter(name, p.busyDelay)
		return
	}
	if err == nil && nameErr == nil && f.Links > 1 && w.claimGhost(n, f) {
		// Renamed into its run's directory, and back in the spool after a
		// power loss took the rename's other half: it is taken already.
		w.log.Printf("%s: run %s claimed this very file before a power loss: removed from the spool", spool.Printable(name), n.ID)
		os.Remove(filepath.Join(w.spool.Spool(), name))
		w.forget(name)
		return
	}
	problem := err
	if problem == nil {
		problem = nameErr
	}
	if problem == nil {
		problem = w.admit(f)
	}
	if q := w.queued(n.ID); problem == nil && q != nil && n.Verb == spool.VerbStart && f.UID != q.st.OwnerUID {
		problem = fmt.Errorf("owned by uid %d, but queued run %s belongs to uid %d: only its owner may edit it", f.UID, n.ID, q.st.OwnerUID)
	}
	if problem == nil && w.carriedOut(name, n, f) {
		return
	}
	var take func()
	admitted := problem == nil // its writer's own file, a request by every other check
	if admitted {
		take, problem = w.request(n, f)
	}
	if problem != nil || !f.Settled {
		if wait := w.pendingFor(name).lastChange.Add(w.cfg.Settle).Sub(time.Now()); wait > 0 {
			w.examineAfter(name, wait)
			return
		}
	}
	if problem != nil {
		w.refuseStart(name, n, nameErr, f, admitted, problem.Error())
		return
	}
	w.forget(name)
	if n.Verb != spool.VerbStart {
		w.settleSpawns() // the run it is about may be one being forked
	}
	take()
}

// carriedOut answers tagged control request n (spool entry name, read as
// f) again, and removes it, if its run's record says it was carried out
// (see markDone): taken again after a power loss, its body may not have
// survived with it (its writer did not sync it), and a request that was
// carried out must not be answered rejected.
func (w *watcher) carriedOut(name string, n spool.Name, f spool.File) bool {
	if n.Tag == "" || n.Verb == spool.VerbStart {
		return false
	}
	st, err := w.lookup(n.ID)
	if err != nil || !carried(st, n) {
		return false
	}
	if ok, _ := permitted(f.UID, "", st); !ok {
		return false
	}
	// Gone for good: a hard link to it elsewhere is no request of
	// root's (see spool.RemoveRequest). Its claim, which a power loss
	// may bring back with it, is its own name.
	path := filepath.Join(w.spool.Spool(), name)
	if err := spool.RemoveRequest(path, takenPath(w.spool, n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		w.log.Printf("%s: %v", spool.Printable(name), err)
	}
	w.forget(name)
	w.answerDone(n, st)
	return true
}

// claimGhost reports whether start request f in the spool is the very
// file run n.ID claimed (its request, by device and inode): a claim is a
// rename, and a power loss may keep its new name and not the removal of
// the old one, when the spool was not synced since.
func (w *watcher) claimGhost(n spool.Name, f spool.File) bool {
	if n.Verb != spool.VerbStart {
		return false
	}
	var st unix.Stat_t
	return unix.Lstat(w.store.Run(n.ID).Request(), &st) == nil && st.Dev == f.Dev && st.Ino == f.Ino
}

// refuseStart rejects request name (n, read as f; nameErr says what is
// wrong with its name) for problem, or, if it is a version of a queued
// run's request that its owner wrote (admitted: it passed every check
// but its body's) and that does not parse or is refused, holds the run
// for a good version (holdQueued): a typo is not a cancel. Anything
// else in a queued run's place (another user's file, a link, a second
// hard link) is rejected, and cancels the run.
func (w *watcher) refuseStart(name string, n spool.Name, nameErr error, f spool.File, admitted bool, problem string) {
	if q := w.queued(n.ID); q != nil && admitted && n.Verb == spool.VerbStart && n.ID != spool.SelectID {
		w.holdQueued(q, n, f, problem)
		return
	}
	w.reject(name, n, nameErr, problem)
}

// request parses request n's body for its verb, and returns what takes it.
func (w *watcher) request(n spool.Name, f spool.File) (take func(), err error) {
	if n.ID == spool.SelectID {
		return w.selectRequest(n, f)
	}
	switch n.Verb {
	case spool.VerbStart:
		req, err := spool.ParseStart(f.Body)
		if err == nil && !w.queuedAsIs(n.ID, f.Body) {
			err = req.CheckNew() // what a watcher took stays taken (a queued run's, after an upgrade)
		}
		return func() { w.takeStart(n, f, req) }, err
	case spool.VerbDelete:
		req, err := spool.ParseDelete(f.Body)
		return func() { w.takeDelete(n, f, req) }, err
	case spool.VerbLabel:
		req, err := spool.ParseLabel(f.Body)
		return func() { w.takeLabel(n, f, req) }, err
	case spool.VerbNote:
		req, err := spool.ParseNote(f.Body)
		return func() { w.takeNote(n, f, req) }, err
	case spool.VerbSignal:
		req, err := spool.ParseSignal(f.Body)
		return func() { w.takeSignal(n, f, req) }, err
	}
	// cancel, restart, pause and resume share one body.
	req, err := spool.ParseCancel(f.Body)
	take = map[string]func(){
		spool.VerbCancel:  func() { w.takeCancel(n, f, req) },
		spool.VerbRestart: func() { w.takeRestart(n, f, req) },
		spool.VerbPause:   func() { w.takePause(n, f, req) },
		spool.VerbResume:  func() { w.takeResume(n, f, req) },
	}[n.Verb]
	if take == nil {
		return nil, fmt.Errorf("verb %q has no handler", n.Verb) // ParseName let through a verb this does not know
	}
	return take, err
}

// reject moves a bad request aside with its reason and, if its name is a
// valid request name, answers it with a rejected outcome.
func (w *watcher) reject(name string, n spool.Name, nameErr error, reason string) {
	w.rejectAnswered(name, n, nameErr, reason, true)
}

// rejectDuplicate rejects start request n, read as f, of the run whose
// directory dir exists. It is moved aside with its reason all the same,
// but an answer there is not taken back where its writer could have
// removed it and did not (answerStands), as a client that waits for its
// answer does (tend start, tend.sh) before it writes: that answer is
// another request's (the run's accepted, which its client may read
// late), never this one's. The reason, in rejected/, says which case:
//   - a version of a queued run's request that was not examined yet when
//     the run ended without starting (still open for writing, or saved
//     within the settle period: see leaveToExamine), written while the
//     run was queued;
//   - the run's own request written again, byte for byte, by its owner
//     (an editor saving an unchanged buffer just after the run was taken,
//     a script that wrote it twice: writtenAgain);
//   - any other second start written over the answer.
//
// A second start whose answer its writer removed is answered rejected, as
// is a member's, whose client waits for a new answer by its inode. A
// client whose answer was written by another start of the same ID after
// it removed it (two clients of one user starting it at once) finds its
// reason in rejected/, beside its request file (tend.Client does).
func (w *watcher) rejectDuplicate(n spool.Name, f spool.File, dir string) {
	left := w.leftVersions[n.ID]
	delete(w.leftVersions, n.ID)
	reason := fmt.Sprintf("run %s already exists%s: run ids are used once (see %s)", n.ID, w.existingAs(n.ID), dir)
	switch {
	case !w.answerStands(n):
		w.reject(n.String(), n, nil, reason)
	case left:
		w.rejectAnswered(n.String(), n, nil, reason+"; this version was written while the run was queued, and the answer already in outcomes/ to this name stands", false)
	case w.writtenAgain(n, f):
		w.rejectAnswered(n.String(), n, nil, reason+"; this is the request it was started from, written again, and the answer it had stands", false)
	default:
		w.rejectAnswered(n.String(), n, nil, reason+"; it was written over the answer to this name, which stands (a client that waits for its own answer removes the old one first)", false)
	}
}

// answerStands reports whether start request n is answered already, in
// a directory of answers its writer may remove from (the root's
// outcomes/, for root's and the root owner's): that answer is left as
// it is (see rejectDuplicate). A member of a shared root may not remove
// its answers (see spool.Dir.OutcomesOf): its client waits for a new one
// by its inode. An empty one, left by a power loss, is none.
func (w *watcher) answerStands(n spool.Name) bool {
	if w.spool.OutcomesOf(n.Owner) != w.spool.Outcomes() {
		return false
	}
	outcome, _, err := w.spool.ReadOutcome(n)
	return err == nil && outcome != ""
}

// existingAs tells how run id stands, for the rejection of a second
// start of it: " (canceled: <reason>)", or "" if its record cannot be
// read. A writer whose request was canceled while it wrote (a queued
// run's, canceled by another client) learns why its write was refused.
func (w *watcher) existingAs(id string) string {
	st, err := w.lookup(id)
	if err != nil {
		return ""
	}
	if st.Reason == "" {
		return fmt.Sprintf(" (%s)", st.State)
	}
	return fmt.Sprintf(" (%s: %s)", st.State, spool.Printable(st.Reason))
}

// writtenAgain reports whether start request n, read as f, is the request
// its existing run was started from (kept in its directory), by the same
// owner, and the answer to it is still there.
func (w *watcher) writtenAgain(n spool.Name, f spool.File) bool {
	st, err := w.lookup(n.ID)
	if err != nil || st.OwnerUID != f.UID {
		return false
	}
	kept, _, err := durable.ReadRegular(w.store.Run(n.ID).Request(), spool.MaxBody)
	if err != nil || !bytes.Equal(kept, f.Body) {
		return false
	}
	outcome, _, err := w.spool.ReadOutcome(n)
	return err == nil && outcome == spool.Accepted
}

// rejectAnswered is reject, which answers the request only if answer is
// set.
func (w *watcher) rejectAnswered(name string, n spool.Name, nameErr error, reason string, answer bool) {
	reason = strings.TrimPrefix(reason, name+": ") // the .error line names it already
	dst, err := w.spool.Reject(name, reason)
	switch {
	case err == nil:
		w.claimed(nil) // its removal from the spool, with the next flush
	case dst != "": // moved, but not synced
		w.syncFailed(fmt.Errorf("%s: rejecting: %w", spool.Printable(name), err))
	case errors.Is(err, fs.ErrNotExist):
		w.forget(name)
		delete(w.faulted, name)
		return
	default:
		w.takeLater(name, "rejecting", err)
		return
	}
	w.forget(name)
	delete(w.faulted, name)
	w.log.Printf("%s: rejected: %s", spool.Printable(name), reason)
	if q := w.queued(n.ID); q != nil && nameErr == nil && n.Verb == spool.VerbStart {
		w.queuedRequestGone(q, "its request was edited into one that is rejected: "+reason)
	}
	if nameErr == nil && answer {
		w.outcome(n, spool.Rejected, reason)
	}
	if nameErr == nil {
		w.afterStartDecided(n)
	}
}

func (w *watcher) outcome(n spool.Name, outcome, detail string) {
	w.follow(effectAnswer, n.ID, func() { // what it answers is recorded first
		if w.selectionAnswer(n, outcome, detail) {
			return // a part of a selector request: it answers for all
		}
		if err := w.spool.WriteOutcome(n, outcome, detail); err != nil {
			w.log.Printf("%s: writing outcome %s: %v (retrying)", n, outcome, err)
			w.unsaved.outcomes[n] = [2]string{outcome, detail}
			w.retryUnsaved()
		}
	})
}

// afterStartDecided re-examines cancels that waited for start request n.
func (w *watcher) afterStartDecided(n spool.Name) {
	if n.Verb != spool.VerbStart {
		return
	}
	if w.waitedOn(n.ID) {
		w.waitedChanged() // what waits for it may never start now
	}
	names := w.afterStart[n.ID]
	delete(w.afterStart, n.ID)
	for _, name := range names {
		w.examine(name)
	}
}

// takeStart claims a complete start request into runs/<id>/request and
// starts the run. A run with the same ID, live or finished, makes it a
// duplicate.
func (w *watcher) takeStart(n spool.Name, f spool.File, req spool.Start) {
	// Cancels that wait for this start are answered once it is decided:
	// taken, queued or rejected, not left for later.
	decided, held := true, false
	defer func() {
		if decided {
			w.afterStartDecided(n)
		}
		if held {
			w.dequeue() // once the cancels that held it were carried out
		}
	}()
	if len(req.After) > 0 {
		// Checked before anything else: a run that would wait for no run,
		// or for itself, is refused, as an edit of a queued one too.
		var had []spool.Dep // what a queued run already waits for
		if q := w.queued(n.ID); q != nil {
			had = q.req.After
		}
		if err := w.checkDeps(n.ID, req.After, had); err != nil {
			w.refuseStart(n.String(), n, nil, f, true, err.Error())
			return
		}
	}
	slurm := w.slurmFor(req)
	if err := checkJob(req, slurm); err != nil {
		w.refuseStart(n.String(), n, nil, f, true, err.Error())
		return
	}
	if q := w.queued(n.ID); q != nil {
		w.editQueued(q, n, f, req) // edited while it waits
		return
	}
	// A run a cancel already waits for (sent before its start was taken:
	// while no watcher ran, or as its start was being written) is queued,
	// not started: the cancel, examined once the start is decided, finds
	// it queued and ends it before it ever runs.
	held = slurm == nil && w.cancelWaitsFor(n.ID)
	// A run on a cluster takes none of this host's slots: its cluster
	// schedules it.
	if held || slurm == nil && (!w.slotFor(req.Session) || len(w.queue) > 0) || len(req.After) > 0 || req.NotBefore != nil {
		if dir := w.store.RunDir(n.ID); exists(dir) && !emptyDir(dir) {
			held = false
			w.rejectDuplicate(n, f, dir)
			return
		}
		w.enqueue(n, f, req)
		if !held {
			w.dequeue() // it, or one before it, may start at once
		}
		return
	}
	dir := w.store.RunDir(n.ID)
	err := w.store.MakeRunDir(n.ID)
	if err != nil && !errors.Is(err, fs.ErrExist) {
		decided = false
		w.takeLater(n.String(), "making its run directory", err)
		return
	}
	// A directory just made is empty: only one that was there is looked into.
	if err != nil && !emptyDir(dir) {
		w.rejectDuplicate(n, f, dir)
		return
	}
	claimed, err := w.spool.Claim(f, filepath.Join(dir, "request"))
	w.claimed(err)
	if err == nil {
		w.claimedInto(dir, true)
		w.keepClaimed(filepath.Join(dir, "request"), claimed)
	}
	if err != nil {
		os.Remove(dir)
		if !errors.Is(err, fs.ErrNotExist) {
			decided = false
			w.takeLater(n.String(), "claiming", err)
		}
		return
	}
	delete(w.faulted, n.String())
	if claimed.Ino != f.Ino { // replaced between read and claim: check and parse what was claimed
		err := w.admit(claimed)
		if err == nil {
			req, err = spool.ParseStart(claimed.Body)
		}
		if err == nil {
			err = req.CheckNew()
		}
		if err != nil {
			w.rejectClaimed(n, dir, err.Error())
			return
		}
	}
	st := w.newRun(n.ID, claimed.UID, req)
	w.claimBody(n.ID, claimed)
	w.passing(st) // launch saves it at once
	w.launch(st, req.Env)
	w.accepted(n)
}

// queuedAsIs reports whether body is the version queued run id was made
// from (or last edited into): taken already, it is not checked as a new
// request, whatever this watcher's rules, newer than the one that took
// it, would refuse.
func (w *watcher) queuedAsIs(id string, body []byte) bool {
	q := w.queued(id)
	return q != nil && q.st.RequestSum == spool.BodySum(body)
}

// cancelWaitsFor reports whether a cancel request of run id waits for its
// start request to be decided (claimControl).
func (w *watcher) cancelWaitsFor(id string) bool {
	for _, name := range w.afterStart[id] {
		if n, err := spool.ParseName(name); err == nil && n.Verb == spool.VerbCancel {
			return true
		}
	}
	return false
}

// newRun returns the first record of run id, made from its request.
func (w *watcher) newRun(id string, uid int, req spool.Start) *tracker.State {
	// An ID is used again once its run is deleted: how that run ended is
	// not this one's, for the runs that wait for it.
	delete(w.ended, id)
	delete(w.deletedAs, id)
	delete(w.leftVersions, id) // a version left when it was queued: taken as a new run's
	st := &tracker.State{
		ID: id, State: tracker.Starting, Session: req.Session, OwnerUID: uid,
		Command: req.Args(), Cwd: w.cwd(req.Cwd), Labels: maps.Clone(req.Labels), Timeout: req.Timeout,
		Grace: spool.Duration(defaultGrace), CreatedAt: time.Now(),
		Restart: req.Restart, Health: req.Health, ReadyFile: req.ReadyFile, Limits: req.Limits,
		Slurm: w.slurmFor(req),
	}
	for _, d := range req.After {
		st.After = append(st.After, d.String())
	}
	if req.NotBefore != nil {
		t := req.NotBefore.From(st.CreatedAt)
		st.NotBefore = &t
	}
	if req.OutputLimit > 0 {
		st.Output = &tracker.Output{Limit: req.OutputLimit}
	}
	if req.Grace != nil {
		st.Grace = *req.Grace
	}
	return st
}

// rejectClaimed moves a claimed request on to rejected/, under its name,
// then answers it. One that cannot be moved stays where it is, never
// deleted, and is not answered yet: the next watcher's recovery finds it
// there and rejects it again (an answer comes only once the request and
// its reason are in rejected/).
func (w *watcher) rejectClaimed(n spool.Name, dir, reason string) {
	dst, err := w.spool.RejectFrom(filepath.Join(dir, "request"), n.String(), reason)
	switch {
	case dst == "":
		w.log.Printf("%s: rejecting: %v (it stays in %s, for the next watcher to reject)", n, err, dir)
		return
	case err != nil: // moved, but not synced
		w.syncFailed(fmt.Errorf("%s: rejecting: %w", n, err))
		fallthrough
	default:
		os.RemoveAll(dir)
	}
	w.log.Printf("%s: rejected: %s", n, reason)
	w.outcome(n, spool.Rejected, reason)
}

// cwd resolves a request's working directory: by default, and for relative
// paths, the directory that holds the tend root (the project).
func (w *watcher) cwd(dir string) string {
	if filepath.IsAbs(dir) {
		return filepath.Clean(dir)
	}
	return filepath.Join(filepath.Dir(w.cfg.Root), dir)
}

// emptyDir reports whether dir holds nothing: a run directory left by a
// claim cut short, or made for a queued run.
func emptyDir(dir string) bool {
	d, err := os.Open(dir)
	if err != nil {
		return false
	}
	defer d.Close()
	_, err = d.Readdirnames(1)
	return errors.Is(err, io.EOF)
}

func (w *watcher) answer(n spool.Name, outcome, detail string) {
	w.log.Printf("%s: %s", n, outcome)
	w.outcome(n, outcome, detail)
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
