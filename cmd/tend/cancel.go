package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
)

type cancelCmd struct {
	ID      string        `arg:"" optional:"" help:"The run to cancel."`
	Grace   time.Duration `help:"Time between SIGTERM and SIGKILL (default: the run's own grace)."`
	Session string        `help:"Act as this session: only its runs may be canceled." env:"TEND_SESSION"`
	All     bool          `help:"Cancel every active run of --session (and nothing else)."`
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
Canceling twice is safe. Example: tend cancel web --grace 2s`
}

func (c *cancelCmd) Run(e *env) error {
	e.json = c.JSON
	if c.All {
		return c.cancelAll(e)
	}
	if err := spool.ValidID(c.ID); err != nil {
		return exitf(exitUsage, "cancel: %v", err)
	}
	body, err := c.body()
	if err != nil {
		return err
	}
	n := spool.Name{ID: c.ID, Verb: spool.VerbCancel}
	outcome, detail, err := submit(e, n, body, true)
	if err != nil {
		return err
	}
	if e.json {
		if err := printOutcome(e, n, outcome, detail, false); err != nil {
			return err
		}
	} else {
		fmt.Fprintln(e.stdout, outcome) // the outcome alone: scripts compare it
	}
	return exitFor(n, outcome, detail)
}

func (c *cancelCmd) body() ([]byte, error) {
	req := spool.Cancel{Session: c.Session}
	if c.IfRev > 0 {
		req.IfRev = &c.IfRev
	}
	if c.Grace > 0 {
		g := spool.Duration(c.Grace)
		req.Grace = &g
	}
	return json.Marshal(req)
}

// cancelAll cancels every active run of the session, side by side, and
// prints one line per run: ID: outcome.
func (c *cancelCmd) cancelAll(e *env) error {
	if c.ID != "" {
		return exitf(exitUsage, "cancel: give a run ID or --all, not both")
	}
	if c.Session == "" {
		return exitf(exitUsage, "cancel --all: name the session whose runs to cancel (--session or TEND_SESSION)")
	}
	body, err := c.body()
	if err != nil {
		return err
	}
	runs, _ := tracker.NewStore(e.root).ListBrief() // sessions and states only
	var reqs []request
	for _, st := range runs {
		if st.Session == c.Session && !tracker.Final(st.State) {
			reqs = append(reqs, request{spool.Name{ID: st.ID, Verb: spool.VerbCancel}, body})
		}
	}
	if len(reqs) == 0 {
		return nil
	}
	answers, err := submitAll(e, reqs, true)
	if err != nil {
		return err
	}
	for i, a := range answers {
		if e.json {
			printOutcome(e, reqs[i].name, a.outcome, a.detail, true)
		} else {
			fmt.Fprintf(e.stdout, "%s: %s\n", reqs[i].name.ID, a.outcome)
		}
	}
	return nil
}
