package watcher

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"sync"

	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
	"github.com/tendhq/tend/tracker/durable"
	"golang.org/x/sys/unix"
)

// A batch holds back the record writes of changes that come together (the
// exits drain finds in one pass, the requests of the spool events queued
// at once) to write them at once: their history events in one append,
// their records with one round of fsyncs (Store.WriteAll). What must
// follow the records is one ordered list of effects (see effect), run by
// the flush once they are written: the gates first, then the rest in the
// order they were named; one whose run's record could not be written
// waits on until it is (see follow).
type batch struct {
	active bool
	states []*tracker.State // in the order of their first save in the batch
	// kinds holds the kind of the states whose one save in the batch is
	// not of kind changed: an end or a stop that the history covers (see
	// coverable), or a launch (see launchRecord).
	kinds   map[*tracker.State]saveKind
	events  []tracker.Event
	effects []effect
	gates   int // how many of effects are gates: they come first
}

// An effect is what may happen only once the record that says so is on
// disk: a launched run's gate opened, a stopped run's SIGTERM, a request
// answered or its claimed file removed, a leader reaped. So whatever a
// watcher that dies in between leaves, the next one finds a record that
// says at least as much as anyone has seen or done. Each is named for the
// log and the tests.
type effect struct {
	name string // what it does, in words ("open the gate", "reap the leader")
	id   string // the run whose record it waits for; "" for the flush alone
	do   func()
	// also are the other runs whose records it waits for: those a run
	// started in the flush that ended them waited for (see startSoon).
	also []string
}

// Effects' names, as the log and the tests know them.
const (
	effectGate      = "open the gate"
	effectSignal    = "send SIGTERM"
	effectAnswer    = "answer"
	effectUnclaim   = "remove the claimed request"
	effectReap      = "reap the leader"
	effectRemoveCut = "remove the cut file"
	effectPurge     = "remove the deleted run's directory"
)

// batched runs f with the records it saves held back, then writes them.
// Inside another batch, f's saves join that one.
func (w *watcher) batched(f func()) {
	if w.batch.active {
		f()
		return
	}
	w.batch.active = true
	defer func() {
		w.startHeld()    // in this flush: see startSoon
		w.settleSpawns() // their records join the batch
		w.batch.active = false
		w.flush()
	}()
	f()
}

// follow has e run once the records saved so far are written (at once
// outside a batch, after its flush inside one), and, if e names a run,
// only once that run's record is on disk: if it could not be written (a
// full disk), e waits until it is, retried every second. Only that run's
// effects wait: a record that cannot be written (its directory made
// immutable) holds up no other run. A gate is put before the effects
// that are not: the run waits on it, and the answers (a file each) are
// written while it starts.
func (w *watcher) follow(name, id string, do func()) {
	w.followEffect(effect{name: name, id: id, do: do})
}

// followEffect is follow, for an effect that may wait for more than one
// run's record.
func (w *watcher) followEffect(e effect) {
	if !w.batch.active {
		w.runEffect(e)
		return
	}
	if e.name == effectGate {
		w.batch.effects = slices.Insert(w.batch.effects, w.batch.gates, e)
		w.batch.gates++
		return
	}
	w.batch.effects = append(w.batch.effects, e)
}

// runEffect runs e now, or, if a record it waits for could not be
// written, once it is. While the history holds (see historyHeld), every
// effect but a stop's signal waits, in order, until the lines it holds
// are stored and the records behind them written. The signal, as it
// waits for no record (see stop), goes ahead: a timeout or a shutdown
// still stops a run that fills the disk.
func (w *watcher) runEffect(e effect) {
	if w.historyHeld() && (e.name != effectSignal || e.id != "") {
		w.unsaved.afterHistory = append(w.unsaved.afterHistory, e)
		return
	}
	for _, id := range append([]string{e.id}, e.also...) {
		if _, unwritten := w.unsaved.states[id]; unwritten {
			if len(w.unsaved.waiting[id]) == 0 {
				w.log.Printf("run %s: %s waits until its record is written", id, e.name)
			}
			w.unsaved.waiting[id] = append(w.unsaved.waiting[id], e)
			return
		}
	}
	e.do()
}

// hold takes a save of the given kind into the batch; the kind holds if
// it is the run's only save in the batch, or if all its saves there are
// launches (its record before the fork, and with its PID).
func (w *watcher) hold(st *tracker.State, events []tracker.Event, kind saveKind) {
	w.batch.events = append(w.batch.events, events...)
	if slices.Contains(w.batch.states, st) {
		if kind != launched || w.batch.kinds[st] != launched {
			delete(w.batch.kinds, st) // its record holds another change too
		}
		return
	}
	w.batch.states = append(w.batch.states, st)
	if kind != changed {
		if w.batch.kinds == nil {
			w.batch.kinds = make(map[*tracker.State]saveKind)
		}
		w.batch.kinds[st] = kind
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
	w.syncMovedOut() // before the ends of the runs whose requests moved
	plan := w.logPlan(b)
	if plan != nil && !w.makeLogRoom(len(plan)) {
		plan = nil
	}
	if !w.appendHistory(b.events) {
		plan = nil
		maps.DeleteFunc(b.kinds, func(_ *tracker.State, k saveKind) bool {
			return k == covered // their lines are not in the history, to be synced
		})
	}
	states := w.holdBehindHistory(b.states)
	var errs []error
	logged := plan != nil && len(states) == len(plan)
	if logged {
		errs = w.writeLogged(states, b.kinds, plan)
	} else {
		errs = w.writeRecords(states, b.kinds)
	}
	for i, err := range errs {
		w.recorded(states[i], err)
	}
	w.retryUnsaved()
	for _, e := range b.effects {
		w.runEffect(e)
	}
	if !logged && len(states) > 0 {
		w.syncLogged() // what the log holds, with the syncs this flush made anyway
	}
}

// flushEvery is how many records a batch of requests holds before it
// writes them: enough for the disk to sync them together, few enough that
// the first runs pass their gates, or get their signals, while the loop
// takes the next requests.
const flushEvery = 32

// flushIfFull writes what the batch holds once it holds flushEvery
// records (counting those of the runs being forked), and goes on holding.
// It reports whether it wrote them.
func (w *watcher) flushIfFull() bool {
	if len(w.batch.states)+len(w.spawning) >= flushEvery {
		w.flush()
		return true
	}
	return false
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
// It reports whether they are in history.jsonl, for its next sync.
func (w *watcher) appendHistory(events []tracker.Event) bool {
	if len(events) == 0 {
		return true
	}
	if len(w.unsaved.events) > 0 {
		w.unsaved.events = append(w.unsaved.events, events...) // keep the history in order
	} else if err := w.hist.Append(events...); errors.Is(err, tracker.ErrTornEnd) {
		w.log.Printf("run %s: history: %v", events[len(events)-1].ID, err) // kept on disk, in order
		w.histUnsynced = true                                              // the pending file, synced as the history is
	} else if err != nil {
		w.log.Printf("run %s: history: %v: holding every record, answer and request until the history can be appended (retrying every second)", events[len(events)-1].ID, err)
		w.unsaved.events = append(w.unsaved.events, events...)
	} else {
		w.histUnsynced = true
		return true
	}
	return false
}

// historyHeld reports whether history lines wait in memory to be
// appended (a full disk refused them): "History before state" then holds
// only if no record is written, and nothing answered or done, until they
// are. So the records of the changes saved meanwhile wait with them (see
// holdBehindHistory), every effect waits (runEffect), and requests stay in
// the spool (examine); processes are reaped, their ends kept unrecorded in
// memory, their leaders unreaped (their reaping is an effect), which a
// keeper that outlives this watcher records in exits/ once there is space.
func (w *watcher) historyHeld() bool { return len(w.unsaved.events) > 0 }

// holdBehindHistory returns states, or, while the history holds, none:
// their records wait in unsaved.states, written once their lines are
// appended (retryUnsaved), and what follows them waits for them.
func (w *watcher) holdBehindHistory(states []*tracker.State) []*tracker.State {
	if !w.historyHeld() {
		return states
	}
	for _, st := range states {
		w.unsaved.states[st.ID] = st
	}
	return nil
}

// writeRecords writes the records of states (Store.WriteAll) and, beside
// their fsyncs, makes the history appended before them durable: what a
// client is answered after the records, it can find in the history after
// a power loss too. Not with durability watcher_crash, which syncs
// neither.
//
// The spool is synced beside them too if a request was claimed from it
// since it last was: a claim is a rename, and a power loss could keep
// its new name (synced with the record) and not the removal of the old,
// bringing back a request its run has taken, into the spool, to be taken
// again once its run is deleted. So are the requests queued runs left
// there (keep).
//
// The records of the ends and stops of kind covered (see coverable), whose
// lines the history has, are written once it is synced, with no flush of
// their own (Store.WriteCovered): a client that reads one finds its
// change in the synced history after a power loss, where recovery takes
// it from (recoverCovered). Those of kind launched are renamed in before
// their flush (see launchRecord).
func (w *watcher) writeRecords(states []*tracker.State, kinds map[*tracker.State]saveKind) []error {
	if w.settings.Durability == tracker.WatcherCrash {
		w.closeClaimed() // kept before the durability changed
		return w.store.WriteAll(states, nil)
	}
	var rest, ends []*tracker.State
	var launches []bool // of rest
	for _, st := range states {
		if kinds[st] == covered {
			ends = append(ends, st)
		} else {
			rest, launches = append(rest, st), append(launches, w.renamesEarly(kinds[st]))
		}
	}
	if !w.histUnsynced && !w.spoolUnsynced && len(ends) == 0 && len(w.unsyncedClaims) == 0 {
		return w.store.WriteAll(rest, launches)
	}
	ids := make([]string, len(rest))
	for i, st := range rest {
		ids[i] = st.ID
	}
	claimDirs := w.claimDirsLeft(ids)
	claimDirsSynced := true
	var wg sync.WaitGroup
	var histErr, spoolErr error
	var endErrs []error
	histSync := w.histUnsynced
	if histSync || len(ends) > 0 {
		wg.Go(func() {
			if histSync {
				histErr = w.hist.Sync()
			}
			if histErr == nil {
				endErrs = w.store.WriteCovered(ends)
			}
		})
	}
	spoolSync := w.spoolUnsynced
	if spoolSync && len(claimDirs) > 0 {
		wg.Go(func() { claimDirsSynced = syncClaimDirs(claimDirs, w.syncFailed) })
	}
	for _, f := range w.unkept {
		wg.Go(func() {
			if _, err := w.spool.Keep(f); err != nil {
				w.syncFailed(err) // as for a claim: its run's record is written
			}
		})
	}
	w.unkept = nil
	for _, c := range w.unsyncedClaims {
		wg.Go(func() {
			defer unix.Close(c.fd)
			if err := durable.FlushClaimed.Fdatasync(c.fd); err != nil {
				w.syncFailed(fmt.Errorf("syncing the claimed request %s: %w", c.path, err)) // as for a claim: its run's record is written
			}
		})
	}
	w.unsyncedClaims = nil
	restErrs := w.store.WriteAll(rest, launches)
	wg.Wait()
	if spoolSync {
		// Only now, once the directories the requests moved to are synced
		// (see claimedInto), and a queued request's name once its
		// content is.
		switch {
		case !claimDirsSynced:
			spoolErr = errors.New("a directory a request was claimed into is not synced")
		case w.claimRecordFailed(rest, restErrs):
			spoolErr = errors.New("the record of a run a request was claimed into is not written")
		default:
			spoolErr = w.syncSpool(durable.FlushClaim)
		}
	}
	if histSync {
		w.historySynced(histErr)
	}
	if histErr != nil {
		endErrs = w.store.WriteAll(ends, nil) // as if not covered
	}
	errs := make([]error, 0, len(states))
	for _, st := range states {
		if kinds[st] == covered {
			errs, endErrs = append(errs, endErrs[0]), endErrs[1:]
		} else {
			errs, restErrs = append(errs, restErrs[0]), restErrs[1:]
		}
	}
	if spoolSync {
		if spoolErr != nil {
			w.log.Printf("%v: the spool is synced with the next flush", spoolErr)
		} else {
			w.spoolUnsynced = false
		}
	}
	return errs
}

// renamesEarly reports whether a record saved as kind is renamed in
// before its flush (see launchRecord): a launch, where the file system
// orders new data before names.
func (w *watcher) renamesEarly(kind saveKind) bool { return kind == launched && w.ordersData }

// keep has the content of request f, left in the spool for its queued
// run, synced with the next records (outside a batch, at once), and its
// name with the spool: the run starts with what is there, and a power
// loss must not take back what was answered accepted, which follows.
func (w *watcher) keep(f spool.File) {
	if w.settings.Durability == tracker.WatcherCrash {
		return
	}
	w.unkept = append(w.unkept, f)
	w.spoolUnsynced = true
	if !w.batch.active {
		w.writeRecords(nil, nil) // a request examined on a timer: its answer comes next
	}
}

// claimed notes a claim from the spool (err is its error): the spool is
// synced with the next records.
func (w *watcher) claimed(err error) {
	if err == nil {
		w.spoolUnsynced = true
	}
}

// claimedInto notes that a request was claimed or moved from the spool
// into dir (made for it, if made is set). Each half of a rename is durable
// with its own directory (ext4 without a journal writes them apart), so
// dir, and runs/ if dir is new, are synced before the spool is: no power
// loss may keep the request's removal from the spool and not its new
// name. A dir whose run's record the flush writes is synced with it
// (Store.WriteAll syncs a new run's directory in runs/ too); the others
// (claims/, a run that ends with no record synced) on their own, beside
// the records; those of the requests moved out (see movedOut) before.
func (w *watcher) claimedInto(dir string, made bool) {
	if w.settings.Durability == tracker.WatcherCrash {
		return
	}
	w.claimDirs[dir] = w.claimDirs[dir] || made
}

// claimDirsLeft returns the directories of claimDirs that the records of
// runs ids, about to be written or synced, do not sync: those of other
// runs, and runs/ for one made with no record there.
func (w *watcher) claimDirsLeft(ids []string) []string {
	recorded := make(map[string]bool, len(ids))
	for _, id := range ids {
		recorded[w.store.RunDir(id)] = true
	}
	var dirs []string
	runs := false
	for dir, made := range w.claimDirs {
		if !recorded[dir] {
			dirs = append(dirs, dir)
			runs = runs || made
		}
	}
	if runs {
		dirs = append(dirs, w.store.Dir())
	}
	return dirs
}

// claimRecordFailed reports whether the record of a run whose directory a
// request was claimed into failed to be written (errs, of states): its
// directory is then not synced, and the spool must wait. Another run's
// failure holds nothing back: its owner could make its record fail on
// purpose (a directory put where state.json goes).
func (w *watcher) claimRecordFailed(states []*tracker.State, errs []error) bool {
	for i, err := range errs {
		if _, claimed := w.claimDirs[w.store.RunDir(states[i].ID)]; err != nil && claimed {
			return true
		}
	}
	return false
}

// syncClaimDirs syncs dirs together, claimDirsInFlight at a time, and
// reports whether all are synced. One gone is: the request it held moved
// on (rejected, its run deleted), synced where it went.
func syncClaimDirs(dirs []string, failed func(error)) bool {
	return syncDirsBounded(dirs, func(dir string) error {
		if err := durable.FlushClaim.SyncDir(dir); !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}, failed)
}

// syncDirsBounded syncs dirs with syncDir, claimDirsInFlight at a time,
// tells failed what fails, and reports whether all are synced.
func syncDirsBounded(dirs []string, syncDir func(string) error, failed func(error)) bool {
	var wg sync.WaitGroup
	errs := make([]error, len(dirs))
	slots := make(chan struct{}, claimDirsInFlight)
	for i, dir := range dirs {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			errs[i] = syncDir(dir)
		})
	}
	wg.Wait()
	err := errors.Join(errs...)
	if err != nil {
		failed(err)
	}
	return err == nil
}

// claimDirsInFlight is how many directories syncClaimDirs syncs at once:
// enough to keep a disk's queue full, and a bound on the descriptors and
// threads a flush holds while claims pile up behind a spool whose sync
// waits (see claimRecordFailed).
const claimDirsInFlight = 32

// keepClaimed notes a request claimed to path (a start into its run's
// directory, a control request into claims/): its content is synced with
// the next records, those of what it does, before a gate opens or it is
// answered. Its writer (a shell's printf and mv, an editor, tend itself)
// need not have synced it, and a power loss that kept its name and not
// its content would leave an accepted run nothing to start from again (if
// it never passed its gate) or to restart a service from, and bring back
// a control request that was answered, empty, to be rejected.
//
// Its write-back starts now, before the run's files and fork: a journaled
// ext4 then allocates its blocks in the transaction that the record's
// flush commits, where an fdatasync that came to them later waited for a
// commit of its own (0.8 ms more to a start on the bench's disk).
func (w *watcher) keepClaimed(path string, claimed spool.File) {
	if w.settings.Durability == tracker.WatcherCrash {
		return
	}
	// Opened without following a link, a regular file only, and synced
	// only if it is the file claimed, no larger than a request may be (as
	// spool.Dir.Keep does): a queued run's directory is its owner's, who
	// could put a file of theirs there, of any size, for every start of
	// the batch to wait for. (A writer that still has it open could still
	// grow it in the milliseconds until the flush, which then waits for
	// what it wrote, as Keep's does.)
	fd, st, err := durable.OpenRegular(path)
	if err != nil {
		w.log.Printf("syncing the claimed request: %v", err)
		return
	}
	if st.Dev != claimed.Dev || st.Ino != claimed.Ino || st.Size > spool.MaxBody {
		unix.Close(fd)
		return
	}
	durable.StartWriteBack(fd)
	w.unsyncedClaims = append(w.unsyncedClaims, claimedFile{path, fd})
}

// closeClaimed closes the claimed requests kept to sync, unsynced: where
// nothing is synced.
func (w *watcher) closeClaimed() {
	for _, c := range w.unsyncedClaims {
		unix.Close(c.fd)
	}
	w.unsyncedClaims = nil
}

// A claimedFile is a request claimed (see keepClaimed), open until its
// content is synced.
type claimedFile struct {
	path string
	fd   int
}

// movedOut notes that the request of queued run id, which is to end
// without starting, was moved out of the spool into the run's directory
// (err is its error). The move is made durable before anything of the
// run's end is written (syncMovedOut): a power loss that kept the end
// and not the move would leave the request in the spool, to be rejected
// as a second start of a run that was answered accepted.
func (w *watcher) movedOut(id string, err error) {
	if err != nil || w.settings.Durability == tracker.WatcherCrash {
		return
	}
	w.movedOutOf = append(w.movedOutOf, id)
	if !w.batch.active {
		w.syncMovedOut()
	}
}

// syncMovedOut syncs the run directories requests were moved into (see
// movedOut), with those of every other claim since the spool was last
// synced (see claimedInto), then the spool, before a batch writes its
// history lines and records.
func (w *watcher) syncMovedOut() {
	if len(w.movedOutOf) == 0 {
		return
	}
	var dirs []string
	for _, id := range w.movedOutOf {
		dirs = append(dirs, w.store.RunDir(id))
	}
	w.movedOutOf = nil
	var wg sync.WaitGroup
	var claimsSynced bool
	claimDirs := w.claimDirsLeft(nil)
	wg.Go(func() { claimsSynced = syncClaimDirs(claimDirs, w.syncFailed) })
	// Unlike a claim's, a run's directory that is gone is not synced:
	// where its request went is not known to be durable.
	dirsSynced := syncDirsBounded(dirs, durable.FlushMovedOut.SyncDir, w.syncFailed)
	wg.Wait()
	if !dirsSynced || !claimsSynced {
		// The spool waits for the next flush, as the moved-out requests'
		// new names may not be durable.
		w.log.Printf("the spool is synced with the next flush")
		return
	}
	if err := w.syncSpool(durable.FlushMovedOut); err != nil {
		w.log.Printf("%v", err)
		return
	}
	// Every claim so far is durable now, with its directory: the flush
	// that follows (no claim comes in between) need not sync the spool
	// again, unless a queued request's content is to be synced first.
	if len(w.unkept) == 0 {
		w.spoolUnsynced = false
	}
}

// claimsLeftBehind has runs/ and then the spool synced with the next
// flush, once recovery has written its records: a watcher that stopped
// between a claim and its flush left the claim's removal from the spool
// unsynced, and its new name, in a run's directory (synced with the
// record recovery wrote there, but runs/ is synced by the store only
// for the directories this watcher makes) or in claims/ (whose requests
// restoreControls has put back in the spool by now: see syncRestored).
// (Not at once: the next flush comes with the next request, and an idle
// file system writes them back on its own.)
func (w *watcher) claimsLeftBehind() {
	w.claimedInto(w.store.Dir(), false)
	w.spoolUnsynced = true
}

// syncRestored makes durable, at once, what restoreControls moved out of
// claims/, in the order a power loss must respect. If it put a control
// request back in the spool (putBack), the spool is synced, after the
// directories requests were claimed into so far: its new name must be
// durable before claims/ is synced, here or with a later claim, or a
// power loss in between could keep its removal from claims/ and not its
// name in the spool, and one held there (a cancel of a run whose start
// waits in the spool) is there until a later flush. Then, if it rejected
// one (rejected), claims/ is, before the rejection is answered: the
// request is in rejected/, synced, and a power loss that brought it back
// to claims/ would have the next watcher carry out a request answered
// rejected. (A sync that fails is logged, and the answers are given all
// the same: with the disk failing, a request that waits for none would
// wait for ever.) Nothing when neither: a sync of the spool at every
// start would be where the trial's claim mutant is cut, every time, and
// hide it.
func (w *watcher) syncRestored(putBack, rejected bool) {
	if w.settings.Durability == tracker.WatcherCrash || !putBack && !rejected {
		return
	}
	if putBack {
		if !syncClaimDirs(w.claimDirsLeft(nil), w.syncFailed) {
			return // the spool waits for the next flush, after them
		}
		if err := w.syncSpool(durable.FlushClaim); err != nil {
			w.log.Printf("recover: %v: the spool is synced with the next flush", err)
			return
		}
	}
	if rejected {
		if err := durable.FlushClaim.SyncDir(w.spool.Claims()); err != nil {
			w.syncFailed(fmt.Errorf("recover: %w", err))
		}
	}
}

// syncSpool syncs the spool (as flush), once every directory a request
// was claimed into since it was last synced is (see claimedInto).
func (w *watcher) syncSpool(flush durable.Flush) error {
	if err := flush.SyncDir(w.spool.Spool()); err != nil {
		w.noteFlushFailure(err) // its callers log it
		return err
	}
	clear(w.claimDirs)
	return nil
}

// syncHistory makes the history appended so far durable, before what
// depends on it alone (a deletion's answer).
func (w *watcher) syncHistory() {
	if w.histUnsynced && w.settings.Durability != tracker.WatcherCrash {
		w.historySynced(w.hist.Sync())
	}
}

func (w *watcher) historySynced(err error) {
	if err != nil {
		w.syncFailed(fmt.Errorf("history: %w", err)) // the next flush tries again
		return
	}
	w.histUnsynced = false
}

// recorded notes the result of writing st's record.
func (w *watcher) recorded(st *tracker.State, err error) {
	if err != nil {
		w.log.Printf("run %s: recording %s: %v (retrying; the last record written stays as it was)", st.ID, st.State, err)
		w.noteFlushFailure(err) // the retry makes this record durable, but the disk failed a flush once
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
	effects := w.unsaved.waiting[id]
	delete(w.unsaved.waiting, id)
	for _, e := range effects {
		w.runEffect(e) // it may wait for another record too
	}
}
