// Package startlogtest makes, for tests, a root whose start log holds a
// run's launch not yet applied, as the watcher leaves it: the tracker's
// tests (tend fsck --repair) and the watcher's (its replay) start from
// the same launch.
package startlogtest

import (
	"os"
	"testing"
	"time"

	"github.com/tendhq/tend/tracker"
)

// ID is the launched run's.
const ID = "r1"

// Launch makes run ID launched as the watcher's writeLogged leaves it
// once the log is synced: its directory in s, its request, its record
// (starting, then running) written unsynced, its two history lines
// appended to h, and the launch written to l, not marked applied. It
// returns the launch's entry, its Seq set. The run is the caller's
// user's (uid), as a start the watcher logs is its own user's.
func Launch(t testing.TB, s *tracker.Store, h *tracker.History, l *tracker.StartLog) tracker.LogEntry {
	t.Helper()
	body := []byte("echo hi\n")
	if err := s.MakeRunDir(ID); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.Run(ID).Request(), body, 0o600); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	st := &tracker.State{ID: ID, State: tracker.Starting, OwnerUID: os.Getuid(), Command: []string{"sh", "-c", "echo hi"}, CreatedAt: now, Rev: 1}
	events := []tracker.Event{tracker.EventOf(st, now)}
	st.State, st.PID, st.Rev = tracker.Running, 4242, 2
	events = append(events, tracker.EventOf(st, now.Add(time.Millisecond)))
	if err := h.Append(events...); err != nil {
		t.Fatal(err)
	}
	records, errs := s.WriteLogged([]*tracker.State{st})
	if errs[0] != nil {
		t.Fatal(errs[0])
	}
	entries := []tracker.LogEntry{{ID: ID, Name: ID + ".start", Record: records[0], Request: body, Events: events}}
	if err := l.Write(entries); err != nil {
		t.Fatal(err)
	}
	return entries[0]
}
