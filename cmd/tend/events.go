package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/tendhq/tend/tracker"
)

type eventsCmd struct {
	Follow  bool   `short:"f" help:"Keep printing events as they happen."`
	Session string `help:"Only events of this session's runs."`
	ID      string `help:"Only events of this run."`
	JSON    bool   `help:"Print the events as JSON lines, as history.jsonl has them."`
}

func (c *eventsCmd) Help() string {
	return `Prints every state change of every run from history.jsonl (across its
rotated files), and with -f keeps printing them as they happen: a status
channel for an agent's UI or a script, without polling state files.
Example: tend events -f --session agent-7 --json`
}

func (c *eventsCmd) Run(e *env) error {
	if !c.Follow {
		events, err := tracker.ReadAllHistory(e.root)
		for _, ev := range events {
			if err := c.print(e, ev); err != nil {
				return err
			}
		}
		return err
	}
	// The rotated files, then the current one, read to its end and on, by
	// one reader: no event falls between reading what is there and
	// following what comes.
	files := tracker.HistoryFiles(e.root)
	for _, path := range files[:len(files)-1] {
		events, err := tracker.ReadHistory(path)
		for _, ev := range events {
			if err := c.print(e, ev); err != nil {
				return err
			}
		}
		if err != nil {
			return err
		}
	}
	return c.follow(e)
}

func (c *eventsCmd) print(e *env, ev tracker.Event) error {
	if c.ID != "" && ev.ID != c.ID || c.Session != "" && ev.Session != c.Session {
		return nil
	}
	if c.JSON {
		return writeJSONLine(e, ev)
	}
	exit := exitText(&tracker.State{ExitCode: ev.ExitCode, Signal: ev.Signal})
	line := fmt.Sprintf("%s %s %s rev %d", ev.Time.Local().Format("15:04:05.000"), ev.ID, ev.State, ev.Rev)
	if exit != "-" {
		line += " exit " + exit
	}
	if ev.Reason != "" {
		line += ": " + ev.Reason
	}
	_, err := fmt.Fprintln(e.stdout, line)
	return err
}

// follow prints history.jsonl's lines from its start, and those appended
// after, reopening it when it is rotated, until interrupted.
func (c *eventsCmd) follow(e *env) error {
	path := tracker.HistoryPath(e.root)
	var f *os.File
	var r *bufio.Reader
	var off int64
	open := func() error {
		var err error
		if f, err = os.Open(path); err != nil {
			f = nil
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		r = bufio.NewReader(f)
		return nil
	}
	if err := open(); err != nil {
		return err
	}
	var partial []byte
	return waitUntil(e.root, func() (bool, error) {
		if f == nil || rotated(f, path) {
			if f != nil {
				f.Close()
			}
			if err := open(); err != nil || f == nil {
				return false, err
			}
			off, partial = 0, nil
		}
		for {
			line, err := r.ReadBytes('\n')
			off += int64(len(line))
			if err != nil { // no whole line yet: keep what there is
				partial = append(partial, line...)
				return false, nil
			}
			line = append(partial, line...)
			partial = nil
			var ev tracker.Event
			if err := json.Unmarshal(bytes.TrimSpace(line), &ev); err != nil {
				return false, fmt.Errorf("%s: after byte %d: %v", path, off, err)
			}
			if err := c.print(e, ev); err != nil {
				return false, err
			}
		}
	})
}

// rotated reports whether path is no longer the file f has open.
func rotated(f *os.File, path string) bool {
	a, err1 := f.Stat()
	b, err2 := os.Stat(path)
	return err1 != nil || err2 != nil || !os.SameFile(a, b)
}
