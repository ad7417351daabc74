// Package daemon is tend-watch, the watcher's program: the keeper (tend
// watch, tend up), the watcher under it, and tend up --shared's setting up
// of a shared root. It is a program of its own so that no other tend call
// pays the watcher's start-up: the watcher links the system's name
// services (cgo, to resolve config.json's users and groups through LDAP as
// well as /etc/group) and net/http (health checks), and tend, which links
// neither, starts in a static binary, in about two thirds of the time (docs/performance.md, round 18).
//
//	tend-watch --root DIR watch [--settle D] [--max-running N] ...
//	tend-watch --root DIR share GROUP
package daemon

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/alecthomas/kong"
	"github.com/tendhq/tend"
	"github.com/tendhq/tend/cmd/internal/watchargs"
)

// cli is tend-watch's command line, which tend writes: it checked it first.
type cli struct {
	Root    string     `help:"The tend root (default: the nearest .tend/ above the current directory, else ./.tend)." placeholder:"DIR"`
	Watch   watchCmd   `cmd:"" help:"Run a keeper and, under it, the watcher (tend watch)."`
	Watcher watcherCmd `cmd:"" hidden:"" help:"The watcher proper, as a keeper runs it."`
	Share   shareCmd   `cmd:"" help:"Share the root with the members of a group (tend up --shared)."`
	Check   checkCmd   `cmd:"" name:"health-check" hidden:"" help:"A tcp or http health check, as the watcher makes it as a run's owner."`
}

// env is what commands run with.
type env struct {
	root    string
	version string
	stderr  io.Writer
}

// exitError is an error that carries the exit code it calls for.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func exitf(code int, format string, args ...any) error {
	return &exitError{code: code, msg: fmt.Sprintf(format, args...)}
}

// Main runs tend-watch with args, as tend version, and returns its exit
// code. Errors go to stderr, after "tend: ", as tend's do.
func Main(version string, args []string, stderr io.Writer) int {
	var c cli
	parser, err := kong.New(&c, kong.Name("tend-watch"),
		kong.Description("The watcher of tend, a process supervisor driven by plain files: tend watch and tend up run it."),
		kong.Writers(stderr, stderr), kong.UsageOnError())
	if err != nil {
		fmt.Fprintln(stderr, "tend:", err)
		return watchargs.ExitFailed
	}
	ctx, err := parser.Parse(args)
	if err != nil {
		fmt.Fprintln(stderr, "tend:", err)
		return watchargs.ExitUsage
	}
	root, err := filepath.Abs(c.Root)
	if c.Root == "" {
		root, err = tend.FindRoot(".")
	}
	if err != nil {
		fmt.Fprintln(stderr, "tend:", err)
		return watchargs.ExitFailed
	}
	err = ctx.Run(&env{root: root, version: version, stderr: stderr})
	var ee *exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		if ee.msg != "" {
			fmt.Fprintln(stderr, "tend:", ee.msg)
		}
		return ee.code
	}
	fmt.Fprintln(stderr, "tend:", err)
	return watchargs.ExitFailed
}
