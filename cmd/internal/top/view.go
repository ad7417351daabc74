package top

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"
	"github.com/tendhq/tend"
	"github.com/tendhq/tend/cmd/internal/runtext"
	"github.com/tendhq/tend/tracker"
)

// The view's styles. Colors are dropped by the program's color profile
// where color is off (NO_COLOR, --color never); bold and reverse stay.
var (
	topBold   = lipgloss.NewStyle().Bold(true)
	topFaint  = lipgloss.NewStyle().Faint(true)
	topBad    = lipgloss.NewStyle().Foreground(lipgloss.Red).Bold(true)
	topWarn   = lipgloss.NewStyle().Foreground(lipgloss.Yellow)
	topGood   = lipgloss.NewStyle().Foreground(lipgloss.Green)
	topSel    = lipgloss.NewStyle().Reverse(true)
	topStderr = lipgloss.NewStyle().Foreground(lipgloss.Red)
	topStates = stateStyles()
)

// stateStyles returns the colors of tend ls (runtext.StateColors), as
// styles.
func stateStyles() map[tracker.StateName]lipgloss.Style {
	colors := map[string]lipgloss.Style{"32": topGood, "36": lipgloss.NewStyle().Foreground(lipgloss.Cyan), "33": topWarn, "31": lipgloss.NewStyle().Foreground(lipgloss.Red)}
	styles := make(map[tracker.StateName]lipgloss.Style, len(runtext.StateColors))
	for state, c := range runtext.StateColors {
		styles[state] = colors[c]
	}
	return styles
}

// View draws the screen: always exactly its height in lines, none wider
// than it, so a resize leaves nothing of the last frame behind.
func (m *topModel) View() tea.View {
	v := tea.NewView(m.render())
	v.AltScreen = true
	v.WindowTitle = "tend top " + m.client.Root()
	return v
}

func (m *topModel) render() string {
	if m.width <= 0 || m.height <= 0 {
		return ""
	}
	var lines []string
	switch m.mode {
	case topHelp:
		lines = m.helpLines()
	case topLogView:
		lines = m.logScreen()
	default:
		lines = m.mainLines()
	}
	for len(lines) < m.height {
		lines = append(lines, "")
	}
	lines = lines[:m.height]
	for i, l := range lines {
		if ansi.StringWidth(l) > m.width {
			lines[i] = ansi.Truncate(l, m.width, "…")
		}
	}
	return strings.Join(lines, "\n")
}

// mainLines is the header, the table, the detail pane and the status line.
func (m *topModel) mainLines() []string {
	lines := m.headerLines()
	rows := m.tableRows()
	cols := m.fitColumns()
	lines = append(lines, m.columnHeader(cols))
	shown := m.visible()
	for i, r := range shown {
		lines = append(lines, m.rowLine(cols, r, m.top+i == m.cursor))
	}
	for range rows - len(shown) {
		lines = append(lines, "")
	}
	if len(m.shown) == 0 && rows > 0 {
		lines[len(lines)-rows] = topFaint.Render(m.emptyText())
	}
	if h := m.detailHeight(); h > 0 {
		lines = append(lines, m.detailLines(h)...)
	}
	return append(lines, m.statusLine())
}

// emptyText says why the table is empty.
func (m *topModel) emptyText() string {
	switch {
	case m.probe.noRoot:
		return "no root, so no runs"
	case !m.loaded:
		return "reading the runs..."
	case len(m.runs) == 0:
		return "no runs yet: tend start -- COMMAND starts one"
	}
	return fmt.Sprintf("no run matches (of %d): esc clears the filter, f shows finished runs", len(m.runs))
}

// headerHeight is how many lines the header takes: two, and one more
// for problems.
func (m *topModel) headerHeight() int {
	if len(m.problems()) > 0 {
		return 3
	}
	return 2
}

// detailHeight is how many lines the detail pane takes, if it is shown.
func (m *topModel) detailHeight() int {
	avail := m.height - m.headerHeight() - 2 // column header, status line
	if !m.detail || avail < 12 {
		return 0
	}
	return avail / 2
}

// tableRows is how many runs the table shows at once.
func (m *topModel) tableRows() int {
	return max(0, m.height-m.headerHeight()-2-m.detailHeight())
}

// headerLines says what the watcher and the limits are, and any problem.
func (m *topModel) headerLines() []string {
	first := topBold.Render("tend top")
	if s := m.client.Session(); s != "" {
		first += " · session " + s
	}
	var w string
	p := m.probe
	switch {
	case !m.probed:
		w = "looking..."
	case p.noRoot:
		w = topBad.Render("no tend root here yet: tend up makes one, and it shows here once made")
	case !p.running:
		w = topBad.Render("no watcher runs") + ": showing what the files say (tend up starts one)"
	case !p.infoOK:
		w = topWarn.Render("a watcher is starting")
	default:
		w = fmt.Sprintf("watcher %s pid %d (keeper %d) · %s · durability %s · up %s", topGood.Render("running"), p.info.PID, p.info.KeeperPID,
			p.info.Version, p.info.Durability, roundUptime(m.now.Sub(p.info.StartedAt)))
	}
	lines := []string{first + " · " + w + " · " + m.client.Root(), m.limitsLine()}
	if probs := m.problems(); len(probs) > 0 {
		lines = append(lines, topBad.Render(strings.Join(probs, " · ")))
	}
	return lines
}

// roundUptime rounds an uptime to what people read: seconds, then
// minutes.
func roundUptime(d time.Duration) string {
	if d < time.Minute {
		return d.Round(time.Second).String()
	}
	return d.Round(time.Minute).String()
}

// live counts the runs with a process: those a limit counts.
func (m *topModel) live() int {
	return m.counts[tracker.Running] + m.counts[tracker.Starting] + m.counts[tracker.Stopping] + m.counts[tracker.Paused]
}

// limitsLine says how full the limits are, the queue's length, how many
// runs are in each state, and the history's health.
func (m *topModel) limitsLine() string {
	var parts []string
	live := m.live()
	max, per := m.probe.info.MaxRunning, m.probe.info.MaxPerSession
	switch {
	case max > 0:
		frac := float64(live) / float64(max)
		bar := runtext.ProgressBar(frac, 8)
		if live >= max {
			bar = topWarn.Render(bar)
		}
		parts = append(parts, fmt.Sprintf("%d live of max %d %s", live, max, bar))
	default:
		parts = append(parts, fmt.Sprintf("%d live (no limit)", live))
	}
	if per > 0 {
		parts = append(parts, fmt.Sprintf("max %d a session", per))
	}
	parts = append(parts, fmt.Sprintf("%d queued", m.counts[tracker.Queued]))
	for _, s := range []tracker.StateName{tracker.Completed, tracker.Failed, tracker.Canceled, tracker.TimedOut, tracker.Backoff} {
		if n := m.counts[s]; n > 0 {
			parts = append(parts, topStates[s].Render(fmt.Sprintf("%d %s", n, s)))
		}
	}
	switch {
	case m.history != nil || m.probe.history != "":
		parts = append(parts, topBad.Render("history: see below"))
	case m.probed && !m.probe.noRoot:
		parts = append(parts, "history "+topGood.Render("ok"))
	}
	return strings.Join(parts, " · ")
}

// problems are what the header shows in red: a torn history, unreadable
// records, a bad config.json, a full disk, a feed that stopped.
func (m *topModel) problems() []string {
	var out []string
	if m.probe.history != "" {
		out = append(out, "history: "+m.probe.history+" (tend fsck --repair mends it)")
	} else if m.history != nil {
		out = append(out, "history: "+m.history.Error())
	}
	if n := len(m.bad); n > 0 {
		out = append(out, fmt.Sprintf("%d record%s cannot be read (tend fsck): %s", n, runtext.Plural(n), m.bad[0]))
	}
	if m.probe.config != "" {
		out = append(out, m.probe.config)
	}
	out = append(out, m.probe.problems...)
	if m.feedErr != nil {
		out = append(out, "not following changes: "+m.feedErr.Error())
	}
	for i := range out {
		out[i] = runtext.Printable(out[i]) // an error may quote a file
	}
	return out
}

// A topCol is a column of the table.
type topCol struct {
	name  string
	sort  string // the sort order it stands for
	width int    // 0: the command's, what is left
	prio  int    // the narrower the terminal, the more of the lowest go
	right bool
	text  func(m *topModel, r *topRow) string
}

var (
	colID       = topCol{name: "ID", sort: "id", prio: 100, text: func(m *topModel, r *topRow) string { return r.ID }}
	colState    = topCol{name: "STATE", sort: "state", width: 10, prio: 95, text: func(m *topModel, r *topRow) string { return stateText(r) }}
	colSession  = topCol{name: "SESSION", sort: "session", prio: 40, text: func(m *topModel, r *topRow) string { return runtext.OrDash(r.Session) }}
	colAttempt  = topCol{name: "ATT/R", sort: "attempt", width: 5, prio: 30, right: true, text: func(m *topModel, r *topRow) string { return attemptText(r.Record) }}
	colProgress = topCol{name: "PROGRESS", sort: "progress", width: 16, prio: 90, text: func(m *topModel, r *topRow) string { return runtext.Progress(r.Progress) }}
	colCPU      = topCol{name: "CPU%", sort: "cpu", width: 5, prio: 70, right: true, text: func(m *topModel, r *topRow) string { return cpuText(r) }}
	colMem      = topCol{name: "MEM", sort: "mem", width: 6, prio: 60, right: true, text: func(m *topModel, r *topRow) string { return memText(r) }}
	colSpark    = topCol{name: "CPU 1m", sort: "cpu", width: 10, prio: 50, text: func(m *topModel, r *topRow) string { return cpuSpark(r, 10) }}
	colTime     = topCol{name: "TIME", sort: "time", width: 8, prio: 65, right: true, text: func(m *topModel, r *topRow) string { return runtext.Time(r.Record, m.now) }}
	colCommand  = topCol{name: "COMMAND", sort: "command", prio: 85, text: func(m *topModel, r *topRow) string { return runtext.Printable(runtext.Command(r.Command, 0)) }}
)

// minCommand is the least width the command keeps before columns go.
const minCommand = 12

// fitColumns returns the columns that fit the terminal's width, in their
// order, the command's width being what the others leave.
func (m *topModel) fitColumns() []topCol {
	idCol := colID
	idCol.width = m.idWidth
	cols := []topCol{idCol, colState}
	if m.sessionWidth > 0 {
		s := colSession
		s.width = m.sessionWidth
		cols = append(cols, s)
	}
	cols = append(cols, colAttempt, colProgress, colCPU, colSpark, colMem, colTime, colCommand)
	used := func() int {
		n := 0
		for _, c := range cols {
			n += c.width + 1
		}
		return n
	}
	for used()+minCommand > m.width && len(cols) > 2 {
		low := -1
		for i, c := range cols {
			if c.width > 0 && c.prio < 100 && (low < 0 || c.prio < cols[low].prio) {
				low = i
			}
		}
		if low < 0 {
			break
		}
		cols = slices.Delete(cols, low, low+1)
	}
	for i := range cols {
		if cols[i].width == 0 {
			cols[i].width = max(minCommand, m.width-used())
		}
	}
	return cols
}

// columnHeader names the columns, the one sorted by marked.
func (m *topModel) columnHeader(cols []topCol) string {
	cells := make([]string, len(cols))
	for i, c := range cols {
		name := c.name
		if c.sort == m.sortBy && c.name != colSpark.name {
			if m.sortDesc {
				name += "▼"
			} else {
				name += "▲"
			}
		}
		cells[i] = fit(name, c.width, c.right)
	}
	return topBold.Render(strings.Join(cells, " "))
}

// rowLine is a run's line in the table: its state in color, or, selected,
// all of it in reverse.
func (m *topModel) rowLine(cols []topCol, r *topRow, selected bool) string {
	cells := make([]string, len(cols))
	for i, c := range cols {
		cells[i] = fit(c.text(m, r), c.width, c.right)
		if !selected && c.name == colState.name {
			cells[i] = topStates[r.State].Render(cells[i])
		}
	}
	line := strings.Join(cells, " ")
	if selected {
		return topSel.Render(line)
	}
	return line
}

// fit pads or cuts s to width cells.
func fit(s string, width int, right bool) string {
	if w := ansi.StringWidth(s); w > width {
		return ansi.Truncate(s, width, "…")
	} else if right {
		return strings.Repeat(" ", width-w) + s
	} else {
		return s + strings.Repeat(" ", width-w)
	}
}

func stateText(r *topRow) string {
	return runtext.State(r.Record, r.Position)
}

// attemptText is a service's attempt and restarts, "-" for a run that
// has had one attempt.
func attemptText(st *tracker.State) string {
	if st.Attempt <= 1 && st.Restarts == 0 {
		return "-"
	}
	return fmt.Sprintf("%d/%d", st.Attempt, st.Restarts)
}

func cpuText(r *topRow) string {
	if c, ok := r.cpuPct(); ok {
		return fmt.Sprintf("%.0f", c)
	}
	return "-"
}

func memText(r *topRow) string {
	if n, ok := r.rss(); ok && tend.Live(r.Record) {
		return runtext.Bytes(n)
	}
	return "-"
}

// cpuSpark is a live run's CPU use over the last minute, width cells
// wide; nothing for a run that is not live.
func cpuSpark(r *topRow, width int) string {
	if !tend.Live(r.Record) {
		return ""
	}
	return sparkline(r.cpu, width, 0, 1)
}

// memSpark is a live run's memory over the last minute.
func memSpark(r *topRow, width int) string {
	if !tend.Live(r.Record) || len(r.mem) == 0 {
		return ""
	}
	return sparkline(r.mem, width, slices.Min(r.mem), 1<<20)
}

// sparkline draws samples in at most width cells, each the highest of its
// share of the samples, from floor (the lowest bar) to the highest sample,
// or floor+span if that is higher: a flat line stays low, rather than a
// wall of full blocks.
func sparkline[T int64 | float64](samples []T, width int, floor, span T) string {
	if len(samples) == 0 {
		return ""
	}
	bars := []rune("▁▂▃▄▅▆▇█")
	top := floor + span
	for _, s := range samples {
		top = max(top, s)
	}
	cells := min(width, len(samples))
	var b strings.Builder
	for i := range cells {
		from, to := i*len(samples)/cells, (i+1)*len(samples)/cells
		hi := floor
		for _, s := range samples[from:to] {
			hi = max(hi, s)
		}
		level := float64(hi-floor) / float64(top-floor) * float64(len(bars)-1)
		b.WriteRune(bars[min(len(bars)-1, max(0, int(level+0.5)))])
	}
	return b.String()
}

// detailLines is the pane on the selected run: its record in short, its
// usage, its last health checks and events, and its output as it comes.
func (m *topModel) detailLines(h int) []string {
	r := m.selected()
	if r == nil {
		return append([]string{rule(m.width, "no run selected")}, make([]string, h-1)...)
	}
	rec := r.Record
	if m.detailRec != nil && m.detailRec.ID == r.ID && m.detailRec.Rev >= rec.Rev {
		rec = m.detailRec
	}
	title := fmt.Sprintf("%s · %s", r.ID, topStates[rec.State].Render(string(rec.State)))
	if rec.Reason != "" {
		title += " · " + runtext.Printable(runtext.OneLine(rec.Reason))
	}
	lines := []string{rule(m.width, title)}
	info := m.detailInfo(r, rec)
	out := m.logView()
	// The record first, but the output keeps at least a third.
	keep := min(len(info), max(2, h-1-max(3, (h-1)/3)))
	lines = append(lines, info[:keep]...)
	room := h - len(lines)
	if room > 0 {
		head := "output (l: full screen)"
		switch {
		case m.detailErr != nil:
			head = "output: " + m.detailErr.Error()
		case m.logErr != nil:
			head = "output: " + m.logErr.Error()
		case len(out) == 0:
			head = "no output yet"
		}
		lines = append(lines, topFaint.Render(head))
		room--
	}
	for _, l := range out[max(0, len(out)-room):] {
		lines = append(lines, logLineText(l, ""))
	}
	for len(lines) < h {
		lines = append(lines, "")
	}
	return lines
}

// logLineText is a line of output, a stderr line marked in the gutter.
func logLineText(l topLogLine, prefix string) string {
	if l.stream == tend.Stderr {
		return topStderr.Render("E") + " " + prefix + l.text
	}
	return "  " + prefix + l.text
}

// detailInfo is the record of the run in short, a fact a line.
func (m *topModel) detailInfo(r *topRow, rec *tend.Record) []string {
	var out []string
	add := func(k, v string) {
		if v != "" {
			out = append(out, topFaint.Render(k+":")+" "+v)
		}
	}
	add("command", runtext.Printable(runtext.Command(rec.Command, 0)))
	var facts []string
	if rec.PID != 0 && tend.Live(rec) {
		facts = append(facts, fmt.Sprintf("pid %d", rec.PID))
	}
	if !tracker.Final(rec.State) && rec.StartedAt != nil || tracker.Final(rec.State) {
		facts = append(facts, "time "+runtext.Time(rec, m.now))
	}
	if tracker.Final(rec.State) {
		facts = append(facts, "exit "+runtext.Exit(rec))
	}
	if rec.Attempt > 1 || rec.Restarts > 0 {
		facts = append(facts, fmt.Sprintf("attempt %d, %d restart%s", rec.Attempt, rec.Restarts, runtext.Plural(rec.Restarts)))
	}
	if r.Position > 0 {
		facts = append(facts, fmt.Sprintf("#%d in the queue", r.Position))
	}
	if rec.Session != "" {
		facts = append(facts, "session "+rec.Session)
	}
	add("run", strings.Join(facts, " · "))
	var use []string
	if rec.Progress != "" {
		use = append(use, "progress "+runtext.Progress(rec.Progress))
	}
	if c, ok := r.cpuPct(); ok {
		use = append(use, fmt.Sprintf("cpu %.0f%% %s", c, cpuSpark(r, 20)))
	}
	if n, ok := r.rss(); ok && tend.Live(rec) {
		use = append(use, fmt.Sprintf("mem %s %s", runtext.Bytes(n), memSpark(r, 20)))
	}
	add("now", strings.Join(use, " · "))
	if h := rec.HealthStatus; h != nil {
		v := h.Status
		for _, c := range h.Checks[max(0, len(h.Checks)-3):] {
			ok := topGood.Render("ok")
			if !c.OK {
				ok = topBad.Render("failed")
			}
			v += fmt.Sprintf(" · %s %s %s", c.Time.Format("15:04:05"), ok, runtext.Printable(runtext.OneLine(c.Detail)))
		}
		add("health", v)
	}
	add("history", historyText(m.events[rec.ID], 5))
	if len(rec.Labels) > 0 {
		var ls []string
		for _, k := range slices.Sorted(maps.Keys(rec.Labels)) {
			ls = append(ls, runtext.Printable(k+"="+rec.Labels[k]))
		}
		add("labels", strings.Join(ls, " "))
	}
	for _, n := range rec.Notes[max(0, len(rec.Notes)-2):] {
		add("note", n.Time.Format("15:04:05")+" "+runtext.Printable(runtext.OneLine(n.Text)))
	}
	add("cwd", runtext.Printable(rec.Cwd))
	return out
}

// rule is a line across the screen with a title in it.
func rule(width int, title string) string {
	head := "── " + title + " "
	return head + strings.Repeat("─", max(0, width-ansi.StringWidth(head)))
}

// statusLine is the last line: a question, an input, or what happened
// last and where help is.
func (m *topModel) statusLine() string {
	switch m.mode {
	case topConfirm:
		return topBold.Render(m.confirmText())
	case topFilter, topSignal:
		return m.input.View()
	}
	right := fmt.Sprintf("%d/%d runs", len(m.shown), len(m.runs))
	if m.filter != "" {
		right += " · filter " + m.filter
	}
	if m.hideFinished {
		right += " · finished hidden"
	}
	right += " · ? help · q quit"
	left := m.status
	if m.statusBad {
		left = topBad.Render(left)
	}
	pad := m.width - ansi.StringWidth(left) - ansi.StringWidth(right)
	if pad < 1 {
		return ansi.Truncate(left, max(0, m.width-ansi.StringWidth(right)-1), "…") + " " + right
	}
	return left + strings.Repeat(" ", pad) + right
}

// logScreen is the followed run's output, full screen: the lines that
// fit, scrolled back by logScroll.
func (m *topModel) logScreen() []string {
	out := m.logView()
	state := ""
	if r := m.selected(); r != nil {
		state = " · " + string(r.State)
	}
	where := "following"
	if m.logScroll > 0 {
		where = fmt.Sprintf("%d lines up (End follows)", m.logScroll)
	}
	lines := []string{rule(m.width, fmt.Sprintf("output of %s%s · stdout and stderr (E), in the order written · %s · esc back", m.detailID, state, where))}
	room := m.height - 2
	end := max(0, len(out)-m.logScroll)
	for _, l := range out[max(0, end-room):end] {
		lines = append(lines, logLineText(l, ""))
	}
	for len(lines) < m.height-1 {
		lines = append(lines, "")
	}
	return append(lines, m.statusLine())
}

// topKeys are the keys, as ? shows them.
var topKeys = [][2]string{
	{"↑ ↓  j k", "select a run"},
	{"PgUp PgDn", "a page up, down"},
	{"Home End", "the first, the last run"},
	{"enter", "show or hide the detail pane"},
	{"l", "the selected run's output, full screen (esc: back)"},
	{"/", "filter: words, state:S, session:S, label:K=V (esc: clear)"},
	{"s  S", "sort by the next column; reverse the order"},
	{"f", "hide or show finished runs"},
	{"c", "cancel the selected run"},
	{"r", "restart the selected run"},
	{"p", "pause the selected run, or resume it"},
	{"x", "send a signal to the selected run"},
	{"d", "delete the selected run (a finished one)"},
	{"?", "this help (any key: back)"},
	{"q", "quit"},
}

// helpLines lists every key.
func (m *topModel) helpLines() []string {
	lines := []string{topBold.Render("tend top: keys"), ""}
	for _, k := range topKeys {
		lines = append(lines, fmt.Sprintf("  %-10s %s", k[0], k[1]))
	}
	return append(lines, "",
		"c r p x d each ask first, then write a request into the spool, as any",
		"client does; the watcher's answer shows on the status line.")
}

// historyText is a run's last n transitions, oldest first.
func historyText(evs []tend.Event, n int) string {
	var hist []string
	for _, ev := range evs[max(0, len(evs)-n):] {
		s := ev.Time.Format("15:04:05") + " " + string(ev.State)
		if ev.ExitCode != nil {
			s += fmt.Sprintf(" exit %d", *ev.ExitCode)
		} else if ev.Signal != "" {
			s += " " + ev.Signal
		}
		hist = append(hist, s)
	}
	return strings.Join(hist, " → ")
}
