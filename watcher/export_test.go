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
	cfg.processes = p
	return Run(cfg)
}
