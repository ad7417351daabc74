package watcher

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
	"github.com/tendhq/tend/watcher/config"
	"golang.org/x/sys/unix"
)

// Control requests (cancel, delete) act on a run that exists. Each is
// claimed under a hidden name, which the watcher ignores, and removed only
// once its effect is recorded: a watcher that dies in between leaves it
// for the next one (see restoreControls), so none is lost.

// claimControl claims control request n, or defers it while a start
// request of the same ID is still in the spool and not queued (its writer
// may not be done: the start decides whether the run exists). It returns
// the claimed file's path, to be removed once the request is carried out.
func (w *watcher) claimControl(n spool.Name, f spool.File) (taken string, ok bool) {
	if spool.ValidID(n.ID) == nil && w.startWaiting(n.ID) { // a selector (*) waits for none
		w.afterStart[n.ID] = append(w.afterStart[n.ID], n.String())
		return "", false
	}
	taken = takenPath(w.spool, n)
	claimed, err := w.spool.Claim(f, taken)
	w.claimed(err)
	if err == nil {
		w.claimedInto(w.spool.Claims(), false)
	}
	if _, live := w.claims[taken]; live && errors.Is(err, fs.ErrExist) {
		// A request of the same name and owner under way: this one is
		// taken once that one is done (unclaim), as the same file written
		// twice is, never put over it.
		if !slices.Contains(w.claims[taken], n.String()) {
			w.claims[taken] = append(w.claims[taken], n.String())
		}
		return "", false
	}
	if errors.Is(err, fs.ErrExist) {
		// Not a claim of this watcher's (only it writes in claims/): put
		// there by hand. Answered, never left unseen in the spool.
		w.reject(n.String(), n, nil, fmt.Sprintf("claims/%s is in the way, and is no request under way: remove it", filepath.Base(taken)))
		return "", false
	}
	if err != nil {
		w.log.Printf("%s: claiming: %v", n, err)
		return "", false
	}
	if claimed.Ino != f.Ino {
		// Replaced between read and claim: the request read is gone, and
		// the one that replaced it is examined as any other (its owner,
		// its body), from the spool.
		if err := unix.Renameat2(unix.AT_FDCWD, taken, unix.AT_FDCWD, filepath.Join(w.spool.Spool(), n.String()), unix.RENAME_NOREPLACE); err != nil {
			if _, err := w.spool.RejectFrom(taken, n.String(), "replaced by a newer request of the same name before it was taken"); err != nil {
				w.syncFailed(fmt.Errorf("%s: rejecting: %w", n, err))
			}
		}
		w.examine(n.String())
		return "", false
	}
	w.claims[taken] = nil
	if hasContent(claimed.Body) {
		w.keepClaimed(taken, claimed)
	}
	if !w.batch.active {
		// Taken on a timer (a request written in place, one that waited):
		// its answer may follow at once, with no record, and must not be
		// taken back with the claim.
		w.writeRecords(nil, nil)
	}
	return taken, true
}

// hasContent reports whether a control request's body says anything a
// power loss could take back: not an empty one, nor the "{}" tend's own
// clients send when they have nothing to say.
func hasContent(body []byte) bool {
	b := bytes.TrimSpace(body)
	return len(b) > 0 && !bytes.Equal(b, []byte("{}"))
}

// unclaim removes claimed control request taken, carried out, and takes
// the requests of the same name and owner that waited for it. A link to
// it in the spool spends its mark, whatever its name there (see
// spool.RemoveRequest): while this watcher runs, the claim (a rename)
// took the request's name from the spool, so a file of it there now is
// no power loss's (see removeClaim), but a member's link, made from one
// of their own where fs.protected_hardlinks=0; it would wait for the
// claim as a request of its name and owner, and be carried out again.
func (w *watcher) unclaim(taken string) {
	if err := spool.RemoveRequest(taken); err != nil && !errors.Is(err, fs.ErrNotExist) {
		w.log.Printf("%v", err)
	}
	waiting := w.claims[taken]
	delete(w.claims, taken)
	for _, name := range waiting {
		w.examineAfter(name, 0) // from the loop, not from inside a flush's effects
	}
}

// removeClaim removes claimed control request taken, in claims/, found
// as the watcher starts with a request of its name and owner in the
// spool, which will do. Its name in the spool, which a power loss may
// bring back with the claim's (a claim is a rename), is the request's
// own: a hard link elsewhere spends its mark (see spool.RemoveRequest).
func (w *watcher) removeClaim(taken string) {
	inSpool := ""
	if name, ok := spool.ParseClaimedName(filepath.Base(taken)); ok {
		inSpool = filepath.Join(w.spool.Spool(), name)
	}
	if err := spool.RemoveRequest(taken, inSpool); err != nil && !errors.Is(err, fs.ErrNotExist) {
		w.log.Printf("%v", err)
	}
}

// startWaiting reports whether a start request for id is in the spool and
// has not been taken (a queued run's request stays in the spool, but has
// been taken), for a run that is not there yet: one for a run that is
// will be refused, and must not hold up what acts on the run (anyone
// who may write the spool can keep a file of that name open).
func (w *watcher) startWaiting(id string) bool {
	if w.queued(id) != nil || exists(w.store.RunDir(id)) {
		return false
	}
	_, err := os.Lstat(filepath.Join(w.spool.Spool(), id+"."+spool.VerbStart))
	return err == nil
}

// permitted says whether a request owned by uid, naming session (or none),
// may act on run st. A session may act only on its own runs; a request
// without one is an operator's, and may act on any run of its owner. A
// request from another uid than the run's owner is refused unless it comes
// from root, whatever session it names: the user is the boundary, the
// session only a scope within it.
func permitted(uid int, session string, st *tracker.State) (bool, string) {
	switch {
	case uid != st.OwnerUID && uid != 0:
		return false, fmt.Sprintf("run %s belongs to uid %d, not to uid %d", st.ID, st.OwnerUID, uid)
	case session != "" && session != st.Session:
		if st.Session == "" {
			return false, fmt.Sprintf("run %s belongs to no session, not to session %s", st.ID, session)
		}
		return false, fmt.Sprintf("run %s belongs to session %s, not to session %s", st.ID, st.Session, session)
	}
	return true, ""
}

// lookup returns the record of run id: the live one if the watcher
// supervises, forks or queues it, or has a save of it held back, else the
// one on disk.
func (w *watcher) lookup(id string) (*tracker.State, error) {
	if r := w.runs[id]; r != nil {
		return r.st, nil
	}
	if j := w.jobs.byID[id]; j != nil {
		return j.st, nil
	}
	for _, sp := range w.spawning {
		if sp.st.ID == id {
			return sp.st, nil
		}
	}
	if st := w.heldState(id); st != nil {
		return st, nil
	}
	if q := w.queued(id); q != nil {
		return q.st, nil
	}
	if b := w.waiting[id]; b != nil {
		return b.st, nil
	}
	return w.store.Read(id)
}

// takeCancel answers a cancel request. Its outcome:
//   - canceled: the run was stopped by this (or an earlier) cancel; written
//     once the run has ended and none of its process group is left; a
//     queued run ends at once, without starting;
//   - already_finished: the run had ended, or ended for another reason;
//   - not_found: no run has this ID;
//   - not_permitted: the run is another session's or another user's;
//   - not_cancellable: the run exists but no process of it can be signaled
//     by this watcher.
func (w *watcher) takeCancel(n spool.Name, f spool.File, req spool.Cancel) {
	st, done, ok := w.target(n, f, req.Session, req.IfRev)
	if !ok {
		return
	}
	defer done()
	if q := w.queued(n.ID); q != nil {
		w.cancelQueued(q, n)
		return
	}
	if b := w.waiting[n.ID]; b != nil {
		w.endBackoff(b, tracker.Canceled, "canceled while waiting to start again")
		w.answer(n, spool.Canceled, "")
		return
	}
	if w.stopFull(n, f, st) {
		return
	}
	if j := w.jobs.byID[n.ID]; j != nil {
		w.cancelJob(j, n, req)
		return
	}
	r := w.runs[n.ID]
	switch {
	case r == nil && tracker.Final(st.State):
		w.answer(n, spool.AlreadyFinished, string(st.State))
	case r == nil:
		w.answer(n, spool.NotCancellable, fmt.Sprintf("run is %s but not supervised by this watcher", st.State))
	case r.exit != nil && wantsRestart(r.st, *r.exit, r.unknown):
		w.cancelRestart(r, n)
	case r.exit != nil:
		w.answer(n, spool.AlreadyFinished, "its process has exited")
	default:
		grace := r.grace()
		if req.Grace != nil {
			grace = req.Grace.D()
		}
		w.stop(r, tracker.CauseCanceled, "canceled", grace, n.Key())
		w.log.Printf("%s: canceling (grace %s)", n, grace)
	}
}

// maxStopRequests is how many requests (cancels, restarts) may wait on
// one stop: far more than any client sends in earnest. Each that joins
// is saved with the record, and the history's line of that save carries
// every one before it: a run's owner who sent cancels by the thousand to
// a run of theirs that ignores SIGTERM (a grace of up to 24 h) grew the
// history, which every member keeps, as their square (1,000 empty files
// made 8 MB of it; 30,000, about 7 GB).
const maxStopRequests = 100

// stopFull answers request n (a cancel or a restart), of file f, rejected
// if run st is being stopped and as many requests as maxStopRequests wait
// on it already, and reports whether it did. One of them taken again
// (after a crash) is not refused, nor one of root or the watcher's user:
// an operator may always bring a stop's SIGKILL forward.
func (w *watcher) stopFull(n spool.Name, f spool.File, st *tracker.State) bool {
	if f.UID == 0 || f.UID == w.uid || st.Stop == nil || len(st.Stop.Requests) < maxStopRequests || slices.Contains(st.Stop.Requests, n.Key()) {
		return false
	}
	w.answer(n, spool.Rejected, fmt.Sprintf("run %s is being stopped, and %d requests wait for it already: this one is not kept (the run ends as they ask)", st.ID, len(st.Stop.Requests)))
	return true
}

// cancelRestart cancels run r, whose process has exited and which would
// start again (its policy, a restart request): it will not, and the
// cancel is answered canceled once the run has ended, as any other's.
// Answered already_finished, the run would go on under the client's eyes.
func (w *watcher) cancelRestart(r *run, n spool.Name) {
	if r.st.Stop == nil {
		r.st.Stop = &tracker.Stop{RequestedAt: time.Now()}
	}
	r.st.Stop.Cause = tracker.CauseCanceled
	r.st.Stop.Requests = append(r.st.Stop.Requests, n.Key())
	r.st.State, r.st.Reason = tracker.Stopping, "canceled"
	w.save(r.st)
	w.log.Printf("%s: canceling: its process has exited, and it will not start again", n)
}

// takeDelete answers a delete request: deleted (the record, its output
// and its outcomes are gone; a "deleted" event stays in the history),
// still_active (queued or live: nothing is touched), not_found, or
// not_permitted.
func (w *watcher) takeDelete(n spool.Name, f spool.File, req spool.Delete) {
	st, done, ok := w.target(n, f, req.Session, req.IfRev)
	if !ok {
		return
	}
	defer done()
	if !tracker.Final(st.State) || w.runs[n.ID] != nil || w.jobs.byID[n.ID] != nil || w.queued(n.ID) != nil {
		w.answer(n, spool.StillActive, "run is "+string(st.State))
		return
	}
	if w.held(st) {
		w.flush() // its record is written before it is deleted
	}
	by := "an operator"
	if req.Session != "" {
		by = "session " + req.Session
	}
	if err := w.deleteRun(st, "deleted by "+by, n.Key()); err != nil {
		w.log.Printf("%s: %v", n, err)
		w.answer(n, spool.Rejected, err.Error())
		return
	}
	w.answer(n, spool.Deleted, "")
}

// conflict answers request n with conflict, and reports true, if it
// names a revision (if_rev) that run st has moved on from.
func (w *watcher) conflict(n spool.Name, st *tracker.State, ifRev *int64) bool {
	if ifRev == nil || *ifRev == st.Rev {
		return false
	}
	w.answer(n, spool.Conflict, fmt.Sprintf("run %s is at rev %d, not %d", st.ID, st.Rev, *ifRev))
	return true
}

// target claims control request n and finds the run it acts on, checking
// the request may act on it (session, owner, if_rev). If it may not, or
// there is no such run, the request is answered and ok is false. done
// removes the claimed request; call it once the request is carried out.
func (w *watcher) target(n spool.Name, f spool.File, session string, ifRev *int64) (st *tracker.State, done func(), ok bool) {
	done = func() {}
	if w.selections[n] == nil { // a part of a selector request has no file: the selector was claimed
		taken, claimed := w.claimControl(n, f)
		if !claimed {
			return nil, nil, false
		}
		// Removed once what it did is recorded: until then it is what the
		// next watcher would take again.
		done = func() { w.follow(effectUnclaim, n.ID, func() { w.unclaim(taken) }) }
	}
	// Noted once: a restored delete is taken once, and a later request of
	// its name is a new one.
	_, restored := w.restoredDeletes[n.Key()]
	delete(w.restoredDeletes, n.Key())
	st, err := w.lookup(n.ID)
	switch {
	case errors.Is(err, tracker.ErrNotFound) && restored && w.deletedByItself(n):
		w.log.Printf("%s: carried out before the watcher restarted: answered again", n)
		w.outcome(n, spool.Deleted, "")
	case errors.Is(err, tracker.ErrNotFound):
		w.answer(n, spool.NotFound, "no run has this id")
	case err != nil:
		w.answer(n, spool.Rejected, err.Error())
	default:
		if ok, why := permitted(f.UID, session, st); !ok {
			w.answer(n, spool.NotPermitted, why)
		} else if carried(st, n) {
			w.answerDone(n, st)
		} else if !w.conflict(n, st, ifRev) {
			return st, done, true
		}
	}
	done()
	return nil, nil, false
}

// carried reports whether run st's record names tagged request n among
// those carried out (see markDone). A record written before requests
// were told apart by owner (by a tend without answers_by_owner) names a
// member's without "<uid>/": such a name, on the member's own run, is
// taken for theirs, so that one claimed across the upgrade is not carried
// out twice. Written since, it is root's, on the member's run, with the
// same tag: which happens only on purpose, and root may.
func carried(st *tracker.State, n spool.Name) bool {
	return slices.Contains(st.Done, n.Key()) ||
		n.Owner != 0 && n.Owner == st.OwnerUID && slices.Contains(st.Done, n.String())
}

// doneKept is how many tagged requests a record remembers (Done): more
// than a crash or a power loss can leave claimed at once for one run.
const doneKept = 16

// markDone notes in st that tagged request n is carried out on it, once
// its record is written. Untagged names are used again by design, so a
// repeated one cannot be told from a new request: it is not noted.
func markDone(st *tracker.State, n spool.Name) {
	if n.Tag == "" {
		return
	}
	st.Done = append(st.Done, n.Key())
	if len(st.Done) > doneKept {
		st.Done = st.Done[len(st.Done)-doneKept:]
	}
}

// answerDone answers request n again, which run st's record says was
// carried out: taken a second time, it changes nothing.
func (w *watcher) answerDone(n spool.Name, st *tracker.State) {
	w.log.Printf("%s: carried out already (rev %d): answered again, not carried out twice", n, st.Rev)
	if n.Verb == spool.VerbRestart {
		w.outcome(n, spool.Restarted, fmt.Sprintf("attempt %d", st.Attempt))
		return
	}
	w.outcome(n, spool.Updated, fmt.Sprintf("rev %d", st.Rev))
}

// takeMeta answers a label or note request: it changes run st's metadata
// through change, records it (rev grows, and the history has it), and
// answers "updated: rev N"; or not_found, not_permitted, conflict.
// The change is applied to the record as the history event says it
// (tracker.ApplyChange), so that a record rebuilt from the history holds
// the same.
func (w *watcher) takeMeta(n spool.Name, f spool.File, session string, ifRev *int64, change tracker.Event) {
	st, done, ok := w.target(n, f, session, ifRev)
	if !ok {
		return
	}
	defer done()
	change.Time = time.Now()
	if why := metaTooLarge(st, change); why != "" {
		w.answer(n, spool.Rejected, why)
		return
	}
	tracker.ApplyChange(st, change)
	markDone(st, n)
	w.saveChange(st, change, changed)
	w.answer(n, spool.Updated, fmt.Sprintf("rev %d", st.Rev))
}

// maxMeta bounds the bytes of a record's labels (keys and values) and
// notes together, as label and note requests make them: each request is
// bounded, not how many come. Without it, a run's owner grew the record
// the watcher holds, rewrites and syncs at each change, past what any
// reader reads back (16 MiB: the run could then be neither shown nor
// deleted), and the watcher's memory with it.
const maxMeta = 1 << 20

// metaTooLarge says why change, a label or note request's, is refused
// on run st: it would make its labels and notes larger than maxMeta
// (one that makes them no larger is taken: a record over it is mended
// so). "" if it is not.
func metaTooLarge(st *tracker.State, change tracker.Event) string {
	was := metaSize(st)
	after := *st
	after.Labels, after.Notes = maps.Clone(st.Labels), slices.Clip(st.Notes)
	tracker.ApplyChange(&after, change)
	if now := metaSize(&after); now > maxMeta && now > was {
		return fmt.Sprintf("run %s's labels and notes would take %d bytes, more than the limit of %d: remove some labels first", st.ID, now, maxMeta)
	}
	return ""
}

// metaSize is how many bytes st's labels and notes take.
func metaSize(st *tracker.State) int {
	n := 0
	for k, v := range st.Labels {
		n += len(k) + len(v)
	}
	for _, note := range st.Notes {
		n += len(note.Text)
	}
	return n
}

func (w *watcher) takeLabel(n spool.Name, f spool.File, req spool.Label) {
	labels := make(map[string]*string, len(req.Set)+len(req.Remove))
	for k, v := range req.Set {
		labels[k] = &v
	}
	for _, k := range req.Remove {
		labels[k] = nil
	}
	w.takeMeta(n, f, req.Session, req.IfRev, tracker.Event{Labels: labels})
}

func (w *watcher) takeNote(n spool.Name, f spool.File, req spool.Note) {
	w.takeMeta(n, f, req.Session, req.IfRev, tracker.Event{Note: req.Text})
}

// deleteRun removes finished run st's record, output and outcomes, and
// records a "deleted" event in the history, so the audit trail outlives
// the record. The record goes first, atomically (renamed aside); a crash
// before the event is written is made good at the next start
// (finishDeletions).
func (w *watcher) deleteRun(st *tracker.State, reason, request string) error {
	trash, err := w.store.Trash(st.ID)
	if trash == "" {
		return err
	}
	if err != nil {
		w.syncFailed(fmt.Errorf("%w (renamed aside, not synced)", err))
	}
	// Its end is no longer the end of a run of this ID: a run that waits
	// for a start request of the same ID, yet to be taken, must not find
	// it (conditions).
	delete(w.ended, st.ID)
	if w.waitedOn(st.ID) {
		del := deletion{st.State, time.Now()}
		w.deletedAs[st.ID] = del // what the runs that wait for it ask
		w.waitedDeletions[st.ID] = append(w.waitedDeletions[st.ID], del)
		w.waitedChanged()
	}
	w.finishDeletion(st.ID, st.Rev+1, st.Session, st.OwnerUID, reason, request, trash)
	return nil
}

// finishDeletion records that run id was deleted (by delete request
// request, if one did it), and removes what is left of it.
func (w *watcher) finishDeletion(id string, rev int64, session string, owner int, reason, request, trash string) {
	ev := tracker.Event{Time: time.Now(), ID: id, Rev: rev, State: tracker.Deleted, Session: session, Reason: reason, Request: request}
	// As every change: after the changes that wait to be appended (the
	// run's own end, say, which a full disk refused), and kept, to be
	// appended once there is space, if it cannot be now. Dropped, the
	// history would say the run still is as it ended, and a later run of
	// its ID would be rebuilt from both runs' lines.
	w.appendHistory([]tracker.Event{ev})
	w.syncHistory() // before it is answered
	w.retryUnsaved()
	for _, verb := range []string{spool.VerbStart, spool.VerbCancel} {
		os.Remove(w.spool.OutcomePath(spool.Name{ID: id, Verb: verb}))
		os.Remove(w.spool.OutcomePath(spool.Name{ID: id, Verb: verb, Owner: owner}))
	}
	// Not before its "deleted" line is stored: a watcher that dies while
	// the history holds (historyHeld) leaves the directory aside, for the
	// next one to finish the deletion (finishDeletions).
	w.runEffect(effect{name: effectPurge, id: "", do: func() {
		w.purge(id, trash, owner) // beside the loop: the run is gone from runs/ already
	}})
	w.log.Printf("run %s: %s", id, reason)
}

// finishDeletions completes the deletions an earlier watcher cut short.
// The record left in a run's renamed directory is believed only sealed:
// the directory is its owner's, who may have written one of their own
// there since. Else the run's last change in the history says the rest,
// and the directory's owner whose answers go with it.
func (w *watcher) finishDeletions() {
	trashed := w.store.Trashed()
	ids := make(map[string]bool, len(trashed))
	for id := range trashed {
		ids[id] = true
	}
	var history map[string][]tracker.Event // read only if a record is not believed
	for id, trashes := range trashed {
		trash := w.lastDeleted(id, trashes)
		rev, session, owner := int64(0), "", 0
		if st, err := w.store.ReadTrashed(id, trash); err == nil {
			rev, session, owner = st.Rev+1, st.Session, st.OwnerUID
		} else {
			if history == nil {
				history, _ = tracker.EventsOf(w.cfg.Root, ids)
			}
			if evs := history[id]; len(evs) > 0 {
				last := evs[len(evs)-1]
				rev, session = last.Rev+1, last.Session
				if last.State == tracker.Deleted {
					rev = last.Rev // this deletion's, written before the crash
				}
			}
			var dir unix.Stat_t
			if unix.Lstat(trash, &dir) == nil {
				owner = int(dir.Uid)
			}
		}
		by := w.deleteUnderWay(&tracker.State{ID: id, OwnerUID: owner, Session: session})
		w.finishDeletion(id, rev, session, owner, "deleted (finished after a restart)", by, trash)
	}
}

// lastDeleted returns, of trashes, the directories deletions of run id
// left behind, the last run's, and removes the others: an ID is used
// again only once its deletion is in the history, so only the last one
// may lack its event. The last is the one made last, as its record says
// (its owner may have rewritten it: else the directory's change time).
func (w *watcher) lastDeleted(id string, trashes []string) string {
	var last string
	var lastAt time.Time
	for _, trash := range trashes {
		var at time.Time
		var dir unix.Stat_t
		if st, err := w.store.ReadTrashed(id, trash); err == nil {
			at = st.CreatedAt
		} else if unix.Lstat(trash, &dir) == nil {
			at = time.Unix(dir.Ctim.Unix())
		}
		if last == "" || at.After(lastAt) {
			last, lastAt = trash, at
		}
	}
	for _, trash := range trashes {
		if trash != last {
			w.log.Printf("run %s: %s is what an earlier deletion left: removed", id, trash)
			var dir unix.Stat_t
			unix.Lstat(trash, &dir)
			w.purge(id, trash, int(dir.Uid))
		}
	}
	return last
}

// deleteUnderWay returns the key of the delete request of run st that an
// earlier watcher had claimed (see restoreControls), if there was one
// that may delete it: the one whose deletion it cut short. Of two or
// more, which it was is not known, and none is named; nor is one that
// may not (another user's, another session's), whose claim a crash left
// while it was answered not_permitted.
func (w *watcher) deleteUnderWay(st *tracker.State) string {
	var key string
	for k, n := range w.restoredDeletes {
		if n.ID != st.ID || !w.mayDelete(n, st) {
			continue
		}
		if key != "" {
			return ""
		}
		key = k
	}
	return key
}

// mayDelete reports whether restored delete request n, back in the spool,
// may delete run st: its owner and session (from its body) permit it.
func (w *watcher) mayDelete(n spool.Name, st *tracker.State) bool {
	f, err := w.spool.Read(n.String())
	if err != nil || f.UID != n.Owner {
		return false
	}
	req, err := spool.ParseDelete(f.Body)
	if err != nil {
		return false
	}
	ok, _ := permitted(n.Owner, req.Session, st)
	return ok
}

// deletedByItself reports whether delete request n, put back in the spool
// by restoreControls, is the one that deleted its run before the watcher
// stopped (the history's last event of the ID says so): its answer was
// deleted, and taken again it is answered so, not not_found.
func (w *watcher) deletedByItself(n spool.Name) bool {
	if n.Verb != spool.VerbDelete {
		return false
	}
	events, err := tracker.EventsOf(w.cfg.Root, map[string]bool{n.ID: true})
	evs := events[n.ID]
	if err != nil || len(evs) == 0 {
		return false
	}
	last := evs[len(evs)-1]
	return last.State == tracker.Deleted && last.Request == n.Key()
}

// takenPath is where control request n is kept while it is carried out:
// in claims/, which only the watcher writes (see spool.Dir.MakeClaims).
func takenPath(d spool.Dir, n spool.Name) string {
	return filepath.Join(d.Claims(), spool.ClaimedName(n))
}

// restoreControls puts back the control requests that an earlier watcher
// had claimed but maybe not carried out, to be taken again. Carrying one
// out twice is harmless: a second cancel of a stopping run waits with it,
// one of an ended run gets already_finished, and a delete that had
// deleted its run is answered deleted again (deletedByItself).
func (w *watcher) restoreControls() {
	claimed, _ := os.ReadDir(w.spool.Claims())
	putBack := false
	var answers []func()
	for _, e := range claimed {
		if name, ok := spool.ParseClaimedName(e.Name()); ok && e.Type().IsRegular() {
			w.noteRestoredDelete(e.Name())
			p, answer := w.restoreClaim(filepath.Join(w.spool.Claims(), e.Name()), name)
			putBack = putBack || p
			if answer != nil {
				answers = append(answers, answer)
			}
		}
	}
	w.syncRestored(putBack, len(answers) > 0)
	for _, answer := range answers {
		answer() // once its removal from claims/ is durable
	}
	for _, e := range claimed {
		claim, chosen := strings.CutSuffix(e.Name(), ".chosen")
		_, name, _ := strings.Cut(claim, ":")
		if chosen && !exists(filepath.Join(w.spool.Claims(), claim)) && !exists(filepath.Join(w.spool.Spool(), name)) {
			os.Remove(filepath.Join(w.spool.Claims(), e.Name())) // its request was answered
		}
	}
	w.restoreLegacyClaims()
}

// noteRestoredDelete notes claimed file name claimed (see
// spool.ClaimedName) if it is a delete request: one a crash may have cut
// short after it deleted its run (see deletedByItself).
func (w *watcher) noteRestoredDelete(claimed string) {
	uid, name, _ := strings.Cut(claimed, ":")
	n, err := spool.ParseName(name)
	owner, uerr := strconv.Atoi(uid)
	if err != nil || uerr != nil || n.Verb != spool.VerbDelete {
		return
	}
	n.Owner = owner
	w.restoredDeletes[n.Key()] = n
}

// restoreClaim puts claimed control request name (the file taken, in
// claims/) back in the spool, to be taken again. A request of the same
// name there is taken instead if it is of the same owner (a newer one);
// if it is another's, the claimed one is rejected, with the reason, and
// answered to its owner: never lost, nor put over another's. It reports
// whether it put the request back; if it rejected it, it returns the
// answer to give, once the request's removal from claims/ is durable (see
// syncRestored).
func (w *watcher) restoreClaim(taken, name string) (putBack bool, answer func()) {
	if _, selector := spool.ParseSelectorName(name); !selector {
		if n, err := spool.ParseName(name); err != nil || n.Verb == spool.VerbStart {
			return false, nil
		}
	}
	dst := filepath.Join(w.spool.Spool(), name)
	err := unix.Renameat2(unix.AT_FDCWD, taken, unix.AT_FDCWD, dst, unix.RENAME_NOREPLACE)
	if err == nil {
		w.log.Printf("recover: %s was claimed but maybe not carried out: taking it again", name)
		return true, nil
	}
	var mine, there unix.Stat_t
	if unix.Lstat(taken, &mine) != nil {
		return false, nil
	}
	if errors.Is(err, unix.EEXIST) && unix.Lstat(dst, &there) == nil && there.Uid == mine.Uid {
		w.removeClaim(taken) // a newer request of the same name, its owner's: it will do
		return false, nil
	}
	reason := fmt.Sprintf("claimed before the watcher stopped, and not to be put back in the spool (%v): send it again", err)
	if errors.Is(err, unix.EEXIST) {
		reason = "claimed before the watcher stopped; another user's file has its name in the spool now: send it again under another tag"
	}
	n, _ := spool.ParseName(name)
	if sn, ok := spool.ParseSelectorName(name); ok {
		n = sn
	}
	n.Owner = int(mine.Uid)
	switch dst, err := w.spool.RejectFrom(taken, name, reason); {
	case dst == "":
		w.log.Printf("recover: %s: %v", name, err)
		return false, nil
	case err != nil: // moved, but not synced: answered all the same
		w.syncFailed(fmt.Errorf("recover: %s: %w", name, err))
	}
	w.log.Printf("recover: %s: rejected: %s", name, reason)
	return false, func() { w.outcome(n, spool.Rejected, reason) }
}

// restoreLegacyClaims puts back the control requests a watcher before
// claims/ claimed in the spool, as .<name>.taken.
func (w *watcher) restoreLegacyClaims() {
	names, err := filepath.Glob(filepath.Join(w.spool.Spool(), ".*.taken"))
	if err != nil {
		return
	}
	for _, taken := range names {
		name := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(taken), "."), ".taken")
		if _, selector := spool.ParseSelectorName(name); !selector {
			if n, err := spool.ParseName(name); err != nil || n.Verb == spool.VerbStart {
				continue
			}
		}
		dst := filepath.Join(w.spool.Spool(), name)
		if err := unix.Renameat2(unix.AT_FDCWD, taken, unix.AT_FDCWD, dst, unix.RENAME_NOREPLACE); err != nil {
			// A newer request of the same name waits: it will do.
			if err := spool.RemoveRequest(taken, dst); err != nil && !errors.Is(err, fs.ErrNotExist) {
				w.log.Printf("%v", err)
			}
			continue
		}
		w.log.Printf("recover: %s was claimed but maybe not carried out: taking it again", name)
	}
	chosen, _ := filepath.Glob(filepath.Join(w.spool.Spool(), ".*.chosen"))
	for _, path := range chosen { // a legacy selector's, by a watcher before claims/
		name := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(path), "."), ".chosen")
		fi, err := os.Lstat(path)
		if err != nil || fi.Sys().(*syscall.Stat_t).Uid != uint32(os.Geteuid()) {
			continue // not the watcher's: not to touch
		}
		if _, err := os.Lstat(filepath.Join(w.spool.Spool(), name)); errors.Is(err, fs.ErrNotExist) {
			os.Remove(path) // its request was answered
		}
	}
}

// gcEvery is how often the watcher deletes the finished runs its limits do
// not keep.
const gcEvery = 10 * time.Minute

// collectGarbage deletes the finished runs beyond the retention, now and
// every gcEvery; none while the history holds (see historyHeld): a run
// gone from runs/ shows its deletion before its line is stored.
func (w *watcher) collectGarbage() {
	runs, _ := w.store.List()
	byID := make(map[string]*tracker.State, len(runs))
	for _, st := range runs {
		byID[st.ID] = st
	}
	for _, id := range config.Expired(runs, w.settings, time.Now()) {
		if w.historyHeld() {
			break // a deletion shows before its line: at the next round
		}
		if w.runs[id] != nil || w.queued(id) != nil {
			continue
		}
		if err := w.deleteRun(byID[id], "deleted by retention", ""); err != nil {
			w.log.Printf("gc: %v", err)
		}
	}
	w.sweepTaggedOutcomes(time.Now().Add(-keepTaggedOutcomes))
	if keep := w.settings.KeepFinishedFor; keep > 0 {
		cutoff := time.Now().Add(-keep)
		if n, err := tracker.ExpireRejected(w.spool.Root, cutoff, false); err != nil {
			w.log.Printf("gc: rejected/: %v", err)
		} else if n > 0 {
			w.log.Printf("gc: removed %d rejected requests, with their reasons, refused over %v ago", n, keep)
		}
		w.sweepRunlessOutcomes(cutoff)
	}
	w.after(gcEvery, w.collectGarbage)
}

// sweepRunlessOutcomes removes the untagged answers written before
// cutoff whose ID names no run: those of start requests that were
// rejected, and of control requests of runs that never were, or were
// deleted since. They are kept as long as a finished run's record is
// (keep_finished_for) (a run's deletion removes its own). The watcher
// does it between its answers; tend gc does it too, beside it, checking
// that what it removes is the very answer it judged old, not one the
// watcher wrote again since (tracker.ExpireOutcomes).
func (w *watcher) sweepRunlessOutcomes(cutoff time.Time) {
	sweepAnswers(w.spool.Outcomes(), cutoff, true, w.runless)
}

// runless reports whether an answer named name, of no tag, answers a
// request of a run that is not there: neither live, queued, nor in runs/.
func (w *watcher) runless(name string) bool {
	n, err := spool.ParseName(name)
	if err != nil || n.Tag != "" || w.runs[n.ID] != nil || w.queued(n.ID) != nil {
		return false
	}
	_, err = os.Lstat(w.store.RunDir(n.ID))
	return errors.Is(err, fs.ErrNotExist) // a run's (or cannot tell): its deletion removes it
}

// sweepAnswers removes the answers in dir (and, with users, in the
// directories of users' answers there, outcomes/<uid>/: see
// spool.Dir.OutcomesOf, which the watcher alone writes) written before
// cutoff whose names may go says may go. Only regular files are answers.
func sweepAnswers(dir string, cutoff time.Time, users bool, mayGo func(name string) bool) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if users && e.IsDir() {
			if uid, err := strconv.Atoi(e.Name()); err == nil && uid > 0 {
				sweepAnswers(filepath.Join(dir, e.Name()), cutoff, false, mayGo)
			}
			continue
		}
		if !e.Type().IsRegular() || !mayGo(e.Name()) {
			continue
		}
		if fi, err := e.Info(); err == nil && fi.ModTime().Before(cutoff) {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// keepTaggedOutcomes is how long the answer to a tagged request is kept
// for its client, which removes it once read, where it may (tend gc keeps
// it as long: tracker.ExpireOutcomes).
const keepTaggedOutcomes = tracker.KeepTaggedAnswers

// sweepTaggedOutcomes removes the answers to tagged requests written
// before cutoff: a client that may not remove them (in a shared root,
// outcomes/ is the watcher's) or that died before it did leaves them, and
// their names are used once.
func (w *watcher) sweepTaggedOutcomes(cutoff time.Time) {
	sweepAnswers(w.spool.Outcomes(), cutoff, true, tagged)
}

// tagged reports whether an answer named name answers a tagged request,
// or a selector (tagged too, read by its client alone), as tend gc judges
// it.
func tagged(name string) bool { return tracker.TaggedAnswer(name) }
