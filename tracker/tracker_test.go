package tracker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func newStore(t *testing.T) (*Store, string) {
	root := t.TempDir()
	s := NewStore(root)
	if err := s.Make(); err != nil {
		t.Fatal(err)
	}
	return s, root
}

func TestWriteReadRoundTrip(t *testing.T) {
	s, _ := newStore(t)
	if _, err := s.Read("nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Read(missing) = %v, want ErrNotFound", err)
	}
	os.Mkdir(s.RunDir("a"), 0o755)
	code := 3
	in := &State{ID: "a", State: Failed, Rev: 4, Command: []string{"sh", "-c", "exit 3"}, ExitCode: &code,
		Reason: "exited with code 3", CreatedAt: time.Now().Round(0)}
	if err := s.Write(in); err != nil {
		t.Fatal(err)
	}
	out, err := s.Read("a")
	if err != nil || out.State != Failed || *out.ExitCode != 3 || out.Rev != 4 || !out.CreatedAt.Equal(in.CreatedAt) {
		t.Fatalf("Read = %+v, %v", out, err)
	}
	list, errs := s.List()
	if len(list) != 1 || len(errs) != 0 {
		t.Fatalf("List = %v, %v", list, errs)
	}
}

func TestReadRejectsBrokenState(t *testing.T) {
	s, _ := newStore(t)
	os.Mkdir(s.RunDir("a"), 0o755)
	os.WriteFile(s.Path("a", "state.json"), []byte(`{"id": "a", "state": `), 0o644)
	_, err := s.Read("a")
	if err == nil || !strings.Contains(err.Error(), filepath.Join("runs", "a", "state.json")+": not a valid state file") {
		t.Fatalf("Read(broken) = %v", err)
	}
	if _, errs := s.List(); len(errs) != 1 {
		t.Fatalf("List errs = %v, want one", errs)
	}
}

// A reader looping over state.json while it is replaced 1,000 times never
// sees anything but a whole, valid state file.
func TestConcurrentReaderNeverSeesPartialState(t *testing.T) {
	s, _ := newStore(t)
	os.Mkdir(s.RunDir("a"), 0o755)
	long := strings.Repeat("x", 8192) // big enough that a torn write would show
	st := &State{ID: "a", State: Running, Rev: 1, Command: []string{long}, CreatedAt: time.Now()}
	if err := s.Write(st); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var reads, bad int
	var lastErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := s.Read("a"); err != nil {
				bad++
				lastErr = err
			}
			reads++
		}
	}()
	for i := 2; i <= 1001; i++ {
		st.Rev = int64(i)
		if err := s.Write(st); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if bad > 0 {
		t.Fatalf("%d of %d reads saw an invalid state file; last: %v", bad, reads, lastErr)
	}
	if reads < 100 {
		t.Fatalf("only %d reads overlapped the writes", reads)
	}
}

func TestHistoryConcurrentAppendsStayWhole(t *testing.T) {
	_, root := newStore(t)
	const writers, each = 8, 500
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := OpenHistory(root) // its own lock, as another process would have
			for i := 1; i <= each; i++ {
				e := Event{Time: time.Now(), ID: fmt.Sprintf("w%d", w), Rev: int64(i), State: Running,
					Reason: strings.Repeat("r", 3000)} // longer than PIPE_BUF
				if err := h.Append(e); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	events, err := ReadHistory(filepath.Join(root, "history.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != writers*each {
		t.Fatalf("%d events, want %d", len(events), writers*each)
	}
	next := map[string]int64{}
	for _, e := range events {
		if e.Rev != next[e.ID]+1 {
			t.Fatalf("%s: rev %d after %d: out of order", e.ID, e.Rev, next[e.ID])
		}
		next[e.ID] = e.Rev
	}
}

func TestReadHistoryFailsClosed(t *testing.T) {
	good := `{"time":"2026-01-02T03:04:05Z","id":"a","rev":1,"state":"running"}` + "\n"
	tests := []struct{ name, content, wantErr string }{
		{"empty", "", ""},
		{"good", good + good, ""},
		{"torn last line", good + `{"time":"2026-01-02T03:04:05Z","id":"a"`, "history.jsonl:2: torn line"},
		{"garbage in the middle", good + "garbage\n" + good, "history.jsonl:2: not a JSON event"},
		{"wrong shape", good + `{"id":"a"}` + "\n", "history.jsonl:2: not an event"},
		{"unknown field", `{"time":"2026-01-02T03:04:05Z","id":"a","rev":1,"state":"x","zzz":1}` + "\n", `history.jsonl:1: not a JSON event: json: unknown field "zzz"`},
		{"two values", strings.TrimSuffix(good, "\n") + " {}\n", "history.jsonl:1: more than one JSON value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "history.jsonl")
			os.WriteFile(path, []byte(tt.content), 0o644)
			events, err := ReadHistory(path)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
			if len(events) != 1 && tt.name != "unknown field" && tt.name != "two values" {
				t.Fatalf("got %d events before the bad line, want 1", len(events))
			}
		})
	}
}

func TestTrashPurge(t *testing.T) {
	root := t.TempDir()
	s := NewStore(root)
	if err := s.Make(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b.c"} {
		os.MkdirAll(s.RunDir(id), 0o755)
		if err := s.Write(&State{ID: id, State: Completed, Rev: 1}); err != nil {
			t.Fatal(err)
		}
	}
	trash, err := s.Trash("a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Read("a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Read after Trash: %v, want ErrNotFound", err)
	}
	if runs, errs := s.List(); len(runs) != 1 || runs[0].ID != "b.c" || len(errs) > 0 {
		t.Fatalf("List after Trash = %v, %v; want b.c only", runs, errs)
	}
	// A crash before Purge leaves the trash, found by run ID.
	if got := s.Trashed(); len(got) != 1 || got["a"] != trash {
		t.Fatalf("Trashed = %v, want a: %s", got, trash)
	}
	if err := s.Purge(trash); err != nil {
		t.Fatal(err)
	}
	if got := s.Trashed(); len(got) != 0 {
		t.Fatalf("Trashed after Purge = %v", got)
	}
	if _, err := s.Trash("a"); err == nil {
		t.Fatal("Trash of a missing run succeeded")
	}
}
