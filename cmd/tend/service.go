package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/tendhq/tend"
)

// controlArgs is what the service verbs share: a run, a session, an
// if_rev.
type controlArgs struct {
	ID      string `arg:"" help:"The run."`
	Session string `help:"Act as this session: only its runs may be acted on." env:"TEND_SESSION"`
	IfRev   int64  `help:"Act only if the run's record is still at this revision (else: conflict, exit 7)."`
	JSON    bool   `help:"Print the outcome as a JSON line (docs/schema/outcome.schema.json)."`
}

// send checks the ID, then sends the request and turns its outcome into
// an exit code.
func (c controlArgs) send(e *env, verb string, send func(*tend.Client, tend.Control) (tend.Outcome, error)) error {
	if err := checkID(verb, c.ID); err != nil {
		return err
	}
	e.json = c.JSON
	return control(e, c.Session, func(cl *tend.Client) (tend.Outcome, error) {
		return send(cl, tend.Control{IfRev: c.IfRev})
	})
}

type signalCmd struct {
	controlArgs
	Signal string `arg:"" help:"The signal: HUP, USR1, TERM, ... with or without SIG, or its number (15, no sign)."`
}

func (c *signalCmd) Help() string {
	return `Sends a signal to the run's process group, after checking it is still
the run's. Example:
  tend signal web HUP`
}

func (c *signalCmd) Run(e *env) error {
	return c.send(e, "signal", func(cl *tend.Client, o tend.Control) (tend.Outcome, error) {
		out, err := cl.Signal(e.context(), c.ID, c.Signal, o)
		if errors.Is(err, tend.ErrInvalid) { // the signal: named with the run, as its outcome would be
			err = fmt.Errorf("signal %s: %w", c.ID, err)
		}
		return out, err
	})
}

type restartCmd struct {
	controlArgs
	Grace time.Duration `help:"Time between SIGTERM and SIGKILL (default: the run's own grace)."`
}

func (c *restartCmd) Help() string {
	return `Stops the run (SIGTERM, then SIGKILL after the grace) and starts it
again under the same ID; its attempt count grows. A run waiting to be
restarted starts at once. Example:
  tend restart web`
}

func (c *restartCmd) Run(e *env) error {
	return c.send(e, "restart", func(cl *tend.Client, o tend.Control) (tend.Outcome, error) {
		o.Grace = c.Grace
		return cl.Restart(e.context(), c.ID, o)
	})
}

type pauseCmd struct{ controlArgs }

func (c *pauseCmd) Help() string {
	return `Stops the run's process group with SIGSTOP (state paused); its timeout
stops counting. Example:
  tend pause build`
}

func (c *pauseCmd) Run(e *env) error {
	return c.send(e, "pause", func(cl *tend.Client, o tend.Control) (tend.Outcome, error) {
		return cl.Pause(e.context(), c.ID, o)
	})
}

type resumeCmd struct{ controlArgs }

func (c *resumeCmd) Help() string {
	return `Continues a paused run's process group with SIGCONT. Example:
  tend resume build`
}

func (c *resumeCmd) Run(e *env) error {
	return c.send(e, "resume", func(cl *tend.Client, o tend.Control) (tend.Outcome, error) {
		return cl.Resume(e.context(), c.ID, o)
	})
}
