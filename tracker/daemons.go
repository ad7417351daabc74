package tracker

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gofrs/flock"
	"github.com/tendhq/tend/tracker/layout"
)

// The names a keeper and a watcher give themselves (/proc/PID/comm), by
// which a client that may not probe the locks (another user of a shared
// root) tells them from an unrelated process that has the PID now.
const (
	KeeperComm  = "tend-keeper"
	WatcherComm = "tend-watcher"
)

// ProbeWatcher reports whether a watcher holds root's lock, and the PID it
// wrote. It decides by the lock, not by the PID file. It holds a shared
// lock for a moment, which a starting watcher waits out.
func ProbeWatcher(root string) (running bool, pid int, err error) {
	r := layout.Root(root)
	return probe(r.WatcherLock(), r.WatcherPID())
}

// HoldOffWatcher takes root's watcher lock, shared, and returns its
// release: no watcher starts on root until then (one that tries waits a
// moment, then says another runs). It fails if a watcher runs. The lock
// file is made if it is missing, as a watcher makes it, so that one
// starting meanwhile cannot take a lock file of its own: for tend fsck
// --repair, which changes records only a watcher may otherwise change.
func HoldOffWatcher(root string) (release func(), err error) {
	r := layout.Root(root)
	l := flock.New(r.WatcherLock(), flock.SetFlag(os.O_CREATE|os.O_RDONLY|syscall.O_NOFOLLOW), flock.SetPermissions(0o600))
	got, err := l.TryRLock()
	if err != nil {
		return nil, err
	}
	if !got {
		return nil, fmt.Errorf("a watcher runs on %s (pid %d): stop it first (tend down --keep-runs)", root, ReadPID(r.WatcherPID()))
	}
	return func() { l.Unlock() }, nil
}

// ProbeKeeper reports whether a keeper is in charge of root, and the PID
// it wrote, deciding by the keeper's lock.
func ProbeKeeper(root string) (running bool, pid int, err error) {
	r := layout.Root(root)
	return probe(r.KeeperLock(), r.KeeperPID())
}

func probe(lockPath, pidPath string) (running bool, pid int, err error) {
	// Not made if it is missing (no watcher runs), and not through a link.
	l := flock.New(lockPath, flock.SetFlag(os.O_RDONLY|syscall.O_NOFOLLOW))
	got, err := l.TryRLock()
	if errors.Is(err, os.ErrNotExist) {
		return false, 0, nil
	}
	if errors.Is(err, os.ErrPermission) {
		// Another user's client in a shared root: the lock is the
		// watcher's user's alone, so the PID file (the watcher's, or the
		// keeper's) says, if a process of that name still has that PID.
		pid := ReadPID(pidPath)
		return pid > 0 && daemonAlive(pid), pid, nil
	}
	if err != nil {
		return false, 0, err
	}
	if got {
		l.Unlock()
		return false, 0, nil
	}
	return true, ReadPID(pidPath), nil
}

// ReadPID returns the PID a PID file holds, or 0.
func ReadPID(path string) int {
	b, _ := os.ReadFile(path)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// daemonAlive reports whether process pid runs and is a watcher or a
// keeper (by the name it gives itself), for a client that may not probe
// the locks.
func daemonAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	comm := strings.TrimSpace(string(b))
	return err == nil && (comm == WatcherComm || comm == KeeperComm)
}

// WatcherInfo is what a running watcher says about itself in
// ROOT/watcher.json, written once it takes requests and removed when it
// exits cleanly. A file left by a watcher that crashed is stale: only the
// lock (see ProbeWatcher) says whether a watcher runs.
type WatcherInfo struct {
	PID       int       `json:"pid"`
	KeeperPID int       `json:"keeper_pid,omitempty"`
	Version   string    `json:"version"`
	StartedAt time.Time `json:"started_at"`
	Root      string    `json:"root"`
	// Durability is what the run records written now survive (it follows
	// config.json).
	Durability Durability `json:"durability"`
	// MaxRunning and MaxPerSession are the limits in force (0: none), from
	// the watcher's flags and config.json, which only the watcher knows
	// together: tend top shows how full they are.
	MaxRunning    int `json:"max_running,omitempty"`
	MaxPerSession int `json:"max_running_per_session,omitempty"`
	// ConfigProblem is why the watcher's last reading of config.json
	// failed, which left the settings above in force; empty once it reads
	// one it takes. Only the watcher resolves the users and groups it
	// names (through the system's name services), so tend status and tend
	// top report a name it does not know from here.
	ConfigProblem string `json:"config_problem,omitempty"`
	// AnswersByOwner says that the watcher answers each user's requests
	// in that user's directory (spool.Dir.OutcomesOf); one of tend before
	// 2026-11-28 answered every request in outcomes/, and a client of a
	// member reads its answers there while such a watcher runs.
	AnswersByOwner bool `json:"answers_by_owner,omitempty"`
}

// ReadWatcherInfo reads root's watcher.json.
func ReadWatcherInfo(root string) (WatcherInfo, error) {
	var info WatcherInfo
	path := layout.Root(root).WatcherInfo()
	b, err := os.ReadFile(path)
	if err != nil {
		return info, err
	}
	if err := json.Unmarshal(b, &info); err != nil {
		return info, fmt.Errorf("%s: %w", path, err)
	}
	return info, nil
}
