package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/colorprofile"
	"github.com/tendhq/tend"
)

type topCmd struct {
	Session string `help:"Act as this session: show its runs only, and act on them only." env:"TEND_SESSION"`
}

func (c *topCmd) Help() string {
	return `A live view of the root: the watcher and its limits, the runs (state,
progress, CPU and memory, time, command), and the selected run's record,
history and output as it is written. It follows the history and runs/ as
they change, and samples /proc once a second for the live runs on screen.
Keys act on the selected run through the spool, as any client does, each
once confirmed: c cancel, r restart, p pause or resume, x signal, d delete
(a finished run). / filters (text, state:S, session:S, label:K=V), s and
S sort, f hides finished runs, enter shows the detail pane, l the output
full screen, ? every key, q quits. Examples:
  tend top
  tend top --session agent-7`
}

func (c *topCmd) Run(e *env) error {
	out, _ := e.stdout.(*os.File)
	if !isTerminal(out) {
		return exitf(exitUsage, "top: needs a terminal; tend ls lists the runs and tend events -f follows their changes")
	}
	// The view's requests wait in the spool when no watcher runs, and say
	// so: starting one is tend up's job, not a look at the root's.
	client, err := tend.Open(e.root, tend.Options{Session: c.Session})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := newTopModel(ctx, client)
	p := tea.NewProgram(m, tea.WithContext(ctx), tea.WithOutput(out), tea.WithFPS(10), tea.WithColorProfile(topColorProfile(e, out)))
	m.logs.send = p.Send
	m.feed = newTopFeed(client, p.Send)
	go m.feed.run(ctx)
	_, err = p.Run()
	cancel()
	m.logs.stop()
	if errors.Is(err, tea.ErrInterrupted) {
		return nil // Ctrl-C with no terminal to read it from: a quit
	}
	if err != nil {
		return fmt.Errorf("top: %w", err)
	}
	return nil
}

// topColorProfile is how top colors: as tend ls does (--color, TEND_COLOR,
// NO_COLOR, TERM=dumb), with what the terminal supports detected as the
// library does. Without color, attributes (bold, reverse) remain, so that
// the selected row still shows.
func topColorProfile(e *env, out *os.File) colorprofile.Profile {
	detected := colorprofile.Detect(out, os.Environ())
	switch {
	case !e.term.color:
		return colorprofile.ASCII
	case detected < colorprofile.ANSI:
		return colorprofile.ANSI // --color always on a terminal that says little
	}
	return detected
}
