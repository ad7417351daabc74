package watcher

import (
	"os"
	"runtime"
	"sync"

	"github.com/tendhq/tend/procfs"

	"golang.org/x/sys/unix"
)

// A forker starts every process of a watcher from OS threads of its own. A
// child is listed under the thread that created it (/proc/self/task/TID/
// children), and an orphan handed to the watcher as a subreaper under its
// first live thread, the main one (the kernel's find_new_reaper). So the
// runs are children of the forker's threads and orphans of the main
// thread's, and the watcher reads the main thread's list (orphans) at every
// exit, where reading every thread's list cost more than the rest of a
// run's bookkeeping.
//
// A fork holds its thread's P until the child has exec'd (a vfork is one
// system call, which the runtime does not hand the P off for): about 150 µs
// on an idle machine, 500 during a burst of starts. On the watcher's one P
// the loop stood still for every fork. So a forker has two threads, and
// while forks are pending it can raise GOMAXPROCS (see newForker): the
// loop, and a second fork, go on meanwhile. With none pending the watcher
// is back on its one P, where a second one would spin looking for work
// (docs/performance.md, rounds 3 and 10).
type forker struct {
	do   chan func()
	tids []int

	mu        sync.Mutex
	pending   int // forks queued or under way
	idleProcs int // GOMAXPROCS with none pending
	busyProcs int // GOMAXPROCS with some pending
}

const (
	// forkThreads is how many forks may be under way at once. Two did
	// best on two cores; three no better (round 10).
	forkThreads = 2
	// forkQueue is how many forks may wait for the forker's threads while
	// the loop goes on: more than a batch's flush takes (see flushEvery).
	forkQueue = 64
)

// newForker starts a forker's threads. If busyProcs is above GOMAXPROCS,
// GOMAXPROCS is busyProcs while forks are pending and back to what it was
// once none are (each change stops the world for some µs).
func newForker(busyProcs int) *forker {
	f := &forker{do: make(chan func(), forkQueue), idleProcs: runtime.GOMAXPROCS(0)}
	f.busyProcs = max(busyProcs, f.idleProcs)
	tid := make(chan int)
	for range forkThreads {
		go func() {
			// Never unlocked: the thread lives as long as the watcher, and
			// its children with it.
			runtime.LockOSThread()
			tid <- unix.Gettid()
			for fn := range f.do {
				fn()
				f.forked()
			}
		}()
		f.tids = append(f.tids, <-tid)
	}
	return f
}

// run calls fn on one of the forker's threads and returns when it has
// returned.
func (f *forker) run(fn func()) {
	<-f.start(fn)
}

// start has fn called on one of the forker's threads and returns at once;
// the channel is closed once fn returned. Calls start in the order they
// were made, and up to forkThreads at once.
func (f *forker) start(fn func()) <-chan struct{} {
	f.mu.Lock()
	if f.pending++; f.pending == 1 && f.busyProcs != f.idleProcs {
		runtime.GOMAXPROCS(f.busyProcs)
	}
	f.mu.Unlock()
	done := make(chan struct{})
	f.do <- func() {
		defer close(done)
		fn()
	}
	return done
}

// forked counts a call of start done.
func (f *forker) forked() {
	f.mu.Lock()
	if f.pending--; f.pending == 0 && f.busyProcs != f.idleProcs {
		runtime.GOMAXPROCS(f.idleProcs)
	}
	f.mu.Unlock()
}

// orphans returns the PIDs of the orphans handed to this process as a
// subreaper: the main thread's children. Those the forker started are not
// among them, unless one of the forker's threads is the main thread; they
// are all run leaders, which the watcher knows, so it need not list them: a
// storm of exits read both lists at every exit, 500 entries each time.
func (f *forker) orphans() ([]int, error) {
	return procfs.ThreadChildren(os.Getpid())
}
