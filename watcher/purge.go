package watcher

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// purges removes the directories of deleted runs beside the loop, a few
// at a time, and ends what is under way when the watcher stops.
type purges struct {
	running chan struct{} // a slot for each purge under way
	ctx     context.Context
	stop    context.CancelFunc
}

// purgesAtOnce is how many deleted runs' directories are removed at once:
// a `tend rm --all` of thousands must not start thousands of processes.
const purgesAtOnce = 2

func newPurges() purges {
	ctx, stop := context.WithCancel(context.Background())
	return purges{running: make(chan struct{}, purgesAtOnce), ctx: ctx, stop: stop}
}

// purge removes trash, the renamed directory of deleted run id, beside the
// loop (see removeTree). One that the watcher stops before it is done
// stays in runs/, for the next watcher to remove (finishDeletions).
func (w *watcher) purge(id, trash string) {
	w.purging.Go(func() {
		select {
		case w.purges.running <- struct{}{}:
		case <-w.purges.ctx.Done():
			return
		}
		defer func() { <-w.purges.running }()
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
	cmd := exec.CommandContext(w.purges.ctx, "find", "/proc/self/fd/3/", "-mindepth", "1", "-delete")
	cmd.Path = findPath
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
	cmd.ExtraFiles = []*os.File{dir}
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	if int(owner.Uid) != w.uid && w.uid == 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: owner.Uid, Gid: owner.Gid}
	}
	var out bytes.Buffer
	cmd.Stderr = &out
	w.forker.run(func() { err = cmd.Start() }) // on the forker's thread: see forker
	if err == nil {
		err = cmd.Wait()
	}
	if rmErr := unix.Rmdir(trash); rmErr == nil || errors.Is(rmErr, fs.ErrNotExist) {
		return nil
	}
	return fmt.Errorf("%s: not removed as uid %d: %v: %.200s", trash, owner.Uid, err, bytes.TrimSpace(out.Bytes()))
}

// findPath is find(1)'s, where every Linux distribution has it.
const findPath = "/usr/bin/find"
