package watcher

import (
	"syscall"

	"github.com/tendhq/tend/procfs"
)

// Hold says which of the watcher's steps on its runs' processes a race
// test holds back (see processes); nil: the system's.
type Hold struct {
	// Signal is called for each signal to a run's group, in its stead.
	Signal func(pgid int, sig syscall.Signal) error
	// Exited is called on a run's own goroutine with wait, which returns
	// once the run's leader exited; the loop is told when Exited returns.
	Exited func(wait func() error) error
	// Fork is called for each fork of run id's process, on the forker's
	// thread, with the fork itself; an error returned without calling it
	// is the fork's (EAGAIN: the user's process limit, say).
	Fork func(id string, fork func() error) error
	// Reap is called for each reap of a run's leader, once its end is
	// recorded, with the reap itself.
	Reap func(reap func() error) error
}

// RunHolding is Run, with the steps hold names held back.
func RunHolding(cfg Config, hold Hold) error {
	p := systemProcesses()
	if hold.Signal != nil {
		p.signal = hold.Signal
	}
	if hold.Exited != nil {
		wait := p.exited
		p.exited = func(h *procfs.Handle) error { return hold.Exited(func() error { return wait(h) }) }
	}
	if hold.Fork != nil {
		fork := p.fork
		p.fork = func(sp *spawn) {
			forked := false
			err := hold.Fork(sp.st.ID, func() error { forked = true; fork(sp); return sp.err })
			if !forked {
				sp.err = err
				sp.closeFiles()
			}
		}
	}
	if hold.Reap != nil {
		reap := p.reap
		p.reap = func(h *procfs.Handle) error { return hold.Reap(func() error { return reap(h) }) }
	}
	cfg.processes = p
	return Run(cfg)
}

// RunClaiming is Run, with claiming called with the spool name of each
// queued run's request the watcher has read to start it, before it
// claims it.
func RunClaiming(cfg Config, claiming func(name string)) error {
	cfg.claiming = claiming
	return Run(cfg)
}
