package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tendhq/tend"
	"github.com/tendhq/tend/cmd/internal/runtext"
	"github.com/tendhq/tend/tracker"
)

type lsCmd struct {
	JSON    bool          `help:"Print a JSON array of state records (queued ones with their position)."`
	All     bool          `help:"List every run, not only the active ones and those that ended in the last 24 hours."`
	State   []string      `help:"Only runs in these states (comma-separated or repeated)." placeholder:"STATE"`
	Session string        `help:"Only runs of this session." placeholder:"S" env:"TEND_SESSION"`
	Label   []string      `short:"l" sep:"none" help:"Only runs with this label (repeatable: all must match)." placeholder:"K=V"`
	Since   time.Duration `help:"Only runs created within this long (e.g. 2h)."`
}

func (c *lsCmd) Help() string {
	return `Lists active runs (queued, starting, running, stopping) and those that
ended in the last 24 hours; --all lists every run. A queued run shows its
position in the queue: "queued #2", or "held #2" if a bad version of its
request holds it (it starts once its request is good). INFO is a live run's health if it is unhealthy,
its progress (or how long it has been quiet), CPU and memory, and why a run ended with no exit code (it could
not start, or its end was lost). Examples:
  tend ls --state failed --since 1h
  tend ls --session agent-7 -l kind=test --json`
}

// infoText is ls's INFO column: unhealthy if its health checks say so,
// progress, else how long the run has been quiet, and its CPU and memory while it runs; for a run that ended with
// neither an exit code nor a signal (it could not start, or its end was
// lost), why.
func infoText(r tend.Listed, t term) string {
	// A run that ended with no exit code, or that waits for other runs or
	// a time: its reason says why, or for what.
	if (endedUnexplained(r.Record) || r.State == tracker.Queued) && r.Reason != "" {
		if t.width == 0 {
			return runtext.OneLine(r.Reason) // piped: whole
		}
		return runtext.Cut(runtext.OneLine(r.Reason), maxReasonWidth)
	}
	var parts []string
	if r.Job != nil && r.Job.ID != "" && !tracker.Final(r.State) {
		parts = append(parts, jobText(r.Job))
	}
	// A service that fails its checks and has no restart policy runs on:
	// its state says running, so this says it is not well.
	if hs := r.HealthStatus; hs != nil && hs.Status == "unhealthy" && !tracker.Final(r.State) {
		parts = append(parts, fmt.Sprintf("unhealthy (%d checks failed)", hs.Failures))
	}
	if r.Progress != "" {
		parts = append(parts, r.Progress)
	} else if r.QuietFor != nil && *r.QuietFor >= 5 {
		parts = append(parts, fmt.Sprintf("quiet %ds", int(*r.QuietFor)))
	}
	if r.Usage != nil {
		parts = append(parts, fmt.Sprintf("cpu %.1fs mem %s", r.Usage.CPUSeconds, runtext.Bytes(r.Usage.RSSBytes)))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// jobText says where a run on a cluster is: "slurm job 12 RUNNING on n3".
func jobText(j *tracker.Job) string {
	s := j.Engine + " job " + j.ID
	if j.ID == "" {
		s = j.Engine + " job " + j.Tag + " (being submitted)"
	}
	if j.State != "" {
		s += " " + j.State
	}
	if j.Nodes != "" {
		s += " on " + j.Nodes
	}
	return s
}

// maxReasonWidth is how much of a reason ls shows on a terminal; tend show
// has it whole, as has ls piped.
const maxReasonWidth = 48

// endedUnexplained reports whether st ended with neither an exit code nor
// a signal to say how: EXIT shows "-", and only its reason says why.
func endedUnexplained(st *tracker.State) bool {
	return tracker.Final(st.State) && st.ExitCode == nil && st.Signal == ""
}

func (c *lsCmd) Run(e *env) error {
	// A listing allocates a few KiB a record and is over in milliseconds:
	// collecting less often saves a tenth of its time on a long list.
	debug.SetGCPercent(400)
	f := tend.Filter{All: c.All, States: c.State, Session: c.Session, Since: c.Since, Brief: !c.JSON}
	for _, l := range c.Label {
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			return exitf(exitUsage, "ls: --label %q: want K=V", l)
		}
		if f.Labels == nil {
			f.Labels = map[string]string{}
		}
		f.Labels[k] = v
	}
	client, err := e.client("")
	if err != nil {
		return err
	}
	runs, err := client.List(e.context(), f)
	var bad tend.RecordErrors
	if err != nil && !errors.As(err, &bad) {
		return err
	}
	for _, err := range bad {
		fmt.Fprintln(e.stderr, "tend:", err)
	}
	if runs == nil {
		runs = []tend.Listed{}
	}
	defer diskNote(e)
	if c.JSON {
		return writeJSON(e.stdout, runs)
	}
	for i, r := range runs {
		if endedUnexplained(r.Record) && r.Reason == "" {
			// A brief record has no reason: read the whole one, for the few
			// runs whose INFO shows it.
			if full, err := client.Show(e.context(), r.ID); err == nil {
				runs[i].Record = full
			}
		}
	}
	if err := printRuns(e, runs, time.Now()); err != nil {
		return err
	}
	if len(bad) > 0 {
		return exitf(exitFailed, "%d run record%s could not be read", len(bad), runtext.Plural(len(bad)))
	}
	return nil
}

// diskNote says on stderr, after a listing or a record, that the root's
// file system is full or read-only, as tend status does: the watcher
// then holds the records it cannot write, and a run shown running may
// have ended long ago. Only tend status said so: ls and show showed such
// a run running, with nothing to explain why it never ended.
func diskNote(e *env) {
	if msg := runtext.DiskProblem(e.root); msg != "" {
		fmt.Fprintf(e.stderr, "tend: what is shown may be behind: %s\n", msg)
	}
}

// printRuns prints ls's table: a SESSION column only if a run has one,
// states in color for people, the command cut to the terminal's width.
func printRuns(e *env, runs []tend.Listed, now time.Time) error {
	sessions := slices.ContainsFunc(runs, func(r tend.Listed) bool { return r.Session != "" })
	header := []string{"ID", "STATE", "EXIT", "TIME", "INFO", "COMMAND"}
	if sessions {
		header = slices.Insert(header, 2, "SESSION")
	}
	rows := make([][]cell, 0, len(runs))
	for _, r := range runs {
		row := []cell{{text: r.ID}, {text: runtext.State(r.Record, r.Position), state: string(r.State)}, {text: runtext.Exit(r.Record)},
			{text: runtext.Time(r.Record, now)}, {text: infoText(r, e.term)}, {text: runtext.Command(r.Command, 0)}}
		if sessions {
			row = slices.Insert(row, 2, cell{text: runtext.OrDash(r.Session)})
		}
		rows = append(rows, row)
	}
	return e.term.printTable(e.stdout, header, rows)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // commands are full of > and &
	return enc.Encode(v)
}

type showCmd struct {
	ID   string `arg:"" help:"The run to show."`
	JSON bool   `help:"Print the state record as JSON."`
}

func (c *showCmd) Help() string {
	return `Shows everything about one run: its state and why, exit, command,
session, process, times, labels, notes, progress, live usage, how long its
output has been quiet, a service's restarts and health, what was dropped
from its output, where its files are, and its last lines of output (both
streams, in order). Examples:
  tend show build
  tend show build --json`
}

func (c *showCmd) Run(e *env) error {
	if err := checkID("show", c.ID); err != nil {
		return err
	}
	client, err := e.client("")
	if err != nil {
		return err
	}
	st, err := client.Show(e.context(), c.ID)
	if err == nil {
		err = client.Verify(st)
		defer diskNote(e)
	}
	if errors.Is(err, tracker.ErrUnsealed) {
		// Shown, for the operator to see what is there, and said first:
		// nothing in it is what the watcher recorded.
		fmt.Fprintf(e.stderr, "tend: show: %v\n", err)
		if err := c.print(e, client, st); err != nil {
			return err
		}
		return exitf(1, "")
	}
	if err != nil {
		return err
	}
	return c.print(e, client, st)
}

// print shows record st, as JSON or as a table with its last lines.
func (c *showCmd) print(e *env, client *tend.Client, st *tracker.State) error {
	if c.JSON {
		return writeJSON(e.stdout, st)
	}
	live := client.Describe(st)[0]
	var rows [][]cell
	row := func(k, v string) {
		if v != "" {
			rows = append(rows, []cell{{text: k + ":"}, {text: v}})
		}
	}
	row("id", st.ID)
	state := string(st.State)
	if tend.Held(st) {
		state += ", held until its request is good (see reason)"
	}
	row("state", state)
	if live.Position > 0 {
		row("position", fmt.Sprintf("%d in the queue", live.Position))
	}
	row("reason", st.Reason)
	row("exit", runtext.Exit(st))
	row("command", runtext.Command(st.Command, 1<<20))
	row("cwd", st.Cwd)
	row("session", st.Session)
	if st.PID != 0 {
		row("pid", fmt.Sprintf("%d (group %d)", st.PID, st.PGID))
	}
	if j := st.Job; j != nil {
		row("job", jobText(j))
	}
	row("created", st.CreatedAt.Format(time.RFC3339))
	if st.StartedAt != nil {
		row("started", st.StartedAt.Format(time.RFC3339))
	}
	if st.EndedAt != nil {
		row("ended", st.EndedAt.Format(time.RFC3339))
	}
	row("time", runtext.Time(st, time.Now()))
	keys := slices.Sorted(maps.Keys(st.Labels))
	for _, k := range keys {
		row("label", k+"="+st.Labels[k])
	}
	for _, n := range st.Notes {
		row("note", n.Time.Format(time.RFC3339)+" "+n.Text)
	}
	row("rev", fmt.Sprint(st.Rev))
	if st.Progress != "" {
		row("progress", st.Progress+" (at "+st.ProgressAt.Format(time.RFC3339)+")")
	}
	if u := live.Usage; u != nil {
		procs := "processes"
		if u.Procs == 1 {
			procs = "process"
		}
		row("usage", fmt.Sprintf("cpu %.2fs, mem %s, %d %s", u.CPUSeconds, runtext.Bytes(u.RSSBytes), u.Procs, procs))
	} else if st.CPUSeconds > 0 {
		row("cpu", fmt.Sprintf("%.2fs", st.CPUSeconds))
	}
	if q := live.QuietFor; q != nil {
		row("quiet", fmt.Sprintf("%.0fs since its output last grew", *q))
	}
	if o := st.Output; o != nil && (o.Stdout.Dropped > 0 || o.Stderr.Dropped > 0) {
		row("dropped", fmt.Sprintf("%d bytes of stdout, %d of stderr (output capped at %s a stream)", o.Stdout.Dropped, o.Stderr.Dropped, runtext.Bytes(o.Limit)))
	}
	showService(st, row)
	row("stdout", client.Path(st.ID, "stdout"))
	row("stderr", client.Path(st.ID, "stderr"))
	row("state file", client.Path(st.ID, "state.json"))
	if err := (term{}).printTable(e.stdout, nil, rows); err != nil { // whole, whatever the width
		return err
	}
	return showLastLines(e, client, st, 5)
}

// showService adds a service's rows: its restarts, its attempts' ends,
// its health.
func showService(st *tracker.State, row func(k, v string)) {
	if st.Restart != nil {
		row("restart", fmt.Sprintf("%s, %d restart%s so far (attempt %d)", st.Restart.Policy, st.Restarts, runtext.Plural(st.Restarts), st.Attempt))
	}
	for _, a := range st.Attempts {
		row("attempt", fmt.Sprintf("%d ended %s: %s", a.Attempt, a.EndedAt.Format(time.RFC3339), a.Reason))
	}
	if st.NextStartAt != nil {
		row("next start", st.NextStartAt.Format(time.RFC3339))
	}
	if h := st.HealthStatus; h != nil {
		v := h.Status
		if n := len(h.Checks); n > 0 {
			last := h.Checks[n-1]
			took := time.Duration(last.DurationSeconds * float64(time.Second)).Round(10 * time.Microsecond)
			v += fmt.Sprintf(" (last check %s, took %v: ok=%v %s)", last.Time.Format(time.RFC3339), took, last.OK, last.Detail)
		}
		row("health", strings.TrimSpace(v))
	}
	if st.ReadyAt != nil {
		row("ready", st.ReadyAt.Format(time.RFC3339))
	}
}

// showLastLines prints the run's last n lines of output, both streams in
// the order written, each marked with its stream.
func showLastLines(e *env, client *tend.Client, st *tend.Record, n int) error {
	lines, _, err := client.TailLines(e.context(), st, n, true)
	if err != nil || len(lines) == 0 {
		return err
	}
	fmt.Fprintf(e.stdout, "last output (tend logs %s --both):\n", st.ID)
	for _, l := range lines {
		text := strings.TrimSuffix(l.Data, "\n")
		if cut := len(text) - shownLine; cut > 0 { // a line may be a MiB: its end
			text = fmt.Sprintf("[%d bytes before] %s", cut, text[cut:])
		}
		fmt.Fprintf(e.stdout, "  %s: %s\n", l.Stream, runtext.Printable(text))
	}
	return nil
}

// shownLine is the most tend show prints of one line of output: a
// summary, where tend logs prints it whole.
const shownLine = 1000

type logsCmd struct {
	ID     string `arg:"" help:"The run whose output to print."`
	Stderr bool   `help:"Print standard error instead of standard output."`
	Both   bool   `help:"Print both streams' lines in the order the run wrote them, as the watcher saw it (exact unless the run writes faster than the watcher looks), each marked with its stream."`
	Offset int64  `help:"Start at this absolute byte offset of the stream (as --json's next gave it); with --both, of both streams, or of stdout if --stderr-offset is given." default:"0"`
	// StderrOffset lets a read of both streams go on where the last one
	// stopped, which is in general not at the same offset of the two.
	StderrOffset int64 `name:"stderr-offset" help:"With --both: start stderr at this offset (as the next of its last line gave it); -1: at --offset." default:"-1"`
	MaxBytes     int64 `name:"max-bytes" help:"Print at most this many bytes (0: all; with --json, 4 MiB at most)." default:"0"`
	Tail         int   `help:"Print only the last N lines (with -f, then follow on from them)." default:"0"`
	JSON         bool  `help:"Print {stream, offset, next, dropped, eof, final, data} for the slice read, so an agent reads incrementally: ask next time from next. A slice is 4 MiB at most: eof false says there is more."`
	Follow       bool  `short:"f" help:"Keep printing as the run writes, until it ends; then exit with its exit code."`
}

func (c *logsCmd) Help() string {
	return `Offsets are absolute byte positions in all the run wrote to the stream,
so reads never overlap or skip, even when the oldest output was dropped
(capped; then --json says how many bytes). --json prints at most 4 MiB
(MaxLogRead) at once, whatever --max-bytes asks: if eof is false, read on
from next. Examples:
  tend logs -f build
  tend logs build --tail 20
  tend logs -f --tail 20 --both build
  tend logs build --offset 0 --max-bytes 65536 --json   # then --offset <next>`
}

func (c *logsCmd) Run(e *env) error {
	if err := checkID("logs", c.ID); err != nil {
		return err
	}
	if c.Both && c.Stderr {
		return exitf(exitUsage, "logs: --both prints stderr's lines with stdout's: give one of --both and --stderr")
	}
	if c.Both && c.MaxBytes > 0 {
		return exitf(exitUsage, "logs: --max-bytes reads one stream; read each with --offset and --max-bytes (and --stderr), or drop --both")
	}
	if c.Offset < 0 || c.MaxBytes < 0 || c.Tail < 0 || c.StderrOffset < -1 {
		return exitf(exitUsage, "logs: --offset, --stderr-offset, --max-bytes and --tail are not negative")
	}
	if c.StderrOffset >= 0 && !c.Both {
		return exitf(exitUsage, "logs: --stderr-offset is for --both: to read stderr alone, use --stderr --offset N")
	}
	client, err := e.client("")
	if err != nil {
		return err
	}
	switch {
	case c.Both && c.Follow:
		return c.followBoth(e, client)
	case c.Both:
		return c.both(e, client)
	case c.Follow:
		return c.follow(e, client)
	}
	switch {
	case c.Tail > 0:
		return c.tail(e, client)
	case c.JSON:
		sl, err := client.ReadLog(e.context(), c.ID, c.stream(), c.Offset, c.MaxBytes)
		if err != nil {
			return err
		}
		return writeJSONLine(e, sliceJSON{sl, sl.Size, sl.Offset > sl.Size})
	}
	return c.copy(e, client)
}

// sliceJSON is a slice as tend logs --json prints it: with the stream's
// size, and whether the offset asked for is past it (a script that kept
// a wrong next, or a run made anew under its ID, reads nothing there).
type sliceJSON struct {
	tend.LogSlice
	Size    int64 `json:"size"`
	PastEnd bool  `json:"past_end"`
}

// copyChunk is how much of a stream copy holds at once.
const copyChunk = 1 << 20

// copy prints the stream from --offset, at most --max-bytes of it, a
// piece at a time: the output is as large as its run's owner makes it.
func (c *logsCmd) copy(e *env, client *tend.Client) error {
	offset, left := c.Offset, c.MaxBytes
	for {
		n := int64(copyChunk)
		if c.MaxBytes > 0 {
			n = min(n, left)
		}
		sl, err := client.ReadLog(e.context(), c.ID, c.stream(), offset, n)
		if err != nil {
			return err
		}
		if sl.Offset > sl.Size {
			fmt.Fprintf(e.stderr, "tend: offset %d is past the end of %s's %s, which holds %d bytes: nothing read\n", sl.Offset, c.ID, sl.Stream, sl.Size)
			return nil
		}
		if sl.Dropped > 0 {
			fmt.Fprintf(e.stderr, "tend: %d bytes before offset %d were dropped (the output is capped)\n", sl.Dropped, sl.Offset)
		}
		if _, err := io.WriteString(e.stdout, sl.Data); err != nil {
			return err
		}
		offset, left = sl.Next, left-int64(len(sl.Data))
		if sl.EOF || sl.Data == "" || (c.MaxBytes > 0 && left <= 0) {
			return nil
		}
	}
}

// tail prints the stream's last --tail lines, read from its end (of the
// --max-bytes from --offset, if given).
func (c *logsCmd) tail(e *env, client *tend.Client) error {
	sl, err := c.tailSlice(e, client)
	if err != nil {
		return err
	}
	if c.JSON {
		return writeJSONLine(e, sliceJSON{sl, sl.Size, sl.Offset > sl.Size})
	}
	if sl.Dropped > 0 {
		fmt.Fprintf(e.stderr, "tend: %d bytes before offset %d were dropped (the output is capped)\n", sl.Dropped, sl.Offset)
	}
	_, err = io.WriteString(e.stdout, sl.Data)
	return err
}

func (c *logsCmd) tailSlice(e *env, client *tend.Client) (tend.LogSlice, error) {
	if c.MaxBytes > 0 {
		sl, err := client.ReadLog(e.context(), c.ID, c.stream(), c.Offset, c.MaxBytes)
		tail := tend.LastLines([]byte(sl.Data), c.Tail)
		sl.Offset, sl.Data = sl.Offset+int64(len(sl.Data)-len(tail)), string(tail)
		return sl, err
	}
	sl, err := client.TailLog(e.context(), c.ID, c.stream(), c.Tail)
	if err != nil {
		return sl, err
	}
	if len(sl.Data) == tend.MaxLogRead && sl.Offset > 0 && sl.Dropped == 0 &&
		len(tend.LastLines([]byte(sl.Data), c.Tail)) == len(sl.Data) {
		fmt.Fprintf(e.stderr, "tend: the last %d lines are longer than %d bytes: these are their last bytes, from offset %d\n", c.Tail, tend.MaxLogRead, sl.Offset)
	}
	if skip := c.Offset - sl.Offset; skip > 0 { // the lines start before --offset
		skip = min(skip, int64(len(sl.Data)))
		sl.Offset, sl.Data, sl.Dropped = sl.Offset+skip, sl.Data[skip:], 0
	}
	return sl, nil
}

// both prints both streams' lines in the order the run wrote them (as the
// watcher recorded it), each marked with its stream, as it reads them.
func (c *logsCmd) both(e *env, client *tend.Client) error {
	if c.Tail > 0 {
		_, err := c.printTail(e.stdout, e, client)
		return err
	}
	_, dropped, err := client.EachLine(e.context(), c.ID, c.from(), func(l tend.LogLine) error {
		return c.printLine(e.stdout, l)
	})
	if err != nil {
		return err
	}
	c.noteDropped(e, dropped)
	return nil
}

// from is where --offset and --stderr-offset say to start both streams.
func (c *logsCmd) from() tend.LogPlace {
	from := tend.PlaceAt(c.Offset)
	if c.StderrOffset >= 0 {
		from.Stderr = c.StderrOffset
	}
	return from
}

// printTail prints the run's last --tail lines of both streams from
// c.from() (the lines read back from the streams' ends, cut at it), and
// returns where to follow on from. With -f, a line the run has not ended
// yet waits to be followed.
func (c *logsCmd) printTail(w io.Writer, e *env, client *tend.Client) (tend.LogPlace, error) {
	st, err := client.Show(e.context(), c.ID)
	if err != nil {
		return tend.LogPlace{}, err
	}
	lines, next, err := client.TailLines(e.context(), st, c.Tail, !c.Follow)
	if err != nil {
		return next, err
	}
	from := c.from()
	for _, l := range lines {
		start := from.Stdout
		if l.Stream == tend.Stderr {
			start = from.Stderr
		}
		if l.Next <= start {
			continue
		}
		if skip := start - l.Offset; skip > 0 {
			l.Offset, l.Data = start, l.Data[skip:]
		}
		if err := c.printLine(w, l); err != nil {
			return next, err
		}
	}
	next.Stdout, next.Stderr = max(next.Stdout, from.Stdout), max(next.Stderr, from.Stderr)
	return next, nil
}

// followBoth prints both streams' lines as the run writes them (after
// the last --tail lines), until it ends, and exits with its code.
func (c *logsCmd) followBoth(e *env, client *tend.Client) error {
	spin := startSpinner(e, "following "+c.ID)
	defer spin.end()
	out := stdoutVia(e, spin)
	from := c.from()
	if c.Tail > 0 {
		next, err := c.printTail(out, e, client)
		if err != nil {
			return err
		}
		from = next
	}
	final, dropped, err := client.FollowLines(e.context(), c.ID, from, func(cur *tend.Record, l tend.LogLine) error {
		spin.set(func() string { return waitingText(cur) })
		if l.Stream == "" {
			return nil // the record alone
		}
		return c.printLine(out, l)
	})
	if err != nil {
		return err
	}
	c.noteDropped(e, dropped)
	return runExit(final)
}

func (c *logsCmd) printLine(w io.Writer, l tend.LogLine) error {
	if c.JSON {
		return writeJSONLineTo(w, l)
	}
	nl := ""
	if !strings.HasSuffix(l.Data, "\n") {
		nl = "\n"
	}
	_, err := fmt.Fprintf(w, "%s: %s%s", l.Stream, l.Data, nl)
	return err
}

func (c *logsCmd) noteDropped(e *env, n int64) {
	if n > 0 && !c.JSON {
		fmt.Fprintf(e.stderr, "tend: %d bytes were dropped (the output is capped)\n", n)
	}
}

func (c *logsCmd) stream() string {
	if c.Stderr {
		return tend.Stderr
	}
	return tend.Stdout
}

func writeJSONLine(e *env, v any) error { return writeJSONLineTo(e.stdout, v) }

func writeJSONLineTo(w io.Writer, v any) error {
	enc := json.NewEncoder(w) // one line: Encode ends it with a newline
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// follow prints the stream as it grows until the run is final, then exits
// with the run's code. It reads by absolute offset, so output cut from the
// file's start meanwhile is neither printed twice nor skipped unsaid.
func (c *logsCmd) follow(e *env, client *tend.Client) error {
	spin := startSpinner(e, "following "+c.ID)
	defer spin.end()
	out := stdoutVia(e, spin)
	offset := c.Offset
	if c.Tail > 0 {
		sl, err := c.tailSlice(e, client)
		if err != nil {
			return err
		}
		if _, err := io.WriteString(out, sl.Data); err != nil {
			return err
		}
		offset = sl.Next
	}
	final, err := client.FollowLog(e.context(), c.ID, c.stream(), offset, func(cur *tend.Record, sl tend.LogSlice) error {
		spin.set(func() string { return waitingText(cur) })
		if sl.Dropped > 0 {
			fmt.Fprintf(e.stderr, "tend: %d bytes were dropped here (the output is capped)\n", sl.Dropped)
		}
		_, err := io.WriteString(out, sl.Data)
		return err
	})
	if err != nil {
		return err
	}
	return runExit(final)
}

// runExit ends a command that exits with run st's own code.
func runExit(st *tend.Record) error {
	if code := runExitCode(st); code != 0 {
		return exitf(code, "")
	}
	return nil
}

type waitCmd struct {
	IDs     []string      `arg:"" name:"id" help:"The runs to wait for: every one of them."`
	Ready   bool          `help:"Wait until each run is ready (its health check passed, or it created $TEND_READY; else once it runs), not until it ends. Exits 0 when every one is ready, or as wait does for one that ends first."`
	Timeout time.Duration `help:"Give up after this long (for all the runs together) and exit 124; the runs go on (default: wait as long as it takes)."`
	JSON    bool          `help:"Print the run's record when the wait is over (docs/schema/record.schema.json); with several runs, one record a line, in the order given."`
	Any     bool          `help:"With several runs, wait until one of them has ended (or, with --ready, is ready), print its ID (with --json, its record) and exit as wait does for it alone; the others go on."`
}

func (c *waitCmd) Help() string {
	return `Exits with the run's exit code (128+N if signal N killed it, 127 if it
never ran, 1 if it was canceled or timed out but exited 0), or 124 if
--timeout came first. With several runs it waits for every one, side by
side, and exits 0 only if every one completed with exit code 0 (or, with
--ready, is ready); otherwise with the code of the first run named that
did not: its own exit code as above, 124 if it had not ended (or was not
ready) when --timeout came, 3 if it is not found. A run deleted since
it ended exits as its history says it ended. With --any, the first
wait to end decides alone, and its run's ID is printed. Examples:
  tend wait build && echo built
  tend wait test-1 test-2 test-3 --timeout 10m
  tend wait --any mirror-1 mirror-2
  tend start --id svc --ready-file -- 'sleep 1; touch "$TEND_READY"; exec sleep 600' && tend wait svc --ready --timeout 1m`
}

// waited is how the wait for one run ended: the record as last read, and
// the error that ended it (nil once the condition held).
type waited struct {
	st  *tend.Record
	err error
}

func (c *waitCmd) Run(e *env) error {
	var ids []string
	for _, id := range c.IDs {
		if err := checkID("wait", id); err != nil {
			return err
		}
		if !slices.Contains(ids, id) { // waited for once, said once
			ids = append(ids, id)
		}
	}
	if c.Timeout < 0 {
		return exitf(exitUsage, "wait: --timeout %v is negative", c.Timeout)
	}
	client, err := e.client("")
	if err != nil {
		return err
	}
	ctx := e.context()
	if c.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.Timeout)
		defer cancel()
	}
	results, first := c.waitAll(ctx, e, client, ids)
	if e.context().Err() != nil {
		return context.Canceled // Ctrl-C or SIGTERM: not any run's doing
	}
	if first >= 0 { // --any: the others' waits were cut short
		ids, results = ids[first:first+1], results[first:first+1]
		if !c.JSON {
			fmt.Fprintln(e.stdout, ids[0]) // which one: a script acts on it
		}
	}
	if c.JSON {
		if err := c.printRecords(e, results); err != nil {
			return err
		}
	}
	code := exitOK
	for i, r := range results {
		rc, msg := c.verdict(ids[i], r)
		if msg != "" {
			fmt.Fprintln(e.stderr, "tend:", msg)
		}
		if code == exitOK {
			code = rc // the first run named that did not succeed decides
		}
	}
	if code != exitOK {
		return exitf(code, "")
	}
	return nil
}

// waitAll waits for each of ids, side by side, until it has ended (or,
// with --ready, is ready) or ctx ends, and returns how each wait ended,
// in the order of ids. With --any, the first wait to end for another
// reason than ctx's end ends the others, and first is its index (else
// -1).
func (c *waitCmd) waitAll(ctx context.Context, e *env, client *tend.Client, ids []string) (results []waited, first int) {
	var winner atomic.Int64
	winner.Store(-1)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	until := tend.Ended
	if c.Ready {
		until = func(st *tend.Record) bool { return tend.Ended(st) || tend.Ready(st) }
	}
	spin := startSpinner(e, "waiting for "+strings.Join(ids, ", "))
	defer spin.end()
	results = make([]waited, len(ids))
	var over atomic.Int64 // waits over, for the spinner
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := client.WaitFor(ctx, id, func(st *tend.Record) bool {
				if len(ids) == 1 {
					spin.set(func() string { return waitingText(st) })
				}
				return until(st)
			})
			results[i] = waited{st, err}
			if c.Any && ctx.Err() == nil && winner.CompareAndSwap(-1, int64(i)) {
				cancel() // this one decides; the others need not be waited for
			}
			if n := over.Add(1); len(ids) > 1 {
				spin.set(func() string { return fmt.Sprintf("waiting for %d runs: %d done", len(ids), n) })
			}
		}()
	}
	wg.Wait()
	return results, int(winner.Load())
}

// verdict returns the exit code the wait for run id calls for (0: it
// succeeded), and what to say of it on stderr ("" for nothing).
func (c *waitCmd) verdict(id string, r waited) (int, string) {
	switch {
	case errors.Is(r.err, context.DeadlineExceeded) && r.st == nil:
		return exitTimedOut, fmt.Sprintf("run %s has no record yet after %v", id, c.Timeout)
	case errors.Is(r.err, context.DeadlineExceeded):
		return exitTimedOut, fmt.Sprintf("run %s is still %s after %v; it goes on", id, r.st.State, c.Timeout)
	case r.err != nil:
		var del *tend.DeletedError
		if errors.As(r.err, &del) && del.Ended != nil {
			// Deleted since it ended: it exits as it ended, as the history
			// says, and says it is gone.
			return runExitCode(del.Ended), del.Error()
		}
		return exitFor(r.err)
	case c.Ready && tend.Ready(r.st):
		return exitOK, ""
	case r.st.State != tracker.Completed:
		return runExitCode(r.st), fmt.Sprintf("run %s %s: %s", r.st.ID, r.st.State, runtext.Printable(r.st.Reason))
	}
	return runExitCode(r.st), ""
}

// printRecords prints, with --json, each run's record as last read (none
// for a run that has none), in the order given: indented for one run, as
// before several were waited for, one a line for several.
func (c *waitCmd) printRecords(e *env, results []waited) error {
	for _, r := range results {
		if r.st == nil || r.err != nil && !errors.Is(r.err, context.DeadlineExceeded) {
			continue
		}
		write := writeJSONLine
		if len(results) == 1 {
			write = func(e *env, v any) error { return writeJSON(e.stdout, v) }
		}
		if err := write(e, r.st); err != nil {
			return err
		}
	}
	return nil
}

// waitingText is what the spinner says while tend waits for run st.
func waitingText(st *tracker.State) string {
	s := fmt.Sprintf("waiting for %s: %s", st.ID, st.State)
	if st.StartedAt != nil && !tracker.Final(st.State) {
		s += ", " + runtext.Time(st, time.Now())
	}
	if st.Progress != "" {
		s += ", " + runtext.Progress(st.Progress)
	}
	return s
}
