package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tendhq/tend"
	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
)

type startCmd struct {
	ID      *string        `help:"The run's ID (default: made from the command, e.g. make-3f9a1c)."`
	JSON    bool           `help:"Print the run's record once it is taken, not just its ID (docs/schema/record.schema.json)."`
	Cwd     string         `help:"Working directory (default: the current one)." placeholder:"DIR"`
	Env     []string       `short:"e" sep:"none" help:"Set a variable in the run's environment, on top of this shell's (repeatable)." placeholder:"K=V"`
	Timeout time.Duration  `help:"Stop the run (SIGTERM, then SIGKILL after the grace) if it runs longer than this."`
	Grace   *time.Duration `help:"Time between SIGTERM and SIGKILL when the run is stopped (default 10s; 0: SIGKILL at once)."`
	Session string         `help:"The session the run belongs to." env:"TEND_SESSION"`
	Label   []string       `short:"l" sep:"none" help:"Attach a label (repeatable)." placeholder:"K=V"`
	After   []string       `sep:"none" help:"Start only once run ID has completed (ID:ended: however it ended; ID:ready: once it runs and is ready); repeatable. Canceled if that can no longer happen." placeholder:"ID[:COND]"`
	At      string         `help:"Start no earlier than this time: HH:MM[:SS] (today, or tomorrow if past) or RFC 3339." placeholder:"TIME" xor:"when"`
	In      time.Duration  `help:"Start no earlier than this long after the request is taken." placeholder:"DURATION" xor:"when"`

	Restart           string        `help:"Restart policy: never, on-failure or always." placeholder:"POLICY" group:"Services"`
	RestartLimit      int           `help:"At most this many restarts within --restart-window." default:"5" group:"Services"`
	RestartWindow     time.Duration `help:"The window the restart limit counts in." default:"1m" group:"Services"`
	RestartDelay      time.Duration `help:"The first delay before a restart; it doubles (with jitter) up to 30s." default:"1s" group:"Services"`
	HealthTCP         string        `name:"health-tcp" help:"Ready, and healthy, while HOST:PORT accepts connections." placeholder:"HOST:PORT" group:"Services"`
	HealthHTTP        string        `name:"health-http" help:"Ready, and healthy, while a GET of URL answers 2xx." placeholder:"URL" group:"Services"`
	HealthExec        string        `name:"health-exec" help:"Ready, and healthy, while this shell command exits 0." placeholder:"CMD" group:"Services"`
	HealthInterval    time.Duration `help:"How often the health check runs." default:"1s" group:"Services"`
	HealthRetries     int           `help:"Failed checks in a row that make the run unhealthy (restarted per its policy)." default:"3" group:"Services"`
	HealthStartPeriod time.Duration `help:"Failed checks do not count for this long after each start." default:"30s" group:"Services"`
	ReadyFile         bool          `help:"Starting until the run creates the file named in $TEND_READY." group:"Services"`

	Slurm          bool          `help:"Run it on the Slurm cluster (any flag below implies it), with the root's defaults from config.json." group:"Slurm"`
	SlurmPartition string        `help:"The partition (sbatch --partition)." placeholder:"NAME" group:"Slurm"`
	CPUs           int           `name:"cpus" help:"CPUs for the job (sbatch --cpus-per-task)." placeholder:"N" group:"Slurm"`
	Mem            string        `help:"Memory per node, such as 8G (sbatch --mem)." placeholder:"SIZE" group:"Slurm"`
	GPUs           string        `name:"gpus" help:"GPUs: a number, or TYPE:N (sbatch --gpus)." placeholder:"N" group:"Slurm"`
	Nodes          int           `help:"Nodes (sbatch --nodes)." placeholder:"N" group:"Slurm"`
	SlurmTime      time.Duration `help:"Slurm's time limit: past it the run ends timed_out (sbatch --time; Slurm counts whole minutes)." placeholder:"DURATION" group:"Slurm"`
	Account        string        `help:"The account to charge (sbatch --account)." placeholder:"NAME" group:"Slurm"`
	QOS            string        `name:"qos" help:"The quality of service (sbatch --qos)." placeholder:"NAME" group:"Slurm"`
	Constraint     string        `help:"Node features (sbatch --constraint)." placeholder:"FEATURES" group:"Slurm"`
	SbatchArg      []string      `sep:"none" help:"A further sbatch option, --name or --name=value (repeatable)." placeholder:"OPTION" group:"Slurm"`
	Local          bool          `help:"Run it on this host even where config.json sends runs to Slurm." group:"Slurm"`

	Command []string `arg:"" passthrough:"partial" help:"The command. One argument is run by /bin/sh -c; several are executed directly. Flags come before it: from its first word on, everything is the command's (a -- before it ends tend's flags)."`
}

func (c *startCmd) Help() string {
	return `Prints the run's ID. The run gets this shell's environment and working
directory, plus TEND_ROOT, TEND_RUN_ID and TEND_SESSION. Examples:
  tend start -- ls -l /                      # executes ls with arguments -l and /
  tend start --id nap -- 'sleep 5; echo up'  # one argument: run by /bin/sh -c
  tend start --timeout 2s -- sleep 60        # stopped after 2s: timed_out
  tend start -e LIST=a,b -l kind=demo -- 'echo "$LIST"'
  tend start --id test --after build -- make test   # once build completed
  tend start --after build --after lint:ended --in 10m -- ./deploy
  tend start --slurm-partition gpu --cpus 4 --mem 8G --gpus 1 -- ./train.sh`
}

func (c *startCmd) Run(e *env) error {
	args := c.args()
	if len(args) == 0 {
		return exitf(exitUsage, "start: no command given (tend start -- CMD [ARG...])")
	}
	req, err := c.request(args, e.stderr)
	if err != nil {
		return exitf(exitUsage, "start: %v", err)
	}
	// An empty --id is an error, not "make one up": it is a script's
	// unset variable, and its next tend wait "$ID" would find no run.
	if c.ID != nil {
		if err := tend.CheckID(*c.ID); err != nil {
			return exitf(exitUsage, "start: --id: %v", err)
		}
	}
	client, err := e.client(c.Session)
	if err != nil {
		return err
	}
	id := tend.MakeID(req.Args())
	if c.ID != nil {
		id = *c.ID
	}
	var st tend.Head
	var rec *tend.Record
	if c.JSON {
		if rec, err = client.Start(e.context(), id, req); rec != nil {
			st = tracker.HeadOf(rec)
		}
	} else {
		st, err = client.StartHead(e.context(), id, req)
	}
	var oe *tend.OutcomeError
	switch {
	case errors.Is(err, tend.ErrInvalid):
		// Checked by Start before anything is written, by the parser
		// the watcher uses (once: it costs a marshal and a parse).
		return exitf(exitUsage, "start: %s", withFlags(err.Error()))
	case errors.Is(err, tend.ErrNoWatcher):
		fmt.Fprintln(e.stdout, id) // submitted: it waits for a watcher
		return err
	case errors.As(err, &oe):
		return exitf(exitRefused, "start %s: %s", id, oe.Outcome)
	case err != nil:
		return err
	}
	if c.JSON {
		writeJSON(e.stdout, rec)
	} else {
		fmt.Fprintln(e.stdout, id)
	}
	if st.State == tracker.Failed && st.PID == 0 {
		return exitf(exitFailed, "run %s: %s", id, st.Reason)
	}
	return nil
}

// withFlags adds to msg, an error of a start request's check, which
// names the request's JSON field it concerns, the flags that set that
// field: what the user typed.
func withFlags(msg string) string {
	m := jsonField.FindStringSubmatch(msg)
	if m == nil {
		return msg
	}
	flags := map[string]string{
		"timeout": "--timeout", "grace": "--grace", "cwd": "--cwd", "env": "--env, or this shell's environment", "labels": "--label",
		"session": "--session", "after": "--after", "not_before": "--at or --in", "ready_file": "--ready-file",
		"restart": "--restart, --restart-limit, --restart-window, --restart-delay",
		"health":  "--health-tcp, --health-http, --health-exec, --health-interval, --health-retries, --health-start-period",
		"slurm":   "the Slurm flags, or config.json's slurm default (--local runs it on this host)",
	}[m[1]]
	if flags == "" {
		return msg
	}
	return msg + " (set by " + flags + ")"
}

// jsonField finds the first JSON field an error names ("timeout": ...).
var jsonField = regexp.MustCompile(`^"([a-z_]+)":`)

// args returns the command's words, without the "--" that may come first.
func (c *startCmd) args() []string {
	if len(c.Command) > 0 && c.Command[0] == "--" {
		return c.Command[1:]
	}
	return c.Command
}

// request builds the start request from the flags; Start checks it.
// Variables of this shell that are not UTF-8 are left out of the run's
// environment, which a request (JSON) cannot carry, saying so on warn.
func (c *startCmd) request(args []string, warn io.Writer) (tend.Request, error) {
	req := tend.Request{Session: c.Session, Timeout: spool.Duration(c.Timeout)}
	if len(args) == 1 {
		req.Shell = args[0]
	} else {
		req.Argv = args
	}
	if c.Grace != nil { // 0 too: no grace, where left out is the default
		if *c.Grace < 0 {
			return tend.Request{}, fmt.Errorf("--grace %s is negative (0 stops with no grace)", *c.Grace)
		}
		g := spool.Duration(*c.Grace)
		req.Grace = &g
	}
	cwd := c.Cwd
	if cwd == "" {
		cwd, _ = os.Getwd()
	}
	var err error
	if req.Cwd, err = filepath.Abs(cwd); err != nil {
		return req, err
	}
	req.Env = map[string]string{}
	for _, kv := range os.Environ() {
		k, v, ok := strings.Cut(kv, "=")
		switch {
		case !ok || k == "":
		case !utf8.ValidString(kv):
			fmt.Fprintf(warn, "tend: start: %q is not valid UTF-8: left out of the run's environment (a request is JSON text)\n", k)
		default:
			req.Env[k] = v
		}
	}
	if req.Env, err = addPairs(req.Env, c.Env, "--env"); err != nil {
		return req, err
	}
	if len(c.Label) > 0 {
		if req.Labels, err = addPairs(map[string]string{}, c.Label, "--label"); err != nil {
			return req, err
		}
	}
	if err := c.service(&req); err != nil {
		return req, err
	}
	if err := c.slurm(&req); err != nil {
		return req, err
	}
	for _, name := range c.After {
		d, err := spool.ParseDep(name)
		if err != nil {
			return req, fmt.Errorf("--after %v", err)
		}
		req.After = append(req.After, d)
	}
	switch {
	case c.At != "":
		at, err := parseAt(c.At, time.Now())
		if err != nil {
			return req, err
		}
		req.NotBefore = &spool.NotBefore{At: at}
	case c.In < 0:
		return req, fmt.Errorf("--in %v: a delay cannot be negative (0 or no --in: start as soon as it may)", c.In)
	case c.In > 0:
		req.NotBefore = &spool.NotBefore{In: c.In}
	}
	return req, nil
}

// parseAt reads --at: an RFC 3339 time, or a time of day (HH:MM or
// HH:MM:SS, local time), the next one after now.
func parseAt(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	for _, layout := range []string{"15:04", "15:04:05"} {
		if t, err := time.ParseInLocation(layout, s, now.Location()); err == nil {
			at := time.Date(now.Year(), now.Month(), now.Day(), t.Hour(), t.Minute(), t.Second(), 0, now.Location())
			if !at.After(now) {
				at = at.AddDate(0, 0, 1)
			}
			return at, nil
		}
	}
	return time.Time{}, fmt.Errorf("--at %q: want HH:MM, HH:MM:SS or an RFC 3339 time", s)
}

func addPairs(m map[string]string, pairs []string, flag string) (map[string]string, error) {
	for _, kv := range pairs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%s %q: want K=V", flag, kv)
		}
		m[k] = v
	}
	return m, nil
}

// slurm sets the request's Slurm settings from the flags.
func (c *startCmd) slurm(req *tend.Request) error {
	s := spool.Slurm{Partition: c.SlurmPartition, CPUs: c.CPUs, Memory: c.Mem, GPUs: c.GPUs, Nodes: c.Nodes,
		Time: spool.Duration(c.SlurmTime), Account: c.Account, QOS: c.QOS, Constraint: c.Constraint, Args: c.SbatchArg}
	set := c.Slurm || s.Partition != "" || s.CPUs != 0 || s.Memory != "" || s.GPUs != "" || s.Nodes != 0 ||
		s.Time != 0 || s.Account != "" || s.QOS != "" || s.Constraint != "" || len(s.Args) > 0
	if set && c.Local {
		return fmt.Errorf("--local runs it on this host: no Slurm flag goes with it")
	}
	if set {
		req.Slurm = &s
	}
	req.Local = c.Local
	return nil
}

// service sets the request's service settings from the flags. A restart
// setting without a policy that restarts is refused: it would be
// dropped, and the run never restarted.
func (c *startCmd) service(req *tend.Request) error {
	if c.Restart == "" || c.Restart == spool.RestartNever {
		// Set to other than their defaults (zero where fastStart, which
		// takes none of them, made c).
		var set []string
		if c.RestartLimit != 0 && c.RestartLimit != 5 {
			set = append(set, "--restart-limit")
		}
		if c.RestartWindow != 0 && c.RestartWindow != time.Minute {
			set = append(set, "--restart-window")
		}
		if c.RestartDelay != 0 && c.RestartDelay != time.Second {
			set = append(set, "--restart-delay")
		}
		if len(set) > 0 {
			return fmt.Errorf("%s: no restart policy to apply to: give --restart on-failure or always", strings.Join(set, ", "))
		}
	}
	if c.Restart != "" && c.Restart != spool.RestartNever {
		// A misspelled policy is refused when the request is checked.
		req.Restart = &spool.Restart{Policy: c.Restart, Limit: c.RestartLimit, Window: spool.Duration(c.RestartWindow),
			Delay: spool.Duration(c.RestartDelay), MaxDelay: spool.Duration(max(c.RestartDelay, 30*time.Second))}
	}
	if c.HealthTCP != "" || c.HealthHTTP != "" || c.HealthExec != "" {
		req.Health = &spool.Health{TCP: c.HealthTCP, HTTP: c.HealthHTTP, Exec: c.HealthExec,
			Interval: spool.Duration(c.HealthInterval), Timeout: spool.Duration(max(c.HealthInterval, time.Second)), Retries: c.HealthRetries,
			StartPeriod: spool.Duration(c.HealthStartPeriod)}
	}
	req.ReadyFile = c.ReadyFile
	return nil
}
