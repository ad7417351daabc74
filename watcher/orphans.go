package watcher

import (
	"os"
	"syscall"
	"time"

	"github.com/tendhq/tend/procfs"
)

// A watcher is a child subreaper: a process that leaves its run's group
// (setsid, a double fork) becomes the watcher's child when its parent
// dies. Such a process is a stray once its run has ended (or is ending):
// it gets SIGTERM, and SIGKILL when the run's grace is over. Its run is
// known by the TEND_RUN_ID it inherited; one that dropped it is ended once
// no run is alive. After a watcher crash the same processes are children
// of the keeper, and the next watcher looks there too.

// stray is a process being ended because it outlived its run.
type stray struct {
	start  uint64 // its start time, so a reused PID is not taken for it
	run    string
	killAt time.Time
}

// reapOrphans reaps the watcher's children that have exited and are not
// run leaders (those are reaped by their pidfd, once their group is empty).
func (w *watcher) reapOrphans() {
	kids, err := w.forker.orphans()
	if err != nil {
		w.log.Printf("listing children: %v", err)
		return
	}
	if len(kids) == 0 {
		return // the usual case, at every exit of a run
	}
	leaders := w.ownLeaders()
	for _, pid := range kids {
		if leaders[pid] {
			continue
		}
		if st, err := procfs.ReadStat(pid); err == nil && st.State == 'Z' {
			procfs.ReapChild(pid)
		}
	}
}

// ownLeaders returns the PIDs of the leaders of runs that are this
// watcher's children.
func (w *watcher) ownLeaders() map[int]bool {
	leaders := make(map[int]bool, len(w.runs))
	for _, r := range w.runs {
		if !r.adopted {
			leaders[r.st.PID] = true
		}
	}
	return leaders
}

// drain checks every run whose leader has exited: those with no process
// left, in their group or strayed from it, are finished; the others'
// processes are signaled and checked again. Strays of runs already gone
// are ended too. One pass over /proc serves them all, and at most one
// re-check is scheduled at a time, whoever asks.
func (w *watcher) drain() {
	// A run being forked would be a stray: its process is the watcher's
	// child, named by its environment, in no run.
	w.settleSpawns()
	if w.onlyLeadersLeft() {
		left := make(map[*run][]procfs.Stat)
		for _, r := range w.runs {
			if r.exit != nil {
				left[r] = nil
			}
		}
		w.drainGroups(left)
		return
	}
	w.scanned = true
	all, err := procfs.All()
	if err != nil {
		w.log.Printf("scanning /proc: %v", err)
		return
	}
	groups := make(map[int]*run)
	left := make(map[*run][]procfs.Stat)
	live := 0
	leaders := make(map[int]bool, len(w.runs))
	for _, r := range w.runs {
		leaders[r.st.PID] = true
		if r.exit != nil {
			groups[r.st.PGID] = r
			left[r] = nil
		} else {
			live++
		}
	}
	keepers := make(map[int]bool)
	for _, p := range all {
		if p.Comm == KeeperComm {
			keepers[p.PID] = true
		}
	}
	seen := make(map[int]bool)
	for _, p := range all {
		if p.State == 'Z' {
			continue
		}
		if r := groups[p.PGID]; r != nil {
			left[r] = append(left[r], p)
			continue
		}
		if leaders[p.PID] || p.PID == os.Getpid() {
			continue
		}
		id, ok := w.strayOf(p, keepers)
		if !ok {
			continue
		}
		r := w.runs[id]
		if r != nil && r.exit == nil || id == "" && live > 0 {
			continue // its run goes on
		}
		seen[p.PID] = true
		w.endStray(p, id, r)
		if r != nil {
			left[r] = append(left[r], p)
		}
	}
	for pid := range w.strays {
		if !seen[pid] {
			delete(w.strays, pid)
		}
	}
	w.drainGroups(left)
	if len(w.strays) > 0 || w.anyDraining() {
		w.drainAgain()
	}
}

// onlyLeadersLeft reports whether every child of this watcher leads one of
// its own runs (the forker's thread starts nothing else, so only the
// orphans are read), and no stray is being ended. Then the group of every run
// whose leader has exited is empty, and drain need not read all of /proc:
// a leader's descendants are its children's, which became this watcher's
// (a child subreaper) when it exited, before its exit was reported. Once
// at least one full pass has been made, that is: it finds what earlier
// watchers left, which are then the keeper's children or strays.
func (w *watcher) onlyLeadersLeft() bool {
	if !w.scanned || len(w.strays) > 0 {
		return false
	}
	for _, r := range w.runs {
		if r.exit != nil && r.adopted {
			return false // its members are not this watcher's children
		}
	}
	kids, err := w.forker.orphans()
	if err != nil {
		return false
	}
	leaders := w.ownLeaders()
	for _, pid := range kids {
		if !leaders[pid] {
			return false
		}
	}
	return true
}

// drainGroups finishes the runs in left that have no process left, and
// signals the group of each other one.
func (w *watcher) drainGroups(left map[*run][]procfs.Stat) {
	now := time.Now()
	var done []*run
	for r, procs := range left {
		if len(procs) == 0 {
			done = append(done, r)
			continue
		}
		if !r.termSent {
			w.log.Printf("run %s: leader exited, %d of its processes remain: SIGTERM", r.st.ID, len(procs))
			w.signalLeft(r, procs, syscall.SIGTERM)
			r.termSent = true
		}
		if !now.Before(r.killAt) {
			w.signalLeft(r, procs, syscall.SIGKILL)
		}
	}
	// Runs that end together are recorded together (see batch).
	w.batched(func() {
		for _, r := range done {
			w.finish(r)
		}
	})
}

func (w *watcher) signalLeft(r *run, procs []procfs.Stat, sig syscall.Signal) {
	if r.adopted {
		w.signalMembers(r, procs, sig)
	} else {
		w.signalGroup(r, sig)
	}
}

// endStray sends stray p SIGTERM when first seen, and SIGKILL once its
// run's grace is over.
func (w *watcher) endStray(p procfs.Stat, id string, r *run) {
	s := w.strays[p.PID]
	if s == nil || s.start != p.StartTime {
		s = &stray{start: p.StartTime, run: id, killAt: time.Now().Add(defaultGrace)}
		if r != nil {
			s.killAt = r.killAt
		}
		w.strays[p.PID] = s
		w.log.Printf("run %s: pid %d (%s) left its process group and outlived the run: SIGTERM", orNone(id), p.PID, p.Comm)
		signalProcess(p, syscall.SIGTERM)
	}
	if !time.Now().Before(s.killAt) {
		signalProcess(p, syscall.SIGKILL)
	}
}

func orNone(id string) string {
	if id == "" {
		return "(unknown)"
	}
	return id
}

func (w *watcher) anyDraining() bool {
	for _, r := range w.runs {
		if r.exit != nil {
			return true
		}
	}
	return false
}

func (w *watcher) drainAgain() { w.drainAgainIn(20 * time.Millisecond) }

// drainAgainIn schedules a drain after d, unless one is scheduled already.
func (w *watcher) drainAgainIn(d time.Duration) {
	if w.draining {
		return
	}
	w.draining = true
	w.after(d, func() {
		w.draining = false
		w.drain()
	})
}

// strayOf reports whether p, which is no run's leader, is an orphan from
// one of this root's runs, and which: a child of this watcher or of a keeper
// whose environment names this root. Only this watcher's and its own
// keeper's children may name no run (their run is then "").
func (w *watcher) strayOf(p procfs.Stat, keepers map[int]bool) (id string, ok bool) {
	own := p.PPID == os.Getpid() || w.keeper != 0 && p.PPID == w.keeper
	if !own && !keepers[p.PPID] {
		return "", false
	}
	root, _ := procfs.Getenv(p.PID, "TEND_ROOT")
	switch {
	case root == w.cfg.Root:
		id, _ = procfs.Getenv(p.PID, "TEND_RUN_ID")
		return id, true
	case root == "" && own:
		return "", true
	}
	return "", false
}

// isKeeper reports whether process pid is a tend keeper.
func isKeeper(pid int) bool {
	if pid <= 1 {
		return false
	}
	st, err := procfs.ReadStat(pid)
	return err == nil && st.Comm == KeeperComm
}

// keeperPID returns the PID of the keeper above this watcher, or 0.
func keeperPID() int {
	if ppid := os.Getppid(); isKeeper(ppid) {
		return ppid
	}
	return 0
}
