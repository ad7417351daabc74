package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/tendhq/tend"
	"github.com/tendhq/tend/cmd/internal/runtext"
)

type eventsCmd struct {
	Follow  bool   `short:"f" help:"Keep printing events as they happen."`
	Session string `help:"Only events of this session's runs." env:"TEND_SESSION"`
	ID      string `help:"Only events of this run."`
	JSON    bool   `help:"Print the events as JSON lines, as history.jsonl has them."`
	Since   string `help:"Only events at or after this time: a duration back from now (10m, 2h), HH:MM[:SS] (the last such time) or RFC 3339. With -f, only the new ones: --since 0s." placeholder:"TIME"`
}

func (c *eventsCmd) Help() string {
	return `Prints every state change of every run from history.jsonl (across its
rotated files), and with -f keeps printing them as they happen: a status
channel for an agent's UI or a script, without polling state files.
--since starts later than the history's start (its older rotated files
are not read). Examples:
  tend events -f --session agent-7 --json
  tend events -f --since 0s      # only what happens from now on
  tend events --since 1h --id build`
}

func (c *eventsCmd) Run(e *env) error {
	if c.ID != "" {
		if err := checkID("events --id", c.ID); err != nil {
			return err
		}
	}
	f := tend.EventFilter{ID: c.ID, Session: c.Session}
	if c.Since != "" {
		since, err := parseSince(c.Since, time.Now())
		if err != nil {
			return exitf(exitUsage, "events: %v", err)
		}
		f.Since = since
	}
	client, err := e.client("")
	if err != nil {
		return err
	}
	return client.Events(e.context(), f, c.Follow, func(ev tend.Event) error {
		return c.print(e, ev)
	})
}

// parseSince reads --since: a duration back from now (30m), an RFC 3339
// time, or a time of day (HH:MM or HH:MM:SS, local time), the last one
// not after now, as --at reads the next one.
func parseSince(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("--since %s: a duration back from now is not negative", s)
		}
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	for _, layout := range []string{"15:04", "15:04:05"} {
		if t, err := time.ParseInLocation(layout, s, now.Location()); err == nil {
			at := time.Date(now.Year(), now.Month(), now.Day(), t.Hour(), t.Minute(), t.Second(), 0, now.Location())
			if at.After(now) {
				at = at.AddDate(0, 0, -1)
			}
			return at, nil
		}
	}
	if strings.Trim(s, "0123456789.") == "" {
		return time.Time{}, fmt.Errorf("--since %q has no unit: write %ss, %sm or %sh", s, s, s, s)
	}
	return time.Time{}, fmt.Errorf("--since %q: want a duration back from now (such as 10m or 2h), HH:MM[:SS] or an RFC 3339 time", s)
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
