package tracker

import (
	"regexp"
	"strings"
	"time"

	"github.com/tendhq/tend/spool"
)

// Submitting begins the reason a run on a cluster has while its attempt's
// job is being submitted: the record of that attempt's start, as a
// local run's process has its pid (see replayAttempts).
const Submitting = "being submitted to "

// SubmittedReason is the reason of a run whose attempt's job the engine
// named took as job id, while it waits there to run: the one line of the
// history that names the job, which a rebuild reads the job's ID back
// from (see replayAttempts).
func SubmittedReason(engine, id string) string {
	return "submitted to " + engine + " as job " + id
}

// submittedJob returns the engine and the job ID a reason of
// SubmittedReason's names.
func submittedJob(reason string) (engine, id string, ok bool) {
	rest, ok := strings.CutPrefix(reason, "submitted to ")
	if !ok {
		return "", "", false
	}
	engine, id, ok = strings.Cut(rest, " as job ")
	if !ok || engine == "" || id == "" || strings.ContainsAny(engine+id, " ;") {
		return "", "", false
	}
	return engine, id, true
}

// MaxKeptAttempts bounds the attempts a record keeps, whatever its
// restart limit (limit+1 are kept, to count those within its window): a
// record is rewritten at each save, and read whole.
const MaxKeptAttempts = 1000

// KeptAttempts returns how many of its earlier attempts a record whose
// run restarts by r keeps: enough to count those within r's window.
func KeptAttempts(r *spool.Restart) int {
	limit := 0
	if r != nil {
		limit = r.Limit
	}
	return max(MaxAttempts, min(limit+1, MaxKeptAttempts))
}

// replayed returns the events of events (a run ID's, oldest first) that
// its last record came from: those of the last run made with the ID
// (Latest), less each change that a later event of the same rev or a
// lower one replaced. A watcher that crashed after appending a change,
// before writing its record, left that change in the history alone: the
// next one, from the record before it, made its next change with that
// rev again (a label or note request not yet answered is taken again, a
// process at a gate that never opened is started anew), and replaying
// both would add a note twice and count a start that never ran.
func replayed(events []Event) []Event {
	events = Latest(events)
	out := make([]Event, 0, len(events))
	for _, e := range events {
		for len(out) > 0 && out[len(out)-1].Rev >= e.Rev {
			out = out[:len(out)-1]
		}
		out = append(out, e)
	}
	return out
}

// backoffSuffix ends the reason of a run in backoff: what follows how its
// attempt ended, and the delay before the next.
var backoffSuffix = regexp.MustCompile(`; attempt [0-9]+ starts in ([^;]*)$`)

// nextStart returns when the next attempt of a run whose events (replayed,
// the last in backoff) end in a backoff is due: the delay its reason names
// after the event that began the backoff (later ones are label and note
// changes), or at once if it names none.
func nextStart(events []Event) *time.Time {
	i := len(events) - 1
	for i > 0 && events[i-1].State == Backoff {
		i--
	}
	e := events[i]
	t := e.Time
	if m := backoffSuffix.FindStringSubmatch(e.Reason); m != nil {
		if d, err := time.ParseDuration(m[1]); err == nil && d >= 0 {
			t = t.Add(d)
		}
	}
	return &t
}

// replayAttempts sets on st, from events (replayed, oldest first), what
// its record says of its attempts: how many started (attempt), how many
// of them were restarts, how the earlier ones ended (attempts, less the
// job of each), and of the last: when it started, became ready, was
// paused, and its stop.
//
// Not every running event is a start: a label, a note, a resume, and a
// run becoming ready are running events of the same process too. As the
// watcher counts them, an attempt starts with each process started for
// the run: the first event with a new pid (starting or running), or
// with any pid after a backoff (a pid used again by the next attempt);
// a process started anew after a watcher found that the one before never
// passed its gate is counted too. A run on a cluster has no pid: its
// attempt starts at its job's submission (Submitting) after the run's
// start or a backoff (a job never submitted is submitted again as the
// same attempt), and its started_at is when the job first ran. It is a
// restart where a backoff came before. Its job is the engine its
// submission named, and the ID and time of the event that says the
// engine took it (SubmittedReason), which each attempt ended keeps (its
// tag, and what the engine last said of it, are no event's).
func replayAttempts(st *State, events []Event) {
	var (
		open    bool // the current attempt's start is among the events
		pid     int  // its process's
		waited  bool // its process was starting: it waits for readiness
		backoff bool // a backoff since which no attempt started
		paused  bool // st.PausedAt is of a pause not yet replayed out
	)
	for _, e := range events {
		live := e.State == Starting || e.State == Running
		newProc := live && e.PID > 0 && (!open || e.PID != pid)
		newJob := e.State == Starting && e.PID == 0 && !open && strings.HasPrefix(e.Reason, Submitting)
		if newProc || newJob {
			st.Attempt++
			if backoff {
				st.Restarts++
			}
			st.StartedAt, st.ReadyAt, st.Stop, st.PausedAt, st.PausedFor = nil, nil, nil, nil, 0
			open, backoff, waited, paused = true, false, false, false
		}
		if newProc {
			pid = e.PID
			st.StartedAt = timeOf(e)
			st.Job = nil
		}
		if open && e.State == Starting && e.PID == 0 && strings.HasPrefix(e.Reason, Submitting) {
			// Its job, (re)submitted: the engine is named, its ID
			// once the engine took it.
			st.Job = &Job{Engine: strings.TrimPrefix(e.Reason, Submitting)}
		}
		// The first such event: a label or note event after it carries
		// the same reason, later.
		if engine, id, ok := submittedJob(e.Reason); ok && open && e.State == Queued && st.Job != nil && st.Job.ID == "" && engine == st.Job.Engine {
			st.Job.ID, st.Job.SubmittedAt = id, timeOf(e)
		}
		switch {
		case !open:
		case e.State == Starting && e.PID > 0:
			waited = true
		case e.State == Running && st.StartedAt == nil: // a job's, once it runs
			st.StartedAt = timeOf(e)
		case e.State == Running && waited && st.ReadyAt == nil:
			st.ReadyAt = timeOf(e)
		}
		switch {
		case e.State == Paused && !paused:
			st.PausedAt, paused = timeOf(e), true
		case live && paused:
			st.PausedFor += spool.Duration(max(0, e.Time.Sub(*st.PausedAt)))
			st.PausedAt, paused = nil, false
		}
		if e.Stop != nil {
			stop := *e.Stop
			st.Stop = &stop
		}
		switch {
		case e.State == Backoff && open:
			st.Attempts = append(st.Attempts, endedAttempt(st, e))
			if len(st.Attempts) > 2*MaxKeptAttempts {
				// A service that failed for months has a backoff for
				// each restart: no more than a record keeps is held.
				st.Attempts = append(st.Attempts[:0], st.Attempts[len(st.Attempts)-MaxKeptAttempts:]...)
			}
			open, backoff = false, true
		case Final(e.State) && backoff && (strings.HasPrefix(e.Reason, "could not start") || strings.HasPrefix(e.Reason, "could not restart")):
			st.Restarts++ // its next attempt was begun, and failed to start
			backoff = false
		}
	}
}

// endedAttempt returns how st's current attempt ended, as the backoff
// event e after it says: when the run went into backoff, not quite when
// its process ended, which the history does not record.
func endedAttempt(st *State, e Event) Attempt {
	a := Attempt{Attempt: st.Attempt, EndedAt: e.Time, ExitCode: e.ExitCode, Signal: e.Signal,
		Reason: backoffSuffix.ReplaceAllString(e.Reason, "")}
	if st.StartedAt != nil {
		a.StartedAt = *st.StartedAt
	}
	if st.Job != nil {
		a.Job = st.Job.ID
	}
	return a
}

func timeOf(e Event) *time.Time {
	t := e.Time
	return &t
}
