package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/tendhq/tend"
	"github.com/tendhq/tend/cmd/internal/watchargs"
	"github.com/tendhq/tend/procfs"
	"github.com/tendhq/tend/tracker"
	"github.com/tendhq/tend/tracker/layout"
)

type upCmd struct {
	watchargs.Flags
	Shared string `placeholder:"GROUP" help:"Share the root with the members of GROUP (as root): their requests run as their writers. Sets the root's modes up and adds GROUP to config.json's groups."`
	JSON   bool   `help:"Print tend status --json once the watcher takes requests (docs/schema/status.schema.json)."`
}

func (c *upCmd) Help() string {
	return `Starts a keeper and a watcher in the background, in their own session,
logging to ROOT/watcher.log, and returns once the watcher takes requests.
If one already runs, says so and exits 0.

With --shared GROUP (as root), the members of GROUP may submit requests
too, each run as the user who wrote it, as at(1) and cron run jobs: spool/
becomes writable by the group and sticky (nobody can rename or remove
another's request), and runs/, outcomes/ and rejected/ readable by it;
each run's directory, output included, is its owner's alone. See "Who may
do what" in docs/protocol.md. Examples:
  tend up
  tend up --max-running 4 --max-running-per-session 2
  sudo tend --root /srv/ci/.tend up --shared ci`
}

func (c *upCmd) Run(e *env) error {
	if c.Shared != "" {
		if err := share(e, c.Shared); err != nil {
			return err
		}
	}
	client, err := e.client("")
	if err != nil {
		return err
	}
	pid, started, err := client.EnsureWatcher(e.context(), tend.WatcherOptions{Args: c.Flags.Args()})
	if err != nil {
		return err
	}
	switch {
	case c.JSON:
		return printStatusJSON(e)
	case started:
		fmt.Fprintf(e.stdout, "started a watcher on %s (pid %d)\n", e.root, pid)
	default:
		fmt.Fprintf(e.stdout, "a watcher is already running on %s (pid %d)\n", e.root, pid)
		if set := c.given(); len(set) > 0 {
			how := "restart it (tend down, then tend up with them)"
			if keys := configKeys(set); len(keys) > 0 {
				how = fmt.Sprintf("set %s in %s, which it reads as it changes, or %s", strings.Join(keys, ", "), layout.Root(e.root).Config(), how)
			}
			fmt.Fprintf(e.stderr, "tend: up: %s not applied: the running watcher keeps its settings; %s\n", strings.Join(set, ", "), how)
		}
	}
	return nil
}

// given returns the watcher flags set to other than their defaults: a
// watcher that runs already does not take them.
func (c *upCmd) given() []string {
	var set []string
	if c.Settle != time.Second {
		set = append(set, "--settle")
	}
	if c.MaxRunning != 0 {
		set = append(set, "--max-running")
	}
	if c.MaxPerSession != 0 {
		set = append(set, "--max-running-per-session")
	}
	if c.Durability != "" && c.Durability != "power_loss" {
		set = append(set, "--durability")
	}
	return set
}

// configKeys returns the config.json keys of the watcher flags given
// that config.json has (not --settle).
func configKeys(flags []string) []string {
	keys := map[string]string{"--max-running": "max_running", "--max-running-per-session": "max_running_per_session", "--durability": "durability"}
	var out []string
	for _, f := range flags {
		if k, ok := keys[f]; ok {
			out = append(out, k)
		}
	}
	return out
}

type downCmd struct {
	KeepRuns bool          `help:"Stop the watcher but leave its runs running, for the next watcher to adopt (upgrades)."`
	Timeout  time.Duration `help:"How long to wait before killing the watcher and its keeper." default:"10s"`
	JSON     bool          `help:"Print tend status --json once the watcher is gone (docs/schema/status.schema.json)."`
}

func (c *downCmd) Help() string {
	return `Stops the watcher: SIGTERM, which cancels every run (or, with
--keep-runs, leaves them running); if it has not exited within --timeout, a
second SIGTERM, which kills the runs at once, and SIGKILL as a last resort.
Examples:
  tend down
  tend down --keep-runs     # upgrade tend: the next watcher adopts the runs`
}

func (c *downCmd) Run(e *env) error {
	// The PIDs it signals are the root's to say: only one nobody else
	// could change is believed (sudo tend down in a teammate's checkout).
	if err := tracker.CheckSafe(e.root, os.Geteuid()); err != nil {
		return exitf(exitRefused, "down: %v", err)
	}
	client, err := e.client("")
	if err != nil {
		return err
	}
	w, err := findWatcher(e, client, c.Timeout)
	if err != nil {
		return err
	}
	if w.watcher == nil && w.keeper == nil {
		if pid, ok := removeStale(e.root); ok {
			fmt.Fprintf(e.stderr, "tend: removed a stale PID file (pid %d) left by a watcher that is gone\n", pid)
		}
		fmt.Fprintf(e.stdout, "no watcher is running on %s\n", e.root)
		return nil
	}
	sig := syscall.SIGTERM
	if c.KeepRuns {
		sig = syscall.SIGUSR1
	}
	target := w.keeper
	if target == nil {
		target = w.watcher
	}
	target.Signal(sig)
	done := func() bool {
		running, _, _ := tracker.ProbeWatcher(e.root)
		inCharge, _, _ := tracker.ProbeKeeper(e.root)
		return !running && !inCharge && (c.KeepRuns || w.keeper == nil || !alive(w.keeper))
	}
	if !waitFor(done, c.Timeout, pollEvery, w.watcher, w.keeper) && !c.KeepRuns {
		fmt.Fprintf(e.stderr, "tend: still running after %v: killing the runs at once\n", c.Timeout)
		target.Signal(syscall.SIGTERM) // a second one kills the runs at once
		waitFor(done, 3*time.Second, pollEvery, w.watcher, w.keeper)
	}
	if !done() {
		fmt.Fprintf(e.stderr, "tend: still running: SIGKILL\n")
		for _, h := range []*procfs.Handle{w.watcher, w.keeper} {
			if h != nil && (h == w.watcher || !c.KeepRuns) {
				h.Signal(syscall.SIGKILL)
			}
		}
		waitFor(done, 3*time.Second, pollEvery, w.watcher, w.keeper)
	}
	removeStale(e.root)
	which := fmt.Sprintf("keeper pid %d", target.PID()) // a watcher not known by its PID
	if w.watcher != nil {
		which = fmt.Sprintf("pid %d", w.watcher.PID())
	}
	switch {
	case c.JSON:
		return printStatusJSON(e)
	case c.KeepRuns:
		fmt.Fprintf(e.stdout, "stopped the watcher on %s (%s); its runs keep running\n", e.root, which)
	default:
		fmt.Fprintf(e.stdout, "stopped the watcher on %s (%s) and its runs\n", e.root, which)
	}
	return nil
}

// pollEvery is how often tend down checks whether the watcher is gone
// when no exit has told it.
const pollEvery = 20 * time.Millisecond

// watcherProcs are handles on a running watcher and its keeper (nil if it
// has none).
type watcherProcs struct {
	watcher, keeper *procfs.Handle
}

// findWatcher opens pidfds on the watcher that holds e.root's lock and on
// the keeper in charge of it, either of which may be missing (nil). Each
// one's identity is checked after its pidfd is open, so that no signal can
// reach a process that merely reused a PID. A watcher that holds the lock
// but has not said who it is yet (it is starting: recovering the runs of
// one that crashed, say) is waited for, up to wait; past that, the keeper
// alone will do, as it passes its signals on.
func findWatcher(e *env, client *tend.Client, wait time.Duration) (watcherProcs, error) {
	var w watcherProcs
	w.keeper, _ = client.LiveKeeper()
	running, _, err := tracker.ProbeWatcher(e.root)
	if err != nil || !running {
		return w, err
	}
	info, ok := client.ReadyWatcher()
	if !ok {
		fmt.Fprintf(e.stderr, "tend: the watcher on %s is starting: waiting for it\n", e.root)
		ready := func() bool {
			if info, ok = client.ReadyWatcher(); ok {
				return true
			}
			running, _, _ := tracker.ProbeWatcher(e.root)
			return !running // gone: nothing to wait for
		}
		if !waitFor(ready, wait, pollEvery) && w.keeper == nil {
			return w, fmt.Errorf("a watcher holds %s but has not written %s within %v", layout.Root(e.root).WatcherLock(), layout.Root(e.root).WatcherInfo(), wait)
		}
	}
	if !ok {
		return w, nil // gone meanwhile, or never ready: the keeper is signalled
	}
	pid := info.PID
	st, err := procfs.ReadStat(pid)
	if err == nil {
		w.watcher, err = procfs.Open(pid, st.StartTime)
	}
	if err != nil {
		return w, fmt.Errorf("watcher pid %d: %w", pid, err)
	}
	return w, nil
}

func alive(h *procfs.Handle) bool { return !h.Exited() }

// waitFor waits until cond holds or d has passed. It checks cond as soon
// as one of procs exits (what it usually waits for), and every interval
// besides: a lock may be let go of without an exit.
func waitFor(cond func() bool, d, interval time.Duration, procs ...*procfs.Handle) bool {
	exited := make(chan struct{}, len(procs))
	for _, h := range procs {
		if h != nil {
			go func() {
				h.WaitExited()
				exited <- struct{}{}
			}()
		}
	}
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			return cond()
		case <-tick.C:
		case <-exited:
		}
	}
	return true
}

// removeStale removes the PID file and watcher.json left by a watcher that
// no longer holds the lock. It reports whether there was one, and the PID
// it named.
func removeStale(root string) (pid int, removed bool) {
	if running, _, _ := tracker.ProbeWatcher(root); running {
		return 0, false
	}
	b, err := os.ReadFile(layout.Root(root).WatcherPID())
	if err != nil {
		return 0, false
	}
	fmt.Sscan(string(b), &pid)
	os.Remove(layout.Root(root).WatcherPID())
	os.Remove(layout.Root(root).WatcherInfo())
	return pid, true
}

// printStatusJSON prints what tend status --json would (up and down --json).
func printStatusJSON(e *env) error {
	s, err := readStatus(e.root)
	if err != nil {
		return err
	}
	return writeJSON(e.stdout, s)
}

// share sets e's root up to be shared with the members of group (see
// upCmd). tend-watch does it: it finds the group through the system's
// name services, which this program does not link, as the watcher will.
func share(e *env, group string) error {
	if os.Geteuid() != 0 {
		return exitf(exitUsage, "--shared: only root may share a root: requests run as their writers")
	}
	path, err := companion("tend-watch", "the watcher")
	if err != nil {
		return err
	}
	cmd := exec.Command(path, "--root", e.root, "share", "--", group)
	cmd.Args[0] = "tend-watch"
	cmd.Stdout, cmd.Stderr = e.stdout, e.stderr
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee) && ee.Exited():
		return exitf(ee.ExitCode(), "") // tend-watch said why
	case err != nil:
		return fmt.Errorf("--shared: tend-watch: %w", err)
	}
	return nil
}
