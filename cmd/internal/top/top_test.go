package top

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"
	"github.com/tendhq/tend"
	"github.com/tendhq/tend/tracker"
)

func TestSparkline(t *testing.T) {
	for _, tt := range []struct {
		samples []float64
		width   int
		want    string
	}{
		{nil, 10, ""},
		{[]float64{0, 0, 0}, 10, "▁▁▁"},
		{[]float64{0, 50, 100}, 10, "▁▅█"},
		{[]float64{0.2, 0.4, 0.1}, 10, "▂▄▂"}, // below 1%: scaled to 1
		{[]float64{0, 0, 100, 0, 0, 0}, 3, "▁█▁"},
	} {
		if got := sparkline(tt.samples, tt.width, 0, 1); got != tt.want {
			t.Errorf("sparkline(%v, %d) = %q, want %q", tt.samples, tt.width, got, tt.want)
		}
	}
	// Memory that stays the same is a low line, not a wall.
	flat := []int64{3 << 20, 3 << 20, 3 << 20}
	if got := sparkline(flat, 10, 3<<20, 1<<20); got != "▁▁▁" {
		t.Errorf("flat memory = %q", got)
	}
}

// row makes a row of the view for tests.
func row(id string, state tracker.StateName, created time.Time, mod func(*tend.Record)) *topRow {
	rec := &tend.Record{ID: id, State: state, CreatedAt: created, Command: []string{"/bin/sh", "-c", "echo " + id}}
	if mod != nil {
		mod(rec)
	}
	return &topRow{Listed: tend.Listed{Record: rec}}
}

func TestTopFilter(t *testing.T) {
	now := time.Now()
	rows := []*topRow{
		row("build", tracker.Running, now, func(r *tend.Record) { r.Session = "ci"; r.Labels = map[string]string{"kind": "build"} }),
		row("test", tracker.Failed, now, func(r *tend.Record) { r.Session = "ci"; r.Labels = map[string]string{"kind": "test"} }),
		row("web", tracker.Running, now, func(r *tend.Record) { r.Command = []string{"python3", "-m", "http.server"} }),
	}
	for _, tt := range []struct {
		filter string
		want   string
	}{
		{"", "build test web"},
		{"state:running", "build web"},
		{"state:active", "build web"},
		{"session:ci", "build test"},
		{"label:kind=test", "test"},
		{"label:kind", "build test"},
		{"HTTP", "web"},
		{"session:ci state:failed", "test"},
		{"kind=build", "build"},
		{"nothing", ""},
	} {
		match := parseTopFilter(tt.filter)
		var got []string
		for _, r := range rows {
			if match(r) {
				got = append(got, r.ID)
			}
		}
		if strings.Join(got, " ") != tt.want {
			t.Errorf("filter %q matches %q, want %q", tt.filter, strings.Join(got, " "), tt.want)
		}
	}
}

// newTestModel is a view of n runs, made one a second, the last ones
// running, in a width x height terminal, with no feed behind it.
func newTestModel(t *testing.T, n, width, height int) *topModel {
	client, err := tend.Open(t.TempDir(), tend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := newTopModel(context.Background(), client)
	m.logs.send = func(tea.Msg) {}
	t.Cleanup(m.logs.stop)
	start := time.Now().Add(-time.Duration(n) * time.Second)
	var runs []tend.Listed
	for i := range n {
		state := tracker.Completed
		if i >= n-3 {
			state = tracker.Running
		}
		r := row(fmt.Sprintf("run-%05d", i), state, start.Add(time.Duration(i)*time.Second), func(r *tend.Record) {
			if state == tracker.Running {
				r.Progress = strconv.Itoa(10 * (i % 10))
			}
		})
		runs = append(runs, r.Listed)
	}
	m.Update(tea.WindowSizeMsg{Width: width, Height: height})
	m.Update(topLoadedMsg{runs: runs})
	return m
}

// The view draws what fits the terminal, every line of it, and with
// 10,000 runs formats only the rows on screen.
func TestTopViewFits(t *testing.T) {
	for _, size := range [][2]int{{80, 24}, {60, 20}, {200, 50}, {20, 8}} {
		m := newTestModel(t, 10000, size[0], size[1])
		screen := m.render()
		lines := strings.Split(screen, "\n")
		if len(lines) != size[1] {
			t.Errorf("%dx%d: %d lines", size[0], size[1], len(lines))
		}
		for i, l := range lines {
			if w := ansi.StringWidth(l); w > size[0] {
				t.Errorf("%dx%d: line %d is %d wide: %q", size[0], size[1], i+1, w, l)
			}
		}
		if got := len(m.visible()); got != m.tableRows() || got >= 100 {
			t.Errorf("%dx%d: %d rows rendered for a table of %d", size[0], size[1], got, m.tableRows())
		}
		// Newest first: the last run made is on top, selected.
		if size[1] >= 20 && !strings.Contains(screen, "run-09999") {
			t.Errorf("%dx%d: the newest run is not on screen:\n%s", size[0], size[1], ansi.Strip(screen))
		}
	}
}

// At 80 columns the table keeps the ID, state, progress and command, and
// drops the columns of least use first; wider, it shows them all.
func TestTopColumns(t *testing.T) {
	m := newTestModel(t, 10, 80, 24)
	names := func() string {
		var n []string
		for _, c := range m.fitColumns() {
			n = append(n, c.name)
		}
		return strings.Join(n, ",")
	}
	if got := names(); got != "ID,STATE,PROGRESS,CPU%,MEM,TIME,COMMAND" {
		t.Errorf("80 columns: %s", got)
	}
	m.Update(tea.WindowSizeMsg{Width: 140, Height: 24})
	if got := names(); got != "ID,STATE,ATT/R,PROGRESS,CPU%,CPU 1m,MEM,TIME,COMMAND" {
		t.Errorf("140 columns: %s", got)
	}
}

// Keys move the selection, which stays on its run as the runs change;
// sorting and filtering keep it where they can.
func TestTopKeys(t *testing.T) {
	m := newTestModel(t, 100, 80, 24)
	press := func(keys ...string) {
		for _, k := range keys {
			var msg tea.KeyPressMsg
			switch k {
			case "down":
				msg = tea.KeyPressMsg{Code: tea.KeyDown}
			case "end":
				msg = tea.KeyPressMsg{Code: tea.KeyEnd}
			case "enter":
				msg = tea.KeyPressMsg{Code: tea.KeyEnter}
			case "esc":
				msg = tea.KeyPressMsg{Code: tea.KeyEscape}
			default:
				msg = tea.KeyPressMsg{Code: []rune(k)[0], Text: k}
			}
			m.Update(msg)
		}
	}
	if m.sel != "run-00099" {
		t.Fatalf("selected %s at first, want the newest", m.sel)
	}
	press("down", "down")
	if m.sel != "run-00097" {
		t.Errorf("two down: %s", m.sel)
	}
	press("end")
	if m.sel != "run-00000" || m.top != len(m.shown)-m.tableRows() {
		t.Errorf("end: %s, top %d", m.sel, m.top)
	}
	// A new run does not move the selection off its run.
	m.Update(topChangedMsg{runs: []tend.Listed{row("newer", tracker.Running, time.Now(), nil).Listed}})
	if m.sel != "run-00000" || m.shown[0].ID != "newer" {
		t.Errorf("after a new run: selected %s, first %s", m.sel, m.shown[0].ID)
	}
	press("/", "-", "0", "0", "0", "9", "enter")
	if len(m.shown) != 10 || m.filter != "-0009" {
		t.Errorf("filter %q shows %d runs", m.filter, len(m.shown))
	}
	press("esc")
	if len(m.shown) != 101 {
		t.Errorf("esc: %d runs shown", len(m.shown))
	}
	press("f")
	if len(m.shown) != 4 {
		t.Errorf("finished hidden: %d runs shown", len(m.shown))
	}
	press("f", "s")
	if m.sortBy != "id" || m.sortDesc || m.shown[0].ID != "newer" {
		t.Errorf("s: sorted by %s (desc %v), first %s", m.sortBy, m.sortDesc, m.shown[0].ID)
	}
	// A run gone from the root leaves the table.
	m.Update(topChangedMsg{gone: []string{"newer"}})
	if _, ok := m.runs["newer"]; ok || m.shown[0].ID != "run-00000" {
		t.Errorf("gone: first %s", m.shown[0].ID)
	}
	// Deleting a live run is refused at once, with the reason.
	press("G") // run-00099, running
	press("d")
	if m.mode != topBrowse || !strings.Contains(m.status, "only a finished run can be deleted") {
		t.Errorf("delete of a running run: mode %v, status %q", m.mode, m.status)
	}
	press("c")
	if m.mode != topConfirm || m.confirmText() != "cancel run run-00099? y/n" {
		t.Errorf("cancel asks %q (mode %v)", m.confirmText(), m.mode)
	}
	press("n")
	if m.mode != topBrowse || !strings.Contains(m.status, "not done") {
		t.Errorf("cancel, n: mode %v, status %q", m.mode, m.status)
	}
}

// Output comes in pieces that need not end at a line's end; the view
// shows each line once, whole, with its stream, and what a run wrote
// cannot reach the terminal as control codes.
func TestTopLogLines(t *testing.T) {
	m := newTestModel(t, 3, 80, 24)
	id := m.sel
	m.followSelected()
	gen := m.logs.generation()
	m.Update(topLogMsg{id: id, gen: gen, reset: true, lines: []tend.LogLine{{Stream: "stdout", Data: "one\n"}, {Stream: "stderr", Data: "tw"}}})
	m.Update(topLogMsg{id: id, gen: gen, chunks: []topChunk{{"stdout", "three\nfo"}, {"stderr", "o\n"}, {"stdout", "ur\x1b[2J\n"}}})
	m.Update(topLogMsg{id: id, gen: gen - 1, chunks: []topChunk{{"stdout", "stale\n"}}})
	var got []string
	for _, l := range m.logView() {
		got = append(got, l.stream+":"+l.text)
	}
	want := "stdout:one stdout:three stderr:two stdout:four"
	if strings.Join(got, " ") != want {
		t.Errorf("lines %q, want %q", strings.Join(got, " "), want)
	}
}

// The watcher appends a run's event to the history before it writes the
// run's record: a record read at once may be behind its event. The feed
// reads it again a moment later, until it has caught up, rather than
// showing the older record until the run changes again.
func TestTopFeedBehind(t *testing.T) {
	root := t.TempDir()
	store := tracker.NewStore(root)
	if err := os.MkdirAll(store.RunDir("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	rec := &tracker.State{ID: "x", State: tracker.Running, Rev: 2, Command: []string{"sleep", "9"}, CreatedAt: now, StartedAt: &now}
	if err := store.Write(rec); err != nil {
		t.Fatal(err)
	}
	client, err := tend.Open(root, tend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var sent []tea.Msg
	f := newTopFeed(client, func(m tea.Msg) { sent = append(sent, m) })
	ctx := context.Background()
	f.load(ctx)
	if len(sent) != 1 || len(sent[0].(topLoadedMsg).runs) != 1 {
		t.Fatalf("load sent %+v", sent)
	}
	// Events the listing has seen change nothing.
	f.events = []tend.Event{{ID: "x", Rev: 1, State: tracker.Starting, Time: now}, {ID: "x", Rev: 2, State: tracker.Running, Time: now}}
	if again := f.apply(ctx); again != 0 || len(f.dirty) != 0 {
		t.Errorf("old events: again %v, dirty %v", again, f.dirty)
	}
	if got := sent[len(sent)-1].(topChangedMsg); len(got.runs) != 0 || len(got.events) != 2 {
		t.Errorf("old events sent %d runs, %d events", len(got.runs), len(got.events))
	}
	// Its progress, in the history before the record has it.
	f.events = []tend.Event{{ID: "x", Rev: 3, State: tracker.Running, Time: now}}
	again := f.apply(ctx)
	if again <= 0 || !f.dirty["x"] {
		t.Fatalf("a record behind its event: again %v, dirty %v", again, f.dirty)
	}
	rec.Rev, rec.Progress = 3, "50"
	if err := store.Write(rec); err != nil {
		t.Fatal(err)
	}
	if again := f.apply(ctx); again != 0 {
		t.Errorf("caught up: again %v", again)
	}
	got := sent[len(sent)-1].(topChangedMsg)
	if len(got.runs) != 1 || got.runs[0].Rev != 3 || got.runs[0].Progress != "50" {
		t.Errorf("caught up: sent %+v", got.runs)
	}
	// A new run's first event, before its first record is written.
	f.events = []tend.Event{{ID: "y", Rev: 1, State: tracker.Starting, Time: time.Now()}}
	if again := f.apply(ctx); again <= 0 || !f.dirty["y"] {
		t.Fatalf("a run with no record yet: again %v, dirty %v", again, f.dirty)
	}
	if err := os.MkdirAll(store.RunDir("y"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := store.Write(&tracker.State{ID: "y", State: tracker.Starting, Rev: 1, Command: []string{"true"}, CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	if again := f.apply(ctx); again != 0 {
		t.Errorf("written: again %v", again)
	}
	if got := sent[len(sent)-1].(topChangedMsg); len(got.runs) != 1 || got.runs[0].ID != "y" {
		t.Errorf("written: sent %+v", got.runs)
	}
	// Gone from the root: gone from the view.
	if err := os.RemoveAll(store.RunDir("x")); err != nil {
		t.Fatal(err)
	}
	f.markDirty("x")
	f.apply(ctx)
	if got := sent[len(sent)-1].(topChangedMsg); len(got.gone) != 1 || got.gone[0] != "x" {
		t.Errorf("removed: sent %+v", got)
	}
}
