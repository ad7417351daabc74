package tracker

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tendhq/tend/tracker/layout"
)

func newStore(t testing.TB) (*Store, string) {
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
	os.WriteFile(filepath.Join(s.RunDir("a"), "state.json"), []byte(`{"id": "a", "state": `), 0o644)
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
	checkAppended(t, events, writers, each)
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
	if got := s.Trashed(); len(got) != 1 || len(got["a"]) != 1 || got["a"][0] != trash {
		t.Fatalf("Trashed = %v, want a: %s", got, trash)
	}
	if st, err := s.ReadTrashed("a", trash); err != nil || st.ID != "a" {
		t.Fatalf("ReadTrashed = %v, %v; want a's record", st, err)
	}
	if err := os.WriteFile(layout.Run(trash).State(), []byte(`{"id": "a", "state": "completed", "rev": 9}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReadTrashed("a", trash); err == nil {
		t.Fatal("ReadTrashed took a record written by hand")
	}
	if err := os.RemoveAll(trash); err != nil {
		t.Fatal(err)
	}
	if got := s.Trashed(); len(got) != 0 {
		t.Fatalf("Trashed once removed = %v", got)
	}
	if _, err := s.Trash("a"); err == nil {
		t.Fatal("Trash of a missing run succeeded")
	}
}

// TestHelperAppender is not a test: TestProcessesAppend runs the test
// binary as separate processes that append to one history through it.
func TestHelperAppender(t *testing.T) {
	root := os.Getenv("TEND_TEST_APPEND_ROOT")
	if root == "" {
		t.Skip("a helper process for TestProcessesAppend")
	}
	n, _ := strconv.Atoi(os.Getenv("TEND_TEST_APPEND_N"))
	h := OpenHistory(root)
	h.MaxSize, _ = strconv.ParseInt(os.Getenv("TEND_TEST_APPEND_MAX"), 10, 64)
	id := os.Getenv("TEND_TEST_APPEND_ID")
	for i := 1; i <= n; i++ {
		e := Event{Time: time.Now(), ID: id, Rev: int64(i), State: Running, Reason: strings.Repeat("r", 300)}
		if err := h.Append(e); err != nil {
			t.Fatal(err)
		}
	}
}

// appendFromProcesses runs procs processes that each append n events (ids
// p0, p1, ...; revs 1..n) to root's history, rotating at maxSize, all at
// once, and returns what the history then holds.
func appendFromProcesses(t *testing.T, root string, procs, n int, maxSize int64) []Event {
	t.Helper()
	var cmds []*exec.Cmd
	for p := range procs {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperAppender$", "-test.count=1")
		cmd.Env = append(os.Environ(), "TEND_TEST_APPEND_ROOT="+root, "TEND_TEST_APPEND_ID=p"+strconv.Itoa(p),
			"TEND_TEST_APPEND_N="+strconv.Itoa(n), "TEND_TEST_APPEND_MAX="+strconv.FormatInt(maxSize, 10))
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	for _, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("appender: %v", err)
		}
	}
	events, err := ReadAllHistory(root)
	if err != nil {
		t.Fatal(err)
	}
	return events
}

// checkAppended checks that every one of procs*n events is there once,
// each process's in the order it appended them.
func checkAppended(t *testing.T, events []Event, procs, n int) {
	t.Helper()
	if len(events) != procs*n {
		t.Fatalf("%d events, want %d", len(events), procs*n)
	}
	next := map[string]int64{}
	for _, e := range events {
		if e.Rev != next[e.ID]+1 {
			t.Fatalf("%s: rev %d after %d: lost or out of order", e.ID, e.Rev, next[e.ID])
		}
		next[e.ID] = e.Rev
	}
}

func TestProcessesAppend(t *testing.T) {
	root := t.TempDir()
	checkAppended(t, appendFromProcesses(t, root, 8, 1000, 0), 8, 1000)
}

func TestRotationUnderConcurrentWriters(t *testing.T) {
	root := t.TempDir()
	events := appendFromProcesses(t, root, 8, 1000, 256<<10)
	checkAppended(t, events, 8, 1000)
	if n := len(HistoryFiles(root)); n < 5 {
		t.Fatalf("%d history files, want several rotations", n)
	}
}

func TestAppendRefusesAfterTornEnd(t *testing.T) {
	root := t.TempDir()
	good := `{"time":"2026-01-02T03:04:05Z","id":"a","rev":1,"state":"running"}` + "\n"
	os.WriteFile(filepath.Join(root, "history.jsonl"), []byte(good+`{"time":"2026`), 0o644)
	err := OpenHistory(root).Append(Event{Time: time.Now(), ID: "b", Rev: 1, State: Running})
	if !errors.Is(err, ErrTornEnd) {
		t.Fatalf("Append after a torn line: %v, want ErrTornEnd", err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "history.jsonl")); string(b) != good+`{"time":"2026` {
		t.Fatalf("the history changed: %q", b)
	}
}

// TestHelperWriter is not a test: TestDurabilityFsyncs runs the test binary
// through it, under strace, to write records.
func TestHelperWriter(t *testing.T) {
	root, durability, ok := strings.Cut(os.Getenv("TEND_TEST_WRITE"), ":")
	if !ok {
		t.Skip("a helper process for TestDurabilityFsyncs")
	}
	s := NewStore(root)
	s.SetRenameNew(true)
	if durability != "" {
		d, err := ParseDurability(durability)
		if err != nil {
			t.Fatal(err)
		}
		s.SetDurability(d)
	}
	states := []*State{{ID: "a", State: Running, Rev: 1}, {ID: "b", State: Running, Rev: 1}}
	if err := s.Write(states[0]); err != nil {
		t.Fatal(err)
	}
	for _, err := range s.WriteAll(states, nil) {
		if err != nil {
			t.Fatal(err)
		}
	}
	// A run whose directory is new: its first record syncs runs/ too,
	// and only its first.
	if err := s.MakeRunDir("c"); err != nil {
		t.Fatal(err)
	}
	for rev := range 2 {
		if err := s.Write(&State{ID: "c", State: Running, Rev: int64(rev + 1)}); err != nil {
			t.Fatal(err)
		}
	}
}

// syncCall matches a sync call's start in strace's output (not its
// "<... fsync resumed>").
var syncCall = regexp.MustCompile(`\bf?(data)?sync(fs)?\(`)

// writeBackCall matches a sync_file_range call's start: the write-back
// ReplaceAll starts before its fsyncs, which syncs nothing by itself.
var writeBackCall = regexp.MustCompile(`\bsync_file_range\(`)

// renameNewCall is a rename that replaces nothing (durable.RenameNew):
// each record written power_loss is tried so before its fsync, which
// renames a run's first in and fails, with EEXIST, for one that replaces
// another. Its result may be on a line of its own (strace -f), so only
// the calls are counted; TestReplaceAll checks what they leave.
var renameNewCall = regexp.MustCompile(`\brenameat2\(.*RENAME_NOREPLACE`)

// TestDurabilityFsyncs counts, with strace, the fsyncs of one record
// written alone, two in a batch, and two of a run whose directory is new:
// each written power_loss is fsynced with its directory, and the first
// in a new directory with runs/ as well, each record's write-back started
// before its fsync; written watcher_crash, none is.
func TestDurabilityFsyncs(t *testing.T) {
	strace, err := exec.LookPath("strace")
	if err != nil {
		t.Skip("needs strace")
	}
	for _, tt := range []struct {
		durability      string
		want, writeBack int
		renameNew       int // records first tried by a rename that replaces nothing
	}{{"", 11, 5, 5}, {"power_loss", 11, 5, 5}, {"watcher_crash", 0, 0, 0}} {
		s, root := newStore(t)
		for _, id := range []string{"a", "b"} {
			os.Mkdir(s.RunDir(id), 0o755)
		}
		trace := filepath.Join(root, "trace")
		cmd := exec.Command(strace, "-f", "-qq", "-o", trace, "-e", "trace=fsync,fdatasync,sync,syncfs,sync_file_range,renameat2",
			os.Args[0], "-test.run=^TestHelperWriter$", "-test.count=1")
		cmd.Env = append(os.Environ(), "TEND_TEST_WRITE="+root+":"+tt.durability)
		if out, err := cmd.CombinedOutput(); err != nil {
			if strings.Contains(string(out), "Operation not permitted") {
				t.Skipf("strace cannot trace here: %s", out)
			}
			t.Fatalf("%v: %v\n%s", cmd, err, out)
		}
		b, err := os.ReadFile(trace)
		if err != nil {
			t.Fatal(err)
		}
		if got := len(syncCall.FindAll(b, -1)); got != tt.want {
			t.Errorf("durability %q: %d syncs, want %d:\n%s", tt.durability, got, tt.want, b)
		}
		if got := len(writeBackCall.FindAll(b, -1)); got != tt.writeBack {
			t.Errorf("durability %q: %d write-backs started, want %d:\n%s", tt.durability, got, tt.writeBack, b)
		}
		if got := len(renameNewCall.FindAll(b, -1)); got != tt.renameNew {
			t.Errorf("durability %q: %d records tried by a rename that replaces nothing, want %d:\n%s", tt.durability, got, tt.renameNew, b)
		}
		for _, id := range []string{"a", "b"} {
			if st, err := s.Read(id); err != nil || st.State != Running {
				t.Errorf("durability %q: Read(%s) = %+v, %v", tt.durability, id, st, err)
			}
		}
	}
}

// ReadOutput reads no more than the stream holds, whatever a client asks
// for: a huge max, or an offset past the end, is no allocation of that
// size and no panic.
func TestReadOutputBounds(t *testing.T) {
	s := NewStore(t.TempDir())
	if err := s.MakeRunDir("a"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.RunDir("a"), "stdout"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	st := &State{ID: "a"}
	tests := []struct {
		off, max int64
		want     string
		wantNext int64
	}{
		{0, 1 << 62, "hello\n", 6},
		{2, 2, "ll", 4},
		{6, 100, "", 6},
		{1 << 40, 1 << 40, "", 1 << 40},
		{3, -5, "", 3},
	}
	for _, tt := range tests {
		sl, err := s.ReadOutput(st, "stdout", tt.off, tt.max)
		if err != nil || string(sl.Data) != tt.want || sl.Next != tt.wantNext {
			t.Errorf("ReadOutput(%d, %d) = %q next %d, %v; want %q next %d", tt.off, tt.max, sl.Data, sl.Next, err, tt.want, tt.wantNext)
		}
	}
}

// TestRebuildTakesOnlyTheOwnersRequest: a rebuilt record takes its command
// from the run's claimed request only if that file is the owner's and has
// no other name: the owner may have put there one they may not read, for
// the record, sealed by root's fsck, to show it.
func TestRebuildTakesOnlyTheOwnersRequest(t *testing.T) {
	s, _ := newStore(t)
	events := []Event{{Time: time.Now(), ID: "r", Rev: 1, State: Completed}}
	noProcess := func(int, string) (uint64, bool) { return 0, false }
	for _, tc := range []struct {
		name string
		make func(path string) error
		want []string
	}{
		{"the owner's", func(path string) error { return os.WriteFile(path, []byte("echo mine\n"), 0o600) }, []string{"/bin/sh", "-c", "echo mine"}},
		{"a second name of a file", func(path string) error {
			other := filepath.Join(t.TempDir(), "other")
			if err := os.WriteFile(other, []byte("echo theirs\n"), 0o600); err != nil {
				return err
			}
			return os.Link(other, path)
		}, nil},
	} {
		os.RemoveAll(s.RunDir("r"))
		if err := os.MkdirAll(s.RunDir("r"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := tc.make(s.Run("r").Request()); err != nil {
			t.Fatal(err)
		}
		if st := Rebuild(s, "r", events, noProcess); !slices.Equal(st.Command, tc.want) {
			t.Errorf("%s: command %q, want %q", tc.name, st.Command, tc.want)
		}
	}
}

// TestRebuildKeepsWhatTheRequestAndTheEndSay: a record rebuilt from the
// history and the run's request keeps what they hold of it: its working
// directory as the watcher resolved it, its restart policy, health check
// and output cap, its attempts, and its end as the end's event recorded
// it (times, duration, CPU), not the event's line's time.
func TestRebuildKeepsWhatTheRequestAndTheEndSay(t *testing.T) {
	s, _ := newStore(t)
	if err := os.MkdirAll(s.RunDir("r"), 0o755); err != nil {
		t.Fatal(err)
	}
	body := `{"command": "true", "restart": {"policy": "on-failure"}, "health": {"exec": "true"}, "output_limit": 65536}`
	if err := os.WriteFile(s.Run("r").Request(), []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	created := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	ended := created.Add(time.Minute)
	exit := 0
	events := []Event{
		{Time: created.Add(time.Millisecond), ID: "r", Rev: 1, State: Starting},
		{Time: created.Add(2 * time.Millisecond), ID: "r", Rev: 2, State: Running, PID: 10},
		{Time: created.Add(3 * time.Millisecond), ID: "r", Rev: 3, State: Running, PID: 11},
		{Time: ended.Add(time.Millisecond), ID: "r", Rev: 4, State: Completed, ExitCode: &exit,
			EndedAt: &ended, DurationSeconds: 59.5, CPUSeconds: 1.25, CreatedAt: &created},
	}
	st := Rebuild(s, "r", events, func(int, string) (uint64, bool) { return 0, false })
	project := filepath.Dir(filepath.Dir(s.Dir()))
	switch {
	case st.Cwd != project:
		t.Errorf("cwd %q, want the project %q", st.Cwd, project)
	case st.Restart == nil || st.Restart.Policy != "on-failure":
		t.Errorf("restart %+v, want on-failure", st.Restart)
	case st.Health == nil:
		t.Errorf("no health check")
	case st.Output == nil || st.Output.Limit != 65536:
		t.Errorf("output %+v, want its limit 65536", st.Output)
	case st.Attempt != 2:
		t.Errorf("attempt %d, want 2", st.Attempt)
	case !st.CreatedAt.Equal(created) || st.EndedAt == nil || !st.EndedAt.Equal(ended):
		t.Errorf("created %v, ended %v; want %v, %v", st.CreatedAt, st.EndedAt, created, ended)
	case st.DurationSeconds != 59.5 || st.CPUSeconds != 1.25:
		t.Errorf("duration %v, cpu %v", st.DurationSeconds, st.CPUSeconds)
	case st.Rev != 5 || st.State != Completed:
		t.Errorf("rev %d %s, want 5 completed", st.Rev, st.State)
	}
}

// A rotated history file that is gone (compressed or removed by an
// operator) hides none of the older ones from the readers, and the next
// rotation fills its number: the events read stay oldest first.
func TestHistoryFilesPastAGap(t *testing.T) {
	root := t.TempDir()
	line := func(id string) string {
		return fmt.Sprintf(`{"time":"2026-11-29T06:00:00Z","id":%q,"rev":1,"state":"queued"}`+"\n", id)
	}
	for n, id := range map[int]string{3: "oldest", 2: "older"} {
		if err := os.WriteFile(layout.Root(root).RotatedHistory(n), []byte(line(id)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(layout.Root(root).History(), []byte(line("newer")), 0o644); err != nil {
		t.Fatal(err)
	}
	ids := func() string {
		events, err := ReadAllHistory(root)
		if err != nil {
			t.Fatal(err)
		}
		var s []string
		for _, e := range events {
			s = append(s, e.ID)
		}
		return strings.Join(s, " ")
	}
	if got, want := ids(), "oldest older newer"; got != want {
		t.Fatalf("with history.1.jsonl gone, read %q, want %q", got, want)
	}
	h := OpenHistory(root)
	h.MaxSize = 1 // rotate at the next append
	if err := h.Append(Event{Time: time.Now(), ID: "newest", Rev: 1, State: Queued}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(layout.Root(root).RotatedHistory(1)); err != nil {
		t.Errorf("the rotation did not fill history.1.jsonl: %v", err)
	}
	if got, want := ids(), "oldest older newer newest"; got != want {
		t.Errorf("after a rotation, read %q, want %q", got, want)
	}
}
