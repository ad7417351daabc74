package mcpserver

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/tendhq/tend"
	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
)

// A record holds what tend needs to keep a run (its seal and sum, the
// boot and start time that identify its process, the request it was made
// from, its output's bases): an agent acts on none of it, and each of
// its calls pays for it in context. So start, ls, show and wait answer
// a run's view by default, what an agent acts on; ls and show answer the
// whole record with full.

// runView is what an agent acts on of a run: docs/protocol.md's record
// fields of the same names, and ls's position and usage.
type runView struct {
	ID        string            `json:"id"`
	Session   string            `json:"session,omitempty" jsonschema:"the session that started the run"`
	State     tracker.StateName `json:"state"`
	Command   []string          `json:"command" jsonschema:"what runs: a shell command is [\"/bin/sh\", \"-c\", text]"`
	Labels    map[string]string `json:"labels,omitempty" jsonschema:"the run's labels (in a view, capped: see labels_cut)"`
	LabelsCut string            `json:"labels_cut,omitempty" jsonschema:"how labels was capped, if it was: labels left out, values cut short (ending …); full has them whole"`
	Reason    string            `json:"reason,omitempty"`
	ExitCode  *int              `json:"exit_code,omitempty"`
	Signal    string            `json:"signal,omitempty" jsonschema:"the signal that killed it (SIGTERM, ...), once it has ended so"`
	PID       int               `json:"pid,omitempty" jsonschema:"its process (its group's leader), while it runs on this host"`
	CreatedAt time.Time         `json:"created_at" jsonschema:"when it was asked for"`
	StartedAt *time.Time        `json:"started_at,omitempty" jsonschema:"when its process (this attempt's) started"`
	EndedAt   *time.Time        `json:"ended_at,omitempty" jsonschema:"when it ended"`
	Duration  float64           `json:"duration_seconds,omitempty" jsonschema:"how long its process ran, once it has ended"`
	Timeout   spool.Duration    `json:"timeout,omitempty" jsonschema:"it is stopped (timed_out) if it runs longer"`
	After     []string          `json:"after,omitempty" jsonschema:"the runs it waits for, queued, each ID or ID:condition"`
	NotBefore *time.Time        `json:"not_before,omitempty" jsonschema:"it starts no earlier than this"`
	Attempt   int               `json:"attempt,omitempty" jsonschema:"which start of its process this is, from 1"`
	Restarts  int               `json:"restarts,omitempty" jsonschema:"how many times it was restarted"`
	NextStart *time.Time        `json:"next_start_at,omitempty" jsonschema:"in backoff: when it starts again"`
	Health    string            `json:"health_state,omitempty" jsonschema:"with a health check, while its process is live: starting, healthy or unhealthy"`
	Ready     bool              `json:"ready" jsonschema:"it is running and ready (its health check passed, or it created its ready file; without either, once it runs)"`
	PausedAt  *time.Time        `json:"paused_at,omitempty" jsonschema:"while it is paused: since when"`
	Progress  string            `json:"progress,omitempty" jsonschema:"what it last wrote to $TEND_PROGRESS"`
	Notes     []tracker.Note    `json:"notes,omitempty" jsonschema:"lines of text attached to it, oldest first (in a view, the newest 10: see notes_truncated)"`
	// NotesTotal and NotesTruncated say that notes holds the newest
	// of them only, as ls's total and truncated say of its runs.
	NotesTotal     int           `json:"notes_total,omitempty" jsonschema:"how many notes it has"`
	NotesTruncated bool          `json:"notes_truncated,omitempty" jsonschema:"it has more notes than a view holds: notes has the newest; show with full has them all"`
	Job            *tracker.Job  `json:"job,omitempty" jsonschema:"a Slurm run's job"`
	Dropped        *droppedView  `json:"dropped,omitempty" jsonschema:"how many bytes of its output were dropped (the output is capped), if any"`
	Size           tend.LogPlace `json:"size" jsonschema:"each stream's size, as logs answers it (the offset just past the last byte written): more than the next of the last read means more to read"`
	Position       int           `json:"position,omitempty"`
	Usage          *tend.Usage   `json:"usage,omitempty" jsonschema:"what a live run's process group uses now"`
	QuietFor       *float64      `json:"quiet_seconds,omitempty"`
	LastLine       string        `json:"last_line,omitempty"`
}

// droppedView is how much of each stream's output is gone.
type droppedView struct {
	Stdout int64 `json:"stdout"`
	Stderr int64 `json:"stderr"`
}

// viewOf returns l's view, with size its output's size (Client.OutputSize).
func viewOf(l tend.Listed, size tend.LogPlace) runView {
	st := l.Record
	v := runView{ID: st.ID, Session: st.Session, State: st.State, Command: st.Command,
		Reason: st.Reason, ExitCode: st.ExitCode, Signal: st.Signal,
		CreatedAt: st.CreatedAt, StartedAt: st.StartedAt, EndedAt: st.EndedAt, Duration: st.DurationSeconds,
		Timeout: st.Timeout, NotBefore: st.NotBefore, Attempt: st.Attempt, Restarts: st.Restarts,
		NextStart: st.NextStartAt, Ready: tend.Ready(st), PausedAt: st.PausedAt, Progress: st.Progress,
		Job: st.Job, Position: l.Position, Usage: l.Usage, QuietFor: l.QuietFor, LastLine: l.LastLine, Size: size}
	if tend.Live(st) {
		// Once its process has exited (ended, or in backoff), its PID is
		// no longer its: an agent that signals it may hit another.
		v.PID = st.PID
	}
	if st.State == tracker.Queued {
		v.After = st.After // what it waits for: once it has started, history
	}
	v.Labels, v.LabelsCut = viewLabels(st.Labels)
	v.Notes, v.NotesTotal = st.Notes, len(st.Notes)
	if len(v.Notes) > maxViewNotes {
		v.Notes, v.NotesTruncated = v.Notes[len(v.Notes)-maxViewNotes:], true
	}
	if st.HealthStatus != nil && tend.Live(st) {
		// Only while its process is: an ended run (or one in backoff)
		// keeps the status its last check left, "starting" if none
		// passed, which would have an agent wait on a run that is gone.
		v.Health = st.HealthStatus.Status
	}
	if o := st.Output; o != nil && o.Stdout.Dropped+o.Stderr.Dropped > 0 {
		v.Dropped = &droppedView{Stdout: o.Stdout.Dropped, Stderr: o.Stderr.Dropped}
	}
	return v
}

// A view's labels are capped: labels are free text of any size, and a
// run with thousands of them, or values of 100 KB, would fill an agent's
// context at each ls. A view has at most maxViewLabels, by key order,
// each key and value at most maxViewLabel bytes; full has them all.
const (
	maxViewLabels = 50
	maxViewLabel  = 256
)

// A view's notes are capped too, to the newest maxViewNotes: a run may be
// noted on for as long as it lives (each note up to 4 KiB, within the
// room its labels and notes share), and ls answers 50 runs at a time.
const maxViewNotes = 10

// viewLabels returns labels capped for a view, and what was cut ("" if
// nothing was): the first maxViewLabels keys in order, less those longer
// than maxViewLabel bytes, each value cut to maxViewLabel bytes (at a
// character's start) followed by "…".
func viewLabels(labels map[string]string) (map[string]string, string) {
	keys := slices.Sorted(maps.Keys(labels))
	var out map[string]string
	left, cut := 0, 0
	for _, k := range keys {
		if len(out) == maxViewLabels || len(k) > maxViewLabel {
			left++
			continue
		}
		if out == nil {
			out = make(map[string]string)
		}
		v := labels[k]
		if len(v) > maxViewLabel {
			n := maxViewLabel
			for n > 0 && !utf8.RuneStart(v[n]) {
				n--
			}
			v = v[:n] + "…"
			cut++
		}
		out[k] = v
	}
	var said []string
	if left > 0 {
		said = append(said, fmt.Sprintf("%d of %d labels left out (at most %d shown, keys of at most %d bytes)", left, len(labels), maxViewLabels, maxViewLabel))
	}
	if cut > 0 {
		values := "values"
		if cut == 1 {
			values = "value"
		}
		said = append(said, fmt.Sprintf("%d %s cut to %d bytes (ending …)", cut, values, maxViewLabel))
	}
	if said == nil {
		return out, ""
	}
	return out, strings.Join(said, "; ") + ": show with full has them whole"
}

// shownRun is a run as ls and show answer it: its view, or with full
// its whole record (with position, usage and ready), which the view's
// schema admits (openView).
type shownRun struct {
	runView
	full json.RawMessage
}

// MarshalJSON returns the whole record if there is one, else the view.
func (r shownRun) MarshalJSON() ([]byte, error) {
	if r.full != nil {
		return r.full, nil
	}
	return json.Marshal(r.runView)
}

// shown returns l as ls and show answer it: its view, or its whole
// record if full, with ready and size beside its members.
func shown(l tend.Listed, size tend.LogPlace, full bool) (shownRun, error) {
	r := shownRun{runView: viewOf(l, size)}
	if !full {
		return r, nil
	}
	b, err := json.Marshal(l)
	if err != nil {
		return r, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return r, err
	}
	m["ready"], _ = json.Marshal(r.Ready)
	m["size"], _ = json.Marshal(r.Size)
	r.full, err = json.Marshal(m)
	return r, err
}

// viewSchema returns the schema of a shownRun: the view's, open to the
// members of a whole record too (those of the same names have the same
// types in both).
func viewSchema(opts *jsonschema.ForOptions) *jsonschema.Schema {
	s, err := jsonschema.ForType(reflect.TypeFor[runView](), opts)
	if err != nil {
		panic(fmt.Sprintf("schema of runView: %v", err))
	}
	s.AdditionalProperties = nil
	s.Description = "the run's view; with full, its whole record (docs/protocol.md), with ready"
	return s
}
