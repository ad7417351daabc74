package tend

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/tendhq/tend/tracker"
	"github.com/tendhq/tend/tracker/layout"
)

// Event is a state change of a run, as the root's history.jsonl has it.
type Event = tracker.Event

// EventFilter selects events for Events: those of one run, of one
// session, or (the zero EventFilter) all. A client that acts as a session
// gets only that session's events, as from List.
type EventFilter struct {
	ID      string
	Session string
}

// Events passes every state change in the root's history that f selects
// to emit, oldest first, across its rotated files. With follow, it then
// passes those appended after, as they are, until ctx ends (and returns
// ctx's error) or emit fails.
func (c *Client) Events(ctx context.Context, f EventFilter, follow bool, emit func(Event) error) error {
	if f.ID != "" {
		if err := CheckID(f.ID); err != nil {
			return err
		}
	}
	lf := Filter{Session: f.Session}
	if err := c.checkFilter(&lf); err != nil {
		return err
	}
	f.Session = lf.Session
	pass := func(ev Event) error {
		if f.ID != "" && ev.ID != f.ID || f.Session != "" && ev.Session != f.Session {
			return nil
		}
		return emit(ev)
	}
	if !follow {
		events, err := tracker.ReadAllHistory(c.root)
		for _, ev := range events {
			if err := pass(ev); err != nil {
				return err
			}
		}
		return err
	}
	// The rotated files, then the current one, read to its end and on, by
	// one reader: no event falls between reading what is there and
	// following what comes.
	files := tracker.HistoryFiles(c.root)
	for _, path := range files[:len(files)-1] {
		events, err := tracker.ReadHistory(path)
		for _, ev := range events {
			if err := pass(ev); err != nil {
				return err
			}
		}
		if err != nil {
			return err
		}
	}
	return c.followHistory(ctx, pass)
}

// followHistory passes history.jsonl's events from its start, and those
// appended after, reopening it when it is rotated, until ctx ends.
func (c *Client) followHistory(ctx context.Context, emit func(Event) error) error {
	path := layout.Root(c.root).History()
	var f *os.File
	var r *bufio.Reader
	var off int64
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
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
	return watchUntil(ctx, c.root, spinEvery, func() (bool, error) {
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
			var ev Event
			if err := json.Unmarshal(bytes.TrimSpace(line), &ev); err != nil {
				return false, fmt.Errorf("%s: after byte %d: %v", path, off, err)
			}
			if err := emit(ev); err != nil {
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
