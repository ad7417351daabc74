package main

import (
	"fmt"

	"github.com/tendhq/tend"
	"github.com/tendhq/tend/cmd/internal/runtext"
)

type eventsCmd struct {
	Follow  bool   `short:"f" help:"Keep printing events as they happen."`
	Session string `help:"Only events of this session's runs." env:"TEND_SESSION"`
	ID      string `help:"Only events of this run."`
	JSON    bool   `help:"Print the events as JSON lines, as history.jsonl has them."`
}

func (c *eventsCmd) Help() string {
	return `Prints every state change of every run from history.jsonl (across its
rotated files), and with -f keeps printing them as they happen: a status
channel for an agent's UI or a script, without polling state files.
Example:
  tend events -f --session agent-7 --json`
}

func (c *eventsCmd) Run(e *env) error {
	if c.ID != "" {
		if err := checkID("events --id", c.ID); err != nil {
			return err
		}
	}
	client, err := e.client("")
	if err != nil {
		return err
	}
	return client.Events(e.context(), tend.EventFilter{ID: c.ID, Session: c.Session}, c.Follow, func(ev tend.Event) error {
		return c.print(e, ev)
	})
}

func (c *eventsCmd) print(e *env, ev tend.Event) error {
	if c.JSON {
		return writeJSONLine(e, ev)
	}
	exit := runtext.Exit(&tend.Record{ExitCode: ev.ExitCode, Signal: ev.Signal})
	line := fmt.Sprintf("%s %s %s rev %d", ev.Time.Local().Format("15:04:05.000"), ev.ID, ev.State, ev.Rev)
	if exit != "-" {
		line += " exit " + exit
	}
	if r := eventReason(ev); r != "" {
		line += ": " + r
	}
	_, err := fmt.Fprintln(e.stdout, runtext.Printable(line)) // a reason may quote what a user wrote
	return err
}
