// Package runtext is how tend's programs (tend, tend-top) show runs as
// text on a terminal: sizes, times, commands, states' colors, progress
// bars, and what a run wrote, cleaned of control characters.
package runtext

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/tendhq/tend"
	"github.com/tendhq/tend/procfs"
	"github.com/tendhq/tend/tracker"
	"golang.org/x/sys/unix"
)

// State is a run's state as ls's and top's tables show it: a queued
// run's place in the queue (position, 0 if not known), "held" for one
// held by a bad version of its request, which does not start from that
// place until its request is good.
func State(st *tracker.State, position int) string {
	state := string(st.State)
	if tend.Held(st) {
		state = "held"
	}
	if st.State == tracker.Queued && position > 0 {
		state += fmt.Sprintf(" #%d", position)
	}
	return state
}

// Bytes is a size as ls and top show it: K, M or G.
func Bytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1fG", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1fM", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%dK", n>>10)
}

// Command is a run's command on one line, the script alone when it is
// /bin/sh -c SCRIPT, cut to width runes when width is above 0.
func Command(argv []string, width int) string {
	s := strings.Join(argv, " ")
	if len(argv) == 3 && argv[0] == "/bin/sh" && argv[1] == "-c" {
		s = argv[2]
	}
	s = strings.Join(strings.Fields(s), " ")
	if width > 0 {
		s = Cut(s, width)
	}
	return s
}

// Exit is how a run ended: its exit code, the signal that killed it,
// else "-".
func Exit(st *tracker.State) string {
	switch {
	case st.ExitCode != nil:
		return fmt.Sprint(*st.ExitCode)
	case st.Signal != "":
		return st.Signal
	}
	return "-"
}

// OneLine puts s on one line: a reason may quote a program's output.
func OneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// OrDash is s, or "-" when s is empty: a table's empty cell.
func OrDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Plural is "s" unless n is 1.
func Plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// Time is how long a run ran, or has been running.
func Time(st *tracker.State, now time.Time) string {
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

// StateColors are the ANSI colors of states: green for good, yellow for in
// between, red for bad, cyan for not yet.
var StateColors = map[tracker.StateName]string{
	tracker.Running: "32", tracker.Completed: "32",
	tracker.Queued: "36", tracker.Starting: "36",
	tracker.Stopping: "33", tracker.Backoff: "33", tracker.Paused: "33", tracker.Canceled: "33",
	tracker.Failed: "31", tracker.TimedOut: "31",
}

// Cut shortens s to n runes, marking the cut with an ellipsis.
func Cut(s string, n int) string {
	if n < 1 {
		n = 1
	}
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// DiskProblem says if root's file system is read-only or (nearly) out of
// space or inodes: the watcher then cannot record changes until it is
// writable, or space returns.
func DiskProblem(root string) string {
	var fs unix.Statfs_t
	if err := unix.Statfs(root, &fs); err != nil {
		return ""
	}
	free := int64(fs.Bavail) * fs.Bsize
	switch {
	case fs.Flags&unix.ST_RDONLY != 0:
		return fmt.Sprintf("%s: its file system is read-only: no request is taken and no record written until it is writable again", root)
	case free < 1<<20:
		return fmt.Sprintf("%s: its file system is full (%d bytes free): records are written again once there is space; while a change cannot be appended to the history, the watcher holds its records and answers, and requests wait in the spool", root, free)
	case fs.Files > 0 && fs.Ffree < 100:
		return fmt.Sprintf("%s: its file system is out of inodes (%d free)", root, fs.Ffree)
	}
	return ""
}

// ProgressWidth is how many cells a progress bar takes on a terminal.
const ProgressWidth = 10

// ParseProgress reads a run's progress ($TEND_PROGRESS) as a fraction
// done, when it starts with a number from 0 to 100 (a percent sign may
// follow) or with N/M: frac is then in [0, 1], label is that start as
// people read it (40%, 3/10), and rest is what follows it. Any other text
// is no fraction (ok is false).
func ParseProgress(p string) (frac float64, label, rest string, ok bool) {
	first, rest, _ := strings.Cut(strings.TrimSpace(p), " ")
	rest = strings.TrimSpace(rest)
	if r, ok := strings.CutPrefix(rest, "%"); ok && !strings.HasSuffix(first, "%") {
		rest = strings.TrimSpace(r) // "40 %"
	}
	if n, m, isRatio := strings.Cut(first, "/"); isRatio {
		a, err1 := strconv.ParseFloat(n, 64)
		b, err2 := strconv.ParseFloat(m, 64)
		if err1 != nil || err2 != nil || a < 0 || b <= 0 || a > b {
			return 0, "", "", false
		}
		return a / b, first, rest, true
	}
	v, err := strconv.ParseFloat(strings.TrimSuffix(first, "%"), 64)
	if err != nil || v < 0 || v > 100 || math.IsNaN(v) {
		return 0, "", "", false
	}
	return v / 100, strconv.FormatFloat(v, 'f', -1, 64) + "%", rest, true
}

// ProgressBar draws frac (0 to 1) as a bar width cells wide: full blocks,
// an eighth-block for the part of a cell, and light shade for the rest.
func ProgressBar(frac float64, width int) string {
	frac = min(1, max(0, frac))
	eighths := int(math.Round(frac * float64(width*8)))
	var b strings.Builder
	b.WriteString(strings.Repeat("█", eighths/8))
	cells := eighths / 8
	if part := eighths % 8; part > 0 {
		b.WriteRune([]rune("▏▎▍▌▋▊▉")[part-1])
		cells++
	}
	b.WriteString(strings.Repeat("░", width-cells))
	return b.String()
}

// Progress is a run's progress for a terminal: a bar and its label
// when it reads as a fraction done, else the text as it is; what a run
// wrote is cleaned of control characters either way, so that it cannot
// move the cursor or change the terminal's settings.
func Progress(p string) string {
	p = Printable(p)
	if frac, label, rest, ok := ParseProgress(p); ok {
		return strings.TrimSpace(ProgressBar(frac, ProgressWidth) + " " + label + " " + rest)
	}
	return p
}

// Printable returns s with every escape sequence removed and every other
// control character (a tab, a carriage return) as a space: text that a
// run or a request wrote, shown on a terminal. Invalid UTF-8 becomes "?".
func Printable(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, stripEscapes(strings.ToValidUTF8(s, "?")))
}

// stripEscapes removes the escape sequences of ECMA-48 from s, valid
// UTF-8: control sequences (ESC [ or CSI, parameters, a final byte),
// control strings (ESC ] P X ^ _ or their C1 forms, up to ST or BEL), and
// escapes of two or more bytes; an ESC that begins none is removed alone.
// A sequence cut short by the end of s is removed to the end. It is
// written here, not taken from a terminal library, so that tend does not
// pay such a library's start-up on every call for the one line wait
// shows; what it leaves of a malformed sequence is printable text, as
// Printable turns every control character left into a space.
func stripEscapes(s string) string {
	if !strings.ContainsFunc(s, func(r rune) bool { return r == 0x1b || r >= 0x80 && r <= 0x9f }) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == 0x1b && i+n < len(s) {
			// The 7-bit form: ESC and the byte that says what follows.
			switch c := s[i+1]; {
			case c == '[':
				i = skipCSI(s, i+2)
			case c == ']' || c == 'P' || c == 'X' || c == '^' || c == '_':
				i = skipString(s, i+2)
			case c >= 0x20 && c <= 0x2f: // intermediates, then a final byte
				j := i + 2
				for j < len(s) && s[j] >= 0x20 && s[j] <= 0x2f {
					j++
				}
				if j < len(s) && s[j] >= 0x30 && s[j] <= 0x7e {
					j++
				}
				i = j
			case c >= 0x30 && c <= 0x7e:
				i += 2
			default:
				i++
			}
			continue
		}
		switch r {
		case 0x1b:
			i += n
		case 0x9b: // CSI
			i = skipCSI(s, i+n)
		case 0x9d, 0x90, 0x98, 0x9e, 0x9f: // OSC, DCS, SOS, PM, APC
			i = skipString(s, i+n)
		default:
			b.WriteString(s[i : i+n])
			i += n
		}
	}
	return b.String()
}

// skipCSI returns the index after the control sequence whose parameters
// start at s[i]: parameter and intermediate bytes, then a final byte.
func skipCSI(s string, i int) int {
	for i < len(s) && s[i] >= 0x20 && s[i] <= 0x3f {
		i++
	}
	if i < len(s) && s[i] >= 0x40 && s[i] <= 0x7e {
		i++
	}
	return i
}

// skipString returns the index after the control string that starts at
// s[i]: up to BEL, ESC \ or the C1 ST, or the end of s.
func skipString(s string, i int) int {
	for i < len(s) {
		switch {
		case s[i] == 0x07:
			return i + 1
		case s[i] == 0x1b && i+1 < len(s) && s[i+1] == '\\':
			return i + 2
		case strings.HasPrefix(s[i:], "\u009c"):
			return i + len("\u009c")
		}
		i++
	}
	return i
}
