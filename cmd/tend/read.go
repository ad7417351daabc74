package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

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
position in the queue. Examples:
  tend ls --state failed --since 1h
  tend ls --session agent-7 -l kind=test --json | jq '.[].id'`
}

// listed is a run as ls prints it in JSON: its record, and its position if
// it is queued.
type listed struct {
	*tracker.State
	Position int `json:"position,omitempty"`
}

func (c *lsCmd) Run(e *env) error {
	runs, errs := tracker.NewStore(e.root).List()
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
	out := []listed{}
	for _, st := range runs {
		if c.match(st, now) {
			out = append(out, listed{st, positions[st.ID]})
		}
	}
	if c.JSON {
		return writeJSON(e.stdout, out)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tEXIT\tTIME\tCOMMAND")
	for _, r := range out {
		state := r.State.State
		if r.Position > 0 {
			state = fmt.Sprintf("queued #%d", r.Position)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.ID, state, exitText(r.State), timeText(r.State, now), commandText(r.Command, 60))
	}
	tw.Flush()
	if len(errs) > 0 {
		return exitf(exitFailed, "%d run records could not be read", len(errs))
	}
	return nil
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
	case st.EndedAt != nil:
		return st.EndedAt.Sub(*st.StartedAt).Round(time.Millisecond).String()
	}
	return now.Sub(*st.StartedAt).Round(time.Second).String()
}

func commandText(argv []string, width int) string {
	s := strings.Join(argv, " ")
	if len(argv) == 3 && argv[0] == "/bin/sh" && argv[1] == "-c" {
		s = argv[2]
	}
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > width {
		s = s[:width-3] + "..."
	}
	return s
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

type showCmd struct {
	ID   string `arg:"" help:"The run to show."`
	JSON bool   `help:"Print the state record as JSON."`
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
	row("stdout", store.Path(st.ID, "stdout"))
	row("stderr", store.Path(st.ID, "stderr"))
	row("state file", store.Path(st.ID, "state.json"))
	return tw.Flush()
}

type logsCmd struct {
	ID     string `arg:"" help:"The run whose output to print."`
	Stderr bool   `help:"Print standard error instead of standard output."`
	Follow bool   `short:"f" help:"Keep printing as the run writes, until it ends; then exit with its exit code."`
}

func (c *logsCmd) Help() string { return "Example: tend logs -f build" }

func (c *logsCmd) Run(e *env) error {
	st, err := readRun(e, c.ID)
	if err != nil {
		return err
	}
	name := "stdout"
	if c.Stderr {
		name = "stderr"
	}
	store := tracker.NewStore(e.root)
	f, err := os.Open(store.Path(st.ID, name))
	if errors.Is(err, os.ErrNotExist) && !c.Follow {
		return nil // it never started, so it never wrote
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if !c.Follow {
		defer f.Close()
		_, err := io.Copy(e.stdout, f)
		return err
	}
	return c.follow(e, store, f)
}

// follow copies the output file as it grows until the run is final, then
// exits with the run's code.
func (c *logsCmd) follow(e *env, store *tracker.Store, f *os.File) error {
	path := store.Path(c.ID, "stdout")
	if c.Stderr {
		path = store.Path(c.ID, "stderr")
	}
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	var final *tracker.State
	err := waitUntil(store.RunDir(c.ID), func() (bool, error) {
		st, err := store.Read(c.ID)
		if err != nil {
			return false, err
		}
		if f == nil {
			if f, err = os.Open(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				return false, err
			}
		}
		if f != nil {
			if _, err := io.Copy(e.stdout, f); err != nil {
				return false, err
			}
		}
		if tracker.Final(st.State) {
			final = st
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
	ID    string `arg:"" help:"The run to wait for."`
	Ready bool   `help:"Wait until the run is ready (its health check passed, or it created $TEND_READY; else once it runs), not until it ends. Exits 0 when ready, or as wait does if it ends first."`
}

func (c *waitCmd) Help() string {
	return `Exits with the run's exit code (128+N if signal N killed it, 127 if it
could not start). Example: tend wait build && echo built
  tend start --id db --health-tcp 127.0.0.1:5432 -- postgres ... && tend wait db --ready && make test`
}

func (c *waitCmd) Run(e *env) error {
	until := func(st *tracker.State) bool { return tracker.Final(st.State) }
	if c.Ready {
		until = func(st *tracker.State) bool { return tracker.Final(st.State) || ready(st) }
	}
	st, err := waitRun(e, c.ID, until)
	if err != nil {
		return err
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

// ready reports whether a run is ready: running (or paused) and, if it
// waits for readiness, past it.
func ready(st *tracker.State) bool {
	live := st.State == tracker.Running || st.State == tracker.Paused || st.State == tracker.Stopping
	return live && (st.ReadyAt != nil || st.Health == nil && !st.ReadyFile)
}
