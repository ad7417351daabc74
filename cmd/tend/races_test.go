package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/rogpeppe/go-internal/testscript"
	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
)

// races N: with a watcher up on this script's root, N times over: a cancel
// racing its run's own exit, a delete racing its run's completion, and
// cancels from two sessions at once, each against another session's run
// and its own. Every request must get one answer that agrees with the
// run's final record and history.
func cmdRaces(ts *testscript.TestScript, neg bool, args []string) {
	n, err := strconv.Atoi(args[0])
	ts.Check(err)
	root := ts.MkAbs(".tend")
	for i := range n {
		raceCancelExit(ts, root, fmt.Sprintf("ce%d", i))
		raceDeleteEnd(ts, root, fmt.Sprintf("de%d", i), i)
		raceSessions(ts, root, i)
	}
	ts.Logf("races: %d rounds, every answer consistent", n)
}

// raceCancelExit: a run that exits 3 at once, and a cancel right behind
// its start. Either the cancel won (canceled) or the exit did
// (already_finished, and the run failed with its own code).
func raceCancelExit(ts *testscript.TestScript, root, id string) {
	submitFile(ts, root, id+".start", "exit 3")
	submitFile(ts, root, id+".cancel", "")
	outcome := waitOutcome(ts, root, id+".cancel")
	st := waitEnded(ts, root, id)
	switch {
	case outcome == spool.Canceled && st.State == tracker.Canceled:
	case strings.HasPrefix(outcome, spool.AlreadyFinished) && st.State == tracker.Failed && st.ExitCode != nil && *st.ExitCode == 3:
	default:
		ts.Fatalf("run %s: cancel answered %q but the run is %s (%s)", id, outcome, st.State, st.Reason)
	}
}

// raceDeleteEnd: a run that ends within milliseconds, and a delete right
// behind its start. Either the run was still active (still_active, and it
// then ends normally) or it had ended (deleted: no record, and the history
// has its end before its deletion).
func raceDeleteEnd(ts *testscript.TestScript, root, id string, i int) {
	submitFile(ts, root, id+".start", fmt.Sprintf("sleep 0.00%d", i%10))
	submitFile(ts, root, id+".delete", "")
	outcome := waitOutcome(ts, root, id+".delete")
	switch {
	case strings.HasPrefix(outcome, spool.StillActive):
		if st := waitEnded(ts, root, id); st.State != tracker.Completed {
			ts.Fatalf("run %s: %s after a refused delete", id, st.State)
		}
	case outcome == spool.Deleted:
		if _, err := os.Stat(filepath.Join(root, "runs", id)); err == nil {
			ts.Fatalf("run %s: deleted, but its record is there", id)
		}
		states := historyOf(ts, root, id)
		if len(states) < 2 || states[len(states)-1] != tracker.Deleted || states[len(states)-2] != tracker.Completed {
			ts.Fatalf("run %s: deleted, but its history is %v", id, states)
		}
	default:
		ts.Fatalf("run %s: delete answered %q", id, outcome)
	}
}

// raceSessions: runs of sessions A and B; two writers of session B try to
// cancel A's run at once, while each session cancels its own run. B's
// attempts are not_permitted and leave A's run alone; each own cancel
// ends its run.
func raceSessions(ts *testscript.TestScript, root string, i int) {
	a, b := fmt.Sprintf("sa%d", i), fmt.Sprintf("sb%d", i)
	submitFile(ts, root, a+".start", `{"command": "exec sleep 1000", "session": "A"}`)
	submitFile(ts, root, b+".start", `{"command": "exec sleep 1000", "session": "B"}`)
	waitState(ts, root, a, tracker.Running)
	waitState(ts, root, b, tracker.Running)
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			tmp := filepath.Join(root, "spool", fmt.Sprintf(".%s.cancel.%d", a, w))
			os.WriteFile(tmp, []byte(`{"session": "B"}`), 0o644)
			os.Rename(tmp, filepath.Join(root, "spool", a+".cancel"))
		})
	}
	wg.Wait()
	// Both renames have landed: once no request of that name is left in
	// the spool, claimed or not, every one of them has been answered.
	poll(ts, func() string {
		for _, name := range []string{a + ".cancel", "." + a + ".cancel.taken"} {
			if _, err := os.Lstat(filepath.Join(root, "spool", name)); err == nil {
				return name + " is still in the spool"
			}
		}
		return ""
	})
	// But a request replaced between the watcher's read and its claim is
	// put back under its name, and examined again at once: between the
	// two looks above, it may have been at the other name. A request
	// written after that is answered after it.
	submitFile(ts, root, a+"-none.cancel", `{}`)
	if got := waitOutcome(ts, root, a+"-none.cancel"); !strings.HasPrefix(got, spool.NotFound) {
		ts.Fatalf("canceling no run: %q", got)
	}
	if got := waitOutcome(ts, root, a+".cancel"); !strings.HasPrefix(got, spool.NotPermitted) {
		ts.Fatalf("session B canceling %s: %q", a, got)
	}
	if st := readState(ts, root, a); st.State != tracker.Running {
		ts.Fatalf("run %s is %s after session B's refused cancel", a, st.State)
	}
	os.Remove(filepath.Join(root, "outcomes", a+".cancel"))
	submitFile(ts, root, a+".cancel", `{"session": "A", "grace": "1s"}`)
	submitFile(ts, root, b+".cancel", `{"session": "B", "grace": "1s"}`)
	for _, id := range []string{a, b} {
		if got := waitOutcome(ts, root, id+".cancel"); got != spool.Canceled {
			ts.Fatalf("%s canceling its own run: %q", id, got)
		}
		if st := waitEnded(ts, root, id); st.State != tracker.Canceled {
			ts.Fatalf("run %s is %s after its own session's cancel", id, st.State)
		}
	}
}

func waitOutcome(ts *testscript.TestScript, root, name string) string {
	var out string
	poll(ts, func() string {
		b, err := os.ReadFile(filepath.Join(root, "outcomes", name))
		if err != nil {
			return name + ": no outcome yet"
		}
		out = strings.TrimSpace(string(b))
		return ""
	})
	return out
}

func readState(ts *testscript.TestScript, root, id string) *tracker.State {
	st, err := tracker.NewStore(root).Read(id)
	ts.Check(err)
	return st
}

func waitState(ts *testscript.TestScript, root, id string, state tracker.StateName) {
	poll(ts, func() string {
		st, err := tracker.NewStore(root).Read(id)
		if err != nil || st.State != state {
			return fmt.Sprintf("run %s is not %s", id, state)
		}
		return ""
	})
}

func waitEnded(ts *testscript.TestScript, root, id string) *tracker.State {
	var st *tracker.State
	poll(ts, func() string {
		var err error
		st, err = tracker.NewStore(root).Read(id)
		if err != nil || !tracker.Final(st.State) {
			return fmt.Sprintf("run %s has not ended", id)
		}
		return ""
	})
	return st
}

// historyOf returns the states run id went through, from history.jsonl.
func historyOf(ts *testscript.TestScript, root, id string) []tracker.StateName {
	events, err := tracker.ReadAllHistory(root)
	ts.Check(err)
	var states []tracker.StateName
	for _, ev := range events {
		if ev.ID == id {
			states = append(states, ev.State)
		}
	}
	return states
}
