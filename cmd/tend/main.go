// Command tend is a process supervisor driven by plain files. This binary
// is a thin client: "tend watch" runs the watcher, and every other command
// writes request files into the spool and reads state files, as a shell
// script would.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/alecthomas/kong"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// Exit codes, the same for every command (docs/protocol.md lists them).
// "tend wait" and "tend logs -f" exit with the run's own code instead.
const (
	exitOK          = 0
	exitFailed      = 1 // the command failed (I/O, a run failed to start, ...)
	exitUsage       = 2
	exitNotFound    = 3
	exitRefused     = 4   // rejected, not_cancellable
	exitFinished    = 5   // already_finished: nothing was left to do
	exitNoWatcher   = 6   // no watcher runs; the request waits in the spool
	exitConflict    = 7   // conflict: the record moved on from --if-rev
	exitTimedOut    = 124 // tend wait --timeout: as timeout(1) says it
	exitInterrupted = 130
	// exitCannotStart is how the hidden watcher command tells its keeper
	// that it cannot start (watcher.ErrCannotStart); users see 1.
	exitCannotStart = 78
)

// exitError is an error that carries the exit code it calls for.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func exitf(code int, format string, args ...any) error {
	return &exitError{code: code, msg: fmt.Sprintf(format, args...)}
}

// cli is the command line. Every command gets *env for the root and the
// output streams.
type cli struct {
	Root    string           `help:"The tend root (default: the nearest .tend/ above the current directory, else ./.tend)." env:"TEND_ROOT" placeholder:"DIR"`
	Version kong.VersionFlag `help:"Print the version and exit."`
	NoStart bool             `help:"Do not start a watcher when none runs (start, cancel and wait otherwise do, as tend up would). Also: TEND_NO_START=1."`
	Color   string           `help:"Color states: auto (on a terminal, unless NO_COLOR is set), always or never. Also: TEND_COLOR." enum:"auto,always,never" default:"auto"`

	Up      upCmd      `cmd:"" help:"Start the watcher in the background (once)."`
	Down    downCmd    `cmd:"" help:"Stop the watcher (and its runs)."`
	Status  statusCmd  `cmd:"" help:"Say whether a watcher runs, and count the runs."`
	Watch   watchCmd   `cmd:"" help:"Run the watcher in the foreground."`
	Watcher watcherCmd `cmd:"" hidden:"" help:"The watcher proper, as a keeper runs it."`
	Start   startCmd   `cmd:"" help:"Start a command as a run."`
	Ls      lsCmd      `cmd:"" help:"List runs."`
	Show    showCmd    `cmd:"" help:"Show one run."`
	Logs    logsCmd    `cmd:"" help:"Print a run's output."`
	Cancel  cancelCmd  `cmd:"" help:"Cancel a run."`
	Wait    waitCmd    `cmd:"" help:"Wait for a run to end; exit with its exit code."`
	Rm      rmCmd      `cmd:"" help:"Delete finished runs."`
	Gc      gcCmd      `cmd:"" help:"Delete finished runs beyond the retention."`
	History historyCmd `cmd:"" help:"Print a run's transitions."`
	Label   labelCmd   `cmd:"" help:"Set or remove a run's labels."`
	Note    noteCmd    `cmd:"" help:"Attach a note to a run."`
	Fsck    fsckCmd    `cmd:"" help:"Check the root; --repair fixes what it can."`
	Signal  signalCmd  `cmd:"" help:"Send a signal to a run's process group."`
	Restart restartCmd `cmd:"" help:"Stop a run and start it again."`
	Pause   pauseCmd   `cmd:"" help:"Pause a run (SIGSTOP)."`
	Resume  resumeCmd  `cmd:"" help:"Resume a paused run (SIGCONT)."`
	Events  eventsCmd  `cmd:"" help:"Print state changes as they happen."`

	Completion completionCmd `cmd:"" help:"Print a shell completion script (bash, zsh, fish)."`
	Mcp        mcpCmd        `cmd:"" name:"mcp" help:"Serve tend's commands to agents as MCP tools, over stdio."`
	Complete   completeCmd   `cmd:"" name:"__complete" hidden:"" help:"Print the words that complete a command line."`
}

// env is what commands run with.
type env struct {
	root    string
	noStart bool
	stdout  io.Writer
	stderr  io.Writer
	term    term
	json    bool // the command's --json: print JSON, not lines for people
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	var c cli
	parser, err := kong.New(&c,
		kong.Name("tend"),
		kong.Description("A process supervisor driven by plain files. Requests are files in ROOT/spool; state is in ROOT/runs."),
		kong.Writers(stdout, stderr),
		kong.Vars{"version": version},
		kong.UsageOnError(),
	)
	if err != nil {
		fmt.Fprintln(stderr, "tend:", err)
		return exitFailed
	}
	ctx, err := parser.Parse(args)
	if err != nil {
		fmt.Fprintln(stderr, "tend:", err)
		return exitUsage
	}
	root, err := findRoot(c.Root)
	if err != nil {
		fmt.Fprintln(stderr, "tend:", err)
		return exitFailed
	}
	noStart := c.NoStart || envTrue(os.Getenv("TEND_NO_START"))
	if v := os.Getenv("TEND_COLOR"); v != "" && c.Color == "auto" {
		if v != "auto" && v != "always" && v != "never" {
			fmt.Fprintf(stderr, "tend: TEND_COLOR must be auto, always or never, not %q\n", v)
			return exitUsage
		}
		c.Color = v
	}
	outFile, _ := stdout.(*os.File)
	errFile, _ := stderr.(*os.File)
	t := termFor(outFile, errFile, c.Color)
	err = ctx.Run(&env{root: root, noStart: noStart, stdout: stdout, stderr: stderr, term: t})
	var ee *exitError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ee):
		if ee.msg != "" {
			fmt.Fprintln(stderr, "tend:", ee.msg)
		}
		return ee.code
	}
	fmt.Fprintln(stderr, "tend:", err)
	return exitFailed
}

// findRoot returns the root: the flag or TEND_ROOT if set, else the nearest
// .tend directory at or above the working directory, else ./.tend.
func findRoot(flag string) (string, error) {
	if flag != "" {
		return filepath.Abs(flag)
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if fi, err := os.Stat(filepath.Join(dir, ".tend")); err == nil && fi.IsDir() {
			return filepath.Join(dir, ".tend"), nil
		}
		if dir == filepath.Dir(dir) {
			return filepath.Join(wd, ".tend"), nil
		}
	}
}

// envTrue reports whether an environment variable's value turns a switch
// on: anything but empty, "0", "false" or "no".
func envTrue(v string) bool {
	switch strings.ToLower(v) {
	case "", "0", "false", "no":
		return false
	}
	return true
}
