package watcher

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tendhq/tend/procfs"
	"github.com/tendhq/tend/spool"

	"golang.org/x/sys/unix"
)

// purges removes the directories of deleted runs beside the loop, one at
// a time for each owner, and ends what is under way when the watcher
// stops.
type purges struct {
	ctx  context.Context
	stop context.CancelFunc

	mu    sync.Mutex
	slots map[int]chan struct{} // by owner: a purge runs as its owner, who may stop it
	// finds are the find(1) processes under way, their start times by
	// PID: children of the watcher that are no run's, which drain must
	// not end as strays nor reapOrphans reap from under their Wait. The
	// start time tells a process that got the PID of one reaped since.
	finds map[int]uint64
	// ended are the finds reaped since the last look through /proc
	// began: that look may have listed one still running, and asks
	// about it only after (see scanning).
	ended map[int]uint64
}

// maxEndedFinds bounds purges.ended between two looks through /proc.
const maxEndedFinds = 1024

// purgeTimeout is the longest a purge may take: the rest is left for the
// next watcher (400,000 files took 12 s).
const purgeTimeout = 10 * time.Minute

func newPurges() purges {
	ctx, stop := context.WithCancel(context.Background())
	return purges{ctx: ctx, stop: stop, slots: make(map[int]chan struct{}),
		finds: make(map[int]uint64), ended: make(map[int]uint64)}
}

// slot returns the slot of owner's purges: one at a time each, so that a
// `tend rm --all` of thousands does not start thousands of processes, and
// an owner who stops theirs (it runs as them) holds up only their own.
func (p *purges) slot(owner int) chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.slots[owner] == nil {
		p.slots[owner] = make(chan struct{}, 1)
	}
	return p.slots[owner]
}

// start starts cmd, a purge's find, and notes its PID and start time
// before any drain or reapOrphans can see it (they wait for the lock
// held here).
func (p *purges) start(cmd *exec.Cmd) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := cmd.Start(); err != nil {
		return err
	}
	var start uint64 // 0, known by its PID alone, if its stat cannot be read
	// A child's stat can be read until it is reaped, which only wait does.
	if st, err := procfs.ReadStat(cmd.Process.Pid); err == nil {
		start = st.StartTime
	}
	p.finds[cmd.Process.Pid] = start
	return nil
}

// wait waits for cmd, started by start, and forgets its PID once the
// next look through /proc begins.
func (p *purges) wait(cmd *exec.Cmd) error {
	err := cmd.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	pid := cmd.Process.Pid
	if len(p.ended) >= maxEndedFinds {
		// No look through /proc lasts while so many finds end (one an
		// owner at a time): a watcher that has not looked since (only
		// its leaders were its children) need not keep them all.
		clear(p.ended)
	}
	p.ended[pid] = p.finds[pid]
	delete(p.finds, pid)
	return err
}

// scanning is called before a look through /proc whose processes are
// then passed to helper: the finds reaped before it cannot be in it.
func (p *purges) scanning() {
	p.mu.Lock()
	defer p.mu.Unlock()
	clear(p.ended)
}

// helper reports whether process proc is a purge's find, under way or
// reaped since the last call of scanning. Its PID alone is enough for a
// child not reaped yet (see reapOrphans).
func (p *purges) helper(proc procfs.Stat) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	same := func(start uint64) bool {
		return start == 0 || proc.StartTime == 0 || start == proc.StartTime
	}
	if start, ok := p.finds[proc.PID]; ok {
		return same(start)
	}
	// A reaped find's PID may be a new child's: only its start time tells.
	start, ok := p.ended[proc.PID]
	return ok && start != 0 && start == proc.StartTime
}

// purgesGrace is how long a watcher that stops lets its purges go on: a
// purge as its owner may last as long as they keep filling the directory.
const purgesGrace = 5 * time.Second

// finishPurges waits for the purges under way or due, for purgesGrace at
// most, then ends them: what is left is the next watcher's.
func (w *watcher) finishPurges() {
	done := make(chan struct{})
	go func() {
		w.purging.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(purgesGrace):
	}
	w.purges.stop()
	<-done
}

// purge removes trash, the renamed directory of owner's deleted run id,
// beside the loop (see removeTree). One that the watcher stops before it
// is done, or that takes longer than purgeTimeout, stays in runs/, for
// the next watcher to remove (finishDeletions).
func (w *watcher) purge(id, trash string, owner int) {
	slot := w.purges.slot(owner)
	w.purging.Go(func() {
		select {
		case slot <- struct{}{}:
		case <-w.purges.ctx.Done():
			return
		}
		defer func() { <-slot }()
		if err := w.removeTree(trash); err != nil {
			w.log.Printf("run %s: %v", id, err)
		}
	})
}

// removeTree removes trash and what it holds. What it holds is its
// owner's, who may have filled it with anything: a tree deeper than the
// watcher has descriptors for (os.RemoveAll holds one a level, and a
// watcher out of them starts no run), files made as fast as they go
// (which keeps it removing for as long as they come). So find(1) removes
// them, as the directory's owner, in a process of its own: with that
// user's rights, descriptors and time, and killed when the watcher stops.
// It is handed the directory open (the way to it may be closed to that
// user). Then the watcher removes the directory itself, which only it
// may, from runs/; one its owner keeps filling, or holding what it may
// not remove, stays there.
func (w *watcher) removeTree(trash string) error {
	fd, err := unix.Open(trash, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
		return os.Remove(trash)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", trash, err)
	}
	dir := os.NewFile(uintptr(fd), trash)
	defer dir.Close()
	var owner unix.Stat_t
	if err := unix.Fstat(fd, &owner); err != nil {
		return fmt.Errorf("%s: %w", trash, err)
	}
	if owner.Uid == 0 {
		// Its request's last name of its own: a hard link to it, made
		// while it waited in the spool, is no request of root's once
		// the run is gone. Spent before the removal: a watcher that
		// stops in between leaves the directory for the next one,
		// which spends it again; nothing reads a deleted run's request.
		spool.SpendAt(fd, "request")
	}
	ctx, cancel := context.WithTimeout(w.purges.ctx, purgeTimeout)
	defer cancel()
	// By its full path: a name is looked up in the watcher's PATH, whose
	// failure exec.Cmd keeps for Start whatever Path says after.
	find := firstProgram(findPaths)
	if find == "" {
		return fmt.Errorf("%s: not removed: no find(1) at %s", trash, strings.Join(findPaths, " or "))
	}
	cmd := exec.CommandContext(ctx, find, "/proc/self/fd/3/", "-mindepth", "1", "-delete")
	cmd.WaitDelay = time.Second // what it started, or a tracer, may hold its stderr
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
	cmd.ExtraFiles = []*os.File{dir}
	// In a session of its own: in the watcher's, a process its owner
	// takes over (ptrace: it is theirs once exec'd) would have the
	// watcher's terminal, if it has one, and could SIGCONT what is
	// stopped there.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if int(owner.Uid) != w.uid && w.uid == 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: owner.Uid, Gid: owner.Gid}
	}
	out := &headWriter{max: 512} // a line for each entry it could not remove
	cmd.Stderr = out
	w.forker.run(func() { err = w.purges.start(cmd) }) // on the forker's thread: see forker
	if err == nil {
		err = w.purges.wait(cmd)
	}
	if rmErr := unix.Rmdir(trash); rmErr == nil || errors.Is(rmErr, fs.ErrNotExist) {
		return nil
	}
	return fmt.Errorf("%s: not removed as uid %d: %v: %.200s", trash, owner.Uid, err, bytes.TrimSpace(out.b))
}

// A headWriter keeps the first max bytes written to it, and drops the
// rest: what a child of another user's writes is as long as they make it.
type headWriter struct {
	b   []byte
	max int
}

func (h *headWriter) Write(p []byte) (int, error) {
	if room := h.max - len(h.b); room > 0 {
		h.b = append(h.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// findPaths are where Linux distributions put find(1): /usr/bin, and
// /bin on those that have not merged /usr (older Debian, some minimal
// images). Never looked up in PATH: the watcher runs it as root.
var findPaths = []string{"/usr/bin/find", "/bin/find"}

// firstProgram returns the first of paths that is an executable regular
// file, "" if none is.
func firstProgram(paths []string) string {
	for _, p := range paths {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p
		}
	}
	return ""
}
