package watcher

import (
	"errors"
	"slices"

	"github.com/tendhq/tend/tracker"
)

// A batch holds back the record writes of runs that end together (a storm
// of exits, which drain finds in one pass) to write them at once: their
// history events in one append, their records with one round of fsyncs
// (Store.WriteAll). What must follow a durable record (its outcome, the
// reaping of its leader, starting queued runs in its slot) waits in after,
// and runs once the records are written, in order. A launch never waits:
// it writes what is held back first, and its own record at once (its gate
// opens only after it).
type batch struct {
	active bool
	states []*tracker.State // in the order of their first save in the batch
	events []tracker.Event
	after  []func()
}

// batched runs f with the records it saves held back, then writes them.
func (w *watcher) batched(f func()) {
	w.batch.active = true
	defer func() {
		w.batch.active = false
		w.flush()
	}()
	f()
}

// afterSaved runs f once the records saved so far are durable: at once
// outside a batch, after its flush inside one.
func (w *watcher) afterSaved(f func()) {
	if w.batch.active {
		w.batch.after = append(w.batch.after, f)
		return
	}
	f()
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
	b := w.batch
	w.batch = batch{}
	defer func() { w.batch.active = b.active }()
	w.appendHistory(b.events)
	for i, err := range w.store.WriteAll(b.states) {
		w.recorded(b.states[i], err)
	}
	w.retryUnsaved()
	for _, f := range b.after {
		f()
	}
}

// unbatch writes what the batch holds and stops holding saves back until
// the returned function is called: for a launch, whose record must be
// written before its gate opens.
func (w *watcher) unbatch() (resume func()) {
	if !w.batch.active {
		return func() {}
	}
	w.flush()
	w.batch.active = false
	return func() { w.batch.active = true }
}

// appendHistory appends events to the history, or keeps them to retry.
func (w *watcher) appendHistory(events []tracker.Event) {
	if len(events) == 0 {
		return
	}
	if len(w.unsaved.events) > 0 {
		w.unsaved.events = append(w.unsaved.events, events...) // keep the history in order
	} else if err := w.hist.Append(events...); err != nil {
		w.log.Printf("run %s: history: %v (retrying)", events[len(events)-1].ID, err)
		if !errors.Is(err, tracker.ErrTornEnd) {
			w.unsaved.events = append(w.unsaved.events, events...)
		}
	}
}

// recorded notes the result of writing st's record.
func (w *watcher) recorded(st *tracker.State, err error) {
	if err != nil {
		w.log.Printf("run %s: recording %s: %v (retrying; the last record written stays as it was)", st.ID, st.State, err)
		w.unsaved.states[st.ID] = st
		return
	}
	delete(w.unsaved.states, st.ID)
	w.stamp(st)
}
