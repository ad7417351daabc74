// Command tend is a process supervisor driven by plain files. This binary
// is a thin client: "tend watch" becomes tend-watch, the watcher's own
// program, and every other command writes request files into the spool
// and reads state files, as a shell script would.
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/alecthomas/kong"
	"github.com/tendhq/tend"
	"github.com/tendhq/tend/cmd/internal/buildinfo"
	"github.com/tendhq/tend/cmd/internal/watchargs"
	"github.com/tendhq/tend/spool"
)

// version is set at build time with -ldflags "-X main.version=..." (make
// build does); buildVersion says what a plain go build or go install
// recorded otherwise.
var version = "dev"

// buildVersion returns tend's version (see buildinfo.Of).
func buildVersion() string { return buildinfo.String(version) }

// Exit codes, the same for every command (docs/protocol.md lists them).
// "tend wait" and "tend logs -f" exit with the run's own code instead.
const (
	exitOK          = 0
	exitFailed      = watchargs.ExitFailed // the command failed (I/O, a run failed to start, ...)
	exitUsage       = watchargs.ExitUsage
	exitNotFound    = 3
	exitRefused     = watchargs.ExitRefused // rejected, not_cancellable
	exitFinished    = 5                     // already_finished: nothing was left to do
	exitNoWatcher   = 6                     // no watcher runs; the request waits in the spool
	exitConflict    = 7                     // conflict: the record moved on from --if-rev
	exitTimedOut    = 124                   // tend wait --timeout: as timeout(1) says it
	exitInterrupted = 130
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
	Start   startCmd   `cmd:"" help:"Start a command as a run."`
	Ls      lsCmd      `cmd:"" help:"List runs."`
	Show    showCmd    `cmd:"" help:"Show one run."`
	Logs    logsCmd    `cmd:"" help:"Print a run's output."`
	Cancel  cancelCmd  `cmd:"" help:"Cancel runs."`
	Wait    waitCmd    `cmd:"" help:"Wait for runs to end; exit with their exit code."`
	Rm      rmCmd      `cmd:"" help:"Delete finished runs."`
	Gc      gcCmd      `cmd:"" help:"Delete finished runs beyond the retention."`
	History historyCmd `cmd:"" help:"Print a run's transitions."`
	Label   labelCmd   `cmd:"" help:"Set or remove a run's labels."`
	Note    noteCmd    `cmd:"" help:"Attach a note to a run."`
	Fsck    fsckCmd    `cmd:"" help:"Check the root; --repair fixes what it can."`
	Signal  signalCmd  `cmd:"" help:"Send a signal to runs' process groups."`
	Restart restartCmd `cmd:"" help:"Stop a run and start it again."`
	Pause   pauseCmd   `cmd:"" help:"Pause a run (SIGSTOP)."`
	Resume  resumeCmd  `cmd:"" help:"Resume a paused run (SIGCONT)."`
	Events  eventsCmd  `cmd:"" help:"Print state changes as they happen."`
	Top     topCmd     `cmd:"" help:"A live view of the runs, to watch and act on them."`

	Help       helpCmd       `cmd:"" help:"Show the help of tend, or of a command (tend help start), as --help does."`
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

	ctx        context.Context // see context
	stopSignal context.CancelFunc
}

// context returns the context a command waits in: it ends on Ctrl-C or
// SIGTERM, which the command then exits on with exitInterrupted. Signals
// are caught from the first call on, before anything is written to the
// spool, so that a signal never ends a command halfway through its
// requests (round 24 of docs/performance.md tried catching them later);
// commands that never wait keep the default handling.
//
// SIGTERM is caught first: signal.Notify enables its signals in the order
// given, and a SIGINT caught (SigCgt in /proc/PID/status, all a shell or a
// test can see) must mean a SIGTERM is too. Go's runtime has a handler for
// SIGTERM from the start, which ends the process until it is asked for.
func (e *env) context() context.Context {
	if e.ctx == nil {
		e.ctx, e.stopSignal = signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	}
	return e.ctx
}

// client returns a client of the root acting as session ("" for none),
// which starts a watcher when a request finds none, unless --no-start.
func (e *env) client(session string) (*tend.Client, error) {
	opts := tend.Options{Session: session, Late: func(notice string) { fmt.Fprintln(e.stderr, "tend:", notice) }}
	if !e.noStart {
		opts.Watcher = &tend.WatcherOptions{
			Started: func(pid int) {
				fmt.Fprintf(e.stderr, "tend: started a watcher on %s (pid %d)\n", e.root, pid)
			},
		}
	}
	return tend.Open(e.root, opts)
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// notUTF8 names the first of args, or of the variables tend reads its
// settings from, that is not valid UTF-8, or returns "".
func notUTF8(args []string) string {
	for i, a := range args {
		if !utf8.ValidString(a) {
			return fmt.Sprintf("argument %d %q", i+1, a)
		}
	}
	for _, name := range []string{"TEND_ROOT", "TEND_SESSION"} {
		if v := os.Getenv(name); !utf8.ValidString(v) {
			return fmt.Sprintf("$%s %q", name, v)
		}
	}
	return ""
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && args[0] == "--version" {
		// What kong's version flag prints, without building a parser:
		// scripts check a tool's version before anything else.
		fmt.Fprintln(stdout, buildVersion())
		return exitOK
	}
	if msg := notUTF8(args); msg != "" {
		// kong would read U+FFFD in their place: another root, ID,
		// command or file than the one named.
		fmt.Fprintf(stderr, "tend: %s is not valid UTF-8: tend's requests and records are JSON text, which carries only UTF-8\n", msg)
		return exitUsage
	}
	c, do, code := parse(args, stdout, stderr)
	if c == nil {
		return code
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
	e := &env{root: root, noStart: noStart, stdout: stdout, stderr: stderr, term: t}
	err = do(e)
	if e.stopSignal != nil {
		e.stopSignal()
	}
	code, msg := exitFor(err)
	if msg != "" {
		fmt.Fprintln(stderr, "tend:", msg)
	}
	return code
}

// parse parses args into c, and returns what runs the command they name;
// or, if they name none that can run, nil and the exit code, having said
// why (or printed the help asked for).
func parse(args []string, stdout, stderr io.Writer) (c *cli, do func(*env) error, code int) {
	if c, ok := fastStart(args); ok {
		return c, c.Start.Run, 0
	}
	c = new(cli)
	parser, err := kong.New(c,
		kong.Name("tend"),
		kong.Description("A process supervisor driven by plain files. Requests are files in ROOT/spool; state is in ROOT/runs."),
		kong.Writers(stdout, stderr),
		kong.Vars{"version": buildVersion()},
		kong.UsageOnError(),
		kong.TypeMapper(reflect.TypeOf(time.Duration(0)), durationMapper),
		onlyCommand(args),
	)
	if err != nil {
		fmt.Fprintln(stderr, "tend:", err)
		return nil, nil, exitFailed
	}
	if len(args) == 0 {
		// As git and go do: what tend is, its commands, where help is.
		parser.Stdout = stderr
		if ctx, err := kong.Trace(parser, nil); err == nil {
			ctx.PrintUsage(false)
		}
		fmt.Fprintln(stderr, `Or run "tend help <command>".`)
		return nil, nil, exitUsage
	}
	ctx, err := parser.Parse(flagsFirst(parser.Model, args))
	if err != nil {
		fmt.Fprintln(stderr, "tend:", err)
		if hint := killSpelling(args); hint != "" {
			fmt.Fprintln(stderr, "tend:", hint)
		}
		return nil, nil, exitUsage
	}
	return c, func(e *env) error { return ctx.Run(e) }, 0
}

// durationMapper reads a duration flag as kong does, with an error that
// says what to write when the value is a bare number ("--timeout 5"):
// as in a request's JSON (spool.Duration), a number in a string is not
// taken as seconds, since a script's "$T" may count anything.
var durationMapper = kong.MapperFunc(func(ctx *kong.DecodeContext, target reflect.Value) error {
	var v string
	if err := ctx.Scan.PopValueInto("duration", &v); err != nil {
		return err
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		if _, numErr := strconv.ParseFloat(v, 64); numErr == nil && strings.Trim(v, "0123456789.") == "" {
			return fmt.Errorf("%q has no unit: write %ss, %sm or %sh", v, v, v, v)
		}
		return fmt.Errorf("%q is not a duration (such as 30s, 1m30s or 500ms)", v)
	}
	target.Set(reflect.ValueOf(d))
	return nil
})

// killSpelling returns, for a tend signal that kong refused, what to write
// instead of kill's -9 or -TERM, which kong reads as a flag ("unknown
// flag -9, did you mean -h?"), or "" if args are no such call.
func killSpelling(args []string) string {
	if !slices.Contains(args, "signal") {
		return ""
	}
	for _, a := range args {
		if sig, ok := strings.CutPrefix(a, "-"); ok && sig != "" && !strings.HasPrefix(sig, "-") {
			if spool.IsSignal(sig) {
				return fmt.Sprintf("signal: write the signal without kill's dash: tend signal ID %s", sig)
			}
		}
	}
	return ""
}

// onlyCommand returns the option that makes kong build the one command
// args name (its flags' tags parsed, its help interpolated), and leave out
// the thirty others: building them all was most of what every tend call
// spent before doing anything. Of that command's flag groups, those args
// name no flag of are left out too (unnamedGroups). Help, completion, and a
// word that names no command get the whole model, which their output
// lists (or suggests from); --version alone gets none.
func onlyCommand(args []string) kong.Option {
	word, ok := commandWord(args)
	if !ok {
		return kong.OptionFunc(func(*kong.Kong) error { return nil })
	}
	t := reflect.TypeFor[cli]()
	var others []string
	var command reflect.Type
	for i := range t.NumField() {
		f := t.Field(i)
		if _, cmd := f.Tag.Lookup("cmd"); !cmd {
			continue
		}
		if name := cmp.Or(f.Tag.Get("name"), strings.ToLower(f.Name)); name == word && !slices.Contains(needWholeModel, word) {
			command = f.Type
			continue
		}
		others = append(others, f.Name)
	}
	if command == nil && word != "" {
		return kong.OptionFunc(func(*kong.Kong) error { return nil })
	}
	ignore := []string{`^cli\.(` + strings.Join(others, "|") + `)$`}
	if command != nil {
		if fields := unnamedGroups(t, command, args); len(fields) > 0 {
			ignore = append(ignore, `^`+command.Name()+`\.(`+strings.Join(fields, "|")+`)$`)
		}
	}
	return kong.IgnoreFields(ignore...)
}

// unnamedGroups returns the fields of command's flag groups (group: tags)
// that no word of args names a flag of: tend start's service and Slurm
// flags, unless one of them is given, which is most of what building
// start's model costs. Those fields keep their zero values, not their
// defaults, which nothing reads unless a flag of their group is given
// (startCmd.service, startCmd.slurm). A word that looks like a long flag
// of neither the command nor tend itself leaves every group in, so that
// kong suggests from them all; so does a group with a short flag, an
// environment variable or a negatable flag, which a word could name
// otherwise than as --name.
func unnamedGroups(root, command reflect.Type, args []string) []string {
	known := map[string]bool{"help": true}
	for _, t := range []reflect.Type{root, command} {
		eachField(t, func(f reflect.StructField) { known[flagName(f)] = true })
	}
	named := map[string]bool{} // by group
	var groups []string
	fields := map[string][]string{}
	for i := range command.NumField() {
		f := command.Field(i)
		g := f.Tag.Get("group")
		if g == "" {
			continue
		}
		if fields[g] == nil {
			groups = append(groups, g)
		}
		fields[g] = append(fields[g], f.Name)
		_, negatable := f.Tag.Lookup("negatable")
		if f.Tag.Get("short") != "" || f.Tag.Get("env") != "" || negatable || namesFlag(args, flagName(f)) {
			named[g] = true
		}
	}
	for _, a := range args {
		if name, ok := strings.CutPrefix(a, "--"); ok && name != "" {
			if name, _, _ = strings.Cut(name, "="); !known[name] {
				return nil // an unknown flag: kong says so, from the whole command
			}
		}
	}
	var out []string
	for _, g := range groups {
		if !named[g] {
			out = append(out, fields[g]...)
		}
	}
	return out
}

// eachField calls do with each field of struct type t, and of the
// structs it embeds, as kong flattens them.
func eachField(t reflect.Type, do func(reflect.StructField)) {
	for i := range t.NumField() {
		if f := t.Field(i); f.Anonymous && f.Type.Kind() == reflect.Struct {
			eachField(f.Type, do)
		} else {
			do(f)
		}
	}
}

// flagName is the long flag of field f, as kong names it: its name tag, or
// its name's words, as kong splits them, in lower case and joined by
// dashes (RestartLimit: restart-limit; JSON: json).
func flagName(f reflect.StructField) string {
	if name := f.Tag.Get("name"); name != "" {
		return name
	}
	// Runs of lower case letters, of upper case, of digits, of the rest;
	// an upper case run's last letter begins the lower case run after it.
	var words [][]rune
	last := -1
	for _, r := range f.Name {
		class := 3
		switch {
		case unicode.IsLower(r):
			class = 0
		case unicode.IsUpper(r):
			class = 1
		case unicode.IsDigit(r):
			class = 2
		}
		if class == last {
			words[len(words)-1] = append(words[len(words)-1], r)
		} else {
			words = append(words, []rune{r})
		}
		last = class
	}
	for i := 0; i+1 < len(words); i++ {
		if unicode.IsUpper(words[i][0]) && unicode.IsLower(words[i+1][0]) {
			n := len(words[i]) - 1
			words[i+1] = append([]rune{words[i][n]}, words[i+1]...)
			words[i] = words[i][:n]
		}
	}
	var parts []string
	for _, w := range words {
		if len(w) > 0 {
			parts = append(parts, strings.ToLower(string(w)))
		}
	}
	return strings.Join(parts, "-")
}

// namesFlag reports whether a word of args is the long flag name, alone
// (its value next) or with its value (--name=value).
func namesFlag(args []string, name string) bool {
	for _, a := range args {
		if a == "--"+name || strings.HasPrefix(a, "--"+name+"=") {
			return true
		}
	}
	return false
}

// needWholeModel are the commands that read the whole command line model:
// they print or complete the others.
var needWholeModel = []string{"help", "completion", "__complete"}

// commandWord returns the command args name, skipping the global flags
// before it ("" with --version and no command), and false if args ask for
// help or name no command.
func commandWord(args []string) (string, bool) {
	version := false
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "-h" || a == "--help" || a == "--":
			return "", false
		case a == "--root" || a == "--color":
			i++ // its value
		case a == "--version":
			version = true
		case strings.HasPrefix(a, "-"):
			// --root=DIR, --no-start, --color=never
		default:
			for _, b := range args[i+1:] {
				if b == "-h" || b == "--help" {
					return "", false
				}
			}
			return a, true
		}
	}
	return "", version
}

type helpCmd struct {
	Command []string `arg:"" optional:"" help:"The command whose help to show."`
}

func (c *helpCmd) Help() string {
	return `Shows what tend --help or tend COMMAND --help shows. Examples:
  tend help
  tend help start`
}

func (c *helpCmd) Run(k *kong.Context) error {
	ctx, err := kong.Trace(k.Kong, c.Command)
	if err == nil {
		err = ctx.Error
	}
	if err != nil {
		return exitf(exitUsage, "help: %v", err)
	}
	return ctx.PrintUsage(false)
}

// exitFor returns the exit code and the one-line message for a command's
// error: an exitError says both; the client's errors have a code of their
// kind (docs/protocol.md lists them); anything else is a failure.
func exitFor(err error) (int, string) {
	var ee *exitError
	switch {
	case err == nil:
		return exitOK, ""
	case errors.As(err, &ee):
		return ee.code, ee.msg
	case errors.Is(err, context.Canceled):
		return exitInterrupted, "interrupted"
	}
	for _, k := range []struct {
		kind error
		code int
	}{
		{tend.ErrInvalid, exitUsage},
		{tend.ErrNotFound, exitNotFound},
		{tend.ErrNoWatcher, exitNoWatcher},
		{tend.ErrFinished, exitFinished},
		{tend.ErrConflict, exitConflict},
		{tend.ErrRefused, exitRefused},
	} {
		if errors.Is(err, k.kind) {
			return k.code, err.Error()
		}
	}
	return exitFailed, err.Error()
}

// findRoot returns the root: the flag or TEND_ROOT if set, else the nearest
// .tend directory at or above the working directory, else ./.tend.
func findRoot(flag string) (string, error) {
	if flag != "" {
		return filepath.Abs(flag)
	}
	return tend.FindRoot(".")
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
