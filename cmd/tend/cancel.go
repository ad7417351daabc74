package main

import (
	"fmt"
	"os"
	"time"

	"github.com/tendhq/tend"
	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
)

type cancelCmd struct {
	ID      string        `arg:"" optional:"" help:"The run to cancel."`
	Grace   time.Duration `help:"Time between SIGTERM and SIGKILL (default: the run's own grace)."`
	Session *string       `help:"Act as this session: only its runs may be canceled (default: $TEND_SESSION)."`
	All     bool          `help:"Cancel every active run: of --session (or $TEND_SESSION) if one is named, of no session with an empty --session (--session=), else of every session (an operator's)."`
	IfRev   int64         `help:"Cancel only if the run's record is still at this revision (else: conflict, exit 7)."`
	JSON    bool          `help:"Print the outcome as a JSON line, one a run with --all (docs/schema/outcome.schema.json)."`
}

func (c *cancelCmd) Help() string {
	return `Sends SIGTERM to the run's process group, then SIGKILL after the grace,
and prints the outcome once the run has ended:
  canceled          the run was stopped (exit 0)
  already_finished  it had ended already (exit 5)
  not_found         no run has this ID (exit 3)
  not_cancellable   it cannot be signaled (exit 4)
Canceling twice is safe; the watcher keeps running. Examples:
  tend cancel web --grace 2s
  tend cancel --all --session agent-7   # every run of a session
  tend cancel --all                     # every run (as an operator)`
}

// session returns the session c acts as, and whether one is named at all:
// --session, even empty ("" is no session's runs with --all), else a
// TEND_SESSION that is not empty.
func (c *cancelCmd) session() (string, bool) {
	if c.Session != nil {
		return *c.Session, true
	}
	s := os.Getenv("TEND_SESSION")
	return s, s != ""
}

func (c *cancelCmd) Run(e *env) error {
	e.json = c.JSON
	if c.All {
		return c.cancelAll(e)
	}
	if c.ID == "" {
		return exitf(exitUsage, "cancel: no run ID given (tend cancel ID, or tend cancel --all [--session S] for every run (of a session); tend ls lists the runs)")
	}
	if err := checkID("cancel", c.ID); err != nil {
		return err
	}
	session, _ := c.session()
	client, err := e.client(session)
	if err != nil {
		return err
	}
	o, err := client.Cancel(e.context(), c.ID, tend.Control{Grace: c.Grace, IfRev: c.IfRev})
	if o.Outcome == "" {
		return err // not answered
	}
	if e.json {
		if err := printOutcome(e, o, false); err != nil {
			return err
		}
	} else {
		fmt.Fprintln(e.stdout, o.Outcome) // the outcome alone: scripts compare it
	}
	return outcomeErr(o)
}

// cancelAll cancels every active run of the session named (of none with
// --session ""), or, if none is named, of every session, side by side, and
// prints one line per run: ID: outcome. The watcher keeps running.
func (c *cancelCmd) cancelAll(e *env) error {
	if c.ID != "" {
		return exitf(exitUsage, "cancel: give a run ID or --all, not both")
	}
	if c.IfRev != 0 {
		return exitf(exitUsage, "cancel --all: --if-rev is one run's revision: give one ID with it")
	}
	session, scoped := c.session()
	client, err := e.client(session)
	if err != nil {
		return err
	}
	// One selector request: every run this client may act on (the
	// watcher keeps a session's request to its runs); the runs of no
	// session are named, as a selector has no word for them.
	sel := spool.Select{All: true}
	if scoped && session == "" {
		runs, err := client.List(e.context(), tend.Filter{Brief: true})
		if err != nil {
			return err
		}
		sel = spool.Select{IDs: []string{}}
		for _, r := range runs {
			if r.Session == "" && !tracker.Final(r.State) {
				sel.IDs = append(sel.IDs, r.ID)
			}
		}
		if len(sel.IDs) == 0 {
			c.noneActive(e, session, scoped)
			return nil
		}
	}
	outcomes, err := client.CancelSelected(e.context(), sel, tend.Control{Grace: c.Grace})
	if err != nil {
		return err
	}
	if len(outcomes) == 0 {
		c.noneActive(e, session, scoped)
	}
	for _, o := range outcomes {
		if e.json {
			printOutcome(e, o, true)
		} else {
			fmt.Fprintf(e.stdout, "%s: %s\n", o.ID, o.Outcome)
		}
	}
	return nil
}

// noneActive says, on stderr, that cancel --all found no active run to
// cancel: its silence read as a command that did nothing it was asked.
func (c *cancelCmd) noneActive(e *env, session string, scoped bool) {
	if e.json {
		return // no line: the outcomes are the lines
	}
	whose := "of any session"
	switch {
	case scoped && session == "":
		whose = "of no session"
	case scoped:
		whose = "of session " + session
	}
	fmt.Fprintf(e.stderr, "tend: cancel --all: no active run %s: nothing to cancel\n", whose)
}
