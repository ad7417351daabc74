package watcher

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
)

// Info is what a running watcher says about itself in ROOT/watcher.json,
// written once it takes requests and removed when it exits cleanly. A file
// left by a watcher that crashed is stale: only the lock (see Probe) says
// whether a watcher runs.
type Info struct {
	PID       int       `json:"pid"`
	KeeperPID int       `json:"keeper_pid,omitempty"`
	Version   string    `json:"version"`
	StartedAt time.Time `json:"started_at"`
	Root      string    `json:"root"`
	// Durability is what the run records written now survive (it follows
	// config.json).
	Durability tracker.Durability `json:"durability"`
	// MaxRunning and MaxPerSession are the limits in force (0: none), from
	// the watcher's flags and config.json, which only the watcher knows
	// together: tend top shows how full they are.
	MaxRunning    int `json:"max_running,omitempty"`
	MaxPerSession int `json:"max_running_per_session,omitempty"`
}

// InfoPath returns the path of root's watcher.json.
func InfoPath(root string) string { return filepath.Join(root, "watcher.json") }

// ReadInfo reads root's watcher.json.
func ReadInfo(root string) (Info, error) {
	var info Info
	b, err := os.ReadFile(InfoPath(root))
	if err != nil {
		return info, err
	}
	if err := json.Unmarshal(b, &info); err != nil {
		return info, fmt.Errorf("%s: %w", InfoPath(root), err)
	}
	return info, nil
}

// writeInfo writes watcher.json and watcher.pid (the PID alone, for
// shells), each replaced atomically.
func (w *watcher) writeInfo() error {
	info := Info{PID: os.Getpid(), KeeperPID: w.keeper, Version: w.cfg.Version, StartedAt: w.startedAt, Root: w.cfg.Root,
		Durability: w.settings.Durability, MaxRunning: w.settings.MaxRunning, MaxPerSession: w.settings.MaxPerSession}
	b, _ := json.MarshalIndent(info, "", "  ")
	if err := spool.Replace(InfoPath(w.cfg.Root), append(b, '\n'), spool.Perm{Mode: 0o644}); err != nil {
		return fmt.Errorf("%s: %w", InfoPath(w.cfg.Root), err)
	}
	if err := spool.Replace(PIDPath(w.cfg.Root), []byte(strconv.Itoa(os.Getpid())+"\n"), spool.Perm{Mode: 0o644}); err != nil {
		return fmt.Errorf("%s: %w", PIDPath(w.cfg.Root), err)
	}
	return nil
}
