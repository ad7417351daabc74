package main

import (
	"encoding/json"
	"fmt"
	"reflect"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	"github.com/tendhq/tend/tracker"
)

// rebuiltAside lists what docs/protocol.md ("Rebuilt records") says a
// record rebuilt from the history cannot know: left out of the
// comparison. reason is a live run's only (the rebuilt one says so), and
// cpu_seconds and duration_seconds a run's not ended (its last ended
// attempt's).
var rebuiltAside = []string{"rev", "seal", "sum", "done", "health_status", "proc_start", "boot", "progress", "progress_at"}

// rebuiltTimes are the fields a rebuilt record takes from its events'
// times: the event of a change is timed as it is saved, a little after
// the watcher took the time it records, so a rebuilt time may follow the
// lost one by up to rebuiltSlack, and never precede it (an earlier
// event's, a first attempt's start for the last one's, does).
var rebuiltTimes = map[string]bool{"created_at": true, "started_at": true, "ended_at": true, "ready_at": true, "paused_at": true, "next_start_at": true, "submitted_at": true}

// jobAside lists what a rebuilt record cannot know of a cluster run's
// job: no history line has its tag, nor what its engine last said of it.
var jobAside = []string{"tag", "state", "reason", "nodes"}

// twoWays are the rebuilt times that may also precede the lost ones: a
// duration whose both ends are late (paused_for), and a time the watcher
// took before the event's and to which it added a delay that the event
// names rounded to the millisecond (next_start_at).
var twoWays = map[string]bool{"paused_for": true, "next_start_at": true}

// rebuiltSlack is how far an event's time may be from the watcher's time
// for the same change: the time to write its record, on a loaded
// machine. It is no timing assertion: a second is far more than it
// takes, and far less than what a wrong event (a label's, a note's, an
// earlier attempt's) would give in the scripts that use it. A job's
// times are its engine's, in whole seconds, seen at its next poll:
// scripts of jobs give a slack of their own.
const rebuiltSlack = time.Second

// samerecord [-slack D] BEFORE AFTER: the tend show --json of a run
// before its record was lost and after it was rebuilt say the same, but
// for what a rebuild cannot know.
func cmdSameRecord(ts *testscript.TestScript, neg bool, args []string) {
	slack := rebuiltSlack
	if len(args) == 4 && args[0] == "-slack" {
		d, err := time.ParseDuration(args[1])
		ts.Check(err)
		slack, args = d, args[2:]
	}
	if len(args) != 2 {
		ts.Fatalf("usage: samerecord [-slack D] BEFORE AFTER")
	}
	var recs [2]map[string]any
	for i, name := range args {
		ts.Check(json.Unmarshal([]byte(ts.ReadFile(name)), &recs[i]))
		for _, k := range rebuiltAside {
			delete(recs[i], k)
		}
		if job, ok := recs[i]["job"].(map[string]any); ok {
			for _, k := range jobAside {
				delete(job, k)
			}
		}
		if !tracker.Final(tracker.StateName(fmt.Sprint(recs[0]["state"]))) {
			delete(recs[i], "reason")
			delete(recs[i], "cpu_seconds")
			delete(recs[i], "duration_seconds")
		}
	}
	if diffs := recordDiffs("", recs[0], recs[1], slack); len(diffs) > 0 {
		for _, d := range diffs {
			ts.Logf("%s", d)
		}
		ts.Fatalf("the rebuilt record differs from the lost one")
	}
}

// recordDiffs lists where a rebuilt record b differs from the lost one a
// (JSON values at path), times within slack, durations too.
func recordDiffs(path string, a, b any, slack time.Duration) []string {
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok && bok {
		var diffs []string
		for k := range merged(am, bm) {
			if rebuiltTimes[k] || k == "paused_for" {
				if d := timeDiff(k, am[k], bm[k], slack); d != "" {
					diffs = append(diffs, path+"."+k+": "+d)
				}
				continue
			}
			diffs = append(diffs, recordDiffs(path+"."+k, am[k], bm[k], slack)...)
		}
		return diffs
	}
	al, aok := a.([]any)
	bl, bok := b.([]any)
	if aok && bok && len(al) == len(bl) {
		var diffs []string
		for i := range al {
			diffs = append(diffs, recordDiffs(fmt.Sprintf("%s[%d]", path, i), al[i], bl[i], slack)...)
		}
		return diffs
	}
	if !reflect.DeepEqual(a, b) {
		return []string{fmt.Sprintf("%s: %v, rebuilt %v", path, a, b)}
	}
	return nil
}

func merged(a, b map[string]any) map[string]bool {
	keys := make(map[string]bool)
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	return keys
}

// timeDiff says how a rebuilt time b is not within slack after a (within
// slack either way for twoWays), or that one is missing: "" if not.
func timeDiff(key string, a, b any, slack time.Duration) string {
	if a == nil || b == nil {
		if a == nil && b == nil {
			return ""
		}
		return fmt.Sprintf("%v, rebuilt %v", a, b)
	}
	var d time.Duration
	if key == "paused_for" {
		da, erra := time.ParseDuration(fmt.Sprint(a))
		db, errb := time.ParseDuration(fmt.Sprint(b))
		if erra != nil || errb != nil {
			return fmt.Sprintf("%v, rebuilt %v: not durations", a, b)
		}
		d = db - da
	} else {
		ta, erra := time.Parse(time.RFC3339Nano, fmt.Sprint(a))
		tb, errb := time.Parse(time.RFC3339Nano, fmt.Sprint(b))
		if erra != nil || errb != nil {
			return fmt.Sprintf("%v, rebuilt %v: not times", a, b)
		}
		d = tb.Sub(ta)
	}
	if d > slack || d < 0 && (!twoWays[key] || -d > slack) {
		return fmt.Sprintf("%v, rebuilt %v: %v apart", a, b, d)
	}
	return ""
}
