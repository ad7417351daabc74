package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tendhq/tend"
	"github.com/tendhq/tend/cmd/internal/runtext"
	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
	"github.com/tendhq/tend/tracker/layout"
	"github.com/tendhq/tend/watcher/config"
	"golang.org/x/sys/unix"
)

type historyCmd struct {
	ID   string `arg:"" help:"The run whose transitions to print."`
	JSON bool   `help:"Print the events as JSON lines, as history.jsonl has them."`
}

func (c *historyCmd) Help() string {
	return `Prints a run's transitions from ROOT/history.jsonl, deleted runs
included. Example:
  tend history build`
}

func (c *historyCmd) Run(e *env) error {
	if err := checkID("history", c.ID); err != nil {
		return err
	}
	var rows [][]cell
	found := false
	// Scanned, not read whole: a history is never deleted, and a root's
	// may be gigabytes, of which one run's lines are a few.
	err := tracker.ScanHistory(e.root, func(ev tracker.Event) error {
		if ev.ID != c.ID {
			return nil
		}
		found = true
		if c.JSON {
			b, _ := json.Marshal(ev)
			fmt.Fprintln(e.stdout, string(b))
			return nil
		}
		exit := runtext.Exit(&tracker.State{ExitCode: ev.ExitCode, Signal: ev.Signal})
		rows = append(rows, []cell{{text: ev.Time.Local().Format(time.RFC3339Nano)}, {text: strconv.FormatInt(ev.Rev, 10)},
			{text: string(ev.State), state: string(ev.State)}, {text: exit}, {text: eventReason(ev)}})
		return nil
	})
	if err != nil {
		return err
	}
	if !c.JSON {
		if err := e.term.printTable(e.stdout, []string{"TIME", "REV", "STATE", "EXIT", "REASON"}, rows); err != nil {
			return err
		}
	}
	if !found {
		return exitf(exitNotFound, "no run %q in %s", c.ID, layout.Root(e.root).History())
	}
	return nil
}

// eventReason is the reason shown for ev in text: its own, and whether
// a label or note request changed the run. What it changed is not shown:
// it is sealed (tracker.SealChange), and in the run's record.
func eventReason(ev tracker.Event) string {
	if ev.Sealed == "" && ev.Labels == nil && ev.Note == "" {
		return ev.Reason
	}
	if ev.Reason == "" {
		return "labels or note changed"
	}
	return ev.Reason + "; labels or note changed"
}

type rmCmd struct {
	IDs     []string `arg:"" name:"id" help:"The runs to delete."`
	Session string   `help:"Act as this session: only its runs may be deleted." env:"TEND_SESSION"`
	IfRev   int64    `help:"Delete the run (one) only if its record is still at this revision (else: conflict, exit 7)."`
	JSON    bool     `help:"Print each outcome as a JSON line (docs/schema/outcome.schema.json)."`
}

func (c *rmCmd) Help() string {
	return `Deletes finished runs: their record, output and outcomes. A queued or
live run is refused (still_active) and left alone. Each deletion stays in
history.jsonl. Prints one line per run: ID: outcome. Example:
  tend rm build test`
}

func (c *rmCmd) Run(e *env) error {
	for _, id := range c.IDs {
		if err := checkID("rm", id); err != nil {
			return err
		}
	}
	if c.IfRev != 0 && len(c.IDs) != 1 {
		return exitf(exitUsage, "rm: --if-rev is one run's revision: give one ID with it")
	}
	e.json = c.JSON
	return deleteRuns(e, c.IDs, c.Session, c.IfRev)
}

// deleteRuns submits a delete request for each run and prints the
// outcomes. It exits 0 only if every run was deleted.
func deleteRuns(e *env, ids []string, session string, ifRev int64) error {
	client, err := e.client(session)
	if err != nil {
		return err
	}
	outcomes, err := client.Delete(e.context(), tend.Control{IfRev: ifRev}, ids...)
	if err != nil {
		return err
	}
	code := exitOK
	for _, o := range outcomes {
		if err := printOutcome(e, o, true); err != nil {
			return err
		}
		switch o.Outcome {
		case spool.Deleted:
		case spool.NotFound:
			code = max(code, exitNotFound)
		case spool.Conflict:
			code = max(code, exitConflict)
		default:
			code = max(code, exitRefused)
		}
	}
	if code != exitOK {
		return exitf(code, "")
	}
	return nil
}

type gcCmd struct {
	OlderThan time.Duration `help:"Delete finished runs that ended longer ago than this (0: every one; default: config.json's keep_finished_for, else 168h)." default:"-1ns" placeholder:"DURATION"`
	Keep      int           `help:"Keep at most this many finished runs, the newest (0: none; default: config.json's keep_finished, else 1000)." default:"-1" placeholder:"N"`
	Session   string        `help:"Only this session's runs." env:"TEND_SESSION"`
	DryRun    bool          `help:"Print what would be deleted, and delete nothing."`
	JSON      bool          `help:"Print each outcome as a JSON line (docs/schema/outcome.schema.json); with --dry-run, {id, verb: delete, outcome: would_delete}."`
}

func (c *gcCmd) Help() string {
	return `Deletes finished runs beyond the retention: older than --older-than, or
beyond the newest --keep. It also removes the requests in rejected/ refused
longer ago than --older-than (keep_finished_for), each with its reason, and
says how many on stderr (not with --session: a refused request may name
none; nor for a member of a shared root: rejected/ is the watcher's user's,
whose own retention removes them). So it does with the old answers in
outcomes/: those of tagged requests written over an hour ago, and those of
runs that are not there (rejected starts, not_found, deleted runs' other
requests) written longer ago than --older-than; never one written in the
last minute, and never one a watcher beside it has just written again.
The watcher applies the same retention by itself every 10 minutes.
Example:
  tend gc --older-than 24h`
}

func (c *gcCmd) Run(e *env) error {
	limits, err := config.LoadAsOwner(e.root, config.Default, config.Names{})
	if err != nil {
		return err
	}
	// In config.json keep_finished_for and keep_finished 0 keep every run;
	// --older-than 0 and --keep 0 keep none, as their words say: an
	// operator who clears a root asks for that. (--older-than 0 used to
	// be taken as not given, and deleted only what was a week old.)
	if c.OlderThan >= 0 {
		limits.KeepFinishedFor = c.OlderThan
	}
	keepNone := c.Keep == 0 || c.OlderThan == 0
	if c.Keep >= 0 {
		limits.KeepFinished = c.Keep
	}
	rejErr := errors.Join(c.expireRejected(e, limits.KeepFinishedFor, c.OlderThan == 0),
		c.expireOutcomes(e, limits.KeepFinishedFor, c.OlderThan == 0))
	runs, errs := tracker.NewStore(e.root).ListBrief() // Expired reads states and end times only
	for _, err := range errs {
		fmt.Fprintln(e.stderr, "tend:", err)
	}
	if c.Session != "" {
		runs = slices.DeleteFunc(runs, func(st *tracker.State) bool { return st.Session != c.Session })
	}
	ids := config.Expired(runs, limits, time.Now())
	if keepNone {
		ids = finishedIDs(runs)
	}
	e.json = c.JSON
	if len(ids) == 0 && !e.json {
		// Said on stderr: stdout lists the runs, and there are none.
		if c.OlderThan == 0 {
			// Of those this user may read: not "no run has finished".
			fmt.Fprintln(e.stderr, "tend: no finished run to delete")
		} else {
			fmt.Fprintf(e.stderr, "tend: no finished run is beyond the retention (%s)\n", retentionText(limits, keepNone))
		}
	}
	if c.DryRun || len(ids) == 0 {
		for _, id := range ids {
			if e.json {
				writeJSONLine(e, tend.Outcome{ID: id, Verb: spool.VerbDelete, Outcome: "would_delete"})
			} else {
				fmt.Fprintln(e.stdout, id)
			}
		}
		return rejErr
	}
	if err := deleteRuns(e, ids, c.Session, 0); err != nil {
		return err
	}
	return rejErr
}

// removed is how tend gc says it removed something, or would have with
// --dry-run.
func (c *gcCmd) removed() string {
	if c.DryRun {
		return "would remove"
	}
	return "removed"
}

// expireRejected removes the requests in rejected/ refused longer than
// keep ago, each with its reason (tracker.ExpireRejected), and says how
// many on stderr (stdout lists the runs). It does nothing with --session
// (a refused request's session is in a body that may not parse), with a
// keep of 0 (keep_finished_for 0 keeps everything) unless all (--older-than
// 0: every one), or for a member of a shared root: rejected/ is the
// watcher's user's, and the watcher's own retention removes them. An error
// is said at once and returned, to fail the command once the runs are
// done with.
func (c *gcCmd) expireRejected(e *env, keep time.Duration, all bool) error {
	if c.Session != "" || (keep <= 0 && !all) || !watchersFiles(e) {
		return nil
	}
	n, err := tracker.ExpireRejected(e.root, time.Now().Add(-keep), c.DryRun)
	if n > 0 {
		verb := c.removed()
		what := fmt.Sprintf("%d rejected requests, each", n)
		if n == 1 {
			what = "1 rejected request"
		}
		when := "refused over " + shortDuration(keep) + " ago"
		if keep <= 0 {
			when = "every one there" // --older-than 0: not "refused over 0s ago"
		}
		fmt.Fprintf(e.stderr, "tend: %s %s with its reason, %s\n", verb, what, when)
	}
	if err != nil {
		fmt.Fprintln(e.stderr, "tend:", err)
		return exitf(exitFailed, "")
	}
	return nil
}

// watchersFiles reports whether this user may clear what the watcher
// keeps in the root (rejected/, outcomes/): it is root, or the root is
// its own. In a shared root, a member may not: those are the watcher's
// user's, whose own retention clears them.
func watchersFiles(e *env) bool {
	var root unix.Stat_t
	euid := os.Geteuid()
	return euid == 0 || unix.Stat(e.root, &root) == nil && int(root.Uid) == euid
}

// expireOutcomes removes the old answers in outcomes/, as the watcher's
// own retention does (tracker.ExpireOutcomes): those of tagged requests
// written over an hour ago, and those of runs that are not there written
// longer than keep ago (all: every one; a keep of 0 keeps them), none
// written in the last minute. It says how many on stderr. It does
// nothing with --session (an answer names no session), or for a member
// of a shared root (outcomes/ is the watcher's user's). An error is said
// at once and returned, as expireRejected's.
func (c *gcCmd) expireOutcomes(e *env, keep time.Duration, all bool) error {
	if c.Session != "" || !watchersFiles(e) {
		return nil
	}
	now := time.Now()
	var runless time.Time
	switch {
	case all:
		runless = now
	case keep > 0:
		runless = now.Add(-keep)
	}
	n, err := tracker.ExpireOutcomes(e.root, now.Add(-tracker.KeepTaggedAnswers), runless, c.DryRun)
	if n > 0 {
		verb := c.removed()
		what := fmt.Sprintf("%d answers", n)
		if n == 1 {
			what = "1 answer"
		}
		of := "of tagged requests written over " + shortDuration(tracker.KeepTaggedAnswers) + " ago"
		switch {
		case all:
			of += ", and of runs that are not there written over a minute ago"
		case keep > 0:
			of += ", and of runs that are not there written over " + shortDuration(keep) + " ago"
		}
		fmt.Fprintf(e.stderr, "tend: %s %s in outcomes/ (%s)\n", verb, what, of)
	}
	if err != nil {
		fmt.Fprintln(e.stderr, "tend:", err)
		return exitf(exitFailed, "")
	}
	return nil
}

// retentionText says what retention limits (with --keep 0: keepNone)
// delete; a limit of 0 deletes nothing, and is not said as "ended over
// 0s ago", which reads as every run.
func retentionText(limits config.Settings, keepNone bool) string {
	var parts []string
	if limits.KeepFinishedFor > 0 {
		parts = append(parts, "ended over "+shortDuration(limits.KeepFinishedFor)+" ago")
	}
	if limits.KeepFinished > 0 || keepNone {
		parts = append(parts, fmt.Sprintf("beyond the newest %d", limits.KeepFinished))
	}
	if len(parts) == 0 {
		return "it keeps every finished run: keep_finished_for and keep_finished are 0"
	}
	return strings.Join(parts, ", or ")
}

// finishedIDs returns the IDs of the finished runs among runs, as
// config.Expired considers them, newest first.
func finishedIDs(runs []*tracker.State) []string {
	var done []*tracker.State
	for _, st := range runs {
		if tracker.Final(st.State) && st.EndedAt != nil {
			done = append(done, st)
		}
	}
	slices.SortFunc(done, func(a, b *tracker.State) int { return b.EndedAt.Compare(*a.EndedAt) })
	ids := make([]string, len(done))
	for i, st := range done {
		ids[i] = st.ID
	}
	return ids
}

// shortDuration is d as Go writes it, without zero minutes and seconds
// after a whole number of them: 168h, not 168h0m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
