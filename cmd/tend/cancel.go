package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/tendhq/tend/spool"
)

type cancelCmd struct {
	ID      string        `arg:"" help:"The run to cancel."`
	Grace   time.Duration `help:"Time between SIGTERM and SIGKILL (default: the run's own grace)."`
	Session string        `help:"Act as this session." env:"TEND_SESSION"`
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
	if err := spool.ValidID(c.ID); err != nil {
		return exitf(exitUsage, "cancel: %v", err)
	}
	req := spool.Cancel{Session: c.Session}
	if c.Grace > 0 {
		g := spool.Duration(c.Grace)
		req.Grace = &g
	}
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	outcome, detail, err := submit(e, spool.Name{ID: c.ID, Verb: spool.VerbCancel}, body, true)
	if err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, outcome)
	switch outcome {
	case spool.Canceled:
		return nil
	case spool.AlreadyFinished:
		return exitf(exitFinished, "")
	case spool.NotFound:
		return exitf(exitNotFound, "")
	}
	return exitf(exitRefused, "cancel %s: %s: %s", c.ID, outcome, detail)
}
