package tracker

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"

	"github.com/tendhq/tend/tracker/layout"
)

// A run's end may be recorded without a flush of its record (see
// Store.WriteCovered): its history line is synced first, and a power loss
// that takes back the record, or leaves it torn on a file system that
// keeps a name without its data, leaves that line for recovery to bring
// the end back from (EndsInHistory, then ApplyEnd or RebuildEnded).

// EndsInHistory returns, of the runs that ids names, those whose last
// event in root's history ends them: that event, by run ID. It reads
// history.jsonl, where the newest events are, then history.1.jsonl for
// the runs with no event in it: an end recorded just before a rotation.
// An older end's record is long on disk (see Store.WriteCovered). Lines
// it cannot parse are skipped: it looks for lines that were synced, and
// tend fsck reports bad ones.
func EndsInHistory(root string, ids map[string]bool) (map[string]Event, error) {
	last := make(map[string]Event)
	for _, path := range []string{layout.Root(root).History(), layout.Root(root).RotatedHistory(1)} {
		left := make(map[string]bool)
		for id := range ids {
			if _, found := last[id]; !found {
				left[id] = true
			}
		}
		if len(left) == 0 {
			break
		}
		if err := lastEvents(path, left, last); err != nil {
			return nil, err
		}
	}
	ends := make(map[string]Event)
	for id, ev := range last {
		if Final(ev.State) {
			ends[id] = ev
		}
	}
	return ends, nil
}

// lastEvents notes in last the last event but a deletion in the history
// file at path of each run that ids names. Only the lines of those runs
// are parsed.
func lastEvents(path string, ids map[string]bool, last map[string]Event) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<16)
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 && line[len(line)-1] == '\n' && ids[eventID(line)] {
			// A deletion is passed over: a run whose directory is there
			// was not deleted after all (a power loss took the deletion
			// back before it was answered), and a run made anew with its
			// ID has its events after it.
			if ev, perr := parseEvent(line); perr == nil && ev.State != Deleted {
				last[ev.ID] = ev
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// eventID returns the run ID a history line names, found without parsing
// it (IDs hold no character that JSON escapes: spool.ValidID), or "".
func eventID(line []byte) string {
	const key = `"id":"`
	i := bytes.Index(line, []byte(key))
	if i < 0 {
		return ""
	}
	rest := line[i+len(key):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return ""
	}
	return string(rest[:j])
}

// RebuildEnded makes the record of run id, whose state.json is torn,
// from its history and its request as tend fsck --repair does (see
// Repair), and ends it as its last event, end, says.
func RebuildEnded(s *Store, root, id string, end Event) *State {
	events, _ := scanHistory(root)
	evs := events[id]
	if len(evs) == 0 {
		evs = []Event{end}
	}
	st := rebuild(s, id, evs, func(int, string) (uint64, bool) { return 0, false })
	ApplyEnd(st, end)
	return st
}
