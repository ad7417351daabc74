package tracker

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/gofrs/flock"
)

// Event is one line of history.jsonl: a run reached a state.
type Event struct {
	Time     time.Time `json:"time"`
	ID       string    `json:"id"`
	Rev      int64     `json:"rev"`
	State    string    `json:"state"`
	Session  string    `json:"session,omitempty"`
	PID      int       `json:"pid,omitempty"`
	ExitCode *int      `json:"exit_code,omitempty"`
	Signal   string    `json:"signal,omitempty"`
	Reason   string    `json:"reason,omitempty"`
}

// EventOf returns the history event for st's current state.
func EventOf(st *State, at time.Time) Event {
	return Event{Time: at, ID: st.ID, Rev: st.Rev, State: st.State, Session: st.Session, PID: st.PID,
		ExitCode: st.ExitCode, Signal: st.Signal, Reason: st.Reason}
}

// History appends to a root's history.jsonl. Every append holds an
// exclusive flock on history.lock and writes one whole line with a single
// write to a file opened with O_APPEND, so concurrent writers never
// interleave within a line.
type History struct {
	path string
	lock *flock.Flock
}

// OpenHistory returns the History of the tend root at root.
func OpenHistory(root string) *History {
	return &History{
		path: filepath.Join(root, "history.jsonl"),
		lock: flock.New(filepath.Join(root, "history.lock")),
	}
}

// Append adds events to the history, each on its own line.
func (h *History) Append(events ...Event) error {
	var buf bytes.Buffer
	for _, e := range events {
		b, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("%s: %w", h.path, err)
		}
		buf.Write(b)
		buf.WriteByte('\n')
	}
	if err := h.lock.Lock(); err != nil {
		return fmt.Errorf("%s: lock: %w", h.path, err)
	}
	defer h.lock.Unlock()
	f, err := os.OpenFile(h.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(buf.Bytes())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", h.path, err)
	}
	return nil
}

// ReadHistory reads every event in the history file at path. It fails
// closed: the first line that is torn, not JSON, or not an event makes it
// return an error "history.jsonl:LINE: what is wrong", with the events
// before that line. A missing file is an empty history.
func ReadHistory(path string) ([]Event, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var events []Event
	r := bufio.NewReader(f)
	name := filepath.Base(path)
	for line := 1; ; line++ {
		b, err := r.ReadBytes('\n')
		if err == io.EOF && len(b) == 0 {
			return events, nil
		}
		if err != nil && err != io.EOF {
			return events, fmt.Errorf("%s:%d: %w", name, line, err)
		}
		if b[len(b)-1] != '\n' {
			return events, fmt.Errorf("%s:%d: torn line: no newline at the end of the file", name, line)
		}
		e, perr := parseEvent(b)
		if perr != nil {
			return events, fmt.Errorf("%s:%d: %v", name, line, perr)
		}
		events = append(events, e)
	}
}

func parseEvent(b []byte) (Event, error) {
	var e Event
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		return e, fmt.Errorf("not a JSON event: %v", err)
	}
	if dec.More() {
		return e, errors.New("more than one JSON value on the line")
	}
	if e.ID == "" || e.State == "" || e.Time.IsZero() || e.Rev < 1 {
		return e, errors.New("not an event: missing time, id, rev or state")
	}
	return e, nil
}
