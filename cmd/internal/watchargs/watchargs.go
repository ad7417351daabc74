// Package watchargs is what tend and tend-watch, the watcher's program,
// agree on: the watcher's flags, as tend watch and tend up take them and
// pass them on, and the exit codes by which a watcher and its keeper say
// why they stopped (docs/protocol.md lists them).
package watchargs

import (
	"strconv"
	"time"
)

// Exit codes of tend-watch, which tend watch becomes: the same as every
// tend command's.
const (
	ExitFailed  = 1
	ExitUsage   = 2
	ExitRefused = 4 // another watcher or keeper runs on the root
	// ExitCannotStart is how the watcher tells its keeper that it cannot
	// start (watcher.ErrCannotStart); users see 1.
	ExitCannotStart = 78
)

// Flags are the watcher's settings, the same for tend watch, tend up and
// the watcher itself.
type Flags struct {
	Settle        time.Duration `help:"How long a request that does not parse must stay unchanged before it is rejected." default:"1s"`
	MaxRunning    int           `help:"How many runs may be live at once; more wait, queued (0: no limit). ROOT/config.json's max_running overrides it." default:"0"`
	MaxPerSession int           `name:"max-running-per-session" help:"How many live runs one session may hold (0: no limit). config.json: max_running_per_session." default:"0"`
	Durability    string        `enum:"power_loss,watcher_crash" default:"power_loss" help:"What a run's record survives once written: power_loss (fsynced) or watcher_crash (not fsynced: faster on disk, but a power loss may take records back). config.json: durability."`
}

// Args renders the flags for a watcher's command line.
func (f Flags) Args() []string {
	args := []string{"--settle", f.Settle.String(), "--max-running", strconv.Itoa(f.MaxRunning), "--max-running-per-session", strconv.Itoa(f.MaxPerSession)}
	if f.Durability != "" { // unset when a client starts the watcher: the default
		args = append(args, "--durability", f.Durability)
	}
	return args
}
