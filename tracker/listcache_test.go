package tracker

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestBriefRoundTrip(t *testing.T) {
	at := time.Date(2026, 11, 22, 1, 2, 3, 456789, time.FixedZone("x", 3600))
	zero, code := 0, 137
	tests := []*State{
		{ID: "a", State: Completed, Rev: 3, Command: []string{"/bin/sh", "-c", "true"}, CreatedAt: at, StartedAt: &at, EndedAt: &at, ExitCode: &zero},
		{ID: "b.1", State: Failed, Session: "agent-7", Command: []string{"printf", "a\tb\nc", "", `"quoted" \ back`}, CreatedAt: at,
			StartedAt: &at, EndedAt: &at, Signal: "SIGKILL", DurationSeconds: 0.123456789, Progress: "50% — ünïcode\t", Cwd: "/not/brief"},
		{ID: "c", State: Canceled, Labels: map[string]string{"k": "v", "tab\tkey": "new\nline", "empty": ""}, CreatedAt: at, ExitCode: &code},
		{ID: "d", State: TimedOut, CreatedAt: at, StartedAt: &at},
	}
	for _, st := range tests {
		got, err := parseBrief(st.ID, briefFields(st))
		if err != nil {
			t.Fatalf("%s: %v", st.ID, err)
		}
		if want := briefOf(st); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: read back\n%+v\nwant\n%+v", st.ID, got, want)
		}
	}
}

func TestParseBriefRefusesWhatItDidNotWrite(t *testing.T) {
	good := briefFields(&State{ID: "a", State: Completed, Command: []string{"x"}, Labels: map[string]string{"k": "v"}})
	for _, fields := range []string{
		"",
		strings.Replace(good, string(Completed), string(Running), 1), // only finished runs are cached
		strings.TrimSuffix(good, "\t\"v\""),                          // a label cut short
		strings.Replace(good, "\t1\t\"x\"", "\t2\t\"x\"", 1),
		strings.Replace(good, `"x"`, `"x`, 1),
		strings.Replace(good, "\t1\t\"k\"", "\t-1\t\"k\"", 1),
	} {
		if st, err := parseBrief("a", fields); err == nil {
			t.Errorf("parseBrief(%q) = %+v", fields, st)
		}
	}
}

// listAt lists s as ListBrief does, as if at time since.
func listAt(t *testing.T, s *Store, since time.Time) map[string]*State {
	t.Helper()
	runs, errs := s.list(&listCache{path: filepath.Join(filepath.Dir(s.Dir()), "list.cache"), since: since})
	if len(errs) > 0 {
		t.Fatalf("list: %v", errs)
	}
	byID := make(map[string]*State)
	for _, st := range runs {
		byID[st.ID] = st
	}
	return byID
}

func writeRun(t *testing.T, s *Store, st *State) {
	t.Helper()
	if err := os.Mkdir(s.RunDir(st.ID), 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		t.Fatal(err)
	}
	if err := s.Write(st); err != nil {
		t.Fatal(err)
	}
}

// A finished run is listed from the cache (its brief record, so without
// its cwd) once it is there, and read again once its file is another.
func TestListBriefUsesTheCacheWhileTheFileIsTheSame(t *testing.T) {
	s, root := newStore(t)
	now, code := time.Now(), 0
	writeRun(t, s, &State{ID: "a", State: Completed, Rev: 3, Cwd: "/a", CreatedAt: now, EndedAt: &now, ExitCode: &code})
	writeRun(t, s, &State{ID: "b", State: Running, Rev: 2, Cwd: "/b", CreatedAt: now})
	later := now.Add(time.Minute)

	first := listAt(t, s, later)
	if first["a"].Cwd != "/a" || first["b"].Cwd != "/b" {
		t.Fatalf("first listing, with no cache: %+v, %+v", first["a"], first["b"])
	}
	cache, err := os.ReadFile(filepath.Join(root, "list.cache"))
	if err != nil || !strings.HasPrefix(string(cache), listCacheHeader+"\na\t") || strings.Contains(string(cache), "\nb\t") {
		t.Fatalf("the cache holds the finished run only: %q, %v", cache, err)
	}
	second := listAt(t, s, later)
	if !reflect.DeepEqual(second["a"], briefOf(first["a"])) || second["b"].Cwd != "/b" {
		t.Fatalf("second listing: %+v, %+v; want a from the cache", second["a"], second["b"])
	}

	writeRun(t, s, &State{ID: "a", State: Completed, Rev: 4, Cwd: "/a", Labels: map[string]string{"k": "v"}, CreatedAt: now, EndedAt: &now, ExitCode: &code})
	if third := listAt(t, s, later); third["a"].Labels["k"] != "v" || third["a"].Cwd != "/a" {
		t.Fatalf("after a label: %+v; want it read again", third["a"])
	}
	if fourth := listAt(t, s, later); fourth["a"].Labels["k"] != "v" || fourth["a"].Cwd != "" {
		t.Fatalf("after a label, listed again: %+v; want it from the cache", fourth["a"])
	}

	// Edited by hand (one byte more): reported, not shown from the cache.
	path := s.Run("a").State()
	b, _ := os.ReadFile(path)
	os.WriteFile(path, []byte(strings.Replace(string(b), `"exit_code": 0`, `"exit_code": 10`, 1)), 0o600)
	if _, errs := s.list(&listCache{path: filepath.Join(root, "list.cache"), since: later}); len(errs) != 1 || !errors.Is(errs[0], ErrEdited) {
		t.Fatalf("a record edited after it was cached: errors %v, want it reported as edited", errs)
	}

	os.RemoveAll(s.RunDir("a"))
	if fifth := listAt(t, s, later); len(fifth) != 1 {
		t.Fatalf("after a's removal: %v", fifth)
	}
	if cache, _ := os.ReadFile(filepath.Join(root, "list.cache")); string(cache) != listCacheHeader+"\n" {
		t.Fatalf("the cache still holds a removed run: %q", cache)
	}
}

// A record changed within racyWindow of the listing is not cached: a
// change in place in the same tick of the file clock would keep its Stamp.
func TestListBriefDoesNotCacheWhatJustChanged(t *testing.T) {
	s, root := newStore(t)
	now := time.Now()
	writeRun(t, s, &State{ID: "a", State: Completed, Rev: 3, CreatedAt: now, EndedAt: &now})
	listAt(t, s, time.Now())
	if cache, _ := os.ReadFile(filepath.Join(root, "list.cache")); strings.Contains(string(cache), "\na\t") {
		t.Fatalf("a record written just now was cached: %q", cache)
	}
}

// Whatever is in the cache's place, a listing reads the records.
func TestListBriefSurvivesABadCache(t *testing.T) {
	now := time.Now()
	later := now.Add(time.Minute)
	for name, bad := range map[string]func(path string) error{
		"another version": func(path string) error { return os.WriteFile(path, []byte("tend list cache 0\na\tx\ty\n"), 0o600) },
		"a fifo":          func(path string) error { return syscall.Mkfifo(path, 0o600) },
		"a link to /dev/zero": func(path string) error {
			return os.Symlink("/dev/zero", path)
		},
		"a directory": func(path string) error { return os.Mkdir(path, 0o700) },
		"a line cut short": func(path string) error {
			b, err := os.ReadFile(path)
			if err == nil {
				err = os.WriteFile(path, b[:len(b)-3], 0o600)
			}
			return err
		},
		"a line that does not parse": func(path string) error {
			b, err := os.ReadFile(path)
			if err == nil {
				err = os.WriteFile(path, []byte(strings.Replace(string(b), string(Completed), "finished", 1)), 0o600)
			}
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			s, root := newStore(t)
			writeRun(t, s, &State{ID: "a", State: Completed, Rev: 3, Cwd: "/a", CreatedAt: now, EndedAt: &now})
			path := filepath.Join(root, "list.cache")
			if name == "a line cut short" || name == "a line that does not parse" {
				listAt(t, s, later)
			}
			if err := bad(path); err != nil {
				t.Fatal(err)
			}
			if got := listAt(t, s, later); got["a"] == nil || got["a"].Cwd != "/a" {
				t.Fatalf("listed %+v; want a read from its file", got["a"])
			}
		})
	}
}

func TestStampText(t *testing.T) {
	if stampText(Stamp{}) != "" {
		t.Fatal("the zero Stamp has a text")
	}
	s, _ := newStore(t)
	writeRun(t, s, &State{ID: "a", State: Completed, Rev: 1})
	sp, err := s.Stamp("a")
	if err != nil {
		t.Fatal(err)
	}
	dirfd, err := syscall.Open(s.Dir(), syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(dirfd)
	if got := stampAt(dirfd, "a"); got == "" || got != stampText(sp) || strings.ContainsAny(got, "\t\n") {
		t.Fatalf("stampAt = %q, stampText(Stamp) = %q", got, stampText(sp))
	}
	if stampAt(dirfd, "gone") != "" {
		t.Fatal("a missing record has a stamp")
	}
}

// briefOf returns the part of st that ListBrief may return of a finished
// run, as its doc comment lists it.
func briefOf(st *State) *State {
	b := &State{ID: st.ID, State: st.State, Session: st.Session, Command: st.Command, Labels: st.Labels,
		CreatedAt: st.CreatedAt.UTC(), ExitCode: st.ExitCode, Signal: st.Signal, Progress: st.Progress,
		DurationSeconds: st.DurationSeconds}
	b.StartedAt, b.EndedAt = inUTC(st.StartedAt), inUTC(st.EndedAt)
	return b
}

func inUTC(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}
