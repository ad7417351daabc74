package watcher

import (
	"os"
	"runtime"

	"github.com/tendhq/tend/procfs"

	"golang.org/x/sys/unix"
)

// A forker starts every process of a watcher from one OS thread. A child
// is listed under the thread that created it (/proc/self/task/TID/
// children), and an orphan handed to the watcher as a subreaper under its
// first live thread, the main one (the kernel's find_new_reaper). So the
// runs and health checks are children of the forker's thread, orphans of
// the main thread's, and two /proc files list them all (children): the
// watcher reads them at every exit, where reading every thread's list cost
// more than the rest of a run's bookkeeping.
type forker struct {
	do  chan func()
	tid int
}

func newForker() *forker {
	f := &forker{do: make(chan func())}
	tid := make(chan int)
	go func() {
		// Never unlocked: the thread lives as long as the watcher, and its
		// children with it.
		runtime.LockOSThread()
		tid <- unix.Gettid()
		for fn := range f.do {
			fn()
		}
	}()
	f.tid = <-tid
	return f
}

// run calls fn on the forker's thread and returns when it has returned.
func (f *forker) run(fn func()) {
	done := make(chan struct{})
	f.do <- func() {
		defer close(done)
		fn()
	}
	<-done
}

// children returns the PIDs of this process's children: those the forker
// started, and the orphans it adopted.
func (f *forker) children() ([]int, error) {
	kids, err := procfs.ThreadChildren(f.tid)
	if err != nil || f.tid == os.Getpid() {
		return kids, err
	}
	orphans, err := procfs.ThreadChildren(os.Getpid())
	return append(kids, orphans...), err
}
