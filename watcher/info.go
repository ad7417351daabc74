package watcher

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"

	"github.com/tendhq/tend/tracker"
	"github.com/tendhq/tend/tracker/durable"
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
