package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/tendhq/tend"
)

type labelCmd struct {
	ID      string   `arg:"" help:"The run to label."`
	Labels  []string `arg:"" name:"label" help:"K=V sets label K; K= removes it."`
	IfRev   int64    `help:"Change it only if its record is still at this revision (else: conflict, exit 7)."`
	Session string   `help:"Act as this session: only its runs may be changed." env:"TEND_SESSION"`
	JSON    bool     `help:"Print the outcome as a JSON line (docs/schema/outcome.schema.json)."`
}

func (c *labelCmd) Help() string {
	return `Sets or removes labels of a run, live or finished, through the spool
(verb label), so nobody edits state.json by hand. Example:
  tend label build owner=ci flaky=
  tend label build --if-rev 4 reviewed=yes`
}

func (c *labelCmd) Run(e *env) error {
	if err := checkID("label", c.ID); err != nil {
		return err
	}
	labels := map[string]*string{}
	for _, l := range c.Labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return exitf(exitUsage, "label: %q: want K=V (K= removes K)", l)
		}
		if v == "" {
			labels[k] = nil
		} else {
			labels[k] = &v
		}
	}
	e.json = c.JSON
	return control(e, c.Session, func(cl *tend.Client) (tend.Outcome, error) {
		return cl.Label(e.context(), c.ID, labels, tend.Control{IfRev: c.IfRev})
	})
}

type noteCmd struct {
	ID      string   `arg:"" help:"The run to annotate."`
	Text    []string `arg:"" help:"The note (its words are joined by spaces)."`
	IfRev   int64    `help:"Add it only if the record is still at this revision (else: conflict, exit 7)."`
	Session string   `help:"Act as this session: only its runs may be changed." env:"TEND_SESSION"`
	JSON    bool     `help:"Print the outcome as a JSON line (docs/schema/outcome.schema.json)."`
}

func (c *noteCmd) Help() string {
	return `Attaches a line of text to a run's record (verb note). Example:
  tend note build "failed on the flaky network test; retried as build-2"`
}

func (c *noteCmd) Run(e *env) error {
	if err := checkID("note", c.ID); err != nil {
		return err
	}
	e.json = c.JSON
	return control(e, c.Session, func(cl *tend.Client) (tend.Outcome, error) {
		return cl.Note(e.context(), c.ID, strings.Join(c.Text, " "), tend.Control{IfRev: c.IfRev})
	})
}

// checkID returns a usage error naming verb if id is not a valid run ID.
func checkID(verb, id string) error {
	if id == "" {
		return exitf(exitUsage, "%s: no run ID given (tend %s ID; tend ls lists the runs)", verb, verb)
	}
	if err := tend.CheckID(id); err != nil {
		return exitf(exitUsage, "%s: %v", verb, err)
	}
	return nil
}

// control sends a control request through a client acting as session,
// prints its outcome line and turns it into the command's exit code.
func control(e *env, session string, send func(*tend.Client) (tend.Outcome, error)) error {
	client, err := e.client(session)
	if err != nil {
		return err
	}
	o, err := send(client)
	if o.Outcome == "" {
		return err // not answered
	}
	if err := printOutcome(e, o, false); err != nil {
		return err
	}
	return outcomeErr(o)
}

// printOutcome prints an outcome: "outcome[: detail]" (after "ID: " if
// withID), or a JSON line with --json (docs/schema/outcome.schema.json).
func printOutcome(e *env, o tend.Outcome, withID bool) error {
	if e.json {
		return writeJSONLine(e, o)
	}
	line := o.String()
	if withID {
		line = o.ID + ": " + line
	}
	_, err := fmt.Fprintln(e.stdout, line)
	return err
}

// outcomeErr is the exit code (and, for a refusal, the message) that a
// control request's outcome calls for: the table in docs/protocol.md.
func outcomeErr(o tend.Outcome) error {
	err := o.Err()
	switch {
	case err == nil:
		return nil
	case errors.Is(err, tend.ErrFinished):
		return exitf(exitFinished, "%v", err)
	case errors.Is(err, tend.ErrNotFound):
		return exitf(exitNotFound, "%v", err)
	case errors.Is(err, tend.ErrConflict):
		return exitf(exitConflict, "%v", err)
	}
	return exitf(exitRefused, "%v", err)
}
