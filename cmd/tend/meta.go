package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/tendhq/tend/spool"
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
	body := map[string]any{"labels": map[string]*string{}}
	for _, l := range c.Labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return exitf(exitUsage, "label: %q: want K=V (K= removes K)", l)
		}
		if v == "" {
			body["labels"].(map[string]*string)[k] = nil
		} else {
			body["labels"].(map[string]*string)[k] = &v
		}
	}
	e.json = c.JSON
	return submitMeta(e, spool.Name{ID: c.ID, Verb: spool.VerbLabel}, body, c.Session, c.IfRev)
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
	e.json = c.JSON
	return submitMeta(e, spool.Name{ID: c.ID, Verb: spool.VerbNote}, map[string]any{"text": strings.Join(c.Text, " ")}, c.Session, c.IfRev)
}

// submitMeta submits a label or note request and prints its outcome.
func submitMeta(e *env, n spool.Name, body map[string]any, session string, ifRev int64) error {
	if err := spool.ValidID(n.ID); err != nil {
		return exitf(exitUsage, "%s: %v", n.Verb, err)
	}
	if session != "" {
		body["session"] = session
	}
	if ifRev > 0 {
		body["if_rev"] = ifRev
	}
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	outcome, detail, err := submit(e, n, b, true)
	if err != nil {
		return err
	}
	return outcomeExit(e, n, outcome, detail)
}

// outcomeExit prints a control request's outcome line and turns it into
// the command's exit code.
func outcomeExit(e *env, n spool.Name, outcome, detail string) error {
	if err := printOutcome(e, n, outcome, detail, false); err != nil {
		return err
	}
	return exitFor(n, outcome, detail)
}

// outcomeLine is a request's outcome as --json prints it.
type outcomeLine struct {
	ID      string `json:"id"`
	Verb    string `json:"verb"`
	Outcome string `json:"outcome"`
	Detail  string `json:"detail,omitempty"`
}

// printOutcome prints an outcome: "outcome[: detail]" (after "ID: " if
// withID), or a JSON line with --json.
func printOutcome(e *env, n spool.Name, outcome, detail string, withID bool) error {
	if e.json {
		return writeJSONLine(e, outcomeLine{ID: n.ID, Verb: n.Verb, Outcome: outcome, Detail: detail})
	}
	line := outcome
	if detail != "" {
		line += ": " + detail
	}
	if withID {
		line = n.ID + ": " + line
	}
	_, err := fmt.Fprintln(e.stdout, line)
	return err
}

// exitFor is the exit code (and, for a refusal, the message) that a
// control request's outcome calls for: the table in docs/protocol.md.
func exitFor(n spool.Name, outcome, detail string) error {
	switch outcome {
	case spool.Updated, spool.Canceled, spool.Deleted, spool.Signaled, spool.Restarted, spool.Paused, spool.Resumed:
		return nil
	case spool.AlreadyFinished:
		return exitf(exitFinished, "")
	case spool.NotFound:
		return exitf(exitNotFound, "")
	}
	code := exitRefused
	if outcome == spool.Conflict {
		code = exitConflict
	}
	return exitf(code, "%s %s: %s: %s", n.Verb, n.ID, outcome, detail)
}
