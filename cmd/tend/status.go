package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/tendhq/tend"
	"github.com/tendhq/tend/cmd/internal/runtext"
	"github.com/tendhq/tend/tracker"
	"github.com/tendhq/tend/watcher/config"
	"golang.org/x/sys/unix"
)

type statusCmd struct {
	JSON bool `help:"Print JSON."`
}

func (c *statusCmd) Help() string {
	return `Says whether a watcher runs on the root (decided by its lock, not by the
PID file), its PID, its keeper's, uptime and version, and how many runs are
in each state. A PID file left by a crashed watcher is reported and removed.
Exits 0 if a watcher runs, 6 if none does. Examples:
  tend status
  tend status --json`
}

// status is what "tend status --json" prints.
type status struct {
	Root      string     `json:"root"`
	Running   bool       `json:"running"`
	PID       int        `json:"pid,omitempty"`
	KeeperPID int        `json:"keeper_pid,omitempty"`
	StartedAt *time.Time `json:"started_at,omitempty"`
	UptimeSec int64      `json:"uptime_seconds,omitempty"`
	Version   string     `json:"version,omitempty"`
	// Durability is what the running watcher's records survive.
	Durability tracker.Durability `json:"durability,omitempty"`
	StalePID   int                `json:"stale_pid,omitempty"`
	Runs       map[string]int     `json:"runs"`
	// Problems are what a quick check of the history's end and the state
	// files found; tend fsck says more.
	Problems []string `json:"problems,omitempty"`
}

func (c *statusCmd) Run(e *env) error {
	s, err := readStatus(e.root)
	if err != nil {
		return err
	}
	if c.JSON {
		b, _ := json.MarshalIndent(s, "", "  ")
		fmt.Fprintln(e.stdout, string(b))
	} else {
		printStatus(e, s)
	}
	if !s.Running {
		return exitf(exitNoWatcher, "")
	}
	return nil
}

// readStatus finds out what status prints: whether a watcher runs (by its
// lock), the runs per state, and problems a quick look finds.
func readStatus(root string) (status, error) {
	s := status{Root: root, Runs: map[string]int{}}
	client, err := tend.Open(root, tend.Options{})
	if err != nil {
		return s, err
	}
	running, _, err := tracker.ProbeWatcher(root)
	if err != nil {
		return s, err
	}
	configProblem := ""
	if running {
		s.Running = true
		if info, ok := client.LiveInfo(); ok {
			s.PID, s.KeeperPID, s.Version, s.Durability = info.PID, info.KeeperPID, info.Version, info.Durability
			configProblem = info.ConfigProblem // it alone resolves the users and groups named
			s.StartedAt = &info.StartedAt
			s.UptimeSec = int64(time.Since(info.StartedAt).Seconds())
		}
	} else if pid, ok := removeStale(root); ok {
		s.StalePID = pid
	}
	runs, errs := tracker.NewStore(root).ListBrief() // counts states only
	for _, st := range runs {
		s.Runs[string(st.State)]++
	}
	for _, err := range errs {
		s.Problems = append(s.Problems, err.Error())
	}
	if configProblem != "" {
		s.Problems = append(s.Problems, configProblem+" (the watcher keeps the settings it has; a new one will not start)")
	} else if _, err := config.LoadAsOwner(root, config.Default, config.Names{}); err != nil {
		s.Problems = append(s.Problems, err.Error()+" (a running watcher keeps the settings it has; a new one will not start)")
	}
	if err := tracker.CheckHistoryEnd(root); err != nil {
		s.Problems = append(s.Problems, err.Error())
	}
	if p := tracker.PendingProblem(root); p != "" {
		s.Problems = append(s.Problems, p)
	}
	if p := tracker.SyncFailureProblem(root); p != "" {
		s.Problems = append(s.Problems, p)
	}
	if msg := runtext.DiskProblem(root); msg != "" {
		s.Problems = append(s.Problems, msg)
	}
	// Checked for a watcher running as the root's owner, whose it is,
	// whoever asks.
	var owner unix.Stat_t
	if unix.Stat(root, &owner) == nil {
		for _, p := range tracker.CheckAccess(root, int(owner.Uid)) {
			s.Problems = append(s.Problems, p.String())
		}
	}
	return s, nil
}

func printStatus(e *env, s status) {
	switch {
	case s.Running && s.PID == 0:
		fmt.Fprintf(e.stdout, "watcher: starting on %s\n", s.Root)
	case s.Running:
		fmt.Fprintf(e.stdout, "watcher: running on %s (pid %d, keeper %d), up %v, version %s\n",
			s.Root, s.PID, s.KeeperPID, time.Duration(s.UptimeSec)*time.Second, s.Version)
	default:
		fmt.Fprintf(e.stdout, "watcher: not running on %s\n", s.Root)
	}
	if s.Durability == tracker.WatcherCrash {
		fmt.Fprintf(e.stdout, "durability: %s: records are not fsynced; a power loss or a system crash may take back the last changes\n", s.Durability)
	}
	if s.StalePID != 0 {
		fmt.Fprintf(e.stdout, "removed a stale PID file: pid %d is no watcher of this root\n", s.StalePID)
	}
	states := make([]string, 0, len(s.Runs))
	for state, n := range s.Runs {
		states = append(states, fmt.Sprintf("%d %s", n, state))
	}
	sort.Strings(states)
	if len(states) == 0 {
		states = []string{"none"}
	}
	fmt.Fprintf(e.stdout, "runs: %s\n", strings.Join(states, ", "))
	for _, p := range s.Problems {
		fmt.Fprintf(e.stdout, "problem: %s\n", runtext.Printable(fmt.Sprint(p)))
	}
	if len(s.Problems) > 0 {
		fmt.Fprintln(e.stdout, "(run tend fsck for a full check)")
	}
}
