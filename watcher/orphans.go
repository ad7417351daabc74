package watcher

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/tendhq/tend/procfs"
	"github.com/tendhq/tend/tracker"
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
		if leaders[pid] || w.jobs.helper(pid) {
			continue // (an engine's command is reaped by its Wait)
		}
		// Read first: a purge's find, a zombie too, is known by its start
		// time, and a child that got the PID of one just reaped is not it.
		if st, err := procfs.ReadStat(pid); err == nil && st.State == 'Z' && !w.purges.helper(st) {
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
	w.purges.scanning() // a find that ends during the look is still known
	all, err := procfs.All()
	if err != nil {
		w.log.Printf("scanning /proc: %v", err)
		return
	}
	groups := make(map[int]*run)
	left := make(map[*run][]procfs.Stat)
	live := 0
	leaders := make(map[int]bool, len(w.runs))
	liveGroups := make(map[int]bool, len(w.runs))
	for _, r := range w.runs {
		leaders[r.st.PID] = true
		if r.exit != nil {
			if !r.pastBoot {
				groups[r.st.PGID] = r // a group of an earlier boot is another's now
			}
			left[r] = nil
		} else {
			live++
			liveGroups[r.st.PGID] = true
		}
	}
	keepers := make(map[int]bool)
	for _, p := range all {
		if p.Comm == tracker.KeeperComm {
			keepers[p.PID] = true
		}
	}
	// While processes of this root's runs may be outside this watcher's
	// tree (see lookForEscapes), every process is looked at; once none
	// is, only its and the keepers' children are again.
	escapes := w.escapes
	var ours map[int]bool // only the runs a watcher adopted can be outside
	if escapes || w.adoptedLive() {
		ours = w.descendants(all, keepers)
	}
	w.escapes = w.runsOutside(ours) > 0
	seen := make(map[int]bool)
	for _, p := range all {
		if p.State == 'Z' {
			continue
		}
		if r := groups[p.PGID]; r != nil {
			left[r] = append(left[r], p)
			continue
		}
		if leaders[p.PID] || p.PID == os.Getpid() || liveGroups[p.PGID] {
			continue
		}
		id, ok := w.strayOf(p, keepers, escapes)
		if !ok || w.jobs.helper(p.PGID) || w.purges.helper(p) {
			continue // (a cluster's command, such as sbatch, or a purge's find, is no run's)
		}
		if escapes && !ours[p.PID] {
			w.escapes = true // still outside: look again next time
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
// its own runs, and no stray is being ended. Only the orphans are read:
// the forker's threads start nothing but run leaders and purges' finds,
// which are no strays. Then the group of every run whose leader has
// exited is empty, and drain need not read all of /proc: a leader's
// descendants are its children's, which became this watcher's
// (a child subreaper) when it exited, before its exit was reported. Once
// at least one full pass has been made, that is: it finds what earlier
// watchers left, which are then the keeper's children or strays.
func (w *watcher) onlyLeadersLeft() bool {
	if !w.scanned || len(w.strays) > 0 || w.escapes {
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

// strayOf reports whether p, which is neither a run's leader nor in a
// group that tend signals, is a process of one of this root's runs, and
// of which ("" if it cannot tell). A process is known as this root's by
// its descent: a child of this watcher or of its own keeper can only have
// come from its runs; or, as a child of another keeper, by the mark it
// inherited (see MarkVar), or TEND_ROOT naming this root for a run
// started before marks (its TEND_RUN_ID is its run). While escapes are
// looked for, any process is, by its mark only: a client that is no run
// may name the root in its TEND_ROOT (scripts/e2e.sh does), and must not
// be taken for a stray.
func (w *watcher) strayOf(p procfs.Stat, keepers map[int]bool, escapes bool) (id string, ok bool) {
	own := p.PPID == os.Getpid() || w.keeper != 0 && p.PPID == w.keeper
	inTree := own || keepers[p.PPID]
	if !inTree && !escapes || p.PID <= 2 || p.PPID == 2 {
		return "", false // (init and the kernel's threads are no one's)
	}
	env, readable := procfs.Lookup(p.PID, w.mark, "TEND_ROOT", "TEND_RUN_ID")
	switch {
	case readable && env[0] != "":
		id = env[0]
	case readable && inTree && env[1] == w.cfg.Root:
		id = env[2]
	default:
		return "", own
	}
	if !w.mayOwn(p.PID, id) {
		// Its mark says another user's run: anyone can put a mark in an
		// environment, and a run's process that left its group (and
		// became this watcher's child) is taken for no run, not for the
		// one it names, whose end it would hold up.
		return "", own
	}
	return id, true
}

// mayOwn reports whether process pid, which carries run id's mark, runs
// as a user that run id's processes run as: the watcher's, or the run's
// owner. Anyone can put a mark in an environment; only a process it could
// have come from is taken for the run's.
func (w *watcher) mayOwn(pid int, id string) bool {
	fi, err := os.Lstat(fmt.Sprintf("/proc/%d", pid))
	if err != nil {
		return false
	}
	uid := int(fi.Sys().(*syscall.Stat_t).Uid)
	if uid == w.uid {
		return true
	}
	if r := w.runs[id]; r != nil {
		return r.st.OwnerUID == uid
	}
	st, err := w.store.Read(id)
	return err == nil && st.OwnerUID == uid
}

// descendants returns the processes in all that descend from this
// watcher or from a keeper: those whose parent, if it dies, leaves them to
// a tend process (a subreaper) rather than to init.
func (w *watcher) descendants(all []procfs.Stat, keepers map[int]bool) map[int]bool {
	parent := make(map[int]int, len(all))
	for _, p := range all {
		parent[p.PID] = p.PPID
	}
	ours := make(map[int]bool)
	self := os.Getpid()
	for _, p := range all {
		// At most as many steps as processes: a loop in a racy snapshot
		// of /proc must not hang the watcher.
		for pid, n := p.PPID, 0; pid > 1 && n < len(all); pid, n = parent[pid], n+1 {
			if pid == self || keepers[pid] {
				ours[p.PID] = true
				break
			}
		}
	}
	return ours
}

// lookForEscapes sets w.escapes if a process of this root's runs is
// outside the tree of this watcher and of the keepers: a parent of its
// died while no tend process was above it (the watcher and its keeper
// killed together, or the keeper after it had taken over a dead watcher's
// runs), so it went to init, where no subreaper hands it back. Drains
// then look at every process until none is left outside.
func (w *watcher) lookForEscapes() {
	all, err := procfs.All()
	if err != nil {
		w.log.Printf("scanning /proc: %v", err)
		return
	}
	keepers := make(map[int]bool)
	for _, p := range all {
		if p.Comm == tracker.KeeperComm {
			keepers[p.PID] = true
		}
	}
	ours := w.descendants(all, keepers)
	n := w.runsOutside(ours)
	groups := make(map[int]bool, len(w.runs))
	for _, r := range w.runs {
		groups[r.st.PGID] = true
	}
	for _, p := range all {
		if p.State == 'Z' || ours[p.PID] || p.PID == os.Getpid() || keepers[p.PID] || groups[p.PGID] {
			continue
		}
		if _, ok := w.strayOf(p, keepers, true); ok {
			n++
		}
	}
	if n > 0 {
		w.escapes = true
		w.log.Printf("recover: %d processes of this root's runs are outside the watcher's tree (their parents died while no watcher or keeper was above them): they are ended with their runs", n)
	}
}

// runsOutside counts the live runs whose leader is not in ours (see
// descendants): what they spawn and leave goes to init. Only an adopted
// run's leader can be outside.
func (w *watcher) runsOutside(ours map[int]bool) int {
	n := 0
	for _, r := range w.runs {
		if r.adopted && r.exit == nil && r.proc != nil && !ours[r.st.PID] {
			n++
		}
	}
	return n
}

// adoptedLive reports whether a run this watcher adopted is alive.
func (w *watcher) adoptedLive() bool {
	for _, r := range w.runs {
		if r.adopted && r.exit == nil {
			return true
		}
	}
	return false
}

// MarkVar returns the name of the environment variable that marks the
// processes of root's runs: TEND_MARK_ and 16 hex digits of root's
// SHA-256, set to the run's ID. Every process a run starts inherits it,
// whatever it does to TEND_ROOT or TEND_RUN_ID (a run that uses a tend
// root of its own), and only a process that exec's with an environment it
// built anew (env -i, su -, sudo) drops it. Each root has its own name, so
// a process started by a run of a root that is itself run by another
// root's run carries both roots' marks.
func MarkVar(root string) string {
	sum := sha256.Sum256([]byte(root))
	return "TEND_MARK_" + hex.EncodeToString(sum[:8])
}

// withoutMarks returns env without the marks of any root: a request's env
// (which tend start fills with its caller's environment) must not make a
// run pass for another root's.
func withoutMarks(env map[string]string) map[string]string {
	var out map[string]string
	for k, v := range env {
		if strings.HasPrefix(k, "TEND_MARK_") {
			continue
		}
		if out == nil {
			out = make(map[string]string, len(env))
		}
		out[k] = v
	}
	return out
}

// isKeeper reports whether process pid is a tend keeper.
func isKeeper(pid int) bool {
	if pid <= 1 {
		return false
	}
	st, err := procfs.ReadStat(pid)
	return err == nil && st.Comm == tracker.KeeperComm
}

// keeperPID returns the PID of the keeper above this watcher, or 0.
func keeperPID() int {
	if ppid := os.Getppid(); isKeeper(ppid) {
		return ppid
	}
	return 0
}
