package watcher

import (
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"testing"

	"github.com/tendhq/tend/tracker"
	"golang.org/x/sys/unix"
)

// A cutRun is a run's stdout that a test writes and a watcher cuts, with
// no record saved for its cuts, as a fast writer's is between its saves
// (every cutsSavedEvery): every byte of it is its own offset's line.
type cutRun struct {
	t       *testing.T
	store   *tracker.Store
	w       *watcher
	st      *tracker.State // the watcher's record
	out     *os.File
	written int64 // the stream's absolute size
}

const (
	lineLen  = 16
	cutLimit = 65536
)

// newCutRun returns a cutRun whose watcher calls atStep at each step of a
// cut; it skips t where the file system cannot cut a file's start.
func newCutRun(t *testing.T, atStep func(string)) *cutRun {
	root := t.TempDir()
	store := tracker.NewStore(root)
	if err := store.MakeRunDir("r"); err != nil {
		t.Fatal(err)
	}
	out, err := os.OpenFile(store.Run("r").Stream("stdout"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { out.Close() })
	if !canCollapse(t) {
		t.Skip("the file system cannot cut a file's start")
	}
	w := &watcher{cfg: Config{Root: root, atStep: atStep}, store: store, log: log.New(io.Discard, "", 0)}
	return &cutRun{t: t, store: store, w: w, st: uncutRecord(), out: out}
}

// uncutRecord is the run's record as on disk: never saved for its cuts.
func uncutRecord() *tracker.State { return &tracker.State{ID: "r", OwnerUID: os.Getuid()} }

// cut writes up to size bytes in all, and has the watcher cap the file.
func (c *cutRun) cut(size int64) {
	c.t.Helper()
	for ; c.written < size; c.written += lineLen {
		if _, err := fmt.Fprintf(c.out, "%0*d\n", lineLen-1, c.written); err != nil {
			c.t.Fatal(err)
		}
	}
	if _, ok, _ := c.w.capStream(c.st, "stdout", cutLimit); !ok {
		c.t.Fatalf("nothing cut at %d bytes", size)
	}
}

// check reads the first line kept and the last by offset, with record
// rec, and fails unless each is the run's at its offset.
func (c *cutRun) check(what string, rec *tracker.State) {
	c.t.Helper()
	for _, off := range []int64{0, c.written - lineLen} {
		sl, err := c.store.ReadOutput(rec, "stdout", off, lineLen)
		if err != nil {
			c.t.Fatalf("%s: reading at %d: %v", what, off, err)
		}
		if want := fmt.Sprintf("%0*d\n", lineLen-1, sl.Offset); string(sl.Data) != want {
			c.t.Fatalf("%s: read %q at offset %d, where the run wrote %q", what, sl.Data, sl.Offset, want)
		}
	}
}

// The cuts each test makes: the first 16 KiB (past an eighth more than
// the limit), the next ones 80 KiB, each punched as a hole larger than
// the cut before.
var cutSizes = []int64{80 << 10, 160 << 10, 240 << 10}

// TestCutsReadAtEveryStep: a run cut again and again with no record
// saved between its cuts has every byte read where it is at each step of
// each cut, by a reader with the record as last saved, the cut file and
// the file as they are then. The second cut's hole, punched before the
// cut is listed, once said that the first cut was not made: readers then
// read every byte at the offset of the byte a whole cut earlier.
func TestCutsReadAtEveryStep(t *testing.T) {
	var c *cutRun
	steps, cut := 0, 0
	c = newCutRun(t, func(step string) {
		steps++
		c.check(fmt.Sprintf("cut %d, %s", cut, step), uncutRecord())
	})
	for _, size := range cutSizes {
		cut++
		c.cut(size)
		c.check(fmt.Sprintf("cut %d made", cut), uncutRecord())
	}
	if steps != 9 {
		t.Fatalf("checked at %d steps, want 9 (three steps of three cuts)", steps)
	}
}

// TestCutsSettledAtEveryStep: a watcher that dies at any step of a cut,
// with the cuts before unrecorded, leaves the next one a record it
// settles (settleCut) to place every byte where it is without the cut
// file, and a file that no longer starts with a hole: the dropped bytes
// are cut, not left a hole that every later cut would only punch after.
func TestCutsSettledAtEveryStep(t *testing.T) {
	for _, step := range []string{"cut-punched", "cut-recorded", "cut-collapsed"} {
		t.Run(step, func(t *testing.T) {
			died := fmt.Errorf("died at %s", step)
			cut := 0
			c := newCutRun(t, func(s string) {
				if cut == 2 && s == step {
					panic(died)
				}
			})
			func() {
				defer func() {
					if r := recover(); r != died {
						panic(r)
					}
				}()
				for _, size := range cutSizes {
					cut++
					c.cut(size)
				}
			}()
			next := &watcher{cfg: Config{Root: c.w.cfg.Root}, store: c.store, log: log.New(io.Discard, "", 0)}
			rec := uncutRecord()
			cuts, err := c.store.ReadCuts("r", rec.OwnerUID)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := next.settleCut(rec, "stdout", cuts); !ok {
				t.Fatal("settleCut: the record did not change")
			}
			if err := os.Remove(c.store.Run("r").Cut()); err != nil { // as its save does
				t.Fatal(err)
			}
			c.check("settled", rec)
			f, err := os.Open(c.store.Run("r").Stream("stdout"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if hole := tracker.LeadingHole(f); hole != 0 {
				t.Fatalf("settled, the file starts with a hole of %d bytes (record %+v)", hole, rec.Output)
			}
		})
	}
}

// TestCutUnmarked: where the mark a cut needs cannot be written, nothing
// is punched (the hole would unsay the cut before), and the caller is
// told to save the run's record first. The run's directory is made
// immutable, as a full disk or a spoiled directory fails the write.
func TestCutUnmarked(t *testing.T) {
	c := newCutRun(t, nil)
	c.cut(cutSizes[0])
	dir := c.store.RunDir("r")
	if out, err := exec.Command("chattr", "+i", dir).CombinedOutput(); err != nil {
		t.Skipf("chattr +i: %v: %s", err, out)
	}
	defer exec.Command("chattr", "-i", dir).Run()
	for ; c.written < cutSizes[1]; c.written += lineLen {
		fmt.Fprintf(c.out, "%0*d\n", lineLen-1, c.written)
	}
	cuts, ok, unmarked := c.w.capStream(c.st, "stdout", cutLimit)
	if ok || !unmarked || cuts != "" {
		t.Fatalf("capStream = %q, %v, %v; want nothing cut, unmarked", cuts, ok, unmarked)
	}
	c.check("unmarked", uncutRecord())
	f, err := os.Open(c.store.Run("r").Stream("stdout"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if hole := tracker.LeadingHole(f); hole != 0 {
		t.Fatalf("a hole of %d bytes was punched with the cut before unmarked", hole)
	}
}

// canCollapse reports whether the file system of t's temporary directory
// can cut a file's start (FALLOC_FL_COLLAPSE_RANGE).
func canCollapse(t *testing.T) bool {
	f, err := os.CreateTemp(t.TempDir(), "collapse")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(make([]byte, 8192)); err != nil {
		t.Fatal(err)
	}
	return unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_COLLAPSE_RANGE, 0, 4096) == nil
}
