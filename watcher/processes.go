package watcher

import (
	"syscall"

	"github.com/tendhq/tend/procfs"
	"golang.org/x/sys/unix"
)

// processes is the watcher's seam to its runs' processes: how it forks
// one, signals a run's group, learns that a leader exited and reaps it.
// A watcher uses the system's (systemProcesses). The state machine's race
// tests put in one that holds a step back (a signal unsent, an exit not
// yet told) so that two events come in the order the test chooses, fails
// a fork as the kernel can, or looks at the run as its leader is reaped,
// with real processes still (races_test.go); nothing else changes with it.
type processes struct {
	// fork forks sp, on one of the forker's threads.
	fork func(sp *spawn)
	// signal sends sig to process group pgid.
	signal func(pgid int, sig syscall.Signal) error
	// exited returns once h's process has exited, on a goroutine of the
	// run's own; the loop is told at once after.
	exited func(h *procfs.Handle) error
	// reap reaps h's process, once its end is recorded.
	reap func(h *procfs.Handle) error
}

// systemProcesses returns the system calls themselves.
func systemProcesses() processes {
	return processes{
		fork:   (*spawn).fork,
		signal: func(pgid int, sig syscall.Signal) error { return unix.Kill(-pgid, sig) },
		exited: (*procfs.Handle).WaitExited,
		reap: func(h *procfs.Handle) error {
			_, err := h.Reap()
			return err
		},
	}
}
