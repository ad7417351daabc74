// Package crashfs is a file system for tests that forgets, at a power
// cut, what was not made durable: a FUSE pass-through over a backing
// directory that tracks, by the rules POSIX gives and ext4 honours at
// minimum, what a disk would hold if the power went out now.
//
//   - A file's contents, size and metadata are durable once the file is
//     fsynced (or fdatasynced), as they were then.
//   - A directory entry (create, link, unlink, rename, mkdir, rmdir) is
//     durable once its directory is fsynced; a rename's two halves each
//     with its own directory.
//   - What was on the backing directory when it was mounted is durable.
//
// A cut (Freeze, or CutAtFlush at a given flush) fixes what the disk
// holds; Image then writes it: with Strict, only what was durable; with
// Reordered, that and a random subset of the rest, as a real file system
// writes some unsynced work on its own, in any order.
//
// syncfs(2) and sync(2) reach no FUSE server (the kernel sends SYNCFS to
// virtiofs alone), so the simulator cannot see them: a program that relies
// on them, rather than on fsync, is reported as losing data. tend does not.
//
// Only tests import this package; it mounts with mount(2) itself, so it
// needs root (see Prepare).
package crashfs

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// FS is a mounted crash-simulating file system.
type FS struct {
	backing, mnt string
	server       *fuse.Server
	conn         uint32 // the FUSE connection's number (in /sys/fs/fuse/connections)

	// mu orders every change: the backing file system's and the model's
	// are made together, so the model sees them in the order they were
	// made.
	mu      sync.Mutex
	m       *model
	frozen  bool
	flushes []Flush
	plan    *cutPlan
	marks   int
	markSeq uint64 // the sequence number of the last mark
	delay   time.Duration
	slow    func(Flush) bool // the flushes that take slowFor (SetSlowFlushes)
	slowFor time.Duration
	onFlush func(Flush)
	// replacesKeepData: see SetReplacesKeepData.
	replacesKeepData bool
}

// SetReplacesKeepData has the next Image keep, whatever its model, the
// data of a file that a rename put in place of another file, as it was
// at that rename, where the cut keeps the rename or a sync of its
// directory made it durable: what ext4 in data=ordered (auto_da_alloc)
// writes before it commits such a rename, in whichever commit. A watcher that finds such a file
// system (procfs.OrdersNewData) relies on it for the records of ends,
// which it does not flush; off, a cut may keep the name without the data,
// as POSIX allows.
func (f *FS) SetReplacesKeepData(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.replacesKeepData = on
}

// A Flush is one fsync, fdatasync or directory fsync the file system
// served.
type Flush struct {
	Path string // relative to the mount
	Dir  bool
}

func (f Flush) String() string {
	if f.Dir {
		return "fsync dir " + f.Path
	}
	return "fsync " + f.Path
}

// cutPlan is a cut to make at a flush.
type cutPlan struct {
	at        int              // the flush's number, from 1; 0: after a mark
	after     bool             // after it is durable, else before
	afterMark int              // for at 0: before the afterMark-th flush after the mark (0: at it)
	match     func(Flush) bool // if set (and at 0): before the first flush it matches
	marked    bool             // a mark came (for at 0)
	seen      int              // flushes since
	done      chan struct{}
}

// MarkXattr is the extended attribute whose lookup (getxattr) on a file
// or directory of the mount marks the place of a flush a test build left
// out (see spool's tendmutants build): CutAfterMark cuts there, and the
// AfterMark model keeps what came after it and not what came before, the
// order that flush would have enforced.
const MarkXattr = "user.crashfs.skipped"

// Mount serves a crash-simulating pass-through of the directory backing
// at mnt (both must exist). Everything in backing is durable to begin
// with.
func Mount(backing, mnt string) (*FS, error) {
	backing, err := filepath.Abs(backing)
	if err != nil {
		return nil, err
	}
	f := &FS{backing: backing, mnt: mnt, m: newModel()}
	if err := f.m.scan(backing); err != nil {
		return nil, fmt.Errorf("crashfs: %w", err)
	}
	root := &fs.LoopbackRoot{Path: backing, NewNode: f.newNode}
	var st unix.Stat_t
	if err := unix.Stat(backing, &st); err != nil {
		return nil, &os.PathError{Op: "stat", Path: backing, Err: err}
	}
	root.Dev = st.Dev
	root.RootNode = f.newNode(root, nil, "", nil)
	// Attributes and names are cached by the kernel briefly: every change
	// goes through this mount, so the kernel knows of each.
	second := time.Second
	server, err := fs.Mount(mnt, root.RootNode, &fs.Options{
		EntryTimeout: &second, AttrTimeout: &second, NegativeTimeout: &second,
		MountOptions: fuse.MountOptions{
			AllowOther:        true,
			DirectMountStrict: true,
			FsName:            backing,
			Name:              "crashfs",
			// Reads and writes must reach this server, not the backing file.
			DisabledCapabilities: fuse.CAP_PASSTHROUGH,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("crashfs: mounting %s on %s: %w", backing, mnt, err)
	}
	f.server = server
	closeOnExec()
	var mst unix.Stat_t
	if err := unix.Stat(mnt, &mst); err == nil {
		f.conn = unix.Minor(mst.Dev)
	}
	return f, nil
}

// closeOnExec marks this process's descriptors of /dev/fuse close-on-exec:
// go-fuse opens it without O_CLOEXEC, so every process the test starts
// would hold the connection open, and one that exits with a file of the
// mount open would wait forever for a server that is gone.
func closeOnExec() {
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, e := range ents {
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && target == "/dev/fuse" {
			var fd int
			if _, err := fmt.Sscan(e.Name(), &fd); err == nil {
				unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC)
			}
		}
	}
}

// Unmount unmounts the file system. If something still uses it, it is
// detached (a lazy unmount) and its connection aborted: whatever waits on
// it gets an error rather than waiting forever, as a process that exits
// with a file of its own mount open would.
func (f *FS) Unmount() error {
	if f.server == nil {
		return nil
	}
	err := f.server.Unmount()
	if err != nil {
		err = unix.Unmount(f.mnt, unix.MNT_DETACH)
		f.abort()
	}
	f.server.Wait()
	f.server = nil
	return err
}

// abort aborts the mount's FUSE connection.
func (f *FS) abort() {
	const conns = "/sys/fs/fuse/connections"
	dir := filepath.Join(conns, fmt.Sprint(f.conn))
	if _, err := os.Stat(dir); err != nil {
		unix.Mount("none", conns, "fusectl", 0, "") // mounted already, most often
	}
	os.WriteFile(filepath.Join(dir, "abort"), []byte("1"), 0)
}

// Flushes returns the flushes served so far, in order.
func (f *FS) Flushes() []Flush {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Flush(nil), f.flushes...)
}

// CutAtFlush arranges a cut at the n-th flush (counted from the mount,
// from 1): before it is made durable (it fails with EIO) or, if after is
// set, once it is. The returned channel is closed at the cut.
func (f *FS) CutAtFlush(n int, after bool) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.plan = &cutPlan{at: n, after: after, done: make(chan struct{})}
	return f.plan.done
}

// CutAtFlushOf arranges a cut before the first flush that match reports
// true for (called with the file system's lock held) is made durable. The
// returned channel is closed at the cut.
func (f *FS) CutAtFlushOf(match func(Flush) bool) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.plan = &cutPlan{match: match, done: make(chan struct{})}
	return f.plan.done
}

// CutAfterFlushOf is CutAtFlushOf, with the cut made once that flush
// is durable: what another flush in flight meanwhile had not yet made
// durable is not.
func (f *FS) CutAfterFlushOf(match func(Flush) bool) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.plan = &cutPlan{match: match, after: true, done: make(chan struct{})}
	return f.plan.done
}

// OnFlush has seen called at the start of every flush from now on (nil:
// none), before it is made durable, with the file system's lock held: it
// must not call the file system's methods, but may call Freeze from
// another goroutine.
func (f *FS) OnFlush(seen func(Flush)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.onFlush = seen
}

// CutAfterMark arranges a cut at the k-th flush after the next mark (see
// MarkXattr), before it is made durable, or at the mark itself if k is
// 0 (while flushes that came before it may still be under way). The
// returned channel is closed at the cut.
func (f *FS) CutAfterMark(k int) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.plan = &cutPlan{afterMark: max(k, 0), done: make(chan struct{})}
	return f.plan.done
}

// Disarm cancels a cut arranged and not made.
func (f *FS) Disarm() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.plan = nil
}

// Marks returns how many marks the file system has seen.
func (f *FS) Marks() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.marks
}

// Freeze cuts the power, as the disk sees it: what it holds is fixed from
// now on, and every change fails with EIO. Reads go on, from what the
// processes saw before the cut.
func (f *FS) Freeze() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.freezeLocked()
}

func (f *FS) freezeLocked() {
	f.frozen = true
	if f.plan != nil {
		close(f.plan.done)
		f.plan = nil
	}
}

// Frozen reports whether the power has been cut.
func (f *FS) Frozen() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.frozen
}

// Image writes what the disk holds after the cut, by model m, into dst,
// which must not exist (rng chooses what Reordered keeps). It is the
// backing directory a next mount starts from.
func (f *FS) Image(dst string, m Model, rng *rand.Rand) (ImageStats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.frozen {
		return ImageStats{}, errors.New("crashfs: no cut yet: Freeze first")
	}
	keep := keepNone
	switch m {
	case Reordered:
		keep = keepSome(rng, []float64{0.1, 0.5, 0.9}[rng.IntN(3)])
	case AfterMark:
		last := f.markSeq
		keep = func(o *op) bool { return o.seq > last }
	case NamesFirst:
		keep = keepNames
	}
	if f.replacesKeepData {
		keep = f.m.replacesKeepData(keep)
	}
	if err := os.Mkdir(dst, 0o700); err != nil {
		return ImageStats{}, err
	}
	stats, err := f.m.write(dst, keep)
	if err != nil {
		return stats, fmt.Errorf("crashfs: writing the image to %s: %w", dst, err)
	}
	return stats, nil
}

// change runs a change of the backing file system, and what the model
// learns of it, under f.mu; after a cut it fails with EIO and changes
// nothing.
func (f *FS) change(do func() syscall.Errno) syscall.Errno {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.frozen {
		return syscall.EIO
	}
	return do()
}

// idOf returns the model's id of the inode at backing path p, making it
// known (as durable as it is now) if the model has not seen it.
func (f *FS) idOf(p string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return 0, err
	}
	if id, ok := f.m.ids[st.Ino]; ok {
		return id, nil
	}
	c, err := readLive(p, &st, f.m.ids)
	if err != nil {
		return 0, err
	}
	return f.m.create(st.Ino, c), nil
}

// created records the new inode at name in directory dir (a backing
// path): durable as it is now (empty) once it is synced, named once dir
// is.
func (f *FS) created(dir, name string) {
	p := filepath.Join(dir, name)
	var st unix.Stat_t
	if unix.Lstat(p, &st) != nil {
		return
	}
	dirID, err := f.idOf(dir)
	if err != nil {
		return
	}
	c, err := readLive(p, &st, nil)
	if err != nil {
		return
	}
	id := f.m.create(st.Ino, c)
	f.m.push(dirID, op{seq: f.m.tick(), kind: opAdd, name: name, id: id})
}

// flush serves an fsync of the inode at backing path p (rel to the
// mount), and makes a planned cut. What it makes durable is the inode as
// it was when the fsync came; it takes the disk's time (SetFlushDelay)
// before it is, and a cut meanwhile takes it back.
func (f *FS) flush(p string, id uint64, dir bool) syscall.Errno {
	f.mu.Lock()
	if f.frozen {
		f.mu.Unlock()
		return syscall.EIO
	}
	rel, _ := filepath.Rel(f.backing, p)
	f.flushes = append(f.flushes, Flush{Path: rel, Dir: dir})
	if f.onFlush != nil {
		f.onFlush(f.flushes[len(f.flushes)-1])
	}
	planned := false
	if pl := f.plan; pl != nil {
		if pl.match != nil {
			planned = pl.match(f.flushes[len(f.flushes)-1])
		} else if pl.at == 0 && pl.marked {
			pl.seen++
			planned = pl.seen >= pl.afterMark
		} else {
			planned = pl.at == len(f.flushes)
		}
	}
	if planned && !f.plan.after {
		f.freezeLocked()
		f.mu.Unlock()
		return syscall.EIO
	}
	c, seq := f.snapshot(p, id), f.m.seq
	delay := f.delay
	if f.slow != nil && f.slow(f.flushes[len(f.flushes)-1]) {
		delay = f.slowFor
	}
	f.mu.Unlock()
	if delay > 0 {
		time.Sleep(delay)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.frozen {
		return syscall.EIO // the power went while the disk worked
	}
	if n := f.m.nodes[id]; n != nil && c != nil {
		n.durable = c
		var later []op
		for _, o := range n.pending {
			switch {
			case o.seq > seq:
				later = append(later, o)
			case o.kind == opAdd && o.replaces:
				f.m.noteReplaced(o)
			}
		}
		n.pending = later
	}
	if planned {
		f.freezeLocked()
	}
	return 0
}

// snapshot returns what an fsync of inode id (at backing path p) that
// comes now makes durable. The caller holds f.mu.
func (f *FS) snapshot(p string, id uint64) *content {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err == nil && f.m.ids[st.Ino] == id {
		// Read from the backing file system as it is now: the model may
		// not know every way a file changed.
		if c, err := readLive(p, &st, f.m.ids); err == nil {
			return c
		}
	}
	n := f.m.nodes[id]
	if n == nil {
		return nil
	}
	// Unlinked, or its name now another's: its state is the model's.
	c := n.durable.clone()
	for i := range n.pending {
		n.pending[i].apply(c)
	}
	return c
}

// SetFlushDelay makes every flush take d before it is durable, as a
// disk's fsync takes its time: what runs meanwhile (a reader of a file
// renamed but not yet synced) is what a power loss can catch out.
func (f *FS) SetFlushDelay(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.delay = d
}

// SetSlowFlushes makes every flush that match reports true for (called
// with the file system's lock held) take d, in place of SetFlushDelay's:
// a disk completes the fsyncs in flight in its own order, and that of a
// long file, or of one that waits behind others, may still be under way
// when those of small files that came after it are done. nil: none.
func (f *FS) SetSlowFlushes(match func(Flush) bool, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.slow, f.slowFor = match, d
}

func (f *FS) newNode(root *fs.LoopbackRoot, parent *fs.Inode, name string, st *syscall.Stat_t) fs.InodeEmbedder {
	return &node{LoopbackNode: fs.LoopbackNode{RootData: root}, cfs: f}
}

// node is a loopback node whose changes the model learns of.
type node struct {
	fs.LoopbackNode
	cfs *FS
}

// path returns the node's path in the backing file system.
func (n *node) path() string {
	return filepath.Join(n.cfs.backing, n.Path(n.Root()))
}

func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (in *fs.Inode, fh fs.FileHandle, fuseFlags uint32, errno syscall.Errno) {
	f := n.cfs
	errno = f.change(func() syscall.Errno {
		var existed bool
		var st unix.Stat_t
		if unix.Lstat(filepath.Join(n.path(), name), &st) == nil {
			_, existed = f.m.ids[st.Ino]
		}
		in, fh, fuseFlags, errno = n.LoopbackNode.Create(ctx, name, flags, mode, out)
		if errno != 0 {
			return errno
		}
		if !existed {
			f.created(n.path(), name)
		} else if flags&syscall.O_TRUNC != 0 {
			f.truncated(filepath.Join(n.path(), name), 0)
		}
		fh = f.wrap(fh, filepath.Join(n.path(), name))
		return 0
	})
	return in, fh, fuseFlags, errno
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (in *fs.Inode, errno syscall.Errno) {
	errno = n.cfs.change(func() syscall.Errno {
		if in, errno = n.LoopbackNode.Mkdir(ctx, name, mode, out); errno == 0 {
			n.cfs.created(n.path(), name)
		}
		return errno
	})
	return in, errno
}

func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (in *fs.Inode, errno syscall.Errno) {
	errno = n.cfs.change(func() syscall.Errno {
		if in, errno = n.LoopbackNode.Mknod(ctx, name, mode, rdev, out); errno == 0 {
			n.cfs.created(n.path(), name)
		}
		return errno
	})
	return in, errno
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (in *fs.Inode, errno syscall.Errno) {
	errno = n.cfs.change(func() syscall.Errno {
		if in, errno = n.LoopbackNode.Symlink(ctx, target, name, out); errno == 0 {
			n.cfs.created(n.path(), name)
		}
		return errno
	})
	return in, errno
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (in *fs.Inode, errno syscall.Errno) {
	f := n.cfs
	errno = f.change(func() syscall.Errno {
		t, ok := target.(*node)
		if !ok {
			return syscall.EXDEV
		}
		id, err := f.idOf(t.path())
		if err != nil {
			return fs.ToErrno(err)
		}
		if in, errno = n.LoopbackNode.Link(ctx, target, name, out); errno != 0 {
			return errno
		}
		if dirID, err := f.idOf(n.path()); err == nil {
			f.m.push(dirID, op{seq: f.m.tick(), kind: opAdd, name: name, id: id})
		}
		return 0
	})
	return in, errno
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	return n.removeEntry(name, func() syscall.Errno { return n.LoopbackNode.Unlink(ctx, name) })
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	return n.removeEntry(name, func() syscall.Errno { return n.LoopbackNode.Rmdir(ctx, name) })
}

func (n *node) removeEntry(name string, do func() syscall.Errno) syscall.Errno {
	f := n.cfs
	return f.change(func() syscall.Errno {
		if errno := do(); errno != 0 {
			return errno
		}
		if dirID, err := f.idOf(n.path()); err == nil {
			f.m.push(dirID, op{seq: f.m.tick(), kind: opRemove, name: name})
		}
		return 0
	})
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	f := n.cfs
	return f.change(func() syscall.Errno {
		to, ok := newParent.(*node)
		if !ok {
			return syscall.EXDEV
		}
		from, dst := filepath.Join(n.path(), name), filepath.Join(to.path(), newName)
		srcID, err := f.idOf(from)
		if err != nil {
			return fs.ToErrno(err)
		}
		var dstID uint64
		if flags&unix.RENAME_EXCHANGE != 0 {
			if dstID, err = f.idOf(dst); err != nil {
				return fs.ToErrno(err)
			}
		}
		var before unix.Stat_t
		replaces := unix.Lstat(dst, &before) == nil
		if errno := n.LoopbackNode.Rename(ctx, name, newParent, newName, flags); errno != 0 {
			return errno
		}
		fromDir, err1 := f.idOf(n.path())
		toDir, err2 := f.idOf(to.path())
		if err1 != nil || err2 != nil {
			return 0
		}
		seq := f.m.tick()
		if flags&unix.RENAME_EXCHANGE != 0 {
			f.m.push(fromDir, op{seq: seq, kind: opAdd, name: name, id: dstID})
		} else {
			f.m.push(fromDir, op{seq: seq, kind: opRemove, name: name})
		}
		f.m.push(toDir, op{seq: seq, kind: opAdd, name: newName, id: srcID, replaces: replaces})
		return 0
	})
}

func (n *node) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	f := n.cfs
	inner := fh
	w, _ := fh.(*file)
	if w != nil {
		inner = w.lf
	}
	return f.change(func() syscall.Errno {
		if errno := n.LoopbackNode.Setattr(ctx, inner, in, out); errno != 0 {
			return errno
		}
		p := n.path()
		id, err := f.idOf(p)
		if w != nil {
			id, err = w.id, nil // the file open, named or not
		}
		if err != nil {
			return 0
		}
		if sz, ok := in.GetSize(); ok {
			f.m.push(id, op{seq: f.m.tick(), kind: opTruncate, off: int64(sz)})
		}
		_, modeSet := in.GetMode()
		_, uidSet := in.GetUID()
		_, gidSet := in.GetGID()
		if modeSet || uidSet || gidSet {
			// As the kernel made them (a chown clears set-user-ID bits).
			var attr fuse.AttrOut
			if n.LoopbackNode.Getattr(ctx, inner, &attr) == 0 {
				f.m.push(id, op{seq: f.m.tick(), kind: opMeta, meta: [3]uint32{attr.Mode, attr.Uid, attr.Gid}})
			}
		}
		return 0
	})
}

// truncated records that the file at backing path p was cut to size.
func (f *FS) truncated(p string, size int64) {
	if id, err := f.idOf(p); err == nil {
		f.m.push(id, op{seq: f.m.tick(), kind: opTruncate, off: size})
	}
}

func (n *node) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if w, ok := fh.(*file); ok {
		fh = w.lf
	}
	return n.LoopbackNode.Getattr(ctx, fh, out)
}

func (n *node) Open(ctx context.Context, flags uint32) (fh fs.FileHandle, fuseFlags uint32, errno syscall.Errno) {
	f := n.cfs
	if flags&(syscall.O_TRUNC) == 0 {
		fh, fuseFlags, errno = n.LoopbackNode.Open(ctx, flags)
		if errno == 0 {
			f.mu.Lock()
			fh = f.wrap(fh, n.path())
			f.mu.Unlock()
		}
		return fh, fuseFlags, errno
	}
	errno = f.change(func() syscall.Errno {
		if fh, fuseFlags, errno = n.LoopbackNode.Open(ctx, flags); errno == 0 {
			f.truncated(n.path(), 0)
			fh = f.wrap(fh, n.path())
		}
		return errno
	})
	return fh, fuseFlags, errno
}

// Tmpfile is refused: a file with no name has no path for the model to
// follow. Programs fall back to a named temporary file.
func (n *node) Tmpfile(ctx context.Context, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EOPNOTSUPP
}

// CopyFileRange is refused, for callers to copy by reading and writing,
// which the model follows.
func (n *node) CopyFileRange(ctx context.Context, fhIn fs.FileHandle, offIn uint64, out *fs.Inode, fhOut fs.FileHandle, offOut uint64, length uint64, flags uint64) (uint32, syscall.Errno) {
	return 0, syscall.EOPNOTSUPP
}

// Fsync serves an fsync or fdatasync of the node, a file's or a
// directory's (go-fuse asks the node first, whatever the handle).
func (n *node) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	f := n.cfs
	if w, ok := fh.(*file); ok {
		return f.flush(n.path(), w.id, false)
	}
	f.mu.Lock()
	id, err := f.idOf(n.path())
	f.mu.Unlock()
	if err != nil {
		return fs.ToErrno(err)
	}
	return f.flush(n.path(), id, n.IsDir())
}

// Getxattr serves a lookup of an extended attribute; one of MarkXattr is
// a mark (a flush left out here), which it notes.
func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	if attr == MarkXattr {
		n.cfs.mark()
		return 0, syscall.ENODATA
	}
	return n.LoopbackNode.Getxattr(ctx, attr, dest)
}

// Setxattr sets an extended attribute; a KeptXattr is durable at once
// (see KeptXattr).
func (n *node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	f := n.cfs
	return f.change(func() syscall.Errno {
		errno := n.LoopbackNode.Setxattr(ctx, attr, data, flags)
		if errno != 0 || attr != KeptXattr {
			return errno
		}
		if id, err := f.idOf(n.path()); err == nil && f.m.nodes[id] != nil {
			f.m.nodes[id].durable.mark = append([]byte(nil), data...)
		}
		return 0
	})
}

// mark notes a mark: the place of a flush a test build left out.
func (f *FS) mark() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.frozen {
		return
	}
	f.marks++
	f.markSeq = f.m.tick()
	if f.plan != nil && f.plan.at == 0 && f.plan.match == nil && !f.plan.marked {
		f.plan.marked = true
		if f.plan.afterMark == 0 {
			f.freezeLocked()
		}
	}
}

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	h, fuseFlags, errno := n.LoopbackNode.OpendirHandle(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	return &dir{inner: h, n: n}, fuseFlags, 0
}

// dir is a directory handle whose fsync the model sees.
type dir struct {
	inner fs.FileHandle
	n     *node
}

func (d *dir) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	return d.inner.(fs.FileReaddirenter).Readdirent(ctx)
}

func (d *dir) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	return d.inner.(fs.FileSeekdirer).Seekdir(ctx, off)
}

func (d *dir) Releasedir(ctx context.Context, flags uint32) {
	d.inner.(fs.FileReleasedirer).Releasedir(ctx, flags)
}

func (d *dir) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	return d.n.Fsync(ctx, d, flags)
}

// wrap returns a handle on the file at backing path p whose writes and
// fsyncs the model sees. The caller holds f.mu.
func (f *FS) wrap(fh fs.FileHandle, p string) fs.FileHandle {
	lf, ok := fh.(*fs.LoopbackFile)
	if !ok {
		return fh
	}
	id, _ := f.idOf(p)
	return &file{lf: lf, cfs: f, id: id}
}

// file is an open regular file whose changes the model sees. It offers
// no passthrough descriptor: every read and write must come here.
type file struct {
	lf  *fs.LoopbackFile
	cfs *FS
	id  uint64
}

func (w *file) Read(ctx context.Context, buf []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	return w.lf.Read(ctx, buf, off)
}

func (w *file) Write(ctx context.Context, data []byte, off int64) (n uint32, errno syscall.Errno) {
	errno = w.cfs.change(func() syscall.Errno {
		if n, errno = w.lf.Write(ctx, data, off); n > 0 {
			w.cfs.m.push(w.id, op{seq: w.cfs.m.tick(), kind: opWrite, off: off, data: append([]byte(nil), data[:n]...)})
		}
		return errno
	})
	return n, errno
}

func (w *file) Writev(ctx context.Context, data [][]byte, off int64) (uint32, syscall.Errno) {
	var all []byte
	for _, d := range data {
		all = append(all, d...)
	}
	return w.Write(ctx, all, off)
}

func (w *file) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	return w.cfs.change(func() syscall.Errno {
		if errno := w.lf.Allocate(ctx, off, size, mode); errno != 0 {
			return errno
		}
		// What the range holds now (zeros, for a punched hole), and the
		// size, which a plain allocation may have grown.
		var st fuse.AttrOut
		if w.lf.Getattr(ctx, &st) != 0 {
			return 0
		}
		end := min(int64(off+size), int64(st.Size))
		if end > int64(off) {
			buf := make([]byte, end-int64(off))
			res, errno := w.lf.Read(ctx, buf, int64(off))
			if errno == 0 {
				if b, status := res.Bytes(buf); status == fuse.OK {
					w.cfs.m.push(w.id, op{seq: w.cfs.m.tick(), kind: opWrite, off: int64(off), data: append([]byte(nil), b...)})
				}
				res.Done()
			}
		}
		w.cfs.m.push(w.id, op{seq: w.cfs.m.tick(), kind: opTruncate, off: int64(st.Size)})
		return 0
	})
}

func (w *file) Statx(ctx context.Context, flags, mask uint32, out *fuse.StatxOut) syscall.Errno {
	return w.lf.Statx(ctx, flags, mask, out)
}

func (w *file) Flush(ctx context.Context) syscall.Errno { return w.lf.Flush(ctx) }

func (w *file) Release(ctx context.Context) syscall.Errno { return w.lf.Release(ctx) }

func (w *file) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	return w.lf.Getattr(ctx, out)
}

func (w *file) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	return w.lf.Lseek(ctx, off, whence)
}
