package tracker

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tendhq/tend/tracker/layout"
	"golang.org/x/sys/unix"
)

func testEntry(id string) LogEntry {
	return LogEntry{
		ID: id, Name: id + ".start", Record: []byte(`{"id":"` + id + `"}` + "\n"), Request: []byte("echo " + id + "\n"),
		Events: []Event{{Time: time.Unix(1, 0).UTC(), ID: id, Rev: 1, State: Starting}, {Time: time.Unix(2, 0).UTC(), ID: id, Rev: 2, State: Running, PID: 7}},
	}
}

func openLog(t *testing.T, root string) (*StartLog, []LogEntry) {
	t.Helper()
	l, pending, err := OpenStartLog(root)
	if err != nil {
		t.Fatal(err)
	}
	return l, pending
}

func ids(entries []LogEntry) string {
	var s []string
	for _, e := range entries {
		s = append(s, e.ID)
	}
	return strings.Join(s, ",")
}

// A log is made whole, its entries come back until they are marked
// applied, in the order written, and a reopened log goes on after the
// last entry.
func TestStartLogKeepsEntriesUntilApplied(t *testing.T) {
	root := t.TempDir()
	l, pending := openLog(t, root)
	if len(pending) != 0 {
		t.Fatalf("a new log holds %d entries", len(pending))
	}
	var st unix.Stat_t
	if err := unix.Stat(layout.Root(root).StartLog(), &st); err != nil || st.Size != startLogSize || st.Blocks*512 < startLogSize {
		t.Fatalf("the log is %d bytes in %d blocks (%v): want every block of %d written", st.Size, st.Blocks, err, startLogSize)
	}
	entries := []LogEntry{testEntry("a"), testEntry("b")}
	if err := l.Write(entries); err != nil {
		t.Fatal(err)
	}
	if entries[0].Seq != 1 || entries[1].Seq != 2 {
		t.Fatalf("seqs %d, %d: want 1, 2", entries[0].Seq, entries[1].Seq)
	}
	l, pending = openLog(t, root)
	if ids(pending) != "a,b" {
		t.Fatalf("pending: %q, want a,b", ids(pending))
	}
	if got := pending[1]; string(got.Request) != "echo b\n" || got.Name != "b.start" || len(got.Events) != 2 || got.Events[1].PID != 7 {
		t.Fatalf("entry b came back as %+v", got)
	}
	if err := l.Applied(1); err != nil {
		t.Fatal(err)
	}
	c := testEntry("c")
	if err := l.Write([]LogEntry{c}); err != nil {
		t.Fatal(err)
	}
	l, pending = openLog(t, root)
	if ids(pending) != "b,c" || pending[1].Seq != 3 {
		t.Fatalf("pending: %q (%+v), want b,c with c's seq 3", ids(pending), pending)
	}
	if err := l.Applied(3); err != nil {
		t.Fatal(err)
	}
	if _, pending = openLog(t, root); len(pending) != 0 {
		t.Fatalf("pending after all applied: %q", ids(pending))
	}
}

// An entry a crash tore (its checksum fails) is none: its launch's sync
// never returned, and nothing of it was done.
func TestStartLogSkipsATornEntry(t *testing.T) {
	root := t.TempDir()
	l, _ := openLog(t, root)
	if err := l.Write([]LogEntry{testEntry("a"), testEntry("b")}); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(layout.Root(root).StartLog(), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("X"), startLogHeader+startLogSlot+startLogEntryHead+3); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, pending := openLog(t, root); ids(pending) != "a" {
		t.Fatalf("pending: %q, want a alone", ids(pending))
	}
}

// A torn header loses its mark, not the entries' own: those applied
// before the last entry was written stay applied.
func TestStartLogTornHeaderKeepsEntriesMarks(t *testing.T) {
	root := t.TempDir()
	l, _ := openLog(t, root)
	if err := l.Write([]LogEntry{testEntry("a")}); err != nil {
		t.Fatal(err)
	}
	if err := l.Applied(1); err != nil {
		t.Fatal(err)
	}
	if err := l.Write([]LogEntry{testEntry("b")}); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(layout.Root(root).StartLog(), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte{0xff}, 9)
	f.Close()
	if _, pending := openLog(t, root); ids(pending) != "b" {
		t.Fatalf("pending: %q, want b alone", ids(pending))
	}
}

// A full log, or an entry larger than a slot, writes nothing: the
// launches are written the usual way.
func TestStartLogFullOrTooLarge(t *testing.T) {
	root := t.TempDir()
	l, _ := openLog(t, root)
	big := testEntry("big")
	big.Request = make([]byte, startLogSlot)
	if err := l.Write([]LogEntry{testEntry("a"), big}); !errors.Is(err, ErrEntryTooLarge) {
		t.Fatalf("an entry larger than a slot: %v", err)
	}
	if l.Seq() != 0 {
		t.Fatalf("seq %d after a refused write", l.Seq())
	}
	var many []LogEntry
	for i := range startLogSlots {
		many = append(many, testEntry(strings.Repeat("x", i+1)))
	}
	if err := l.Write(many); err != nil {
		t.Fatal(err)
	}
	if err := l.Write([]LogEntry{testEntry("one-more")}); !errors.Is(err, ErrStartLogFull) {
		t.Fatalf("a full log: %v", err)
	}
	if err := l.Applied(1); err != nil {
		t.Fatal(err)
	}
	if err := l.Write([]LogEntry{testEntry("one-more")}); err != nil {
		t.Fatalf("once the first slot is applied: %v", err)
	}
	if _, pending := openLog(t, root); len(pending) != startLogSlots || pending[len(pending)-1].ID != "one-more" {
		t.Fatalf("pending: %d entries, last %q", len(pending), pending[len(pending)-1].ID)
	}
}

// A batch of more launches than the log has slots (a batch of requests
// is not bounded by flushEvery everywhere: the requests that waited while
// the history held are all taken in one) is refused whole: written, its
// last entries would take the slots of its first, whose gates would
// open with nothing durable to put them back from.
func TestStartLogRefusesMoreEntriesThanSlots(t *testing.T) {
	root := t.TempDir()
	l, _ := openLog(t, root)
	var many []LogEntry
	for i := range startLogSlots + 1 {
		many = append(many, testEntry(strings.Repeat("x", i+1)))
	}
	if err := l.Write(many); !errors.Is(err, ErrStartLogFull) {
		t.Errorf("%d entries in %d slots: %v", len(many), startLogSlots, err)
	}
	if _, pending := openLog(t, root); len(pending) != 0 {
		t.Errorf("the log holds %d entries of a refused write", len(pending))
	}
}

// A start log that is not the watcher's own file of its size (a link,
// another size, another's) is moved aside, never read or written
// through, and made anew.
func TestStartLogNotItsOwnIsMovedAside(t *testing.T) {
	for _, tt := range []struct {
		name string
		make func(t *testing.T, path string)
	}{
		{"short", func(t *testing.T, path string) { os.WriteFile(path, []byte("tendlog1"), 0o600) }},
		{"symlink", func(t *testing.T, path string) {
			target := filepath.Join(t.TempDir(), "elsewhere")
			os.WriteFile(target, make([]byte, startLogSize), 0o600)
			os.Symlink(target, path)
		}},
		{"hard link", func(t *testing.T, path string) {
			os.WriteFile(path, make([]byte, startLogSize), 0o600)
			os.Link(path, path+".other")
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			path := layout.Root(root).StartLog()
			tt.make(t, path)
			l, pending := openLog(t, root)
			if len(pending) != 0 {
				t.Fatalf("pending: %q", ids(pending))
			}
			if err := l.Write([]LogEntry{testEntry("a")}); err != nil {
				t.Fatal(err)
			}
			var st unix.Stat_t
			if err := unix.Lstat(path, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != startLogSize || st.Nlink != 1 {
				t.Fatalf("the log made anew: %+v, %v", st, err)
			}
			if _, err := os.Lstat(path + ".bad"); err != nil {
				t.Fatalf("the one there was not moved aside: %v", err)
			}
		})
	}
}

// sudo tend fsck --repair in a teammate's root puts back a launch's run
// directory for the teammate's watcher, whose run it is, not as root's:
// a directory of root's, mode 0700, would shut that watcher out of its
// own run.
func TestFsckAsRootPutsBackTheRunDirForItsOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	const owner = 4242
	root := t.TempDir()
	if err := os.Chown(root, owner, owner); err != nil {
		t.Fatal(err)
	}
	key, _, err := LoadKey(root, true)
	if err != nil {
		t.Fatal(err)
	}
	s := NewStore(root)
	s.SetKey(key)
	if err := s.Make(); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	st := &State{ID: "r1", State: Running, OwnerUID: owner, Command: []string{"true"}, CreatedAt: now, Rev: 2, PID: 1}
	b, err := st.encode(key)
	if err != nil {
		t.Fatal(err)
	}
	l, _ := openLog(t, root)
	events := []Event{{Time: now, ID: "r1", Rev: 1, State: Starting}, {Time: now, ID: "r1", Rev: 2, State: Running, PID: 1}}
	if err := l.Write([]LogEntry{{ID: "r1", Record: b, Request: []byte("true\n"), Events: events}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Repair(root, func(int, string) (uint64, bool) { return 0, false }); err != nil {
		t.Fatal(err)
	}
	var dir unix.Stat_t
	if err := unix.Lstat(s.RunDir("r1"), &dir); err != nil {
		t.Fatal(err)
	}
	if dir.Uid != owner {
		t.Errorf("the run directory put back is uid %d's, not its run's owner's (%d)", dir.Uid, owner)
	}
}
