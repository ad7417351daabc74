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
	var repaired []string
	var left []tracker.Problem // what --repair found and left, with why
	if c.Repair {
		// It writes there, as this user: only in a root nobody else could
		// change (sudo tend fsck --repair in a teammate's checkout).
		if err := tracker.CheckSafe(e.root, os.Geteuid()); err != nil {
			return exitf(exitRefused, "fsck --repair: %v", err)
		}
		// Said as tend up says it, naming the root: the repair would stop
		// on the first file it wrote (the start log), naming that file.
		if err := tracker.CheckWritable(e.root); err != nil {
			return exitf(exitFailed, "fsck --repair: %v", err)
		}
		release, err := tracker.HoldOffWatcher(e.root)
		if err != nil {
			return exitf(exitRefused, "fsck --repair: %v", err)
		}
		defer release() // held through the notice's removal below too
		repaired, left, err = tracker.Repair(e.root, tracker.IdentifyRun)
		c.printRepaired(e, repaired)
		if err != nil {
			c.printLeft(e, nil, left) // no check follows: said here, once
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
			left = append(left, tracker.Problem{Path: problems[0].Path, What: err.Error()})
		case err != nil:
			c.printLeft(e, problems, left)
			return err
		default:
			line := problems[0].Path + ": removed (synced; the records and the history check out after the failed flush it recorded)"
			repaired = append(repaired, line)
			c.printRepaired(e, []string{line})
			problems = check(e.root)
		}
	}
	if c.JSON {
		texts, notRepaired := []string{}, []string(nil)
		for _, p := range problems {
			texts = append(texts, fmt.Sprint(p))
		}
		for _, p := range left {
			notRepaired = append(notRepaired, p.String())
		}
		writeJSON(e.stdout, fsckReport{Root: e.root, Problems: texts, Repaired: repaired, NotRepaired: notRepaired})
	} else if c.Repair {
		c.printLeft(e, problems, left)
	} else {
		for _, p := range problems {
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

// printRepaired prints what --repair did, a line each, unless the output
// is JSON.
func (c *fsckCmd) printRepaired(e *env, lines []string) {
	if c.JSON {
		return
	}
	for _, line := range lines {
		fmt.Fprintln(e.stdout, "repaired:", runtext.Printable(line))
	}
}

// printLeft prints, after a repair, each problem the check that follows
// still finds, once: as "not repaired: PATH: what", and "; why" where the
// repair left it knowingly (left, by path). What it left that the check
// no longer finds is printed as "not repaired: PATH: why". Unless the
// output is JSON.
func (c *fsckCmd) printLeft(e *env, problems, left []tracker.Problem) {
	if c.JSON {
		return
	}
	why := make(map[string]string, len(left))
	for _, p := range left {
		if w, ok := why[p.Path]; ok {
			p.What = w + "; " + p.What
		}
		why[p.Path] = p.What
	}
	said := make(map[string]bool, len(left))
	for _, p := range problems {
		line := p.String()
		if w, ok := why[p.Path]; ok {
			line += "; " + w
			said[p.Path] = true
		}
		fmt.Fprintln(e.stdout, "not repaired:", runtext.Printable(line)) // it may quote what a member wrote
	}
	for _, p := range left {
		if !said[p.Path] {
			said[p.Path] = true
			fmt.Fprintln(e.stdout, "not repaired:", runtext.Printable(p.Path+": "+why[p.Path]))
		}
	}
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
