package watcher

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
	"github.com/tendhq/tend/tracker/durable"
	"github.com/tendhq/tend/tracker/layout"
	"golang.org/x/sys/unix"
)

// The start log (tracker.StartLog) takes the journal commit off the path
// of a run's start and of its end. A flush whose changes need nothing
// durable but their records, their history lines and, for a run's first
// launch, the request it was claimed from (the usual start: tend start, a
// request renamed in; a run's end; a chain's next start in the same
// flush) writes its records and lines unsynced, and each change (record,
// lines, request) to the log, an overwrite of blocks the log already
// has, synced, which commits nothing. What follows the records (gates,
// answers, reaps) follows that sync. The records, their directories,
// runs/, the requests, the history and the spool are synced later, off
// the runs' path (syncLogged: startLogSyncDelay after the first change
// logged, or at once when the log is full, a flush syncs them anyway, or
// the watcher stops), and the log is then marked applied. A power loss
// in between leaves the changes in the log, and the next watcher puts
// back what it lost (replayStartLog) before it reads a record.

// startLogState is what the watcher keeps of its start log.
type startLogState struct {
	log *tracker.StartLog // nil where there is none (durability watcher_crash)
	// bodies are the requests claimed this batch for runs to launch, by
	// ID: what the log keeps of each (see claimBody).
	bodies map[string]claimedBody
	// ids are the runs whose changes the log holds and their files do
	// not yet, durably, each once; launched are those of them launched
	// (their requests are synced too); seq is the last entry.
	ids      []string
	launched map[string]bool
	seq      uint64
	syncDue  bool // a syncLogged is scheduled
}

// startLogSyncDelay is how long the files of the changes the log holds
// wait to be synced: enough for a burst of starts, or a run that ends
// soon after its start, to share the sync, and a client that starts one
// run after another not to wait for it. The log holds them meanwhile.
const startLogSyncDelay = 20 * time.Millisecond

// openStartLog opens the root's start log and puts back what a power loss
// took of the changes it holds. A log whose records do not verify with
// the root's key (record.key lost) is set aside, and the watcher goes on
// (tracker.SetAsideUnverified).
//
// With durability watcher_crash it makes none, but one there is replayed
// all the same: its changes were answered under power_loss, and it is
// their only durable copy.
func (w *watcher) openStartLog() error {
	if w.settings.Durability == tracker.WatcherCrash {
		if _, err := os.Lstat(layout.Root(w.cfg.Root).StartLog()); errors.Is(err, fs.ErrNotExist) {
			return nil
		}
	}
	l, pending, err := tracker.OpenStartLog(w.cfg.Root)
	if err == nil {
		var aside, why string
		aside, why, err = tracker.SetAsideUnverified(w.store, l, pending)
		if aside != "" {
			w.log.Printf("start log: %s moved to %s, and made anew: %s", layout.Root(w.cfg.Root).StartLog(), aside, why)
			pending = nil
		}
		if err != nil && !errors.Is(err, tracker.ErrStartLogNotMade) {
			err = fmt.Errorf("start log: setting it aside: %w", err)
		}
	}
	if errors.Is(err, tracker.ErrStartLogNotMade) {
		w.log.Printf("%v: starts are synced the usual way", err)
		return nil
	}
	if err != nil {
		return err
	}
	w.startLog.log = l
	return w.replayStartLog(pending)
}

// A claimedBody is a request claimed for a run to launch: its name in
// the spool and its content.
type claimedBody struct {
	name string
	body []byte
}

// claimBody notes f as the request run id was claimed from, for the
// start log to keep with its launch.
func (w *watcher) claimBody(id string, f spool.File) {
	if w.startLog.log == nil {
		return
	}
	if w.startLog.bodies == nil {
		w.startLog.bodies = make(map[string]claimedBody)
	}
	w.startLog.bodies[id] = claimedBody{f.Name, f.Body}
}

// logPlan returns the start log's entries for batch b, before its
// history lines are appended, or nil if b must be written the usual way:
// unless each of its saves is a change of a run that is not deleted (a
// launch only of a run of the watcher's own user, whose request was
// claimed from the spool this batch: another's directory is handed over
// to it, which the log does not hold), and nothing else waits to be synced with them
// (a claim into claims/, a queued request kept or moved, another
// request's content), the batch syncs what it must the usual way. It
// only plans: whether the log has room for the entries is makeLogRoom's
// to tell, and to make.
func (w *watcher) logPlan(b batch) []tracker.LogEntry {
	bodies := w.startLog.bodies
	w.startLog.bodies = nil
	if w.startLog.log == nil || w.settings.Durability != tracker.PowerLoss || len(b.states) == 0 ||
		w.historyHeld() || len(w.unkept) > 0 || len(w.movedOutOf) > 0 {
		return nil
	}
	entries := make([]tracker.LogEntry, len(b.states))
	index := make(map[string]int, len(b.states))
	dirs := make(map[string]bool, len(b.states)+len(w.startLog.ids))
	for _, id := range w.startLog.ids {
		dirs[w.store.RunDir(id)] = true
	}
	launchDirs := make(map[string]bool)
	for i, st := range b.states {
		if _, dup := index[st.ID]; dup || st.State == tracker.Deleted {
			return nil
		}
		entries[i] = tracker.LogEntry{ID: st.ID}
		if c, ok := bodies[st.ID]; ok {
			if st.OwnerUID != w.uid {
				return nil
			}
			entries[i].Name, entries[i].Request = c.name, c.body
			launchDirs[w.store.RunDir(st.ID)] = true
		} else if b.kinds[st] == launched {
			return nil // a launch whose request was not claimed here (recovery's)
		}
		index[st.ID] = i
		dirs[w.store.RunDir(st.ID)] = true
	}
	for dir := range w.claimDirs {
		if !dirs[dir] {
			return nil
		}
	}
	for _, c := range w.unsyncedClaims {
		if !launchDirs[filepath.Dir(c.path)] {
			return nil
		}
	}
	for _, ev := range b.events {
		i, ok := index[ev.ID]
		if !ok {
			return nil
		}
		entries[i].Events = append(entries[i].Events, ev)
	}
	return entries
}

// makeLogRoom makes room in the start log for n entries, if it has not,
// by syncing the files of the changes it holds (syncLogged), and reports
// whether it has room.
func (w *watcher) makeLogRoom(n int) bool {
	if w.startLog.log.Free() < n {
		w.syncLogged() // makes room, if its syncs succeed
	}
	return w.startLog.log.Free() >= n
}

// writeLogged writes the records of states, the changes of entries
// (logPlan), without a flush, and the entries to the start log, synced:
// each record is then as durable as a synced one. If the log cannot take
// them, the records are written the usual way (writeRecords).
func (w *watcher) writeLogged(states []*tracker.State, kinds map[*tracker.State]saveKind, entries []tracker.LogEntry) []error {
	records, errs := w.store.WriteLogged(states)
	if errors.Join(errs...) != nil {
		return w.writeRecords(states, kinds)
	}
	for i := range entries {
		entries[i].Record = records[i]
	}
	if err := w.startLog.log.Write(entries); err != nil {
		if !errors.Is(err, tracker.ErrStartLogFull) && !errors.Is(err, tracker.ErrEntryTooLarge) {
			w.log.Printf("start log: %v: the changes are synced the usual way", err)
			w.noteFlushFailure(err)
		}
		return w.writeRecords(states, kinds)
	}
	w.closeClaimed() // synced by their paths in syncLogged, which may be tried again
	if w.startLog.launched == nil {
		w.startLog.launched = make(map[string]bool)
	}
	for i, st := range states {
		if !slices.Contains(w.startLog.ids, st.ID) {
			w.startLog.ids = append(w.startLog.ids, st.ID)
		}
		if entries[i].Request != nil {
			w.startLog.launched[st.ID] = true
		}
	}
	w.startLog.seq = w.startLog.log.Seq()
	if !w.startLog.syncDue {
		w.startLog.syncDue = true
		w.after(startLogSyncDelay, func() {
			w.startLog.syncDue = false
			w.syncLogged()
		})
	}
	return errs
}

// syncLogged makes durable where they belong the changes the start log
// holds (writeLogged): their records and directories, runs/, the
// requests of the launches, the history, every directory a request was
// claimed into and then the spool; then it marks them applied in the
// log. What fails is logged, and tried again with the next flush; until
// then the log holds the changes, which a watcher that starts after a
// power loss puts back.
func (w *watcher) syncLogged() {
	ids := w.startLog.ids
	if len(ids) == 0 {
		return
	}
	var launched []string
	for _, id := range ids {
		if w.startLog.launched[id] {
			launched = append(launched, id)
		}
	}
	var wg sync.WaitGroup
	var histErr, recErr, reqErr error
	dirsSynced := true
	hist := w.histUnsynced
	if hist {
		wg.Go(func() { histErr = w.hist.Sync() })
	}
	wg.Go(func() { reqErr = w.syncRequests(launched) })
	wg.Go(func() { dirsSynced = syncClaimDirs(w.claimDirsLeft(ids), w.syncFailed) })
	recErr = w.store.SyncLogged(ids)
	wg.Wait()
	if hist {
		w.historySynced(histErr)
	}
	err := errors.Join(recErr, reqErr, histErr)
	if err == nil && !dirsSynced {
		err = errors.New("a directory a request was claimed into is not synced")
	}
	if err == nil && w.spoolUnsynced {
		if err = w.syncSpool(durable.FlushClaim); err == nil {
			w.spoolUnsynced = len(w.unkept) > 0
		}
	}
	if err == nil {
		err = w.startLog.log.Applied(w.startLog.seq)
	}
	if err != nil {
		w.log.Printf("start log: syncing the changes of %d runs: %v (tried again with the next flush; the log holds them)", len(ids), err)
		w.noteFlushFailure(err)
		return
	}
	w.startLog.ids, w.startLog.launched = nil, nil
}

// syncRequests fdatasyncs the claimed requests of runs ids, opened by
// path as keepClaimed opens them.
func (w *watcher) syncRequests(ids []string) error {
	var errs []error
	for _, id := range ids {
		path := w.store.Run(id).Request()
		fd, st, err := durable.OpenRegular(path)
		if errors.Is(err, unix.ENOENT) {
			continue // its run deleted since, or its directory removed
		}
		if err == nil && st.Size <= spool.MaxBody {
			err = durable.FlushClaimed.Fdatasync(fd)
		}
		if fd >= 0 {
			unix.Close(fd)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("run %s: its request: %w", id, err))
		}
	}
	return errors.Join(errs...)
}

// replayStartLog puts back what a power loss took of the changes in
// entries, the start log's not applied (tracker.ReplayStartLog). The
// spool is synced, and the log marked, by syncLogged once recovery has
// written the records of the runs a killed watcher claimed requests for
// and did not flush (see claimsLeftBehind): synced before, the removal
// of such a request from the spool could be durable and its new name
// not.
func (w *watcher) replayStartLog(entries []tracker.LogEntry) error {
	done, err := tracker.ReplayStartLog(w.store, w.hist, w.spool, w.startLog.log, entries)
	for _, line := range done {
		w.log.Printf("recover: %s", line)
	}
	if err != nil || len(entries) == 0 {
		return err
	}
	for _, e := range entries {
		if !slices.Contains(w.startLog.ids, e.ID) {
			w.startLog.ids = append(w.startLog.ids, e.ID)
		}
	}
	w.startLog.seq = entries[len(entries)-1].Seq
	w.spoolUnsynced = true
	return nil
}
