package tracker

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gofrs/flock"
	"golang.org/x/sys/unix"
)

// A history.lock removed by hand is not a lock the watcher keeps holding
// alone: the next append locks the new file, which others lock too.
func TestHistoryRelocksAReplacedLockFile(t *testing.T) {
	_, root := newStore(t)
	h := OpenHistory(root)
	if err := h.Append(Event{ID: "a", Rev: 1, State: Running, Time: time.Now()}); err != nil {
		t.Fatal(err)
	}
	lock := filepath.Join(root, "history.lock")
	os.Remove(lock)
	if err := h.Append(Event{ID: "a", Rev: 2, State: Completed, Time: time.Now()}); err != nil {
		t.Fatal(err)
	}
	var held, now unix.Stat_t
	if err := unix.Fstat(h.lockFD, &held); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(lock, &now); err != nil || held.Ino != now.Ino {
		t.Fatalf("the history holds inode %d; history.lock is %d (%v)", held.Ino, now.Ino, err)
	}
	// Another process's lock on the new file now excludes the history's.
	other := flock.New(lock)
	if ok, err := other.TryLock(); !ok || err != nil {
		t.Fatalf("TryLock: %v, %v", ok, err)
	}
	defer other.Unlock()
	done := make(chan error)
	go func() { done <- h.Append(Event{ID: "b", Rev: 1, State: Running, Time: time.Now()}) }()
	select {
	case err := <-done:
		t.Fatalf("appended while another held the lock: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	other.Unlock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestScanRunHistoryFile: only the run's own lines, whole, a long one
// too (gathered across the buffer), and none that does not parse; an ID
// that another begins with is not that one's.
func TestScanRunHistoryFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.jsonl")
	long := strings.Repeat("y", 200<<10)
	data := `{"time":"2026-11-29T06:00:00Z","id":"x","rev":1,"state":"queued"}` + "\n" +
		`{"time":"2026-11-29T06:00:00Z","id":"xy","rev":1,"state":"queued"}` + "\n" +
		`{"time":"2026-11-29T06:00:00Z","id":"pad","rev":1,"state":"queued","reason":"` + long + "\"}\n" +
		`{"time":"2026-11-29T06:00:01Z","id":"x","rev":2,"state":"running","reason":"` + long + "\"}\n" +
		`{"time":"2026-11-29T06:00:02Z","id":"x","rev":3,"state":"completed",` + "\n" +
		`{"time":"2026-11-29T06:00:03Z","id":"x","rev":4,"state":"deleted"}`
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	var got []int64
	if err := ScanRunHistoryFile(path, "x", func(e Event) { got = append(got, e.Rev) }); err != nil {
		t.Fatal(err)
	}
	// rev 3 is not JSON; rev 4 is torn (no newline): neither is passed.
	if fmt.Sprint(got) != "[1 2]" {
		t.Errorf("revs passed: %v, want [1 2]", got)
	}
}

// TestSameHistorySet: a reader without the history lock finds out that a
// rotation came while it looked at the files, and a look after it finds
// the same again.
func TestSameHistorySet(t *testing.T) {
	root := t.TempDir()
	h := OpenHistory(root)
	h.MaxSize = 1 // every append after the first rotates
	for _, id := range []string{"a", "b"} {
		if err := h.Append(Event{ID: id, Rev: 1, State: Queued, Time: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	files, err := listHistory(root)
	if err != nil || len(files) != 2 {
		t.Fatalf("found %d files, %v; want history.1.jsonl and history.jsonl", len(files), err)
	}
	if again, _ := listHistory(root); !sameFiles(files, again) {
		t.Fatal("a set nothing changed is not the same")
	}
	if err := h.Append(Event{ID: "c", Rev: 1, State: Queued, Time: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if again, _ := listHistory(root); sameFiles(files, again) {
		t.Fatal("a set found before a rotation is the same after it")
	}
}

// TestScanHistoryHoldsOneFileOpen: a root whose rotated files outnumber
// what a process may open at once is read whole: a scan holds one file
// open at a time (it held every one, and failed with EMFILE past the
// limit), and still reads each once across a rotation.
func TestScanHistoryHoldsOneFileOpen(t *testing.T) {
	root := t.TempDir()
	const rotated = 300
	line := func(id string) string {
		return fmt.Sprintf(`{"time":"2026-11-29T06:00:00Z","id":%q,"rev":1,"state":"queued"}`+"\n", id)
	}
	for n := 1; n <= rotated; n++ {
		if err := os.WriteFile(filepath.Join(root, fmt.Sprintf("history.%d.jsonl", n)), []byte(line(fmt.Sprint(rotated-n))), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "history.jsonl"), []byte(line("current")), 0o644); err != nil {
		t.Fatal(err)
	}
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	before := fds()
	most, n := 0, 0
	err := ScanHistory(root, func(e Event) error {
		if want := fmt.Sprint(n); n < rotated && e.ID != want {
			return fmt.Errorf("event %d is %s's, want %s's", n, e.ID, want)
		}
		n++
		most = max(most, fds()-before)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != rotated+1 {
		t.Errorf("read %d events, want %d", n, rotated+1)
	}
	// The file read, and the ReadDir's own.
	if most > 3 {
		t.Errorf("held %d more descriptors while it read %d files: want one file at a time", most, rotated+1)
	}
}

// TestScanHistoryAcrossARotation: a scan passes every event of the files
// there when it starts, once, whatever a rotation renames meanwhile (as
// one may for a reader without the lock): the files are opened as one
// set first, not each by its name when its turn comes.
func TestScanHistoryAcrossARotation(t *testing.T) {
	root := t.TempDir()
	line := func(id string) string {
		return fmt.Sprintf(`{"time":"2026-11-29T06:00:00Z","id":%q,"rev":1,"state":"queued"}`+"\n", id)
	}
	write := func(name string, ids ...string) {
		t.Helper()
		var b strings.Builder
		for _, id := range ids {
			b.WriteString(line(id))
		}
		if err := os.WriteFile(filepath.Join(root, name), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("history.1.jsonl", "a", "b")
	write("history.jsonl", "c")
	var got []string
	err := ScanHistory(root, func(e Event) error {
		if e.ID == "a" { // a rotation, by renames (the lock would not let one happen)
			for _, r := range [][2]string{{"history.1.jsonl", "history.2.jsonl"}, {"history.jsonl", "history.1.jsonl"}} {
				if err := os.Rename(filepath.Join(root, r[0]), filepath.Join(root, r[1])); err != nil {
					t.Fatal(err)
				}
			}
			write("history.jsonl", "d")
		}
		got = append(got, e.ID)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[a b c]" {
		t.Errorf("events passed: %v, want [a b c]", got)
	}
}

// TestScanHistoryHoldsUpNoAppend: a scan whose reader is slow (its events
// piped to a pager that waits for a key) holds no lock on the history
// while it reads: it held the shared lock to its end, and every append
// of the watcher's waited for it.
func TestScanHistoryHoldsUpNoAppend(t *testing.T) {
	root := t.TempDir()
	h := OpenHistory(root)
	if err := h.Append(Event{ID: "a", Rev: 1, State: Queued, Time: time.Now()}); err != nil {
		t.Fatal(err)
	}
	err := ScanHistory(root, func(e Event) error {
		done := make(chan error, 1)
		go func() { done <- h.Append(Event{ID: "b", Rev: 1, State: Queued, Time: time.Now()}) }()
		select {
		case err := <-done:
			return err
		case <-time.After(5 * time.Second):
			return fmt.Errorf("an append waited for the scan")
		}
	})
	if err != nil {
		t.Fatal(err)
	}
}
