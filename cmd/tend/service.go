package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tendhq/tend"
	"github.com/tendhq/tend/spool"
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
	ID      string   `arg:"" help:"The run."`
	Rest    []string `arg:"" name:"signal" help:"The signal: HUP, USR1, TERM, ... with or without SIG, or its number (15, no sign); after more runs to signal, if any (tend signal ID... SIG)."`
	Session string   `help:"Act as this session: only its runs may be acted on." env:"TEND_SESSION"`
	IfRev   int64    `help:"Act only if the run's record is still at this revision (else: conflict, exit 7); with one run."`
	JSON    bool     `help:"Print the outcome as a JSON line, one a run with several (docs/schema/outcome.schema.json)."`
}

func (c *signalCmd) Help() string {
	return `Sends a signal to each run's process group, after checking it is still
the run's: tend signal ID... SIG, the signal last. Several runs are
signaled with one request (a selector request); it prints "ID: outcome" a
line, in the order given, and exits 0 if every one was signaled, else with
the code of the first run named that was not (3 not found, 4 not running
or refused). STOP, TSTP, TTIN, TTOU and CONT are refused: tend would
not know the run stopped or went on (its state and timeout would be
wrong); tend pause and tend resume do that. Examples:
  tend signal web HUP
  tend signal worker-1 worker-2 USR1`
}

func (c *signalCmd) Run(e *env) error {
	// One positional, then a cumulative one: at least a run and a signal
	// (flagsFirst lets flags come among them).
	ids := append([]string{c.ID}, c.Rest[:len(c.Rest)-1]...)
	sig := c.Rest[len(c.Rest)-1]
	if err := signalLast(ids, sig); err != nil {
		return err
	}
	if len(ids) == 1 {
		one := controlArgs{ID: ids[0], Session: c.Session, IfRev: c.IfRev, JSON: c.JSON}
		return one.send(e, "signal", func(cl *tend.Client, o tend.Control) (tend.Outcome, error) {
			out, err := cl.Signal(e.context(), ids[0], sig, o)
			if errors.Is(err, tend.ErrInvalid) { // the signal: named with the run, as its outcome would be
				err = fmt.Errorf("signal %s: %w", ids[0], err)
			}
			return out, err
		})
	}
	return c.signalMany(e, ids, sig)
}

// signalLast returns a usage error that says where the signal goes when
// it was named first, as kill(1) names it ("tend signal HUP web"): else
// the last run is refused as an unknown signal, which does not say what
// was wrong with the command line.
func signalLast(ids []string, sig string) error {
	if spool.IsSignal(sig) || !spool.IsSignal(ids[0]) {
		return nil
	}
	want := append(slices.Clone(ids[1:]), sig, ids[0])
	return exitf(exitUsage, "signal: the signal comes last, after the runs: tend signal %s", strings.Join(want, " "))
}

// signalMany signals runs ids with one selector request, prints one line
// a run in the order given, and exits 0 only if every one was signaled.
func (c *signalCmd) signalMany(e *env, ids []string, sig string) error {
	if c.IfRev != 0 {
		return exitf(exitUsage, "signal: --if-rev is one run's revision: give one ID with it")
	}
	var uniq []string
	for _, id := range ids {
		if err := checkID("signal", id); err != nil {
			return err
		}
		if !slices.Contains(uniq, id) {
			uniq = append(uniq, id)
		}
	}
	num, err := spool.SignalNamed(sig)
	if err != nil {
		return exitf(exitUsage, "signal: %v", err)
	}
	e.json = c.JSON
	client, err := e.client(c.Session)
	if err != nil {
		return err
	}
	outcomes, err := client.SignalSelected(e.context(), spool.Select{IDs: uniq}, num)
	if err != nil {
		return err
	}
	return printEach(e, uniq, spool.VerbSignal, outcomes, func(o tend.Outcome) bool { return o.Outcome == spool.Signaled })
}

type restartCmd struct {
	controlArgs
	Grace *time.Duration `help:"Time between SIGTERM and SIGKILL (default: the run's own grace; 0: SIGKILL at once)."`
}

func (c *restartCmd) Help() string {
	return `Stops the run (SIGTERM, then SIGKILL after the grace) and starts it
again under the same ID; its attempt count grows. A run waiting to be
restarted starts at once. Example:
  tend restart web`
}

func (c *restartCmd) Run(e *env) error {
	grace, err := stopGrace("restart", c.Grace)
	if err != nil {
		return err
	}
	return c.send(e, "restart", func(cl *tend.Client, o tend.Control) (tend.Outcome, error) {
		o.Grace = grace
		return cl.Restart(e.context(), c.ID, o)
	})
}

type pauseCmd struct{ controlArgs }

func (c *pauseCmd) Help() string {
	return `Stops the run's process group with SIGSTOP (state paused); its timeout
stops counting, and its health checks, until tend resume. (tend signal
refuses STOP and CONT, which would leave tend's record wrong.) Example:
  tend pause build`
}

func (c *pauseCmd) Run(e *env) error {
	return c.send(e, "pause", func(cl *tend.Client, o tend.Control) (tend.Outcome, error) {
		return cl.Pause(e.context(), c.ID, o)
	})
}

type resumeCmd struct{ controlArgs }

func (c *resumeCmd) Help() string {
	return `Continues a paused run's process group with SIGCONT; its timeout counts
again. Example:
  tend resume build`
}

func (c *resumeCmd) Run(e *env) error {
	return c.send(e, "resume", func(cl *tend.Client, o tend.Control) (tend.Outcome, error) {
		return cl.Resume(e.context(), c.ID, o)
	})
}
