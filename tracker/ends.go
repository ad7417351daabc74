package tracker

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"time"

	"github.com/tendhq/tend/tracker/layout"
)

// A run's end, and its stop, may be recorded without a flush of its
// record (see Store.WriteCovered): its history line is synced first, and a
// power loss that takes back the record leaves that line for recovery to
// write the record again from (RecentEvents, CoveredAfter, ApplyCovered).

// CoveredAfter returns the changes in evs (a run's events, oldest first)
// that the record st may lack because a power loss took them back: those
// right after it, each of a kind recorded without a flush (a stop that
// cancels or times out the run, then an end), of the very run that st
// records. The first one's rev is st's plus one, and each names the run's
// creation time as st does, which a run made anew with a deleted run's ID
// does not share; events of a tend that did not record them so (no
// created_at) are never taken for them.
func CoveredAfter(st *State, evs []Event) []Event {
	for i, ev := range evs {
		if ev.Rev != st.Rev+1 || !coveredOf(st, ev) {
			continue
		}
		chain := []Event{ev}
		for _, next := range evs[i+1:] {
			last := chain[len(chain)-1]
			if Final(last.State) || next.Rev != last.Rev+1 || !coveredOf(st, next) {
				break
			}
			chain = append(chain, next)
		}
		return chain
	}
	return nil
}

// coveredOf reports whether ev is a change of st's run of a kind that may
// be recorded without a flush.
func coveredOf(st *State, ev Event) bool {
	kind := Final(ev.State) || ev.State == Stopping && ev.Stop != nil && ev.Stop.Cause != CauseRestart
	return kind && ev.ID == st.ID && ev.CreatedAt != nil && ev.CreatedAt.Equal(st.CreatedAt)
}

// BeyondStart reports whether evs (a run's events, oldest first) show
// the run, since its ID was last used anew (see Latest), stopped, ended,
// backing off or paused. A record of such a run found torn is not a
// first record cut short before anything acted on it
// (durable.RenameNew), even where no mark says its process started (it
// never started, or the mark was lost): taken for one, the run would be
// started again.
func BeyondStart(evs []Event) bool {
	for _, ev := range Latest(evs) {
		switch ev.State {
		case Queued, Starting, Running:
		default:
			return true
		}
	}
	return false
}

// Latest returns the events in evs (a run ID's, oldest first) of the run
// made last with that ID: those after its last deleted event, and, where
// that line was lost (a power loss takes back what was not synced; a
// hand), those from its first event, rev 1 (every run's: newRun's record
// is rev 0, and each change adds one), or after the last event that says
// its run was created at another time than a later one says (created_at,
// on an end or a stop).
//
// Not at a rev that merely does not grow: a watcher that crashed after
// appending a change, before its record, makes the next change with that
// rev again, within the same run. Cut there, a run that was stopped, or
// ended, before the crash would look to BeyondStart as if it never went
// past its start, and be started again; and a rebuilt record would lose
// the run's starts, labels, notes and creation time before it (see
// Rebuild, which drops only the changes that the repeated rev replaced).
func Latest(evs []Event) []Event {
	var created *time.Time // of the run whose events follow
	for i := len(evs) - 1; i >= 0; i-- {
		e := evs[i]
		switch {
		case e.State == Deleted: // the ID was used again: this run's events follow
			return evs[i+1:]
		case e.CreatedAt != nil && created != nil && !e.CreatedAt.Equal(*created):
			return evs[i+1:]
		case e.Rev == 1:
			return evs[i:]
		}
		if e.CreatedAt != nil {
			created = e.CreatedAt
		}
	}
	return evs
}

// EventsOf returns the events of each run that ids names in the whole of
// root's history, rotated files and the changes that wait to be appended
// included, by run ID, oldest first: for the rare run whose record is
// gone or torn, which RecentEvents's window may not reach back to. Lines
// that do not parse are skipped, as RecentEvents does.
func EventsOf(root string, ids map[string]bool) (map[string][]Event, error) {
	events := make(map[string][]Event)
	if len(ids) == 0 {
		return events, nil
	}
	for _, path := range historyAndPending(root) {
		fi, err := os.Stat(path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if err := scanTail(path, fi.Size(), ids, events); err != nil {
			return nil, err
		}
	}
	return events, nil
}

// EndWindow is how much of the end of root's history RecentEvents reads:
// a change recorded without a flush is committed with the file system's next
// journal commit (every 5 s by default on ext4, the one file system tend
// does so on, and at any fsync before), long before the history grows by
// that much (a burst of short runs appends about 0.4 MiB a second).
const EndWindow = 8 << 20

// RecentEvents returns the events of each run that ids names in the last
// EndWindow bytes of root's history (history.jsonl, and the end of
// history.1.jsonl if history.jsonl is shorter), by run ID, oldest first,
// deletions included. A power loss can take back a deletion's line with
// the run's directory, so that a deletion is no sure boundary between a
// run and one made anew with its ID: CoveredAfter tells them apart by
// their creation time. Only the lines of the runs asked for are parsed;
// lines that do not parse are skipped: tend fsck reports them.
func RecentEvents(root string, ids map[string]bool) (map[string][]Event, error) {
	recent := make(map[string][]Event)
	if len(ids) == 0 {
		return recent, nil
	}
	type tail struct {
		path string
		n    int64 // how many bytes of its end to read
	}
	var tails []tail // newest first
	left := int64(EndWindow)
	for _, path := range []string{layout.Root(root).History(), layout.Root(root).RotatedHistory(1)} {
		if left <= 0 {
			break
		}
		fi, err := os.Stat(path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		tails = append(tails, tail{path, min(left, fi.Size())})
		left -= fi.Size()
	}
	for i := len(tails) - 1; i >= 0; i-- { // oldest first
		if err := scanTail(tails[i].path, tails[i].n, ids, recent); err != nil {
			return nil, err
		}
	}
	return recent, nil
}

// scanTail adds to recent the events of the runs ids names in the last n
// bytes of the history file at path (less the line n cuts).
func scanTail(path string, n int64, ids map[string]bool, recent map[string][]Event) error {
	f, err := openIfThere(path)
	if f == nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	start := max(0, fi.Size()-n)
	if _, err := f.Seek(start, io.SeekStart); err != nil {
		return err
	}
	r := bufio.NewReaderSize(f, 1<<16)
	if start > 0 {
		if _, err := r.ReadBytes('\n'); err != nil { // a line cut by the window
			return nil
		}
	}
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 && line[len(line)-1] == '\n' && ids[eventID(line)] {
			if ev, perr := parseEvent(line); perr == nil {
				recent[ev.ID] = append(recent[ev.ID], ev)
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
