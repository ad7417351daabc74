package main

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/charmbracelet/x/ansi"
)

// A spinner shows, on a terminal, that tend is waiting and for what: one
// line on stderr, redrawn ten times a second and erased at the end. Output
// written through it (tend logs -f) goes above the line. It is off (nil)
// unless stderr is a terminal, so pipes and programs never see it.
type spinner struct {
	mu    sync.Mutex
	w     io.Writer     // stderr
	out   io.Writer     // stdout, written through write
	text  func() string // what the line says, asked at every redraw
	shown bool
	frame int
	stop  chan struct{}
	done  chan struct{}
}

var spinnerFrames = []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}

// startSpinner starts a spinner saying text, or returns nil if stderr is
// not a terminal. Every method works on a nil spinner.
func startSpinner(e *env, text string) *spinner {
	if !e.term.progress {
		return nil
	}
	s := &spinner{w: e.stderr, out: e.stdout, text: func() string { return text }, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-tick.C:
				s.mu.Lock()
				s.frame++
				s.draw()
				s.mu.Unlock()
			}
		}
	}()
	return s
}

// draw writes the line; s.mu is held.
func (s *spinner) draw() {
	fmt.Fprintf(s.w, "\r\x1b[K%s %s", spinnerFrames[s.frame%len(spinnerFrames)], s.text())
	s.shown = true
}

// erase removes the line; s.mu is held.
func (s *spinner) erase() {
	if s.shown {
		io.WriteString(s.w, "\r\x1b[K")
		s.shown = false
	}
}

// set changes what the line says: text is asked at every redraw.
func (s *spinner) set(text func() string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.text = text
	s.mu.Unlock()
}

// write writes p to stdout above the line.
func (s *spinner) write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.erase()
	n, err := s.out.Write(p)
	if s.frame > 0 {
		s.draw()
	}
	return n, err
}

// end stops the spinner and erases its line.
func (s *spinner) end() {
	if s == nil {
		return
	}
	close(s.stop)
	<-s.done
	s.mu.Lock()
	s.erase()
	s.mu.Unlock()
}

// stdoutVia returns where to write stdout: through s if it spins.
func stdoutVia(e *env, s *spinner) io.Writer {
	if s == nil {
		return e.stdout
	}
	return writerFunc(s.write)
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// progressWidth is how many cells a progress bar takes on a terminal.
const progressWidth = 10

// parseProgress reads a run's progress ($TEND_PROGRESS) as a fraction
// done, when it starts with a number from 0 to 100 (a percent sign may
// follow) or with N/M: frac is then in [0, 1], label is that start as
// people read it (40%, 3/10), and rest is what follows it. Any other text
// is no fraction (ok is false).
func parseProgress(p string) (frac float64, label, rest string, ok bool) {
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

// progressBar draws frac (0 to 1) as a bar width cells wide: full blocks,
// an eighth-block for the part of a cell, and light shade for the rest.
func progressBar(frac float64, width int) string {
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

// progressText is a run's progress for a terminal: a bar and its label
// when it reads as a fraction done, else the text as it is; what a run
// wrote is cleaned of control characters either way, so that it cannot
// move the cursor or change the terminal's settings.
func progressText(p string) string {
	p = printable(p)
	if frac, label, rest, ok := parseProgress(p); ok {
		return strings.TrimSpace(progressBar(frac, progressWidth) + " " + label + " " + rest)
	}
	return p
}

// printable returns s with every escape sequence removed and every other
// control character (a tab, a carriage return) as a space: text that a
// run or a request wrote, shown on a terminal.
func printable(s string) string {
	s = ansi.Strip(strings.ToValidUTF8(s, "?"))
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
}
