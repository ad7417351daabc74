package top

import (
	cmpx "cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"charm.land/bubbles/v2/textinput"
	tea "charm.land/bubbletea/v2"
	"github.com/tendhq/tend"
	"github.com/tendhq/tend/cmd/internal/runtext"
	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
)

// topRow is a run as the view has it: its record as last listed or read,
// and what sampling found it uses.
type topRow struct {
	tend.Listed
	cpu     []float64 // CPU %, a sample a second, the last minute's
	mem     []int64   // resident bytes, likewise
	lastCPU float64   // CPU seconds at the last sample
	lastAt  time.Time // when that was
}

// sparkSamples is how many samples a sparkline holds: a minute's.
const sparkSamples = 60

// cpuPct is the run's last sampled CPU use, in percent of one CPU.
func (r *topRow) cpuPct() (float64, bool) {
	if len(r.cpu) == 0 || !tend.Live(r.Record) {
		return 0, false
	}
	return r.cpu[len(r.cpu)-1], true
}

func (r *topRow) rss() (int64, bool) {
	if len(r.mem) > 0 && tend.Live(r.Record) {
		return r.mem[len(r.mem)-1], true
	}
	if r.Usage != nil {
		return r.Usage.RSSBytes, true
	}
	return 0, false
}

// sample takes a new usage reading.
func (r *topRow) sample(u *tend.Usage, at time.Time) {
	if u == nil {
		return
	}
	if !r.lastAt.IsZero() {
		if dt := at.Sub(r.lastAt).Seconds(); dt > 0 {
			r.cpu = appendSample(r.cpu, max(0, (u.CPUSeconds-r.lastCPU)/dt*100))
			r.mem = appendSample(r.mem, u.RSSBytes)
		}
	}
	r.lastCPU, r.lastAt = u.CPUSeconds, at
}

func appendSample[T any](s []T, v T) []T {
	if len(s) >= sparkSamples {
		s = slices.Delete(s, 0, len(s)-sparkSamples+1)
	}
	return append(s, v)
}

// The modes of the view: what keys do.
type topMode int

const (
	topBrowse  topMode = iota
	topFilter          // typing a filter
	topConfirm         // asking whether to do pending
	topSignal          // typing a signal's name
	topHelp            // every key
	topLogView         // the output, full screen
)

// topAction is a verb to carry out on a run, once confirmed.
type topAction struct {
	verb string // spool.VerbCancel, ...
	id   string
	arg  string // the signal
}

// topOutcomeMsg is how a request of the view went.
type topOutcomeMsg struct {
	act topAction
	o   tend.Outcome
	err error
}

// topTickMsg comes once a second: time to sample, and to probe if a file
// the header reads changed, or every topProbeEvery ticks: a watcher and
// keeper that both died change no file.
type topTickMsg struct{}

const topProbeEvery = 5

// The sort orders: by when runs were made (the default), or by a column.
const sortCreated = "created"

// topModel is the view's state. Its methods run on bubbletea's event
// loop; what reads files runs in commands and feeds, off it.
type topModel struct {
	ctx     context.Context
	client  *tend.Client
	feed    *topFeed // nil in tests
	logs    *topLogs
	sampler *topSampler

	width, height int
	now           time.Time

	runs   map[string]*topRow
	shown  []*topRow // filtered and sorted: the table
	counts map[tracker.StateName]int
	events map[string][]tend.Event // the last few of each run
	loaded bool

	// The widths of the ID and session columns: the widest of the runs
	// shown (0 for sessions if none has one), up to a bound.
	idWidth, sessionWidth int

	sel    string // the selected run's ID
	cursor int    // its index in shown
	top    int    // the first row on screen

	probe    topProbeMsg
	probed   bool
	probeDue bool // a file the header reads changed
	ticks    int
	history  error // why the history is not followed
	feedErr  error
	bad      []string

	sortBy       string
	sortDesc     bool
	filter       string
	hideFinished bool
	detail       bool

	mode    topMode
	input   textinput.Model
	pending topAction

	status    string
	statusBad bool

	// The run the detail pane shows: its whole record and its output.
	detailID  string
	detailRec *tend.Record
	detailErr error
	logLines  []topLogLine
	logPart   map[string]string // a stream's line not ended yet
	logErr    error
	logScroll int // lines up from the end, in the full screen view
}

// topLogLine is a line of a run's output, with its stream.
type topLogLine struct {
	stream string
	text   string
}

func newTopModel(ctx context.Context, client *tend.Client) *topModel {
	in := textinput.New()
	in.Prompt = "/"
	return &topModel{
		ctx: ctx, client: client, logs: &topLogs{client: client}, sampler: &topSampler{},
		runs: map[string]*topRow{}, counts: map[tracker.StateName]int{}, events: map[string][]tend.Event{},
		sortBy: sortCreated, sortDesc: true, detail: true, input: in, now: time.Now(), idWidth: 2,
	}
}

// Init starts the clock, and probes the root at once.
func (m *topModel) Init() tea.Cmd {
	return tea.Batch(m.probeCmd(), tick())
}

func tick() tea.Cmd {
	return tea.Tick(time.Second, func(time.Time) tea.Msg { return topTickMsg{} })
}

func (m *topModel) probeCmd() tea.Cmd {
	client := m.client
	return func() tea.Msg { return probeRoot(client) }
}

// Update applies one message.
func (m *topModel) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
		m.scrollToCursor()
		return m, m.followSelected()
	case tea.KeyPressMsg:
		return m, m.key(msg)
	case topTickMsg:
		m.now = time.Now()
		m.ticks++
		var probe tea.Cmd
		if m.probeDue || m.probe.noRoot || m.ticks%topProbeEvery == 0 {
			probe, m.probeDue = m.probeCmd(), false
		}
		return m, tea.Batch(tick(), probe, m.sampleCmd())
	case topRootMsg:
		m.probeDue = true // at the next tick: a burst of changes is one probe
		return m, nil
	case topProbeMsg:
		m.probe, m.probed = msg, true
		return m, nil
	case topSampleMsg:
		m.sampled(msg)
		return m, nil
	case topLoadedMsg:
		m.runs = make(map[string]*topRow, len(msg.runs))
		for _, r := range msg.runs {
			m.runs[r.ID] = &topRow{Listed: r}
		}
		m.loaded, m.bad = true, msg.bad
		m.refresh()
		return m, m.followSelected()
	case topChangedMsg:
		m.changed(msg)
		return m, m.followSelected()
	case topHistoryMsg:
		m.history = msg.err
		return m, nil
	case topFeedErrMsg:
		m.feedErr = msg.err
		return m, nil
	case topDetailMsg:
		if msg.id == m.detailID {
			if msg.rec != nil {
				m.detailRec = msg.rec
			}
			m.detailErr = msg.err
		}
		return m, nil
	case topLogMsg:
		m.logged(msg)
		return m, nil
	case topOutcomeMsg:
		m.outcome(msg)
		return m, nil
	}
	if m.mode == topFilter || m.mode == topSignal {
		var cmd tea.Cmd
		m.input, cmd = m.input.Update(msg)
		return m, cmd
	}
	return m, nil
}

// changed applies a batch of changes from the feed.
func (m *topModel) changed(msg topChangedMsg) {
	for _, id := range msg.gone {
		delete(m.runs, id)
	}
	for _, r := range msg.runs {
		if row, ok := m.runs[r.ID]; ok {
			usage := row.Usage
			row.Listed = r
			if r.Usage == nil {
				row.Usage = usage
			}
		} else {
			m.runs[r.ID] = &topRow{Listed: r}
		}
	}
	for _, ev := range msg.events {
		if ev.State == tracker.Deleted {
			delete(m.events, ev.ID)
			continue
		}
		m.events[ev.ID] = appendEvent(m.events[ev.ID], ev)
	}
	m.bad = msg.bad
	if len(msg.runs) > 0 || len(msg.gone) > 0 {
		m.refresh()
	}
}

// eventsKept is how many of a run's transitions the view keeps.
const eventsKept = 12

// appendEvent adds ev to a run's transitions, unless it left the state as
// it was (progress, a label, a note): the time a state began is what the
// detail pane shows.
func appendEvent(evs []tend.Event, ev tend.Event) []tend.Event {
	if n := len(evs); n > 0 && evs[n-1].State == ev.State && ev.ExitCode == nil && ev.Signal == "" {
		return evs
	}
	if len(evs) >= eventsKept {
		evs = slices.Delete(evs, 0, len(evs)-eventsKept+1)
	}
	return append(evs, ev)
}

// sampled takes the usage of the live runs on screen.
func (m *topModel) sampled(msg topSampleMsg) {
	for id, u := range msg.usage {
		if row, ok := m.runs[id]; ok {
			row.sample(u, msg.at)
			row.Usage = u
		}
	}
	if m.sortBy == "cpu" || m.sortBy == "mem" || m.sortBy == "time" {
		m.refresh()
	}
}

// sampleCmd samples the live runs on screen, and, while the history is
// not followed, has them read again: their changes reach the view no
// other way then.
func (m *topModel) sampleCmd() tea.Cmd {
	var recs []*tend.Record
	var ids []string
	for _, r := range m.visible() {
		if tend.Live(r.Record) {
			recs = append(recs, r.Record)
			ids = append(ids, r.ID)
		}
	}
	if m.history != nil && m.feed != nil && len(ids) > 0 {
		m.feed.markDirty(ids...)
	}
	if len(recs) == 0 {
		return nil
	}
	sampler := m.sampler
	return func() tea.Msg { return sampler.sample(recs, time.Now()) }
}

// refresh filters, counts and sorts the runs again, keeping the
// selection on the same run.
func (m *topModel) refresh() {
	clear(m.counts)
	match := parseTopFilter(m.filter)
	m.shown = m.shown[:0]
	for _, r := range m.runs {
		m.counts[r.State]++
		if m.hideFinished && tracker.Final(r.State) {
			continue
		}
		if match(r) {
			m.shown = append(m.shown, r)
		}
	}
	m.sortShown()
	m.idWidth, m.sessionWidth = 2, 0
	for _, r := range m.shown {
		m.idWidth = max(m.idWidth, min(24, len(r.ID))) // IDs are ASCII
		if r.Session != "" {
			m.sessionWidth = max(m.sessionWidth, 7, min(14, len(r.Session)))
		}
	}
	m.cursor = slices.IndexFunc(m.shown, func(r *topRow) bool { return r.ID == m.sel })
	if m.cursor < 0 {
		m.cursor = 0
		if len(m.shown) > 0 {
			m.sel = m.shown[0].ID
		} else {
			m.sel = ""
		}
	}
	m.scrollToCursor()
}

// sortShown sorts the table by m.sortBy; ties go by ID, so the order is
// stable from one refresh to the next.
func (m *topModel) sortShown() {
	by := topSorts[m.sortBy]
	slices.SortFunc(m.shown, func(a, b *topRow) int {
		c := by(a, b)
		if m.sortDesc {
			c = -c
		}
		if c == 0 {
			c = strings.Compare(a.ID, b.ID)
		}
		return c
	})
}

// topSorts compares rows by each sort order.
var topSorts = map[string]func(a, b *topRow) int{
	sortCreated: func(a, b *topRow) int { return a.CreatedAt.Compare(b.CreatedAt) },
	"id":        func(a, b *topRow) int { return strings.Compare(a.ID, b.ID) },
	"state":     func(a, b *topRow) int { return cmpx.Compare(stateRank(a.State), stateRank(b.State)) },
	"session":   func(a, b *topRow) int { return strings.Compare(a.Session, b.Session) },
	"attempt":   func(a, b *topRow) int { return cmpx.Compare(a.Attempt, b.Attempt) },
	"progress": func(a, b *topRow) int {
		fa, _, _, _ := runtext.ParseProgress(a.Progress)
		fb, _, _, _ := runtext.ParseProgress(b.Progress)
		return cmpx.Compare(fa, fb)
	},
	"cpu": func(a, b *topRow) int {
		ca, _ := a.cpuPct()
		cb, _ := b.cpuPct()
		return cmpx.Compare(ca, cb)
	},
	"mem": func(a, b *topRow) int {
		ma, _ := a.rss()
		mb, _ := b.rss()
		return cmpx.Compare(ma, mb)
	},
	"time": func(a, b *topRow) int {
		return cmpx.Compare(runTime(a.Record, time.Now()), runTime(b.Record, time.Now()))
	},
	"command": func(a, b *topRow) int {
		return strings.Compare(runtext.Command(a.Command, 0), runtext.Command(b.Command, 0))
	},
}

// sortOrder is the order s steps through.
var sortOrder = []string{sortCreated, "id", "state", "session", "attempt", "progress", "cpu", "mem", "time", "command"}

// stateRank orders states from the liveliest to the longest done.
func stateRank(s tracker.StateName) int {
	for i, x := range []tracker.StateName{tracker.Running, tracker.Starting, tracker.Stopping, tracker.Paused, tracker.Backoff, tracker.Queued,
		tracker.Failed, tracker.TimedOut, tracker.Canceled, tracker.Completed} {
		if s == x {
			return i
		}
	}
	return 99
}

// runTime is how long a run ran, or has been running.
func runTime(st *tracker.State, now time.Time) time.Duration {
	switch {
	case st.StartedAt == nil:
		return 0
	case st.DurationSeconds > 0:
		return time.Duration(st.DurationSeconds * float64(time.Second))
	case st.EndedAt != nil:
		return st.EndedAt.Sub(*st.StartedAt)
	}
	return now.Sub(*st.StartedAt)
}

// parseTopFilter returns what a filter matches: every one of its words,
// each "state:S", "session:S", "label:K=V" or text found (regardless of
// case) in the run's ID, state, session, command or labels.
func parseTopFilter(filter string) func(*topRow) bool {
	var tests []func(*topRow) bool
	for _, w := range strings.Fields(filter) {
		switch k, v, _ := strings.Cut(w, ":"); k {
		case "state":
			tests = append(tests, func(r *topRow) bool { return string(r.State) == v || v == "active" && !tracker.Final(r.State) })
		case "session":
			tests = append(tests, func(r *topRow) bool { return r.Session == v })
		case "label":
			lk, lv, hasValue := strings.Cut(v, "=")
			tests = append(tests, func(r *topRow) bool {
				got, ok := r.Labels[lk]
				return ok && (!hasValue || got == lv)
			})
		default:
			w := strings.ToLower(w)
			tests = append(tests, func(r *topRow) bool { return strings.Contains(searchText(r), w) })
		}
	}
	return func(r *topRow) bool {
		for _, t := range tests {
			if !t(r) {
				return false
			}
		}
		return true
	}
}

// searchText is what a filter's words are looked for in.
func searchText(r *topRow) string {
	parts := []string{r.ID, string(r.State), r.Session, runtext.Command(r.Command, 0)}
	for _, k := range slices.Sorted(maps.Keys(r.Labels)) {
		parts = append(parts, k+"="+r.Labels[k])
	}
	return strings.ToLower(strings.Join(parts, " "))
}

// visible returns the rows on screen.
func (m *topModel) visible() []*topRow {
	n := m.tableRows()
	end := min(len(m.shown), m.top+n)
	if m.top >= end {
		return nil
	}
	return m.shown[m.top:end]
}

// selected returns the selected row, if any.
func (m *topModel) selected() *topRow {
	if m.cursor < len(m.shown) && m.cursor >= 0 && len(m.shown) > 0 {
		return m.shown[m.cursor]
	}
	return nil
}

// move moves the selection by delta rows.
func (m *topModel) move(delta int) {
	if len(m.shown) == 0 {
		return
	}
	m.cursor = min(len(m.shown)-1, max(0, m.cursor+delta))
	m.sel = m.shown[m.cursor].ID
	m.scrollToCursor()
}

// scrollToCursor scrolls the table so the selected row is on screen.
func (m *topModel) scrollToCursor() {
	n := max(1, m.tableRows())
	if m.cursor < m.top {
		m.top = m.cursor
	}
	if m.cursor >= m.top+n {
		m.top = m.cursor - n + 1
	}
	m.top = max(0, min(m.top, len(m.shown)-n))
}

// followSelected has the detail pane follow the selected run, if it is
// shown (and nothing, if not).
func (m *topModel) followSelected() tea.Cmd {
	id := ""
	if m.detail || m.mode == topLogView {
		id = m.sel
	}
	if id != m.detailID {
		m.detailID, m.detailRec, m.detailErr = id, nil, nil
		m.logLines, m.logPart, m.logErr, m.logScroll = nil, map[string]string{}, nil, 0
	}
	m.logs.show(m.ctx, id)
	return nil
}

// logged takes output of the followed run.
func (m *topModel) logged(msg topLogMsg) {
	if msg.id != m.detailID || msg.gen != m.logs.generation() {
		return // from a run no longer followed
	}
	if msg.err != nil {
		m.logErr = msg.err
	}
	if msg.reset {
		m.logLines = m.logLines[:0]
		for _, l := range msg.lines {
			m.logLines = append(m.logLines, topLogLine{stream: l.Stream, text: runtext.Printable(strings.TrimSuffix(l.Data, "\n"))})
		}
		// A line not ended yet goes on in what follows.
		if n := len(msg.lines); n > 0 && !strings.HasSuffix(msg.lines[n-1].Data, "\n") {
			last := msg.lines[n-1]
			m.logLines = m.logLines[:len(m.logLines)-1]
			m.logPart[last.Stream] = last.Data
		}
	}
	for _, c := range msg.chunks {
		text := m.logPart[c.stream] + c.data
		lines := strings.Split(text, "\n")
		for _, l := range lines[:len(lines)-1] {
			m.logLines = append(m.logLines, topLogLine{stream: c.stream, text: runtext.Printable(l)})
		}
		m.logPart[c.stream] = lines[len(lines)-1]
	}
	if over := len(m.logLines) - topLogKeep; over > 0 {
		m.logLines = slices.Delete(m.logLines, 0, over)
	}
}

// logView returns the followed run's lines, with the lines not ended yet
// after them.
func (m *topModel) logView() []topLogLine {
	lines := m.logLines
	for _, s := range []string{tend.Stdout, tend.Stderr} {
		if p := m.logPart[s]; p != "" {
			lines = append(slices.Clip(lines), topLogLine{stream: s, text: runtext.Printable(p)})
		}
	}
	return lines
}

// key handles a key press.
func (m *topModel) key(k tea.KeyPressMsg) tea.Cmd {
	if k.String() == "ctrl+c" {
		return tea.Quit
	}
	switch m.mode {
	case topHelp:
		m.mode = topBrowse
		return nil
	case topFilter:
		return m.filterKey(k)
	case topSignal:
		return m.signalKey(k)
	case topConfirm:
		if k.String() == "y" || k.String() == "Y" {
			m.mode = topBrowse
			return m.request(m.pending)
		}
		m.mode = topBrowse
		m.say(false, "%s %s: not done", m.pending.verb, m.pending.id)
		return nil
	case topLogView:
		return m.logKey(k)
	}
	switch k.String() {
	case "q":
		return tea.Quit
	case "?":
		m.mode = topHelp
	case "up", "k":
		m.move(-1)
	case "down", "j":
		m.move(1)
	case "pgup":
		m.move(-max(1, m.tableRows()-1))
	case "pgdown", "space":
		m.move(max(1, m.tableRows()-1))
	case "home", "g":
		m.move(-len(m.shown))
	case "end", "G":
		m.move(len(m.shown))
	case "/":
		m.mode = topFilter
		m.input.Prompt = "/"
		m.input.SetValue(m.filter)
		m.input.CursorEnd()
		return m.input.Focus()
	case "esc":
		if m.filter != "" {
			m.filter = ""
			m.refresh()
		}
	case "s":
		i := slices.Index(sortOrder, m.sortBy)
		m.sortBy = sortOrder[(i+1)%len(sortOrder)]
		m.sortDesc = m.sortBy == sortCreated || m.sortBy == "cpu" || m.sortBy == "mem" || m.sortBy == "time"
		m.refresh()
		m.say(false, "sorted by %s", m.sortName())
	case "S":
		m.sortDesc = !m.sortDesc
		m.refresh()
		m.say(false, "sorted by %s", m.sortName())
	case "f":
		m.hideFinished = !m.hideFinished
		m.refresh()
		if m.hideFinished {
			m.say(false, "finished runs hidden (f shows them)")
		} else {
			m.say(false, "finished runs shown")
		}
	case "enter", "tab":
		m.detail = !m.detail
		m.scrollToCursor()
	case "l":
		if m.sel != "" {
			m.mode, m.logScroll = topLogView, 0
		}
	case "c":
		return m.ask(spool.VerbCancel)
	case "r":
		return m.ask(spool.VerbRestart)
	case "p":
		return m.ask(spool.VerbPause)
	case "x":
		return m.ask(spool.VerbSignal)
	case "d":
		return m.ask(spool.VerbDelete)
	}
	return m.followSelected()
}

// sortName says how the table is sorted.
func (m *topModel) sortName() string {
	dir := "ascending"
	if m.sortDesc {
		dir = "descending"
	}
	if m.sortBy == sortCreated {
		if m.sortDesc {
			return "creation, newest first"
		}
		return "creation, oldest first"
	}
	return m.sortBy + ", " + dir
}

func (m *topModel) filterKey(k tea.KeyPressMsg) tea.Cmd {
	switch k.String() {
	case "enter":
		m.mode = topBrowse
		m.input.Blur()
		return m.followSelected()
	case "esc":
		m.mode = topBrowse
		m.input.Blur()
		m.filter = ""
		m.refresh()
		return m.followSelected()
	}
	var cmd tea.Cmd
	m.input, cmd = m.input.Update(k)
	if v := m.input.Value(); v != m.filter {
		m.filter = v
		m.refresh() // as it is typed
	}
	return cmd
}

func (m *topModel) signalKey(k tea.KeyPressMsg) tea.Cmd {
	switch k.String() {
	case "enter":
		m.mode = topBrowse
		m.input.Blur()
		sig := strings.TrimSpace(m.input.Value())
		if _, err := spool.SignalNamed(sig); err != nil {
			m.say(true, "signal %s: %v", m.pending.id, err)
			return nil
		}
		m.pending.arg = sig
		return m.request(m.pending)
	case "esc":
		m.mode = topBrowse
		m.input.Blur()
		m.say(false, "signal %s: not sent", m.pending.id)
		return nil
	}
	var cmd tea.Cmd
	m.input, cmd = m.input.Update(k)
	return cmd
}

func (m *topModel) logKey(k tea.KeyPressMsg) tea.Cmd {
	page := max(1, m.height-3)
	switch k.String() {
	case "q":
		return tea.Quit
	case "esc", "l", "enter":
		m.mode = topBrowse
	case "up", "k":
		m.logScroll++
	case "down", "j":
		m.logScroll--
	case "pgup":
		m.logScroll += page
	case "pgdown", "space":
		m.logScroll -= page
	case "home", "g":
		m.logScroll = len(m.logView())
	case "end", "G":
		m.logScroll = 0
	case "?":
		m.mode = topHelp
	}
	m.logScroll = max(0, min(m.logScroll, len(m.logView())-1))
	return nil
}

// ask asks to confirm verb on the selected run: y/n, or for a signal its
// name. What cannot apply says why at once.
func (m *topModel) ask(verb string) tea.Cmd {
	r := m.selected()
	if r == nil {
		m.say(true, "no run is selected")
		return nil
	}
	m.pending = topAction{verb: verb, id: r.ID}
	final := tracker.Final(r.State)
	switch {
	case verb == spool.VerbDelete && !final:
		m.say(true, "%s is %s: only a finished run can be deleted (c cancels it)", r.ID, r.State)
		return nil
	case verb != spool.VerbDelete && verb != spool.VerbRestart && final:
		m.say(true, "%s has %s: there is nothing to %s", r.ID, r.State, verb)
		return nil
	case verb == spool.VerbPause && r.State == tracker.Paused:
		m.pending.verb = spool.VerbResume
	case verb == spool.VerbSignal:
		m.mode = topSignal
		m.input.Prompt = fmt.Sprintf("signal to send to %s (HUP, USR1, TERM, ...; esc: none): ", r.ID)
		m.input.SetValue("")
		return m.input.Focus()
	}
	m.mode = topConfirm
	return nil
}

// confirmText is the question the status line asks for m.pending.
func (m *topModel) confirmText() string {
	return fmt.Sprintf("%s run %s? y/n", m.pending.verb, m.pending.id)
}

// request writes the request for act through the client, as any client
// does, and reports its outcome when the watcher has answered.
func (m *topModel) request(act topAction) tea.Cmd {
	m.say(false, "%s %s: waiting for the watcher's answer...", act.verb, act.id)
	ctx, client := m.ctx, m.client
	return func() tea.Msg {
		var o tend.Outcome
		var err error
		opts := tend.Control{}
		switch act.verb {
		case spool.VerbCancel:
			o, err = client.Cancel(ctx, act.id, opts)
		case spool.VerbRestart:
			o, err = client.Restart(ctx, act.id, opts)
		case spool.VerbPause:
			o, err = client.Pause(ctx, act.id, opts)
		case spool.VerbResume:
			o, err = client.Resume(ctx, act.id, opts)
		case spool.VerbSignal:
			o, err = client.Signal(ctx, act.id, act.arg, opts)
		case spool.VerbDelete:
			var os []tend.Outcome
			os, err = client.Delete(ctx, opts, act.id)
			if len(os) == 1 {
				o = os[0]
				if err == nil {
					err = o.Err()
				}
			}
		}
		return topOutcomeMsg{act: act, o: o, err: err}
	}
}

// outcome shows how a request went.
func (m *topModel) outcome(msg topOutcomeMsg) {
	what := msg.act.verb + " " + msg.act.id
	if msg.act.arg != "" {
		what = fmt.Sprintf("signal %s %s", msg.act.id, msg.act.arg)
	}
	var oe *tend.OutcomeError
	switch {
	case errors.As(msg.err, &oe):
		m.say(true, "%s: %s", what, oe.Outcome)
	case msg.err != nil:
		m.say(true, "%s: %v", what, msg.err)
	default:
		m.say(false, "%s: %s", what, msg.o)
	}
}

// say puts a message on the status line.
func (m *topModel) say(bad bool, format string, args ...any) {
	m.status, m.statusBad = fmt.Sprintf(format, args...), bad
}
