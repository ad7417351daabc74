package main

import (
	"os"
	"strconv"
	"syscall"

	"github.com/tendhq/tend/cmd/internal/watchargs"
)

type watchCmd struct {
	watchargs.Flags
	ReadyFD int `hidden:"" default:"-1" help:"Write a line to this file descriptor once the watcher takes requests."`
}

func (c *watchCmd) Help() string {
	return `Runs a keeper and, under it, the watcher, in the foreground; "tend up"
runs them in the background. The keeper restarts a watcher that crashed and
keeps the exit status of every run meanwhile; the next watcher adopts them.
Stop it with Ctrl-C or SIGTERM: its runs are stopped first (a second one
kills them at once). SIGUSR1 stops the watcher and leaves the runs running.
Examples:
  tend watch
  tend watch --max-running 2   # in a systemd unit: see docs/recipes.md`
}

// Run becomes tend-watch, the watcher's program, found beside this tend
// (companion): it is the keeper, and runs the watcher under it.
// Replaced, not run as a child, so that the process tend up waits for,
// or a service manager signals, is the keeper itself, with every file
// descriptor it was given (--ready-fd). A watcher whose keeper died
// becomes the keeper by running its own program (/proc/self/exe), never
// this one.
func (c *watchCmd) Run(e *env) error {
	path, err := companion("tend-watch", "the watcher")
	if err != nil {
		return err
	}
	argv := append([]string{"tend-watch", "--root", e.root, "watch"}, c.Args()...)
	if c.ReadyFD >= 0 {
		argv = append(argv, "--ready-fd", strconv.Itoa(c.ReadyFD))
	}
	return exitf(exitFailed, "watch: %v", syscall.Exec(path, argv, os.Environ()))
}
