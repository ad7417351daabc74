package watcher

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"time"

	"github.com/tendhq/tend/tracker"
	"github.com/tendhq/tend/tracker/durable"
	"golang.org/x/sys/unix"
)

// writeInfo writes watcher.pid (the PID alone, for shells), then
// watcher.json, each replaced atomically, not synced: one who finds a new
// watcher in watcher.json finds its PID in watcher.pid too (a watcher
// that becomes the keeper leaves its own there). After a power loss no
// watcher runs, whatever they say, and a reader checks the lock, so a
// stale, old or empty one after a power loss is harmless (the power-loss
// trial showed nothing lost without their fsyncs).
func (w *watcher) writeInfo() error {
	info := tracker.WatcherInfo{PID: os.Getpid(), KeeperPID: w.keeper, Version: w.cfg.Version, StartedAt: w.startedAt, Root: w.cfg.Root,
		Durability: w.settings.Durability, MaxRunning: w.settings.MaxRunning, MaxPerSession: w.settings.MaxPerSession,
		ConfigProblem: w.configProblem, AnswersByOwner: true}
	b, _ := json.MarshalIndent(info, "", "  ")
	if err := durable.ReplaceUnsynced(w.root().WatcherPID(), []byte(strconv.Itoa(os.Getpid())+"\n"), durable.Perm{Mode: 0o644}); err != nil {
		return fmt.Errorf("%s: %w", w.root().WatcherPID(), err)
	}
	if err := durable.ReplaceUnsynced(w.root().WatcherInfo(), append(b, '\n'), durable.Perm{Mode: 0o644}); err != nil {
		return fmt.Errorf("%s: %w", w.root().WatcherInfo(), err)
	}
	return nil
}

// markUnsynced makes the root's unsynced file (tracker.MarkUnsynced), if
// it is not there, before this watcher writes anything without a flush:
// it tells the watcher that comes next, or this one when the durability
// goes back to power_loss, to sync first. Unlike watcher.json, it is
// there from before the first such write, and no client removes it.
func (w *watcher) markUnsynced() error {
	return tracker.MarkUnsynced(w.cfg.Root, time.Now())
}

// startDurability readies the root for this watcher's durability, under
// the lock, before the watcher writes anything: under watcher_crash it
// makes the unsynced file, and only then has the store write without a
// flush; under power_loss, where that file (or the
// watcher.json of a watcher_crash watcher of tend before it, which did
// not stop cleanly) says a watcher before it wrote without a flush, it
// syncs that first.
func (w *watcher) startDurability() error {
	if w.settings.Durability == tracker.WatcherCrash {
		if err := w.markUnsynced(); err != nil {
			return err
		}
		w.store.SetDurability(tracker.WatcherCrash)
		return nil
	}
	_, err := os.Lstat(w.root().Unsynced())
	left, infoErr := tracker.ReadWatcherInfo(w.cfg.Root)
	switch {
	case err == nil && w.syncFailure() != "":
		w.syncUnflushed("durability power_loss after a failed sync")
	case err == nil || infoErr == nil && left.Durability == tracker.WatcherCrash:
		w.syncUnflushed("durability power_loss after a watcher with watcher_crash")
	}
	return nil
}

// syncUnflushed makes durable what was written under watcher_crash, by
// this watcher or one before it, before anything is promised under
// power_loss (or, as a watcher_crash watcher stops, for whoever comes
// next): syncfs(2) of the root's file system, the one call that reaches
// every record, history line, claim and name written without a flush;
// then it removes the unsynced file. why is logged with it. A failure is
// logged and recorded (noteSyncFailure), and the file then stays through
// later syncs that succeed.
func (w *watcher) syncUnflushed(why string) {
	err := w.syncfs()
	if err != nil {
		w.log.Printf("%s: syncing %s's file system: %v: what was written with durability watcher_crash may not survive a power loss, or may be lost already (run tend fsck)", why, w.cfg.Root, err)
		w.noteSyncFailure(fmt.Errorf("syncfs of %s's file system: %w", w.cfg.Root, err))
		return
	}
	if failure := w.syncFailure(); failure != "" {
		w.log.Printf("%s: synced %s's file system, but %s says a sync before failed (%s): what was written before then may be lost; left for tend fsck", why, w.cfg.Root, w.root().Unsynced(), failure)
		return
	}
	w.log.Printf("%s: synced %s's file system, so that what was written with durability watcher_crash survives a power loss", why, w.cfg.Root)
	if err := os.Remove(w.root().Unsynced()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		w.log.Printf("%v", err)
	}
}

// syncFailure returns the first failed flush the root's unsynced file
// records, or "" (tracker.SyncFailure).
func (w *watcher) syncFailure() string {
	failure, _ := tracker.SyncFailure(w.cfg.Root, w.boot)
	return failure
}

// syncfs syncs the root's file system through the descriptor held since
// the lock was taken; Config.FailSyncfs makes it fail as a disk's
// write-back can.
func (w *watcher) syncfs() error {
	if w.cfg.FailSyncfs {
		return unix.EIO
	}
	return unix.Syncfs(w.rootFD)
}

// syncFailed logs err, a flush's, and records it if the flush itself
// failed (noteFlushFailure). Safe to call from the goroutines of a flush.
func (w *watcher) syncFailed(err error) {
	w.log.Printf("%v", err)
	w.noteFlushFailure(err)
}

// noteFlushFailure has noteSyncFailure record err if it is, or wraps, a
// flush that failed in the sync itself (durable.FlushError): not a file
// that could not be opened, which a user could cause with a file of
// theirs, and which loses nothing.
func (w *watcher) noteFlushFailure(err error) {
	var fe *durable.FlushError
	if errors.As(err, &fe) {
		w.noteSyncFailure(err)
	}
}

// noteSyncFailure records, the first time for this watcher (the first
// time it could be written), that a flush failed with err, in the root's
// unsynced file (tracker.NoteSyncFailure), where tend status and tend
// fsck find it and no later sync that succeeds removes it: the kernel
// reports a write-back error to one caller only, so the flush that tries
// again succeeds whatever this one lost, and only tend fsck, reading the
// records against the history after a restart, can tell what that was.
// Safe to call from the goroutines of a flush.
func (w *watcher) noteSyncFailure(err error) {
	if !w.syncFailureNoted.CompareAndSwap(false, true) {
		return
	}
	if nerr := tracker.NoteSyncFailure(w.cfg.Root, time.Now(), w.boot, err); nerr != nil {
		w.log.Printf("%v", nerr)
		w.syncFailureNoted.Store(false) // the next failure tries again
	}
}
