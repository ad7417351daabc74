package crashfs

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"syscall"

	"golang.org/x/sys/unix"
)

// The model knows, for every inode the file system has held since it was
// mounted, what a disk would hold of it after a power cut: its durable
// content (what it was when it was last fsynced, or when the mount began)
// and the operations on it since, which a cut may or may not have kept.
// Each inode has its own history, as a disk would: an fsync of a file
// says nothing of its name, and an fsync of a directory nothing of the
// contents of the files it names.

// A Model says which of the operations that were not made durable a
// power cut keeps.
type Model int

const (
	// Strict keeps none: what was not fsynced is gone.
	Strict Model = iota
	// Reordered keeps a random subset: what a real file system may have
	// written on its own (ext4 commits every 5 s), in any order; a rename
	// may reach the disk before the data of the file it names.
	Reordered
	// AfterMark keeps what was not made durable after the last mark (see
	// MarkXattr), and nothing from before it: the worst order for a
	// flush left out at the mark, which would have made the earlier
	// changes durable before the later ones.
	AfterMark
	// NamesFirst keeps every name and mode changed (creates, links,
	// renames, removals) and no data that was not synced: a file system
	// that commits its metadata before the data (ext4 in data=writeback),
	// the worst case for a file renamed in before its flush.
	NamesFirst
)

func (m Model) String() string {
	switch m {
	case Reordered:
		return "reordered"
	case AfterMark:
		return "after the mark"
	case NamesFirst:
		return "names first"
	}
	return "strict"
}

// content is the state of one inode: its metadata, and its bytes (a
// regular file), its entries (a directory) or its target (a link).
type content struct {
	mode, uid, gid uint32 // mode holds the type bits too
	data           []byte
	entries        map[string]uint64 // name -> inode id
	target         string
	mark           []byte // its KeptXattr, if it has one
}

func (c *content) clone() *content {
	d := *c
	d.data = append([]byte(nil), c.data...)
	if c.entries != nil {
		d.entries = make(map[string]uint64, len(c.entries))
		for k, v := range c.entries {
			d.entries[k] = v
		}
	}
	return &d
}

func (c *content) isDir() bool { return c.mode&unix.S_IFMT == unix.S_IFDIR }

// opKind is what an operation did to one inode.
type opKind int

const (
	opWrite    opKind = iota // data at off
	opTruncate               // size
	opMeta                   // mode, uid, gid
	opAdd                    // entry name -> id
	opRemove                 // entry name
)

// An op is one change to one inode that has not been made durable. seq
// orders them, and ties the halves of one system call (a rename's removal
// and addition): a cut keeps both or neither.
type op struct {
	seq  uint64
	kind opKind
	off  int64
	data []byte
	meta [3]uint32
	name string
	id   uint64
	// replaces is set on the opAdd of a rename that put id in place of
	// another file of that name (see FS.SetReplacesKeepData).
	replaces bool
}

func (o *op) apply(c *content) {
	switch o.kind {
	case opWrite:
		end := o.off + int64(len(o.data))
		if end > int64(len(c.data)) {
			c.data = append(c.data, make([]byte, end-int64(len(c.data)))...)
		}
		copy(c.data[o.off:], o.data)
	case opTruncate:
		if o.off < int64(len(c.data)) {
			c.data = c.data[:o.off]
		} else {
			c.data = append(c.data, make([]byte, o.off-int64(len(c.data)))...)
		}
	case opMeta:
		c.mode = c.mode&unix.S_IFMT | o.meta[0]&^unix.S_IFMT
		c.uid, c.gid = o.meta[1], o.meta[2]
	case opAdd:
		if c.entries == nil {
			c.entries = make(map[string]uint64)
		}
		c.entries[o.name] = o.id
	case opRemove:
		delete(c.entries, o.name)
	}
}

// An inode is one file, directory or link of the model.
type inode struct {
	durable *content
	pending []op
}

// model holds the durable state of a file system and what changed since.
// Its methods are called with FS.mu held.
type model struct {
	seq   uint64
	next  uint64            // the next inode id
	ids   map[uint64]uint64 // a backing inode number -> the live inode's id
	nodes map[uint64]*inode
	root  uint64
	// replacedWrites are the writes of files that a rename put in place
	// of another, before that rename, once a sync of its directory made
	// it durable: an image that keeps a replace's data keeps them too
	// (see replacesKeepData).
	replacedWrites map[uint64]bool // by seq
}

func newModel() *model {
	return &model{ids: make(map[uint64]uint64), nodes: make(map[uint64]*inode), next: 1, replacedWrites: make(map[uint64]bool)}
}

// tick returns the sequence number of a new system call.
func (m *model) tick() uint64 {
	m.seq++
	return m.seq
}

// create adds a new inode whose backing inode is ino, with c as what it
// holds on disk until it is synced: as created, empty.
func (m *model) create(ino uint64, c *content) uint64 {
	id := m.next
	m.next++
	m.ids[ino] = id // a number the backing file system used again is a new inode
	m.nodes[id] = &inode{durable: c}
	return id
}

func (m *model) push(id uint64, o op) {
	if n := m.nodes[id]; n != nil {
		n.pending = append(n.pending, o)
	}
}

// sync makes id's current state, as the backing file system has it,
// durable.
func (m *model) sync(id uint64, live *content) {
	if n := m.nodes[id]; n != nil {
		n.durable, n.pending = live, nil
	}
}

// noteReplaced notes the writes before rename o of the file it put in
// place of another (see replacedWrites): ext4 in data=ordered commits
// them with the rename, whichever commit that is in, a directory's fsync
// as well as one on its own.
func (m *model) noteReplaced(o op) {
	t := m.nodes[o.id]
	if t == nil {
		return
	}
	for _, w := range t.pending {
		if (w.kind == opWrite || w.kind == opTruncate) && w.seq < o.seq {
			m.replacedWrites[w.seq] = true
		}
	}
}

// syncAll makes every inode durable as it is now: syncfs(2), sync(2).
func (m *model) syncAll() {
	for _, n := range m.nodes {
		for i := range n.pending {
			n.pending[i].apply(n.durable)
		}
		n.pending = nil
	}
}

// A keeper decides whether a cut keeps an operation; those of one system
// call (the same seq) share the answer.
type keeper func(o *op) bool

// keepNone is Strict's.
func keepNone(*op) bool { return false }

// keepNames is NamesFirst's: every name and mode, no data.
func keepNames(o *op) bool { return o.kind != opWrite && o.kind != opTruncate }

// keepSome keeps each system call with probability p, the same answer
// for all its halves.
func keepSome(rng *rand.Rand, p float64) keeper {
	decided := make(map[uint64]bool)
	return func(o *op) bool {
		k, ok := decided[o.seq]
		if !ok {
			k = rng.Float64() < p
			decided[o.seq] = k
		}
		return k
	}
}

// replacesKeepData returns keep, made to keep too every write of a file,
// before a rename that keep keeps, or that a sync made durable, put it in
// place of another file (see FS.SetReplacesKeepData).
func (m *model) replacesKeepData(keep keeper) keeper {
	forced := maps.Clone(m.replacedWrites) // the seqs of the writes kept so
	for _, n := range m.nodes {
		for i := range n.pending {
			o := &n.pending[i]
			if o.kind != opAdd || !o.replaces || !keep(o) || m.nodes[o.id] == nil {
				continue
			}
			for _, w := range m.nodes[o.id].pending {
				if (w.kind == opWrite || w.kind == opTruncate) && w.seq < o.seq {
					forced[w.seq] = true
				}
			}
		}
	}
	return func(o *op) bool { return forced[o.seq] || keep(o) }
}

// after returns what a disk holds of inode id after a cut that kept what
// keep says.
func (m *model) after(id uint64, keep keeper) *content {
	n := m.nodes[id]
	c := n.durable.clone()
	for i := range n.pending {
		if keep(&n.pending[i]) {
			n.pending[i].apply(c)
		}
	}
	return c
}

// ImageStats says what a cut kept and lost.
type ImageStats struct {
	Files, Dirs, Links int // what the image holds
	Pending            int // operations not made durable
	Kept               int // of those, kept (Reordered)
	Orphans            int // directories reachable twice: the second is left out
}

// write writes the disk after a cut into dst (an empty directory: the
// image of the root), walking from the root through the entries each
// directory holds on disk. A file reachable by several names is linked.
func (m *model) write(dst string, keep keeper) (ImageStats, error) {
	var stats ImageStats
	seqs := make(map[uint64]bool)
	for _, n := range m.nodes {
		for _, o := range n.pending {
			if !seqs[o.seq] {
				seqs[o.seq] = true
				stats.Pending++
				if keep(&o) {
					stats.Kept++
				}
			}
		}
	}
	done := make(map[uint64]string) // inode id -> the path it was written at
	var walk func(id uint64, path string) error
	walk = func(id uint64, path string) error {
		c := m.after(id, keep)
		if prev, ok := done[id]; ok {
			if c.isDir() {
				stats.Orphans++
				return nil
			}
			stats.Links++
			return os.Link(prev, path)
		}
		done[id] = path
		switch c.mode & unix.S_IFMT {
		case unix.S_IFDIR:
			stats.Dirs++
			if path != dst {
				if err := os.Mkdir(path, 0o700); err != nil {
					return err
				}
			}
			names := make([]string, 0, len(c.entries))
			for name := range c.entries {
				names = append(names, name)
			}
			sort.Strings(names)
			for _, name := range names {
				if m.nodes[c.entries[name]] == nil {
					return fmt.Errorf("%s: entry %q names no inode", path, name)
				}
				if err := walk(c.entries[name], filepath.Join(path, name)); err != nil {
					return err
				}
			}
		case unix.S_IFREG:
			stats.Files++
			if err := os.WriteFile(path, c.data, 0o600); err != nil {
				return err
			}
		case unix.S_IFLNK:
			stats.Files++
			return os.Symlink(c.target, path)
		default:
			stats.Files++
			if err := unix.Mknod(path, c.mode, 0); err != nil {
				return &os.PathError{Op: "mknod", Path: path, Err: err}
			}
		}
		if err := unix.Lchown(path, int(c.uid), int(c.gid)); err != nil {
			return &os.PathError{Op: "chown", Path: path, Err: err}
		}
		if c.mark != nil {
			if err := unix.Lsetxattr(path, KeptXattr, c.mark, 0); err != nil {
				return &os.PathError{Op: "setxattr", Path: path, Err: err}
			}
		}
		if c.mode&unix.S_IFMT != unix.S_IFLNK {
			if err := unix.Chmod(path, c.mode&0o7777); err != nil {
				return &os.PathError{Op: "chmod", Path: path, Err: err}
			}
		}
		return nil
	}
	return stats, walk(m.root, dst)
}

// scan adds the tree at dir to the model, all of it durable: what was on
// disk when the mount began.
func (m *model) scan(dir string) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return &os.PathError{Op: "lstat", Path: dir, Err: err}
	}
	c, err := readLive(dir, &st, nil)
	if err != nil {
		return err
	}
	m.root = m.create(st.Ino, c)
	return m.scanDir(dir, c)
}

func (m *model) scanDir(dir string, c *content) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	c.entries = make(map[string]uint64)
	for _, e := range ents {
		path := filepath.Join(dir, e.Name())
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			return &os.PathError{Op: "lstat", Path: path, Err: err}
		}
		if id, ok := m.ids[st.Ino]; ok { // a hard link to one seen
			c.entries[e.Name()] = id
			continue
		}
		child, err := readLive(path, &st, nil)
		if err != nil {
			return err
		}
		c.entries[e.Name()] = m.create(st.Ino, child)
		if child.isDir() {
			if err := m.scanDir(path, child); err != nil {
				return err
			}
		}
	}
	return nil
}

// readLive reads what the backing file system holds of the inode at path
// (st is its lstat): a file's bytes, a directory's entries (mapped to
// inode ids through ids, if not nil; names whose inode the model does not
// know are left out), a link's target.
func readLive(path string, st *unix.Stat_t, ids map[uint64]uint64) (*content, error) {
	c := &content{mode: st.Mode, uid: st.Uid, gid: st.Gid, mark: readMark(path)}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		c.data = b
	case unix.S_IFLNK:
		t, err := os.Readlink(path)
		if err != nil {
			return nil, err
		}
		c.target = t
	case unix.S_IFDIR:
		if ids == nil {
			return c, nil
		}
		ents, err := os.ReadDir(path)
		if err != nil {
			return nil, err
		}
		c.entries = make(map[string]uint64, len(ents))
		for _, e := range ents {
			var est unix.Stat_t
			if err := unix.Lstat(filepath.Join(path, e.Name()), &est); err != nil {
				if errors.Is(err, syscall.ENOENT) {
					continue
				}
				return nil, err
			}
			if id, ok := ids[est.Ino]; ok {
				c.entries[e.Name()] = id
			}
		}
	}
	return c, nil
}

// KeptXattr is the one extended attribute a cut keeps: the mark tend's
// clients put on root's requests (spool.Mark). A journaled file system
// commits an attribute with its inode's other metadata, before or with a
// later rename of it, so a request that survives a cut keeps its mark.
// It is kept as set, without waiting for a flush.
const KeptXattr = "trusted.tend"

// readMark returns the KeptXattr of the file at path, nil if none.
func readMark(path string) []byte {
	buf := make([]byte, 64)
	n, err := unix.Lgetxattr(path, KeptXattr, buf)
	if err != nil {
		return nil
	}
	return buf[:n]
}
