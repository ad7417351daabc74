package watcher

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"

	"golang.org/x/sys/unix"
)

// Runs that wait: a start request may name runs it waits for (after, each
// with a condition) and a time before which it does not start
// (not_before). Such a run is queued, its reason naming what it waits
// for, and starts, under the usual limits and in its turn, once every
// condition holds. If one no longer can (the run it waits to complete
// failed, was canceled or deleted), it ends canceled without starting,
// and the runs that wait for it follow in the same way.

// waitReason says what run st waits for, for its record's reason; "" if
// it waits for nothing.
//
// It is made for every waiting run at every turn of the queue (see
// stillWaits), of up to spool.MaxDeps runs each: in one buffer.
func waitReason(st *tracker.State) string {
	var b strings.Builder
	for _, name := range st.After {
		d, err := spool.ParseDep(name)
		if err != nil {
			continue
		}
		if b.Len() == 0 {
			b.Grow(len(st.After) * (len(name) + 16))
			b.WriteString("waiting for ")
		} else {
			b.WriteString(", ")
		}
		b.WriteString(d.ID)
		switch d.When {
		case spool.Completed:
			b.WriteString(" to complete")
		case spool.Ended:
			b.WriteString(" to end")
		case spool.Ready:
			b.WriteString(" to be ready")
		}
	}
	if st.NotBefore != nil {
		if b.Len() > 0 {
			b.WriteString("; ")
		}
		b.WriteString("not before " + st.NotBefore.Format(time.RFC3339))
	}
	return b.String()
}

// checkDeps says why run id may not wait for deps: one that is no run
// (a dependency must exist when the request is taken, unless the run,
// queued, already waited for it: had), itself, or one that waits for it,
// directly or not.
func (w *watcher) checkDeps(id string, deps, had []spool.Dep) error {
	// One walk for all of deps: a run the walk from one of them went
	// through leads to id from none (it is the same queue). A walk anew
	// from each went through the same runs again and again: a member's
	// queued runs, each waiting for the hundreds before it (up to
	// spool.MaxDeps), cost the watcher's loop the cube of their number
	// (400 runs: two minutes in which it took no other request).
	seen := make(map[string]bool)
	for _, d := range deps {
		if d.ID == id {
			return fmt.Errorf(`"after": run %s cannot wait for itself`, id)
		}
		// A run a queued run already waited for may have ended and been
		// deleted since (it counts as it ended): only a new one must exist.
		if !slices.ContainsFunc(had, func(h spool.Dep) bool { return h.ID == d.ID }) && w.queued(d.ID) == nil && !w.startWaiting(d.ID) {
			// A start request in the spool, not taken yet, counts: a client
			// that drops a run and what waits for it at once has both taken,
			// in whichever order.
			if _, err := w.lookup(d.ID); errors.Is(err, tracker.ErrNotFound) {
				return fmt.Errorf(`"after": no run %s (a run waits only for runs that exist, or whose start request waits in the spool, when it is taken)`, d.ID)
			}
		}
		if path := w.waitPath(d.ID, id, seen); path != nil {
			return fmt.Errorf(`"after": run %s would wait for itself: %s`, id, strings.Join(append([]string{id}, path...), " waits for "))
		}
	}
	return nil
}

// waitPath returns the queued runs through which run from waits for run
// to (from first, to last), or nil if it does not.
func (w *watcher) waitPath(from, to string, seen map[string]bool) []string {
	if from == to {
		return []string{to}
	}
	q := w.queued(from)
	if q == nil {
		return nil
	}
	if seen == nil {
		seen = make(map[string]bool)
	}
	if seen[from] {
		return nil
	}
	seen[from] = true
	for _, name := range q.st.After {
		if d, err := spool.ParseDep(name); err == nil {
			if path := w.waitPath(d.ID, to, seen); path != nil {
				return append([]string{from}, path...)
			}
		}
	}
	return nil
}

// conditions says what queued run st still waits for now (waits), or why
// it never will start (never): both "" once every condition holds.
// unread reports that what it waits for is a file the watcher cannot
// read (a record, or the history): an operator must mend it.
func (w *watcher) conditions(st *tracker.State, now time.Time) (waits, never string, unread bool) {
	for _, name := range st.After {
		d, err := spool.ParseDep(name)
		if err != nil {
			return "", fmt.Sprintf("it waits for %q, which names no run", name), false
		}
		since := waitingSince(st, d.ID)
		var dep *tracker.State
		if e, ok := w.ended[d.ID]; ok {
			dep = &tracker.State{ID: d.ID, State: e.state, Reason: e.reason, CreatedAt: e.createdAt}
		} else if dep, err = w.lookup(d.ID); err == nil && tracker.Final(dep.State) {
			// An end is for good: read from its record once, not at every
			// turn of the queue (a fan-in waits for hundreds).
			w.ended[d.ID] = endedRun{dep.State, dep.Reason, dep.CreatedAt}
		}
		if err == nil && dep.CreatedAt.After(since) {
			// A run made after this one began to wait may be another than
			// the one it waits for: the one it waited for deleted since,
			// and its ID used again (by its owner, or by another user).
			// That one's end is the one that counts.
			del, ok, err := w.deletionBetween(d.ID, since, dep.CreatedAt)
			if err != nil {
				return heldByHistory(d.ID, err), "", true
			}
			if ok {
				if never := judgeDeleted(d, del); never != "" {
					return "", never, false
				}
				continue
			}
		}
		if errors.Is(err, tracker.ErrNotFound) && w.startWaiting(d.ID) {
			// Its start request is not taken yet; unless the run it
			// waited for was deleted since, and this is another's.
			del, ok, err := w.deletionBetween(d.ID, since, now)
			if err != nil {
				return heldByHistory(d.ID, err), "", true
			}
			if !ok {
				return d.String(), "", false
			}
			if never := judgeDeleted(d, del); never != "" {
				return "", never, false
			}
			continue
		}
		if errors.Is(err, tracker.ErrNotFound) {
			// Deleted: only finished runs are, and the history says how it
			// ended. Or it never was, whatever the condition: its request
			// was rejected, or a power loss took back its first record.
			// A run of the same ID deleted before this one began to wait
			// is not the one it waits for: that was a start request in
			// the spool (checkDeps), rejected or removed since.
			del, ok, err := w.endedAs(d.ID)
			if err != nil {
				// Not read is not "never was": it waits for the history
				// to be mended (tend fsck), as it would for a record.
				return heldByHistory(d.ID, err), "", true
			}
			if !ok || del.at.Before(since) {
				return "", fmt.Sprintf("run %s, which it waited for, never was: its start request was rejected or removed", d.ID), false
			}
			if never := judgeDeleted(d, del); never != "" {
				return "", never, false
			}
			continue
		}
		if err != nil {
			return fmt.Sprintf("%s (its record cannot be read: %v)", d.ID, err), "", true
		}
		switch ended := tracker.Final(dep.State); {
		case d.When == spool.Ended && ended:
		case d.When == spool.Completed && dep.State == tracker.Completed:
		case d.When == spool.Ready && ready(dep):
		case ended:
			how := string(dep.State)
			if dep.Reason != "" && dep.State != tracker.Canceled {
				how += ": " + dep.Reason // a cancel's reason is its own chain
			}
			if d.When == spool.Ready {
				return "", fmt.Sprintf("run %s, which it waited to be ready, ended %s", d.ID, how), false
			}
			return "", fmt.Sprintf("run %s, which it waited to complete, ended %s", d.ID, how), false
		default:
			return d.String(), "", false
		}
	}
	if st.NotBefore != nil && now.Before(*st.NotBefore) {
		return "not before " + st.NotBefore.Format(time.RFC3339), "", false
	}
	return "", "", false
}

// heldByHistory is what a run waits for while the history that tells
// whether run id's end counts for it cannot be read.
func heldByHistory(id string, err error) string {
	return fmt.Sprintf("%s (how it ended cannot be read from the history: %v)", id, err)
}

// waitingSince returns when queued run st began to wait for run id: when
// it was made, or when the edit that added id was taken.
func waitingSince(st *tracker.State, id string) time.Time {
	if at, ok := st.AfterSince[id]; ok {
		return at
	}
	return st.CreatedAt
}

// judgeDeleted says why dependency d will never hold ("" if it holds)
// of a run deleted as del says: a deleted run had ended.
func judgeDeleted(d spool.Dep, del deletion) (never string) {
	if d.When == spool.Ended || (del.state == tracker.Completed && d.When == spool.Completed) {
		return ""
	}
	return fmt.Sprintf("run %s, which it waited for, was deleted before it %s", d.ID, map[spool.Condition]string{spool.Completed: "completed", spool.Ready: "was ready"}[d.When])
}

// deletionBetween returns the first deletion of a run of id from from
// on, and before to: that of the run a run made at from waited for, if
// a run made at to has its ID now. Deletions this watcher made while a
// run waited are noted as they are made (deleteRun); those made before
// it started, for a run that waited then, are read from the history,
// once an ID.
func (w *watcher) deletionBetween(id string, from, to time.Time) (deletion, bool, error) {
	dels := w.waitedDeletions[id]
	if from.Before(w.startedAt) || w.startedAt.IsZero() {
		if _, read := w.histDeletions[id]; !read {
			idx, err := w.history(id)
			if err != nil {
				return deletion{}, false, err // not "none": it waits until the history is mended
			}
			w.histDeletions[id], _ = idx.deletions(id)
		}
		dels = slices.Concat(w.histDeletions[id], dels)
	}
	for _, del := range dels {
		if !del.at.Before(from) && del.at.Before(to) {
			return del, true, nil
		}
	}
	return deletion{}, false, nil
}

// ready reports whether run st is ready: running, and its health check
// passed or its ready file is there if it waits for either.
func ready(st *tracker.State) bool {
	return st.State == tracker.Running && (st.ReadyAt != nil || !waitsForReady(st))
}

// waits reports whether run st has conditions to wait for: runs, or a
// start time.
func waits(st *tracker.State) bool { return len(st.After) > 0 || st.NotBefore != nil }

// waitedOn reports whether a queued run waits for run id. It is asked
// at every save of every run: a look in an index (waitedBy), not a walk
// of every queued run's waits (a queue of a thousand runs, each waiting
// for hundreds, took 18 ms a save).
func (w *watcher) waitedOn(id string) bool { return w.waitedBy[id] > 0 }

// countWaits adds by to the count in waitedBy of each run queued run st
// waits for: 1 as it joins the queue or takes new waits, -1 as it
// leaves or drops them. A name counts for the ID before its ':' (an ID
// has none), as a name that does not parse would have matched.
func (w *watcher) countWaits(st *tracker.State, by int) {
	if len(st.After) > 0 && w.waitedBy == nil {
		w.waitedBy = make(map[string]int)
	}
	for _, name := range st.After {
		id, _, _ := strings.Cut(name, ":")
		if w.waitedBy[id] += by; w.waitedBy[id] <= 0 {
			delete(w.waitedBy, id)
		}
	}
}

// waitedChanged counts a change of a run that queued runs wait for (a
// save of its record, its deletion, its start request decided), and has
// them started if they may.
func (w *watcher) waitedChanged() {
	w.waitedChanges++
	w.startSoon()
}

// A notedWait is what a waiting run's reason was last made of: the count
// of changes of waited runs then, and what conditions said then.
type notedWait struct {
	changes     uint64
	waits       string
	unread, set bool
	reason      string // the reason it then had
}

// A conditionsSaid is what conditions said of a queued run, and the
// count of changes of waited runs then.
type conditionsSaid struct {
	changes uint64
	waits   string
	never   string
	set     bool
}

// queuedConditions is conditions for queued run q, as they said at the
// last turn of the queue if no run it may wait for changed since (see
// waitedChanged), it waits for no time, and what they said did not come
// of a file the watcher cannot read (which an operator mends, with no
// change of the watcher's). Twice a turn (settleWaits, then
// startQueuedRuns), for every waiting run, they looked at each of its
// waits up to the first that does not hold: a thousand runs each
// waiting for a thousand others, all ended but one, cost 250 ms a turn,
// whatever the turn was for (a request taken, a run none waits for
// ending).
func (w *watcher) queuedConditions(q *queuedRun, now time.Time) (waits, never string, unread bool) {
	if s := q.said; s.set && s.changes == w.waitedChanges && q.st.NotBefore == nil {
		return s.waits, s.never, false
	}
	waits, never, unread = w.conditions(q.st, now)
	q.said = conditionsSaid{w.waitedChanges, waits, never, !unread}
	return waits, never, unread
}

// settleWaits ends the queued runs whose conditions can no longer hold,
// canceled, in queue order (the runs that wait for them follow), and arms
// the timers of those that wait for a time. It reports whether any ended.
func (w *watcher) settleWaits(now time.Time) bool {
	ended := false
	for {
		again := false
		for _, q := range slices.Clone(w.queue) {
			if !waits(q.st) || w.queued(q.st.ID) != q {
				continue
			}
			waits, never, unread := w.queuedConditions(q, now)
			if never != "" {
				w.keepRequest(q)
				w.endQueued(q, tracker.Canceled, never+"; it never started")
				ended, again = true, true
				continue
			}
			// Its reason names what it still waits for, made again only
			// when a run it may wait for changed since it was last made,
			// or what conditions says did, or it waits for a time: at
			// every turn, it cost a look at every one of its waits, for
			// every waiting run, whatever the turn was for (a thousand
			// queued runs waiting for up to a thousand others each: 48
			// ms a turn).
			noted := notedWait{w.waitedChanges, waits, unread, true, q.st.Reason}
			if q.noted != noted || q.st.NotBefore != nil {
				reason, ok := w.stillWaits(q.st, now)
				if !ok {
					reason, _, _ = strings.Cut(q.st.Reason, heldUp)
				}
				w.noteHeldUp(q.st, reason, waits, unread)
				q.noted = notedWait{w.waitedChanges, waits, unread, true, q.st.Reason}
			}
			if waits != "" && q.st.NotBefore != nil && now.Before(*q.st.NotBefore) && q.at == nil {
				q.at = w.after(time.Until(*q.st.NotBefore), func() {
					q.at = nil
					w.dequeue()
				})
			}
		}
		if !again {
			return ended
		}
	}
}

// heldUp ends a waiting run's reason with what keeps the watcher from
// telling whether it may start (see noteHeldUp).
const heldUp = "; held up: "

// stillWaits says what waiting run st still waits for now, for its
// reason: waitReason of the conditions that do not hold yet (a run whose
// end it waited for, ended, is no longer named). ok is false while its
// reason is another (an edit's), which it keeps.
func (w *watcher) stillWaits(st *tracker.State, now time.Time) (reason string, ok bool) {
	reason, _, _ = strings.Cut(st.Reason, heldUp)
	if !strings.HasPrefix(reason, "waiting for ") && !strings.HasPrefix(reason, "not before ") {
		return "", false
	}
	left := *st
	left.After = make([]string, 0, len(st.After))
	for _, name := range st.After {
		if w.runningFor(name) {
			left.After = append(left.After, name) // the common case, and cheap
			continue
		}
		one := *st
		one.After, one.NotBefore = []string{name}, nil
		if waits, never, _ := w.conditions(&one, now); waits != "" || never != "" {
			left.After = append(left.After, name)
		}
	}
	if st.NotBefore != nil && !now.Before(*st.NotBefore) {
		left.NotBefore = nil
	}
	return waitReason(&left), true
}

// runningFor reports whether dependency name (of a run's After) names a
// run that has not ended, whose end it waits for: a map lookup, where
// conditions, for each of a fan-in's hundreds at every turn of the
// queue, would cost more. (A run of that ID made after the waiting one
// began to wait, the one it waited for deleted since, is taken for it
// here: its reason says so until conditions, which decides, has it
// start or end.)
func (w *watcher) runningFor(name string) bool {
	d, err := spool.ParseDep(name)
	if err != nil || d.When == spool.Ready {
		return false
	}
	if _, ended := w.ended[d.ID]; ended {
		return false
	}
	if r := w.runs[d.ID]; r != nil {
		return !tracker.Final(r.st.State)
	}
	return w.queued(d.ID) != nil
}

// noteHeldUp has queued run st's reason be reason (what it still waits
// for: see stillWaits), and while what it
// waits for, as conditions says (waits), cannot be read (unread), say so:
// a record or the history the watcher cannot read (an operator must mend
// it), not the run it waits for, is what it waits for then. Saved only
// when that changes.
func (w *watcher) noteHeldUp(st *tracker.State, reason, waits string, unread bool) {
	if unread {
		reason += heldUp + waits
	}
	if reason != st.Reason {
		st.Reason = reason
		w.save(st)
	}
}

// startSoon has queued runs started once a change they may wait for (a
// run ending, becoming ready, being deleted; a slot freeing) is saved.
// Inside a batch, before its flush: a run started then passes its gate
// once the same round of fsyncs has written the change and its own
// record, so a dependent starts one commit after its dependency's end,
// not two (its gate also waits for the records of the runs it waited
// for: see gateWaitsFor). Outside one, on the loop at once after.
func (w *watcher) startSoon() {
	if w.batch.active {
		w.startDue = true
		return
	}
	if w.dequeueDue {
		return
	}
	w.dequeueDue = true
	w.after(0, func() {
		w.dequeueDue = false
		w.dequeue()
	})
}

// startHeld starts what startSoon held for the end of the batch; a run
// started may be one that others wait for, so it goes on until nothing
// more is due.
func (w *watcher) startHeld() {
	for w.startDue {
		w.startDue = false
		w.dequeue()
	}
}

// gateWaitsFor returns the runs whose records run st's gate waits for,
// beside its own: those it waited for, whose ends may be written in the
// flush that starts it.
func gateWaitsFor(st *tracker.State) []string {
	var ids []string
	for _, name := range st.After {
		if d, err := spool.ParseDep(name); err == nil {
			ids = append(ids, d.ID)
		}
	}
	return ids
}

// endedAs returns how run id ended and when it was deleted, the last time
// it was: a run that waits for a run that completed and was deleted since
// may still start. The watcher notes it when it deletes a run; one an
// earlier watcher deleted is looked up in the history, once.
func (w *watcher) endedAs(id string) (deletion, bool, error) {
	if del, ok := w.deletedAs[id]; ok {
		return del, del.state != "", nil
	}
	idx, err := w.history(id)
	if err != nil {
		return deletion{}, false, err // asked again at the queue's next turn
	}
	// The last deletion of a run of id, unless a run of id came after it
	// (whose record is gone undeleted: a power loss took back its first).
	var del deletion
	if dels, usedSince := idx.deletions(id); !usedSince && len(dels) > 0 {
		del = dels[len(dels)-1]
	}
	w.deletedAs[id] = del
	return del, del.state != "", nil
}

// history returns what the whole history says of deleted runs, for what
// a run waiting for run id needs to know of it: it is scanned, never held
// (a root's history is never deleted, and may be gigabytes), and what is
// kept is of the runs asked about alone: id, and every run a queued run
// waits for (see waitedFor), not of every run the history names. It fails closed, as the history does: a bad line
// is an error, logged once, that holds the run up until it is mended,
// and is kept while the history is the same files (see historyFault),
// not read again at each turn of the queue.
//
// What it read is kept until the loop's next turn, for the other IDs
// this one needs it for: a watcher that starts with hundreds of runs
// waiting for runs deleted before it parses a large history once, not
// once each.
func (w *watcher) history(id string) (deletionIndex, error) {
	files := historyFiles(w.cfg.Root)
	version := historyVersion(w.cfg.Root) // before the read: a line appended meanwhile is read again
	if _, asked := w.turnHistory.index[id]; asked && version != "" && w.turnHistory.version == version {
		return w.turnHistory.index, nil
	}
	if err := w.unreadHistory.still(files); err != nil {
		w.retryHistory() // a fault noted anew since the last retry was armed
		return nil, err
	}
	index, err := indexDeletions(w.cfg.Root, w.waitedFor(id))
	w.historyReads++
	if err != nil {
		if w.unreadHistory.err == nil || err.Error() != w.unreadHistory.err.Error() {
			w.log.Printf("run %s, waited for: the history cannot be read: %v; what waits for it waits until the history is mended (tend fsck --repair)", id, err)
		}
		w.unreadHistory = historyFault{err: err, files: files, at: time.Now()}
		w.retryHistory()
		return nil, err
	}
	w.unreadHistory.err = nil
	if w.turnHistory.version == "" {
		w.after(0, func() { w.turnHistory = readHistory{} })
	}
	w.turnHistory = readHistory{version: version, index: index}
	return index, nil
}

// waitedFor returns id and the IDs of the runs that the queued runs, and
// those recovery has yet to decide, wait for: the runs whose deletions
// the watcher may ask the history about in this turn.
func (w *watcher) waitedFor(id string) map[string]bool {
	ids := map[string]bool{id: true}
	add := func(st *tracker.State) {
		for _, name := range st.After {
			if d, err := spool.ParseDep(name); err == nil {
				ids[d.ID] = true
			}
		}
	}
	for _, q := range w.queue {
		add(q.st)
	}
	for _, u := range w.undecided {
		add(u.st)
	}
	return ids
}

// A readHistory is what the history said of deleted runs as it was read,
// and the version of its files it was read from (see historyVersion).
type readHistory struct {
	version string
	index   deletionIndex
}

// A deletionIndex holds, for each run ID asked about (and only those),
// what deletionsIn would find in the history for it.
type deletionIndex map[string]*idDeletions

type idDeletions struct {
	dels      []deletion
	usedSince bool
	last      tracker.StateName // the last state of a run of the ID, while the index is made
}

// deletions returns what deletionsIn returns for id from the history
// the index was made of; nothing for an ID not asked about.
func (idx deletionIndex) deletions(id string) ([]deletion, bool) {
	if d := idx[id]; d != nil {
		return d.dels, d.usedSince
	}
	return nil, false
}

// indexDeletions scans root's history (failing closed, as
// tracker.ScanHistory does) into a deletionIndex of the IDs in ids, by
// deletionsIn's rule. It keeps nothing of the other runs the history
// names: what it holds grows with the IDs asked about, not with the
// runs the root ever had.
func indexDeletions(root string, ids map[string]bool) (deletionIndex, error) {
	idx := make(deletionIndex, len(ids))
	for id := range ids {
		idx[id] = &idDeletions{}
	}
	err := tracker.ScanHistory(root, func(e tracker.Event) error {
		d := idx[e.ID]
		switch {
		case d == nil:
		case e.State != tracker.Deleted:
			d.last, d.usedSince = internState(e.State), true
		default:
			if d.last != "" {
				d.dels = append(d.dels, deletion{d.last, e.Time})
			}
			d.last, d.usedSince = "", false
		}
		return nil
	})
	return idx, err
}

// internState returns the package's own string for a state a history
// line named, so that a million of them share it.
func internState(s tracker.StateName) tracker.StateName {
	for _, k := range []tracker.StateName{tracker.Completed, tracker.Failed, tracker.Canceled, tracker.TimedOut,
		tracker.Running, tracker.Starting, tracker.Queued, tracker.Stopping, tracker.Backoff, tracker.Paused} {
		if s == k {
			return k
		}
	}
	return s
}

// historyVersion tells apart the contents of root's history files: a
// file replaced, or a line appended, by this watcher or any other writer,
// changes it, as a file mended in place does (its size, or its times;
// ctime too, which no writer can set back).
func historyVersion(root string) string {
	var b strings.Builder
	for _, path := range tracker.HistoryFiles(root) {
		var st unix.Stat_t
		if unix.Lstat(path, &st) == nil {
			fmt.Fprintf(&b, "%s:%d:%d:%d:%d.%d:%d.%d;", path, st.Dev, st.Ino, st.Size, st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec)
		}
	}
	return b.String()
}

// retryHistory has the queue turn again once a history found bad may be
// read again: a quiet root has no other turn to find it mended in place.
func (w *watcher) retryHistory() {
	if w.historyRetryDue {
		return
	}
	w.historyRetryDue = true
	w.after(max(historyRetry-time.Since(w.unreadHistory.at), 0), func() {
		w.historyRetryDue = false
		w.dequeue()
	})
}

// A historyFault is why the history could not be read, and which files
// it was read from. Read again while they are the same files, it would
// fail the same way: the watcher only appends to them, and tend fsck
// --repair replaces a file it mends. One mended in place is read again
// after historyRetry.
type historyFault struct {
	err   error
	files string // see historyFiles
	at    time.Time
}

// historyRetry is how long a historyFault holds for files that seem the
// same.
const historyRetry = 10 * time.Second

// still returns the fault's error if the history is still made of
// files, and it is recent; nil if the history is to be read again.
func (f historyFault) still(files string) error {
	if f.err == nil || f.files != files || time.Since(f.at) >= historyRetry {
		return nil
	}
	return f.err
}

// historyFiles names the history files of root by their inodes: another
// name, another file, or a file replaced, is another history.
func historyFiles(root string) string {
	var b strings.Builder
	for _, path := range tracker.HistoryFiles(root) {
		var st unix.Stat_t
		if unix.Lstat(path, &st) == nil {
			fmt.Fprintf(&b, "%s:%d:%d;", path, st.Dev, st.Ino)
		}
	}
	return b.String()
}

// A deletion is how a deleted run ended (state), and when it was deleted:
// a zero one says no run of its ID was, since its last use.
type deletion struct {
	state tracker.StateName
	at    time.Time
}

// deletionsIn returns the deletions of runs of id that events (a
// history, oldest first) hold, each with how its run ended, and whether
// a run of id came after the last of them.
func deletionsIn(events []tracker.Event, id string) (dels []deletion, usedSince bool) {
	var last tracker.StateName
	for _, e := range events {
		switch {
		case e.ID != id:
		case e.State == tracker.Deleted:
			if last != "" {
				dels = append(dels, deletion{last, e.Time})
			}
			last, usedSince = "", false
		default:
			last, usedSince = e.State, true
		}
	}
	return dels, usedSince
}

// An endedRun is how a run that others wait for ended: noted when its end
// is saved, so that a run waiting for many does not read each one's record
// again at each turn of the queue.
type endedRun struct {
	state     tracker.StateName
	reason    string
	createdAt time.Time
}
