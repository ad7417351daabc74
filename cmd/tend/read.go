package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tendhq/tend/procfs"
	"github.com/tendhq/tend/tracker"
	"github.com/tendhq/tend/watcher"
)

type lsCmd struct {
	JSON    bool          `help:"Print a JSON array of state records (queued ones with their position)."`
	All     bool          `help:"List every run, not only the active ones and those that ended in the last 24 hours."`
	State   []string      `help:"Only runs in these states (comma-separated or repeated)." placeholder:"STATE"`
	Session string        `help:"Only runs of this session." placeholder:"S"`
	Label   []string      `short:"l" help:"Only runs with this label (repeatable: all must match)." placeholder:"K=V"`
	Since   time.Duration `help:"Only runs created within this long (e.g. 2h)."`
}

func (c *lsCmd) Help() string {
	return `Lists active runs (queued, starting, running, stopping) and those that
ended in the last 24 hours; --all lists every run. A queued run shows its
position in the queue. INFO is a live run's progress (or how long it has
been quiet), CPU and memory, and why a run ended with no exit code (it could
not start, or its end was lost). Examples:
  tend ls --state failed --since 1h
  tend ls --session agent-7 -l kind=test --json | jq '.[].id'`
}

// listed is a run as ls prints it in JSON: its record, its position if it
// is queued, and what it uses now if it runs.
type listed struct {
	*tracker.State
	Position int    `json:"position,omitempty"`
	Usage    *usage `json:"usage,omitempty"`
	// QuietFor is how long its output has not grown, in seconds, and
	// LastLine its last line of output, for a live run: liveness signals
	// where it reports no progress.
	QuietFor *float64 `json:"quiet_seconds,omitempty"`
	LastLine string   `json:"last_line,omitempty"`
}

// lastLine returns the last non-empty line of a live run's stdout (or
// stderr, if stdout has none), from its last 4 KiB.
func lastLine(store *tracker.Store, st *tracker.State) string {
	if !live(st) {
		return ""
	}
	for _, name := range []string{"stdout", "stderr"} {
		size := store.OutputSize(st, name)
		sl, err := store.ReadOutput(st, name, max(0, size-4096), 4096)
		if err != nil {
			continue
		}
		if line := strings.TrimSpace(string(lastLines(sl.Data, 1))); line != "" {
			return strings.ToValidUTF8(line, "?")
		}
	}
	return ""
}

// usage is a live run's process group's use of the machine, read from
// /proc when asked.
type usage struct {
	CPUSeconds float64 `json:"cpu_seconds"`
	RSSBytes   int64   `json:"rss_bytes"`
	Procs      int     `json:"procs"`
}

// liveUsage returns the usage of every live run among runs, from one pass
// over /proc.
func liveUsage(runs []*tracker.State) map[string]*usage {
	groups := make(map[int]bool)
	for _, st := range runs {
		if live(st) {
			groups[st.PGID] = true
		}
	}
	out := make(map[string]*usage)
	if len(groups) == 0 {
		return out
	}
	got, _ := procfs.GroupUsage(groups)
	for _, st := range runs {
		if u, ok := got[st.PGID]; ok && live(st) {
			out[st.ID] = &usage{CPUSeconds: u.CPUSeconds, RSSBytes: u.RSSBytes, Procs: u.Procs}
		}
	}
	return out
}

func live(st *tracker.State) bool {
	return st.PGID > 0 && (st.State == tracker.Running || st.State == tracker.Starting || st.State == tracker.Stopping || st.State == tracker.Paused)
}

// quietFor returns how long a live run's output has not grown.
func quietFor(store *tracker.Store, st *tracker.State, now time.Time) *float64 {
	if !live(st) {
		return nil
	}
	latest := *st.StartedAt
	for _, name := range []string{"stdout", "stderr"} {
		if fi, err := os.Stat(store.Path(st.ID, name)); err == nil && fi.ModTime().After(latest) {
			latest = fi.ModTime()
		}
	}
	q := now.Sub(latest).Seconds()
	return &q
}

// infoText is ls's INFO column: progress, else how long the run has been
// quiet, and its CPU and memory while it runs; for a run that ended with
// neither an exit code nor a signal (it could not start, or its end was
// lost), why.
func infoText(r listed) string {
	if endedUnexplained(r.State) && r.Reason != "" {
		return cut(r.Reason, maxReasonWidth)
	}
	var parts []string
	if r.Progress != "" {
		parts = append(parts, r.Progress)
	} else if r.QuietFor != nil && *r.QuietFor >= 5 {
		parts = append(parts, fmt.Sprintf("quiet %ds", int(*r.QuietFor)))
	}
	if r.Usage != nil {
		parts = append(parts, fmt.Sprintf("cpu %.1fs mem %s", r.Usage.CPUSeconds, bytesText(r.Usage.RSSBytes)))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// maxReasonWidth is how much of a reason ls shows; tend show has it whole.
const maxReasonWidth = 48

// endedUnexplained reports whether st ended with neither an exit code nor
// a signal to say how: EXIT shows "-", and only its reason says why.
func endedUnexplained(st *tracker.State) bool {
	return tracker.Final(st.State) && st.ExitCode == nil && st.Signal == ""
}

func bytesText(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1fG", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1fM", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%dK", n>>10)
}

func (c *lsCmd) Run(e *env) error {
	// A listing allocates a few KiB a record and is over in milliseconds:
	// collecting less often saves a tenth of its time on a long list.
	debug.SetGCPercent(400)
	store := tracker.NewStore(e.root)
	list := store.ListBrief // the table shows no more than a brief record
	if c.JSON {
		list = store.List
	}
	runs, errs := list()
	for _, err := range errs {
		fmt.Fprintln(e.stderr, "tend:", err)
	}
	for _, l := range c.Label {
		if !strings.Contains(l, "=") {
			return exitf(exitUsage, "ls: --label %q: want K=V", l)
		}
	}
	positions := queuePositions(e.root)
	now := time.Now()
	var shown []*tracker.State
	for _, st := range runs {
		if c.match(st, now) {
			shown = append(shown, st)
		}
	}
	use := liveUsage(shown)
	out := []listed{}
	for _, st := range shown {
		if !c.JSON && endedUnexplained(st) && st.Reason == "" {
			// A brief record has no reason: read the whole one, for the few
			// runs whose INFO shows it.
			if full, err := store.Read(st.ID); err == nil {
				st = full
			}
		}
		out = append(out, listed{State: st, Position: positions[st.ID], Usage: use[st.ID], QuietFor: quietFor(store, st, now), LastLine: lastLine(store, st)})
	}
	if c.JSON {
		return writeJSON(e.stdout, out)
	}
	if err := printRuns(e, out, now); err != nil {
		return err
	}
	if len(errs) > 0 {
		return exitf(exitFailed, "%d run record%s could not be read", len(errs), plural(len(errs)))
	}
	return nil
}

// printRuns prints ls's table: a SESSION column only if a run has one,
// states in color for people, the command cut to the terminal's width.
func printRuns(e *env, runs []listed, now time.Time) error {
	sessions := slices.ContainsFunc(runs, func(r listed) bool { return r.Session != "" })
	header := []string{"ID", "STATE", "EXIT", "TIME", "INFO", "COMMAND"}
	if sessions {
		header = slices.Insert(header, 2, "SESSION")
	}
	rows := make([][]cell, 0, len(runs))
	for _, r := range runs {
		state := r.State.State
		if r.Position > 0 {
			state = fmt.Sprintf("queued #%d", r.Position)
		}
		row := []cell{{text: r.ID}, {text: state, state: r.State.State}, {text: exitText(r.State)},
			{text: timeText(r.State, now)}, {text: infoText(r)}, {text: commandText(r.Command, 0)}}
		if sessions {
			row = slices.Insert(row, 2, cell{text: orDash(r.Session)})
		}
		rows = append(rows, row)
	}
	return e.term.printTable(e.stdout, header, rows)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// match reports whether st passes the filters.
func (c *lsCmd) match(st *tracker.State, now time.Time) bool {
	if !c.All && tracker.Final(st.State) && st.EndedAt != nil && now.Sub(*st.EndedAt) > 24*time.Hour {
		return false
	}
	if len(c.State) > 0 && !slices.Contains(c.State, st.State) {
		return false
	}
	if c.Session != "" && st.Session != c.Session {
		return false
	}
	if c.Since > 0 && now.Sub(st.CreatedAt) > c.Since {
		return false
	}
	for _, l := range c.Label {
		k, v, _ := strings.Cut(l, "=")
		if got, ok := st.Labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// queuePositions reads ROOT/queue: the queued runs' positions, from 1.
func queuePositions(root string) map[string]int {
	b, _ := os.ReadFile(watcher.QueuePath(root))
	pos := make(map[string]int)
	for i, id := range strings.Fields(string(b)) {
		pos[id] = i + 1
	}
	return pos
}

func exitText(st *tracker.State) string {
	switch {
	case st.ExitCode != nil:
		return fmt.Sprint(*st.ExitCode)
	case st.Signal != "":
		return st.Signal
	}
	return "-"
}

// timeText is how long a run ran, or has been running.
func timeText(st *tracker.State, now time.Time) string {
	switch {
	case st.StartedAt == nil:
		return "-"
	case st.DurationSeconds > 0:
		return time.Duration(st.DurationSeconds * float64(time.Second)).Round(time.Millisecond).String()
	case st.EndedAt != nil:
		return max(0, st.EndedAt.Sub(*st.StartedAt)).Round(time.Millisecond).String()
	case st.ProcStart != 0 && !tracker.Final(st.State):
		// From the kernel's start time: right even if the wall clock was set.
		return procfs.Age(st.ProcStart).Round(time.Second).String()
	}
	return max(0, now.Sub(*st.StartedAt)).Round(time.Second).String()
}

func commandText(argv []string, width int) string {
	s := strings.Join(argv, " ")
	if len(argv) == 3 && argv[0] == "/bin/sh" && argv[1] == "-c" {
		s = argv[2]
	}
	s = strings.Join(strings.Fields(s), " ")
	if width > 0 {
		s = cut(s, width)
	}
	return s
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
streams, in order). Example: tend show build; tend show build --json`
}

func (c *showCmd) Run(e *env) error {
	st, err := readRun(e, c.ID)
	if err != nil {
		return err
	}
	if c.JSON {
		return writeJSON(e.stdout, st)
	}
	store := tracker.NewStore(e.root)
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", k, v)
		}
	}
	row("id", st.ID)
	row("state", st.State)
	if pos := queuePositions(e.root)[st.ID]; pos > 0 {
		row("position", fmt.Sprintf("%d in the queue", pos))
	}
	row("reason", st.Reason)
	row("exit", exitText(st))
	row("command", commandText(st.Command, 1<<20))
	row("cwd", st.Cwd)
	row("session", st.Session)
	if st.PID != 0 {
		row("pid", fmt.Sprintf("%d (group %d)", st.PID, st.PGID))
	}
	row("created", st.CreatedAt.Format(time.RFC3339))
	if st.StartedAt != nil {
		row("started", st.StartedAt.Format(time.RFC3339))
	}
	if st.EndedAt != nil {
		row("ended", st.EndedAt.Format(time.RFC3339))
	}
	row("time", timeText(st, time.Now()))
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
	if u := liveUsage([]*tracker.State{st})[st.ID]; u != nil {
		procs := "processes"
		if u.Procs == 1 {
			procs = "process"
		}
		row("usage", fmt.Sprintf("cpu %.2fs, mem %s, %d %s", u.CPUSeconds, bytesText(u.RSSBytes), u.Procs, procs))
	} else if st.CPUSeconds > 0 {
		row("cpu", fmt.Sprintf("%.2fs", st.CPUSeconds))
	}
	if q := quietFor(store, st, time.Now()); q != nil {
		row("quiet", fmt.Sprintf("%.0fs since its output last grew", *q))
	}
	if o := st.Output; o != nil && (o.Stdout.Dropped > 0 || o.Stderr.Dropped > 0) {
		row("dropped", fmt.Sprintf("%d bytes of stdout, %d of stderr (output capped at %s a stream)", o.Stdout.Dropped, o.Stderr.Dropped, bytesText(o.Limit)))
	}
	showService(st, row)
	row("stdout", store.Path(st.ID, "stdout"))
	row("stderr", store.Path(st.ID, "stderr"))
	row("state file", store.Path(st.ID, "state.json"))
	if err := tw.Flush(); err != nil {
		return err
	}
	return showLastLines(e, store, st, 5)
}

// showService adds a service's rows: its restarts, its attempts' ends,
// its health.
func showService(st *tracker.State, row func(k, v string)) {
	if st.Restart != nil {
		row("restart", fmt.Sprintf("%s, %d restart%s so far (attempt %d)", st.Restart.Policy, st.Restarts, plural(st.Restarts), st.Attempt))
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

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// showLastLines prints the run's last n lines of output, both streams in
// the order written, each marked with its stream.
func showLastLines(e *env, store *tracker.Store, st *tracker.State, n int) error {
	var lines []tracker.Line
	err := store.InterleaveTail(st, 16<<10).Read(st, true, func(l tracker.Line) error {
		if lines = append(lines, l); len(lines) > n {
			lines = lines[1:]
		}
		return nil
	})
	if err != nil || len(lines) == 0 {
		return err
	}
	fmt.Fprintf(e.stdout, "last output (tend logs %s --both):\n", st.ID)
	for _, l := range lines {
		fmt.Fprintf(e.stdout, "  %s: %s\n", l.Stream, strings.TrimSuffix(strings.ToValidUTF8(string(l.Data), "?"), "\n"))
	}
	return nil
}

type logsCmd struct {
	ID       string `arg:"" help:"The run whose output to print."`
	Stderr   bool   `help:"Print standard error instead of standard output."`
	Both     bool   `help:"Print both streams' lines in the order the run wrote them, each marked with its stream."`
	Offset   int64  `help:"Start at this absolute byte offset of the stream (as --json's next gave it)." default:"0"`
	MaxBytes int64  `name:"max-bytes" help:"Print at most this many bytes (0: all)." default:"0"`
	Tail     int    `help:"Print only the last N lines." default:"0"`
	JSON     bool   `help:"Print {offset, next, dropped, eof, data} for the slice read, so an agent reads incrementally: ask next time from next."`
	Follow   bool   `short:"f" help:"Keep printing as the run writes, until it ends; then exit with its exit code."`
}

func (c *logsCmd) Help() string {
	return `Offsets are absolute byte positions in all the run wrote to the stream,
so reads never overlap or skip, even when the oldest output was dropped
(capped; then --json says how many bytes). Examples:
  tend logs -f build
  tend logs build --tail 20
  tend logs build --offset 0 --max-bytes 65536 --json   # then --offset <next>`
}

// logSlice is what logs --json prints.
type logSlice struct {
	Stream  string `json:"stream"`
	Offset  int64  `json:"offset"`
	Next    int64  `json:"next"`
	Dropped int64  `json:"dropped"`
	EOF     bool   `json:"eof"`
	Final   bool   `json:"final"`
	Data    string `json:"data"`
}

func (c *logsCmd) Run(e *env) error {
	st, err := readRun(e, c.ID)
	if err != nil {
		return err
	}
	if c.Both {
		if c.MaxBytes > 0 {
			return exitf(exitUsage, "logs: --max-bytes reads one stream; read each with --offset and --max-bytes (and --stderr), or drop --both")
		}
		return c.both(e, st)
	}
	if c.Follow {
		return c.follow(e, st)
	}
	store := tracker.NewStore(e.root)
	stream := c.stream()
	max := c.MaxBytes
	if max <= 0 {
		max = store.OutputSize(st, stream) - c.Offset
	}
	sl, err := store.ReadOutput(st, stream, c.Offset, max)
	if err != nil {
		return err
	}
	data := sl.Data
	if c.Tail > 0 {
		data = lastLines(data, c.Tail)
	}
	if c.JSON {
		return writeJSONLine(e, logSlice{Stream: stream, Offset: sl.Offset, Next: sl.Next, Dropped: sl.Dropped,
			EOF: sl.Next >= store.OutputSize(st, stream), Final: tracker.Final(st.State), Data: string(data)})
	}
	if sl.Dropped > 0 {
		fmt.Fprintf(e.stderr, "tend: %d bytes before offset %d were dropped (the output is capped)\n", sl.Dropped, sl.Offset)
	}
	_, err = e.stdout.Write(data)
	return err
}

// logLine is what logs --both --json prints for each line.
type logLine struct {
	Stream string `json:"stream"`
	Offset int64  `json:"offset"`
	Next   int64  `json:"next"`
	Data   string `json:"data"`
}

// both prints both streams' lines in the order the run wrote them (as the
// watcher recorded it), each marked with its stream; with -f it follows
// until the run ends and exits with its code.
func (c *logsCmd) both(e *env, st *tracker.State) error {
	store := tracker.NewStore(e.root)
	it := store.Interleave(st.ID, c.Offset)
	emit := func(l tracker.Line) error { return c.printLine(e, e.stdout, l) }
	if !c.Follow {
		var tail []tracker.Line
		if c.Tail > 0 {
			emit = func(l tracker.Line) error {
				tail = append(tail, l)
				if len(tail) > c.Tail {
					tail = tail[1:]
				}
				return nil
			}
		}
		if err := it.Read(st, true, emit); err != nil {
			return err
		}
		for _, l := range tail {
			if err := c.printLine(e, e.stdout, l); err != nil {
				return err
			}
		}
		c.noteDropped(e, it.Dropped)
		return nil
	}
	var final *tracker.State
	spin := startSpinner(e, "following "+c.ID)
	defer spin.end()
	out := stdoutVia(e, spin)
	emit = func(l tracker.Line) error { return c.printLine(e, out, l) }
	err := waitUntil(store.RunDir(c.ID), func() (bool, error) {
		cur, err := store.Read(c.ID)
		if err != nil {
			return false, err
		}
		spin.set(func() string { return waitingText(cur) })
		done := tracker.Final(cur.State)
		if err := it.Read(cur, done, emit); err != nil {
			return false, err
		}
		if done {
			final = cur
		}
		return done, nil
	})
	if err != nil {
		return err
	}
	c.noteDropped(e, it.Dropped)
	if code := runExitCode(final); code != 0 {
		return exitf(code, "")
	}
	return nil
}

func (c *logsCmd) printLine(e *env, w io.Writer, l tracker.Line) error {
	if c.JSON {
		return writeJSONLineTo(w, logLine{Stream: l.Stream, Offset: l.Offset, Next: l.Offset + int64(len(l.Data)), Data: string(l.Data)})
	}
	nl := ""
	if !bytes.HasSuffix(l.Data, []byte("\n")) {
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
		return "stderr"
	}
	return "stdout"
}

func writeJSONLine(e *env, v any) error { return writeJSONLineTo(e.stdout, v) }

func writeJSONLineTo(w io.Writer, v any) error {
	enc := json.NewEncoder(w) // one line: Encode ends it with a newline
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// lastLines returns the last n lines of data.
func lastLines(data []byte, n int) []byte {
	end := len(data)
	if end > 0 && data[end-1] == '\n' {
		end--
	}
	for i := end - 1; i >= 0; i-- {
		if data[i] == '\n' {
			n--
			if n == 0 {
				return data[i+1:]
			}
		}
	}
	return data
}

// follow prints the stream as it grows until the run is final, then exits
// with the run's code. It reads by absolute offset, so output cut from the
// file's start meanwhile is neither printed twice nor skipped unsaid.
func (c *logsCmd) follow(e *env, st *tracker.State) error {
	store := tracker.NewStore(e.root)
	stream := c.stream()
	off := c.Offset
	var final *tracker.State
	spin := startSpinner(e, "following "+c.ID)
	defer spin.end()
	out := stdoutVia(e, spin)
	err := waitUntil(store.RunDir(c.ID), func() (bool, error) {
		cur, err := store.Read(c.ID)
		if err != nil {
			return false, err
		}
		spin.set(func() string { return waitingText(cur) })
		for {
			sl, err := store.ReadOutput(cur, stream, off, 1<<20)
			if err != nil {
				return false, err
			}
			if sl.Dropped > 0 {
				fmt.Fprintf(e.stderr, "tend: %d bytes were dropped here (the output is capped)\n", sl.Dropped)
			}
			if _, err := out.Write(sl.Data); err != nil {
				return false, err
			}
			off = sl.Next
			if len(sl.Data) == 0 {
				break
			}
		}
		if tracker.Final(cur.State) {
			final = cur
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return err
	}
	if code := runExitCode(final); code != 0 {
		return exitf(code, "")
	}
	return nil
}

type waitCmd struct {
	ID      string        `arg:"" help:"The run to wait for."`
	Ready   bool          `help:"Wait until the run is ready (its health check passed, or it created $TEND_READY; else once it runs), not until it ends. Exits 0 when ready, or as wait does if it ends first."`
	Timeout time.Duration `help:"Give up after this long and exit 124; the run goes on (default: wait as long as it takes)."`
	JSON    bool          `help:"Print the run's record when the wait is over (docs/schema/record.schema.json)."`
}

func (c *waitCmd) Help() string {
	return `Exits with the run's exit code (128+N if signal N killed it, 127 if it
could not start), or 124 if --timeout came first. Example: tend wait build && echo built
  tend start --id db --health-tcp 127.0.0.1:5432 -- postgres ... && tend wait db --ready --timeout 1m && make test`
}

func (c *waitCmd) Run(e *env) error {
	until := func(st *tracker.State) bool { return tracker.Final(st.State) }
	if c.Ready {
		until = func(st *tracker.State) bool { return tracker.Final(st.State) || ready(st) }
	}
	var deadline time.Time
	if c.Timeout > 0 {
		deadline = time.Now().Add(c.Timeout)
	}
	spin := startSpinner(e, "waiting for "+c.ID)
	st, err := waitRun(e, c.ID, deadline, func(st *tracker.State) bool {
		spin.set(func() string { return waitingText(st) })
		return until(st)
	})
	spin.end()
	if errors.Is(err, errTimedOut) {
		return c.timedOut(e, st)
	}
	if err != nil {
		return err
	}
	if c.JSON {
		if err := writeJSON(e.stdout, st); err != nil {
			return err
		}
	}
	if c.Ready && ready(st) {
		return nil
	}
	if st.State != tracker.Completed {
		fmt.Fprintf(e.stderr, "tend: run %s %s: %s\n", st.ID, st.State, st.Reason)
	}
	if code := runExitCode(st); code != 0 {
		return exitf(code, "")
	}
	return nil
}

// timedOut ends a wait whose --timeout came first: the record as last
// read (with --json), what the run was doing, and exitTimedOut.
func (c *waitCmd) timedOut(e *env, st *tracker.State) error {
	if st == nil {
		return exitf(exitTimedOut, "run %s has no record yet after %v", c.ID, c.Timeout)
	}
	if c.JSON {
		if err := writeJSON(e.stdout, st); err != nil {
			return err
		}
	}
	return exitf(exitTimedOut, "run %s is still %s after %v; it goes on", c.ID, st.State, c.Timeout)
}

// waitingText is what the spinner says while tend waits for run st.
func waitingText(st *tracker.State) string {
	s := fmt.Sprintf("waiting for %s: %s", st.ID, st.State)
	if st.StartedAt != nil && !tracker.Final(st.State) {
		s += ", " + timeText(st, time.Now())
	}
	if st.Progress != "" {
		s += ", " + st.Progress
	}
	return s
}

// ready reports whether a run is ready: running (or paused) and, if it
// waits for readiness, past it.
func ready(st *tracker.State) bool {
	live := st.State == tracker.Running || st.State == tracker.Paused || st.State == tracker.Stopping
	return live && (st.ReadyAt != nil || st.Health == nil && !st.ReadyFile)
}
