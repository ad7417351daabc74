package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/tendhq/tend/cmd/internal/runtext"
	"github.com/tendhq/tend/procfs"
	"github.com/tendhq/tend/tracker"
	"github.com/tendhq/tend/tracker/layout"
)

type fsckCmd struct {
	JSON   bool `help:"Print {root, problems, repaired} as JSON (docs/schema/fsck.schema.json)."`
	Repair bool `help:"Fix what can be fixed: bad history lines move to a side file, broken state files are kept aside and rebuilt, partial writes are removed, and a failed sync's notice (unsynced) once nothing else is wrong; requests whose bytes were lost are left, and said so. Refused while a watcher runs."`
}

func (c *fsckCmd) Help() string {
	return `Checks the whole root: every history line, every state file against
its run directory, the history and /proc, leftover temporary files,
orphaned outcomes and run directories, the requests runs were claimed
from, claims/ and rejected/. Prints each problem with its path
and exits 1 if there is any. While a watcher runs, what it finds is checked
again a second later, and only what is still there is a problem (not a
write in flight). --repair is refused while a watcher runs: stop it
(keeping its runs) first. Examples:
  tend fsck
  tend fsck || { tend down --keep-runs; tend fsck --repair; tend up; }`
}

func (c *fsckCmd) Run(e *env) error {
	var repaired, notRepaired []string
	if c.Repair {
		// It writes there, as this user: only in a root nobody else could
		// change (sudo tend fsck --repair in a teammate's checkout).
		if err := tracker.CheckSafe(e.root, os.Geteuid()); err != nil {
			return exitf(exitRefused, "fsck --repair: %v", err)
		}
		release, err := tracker.HoldOffWatcher(e.root)
		if err != nil {
			return exitf(exitRefused, "fsck --repair: %v", err)
		}
		defer release() // held through the notice's removal below too
		var left []tracker.Problem
		repaired, left, err = tracker.Repair(e.root, tracker.IdentifyRun)
		for _, p := range left {
			notRepaired = append(notRepaired, p.String())
		}
		if !c.JSON {
			for _, line := range repaired {
				fmt.Fprintln(e.stdout, "repaired:", runtext.Printable(line))
			}
			for _, line := range notRepaired {
				fmt.Fprintln(e.stdout, "not repaired:", runtext.Printable(line))
			}
		}
		if err != nil {
			return err
		}
	}
	problems := check(e.root)
	if c.Repair && len(problems) == 1 && problems[0].Path == layout.Root(e.root).Unsynced() {
		// A failed flush, and nothing else wrong that fsck can see: in a
		// later boot, what the flush lost would show in the records and
		// the history; in its own, the page cache still holds it.
		switch err := tracker.ClearSyncFailure(e.root); {
		case errors.Is(err, tracker.ErrFailedThisBoot):
			line := fmt.Sprintf("%s: %v", problems[0].Path, err)
			notRepaired = append(notRepaired, line)
			if !c.JSON {
				fmt.Fprintln(e.stdout, "not repaired:", runtext.Printable(line))
			}
		case err != nil:
			return err
		default:
			line := problems[0].Path + ": removed (synced; the records and the history check out after the failed flush it recorded)"
			repaired = append(repaired, line)
			if !c.JSON {
				fmt.Fprintln(e.stdout, "repaired:", runtext.Printable(line))
			}
			problems = check(e.root)
		}
	}
	if c.JSON {
		texts := []string{}
		for _, p := range problems {
			texts = append(texts, fmt.Sprint(p))
		}
		writeJSON(e.stdout, fsckReport{Root: e.root, Problems: texts, Repaired: repaired, NotRepaired: notRepaired})
	}
	for _, p := range problems {
		if !c.JSON {
			fmt.Fprintln(e.stdout, runtext.Printable(p.String())) // it may quote what a member wrote
		}
	}
	if len(problems) > 0 {
		return exitf(exitFailed, "%d problem%s in %s", len(problems), runtext.Plural(len(problems)), e.root)
	}
	if !c.JSON {
		fmt.Fprintf(e.stdout, "%s: no problems\n", e.root)
	}
	return nil
}

// fsckReport is what fsck --json prints.
type fsckReport struct {
	Root        string   `json:"root"`
	Problems    []string `json:"problems"`
	Repaired    []string `json:"repaired,omitempty"`
	NotRepaired []string `json:"not_repaired,omitempty"`
}

// settle is how long fsck waits before it checks again a root that a
// watcher is writing to: a write in flight is done well within it.
const settle = time.Second

// check checks root, twice if a watcher runs on it and the first check
// found problems, and returns those found both times (see
// tracker.Persisting).
func check(root string) []tracker.Problem {
	problems := tracker.Check(root, processAlive)
	if running, _, _ := tracker.ProbeWatcher(root); running && len(problems) > 0 {
		time.Sleep(settle)
		problems = tracker.Persisting(problems, tracker.Check(root, processAlive))
	}
	return problems
}

// processAlive reports whether pid is still the process that started at
// start.
func processAlive(pid int, start uint64) bool {
	st, err := procfs.ReadStat(pid)
	return err == nil && st.StartTime == start && st.State != 'Z'
}
