package watcher

import (
	"fmt"
	"io"
	"log"
	"os"
	"testing"

	"github.com/tendhq/tend/tracker"
	"golang.org/x/sys/unix"
)

// TestCutsReadAtEveryStep: a run cut again and again with no record saved
// between its cuts, as a fast writer's is (its record is saved for them
// at most every cutsSavedEvery), has every byte read where it is at each
// step of each cut: by a reader, with the record as last saved, the cut
// file and the file as they are then; and so by the next watcher, should
// this one die there. The second cut's hole, punched before the cut is
// listed, once said that the first cut was not made: readers then read
// every byte at the offset of the byte a whole cut earlier.
func TestCutsReadAtEveryStep(t *testing.T) {
	root := t.TempDir()
	store := tracker.NewStore(root)
	if err := store.MakeRunDir("r"); err != nil {
		t.Fatal(err)
	}
	path := store.Run("r").Stream("stdout")
	out, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	var written int64 // the stream's absolute size
	write := func(n int64) {
		t.Helper()
		for range n / lineLen {
			if _, err := fmt.Fprintf(out, "%0*d\n", lineLen-1, written); err != nil {
				t.Fatal(err)
			}
			written += lineLen
		}
	}
	if !canCollapse(t) {
		t.Skip("the file system cannot cut a file's start")
	}
	saved := &tracker.State{ID: "r", OwnerUID: os.Getuid()} // the record on disk: never saved for the cuts
	st := &tracker.State{ID: "r", OwnerUID: os.Getuid()}
	steps, cut := 0, 0
	check := func(step string) {
		t.Helper()
		steps++
		step = fmt.Sprintf("cut %d, %s", cut, step)
		first, err := store.ReadOutput(saved, "stdout", 0, lineLen)
		if err != nil {
			t.Fatalf("%s: reading the first byte kept: %v", step, err)
		}
		last, err := store.ReadOutput(saved, "stdout", written-lineLen, lineLen)
		if err != nil {
			t.Fatalf("%s: reading the last line: %v", step, err)
		}
		for _, sl := range []tracker.Slice{first, last} {
			if want := fmt.Sprintf("%0*d\n", lineLen-1, sl.Offset); string(sl.Data) != want {
				t.Fatalf("%s: read %q at offset %d, where the run wrote %q", step, sl.Data, sl.Offset, want)
			}
		}
	}
	w := &watcher{cfg: Config{Root: root, atStep: check}, store: store, log: log.New(io.Discard, "", 0)}
	const limit = 65536
	// Cut past an eighth more than the limit: the first cut is 16 KiB, the
	// next ones 80 KiB, whose holes are larger than the cut before.
	for _, size := range []int64{80 << 10, 160 << 10, 240 << 10} {
		write(size - written)
		cut++
		if _, ok := w.capStream(st, "stdout", limit); !ok {
			t.Fatalf("cut %d: nothing cut at %d bytes", cut, size)
		}
		check("made")
	}
	if steps != 12 {
		t.Fatalf("checked at %d steps, want 12 (three steps of three cuts, and after each)", steps)
	}
}

const lineLen = 16 // each line of the test's output is its own offset

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
