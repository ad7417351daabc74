// Package tracker keeps tend's run records: one directory per run holding
// its state.json, which is replaced atomically and durably on every change,
// and the root's history.jsonl, to which every state change is appended as
// one whole line under a lock.
//
// Readers never see a partial state file, and a history line that does not
// parse is an error that names its line, never something skipped.
package tracker

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"time"

	"github.com/tendhq/tend/spool"
)

// A StateName is a run's state, as its record and the history say it
// (docs/protocol.md, "States").
type StateName string

// The states of a run, in the order of docs/protocol.md's table.
const (
	Queued    StateName = "queued"   // waiting for a slot; its request is still in the spool
	Starting  StateName = "starting" // taken; being started, or waiting for readiness
	Running   StateName = "running"
	Paused    StateName = "paused"   // its process group is stopped (SIGSTOP)
	Backoff   StateName = "backoff"  // its process ended; it starts again at next_start_at
	Stopping  StateName = "stopping" // a stop signal was sent (see Stop)
	Completed StateName = "completed"
	Failed    StateName = "failed"
	Canceled  StateName = "canceled"
	TimedOut  StateName = "timed_out"
	// Deleted appears only in the history: the run's record was removed.
	Deleted StateName = "deleted"
)

// States lists a record's states, in the order of docs/protocol.md's
// table: the one source the schemas and the CLI's checks are kept to.
var States = []StateName{Queued, Starting, Running, Paused, Backoff, Stopping, Completed, Failed, Canceled, TimedOut}

// A StopCause says why a run is being stopped (Stop.Cause).
type StopCause string

// The causes of a stop. A run stopped by a cancel (or by the watcher's
// shutdown) ends canceled, one stopped by its timeout timed_out, and one
// stopped to be started again (a restart request, or a health check that
// found it unhealthy) is started again.
const (
	CauseCanceled StopCause = "canceled"
	CauseTimedOut StopCause = "timed_out"
	CauseRestart  StopCause = "restart"
)

// StopCauses lists the causes of a stop: the one source the schema is
// kept to.
var StopCauses = []StopCause{CauseCanceled, CauseTimedOut, CauseRestart}

// Ends returns the state a run stopped for cause ends in: canceled or
// timed_out ("" for a restart, which is started again).
func (c StopCause) Ends() StateName {
	switch c {
	case CauseCanceled:
		return Canceled
	case CauseTimedOut:
		return TimedOut
	}
	return ""
}

// Final reports whether state is one a run never leaves.
func Final(state StateName) bool {
	switch state {
	case Completed, Failed, Canceled, TimedOut:
		return true
	}
	return false
}

// MaxRev is the highest revision tend takes up from a record it did not
// write (a hand's edit, whose revision it never goes back from): the
// highest integer that readers holding JSON numbers as float64 keep
// exact, and far enough from int64's end that no count of changes after
// it overflows into negative revisions, which every reader of the shared
// history would refuse.
const MaxRev = 1 << 53

// State is a run's record, as kept in runs/<id>/state.json.
type State struct {
	ID    string    `json:"id"`
	State StateName `json:"state"`
	// Rev grows by one with every change of the record.
	Rev      int64  `json:"rev"`
	Session  string `json:"session"`
	OwnerUID int    `json:"owner_uid"`
	// Command is the argv that was (or is to be) executed; a shell command
	// is ["/bin/sh", "-c", text].
	Command []string          `json:"command"`
	Cwd     string            `json:"cwd"`
	Labels  map[string]string `json:"labels,omitempty"`
	Timeout spool.Duration    `json:"timeout,omitempty"`
	Grace   spool.Duration    `json:"grace"`
	// After names the runs it waits for, as its request does (ID, or
	// ID:condition), and NotBefore when it may start at the earliest: it
	// is queued until then (see spool.Dep).
	After     []string   `json:"after,omitempty"`
	NotBefore *time.Time `json:"not_before,omitempty"`
	// AfterSince holds, by ID, when an edit of its queued request added
	// a run to After: that run is the one of that time, not of
	// CreatedAt's (a run deleted in between, and its ID used again, is
	// not the one waited for). The runs it named from the first are
	// not in it.
	AfterSince map[string]time.Time `json:"after_since,omitempty"`
	// RequestSum names the version of the start request the record was
	// made from (spool.BodySum), while that request waits in the spool: a
	// watcher that restarts tells by it a request edited while none ran.
	RequestSum string `json:"request_sum,omitempty"`
	// HeldSum names, while the queued run is held by a bad version of its
	// request (see Reason), that version (spool.BodySum), which was
	// answered and copied to rejected/: a watcher that restarts answers
	// it no second time, and tells from it another bad version, refused
	// for the same reason.
	HeldSum string `json:"held_sum,omitempty"`
	// Slurm is set for a run submitted to a Slurm cluster: the settings it
	// is submitted with, its request's over config.json's defaults.
	Slurm *spool.Slurm `json:"slurm,omitempty"`

	// PID, PGID and ProcStart identify the run's process: a PID names the
	// same process only while /proc/<pid>/stat shows this start time (in
	// clock ticks after boot).
	PID       int    `json:"pid,omitempty"`
	PGID      int    `json:"pgid,omitempty"`
	ProcStart uint64 `json:"proc_start,omitempty"`
	// Boot is the boot the process was started in (procfs.BootID): a
	// PID and a start time name the same process only within it. "" in
	// the records of a tend before it, and where the boot is unknown.
	Boot string `json:"boot,omitempty"`
	// Job identifies a cluster run's job instead (Slurm's), from just
	// before it is submitted.
	Job *Job `json:"job,omitempty"`

	CreatedAt time.Time  `json:"created_at"`
	StartedAt *time.Time `json:"started_at,omitempty"`
	EndedAt   *time.Time `json:"ended_at,omitempty"`

	// ExitCode is set when the process exited; Signal names the signal
	// (e.g. "SIGTERM") when one killed it instead.
	ExitCode *int   `json:"exit_code,omitempty"`
	Signal   string `json:"signal,omitempty"`
	// Reason says in words why the run is in its state; every failure has one.
	Reason string `json:"reason,omitempty"`

	// Stop is set once tend has decided to stop the run (cancel or timeout).
	Stop *Stop `json:"stop,omitempty"`
	// Notes are lines of text people and agents attached (verb note).
	Notes []Note `json:"notes,omitempty"`
	// Done names the last tagged requests (label, note, restart) carried
	// out on the run, so that one taken again (after a crash or a power
	// loss, before its claimed file was removed for good) is answered
	// without being carried out twice.
	Done []string `json:"done,omitempty"`

	// A service's settings, from its request.
	Restart   *spool.Restart `json:"restart,omitempty"`
	Health    *spool.Health  `json:"health,omitempty"`
	ReadyFile bool           `json:"ready_file,omitempty"`
	Limits    *spool.Rlimits `json:"limits,omitempty"`

	// Attempt counts the starts of the run's process (1 for the first);
	// Restarts counts those after the first. Attempts holds how the last
	// few earlier attempts ended, oldest first.
	Attempt  int       `json:"attempt,omitempty"`
	Restarts int       `json:"restarts,omitempty"`
	Attempts []Attempt `json:"attempts,omitempty"`
	// NextStartAt is when a run in backoff starts again.
	NextStartAt *time.Time `json:"next_start_at,omitempty"`
	// ReadyAt is when a run that waits for readiness (health check or
	// ready file) became ready: starting until then, running after.
	ReadyAt      *time.Time    `json:"ready_at,omitempty"`
	HealthStatus *HealthStatus `json:"health_status,omitempty"`
	// PausedAt is set while the run is paused; PausedFor sums its earlier
	// pauses, which its timeout does not count.
	PausedAt  *time.Time     `json:"paused_at,omitempty"`
	PausedFor spool.Duration `json:"paused_for,omitempty"`

	// Output says how the output files were capped, if they were.
	Output *Output `json:"output,omitempty"`
	// Progress is what the run last wrote to $TEND_PROGRESS (a number from
	// 0 to 100, or a short text), and when.
	Progress   string     `json:"progress,omitempty"`
	ProgressAt *time.Time `json:"progress_at,omitempty"`
	// CPUSeconds is the CPU time the run's process and the children it
	// waited for used, recorded when it ended.
	CPUSeconds float64 `json:"cpu_seconds,omitempty"`
	// DurationSeconds is how long its process ran, measured on the
	// monotonic clock (ended_at minus started_at is not, if the wall clock
	// was set meanwhile), recorded when it ended.
	DurationSeconds float64 `json:"duration_seconds,omitempty"`

	// Seal is a keyed checksum of every other field but Sum, set by a
	// Store that has the root's key (see LoadKey): only the watcher's user
	// can make one, so a record whose Seal does not match was not written
	// by tend, whatever its Sum says, and the watcher acts on none of it.
	Seal string `json:"seal,omitempty"`
	// Sum is a checksum of every other field, set by Store.Write. A record
	// whose Sum does not match was not written by tend: it is not trusted.
	Sum string `json:"sum"`
}

// Attempt is how one start of a run's process ended.
type Attempt struct {
	Attempt   int       `json:"attempt"`
	StartedAt time.Time `json:"started_at"`
	EndedAt   time.Time `json:"ended_at"`
	ExitCode  *int      `json:"exit_code,omitempty"`
	Signal    string    `json:"signal,omitempty"`
	Reason    string    `json:"reason"`
	Job       string    `json:"job,omitempty"` // a cluster run's: the ID of this attempt's job
}

// Job is the job of a run on a cluster (a Slurm job): where it runs, in
// place of a process of this host. Each attempt of the run is a job of
// its own.
type Job struct {
	// Engine is the cluster's scheduler: "slurm".
	Engine string `json:"engine"`
	// Tag is the job's name in the engine, made from the root's identity,
	// the run's ID and the attempt: a job submitted just before the
	// watcher died, whose ID it never recorded, is found by it.
	Tag string `json:"tag"`
	// ID is the engine's ID of the job once it is submitted (scontrol
	// show job ID).
	ID string `json:"id,omitempty"`
	// State and Reason are the engine's own words for where the job is
	// (PENDING, RUNNING, COMPLETED, ...; Resources, Priority, ...), as it
	// last said them; Nodes where it runs.
	State       string     `json:"state,omitempty"`
	Reason      string     `json:"reason,omitempty"`
	Nodes       string     `json:"nodes,omitempty"`
	SubmittedAt *time.Time `json:"submitted_at,omitempty"`
}

// MaxAttempts bounds State.Attempts.
const MaxAttempts = 10

// HealthStatus is what a run's health checks found.
type HealthStatus struct {
	Status   string        `json:"status"` // starting, healthy or unhealthy
	Failures int           `json:"failures"`
	Checks   []HealthCheck `json:"checks"` // the last few, oldest first
}

// HealthCheck is one health check's result.
type HealthCheck struct {
	Time   time.Time `json:"time"`
	OK     bool      `json:"ok"`
	Detail string    `json:"detail,omitempty"`
	// DurationSeconds is how long the check took, on the monotonic clock.
	DurationSeconds float64 `json:"duration_seconds"`
}

// Output is the capping of a run's output files: each keeps only its
// newest Limit bytes or so.
type Output struct {
	Limit  int64  `json:"limit"`
	Stdout Stream `json:"stdout"`
	Stderr Stream `json:"stderr"`
}

// Stream is what was dropped from one output file. Offsets are absolute
// positions in everything the run wrote to the stream: byte N of the file
// is absolute offset Base+N, and the absolute offsets below Dropped are
// gone (Base equals Dropped where the file system can cut a file's start;
// elsewhere Base is 0 and the dropped bytes are a hole that reads as
// zeros).
type Stream struct {
	Dropped int64 `json:"dropped"`
	Base    int64 `json:"base"`
}

// Note is a line of text kept with a run.
type Note struct {
	Time time.Time `json:"time"`
	Text string    `json:"text"`
}

// checksum returns the checksum of st's fields other than Sum.
func (st *State) checksum() string {
	c := *st
	c.Sum = ""
	b, _ := json.Marshal(&c)
	return sumOf(b)
}

// encode sets st's Seal (with key, if there is one) and Sum, and returns
// its state file: indented JSON and a newline. It marshals st once: the
// compact form with seal and sum empty is what the seal is of; with the
// seal put in, what the sum is of; and indenting that (with the sum put
// in) gives what json.MarshalIndent would.
func (st *State) encode(key []byte) ([]byte, error) {
	st.Seal, st.Sum = "", ""
	c, err := json.Marshal(st)
	if err != nil {
		return nil, err
	}
	if !bytes.HasSuffix(c, []byte(sumSuffix)) {
		return nil, errors.New("its compact JSON does not end with its sum field")
	}
	if key != nil {
		st.Seal = sealOf(key, c)
		c = append(c[:len(c)-len(sumSuffix)], `,"seal":"`+st.Seal+`"`+sumSuffix...)
	}
	st.Sum = sumOf(c)
	c = append(c[:len(c)-len(sumSuffix)], `,"sum":"`+st.Sum+`"}`...)
	var b bytes.Buffer
	b.Grow(len(c) + len(c)/2)
	if err := json.Indent(&b, c, "", "  "); err != nil {
		return nil, err
	}
	b.WriteByte('\n')
	return b.Bytes(), nil
}

func sumOf(compact []byte) string {
	h := sha256.Sum256(compact)
	return hex.EncodeToString(h[:12])
}

// sumSuffix is how the compact JSON of a record ends before its sum is
// filled in; sum is its last field.
const sumSuffix = `,"sum":""}`

// fileSumMatches reports whether state file bytes b, as tend writes them
// (State marshaled with indentation), carry the checksum sum. It needs no
// marshaling: the compact form of such a file is json.Marshal's output, so
// emptying its sum gives the checksummed bytes. A false answer only means
// the file is not byte for byte what tend writes (checksum decides then).
func fileSumMatches(b []byte, sum string) bool {
	if len(sum) != 24 {
		return false
	}
	c := compact(b)
	tail := `,"sum":"` + sum + `"}`
	if !bytes.HasSuffix(c, []byte(tail)) {
		return false
	}
	c = append(c[:len(c)-len(tail)], sumSuffix...)
	return sumOf(c) == sum
}

// compact returns valid JSON b without the white space outside its
// strings: what json.Compact gives, without its validating scanner (the
// caller has parsed b already).
func compact(b []byte) []byte {
	out := make([]byte, 0, len(b))
	inString, escaped := false, false
	for _, c := range b {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == ' ' || c == '\n' || c == '\t' || c == '\r':
			continue
		case c == '"':
			inString = true
		}
		out = append(out, c)
	}
	return out
}

// Stop records a decision to stop a run: why, and when SIGKILL follows the
// SIGTERM if the run's process group has not ended.
type Stop struct {
	Cause StopCause `json:"cause"`
	// Requests names the cancel requests (<id>.cancel, <id>@<tag>.cancel)
	// that asked for the stop, or that arrived while it was under way; their
	// outcomes are written when the run has ended. Empty when no request
	// asked (a timeout, the watcher's shutdown).
	Requests    []string  `json:"requests,omitempty"`
	RequestedAt time.Time `json:"requested_at"`
	KillAt      time.Time `json:"kill_at"`
}
