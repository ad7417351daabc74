package main

import (
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/tendhq/tend"
	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
)

type cancelCmd struct {
	IDs     []string       `arg:"" optional:"" name:"id" help:"The runs to cancel (several: with one request)."`
	Grace   *time.Duration `help:"Time between SIGTERM and SIGKILL (default: the run's own grace; 0: SIGKILL at once)."`
	Session *string        `help:"Act as this session: only its runs may be canceled (default: $TEND_SESSION)."`
	All     bool           `help:"Cancel every active run: of --session (or $TEND_SESSION) if one is named, of no session with an empty --session (--session=), else of every session (an operator's)."`
	IfRev   int64          `help:"Cancel only if the run's record is still at this revision (else: conflict, exit 7); with one run."`
	JSON    bool           `help:"Print the outcome as a JSON line, one a run with several or --all (docs/schema/outcome.schema.json)."`
}

func (c *cancelCmd) Help() string {
	return `Sends SIGTERM to the run's process group, then SIGKILL after the grace,
and prints the outcome once the run has ended:
  canceled          the run was stopped (exit 0)
  already_finished  it had ended already (exit 5)
  not_found         no run has this ID (exit 3)
  not_cancellable   it cannot be signaled (exit 4)
Several runs are canceled with one request (a selector request), side by
side; it prints "ID: outcome" a line, in the order given, once every one
has ended, and exits 0 if every one was canceled or had already finished,
else with the code of the first run named that was neither (3 not found,
4 refused). Canceling twice is safe; the watcher keeps running. Examples:
  tend cancel web --grace 2s
  tend cancel test-1 test-2 test-3
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
	grace, err := stopGrace("cancel", c.Grace)
	if err != nil {
		return err
	}
	if c.All {
		return c.cancelAll(e, grace)
	}
	if len(c.IDs) == 0 {
		return exitf(exitUsage, "cancel: no run ID given (tend cancel ID..., or tend cancel --all [--session S] for every run (of a session); tend ls lists the runs)")
	}
	var ids []string
	for _, id := range c.IDs {
		if err := checkID("cancel", id); err != nil {
			return err
		}
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	if len(ids) > 1 {
		return c.cancelMany(e, ids, grace)
	}
	session, _ := c.session()
	client, err := e.client(session)
	if err != nil {
		return err
	}
	o, err := client.Cancel(e.context(), ids[0], tend.Control{Grace: grace, IfRev: c.IfRev})
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

// cancelMany cancels runs ids with one selector request, prints one line
// a run in the order given, and exits 0 if every one was canceled or had
// already finished: what a script that cancels a batch asks is that none
// of them runs on, and one that ended meanwhile is no failure.
func (c *cancelCmd) cancelMany(e *env, ids []string, grace time.Duration) error {
	if c.IfRev != 0 {
		return exitf(exitUsage, "cancel: --if-rev is one run's revision: give one ID with it")
	}
	session, _ := c.session()
	client, err := e.client(session)
	if err != nil {
		return err
	}
	outcomes, err := client.CancelSelected(e.context(), spool.Select{IDs: ids}, tend.Control{Grace: grace})
	if err != nil {
		return err
	}
	return printEach(e, ids, spool.VerbCancel, outcomes, func(o tend.Outcome) bool {
		return o.Outcome == spool.Canceled || o.Outcome == spool.AlreadyFinished
	})
}

// printEach prints the outcome of each run of ids, as a selector request's
// answer lists them, in the order of ids ("ID: outcome", or a JSON line),
// says on stderr what went wrong with each one ok refuses, and returns
// the exit code of the first of ids that ok refuses (nil if none).
func printEach(e *env, ids []string, verb string, outcomes []tend.Outcome, ok func(tend.Outcome) bool) error {
	byID := make(map[string]tend.Outcome, len(outcomes))
	for _, o := range outcomes {
		byID[o.ID] = o
	}
	var first error
	for _, id := range ids {
		o, answered := byID[id]
		var err error
		if !answered {
			err = exitf(exitFailed, "%s %s: the watcher's answer does not list it", verb, id)
		} else {
			if err := printOutcome(e, tend.Outcome{ID: id, Verb: verb, Outcome: o.Outcome, Detail: o.Detail}, true); err != nil {
				return err
			}
			if !ok(o) {
				if err = outcomeErr(o); err == nil {
					err = exitf(exitFailed, "%s %s: %s", verb, id, o.Outcome)
				}
			}
		}
		if err != nil {
			fmt.Fprintln(e.stderr, "tend:", err)
			if first == nil {
				first = err
			}
		}
	}
	if ee, isExit := first.(*exitError); isExit {
		return exitf(ee.code, "") // said above, each
	}
	return first
}

// cancelAll cancels every active run of the session named (of none with
// --session ""), or, if none is named, of every session, side by side, and
// prints one line per run: ID: outcome. The watcher keeps running.
func (c *cancelCmd) cancelAll(e *env, grace time.Duration) error {
	if len(c.IDs) > 0 {
		return exitf(exitUsage, "cancel: give run IDs or --all, not both")
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
	outcomes, err := client.CancelSelected(e.context(), sel, tend.Control{Grace: grace})
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

// stopGrace is a cancel's or a restart's --grace for the client: not
// given, the run's own (0); given, that grace, 0 being none at all
// (tend.NoGrace: SIGKILL right after SIGTERM), as a request's "0s" is.
func stopGrace(verb string, g *time.Duration) (time.Duration, error) {
	switch {
	case g == nil:
		return 0, nil
	case *g < 0:
		return 0, exitf(exitUsage, "%s: --grace %s is negative (0 stops with no grace)", verb, *g)
	case *g == 0:
		return tend.NoGrace, nil
	}
	return *g, nil
}
