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

// markUnsynced makes the root's unsynced file (layout.Root.Unsynced), if
// it is not there, before this watcher writes anything without a flush:
// it tells the watcher that comes next, or this one when the durability
// goes back to power_loss, to sync first. Unlike watcher.json, it is
// there from before the first such write, and no client removes it.
// It needs no flush of its own: a power loss that takes it back takes
// back what was written after it too.
func (w *watcher) markUnsynced() error {
	path := w.root().Unsynced()
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if errors.Is(err, unix.EEXIST) {
		return nil
	}
	if err != nil {
		return &os.PathError{Op: "create", Path: path, Err: err}
	}
	defer unix.Close(fd)
	line := "written with durability watcher_crash since " + time.Now().UTC().Format(time.RFC3339) + "; the next watcher with power_loss syncs first\n"
	if err := durable.WriteAll(fd, []byte(line)); err != nil {
		return &os.PathError{Op: "write", Path: path, Err: err}
	}
	return nil
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
	if err == nil || infoErr == nil && left.Durability == tracker.WatcherCrash {
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
// logged, and leaves the file: the next watcher syncs again, which makes
// durable what the page cache still holds (a write-back error the kernel
// reported here is not reported to it again); what was written then
// stays as durable as watcher_crash made it.
func (w *watcher) syncUnflushed(why string) {
	err := unix.Syncfs(w.rootFD)
	if err != nil {
		w.log.Printf("%s: syncing %s's file system: %v: what was written with durability watcher_crash may not survive a power loss", why, w.cfg.Root, err)
		return
	}
	w.log.Printf("%s: synced %s's file system, so that what was written with durability watcher_crash survives a power loss", why, w.cfg.Root)
	if err := os.Remove(w.root().Unsynced()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		w.log.Printf("%v", err)
	}
}
