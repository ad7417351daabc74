package tracker

import (
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/tendhq/tend/spool"
)

// A record rebuilt from the history counts the attempts the watcher
// counted, not its running events (labels, notes, resumes and readiness
// are running events of the same process), and takes each attempt's
// start, readiness, pauses and stop from the events of that attempt.
func TestRebuildReplaysAttempts(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	ptr := func(s int) *time.Time { t := at(s); return &t }
	one, zero := 1, 0
	a := "1"
	restartStop := &Stop{Cause: CauseRestart, Requests: []string{"r@c1.restart"}, RequestedAt: at(5), KillAt: at(15)}
	cancelStop := &Stop{Cause: CauseCanceled, RequestedAt: at(8), KillAt: at(18)}
	type want struct {
		State     StateName
		Attempt   int
		Restarts  int
		StartedAt *time.Time
		ReadyAt   *time.Time
		PausedAt  *time.Time
		PausedFor spool.Duration
		Stop      *Stop
		Attempts  []Attempt
		Notes     []Note
		NextStart *time.Time
	}
	tests := []struct {
		name   string
		alive  int // the pid identify finds running
		events []Event
		want   want
	}{{
		name:  "a service restarted twice, labels and notes between, its pid used again",
		alive: 200,
		events: []Event{
			{Time: at(0), Rev: 1, State: Starting},
			{Time: at(1), Rev: 2, State: Running, PID: 100},
			{Time: at(2), Rev: 3, State: Running, PID: 100, Labels: map[string]*string{"a": &a}},
			{Time: at(3), Rev: 4, State: Running, PID: 100, Note: "n1"},
			{Time: at(5), Rev: 5, State: Stopping, PID: 100, Reason: "restart requested", Stop: restartStop, CreatedAt: ptr(0)},
			{Time: at(6), Rev: 6, State: Backoff, PID: 100, Signal: "SIGTERM", Reason: "restart requested; killed by SIGTERM; attempt 2 starts in 0s"},
			{Time: at(7), Rev: 7, State: Running, PID: 200},
			{Time: at(8), Rev: 8, State: Running, PID: 200, Note: "n2"},
			{Time: at(9), Rev: 9, State: Backoff, PID: 200, ExitCode: &one, Reason: "exited 1; attempt 3 starts in 1.5s"},
			{Time: at(10), Rev: 10, State: Backoff, PID: 200, Labels: map[string]*string{"a": nil}},
			{Time: at(11), Rev: 11, State: Running, PID: 200},
			{Time: at(12), Rev: 12, State: Running, PID: 200, Note: "n3"},
		},
		want: want{State: Running, Attempt: 3, Restarts: 2, StartedAt: ptr(11),
			Attempts: []Attempt{
				{Attempt: 1, StartedAt: at(1), EndedAt: at(6), Signal: "SIGTERM", Reason: "restart requested; killed by SIGTERM"},
				{Attempt: 2, StartedAt: at(7), EndedAt: at(9), ExitCode: &one, Reason: "exited 1"},
			},
			Notes: []Note{{at(3), "n1"}, {at(8), "n2"}, {at(12), "n3"}}},
	}, {
		name:  "a health check: starting, then ready",
		alive: 100,
		events: []Event{
			{Time: at(0), Rev: 1, State: Starting},
			{Time: at(1), Rev: 2, State: Starting, PID: 100},
			{Time: at(3), Rev: 3, State: Running, PID: 100},
			{Time: at(4), Rev: 4, State: Running, PID: 100, Note: "n"},
		},
		want: want{State: Running, Attempt: 1, StartedAt: ptr(1), ReadyAt: ptr(3), Notes: []Note{{at(4), "n"}}},
	}, {
		name:  "paused, resumed, paused again",
		alive: 100,
		events: []Event{
			{Time: at(0), Rev: 1, State: Starting},
			{Time: at(1), Rev: 2, State: Running, PID: 100},
			{Time: at(2), Rev: 3, State: Paused, PID: 100, Reason: "paused from running"},
			{Time: at(3), Rev: 4, State: Paused, PID: 100, Note: "n"},
			{Time: at(5), Rev: 5, State: Running, PID: 100},
			{Time: at(7), Rev: 6, State: Paused, PID: 100, Reason: "paused from running"},
		},
		want: want{State: Paused, Attempt: 1, StartedAt: ptr(1), PausedAt: ptr(7), PausedFor: spool.Duration(3 * time.Second), Notes: []Note{{at(3), "n"}}},
	}, {
		name: "paused while starting, canceled",
		events: []Event{
			{Time: at(0), Rev: 1, State: Starting},
			{Time: at(1), Rev: 2, State: Starting, PID: 100},
			{Time: at(2), Rev: 3, State: Paused, PID: 100, Reason: "paused from starting"},
			{Time: at(4), Rev: 4, State: Starting, PID: 100},
			{Time: at(6), Rev: 5, State: Running, PID: 100},
			{Time: at(8), Rev: 6, State: Stopping, PID: 100, Reason: "cancel requested", Stop: cancelStop, CreatedAt: ptr(0)},
			{Time: at(9), Rev: 7, State: Canceled, PID: 100, Signal: "SIGTERM", EndedAt: ptr(9), CreatedAt: ptr(0)},
		},
		want: want{State: Canceled, Attempt: 1, StartedAt: ptr(1), ReadyAt: ptr(6), PausedFor: spool.Duration(2 * time.Second), Stop: cancelStop},
	}, {
		name: "a job on a cluster: no pid, restarted once",
		events: []Event{
			{Time: at(0), Rev: 1, State: Starting, Reason: "being submitted to slurm"},
			{Time: at(1), Rev: 2, State: Queued, Reason: "Priority"},
			{Time: at(3), Rev: 3, State: Running},
			{Time: at(4), Rev: 4, State: Running, Note: "n"},
			{Time: at(5), Rev: 5, State: Backoff, ExitCode: &one, Reason: "exited 1; attempt 2 starts in 1s"},
			{Time: at(6), Rev: 6, State: Starting, Reason: "being submitted to slurm"},
			{Time: at(7), Rev: 7, State: Starting, Reason: "being submitted to slurm"}, // never submitted: again, the same attempt
			{Time: at(8), Rev: 8, State: Running},
			{Time: at(9), Rev: 9, State: Completed, ExitCode: &zero, EndedAt: ptr(9), CreatedAt: ptr(0)},
		},
		want: want{State: Completed, Attempt: 2, Restarts: 1, StartedAt: ptr(8),
			Attempts: []Attempt{{Attempt: 1, StartedAt: at(3), EndedAt: at(5), ExitCode: &one, Reason: "exited 1"}},
			Notes:    []Note{{at(4), "n"}}},
	}, {
		name: "a restart that could not start",
		events: []Event{
			{Time: at(0), Rev: 1, State: Starting},
			{Time: at(1), Rev: 2, State: Running, PID: 100},
			{Time: at(2), Rev: 3, State: Backoff, PID: 100, ExitCode: &one, Reason: "exited 1; attempt 2 starts in 1s"},
			{Time: at(3), Rev: 4, State: Failed, PID: 100, ExitCode: &one, Reason: "could not start: fork: no memory", EndedAt: ptr(3), CreatedAt: ptr(0)},
		},
		want: want{State: Failed, Attempt: 1, Restarts: 1, StartedAt: ptr(1),
			Attempts: []Attempt{{Attempt: 1, StartedAt: at(1), EndedAt: at(2), ExitCode: &one, Reason: "exited 1"}}},
	}, {
		// Its process ended, as the record said: not lost, and its next
		// attempt due when its backoff said (a label since moves nothing).
		name: "in backoff",
		events: []Event{
			{Time: at(0), Rev: 1, State: Starting},
			{Time: at(1), Rev: 2, State: Running, PID: 100},
			{Time: at(2), Rev: 3, State: Backoff, PID: 100, ExitCode: &one, Reason: "exited 1; attempt 2 starts in 1.5s"},
			{Time: at(3), Rev: 4, State: Backoff, PID: 100, ExitCode: &one, Reason: "exited 1; attempt 2 starts in 1.5s", Labels: map[string]*string{"a": &a}},
		},
		want: want{State: Backoff, Attempt: 1, StartedAt: ptr(1), NextStart: func() *time.Time { t := at(2).Add(1500 * time.Millisecond); return &t }(),
			Attempts: []Attempt{{Attempt: 1, StartedAt: at(1), EndedAt: at(2), ExitCode: &one, Reason: "exited 1"}}},
	}, {
		// A watcher crashed after appending rev 3 (and, in another
		// crash, rev 5), before their records: the next one made its
		// next change with that rev again, from the record before.
		name:  "revs written again after crashes",
		alive: 300,
		events: []Event{
			{Time: at(0), Rev: 1, State: Starting},
			{Time: at(1), Rev: 2, State: Running, PID: 100},
			{Time: at(2), Rev: 3, State: Running, PID: 100, Note: "its request taken again"},
			{Time: at(3), Rev: 3, State: Running, PID: 100, Note: "its request taken again"},
			{Time: at(4), Rev: 4, State: Backoff, PID: 100, ExitCode: &one, Reason: "exited 1; attempt 2 starts in 1s"},
			{Time: at(5), Rev: 5, State: Starting, PID: 200}, // its gate never opened
			{Time: at(6), Rev: 5, State: Running, PID: 300},
		},
		want: want{State: Running, Attempt: 2, Restarts: 1, StartedAt: ptr(6),
			Attempts: []Attempt{{Attempt: 1, StartedAt: at(1), EndedAt: at(4), ExitCode: &one, Reason: "exited 1"}},
			Notes:    []Note{{at(3), "its request taken again"}}},
	}, {
		// A watcher that found a process that never passed its gate
		// starts another, and counts it as the watcher does.
		name: "a process started anew after a crash, then ended",
		events: []Event{
			{Time: at(0), Rev: 1, State: Starting},
			{Time: at(1), Rev: 2, State: Running, PID: 100},
			{Time: at(2), Rev: 3, State: Starting, PID: 100},
			{Time: at(3), Rev: 4, State: Running, PID: 101},
			{Time: at(4), Rev: 5, State: Completed, PID: 101, ExitCode: &zero, EndedAt: ptr(4), CreatedAt: ptr(0)},
		},
		want: want{State: Completed, Attempt: 2, StartedAt: ptr(3)},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewStore(t.TempDir())
			if err := os.MkdirAll(s.RunDir("r"), 0o755); err != nil {
				t.Fatal(err)
			}
			for i := range tt.events {
				tt.events[i].ID = "r"
			}
			st := Rebuild(s, "r", tt.events, func(pid int, _ string) (uint64, bool) { return 1, pid == tt.alive })
			got := want{st.State, st.Attempt, st.Restarts, st.StartedAt, st.ReadyAt, st.PausedAt, st.PausedFor, st.Stop, st.Attempts, st.Notes, st.NextStartAt}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("rebuilt\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}

// A service that failed and restarted more often than a record keeps
// attempts of is rebuilt with the ones its record keeps, the newest.
func TestRebuildKeepsAsManyAttemptsAsARecord(t *testing.T) {
	s := NewStore(t.TempDir())
	if err := os.MkdirAll(s.RunDir("r"), 0o755); err != nil {
		t.Fatal(err)
	}
	body := `{"command": "false", "restart": {"policy": "on-failure", "limit": 20}}`
	if err := os.WriteFile(s.Run("r").Request(), []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	one := 1
	n := 2*MaxKeptAttempts + 5
	var events []Event
	for i := range n {
		rev := int64(2 * i)
		events = append(events,
			Event{Time: t0.Add(time.Duration(rev) * time.Second), ID: "r", Rev: rev + 1, State: Running, PID: 100 + i},
			Event{Time: t0.Add(time.Duration(rev+1) * time.Second), ID: "r", Rev: rev + 2, State: Backoff, PID: 100 + i, ExitCode: &one, Reason: "exited 1; attempt 2 starts in 1s"})
	}
	st := Rebuild(s, "r", events, func(int, string) (uint64, bool) { return 0, false })
	if st.Attempt != n || st.Restarts != n-1 {
		t.Errorf("attempt %d, restarts %d; want %d, %d", st.Attempt, st.Restarts, n, n-1)
	}
	if len(st.Attempts) != 21 || st.Attempts[20].Attempt != n || st.Attempts[0].Attempt != n-20 {
		t.Errorf("%d attempts kept, the last %+v; want the newest 21 (limit+1)", len(st.Attempts), st.Attempts[len(st.Attempts)-1])
	}
}

// A run on a cluster rebuilt from the history is still one: its job (the
// engine its submission named, the ID and time of the event that says
// the engine took it; each attempt ended keeps its own), and its request's
// Slurm settings, or the cluster's defaults. A live one is left live, for
// the next watcher to follow its job, not recorded lost for want of a
// process on this host. It came back with neither: a local run, and a
// live one lost while its job ran on.
func TestRebuildJob(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	ptr := func(s int) *time.Time { t := at(s); return &t }
	one, zero := 1, 0
	attempt1 := []Event{
		{Time: at(0), Rev: 1, State: Starting, Reason: Submitting + "slurm"},
		{Time: at(1), Rev: 2, State: Queued, Reason: SubmittedReason("slurm", "41")},
		{Time: at(2), Rev: 3, State: Queued, Reason: "slurm job 41 is pending: Priority"},
		{Time: at(3), Rev: 4, State: Running},
		{Time: at(5), Rev: 5, State: Backoff, ExitCode: &one, Reason: "exited 1; attempt 2 starts in 1s"},
		{Time: at(6), Rev: 6, State: Starting, Reason: Submitting + "slurm"},
		{Time: at(7), Rev: 7, State: Queued, Reason: SubmittedReason("slurm", "42")},
		{Time: at(7).Add(500 * time.Millisecond), Rev: 8, State: Queued, Reason: SubmittedReason("slurm", "42"), Note: "n"}, // the same reason, later
		{Time: at(8), Rev: 9, State: Running},
	}
	ended := append(append([]Event{}, attempt1...), Event{Time: at(9), Rev: 10, State: Completed, ExitCode: &zero, EndedAt: ptr(9), CreatedAt: ptr(0)})
	tests := []struct {
		name      string
		events    []Event
		request   string
		wantState StateName
		wantJob   *Job
		wantSlurm *spool.Slurm
	}{
		{"ended, its request's settings", ended, `{"command": "true", "slurm": {"partition": "one"}, "restart": {"policy": "on-failure"}}`,
			Completed, &Job{Engine: "slurm", ID: "42", SubmittedAt: ptr(7)}, &spool.Slurm{Partition: "one"}},
		{"ended, on a cluster by config.json", ended, `{"command": "true", "restart": {"policy": "on-failure"}}`,
			Completed, &Job{Engine: "slurm", ID: "42", SubmittedAt: ptr(7)}, &spool.Slurm{}},
		{"running", attempt1, `{"command": "true", "slurm": {}, "restart": {"policy": "on-failure"}}`,
			Running, &Job{Engine: "slurm", ID: "42", SubmittedAt: ptr(7)}, &spool.Slurm{}},
		{"being submitted again", attempt1[:6], `{"command": "true", "slurm": {}, "restart": {"policy": "on-failure"}}`,
			Starting, &Job{Engine: "slurm"}, &spool.Slurm{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewStore(t.TempDir())
			if err := os.MkdirAll(s.RunDir("r"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(s.Run("r").Request(), []byte(tt.request), 0o600); err != nil {
				t.Fatal(err)
			}
			events := append([]Event{}, tt.events...)
			for i := range events {
				events[i].ID = "r"
			}
			st := Rebuild(s, "r", events, func(int, string) (uint64, bool) { return 0, false })
			if st.State != tt.wantState {
				t.Errorf("state %s (%s), want %s", st.State, st.Reason, tt.wantState)
			}
			if !reflect.DeepEqual(st.Job, tt.wantJob) {
				t.Errorf("job %+v, want %+v", st.Job, tt.wantJob)
			}
			if !reflect.DeepEqual(st.Slurm, tt.wantSlurm) {
				t.Errorf("slurm %+v, want %+v", st.Slurm, tt.wantSlurm)
			}
			if len(st.Attempts) != 1 || st.Attempts[0].Job != "41" {
				t.Errorf("attempts %+v, want attempt 1's job, 41", st.Attempts)
			}
		})
	}
}
