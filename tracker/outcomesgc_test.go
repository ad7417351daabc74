package tracker

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestExpireOutcomes: tend gc removes the answers the watcher's sweep
// removes, and no other: tagged ones (and selectors') written over an
// hour ago, in outcomes/ and in a user's outcomes/<uid>/; untagged ones
// of runs that are not there, written before the cutoff; none of a run
// that is there, none written in the last minute, nothing that is not an
// answer; and a leftover of a sweep stopped halfway.
func TestExpireOutcomes(t *testing.T) {
	root := t.TempDir()
	out := filepath.Join(root, "outcomes")
	now := time.Now()
	write := func(rel string, age time.Duration) {
		t.Helper()
		path := filepath.Join(out, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte("rejected: x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		at := now.Add(-age)
		if err := os.Chtimes(path, at, at); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(root, "runs", "there"), 0o755); err != nil {
		t.Fatal(err)
	}
	write("a@t1.cancel", 2*time.Hour)      // tagged, old: goes
	write("a@t2.cancel", 30*time.Minute)   // tagged, young: stays
	write("*@t3.cancel", 2*time.Hour)      // a selector's, old: goes
	write("1001/b@t4.signal", 2*time.Hour) // a member's tagged, old: goes
	write("1001/gone.start", 48*time.Hour) // a member's of no run, old: goes
	write("gone.start", 48*time.Hour)      // no run, old: goes
	write("gone.cancel", 12*time.Hour)     // no run, younger than the cutoff: stays
	write("there.start", 48*time.Hour)     // a run's: stays (its deletion removes it)
	write("notes.txt", 48*time.Hour)       // no answer's name: stays
	write("0/x.start", 48*time.Hour)       // no user's directory: stays
	write(".gc-1", 48*time.Hour)           // a stopped sweep's, moved aside just now: stays
	stays := []string{".gc-1", "0/x.start", "1001", "a@t2.cancel", "gone.cancel", "notes.txt", "there.start"}

	n, err := ExpireOutcomes(root, now.Add(-KeepTaggedAnswers), now.Add(-24*time.Hour), true)
	if err != nil || n != 5 {
		t.Fatalf("dry run: ExpireOutcomes = %d, %v; want 5", n, err)
	}
	if got := listAnswers(t, out); len(got) != 12 {
		t.Fatalf("a dry run removed answers: %v", got)
	}
	n, err = ExpireOutcomes(root, now.Add(-KeepTaggedAnswers), now.Add(-24*time.Hour), false)
	if err != nil || n != 5 {
		t.Fatalf("ExpireOutcomes = %d, %v; want 5", n, err)
	}
	if got := listAnswers(t, out); !slices.Equal(got, stays) {
		t.Errorf("left %v, want %v", got, stays)
	}
	// What a sweep stopped halfway left aside goes once it has been there
	// a minute (by its change time, which the rename set).
	s := answerSweep{root: root, now: time.Now().Add(2 * answerFloor), aside: ".gc-2"}
	if err := s.run(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(out, ".gc-1")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a sweep's leftover stays: %v", err)
	}

	// Every one (tend gc --older-than 0), but for the last minute's; and a
	// keep of 0 (zero cutoff) removes no untagged answer.
	write("new.start", 10*time.Second)
	write("old.start", 2*time.Minute)
	if n, err := ExpireOutcomes(root, now.Add(-KeepTaggedAnswers), time.Time{}, false); err != nil || n != 0 {
		t.Fatalf("with no runless cutoff: ExpireOutcomes = %d, %v; want 0", n, err)
	}
	if n, err := ExpireOutcomes(root, now.Add(-KeepTaggedAnswers), time.Now(), false); err != nil || n != 2 {
		t.Fatalf("every one: ExpireOutcomes = %d, %v; want 2 (gone.cancel, old.start)", n, err)
	}
	if _, err := os.Stat(filepath.Join(out, "new.start")); err != nil {
		t.Errorf("an answer of the last minute went: %v", err)
	}
}

// TestExpireOutcomesBesideAWatcher: an answer that a watcher writes again
// after tend gc judged the one there old (a new start of the same ID) is
// not removed: what was moved aside is not the file judged, and it is put
// back under its name, whole, with nothing left aside.
func TestExpireOutcomesBesideAWatcher(t *testing.T) {
	root := t.TempDir()
	out := filepath.Join(root, "outcomes")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(out, "x.start")
	old := time.Now().Add(-48 * time.Hour)
	if err := os.WriteFile(path, []byte("rejected: bad\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	s := answerSweep{root: root, tagged: time.Now().Add(-time.Hour), runless: time.Now().Add(-time.Hour), aside: ".gc-test"}
	s.judged = func(dir, name string) {
		// The watcher answers a new start of x, as it does: a new file
		// renamed over the name.
		tmp := filepath.Join(out, ".tmp")
		if err := os.WriteFile(tmp, []byte("accepted\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.run(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || string(b) != "accepted\n" {
		t.Errorf("x.start = %q, %v; want the watcher's new answer, kept", b, err)
	}
	if s.n != 0 {
		t.Errorf("%d answers removed, want 0", s.n)
	}
	if got := listAnswers(t, out); !slices.Equal(got, []string{"x.start"}) {
		t.Errorf("outcomes/ holds %v, want x.start alone", got)
	}
}

// TestPutBackKeepsANewerAnswer: a moved answer is put back only where no
// newer one took its name meanwhile.
func TestPutBackKeepsANewerAnswer(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{"aside": "older", "x.start": "newer"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := putBack(fd, "aside", "x.start"); !errors.Is(err, unix.EEXIST) {
		t.Errorf("putBack over a newer answer = %v, want EEXIST", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "x.start")); string(b) != "newer" {
		t.Errorf("x.start = %q, want the newer answer", b)
	}
	os.Remove(filepath.Join(dir, "x.start"))
	if err := putBack(fd, "aside", "x.start"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "x.start")); string(b) != "older" {
		t.Errorf("x.start = %q, want the one put back", b)
	}
}

// listAnswers lists dir's files, and those of its directories, sorted,
// as paths relative to dir.
func listAnswers(t *testing.T, dir string) []string {
	t.Helper()
	var got []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if !d.IsDir() || rel == "1001" {
			got = append(got, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	return got
}
