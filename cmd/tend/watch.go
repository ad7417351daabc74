package main

import (
	"os"
	"os/exec"
	"path/filepath"
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
// or on the PATH: it is the keeper, and runs the watcher under it.
// Replaced, not run as a child, so that the process tend up waits for,
// or a service manager signals, is the keeper itself, with every file
// descriptor it was given (--ready-fd). A watcher whose keeper died
// becomes the keeper by running its own program (/proc/self/exe), never
// this one.
func (c *watchCmd) Run(e *env) error {
	path, err := watchProgram()
	if err != nil {
		return err
	}
	argv := append([]string{"tend-watch", "--root", e.root, "watch"}, c.Args()...)
	if c.ReadyFD >= 0 {
		argv = append(argv, "--ready-fd", strconv.Itoa(c.ReadyFD))
	}
	return exitf(exitFailed, "watch: %v", syscall.Exec(path, argv, os.Environ()))
}

// watchProgram returns the path of tend-watch beside this tend, and
// never one on the PATH: tend often runs as root with a user's PATH (sudo
// -E, cron), and must not run what that user put there.
func watchProgram() (string, error) {
	self := tendProgram()
	path, err := exec.LookPath(filepath.Join(filepath.Dir(self), "tend-watch"))
	if err != nil {
		return "", exitf(exitFailed, "tend-watch, the watcher, is not beside %s: install it with go install github.com/tendhq/tend/cmd/tend-watch@latest (make install installs it with tend)", self)
	}
	return path, nil
}
