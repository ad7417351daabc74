package tend

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/tendhq/tend/tracker"
	"github.com/tendhq/tend/tracker/layout"
)

// Event is a state change of a run, as the root's history.jsonl has it.
type Event = tracker.Event

// EventFilter selects events for Events: those of one run, of one
// session, since a time, or (the zero EventFilter) all. A client that
// acts as a session gets only that session's events, as from List.
type EventFilter struct {
	ID      string
	Session string
	// Since, if not zero, selects the events at or after it (by their
	// time): the rotated history files written before it are not read.
	Since time.Time
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
		if f.ID != "" && ev.ID != f.ID || f.Session != "" && ev.Session != f.Session || ev.Time.Before(f.Since) {
			return nil
		}
		return emit(ev)
	}
	// Scanned, not read whole: a history is never deleted, and a root's
	// may be gigabytes.
	if !follow {
		return tracker.ScanHistorySince(c.root, f.Since, pass)
	}
	// The rotated files, then the current one, read to its end and on, by
	// one reader: no event falls between reading what is there and
	// following what comes. Found first, as one set, and each read by
	// its inode under whatever name it has then: a rotation between
	// finding them and reading them (which renames every one) skipped a
	// file's events.
	set, err := tracker.FindHistorySet(c.root)
	if err != nil {
		return err
	}
	cur, err := set.OpenCurrent()
	if err != nil {
		return err
	}
	h := &historyFollower{path: layout.Root(c.root).History(), emit: pass}
	defer h.close()
	if cur != nil {
		h.follow(cur)
	}
	if c.historyOpened != nil {
		c.historyOpened()
	}
	if err := set.ScanRotatedSince(f.Since, pass); err != nil {
		return err
	}
	return c.watchUntil(ctx, c.root, spinEvery, h.check)
}

// historyFollower passes the events of the history file at path to emit,
// each once, in order, across rotations: the file it has open is read to
// its end before it opens the one now at path, so the lines appended just
// before a rotation are not skipped.
type historyFollower struct {
	path    string
	emit    func(Event) error
	f       *os.File
	r       *bufio.Reader
	off     int64
	partial []byte // a line not yet whole
}

// check passes every whole line there is now; it never reports done.
func (h *historyFollower) check() (bool, error) {
	for {
		if h.f == nil {
			if err := h.open(); err != nil || h.f == nil {
				return false, err
			}
		}
		// Whether it was rotated is asked before its end is read: a line
		// appended after this end was appended before the rotation.
		moved := rotated(h.f, h.path)
		if err := h.drain(); err != nil || !moved {
			return false, err
		}
		next, err := h.successor()
		if err != nil {
			return false, err
		}
		h.close()
		if next != nil {
			h.follow(next)
		}
	}
}

// successor opens the file that came after the one h has open (which a
// rotation moved) in the history: the one rotated in just after it, at
// the number below the one h's has now, or history.jsonl if that is 1.
// More than one rotation may come between two checks: the files rotated
// between are read in turn, where opening history.jsonl skipped them. It
// returns nil where it cannot tell (h's file is gone; the next file is
// not there yet): history.jsonl is opened then, when it is there.
func (h *historyFollower) successor() (*os.File, error) {
	held, err := h.f.Stat()
	if err != nil {
		return nil, nil
	}
	root := layout.Root(filepath.Dir(h.path))
	for range 10 {
		k := 0 // the number h's file has now
		for n := 1; k == 0; n++ {
			fi, err := os.Lstat(root.RotatedHistory(n))
			if err != nil {
				return nil, nil // not among the rotated files rotation keeps numbered from 1
			}
			if os.SameFile(fi, held) {
				k = n
			}
		}
		path := h.path
		if k > 1 {
			path = root.RotatedHistory(k - 1)
		}
		f, err := os.Open(path)
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		// Still at k once the next is open: a rotation renames k before
		// k-1, so the file opened was at k-1 (or history.jsonl) when
		// h's was at k.
		if fi, err := os.Lstat(root.RotatedHistory(k)); err == nil && os.SameFile(fi, held) {
			return f, nil
		}
		f.Close()
	}
	return nil, nil
}

// open opens the file at path, if it is there.
func (h *historyFollower) open() error {
	f, err := os.Open(h.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	h.follow(f)
	return nil
}

// follow makes f, open at its start, the file h reads.
func (h *historyFollower) follow(f *os.File) {
	h.f, h.r, h.off, h.partial = f, bufio.NewReader(f), 0, nil
}

// drain passes the whole lines of the open file up to its end.
func (h *historyFollower) drain() error {
	for {
		line, err := h.r.ReadBytes('\n')
		h.off += int64(len(line))
		if err != nil { // no whole line yet: keep what there is
			h.partial = append(h.partial, line...)
			return nil
		}
		line = append(h.partial, line...)
		h.partial = nil
		var ev Event
		if err := json.Unmarshal(bytes.TrimSpace(line), &ev); err != nil {
			return fmt.Errorf("%s: after byte %d: %v", h.path, h.off, err)
		}
		if err := h.emit(ev); err != nil {
			return err
		}
	}
}

func (h *historyFollower) close() {
	if h.f != nil {
		h.f.Close()
		h.f = nil
	}
}

// rotated reports whether path is no longer the file f has open.
func rotated(f *os.File, path string) bool {
	a, err1 := f.Stat()
	b, err2 := os.Stat(path)
	return err1 != nil || err2 != nil || !os.SameFile(a, b)
}
