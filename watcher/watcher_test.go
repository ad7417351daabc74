package watcher

import (
	"errors"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tendhq/tend/procfs"
	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
	"github.com/tendhq/tend/tracker/layout"
)

func TestChildEnvLayers(t *testing.T) {
	got := childEnv([]string{"PATH=/bin", "HOME=/h", "TEND_RUN_ID=parent", "broken"},
		map[string]string{"HOME": "/x"},
		map[string]string{"TEND_RUN_ID": "child"})
	want := "PATH=/bin HOME=/x TEND_RUN_ID=child"
	if strings.Join(got, " ") != want {
		t.Fatalf("childEnv = %q, want %q", got, want)
	}
}

func TestLookPath(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "tool")
	os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755)
	os.WriteFile(filepath.Join(dir, "data"), nil, 0o644)
	tests := []struct {
		name, path, want, wantErr string
	}{
		{"tool", dir, exe, ""},
		{"./rel", "", "./rel", ""}, // a path is used as given, relative to the run's cwd
		{"data", dir, "", `executable "data" not found in PATH`},
		{"tool", "/nonexistent", "", "not found"},
		{"tool", "/nonexistent:", exe, ""}, // an empty PATH entry is the working directory
	}
	for _, tt := range tests {
		got, err := lookPath(tt.name, dir, []string{"PATH=" + tt.path})
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("lookPath(%q, PATH=%q) = %q, %v; want error %q", tt.name, tt.path, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("lookPath(%q, PATH=%q) = %q, %v; want %q", tt.name, tt.path, got, err, tt.want)
		}
	}
}

func TestDescribeExit(t *testing.T) {
	tests := []struct {
		e       procfs.Exit
		adopted bool
		want    string
	}{
		{procfs.Exit{Code: 3}, false, "exited with code 3"},
		{procfs.Exit{Code: -1, Signal: syscall.SIGKILL}, false, "killed by SIGKILL"},
		{procfs.Exit{Code: -1, Signal: syscall.SIGSEGV, Core: true}, false, "killed by SIGSEGV (core dumped)"},
		{procfs.Exit{Code: -1}, true, "exit status unknown: it ended while neither a watcher nor a keeper was its parent"},
	}
	for _, tt := range tests {
		if got := describeExit(tt.e, tt.adopted); got != tt.want {
			t.Errorf("describeExit(%+v, %v) = %q, want %q", tt.e, tt.adopted, got, tt.want)
		}
	}
}

func TestLockIsExclusiveAndProbeSeesIt(t *testing.T) {
	root := t.TempDir()
	if running, _, err := tracker.ProbeWatcher(root); running || err != nil {
		t.Fatalf("Probe of an idle root = %v, %v", running, err)
	}
	l, err := lock(root)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(layout.Root(root).WatcherPID(), []byte("4242\n"), 0o644)
	if _, err := lock(root); !errors.Is(err, ErrRunning) || !strings.Contains(err.Error(), "(pid 4242)") {
		t.Fatalf("second lock = %v, want ErrRunning naming pid 4242", err)
	}
	if running, pid, err := tracker.ProbeWatcher(root); !running || pid != 4242 || err != nil {
		t.Fatalf("Probe = %v, %d, %v; want running, 4242", running, pid, err)
	}
	l.Unlock()
	if _, err := lock(root); err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
}

func TestExitRecords(t *testing.T) {
	tests := []struct {
		e    procfs.Exit
		text string
	}{
		{procfs.Exit{Code: 0}, "exited 0\n"},
		{procfs.Exit{Code: 125}, "exited 125\n"},
		{procfs.Exit{Code: -1, Signal: syscall.SIGKILL}, "killed SIGKILL\n"},
		{procfs.Exit{Code: -1, Signal: syscall.SIGSEGV, Core: true}, "killed SIGSEGV core\n"},
	}
	root := t.TempDir()
	for i, tt := range tests {
		if got := formatExit(tt.e); got != tt.text {
			t.Errorf("formatExit(%+v) = %q, want %q", tt.e, got, tt.text)
		}
		if err := writeExitRecord(root, 100+i, 5, tt.e); err != nil {
			t.Fatal(err)
		}
		if got, err := readExitRecord(root, 100+i, 5); err != nil || got != tt.e {
			t.Errorf("readExitRecord = %+v, %v; want %+v", got, err, tt.e)
		}
	}
	for _, bad := range []string{"", "exited", "exited x", "exited 256", "killed SIGNOPE", "killed SIGKILL extra", "done 0"} {
		if e, err := parseExit([]byte(bad)); err == nil {
			t.Errorf("parseExit(%q) = %+v, want an error", bad, e)
		}
	}
	if _, err := readExitRecord(root, 1, 1); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("readExitRecord of a missing record: %v", err)
	}
	if err := removeExitRecord(root, 100, 5); err != nil {
		t.Fatal(err)
	}
	if err := removeExitRecord(root, 100, 5); err != nil {
		t.Fatalf("removing a record twice: %v", err)
	}
}

func TestExitRecordNames(t *testing.T) {
	tests := []struct {
		name  string
		pid   int
		start uint64
		ok    bool
	}{
		{"123-4567", 123, 4567, true},
		{".record-123", 0, 0, false}, // a record being written
		{"123", 0, 0, false},
		{"x-1", 0, 0, false},
		{"0-1", 0, 0, false},
	}
	for _, tt := range tests {
		pid, start, ok := parseExitRecordName(tt.name)
		if pid != tt.pid || start != tt.start || ok != tt.ok {
			t.Errorf("parseExitRecordName(%q) = %d, %d, %v", tt.name, pid, start, ok)
		}
	}
	if got := exitRecordName(123, 4567); got != "123-4567" {
		t.Errorf("exitRecordName = %q", got)
	}
}

func TestPermitted(t *testing.T) {
	run := &tracker.State{ID: "r", Session: "A", OwnerUID: 1000}
	free := &tracker.State{ID: "f", OwnerUID: 1000}
	tests := []struct {
		uid     int
		session string
		st      *tracker.State
		ok      bool
		why     string
	}{
		{1000, "A", run, true, ""},
		{1000, "", run, true, ""}, // an operator's request
		{0, "A", run, true, ""},   // root
		{1000, "B", run, false, "run r belongs to session A, not to session B"},
		{1000, "A", free, false, "run f belongs to no session, not to session A"},
		{1001, "A", run, false, "run r belongs to uid 1000, not to uid 1001"},
		{1001, "", free, false, "run f belongs to uid 1000, not to uid 1001"},
		{1001, "B", run, false, "run r belongs to uid 1000, not to uid 1001"}, // the user first, whatever the session
	}
	for _, tt := range tests {
		ok, why := permitted(tt.uid, tt.session, tt.st)
		if ok != tt.ok || why != tt.why {
			t.Errorf("permitted(%d, %q, %s) = %v, %q; want %v, %q", tt.uid, tt.session, tt.st.ID, ok, why, tt.ok, tt.why)
		}
	}
}

func TestWantsRestart(t *testing.T) {
	always := &spool.Restart{Policy: spool.RestartAlways}
	onFailure := &spool.Restart{Policy: spool.RestartOnFailure}
	ok, bad := procfs.Exit{Code: 0}, procfs.Exit{Code: 2}
	killed := procfs.Exit{Code: -1, Signal: syscall.SIGKILL}
	tests := []struct {
		restart *spool.Restart
		stop    *tracker.Stop
		e       procfs.Exit
		unknown bool
		want    bool
	}{
		{nil, nil, bad, false, false},
		{always, nil, ok, false, true},
		{onFailure, nil, ok, false, false},
		{onFailure, nil, bad, false, true},
		{onFailure, nil, killed, false, true},
		{onFailure, nil, ok, true, true}, // an unknown end counts as a failure
		{always, &tracker.Stop{Cause: tracker.CauseCanceled}, killed, false, false},
		{always, &tracker.Stop{Cause: tracker.CauseTimedOut}, killed, false, false},
		{onFailure, &tracker.Stop{Cause: tracker.CauseRestart}, killed, false, true},
	}
	for i, tt := range tests {
		st := &tracker.State{Restart: tt.restart, Stop: tt.stop}
		if got := wantsRestart(st, tt.e, tt.unknown); got != tt.want {
			t.Errorf("%d: wantsRestart = %v, want %v", i, got, tt.want)
		}
	}
}

func TestRestartDelayGrowsToItsCap(t *testing.T) {
	st := &tracker.State{Restart: &spool.Restart{Delay: spool.Duration(100 * time.Millisecond), MaxDelay: spool.Duration(time.Second)}}
	var last time.Duration
	for recent := range 6 {
		d := restartDelay(st, recent)
		base := min(100*time.Millisecond<<recent, time.Second)
		if d < base || d > base+base/5 {
			t.Errorf("restartDelay after %d restarts = %v, want %v plus up to 20%%", recent, d, base)
		}
		if base < time.Second && d <= last {
			t.Errorf("restartDelay did not grow: %v after %v", d, last)
		}
		last = d
	}
}

// The answers to tagged requests are swept an hour after they were
// written, whoever wrote the request; untagged ones stay (a shell client
// reads them by name, and a start's says what became of a run).
func TestSweepTaggedOutcomes(t *testing.T) {
	w := newWatcher(Config{Root: t.TempDir(), Log: io.Discard})
	if err := w.spool.Make(); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * time.Hour)
	for name, mtime := range map[string]time.Time{
		"a@x1.cancel": old, "a@x2.cancel": time.Now(), "a.cancel": old, "a.start": old, "junk": old, "*@x3.cancel": old,
	} {
		path := filepath.Join(w.spool.Outcomes(), name)
		os.WriteFile(path, []byte("canceled\n"), 0o644)
		os.Chtimes(path, mtime, mtime)
	}
	w.sweepTaggedOutcomes(time.Now().Add(-keepTaggedOutcomes))
	ents, _ := os.ReadDir(w.spool.Outcomes())
	var left []string
	for _, e := range ents {
		left = append(left, e.Name())
	}
	if want := []string{"a.cancel", "a.start", "a@x2.cancel", "junk"}; !slices.Equal(left, want) {
		t.Fatalf("left %v, want %v", left, want)
	}
}

// The untagged answers of requests whose ID names no run are swept once
// older than the cutoff, in outcomes/ and in a user's directory there; a
// run's, a young one, a tagged one and a name of no request stay.
func TestSweepRunlessOutcomes(t *testing.T) {
	w := newWatcher(Config{Root: t.TempDir(), Log: io.Discard})
	if err := w.spool.Make(); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(w.store.RunDir("live"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(w.spool.Outcomes(), "1001"), 0o755); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * time.Hour)
	for name, mtime := range map[string]time.Time{
		"ghost.start": old, "young.start": time.Now(), "live.start": old, "live.cancel": old,
		"a@x1.cancel": old, "junk": old, "1001/ghost.cancel": old, "1001/live.label": old,
	} {
		path := filepath.Join(w.spool.Outcomes(), name)
		if err := os.WriteFile(path, []byte("rejected: bad\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		os.Chtimes(path, mtime, mtime)
	}
	w.sweepRunlessOutcomes(time.Now().Add(-time.Hour))
	var left []string
	filepath.WalkDir(w.spool.Outcomes(), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(w.spool.Outcomes(), path)
			left = append(left, rel)
		}
		return nil
	})
	want := []string{"1001/live.label", "a@x1.cancel", "junk", "live.cancel", "live.start", "young.start"}
	if !slices.Equal(left, want) {
		t.Fatalf("left %v, want %v", left, want)
	}
}

// TestReadyPollKeepsOneTimer: a service that waits for its ready file is
// looked at every 50 ms for as long as it starts; each look replaces the
// run's one poll timer instead of adding one it keeps until the run ends
// (86,400 a day at a health check's default interval).
func TestReadyPollKeepsOneTimer(t *testing.T) {
	root := t.TempDir()
	w := &watcher{do: make(chan func(), 1), store: tracker.NewStore(root), runs: map[string]*run{}}
	r := &run{st: &tracker.State{ID: "svc", State: tracker.Starting, ReadyFile: true}}
	w.runs["svc"] = r
	w.scheduleReadyPoll(r)
	for range 5 {
		first := r.poll
		(<-w.do)()
		if r.poll == nil || r.poll == first {
			t.Fatalf("a look did not schedule the next in the run's poll timer")
		}
		if len(r.timers) != 0 {
			t.Fatalf("the run keeps %d timers, want none besides its poll", len(r.timers))
		}
	}
	r.poll.Stop()
}

// TestCarried: a member's tagged request is carried out once across an
// upgrade, whose record names it without its owner, and no other user's
// request is taken for it.
func TestCarried(t *testing.T) {
	label := func(owner int) spool.Name {
		return spool.Name{ID: "r", Tag: "t1", Verb: spool.VerbLabel, Owner: owner}
	}
	for _, tc := range []struct {
		name  string
		owner int // the run's
		done  []string
		n     spool.Name
		want  bool
	}{
		{"root's, named", 1001, []string{"r@t1.label"}, label(0), true},
		{"a member's, named with its owner", 1001, []string{"1001/r@t1.label"}, label(1001), true},
		{"a member's, by a tend before owners", 1001, []string{"r@t1.label"}, label(1001), true},
		{"another member's with that name", 1001, []string{"1002/r@t1.label"}, label(1001), false},
		{"root's name is not another owner's", 1002, []string{"r@t1.label"}, label(1001), false},
		{"a member's is not root's", 1001, []string{"1001/r@t1.label"}, label(0), false},
		{"another tag", 1001, []string{"1001/r@t2.label"}, label(1001), false},
	} {
		st := &tracker.State{ID: "r", OwnerUID: tc.owner, Done: tc.done}
		if got := carried(st, tc.n); got != tc.want {
			t.Errorf("%s: carried = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestNoteStreamLeavesOutStaleSwitches: a run that outran the watcher
// brings events after the bytes they came for are placed; a switch that
// tells nothing is not recorded.
func TestNoteStreamLeavesOutStaleSwitches(t *testing.T) {
	root := t.TempDir()
	w := &watcher{store: tracker.NewStore(root)}
	r := &run{st: &tracker.State{ID: "r", State: tracker.Running}}
	dir := w.store.RunDir("r")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(stream, data string) {
		t.Helper()
		f, err := os.OpenFile(filepath.Join(dir, stream), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString(data)
		f.Close()
	}
	for _, step := range []struct{ write, event string }{
		// Four lines each, written alternately, before the watcher looked:
		// its eight events then find the files whole.
		{"stdout", ""}, {"stderr", ""}, {"stdout", ""}, {"stderr", ""},
		{"", "stdout"}, {"", "stderr"}, {"", "stdout"}, {"", "stderr"},
		// Then the watcher keeps up.
		{"stdout", "stdout"}, {"stderr", "stderr"}, {"stderr", "stderr"}, {"stdout", "stdout"},
	} {
		if step.write != "" {
			write(step.write, "line\n")
		}
		if step.event != "" {
			w.noteStream(r, step.event)
		}
	}
	var got []string
	for _, x := range r.switches {
		got = append(got, x.String())
	}
	want := []string{"stdout 10", "stderr 10", "stdout 15", "stderr 20"}
	if !slices.Equal(got, want) {
		t.Errorf("switches %q, want %q", got, want)
	}
}

// A restart loop waits, whatever the service's own settings: beyond 5
// attempts ended within the last minute, at least 1 s, doubled for each
// beyond, up to 30 s; and a record keeps at most maxKeptAttempts
// attempts, whatever its limit.
func TestRestartLoopFloor(t *testing.T) {
	loop := &spool.Restart{Policy: spool.RestartAlways, Limit: 1 << 30, Window: spool.Duration(time.Nanosecond)}
	st := &tracker.State{Restart: loop}
	now := time.Now()
	want := []time.Duration{0, 0, 0, 0, 0, 0, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}
	for n, w := range want {
		if got := baseDelay(st, 0); got != w {
			t.Errorf("%d attempts ended within the minute: delay %v, want %v", n, got, w)
		}
		st.Attempts = append(st.Attempts, tracker.Attempt{EndedAt: now})
	}
	st.Attempts = []tracker.Attempt{{EndedAt: now.Add(-2 * time.Minute)}}
	for range 6 {
		st.Attempts = append(st.Attempts, tracker.Attempt{EndedAt: now.Add(-61 * time.Second)})
	}
	if got := baseDelay(st, 0); got != 0 {
		t.Errorf("attempts ended over a minute ago: delay %v, want 0", got)
	}
	for range maxKeptAttempts + 10 {
		keepAttempt(st, "exited")
	}
	if len(st.Attempts) != maxKeptAttempts {
		t.Errorf("a record keeps %d attempts, want %d", len(st.Attempts), maxKeptAttempts)
	}
}

// TestMetaTooLarge: a label or note change is refused when it would make
// a run's labels and notes larger than maxMeta, and taken when it makes
// them no larger, even over it.
func TestMetaTooLarge(t *testing.T) {
	big := strings.Repeat("x", maxMeta/2)
	str := func(s string) *string { return &s }
	for _, tc := range []struct {
		name   string
		st     tracker.State
		change tracker.Event
		refuse bool
	}{
		{"a label within", tracker.State{Labels: map[string]string{"a": big}}, tracker.Event{Labels: map[string]*string{"b": str("v")}}, false},
		{"a label beyond", tracker.State{Labels: map[string]string{"a": big}}, tracker.Event{Labels: map[string]*string{"b": str(big)}}, true},
		{"a note beyond", tracker.State{Labels: map[string]string{"a": big + big}}, tracker.Event{Note: "n"}, true},
		{"a removal over it", tracker.State{Labels: map[string]string{"a": big, "b": big, "c": big}}, tracker.Event{Labels: map[string]*string{"c": nil}}, false},
		{"a value replaced by a shorter one", tracker.State{Labels: map[string]string{"a": big + big + big}}, tracker.Event{Labels: map[string]*string{"a": str(big + big)}}, false},
	} {
		labels := maps.Clone(tc.st.Labels)
		if got := metaTooLarge(&tc.st, tc.change) != ""; got != tc.refuse {
			t.Errorf("%s: refused = %v, want %v", tc.name, got, tc.refuse)
		}
		if !maps.Equal(labels, tc.st.Labels) || len(tc.st.Notes) != 0 {
			t.Errorf("%s: the record was changed", tc.name)
		}
	}
}

// TestLineWriter: a log line with control characters or bytes that are
// not UTF-8 in it is written as one line still, and printable.
func TestLineWriter(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"run a: ready\n", "run a: ready\n"},
		{"run a: unhealthy (\x1b]2;x\x07\nforged)\n", "run a: unhealthy (\\x1b]2;x\\x07\\x0aforged)\n"},
		{"bad \xff byte\tand tab\n", "bad ? byte\\x09and tab\n"},
		{"no newline\r", "no newline\\x0d"},
	} {
		var b strings.Builder
		n, err := lineWriter{&b}.Write([]byte(tc.in))
		if err != nil || n != len(tc.in) || b.String() != tc.want {
			t.Errorf("Write(%q) = %d, %v, wrote %q; want %d, nil, %q", tc.in, n, err, b.String(), len(tc.in), tc.want)
		}
	}
}
