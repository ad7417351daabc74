package watcher

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"

	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
)

// writeInfo writes watcher.json and watcher.pid (the PID alone, for
// shells), each replaced atomically.
func (w *watcher) writeInfo() error {
	info := tracker.WatcherInfo{PID: os.Getpid(), KeeperPID: w.keeper, Version: w.cfg.Version, StartedAt: w.startedAt, Root: w.cfg.Root, Durability: w.settings.Durability}
	b, _ := json.MarshalIndent(info, "", "  ")
	if err := spool.Replace(w.root().WatcherInfo(), append(b, '\n'), spool.Perm{Mode: 0o644}); err != nil {
		return fmt.Errorf("%s: %w", w.root().WatcherInfo(), err)
	}
	if err := spool.Replace(w.root().WatcherPID(), []byte(strconv.Itoa(os.Getpid())+"\n"), spool.Perm{Mode: 0o644}); err != nil {
		return fmt.Errorf("%s: %w", w.root().WatcherPID(), err)
	}
	return nil
}
