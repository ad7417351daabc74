// Package top is tend's live view of a root, the tend-top program that
// `tend top` runs: a table of the runs, a detail pane with the selected
// run's record, history and output, and keys that act on it through the
// spool. It is a program of its own so that its terminal library costs
// nothing to the tend calls that do not show it.
package top

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/colorprofile"
	"github.com/tendhq/tend"
	"golang.org/x/sys/unix"
)

// Main is the tend-top program: it shows the root its flags or
// environment name (as tend does) on stdout, a terminal, until q, Ctrl-C
// or SIGTERM, and returns its exit code.
//
//	tend-top [--root DIR] [--session S] [--color auto|always|never]
//
// The session defaults to TEND_SESSION's; --color to auto, which honors
// NO_COLOR and TERM=dumb. tend top passes what it resolved of each.
func Main(args []string, stdout, stderr *os.File) int {
	fs := flag.NewFlagSet("tend-top", flag.ContinueOnError)
	fs.SetOutput(stderr)
	root := fs.String("root", os.Getenv("TEND_ROOT"), "the tend root (default: $TEND_ROOT, else the nearest .tend at or above the current directory)")
	session := fs.String("session", os.Getenv("TEND_SESSION"), "act as this session: show its runs only, and act on them only")
	color := fs.String("color", "auto", "color states: auto, always or never")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "tend top: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *color != "auto" && *color != "always" && *color != "never" {
		fmt.Fprintf(stderr, "tend top: --color must be auto, always or never, not %q\n", *color)
		return 2
	}
	if !isTerminal(stdout) {
		fmt.Fprintln(stderr, "tend top: needs a terminal; tend ls lists the runs and tend events -f follows their changes")
		return 2
	}
	if *root == "" {
		var err error
		if *root, err = tend.FindRoot("."); err != nil {
			fmt.Fprintln(stderr, "tend top:", err)
			return 1
		}
	}
	// The view's requests wait in the spool when no watcher runs, and say
	// so: starting one is tend up's job, not a look at the root's.
	client, err := tend.Open(*root, tend.Options{Session: *session})
	if err != nil {
		fmt.Fprintln(stderr, "tend top:", err)
		return 2
	}
	if err := Run(client, stdout, colorProfile(*color, stdout)); err != nil {
		fmt.Fprintln(stderr, "tend top:", err)
		return 1
	}
	return 0
}

// Run shows client's root on out, a terminal, until q, Ctrl-C or SIGTERM,
// and gives the terminal back as it found it.
func Run(client *tend.Client, out *os.File, profile colorprofile.Profile) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := newTopModel(ctx, client)
	p := tea.NewProgram(m, tea.WithContext(ctx), tea.WithOutput(out), tea.WithFPS(10), tea.WithColorProfile(profile))
	m.logs.send = p.Send
	m.feed = newTopFeed(client, p.Send)
	go m.feed.run(ctx)
	_, err := p.Run()
	cancel()
	m.logs.stop()
	if errors.Is(err, tea.ErrInterrupted) {
		return nil // Ctrl-C with no terminal to read it from: a quit
	}
	return err
}

// colorProfile is how top colors: as tend ls does (--color, NO_COLOR,
// TERM=dumb), with what the terminal supports detected as the library
// does. Without color, attributes (bold, reverse) remain, so that the
// selected row still shows.
func colorProfile(color string, out *os.File) colorprofile.Profile {
	detected := colorprofile.Detect(out, os.Environ())
	switch {
	case color == "never", color == "auto" && (os.Getenv("NO_COLOR") != "" || os.Getenv("TERM") == "dumb"):
		return colorprofile.ASCII
	case detected < colorprofile.ANSI:
		return colorprofile.ANSI // --color always on a terminal that says little
	}
	return detected
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
