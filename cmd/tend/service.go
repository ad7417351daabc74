package main

import (
	"encoding/json"
	"time"

	"github.com/tendhq/tend/spool"
)

// control is what the service verbs share: a run, a session, an if_rev.
type control struct {
	ID      string `arg:"" help:"The run."`
	Session string `help:"Act as this session: only its runs may be acted on." env:"TEND_SESSION"`
	IfRev   int64  `help:"Act only if the run's record is still at this revision (else: conflict, exit 7)."`
	JSON    bool   `help:"Print the outcome as a JSON line (docs/schema/outcome.schema.json)."`
}

// send submits the request and turns its outcome into an exit code.
func (c control) send(e *env, verb string, body map[string]any) error {
	if err := spool.ValidID(c.ID); err != nil {
		return exitf(exitUsage, "%s: %v", verb, err)
	}
	if c.Session != "" {
		body["session"] = c.Session
	}
	if c.IfRev > 0 {
		body["if_rev"] = c.IfRev
	}
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	n := spool.Name{ID: c.ID, Verb: verb}
	e.json = c.JSON
	outcome, detail, err := submit(e, n, b, true)
	if err != nil {
		return err
	}
	return outcomeExit(e, n, outcome, detail)
}

type signalCmd struct {
	control
	Signal string `arg:"" help:"The signal: HUP, USR1, TERM, ... (or its number)."`
}

func (c *signalCmd) Help() string {
	return `Sends a signal to the run's process group, after checking it is still
the run's. Example: tend signal web HUP`
}

func (c *signalCmd) Run(e *env) error {
	if _, err := spool.SignalNamed(c.Signal); err != nil {
		return exitf(exitUsage, "signal: %v", err)
	}
	return c.send(e, spool.VerbSignal, map[string]any{"signal": c.Signal})
}

type restartCmd struct {
	control
	Grace time.Duration `help:"Time between SIGTERM and SIGKILL (default: the run's own grace)."`
}

func (c *restartCmd) Help() string {
	return `Stops the run (SIGTERM, then SIGKILL after the grace) and starts it
again under the same ID; its attempt count grows. A run waiting to be
restarted starts at once. Example: tend restart web`
}

func (c *restartCmd) Run(e *env) error {
	body := map[string]any{}
	if c.Grace > 0 {
		body["grace"] = c.Grace.String()
	}
	return c.send(e, spool.VerbRestart, body)
}

type pauseCmd struct{ control }

func (c *pauseCmd) Help() string {
	return `Stops the run's process group with SIGSTOP (state paused); its timeout
stops counting. Example: tend pause build`
}

func (c *pauseCmd) Run(e *env) error { return c.send(e, spool.VerbPause, map[string]any{}) }

type resumeCmd struct{ control }

func (c *resumeCmd) Help() string {
	return "Continues a paused run's process group with SIGCONT. Example: tend resume build"
}

func (c *resumeCmd) Run(e *env) error { return c.send(e, spool.VerbResume, map[string]any{}) }
