package watcher

import (
	"errors"
	"slices"

	"github.com/tendhq/tend/tracker"
)

// A batch holds back the record writes of changes that come together (the
// exits drain finds in one pass, the requests of the spool events queued
// at once) to write them at once: their history events in one append,
// their records with one round of fsyncs (Store.WriteAll). What must
// follow the records (a launched run's gate, a stopped run's SIGTERM, an
// outcome, the reaping of a leader, starting queued runs in its slot)
// waits in gates and after, and runs once they are written, in order, the
// gates first; what names a run whose record could not be written waits
// on until it is (see afterRecorded).
type batch struct {
	active bool
	states []*tracker.State // in the order of their first save in the batch
	events []tracker.Event
	gates  []waiter
	after  []waiter
}

// A waiter is what must wait for run id's record to be durable (or for
// the flush only, if id is empty).
type waiter struct {
	id string
	f  func()
}

// batched runs f with the records it saves held back, then writes them.
// Inside another batch, f's saves join that one.
func (w *watcher) batched(f func()) {
	if w.batch.active {
		f()
		return
	}
	w.batch.active = true
	defer func() {
		w.settleSpawns() // their records join the batch
		w.batch.active = false
		w.flush()
	}()
	f()
}

// afterSaved runs f once the records saved so far have been written, or
// have failed to be (see afterRecorded): at once outside a batch, after its
// flush inside one.
func (w *watcher) afterSaved(f func()) { w.afterRecorded("", f) }

// afterRecorded runs f as afterSaved does, but only once run id's record
// is on disk: if it could not be written (a full disk), f waits until it
// is, retried every second (see whenWritten).
func (w *watcher) afterRecorded(id string, f func()) {
	if w.batch.active {
		w.batch.after = append(w.batch.after, waiter{id, f})
		return
	}
	w.whenWritten(id, f)
}

// whenWritten runs f now, or, if run id's record is one that could not be
// written, once it is. So a run does not pass its gate nor lose its
// unreaped leader, and a request about it is not answered nor its claimed
// file removed, before the record that says so is on disk; a watcher that
// dies meanwhile leaves the next one what it needs. Only that run's wait:
// a record that cannot be written (its directory made immutable) holds up
// no other run.
func (w *watcher) whenWritten(id string, f func()) {
	if _, unwritten := w.unsaved.states[id]; unwritten {
		w.unsaved.waiting[id] = append(w.unsaved.waiting[id], f)
		return
	}
	f()
}

// gateAfterRecorded opens run id's gate (open) as afterRecorded would, but
// before whatever else waits for the same flush: the run waits on it, and
// the outcomes (a file each) are written while it starts.
func (w *watcher) gateAfterRecorded(id string, open func()) {
	if w.batch.active {
		w.batch.gates = append(w.batch.gates, waiter{id, open})
		return
	}
	w.whenWritten(id, open)
}

// hold takes a save into the batch.
func (w *watcher) hold(st *tracker.State, events []tracker.Event) {
	w.batch.events = append(w.batch.events, events...)
	if !slices.Contains(w.batch.states, st) {
		w.batch.states = append(w.batch.states, st)
	}
}

// held reports whether st has a save held back, so that its file is
// behind on purpose.
func (w *watcher) held(st *tracker.State) bool {
	return slices.Contains(w.batch.states, st)
}

// flush writes what the batch holds, then runs what waited for it, with
// saves written at once meanwhile.
func (w *watcher) flush() {
	w.settleSpawns()
	b := w.batch
	w.batch = batch{}
	defer func() { w.batch.active = b.active }()
	w.appendHistory(b.events)
	for i, err := range w.store.WriteAll(b.states) {
		w.recorded(b.states[i], err)
	}
	w.retryUnsaved()
	for _, a := range slices.Concat(b.gates, b.after) {
		w.whenWritten(a.id, a.f)
	}
}

// flushEvery is how many records a batch of requests holds before it
// writes them: enough for the disk to sync them together, few enough that
// the first runs pass their gates, or get their signals, while the loop
// takes the next requests.
const flushEvery = 32

// flushIfFull writes what the batch holds once it holds flushEvery
// records (counting those of the runs being forked), and goes on holding.
func (w *watcher) flushIfFull() {
	if len(w.batch.states)+len(w.spawning) >= flushEvery {
		w.flush()
	}
}

// heldState returns the record of run id whose save is held back, if
// there is one: newer than the file on disk.
func (w *watcher) heldState(id string) *tracker.State {
	for _, st := range w.batch.states {
		if st.ID == id {
			return st
		}
	}
	return nil
}

// appendHistory appends events to the history, or keeps them to retry.
func (w *watcher) appendHistory(events []tracker.Event) {
	if len(events) == 0 {
		return
	}
	if len(w.unsaved.events) > 0 {
		w.unsaved.events = append(w.unsaved.events, events...) // keep the history in order
	} else if err := w.hist.Append(events...); errors.Is(err, tracker.ErrTornEnd) {
		w.log.Printf("run %s: history: %v", events[len(events)-1].ID, err) // kept on disk, in order
	} else if err != nil {
		w.log.Printf("run %s: history: %v (retrying)", events[len(events)-1].ID, err)
		w.unsaved.events = append(w.unsaved.events, events...)
	}
}

// recorded notes the result of writing st's record.
func (w *watcher) recorded(st *tracker.State, err error) {
	if err != nil {
		w.log.Printf("run %s: recording %s: %v (retrying; the last record written stays as it was)", st.ID, st.State, err)
		w.unsaved.states[st.ID] = st
		if w.giveUpGone(st) { // counts the try
			w.runWaiting(st.ID)
		}
		return
	}
	delete(w.unsaved.states, st.ID)
	w.stamp(st)
	w.runWaiting(st.ID)
}

// runWaiting runs what waited for run id's record, now written.
func (w *watcher) runWaiting(id string) {
	fs := w.unsaved.waiting[id]
	delete(w.unsaved.waiting, id)
	for _, f := range fs {
		f()
	}
}
