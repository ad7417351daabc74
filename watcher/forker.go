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
// runs are children of the forker's thread and orphans of the main
// thread's, and the watcher reads the main thread's list (orphans) at every
// exit, where reading every thread's list cost more than the rest of a
// run's bookkeeping.
type forker struct {
	do  chan func()
	tid int
}

// forkQueue is how many forks may wait for the forker's thread while the
// loop goes on: more than a batch's flush takes (see flushEvery).
const forkQueue = 64

func newForker() *forker {
	f := &forker{do: make(chan func(), forkQueue)}
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
	<-f.start(fn)
}

// start has fn called on the forker's thread, after the calls started
// before it, and returns at once; the channel is closed once fn returned.
func (f *forker) start(fn func()) <-chan struct{} {
	done := make(chan struct{})
	f.do <- func() {
		defer close(done)
		fn()
	}
	return done
}

// orphans returns the PIDs of the orphans handed to this process as a
// subreaper: the main thread's children. Those the forker started are not
// among them, unless the forker's thread is the main thread; they are all
// run leaders, which the watcher knows, so it need not list them: a storm
// of exits read both lists at every exit, 500 entries each time.
func (f *forker) orphans() ([]int, error) {
	return procfs.ThreadChildren(os.Getpid())
}
