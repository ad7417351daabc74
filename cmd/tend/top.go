package main

import (
	"os"
	"syscall"
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
	path, err := companion("tend-top", "the live view")
	if err != nil {
		return exitf(exitFailed, "top: %v", err)
	}
	color := "never"
	if e.term.color {
		color = "always"
	}
	argv := []string{"tend-top", "--root", e.root, "--session=" + c.Session, "--color", color}
	// Replaced, not run as a child: the terminal, and its signals, are the
	// view's alone.
	return exitf(exitFailed, "top: %v", syscall.Exec(path, argv, os.Environ()))
}
