package main

import (
	"fmt"
	"io"
	"sync"
	"time"
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
