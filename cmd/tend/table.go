package main

import (
	"io"
	"os"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/tendhq/tend/cmd/internal/runtext"
	"github.com/tendhq/tend/tracker"
	"golang.org/x/sys/unix"
)

// term is what tend knows of where it prints: for people at a terminal it
// colors states, cuts lines to the width and shows progress; for programs
// and pipes it prints plain, whole lines.
type term struct {
	color    bool // color the output (see colorWanted)
	width    int  // the line width to fit, 0 for none
	progress bool // stderr is a terminal: show a spinner while waiting
}

// termFor decides term for stdout and stderr, given --color (auto, always
// or never) and the environment: NO_COLOR (https://no-color.org) turns auto
// off, as TERM=dumb does; COLUMNS, if set, is the width, also for a pipe.
func termFor(stdout, stderr *os.File, color string) term {
	out := isTerminal(stdout)
	t := term{progress: isTerminal(stderr) && os.Getenv("TERM") != "dumb"}
	switch color {
	case "always":
		t.color = true
	case "auto":
		t.color = out && os.Getenv("NO_COLOR") == "" && os.Getenv("TERM") != "dumb"
	}
	if out {
		if ws, err := unix.IoctlGetWinsize(int(stdout.Fd()), unix.TIOCGWINSZ); err == nil && ws.Col > 0 {
			t.width = int(ws.Col)
		}
	}
	if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n > 0 {
		t.width = n
	}
	return t
}

func isTerminal(f *os.File) bool {
	if f == nil {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// paint wraps s in the color of state, if t colors.
func (t term) paint(state, s string) string {
	c, ok := runtext.StateColors[tracker.StateName(state)]
	if !t.color || !ok {
		return s
	}
	return "\x1b[" + c + "m" + s + "\x1b[0m"
}

// cell is a table cell: its text, and the state whose color it takes.
type cell struct {
	text  string
	state string
}

// printTable prints rows under header (none if nil) in columns two
// spaces apart. The last column is cut to fit t.width; colors do not count
// toward widths. It is every table tend prints: ls, show and history.
// Every cell is printed as runtext.Printable makes it: commands, labels,
// notes, reasons and progress are what users and their runs wrote, and an
// escape sequence in them must not reach the terminal of whoever looks
// (root, on a shared root), in a pipe or a log either.
func (t term) printTable(w io.Writer, header []string, rows [][]cell) error {
	columns := len(header)
	for _, r := range rows {
		columns = max(columns, len(r))
		for i := range r {
			r[i].text = runtext.Printable(r[i].text)
		}
	}
	widths := make([]int, columns)
	for i, h := range header {
		widths[i] = utf8.RuneCountInString(h)
	}
	for _, r := range rows {
		for i, c := range r {
			widths[i] = max(widths[i], utf8.RuneCountInString(c.text))
		}
	}
	var b strings.Builder
	line := func(cells []cell) {
		used := 0
		for i, c := range cells {
			text := c.text
			if i == len(cells)-1 {
				if t.width > 0 {
					text = runtext.Cut(text, t.width-used)
				}
				b.WriteString(t.paint(c.state, text))
				break
			}
			pad := widths[i] - utf8.RuneCountInString(text) + 2
			b.WriteString(t.paint(c.state, text))
			b.WriteString(strings.Repeat(" ", pad))
			used += widths[i] + 2
		}
		b.WriteByte('\n')
	}
	if header != nil {
		head := make([]cell, len(header))
		for i, h := range header {
			head[i] = cell{text: h}
		}
		line(head)
	}
	for _, r := range rows {
		line(r)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
