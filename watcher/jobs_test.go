package watcher

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tendhq/tend/procfs"
	"github.com/tendhq/tend/tracker"
	"github.com/tendhq/tend/tracker/layout"
	"github.com/tendhq/tend/watcher/cluster"
)

// fakeEngine is a cluster whose jobs the test moves from state to state
// itself: what the watcher makes of what an engine says, with no cluster.
type fakeEngine struct {
	mu    sync.Mutex
	n     int
	jobs  map[string]*cluster.Job
	calls []string
}

func (f *fakeEngine) Name() string { return "fake" }

func (f *fakeEngine) Submit(ctx context.Context, spec cluster.Spec) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if spec.Slurm.Partition == "refused" {
		return "", errors.New("invalid partition specified")
	}
	f.n++
	id := strconv.Itoa(f.n)
	f.jobs[id] = &cluster.Job{ID: id, Tag: spec.Tag, UID: os.Getuid(), State: "PENDING", Reason: "Priority", Phase: cluster.Pending}
	return id, nil
}

func (f *fakeEngine) Jobs(ctx context.Context, known map[string]string, tags []string) ([]cluster.Job, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []cluster.Job
	for id := range known {
		if j := f.jobs[id]; j != nil && slices.Contains(slices.Collect(maps.Values(known)), j.Tag) {
			out = append(out, *j)
		}
	}
	for _, j := range f.jobs {
		for _, tag := range tags {
			if j.Tag == tag {
				out = append(out, *j)
			}
		}
	}
	return out, nil
}

func (f *fakeEngine) Signal(ctx context.Context, id string, cred *syscall.Credential, sig syscall.Signal) error {
	f.call(fmt.Sprintf("signal %s %d", id, sig))
	return nil
}

func (f *fakeEngine) Cancel(ctx context.Context, id string, cred *syscall.Credential) error {
	f.call("cancel " + id)
	return nil
}

func (f *fakeEngine) Suspend(ctx context.Context, id string, cred *syscall.Credential, resume bool) error {
	return errors.New("scontrol: error: Access/permission denied")
}

func (f *fakeEngine) call(c string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, c)
}

// set changes job id as change says, once the watcher has submitted it.
func (f *fakeEngine) set(t *testing.T, tag string, change func(j *cluster.Job)) string {
	t.Helper()
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		f.mu.Lock()
		for id, j := range f.jobs {
			if strings.Contains(j.Tag, "."+tag+".") {
				change(j)
				f.mu.Unlock()
				return id
			}
		}
		f.mu.Unlock()
	}
	t.Fatalf("run %s was never submitted", tag)
	return ""
}

// forget has the engine forget job id, as Slurm does MinJobAge after a
// job ended.
func (f *fakeEngine) forget(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.jobs, id)
}

// startFake runs a watcher on a new root with engine f, asking it every
// 100 ms, and returns the root; the watcher is stopped when the test ends.
func startFake(t *testing.T, f *fakeEngine) string {
	root := filepath.Join(t.TempDir(), ".tend")
	os.MkdirAll(root, 0o700)
	os.WriteFile(layout.Root(root).Config(), []byte(`{"slurm": {"default": {}, "poll_interval": "100ms"}}`), 0o644)
	stop := make(chan os.Signal, 1)
	readyR, readyW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- Run(Config{Root: root, Stop: stop, Ready: readyW, Engine: f}) }()
	if _, err := bufio.NewReader(readyR).ReadString('\n'); err != nil {
		t.Fatal("watcher not ready:", err, <-done)
	}
	t.Cleanup(func() {
		stop <- syscall.SIGUSR1 // its jobs are the fake's: left as they are
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return root
}

// waitRecord waits until run id's record satisfies ok.
func waitRecord(t *testing.T, root, id string, ok func(*tracker.State) bool) *tracker.State {
	t.Helper()
	store := tracker.NewStore(root)
	var st *tracker.State
	var err error
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if st, err = store.Read(id); err == nil && ok(st) {
			return st
		}
	}
	t.Fatalf("run %s: %+v, %v", id, st, err)
	return nil
}

func ended(st *tracker.State) bool { return tracker.Final(st.State) }

// TestJobStates checks what the watcher records for each way the engine
// says a job went, as docs/protocol.md's table says.
func TestJobStates(t *testing.T) {
	f := &fakeEngine{jobs: make(map[string]*cluster.Job)}
	root := startFake(t, f)
	store := tracker.NewStore(root)
	submit := func(id string) {
		if err := os.WriteFile(filepath.Join(root, "spool", id+".start"), []byte("true"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ran := func(id string) { // what the job's script does once it runs
		os.WriteFile(store.Run(id).Started(), nil, 0o644)
	}
	longAgo := time.Now().Add(-time.Minute)
	end := func(j *cluster.Job, state, reason string, e *cluster.Exit) {
		j.State, j.Reason, j.Phase, j.Exit, j.Nodes = state, reason, cluster.Ended, e, "n1"
		j.End = map[string]cluster.End{"COMPLETED": cluster.Completed, "CANCELLED": cluster.Canceled, "TIMEOUT": cluster.TimedOut}[state]
		if j.End == "" {
			j.End = cluster.Failed
		}
	}

	// Pending: queued, with the engine's reason.
	submit("pend")
	st := waitRecord(t, root, "pend", func(st *tracker.State) bool {
		return st.State == tracker.Queued && strings.Contains(st.Reason, "pending")
	})
	if st.Reason != "fake job 1 is pending: Priority" || st.Job.ID != "1" {
		t.Errorf("pending: %q, job %+v", st.Reason, st.Job)
	}

	// Running for a minute without its started file showing here: its
	// reason says this host does not see the job's directory.
	f.set(t, "pend", func(j *cluster.Job) {
		j.State, j.Phase, j.Nodes, j.StartedAt = "RUNNING", cluster.Running, "n7", longAgo
	})
	st = waitRecord(t, root, "pend", func(st *tracker.State) bool { return st.State == tracker.Running && st.Reason != "" })
	if want := "fake job 1 runs on n7, but this host does not see its output: " + store.RunDir("pend") + " must be on a file system the nodes share"; !strings.HasPrefix(st.Reason, want) {
		t.Errorf("hidden: %q, want %q", st.Reason, want)
	}
	if !st.StartedAt.Equal(longAgo.Truncate(0)) {
		t.Errorf("started_at %v, want the engine's %v", st.StartedAt, longAgo)
	}
	ran("pend") // it shows after all
	waitRecord(t, root, "pend", func(st *tracker.State) bool { return st.Reason == "" })

	// An exit file is the job's: one that names another job is not taken,
	// and the engine's status is.
	os.WriteFile(store.Run("pend").Exit(), []byte("job 99 exited 0\n"), 0o644)
	f.set(t, "pend", func(j *cluster.Job) { end(j, "FAILED", "NonZeroExitCode", &cluster.Exit{Code: 2}) })
	st = waitRecord(t, root, "pend", ended)
	if st.State != tracker.Failed || *st.ExitCode != 2 || st.Reason != "exited with code 2" {
		t.Errorf("forged exit file: %s %v %q", st.State, st.ExitCode, st.Reason)
	}

	for _, tt := range []struct {
		id, state, reason string
		exit              *cluster.Exit
		notStarted        bool
		want              tracker.StateName
		wantReason        string
	}{
		{"oom", "OUT_OF_MEMORY", "OutOfMemory", &cluster.Exit{Signal: syscall.SIGKILL}, false, tracker.Failed, "killed by SIGKILL; fake job 2 OUT_OF_MEMORY (OutOfMemory)"},
		{"node", "NODE_FAIL", "NodeDown", nil, false, tracker.Failed, "it left no exit status; fake job 3 NODE_FAIL (NodeDown)"},
		{"limit", "TIMEOUT", "TimeLimit", &cluster.Exit{Signal: syscall.SIGTERM}, false, tracker.TimedOut, "fake job 4 TIMEOUT (TimeLimit): its time limit was reached; killed by SIGTERM"},
		{"outside", "CANCELLED", "None", &cluster.Exit{Signal: syscall.SIGTERM}, false, tracker.Canceled, "fake job 5 CANCELLED: canceled outside tend (scancel, or an operator); killed by SIGTERM"},
		{"launch", "FAILED", "JobLaunchFailure", nil, true, tracker.Failed, "could not start: fake job 6 FAILED (JobLaunchFailure); fake job 6 runs on n1, but this host does not see its output"},
	} {
		submit(tt.id)
		waitRecord(t, root, tt.id, func(st *tracker.State) bool { return st.Job != nil && st.Job.ID != "" })
		if !tt.notStarted {
			ran(tt.id)
		}
		f.set(t, tt.id, func(j *cluster.Job) { end(j, tt.state, tt.reason, tt.exit); j.NotStarted = tt.notStarted })
		st := waitRecord(t, root, tt.id, ended)
		if st.State != tt.want || !strings.HasPrefix(st.Reason, tt.wantReason) || st.Job.State != tt.state {
			t.Errorf("%s: %s %q (job %s), want %s %q", tt.id, st.State, st.Reason, st.Job.State, tt.want, tt.wantReason)
		}
	}

	// A job the engine forgot, that left no exit file: lost. One that left
	// its exit file: as it says.
	submit("lost")
	id := f.set(t, "lost", func(j *cluster.Job) {})
	waitRecord(t, root, "lost", func(st *tracker.State) bool { return st.Job.ID == id })
	f.forget(id)
	st = waitRecord(t, root, "lost", ended)
	if want := "lost: fake no longer knows job " + id + ", and it left no exit status in "; st.State != tracker.Failed || !strings.HasPrefix(st.Reason, want) {
		t.Errorf("lost: %s %q", st.State, st.Reason)
	}
	submit("gone")
	id = f.set(t, "gone", func(j *cluster.Job) {})
	waitRecord(t, root, "gone", func(st *tracker.State) bool { return st.Job.ID == id })
	ran("gone")
	os.WriteFile(store.Run("gone").Exit(), []byte("job "+id+" exited 0\n"), 0o644)
	f.forget(id)
	st = waitRecord(t, root, "gone", ended)
	if st.State != tracker.Completed || *st.ExitCode != 0 {
		t.Errorf("gone with its exit file: %s %q", st.State, st.Reason)
	}

	// A refused submission: could not start, and no job.
	os.WriteFile(filepath.Join(root, "spool", "refused.start"), []byte(`{"command": "true", "slurm": {"partition": "refused"}}`), 0o644)
	st = waitRecord(t, root, "refused", ended)
	if st.State != tracker.Failed || st.Reason != "could not start: fake: invalid partition specified" || st.Job.ID != "" {
		t.Errorf("refused: %s %q %+v", st.State, st.Reason, st.Job)
	}
}

// What a launch leaves before a run's first record (empty output files, a
// closed gate, a temporary record) is removed with its directory when its
// claim did not survive; anything else keeps the directory: a gate that
// says passed, or output.
func TestRemoveEmpty(t *testing.T) {
	for _, tc := range []struct {
		name    string
		files   map[string]string
		removed bool
	}{
		{"a launch's files", map[string]string{"stdout": "", "stderr": "", "gate": gateClosed, "state.json123": "{"}, true},
		{"an empty gate", map[string]string{"stdout": "", "gate": ""}, true},
		{"a gate passed", map[string]string{"stdout": "", "gate": gatePassed}, false},
		{"output", map[string]string{"stdout": "hello\n", "gate": gateClosed}, false},
		{"closed, as another file's name", map[string]string{"stdout": gateClosed}, false},
	} {
		dir := filepath.Join(t.TempDir(), "run")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		for name, body := range tc.files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		removeEmpty(dir)
		if _, err := os.Stat(dir); os.IsNotExist(err) != tc.removed {
			t.Errorf("%s: removed = %v, want %v", tc.name, os.IsNotExist(err), tc.removed)
		}
	}
}

// An earlier watcher's sbatch still under way holds up the look-up of its
// own job's tag alone, and only if it runs as that job's user: a member's
// process that calls itself sbatch and names another's tag (or all of
// them) held up every job of a shared root.
func TestSubmissionsInFlightByTagAndUser(t *testing.T) {
	fake := filepath.Join(t.TempDir(), "sbatch")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\nwhile :; do sleep 1; done\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	const tag = "tend.0123456789abcdef.mine.1"
	cmd := exec.Command(fake, "--parsable", "--job-name="+tag)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // as the watcher starts it
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for deadline := time.Now().Add(10 * time.Second); ; {
		// Its exec done: the new comm comes a moment before the new arguments.
		if p, err := procfs.ReadProcess(cmd.Process.Pid); err == nil && p.Comm == "sbatch" && len(p.Args) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the fake sbatch did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	me, other := uint32(os.Geteuid()), uint32(os.Geteuid()+1)
	w := &watcher{log: log.New(io.Discard, "", 0)}
	for _, tt := range []struct {
		name      string
		resolving map[string]uint32
		want      []string
	}{
		{"its tag, its user", map[string]uint32{tag: me, "tend.0123456789abcdef.other.1": me}, []string{tag}},
		{"its tag, another user's job", map[string]uint32{tag: other}, nil},
		{"other tags only", map[string]uint32{"tend.0123456789abcdef.mine.2": me, "tend.0123456789abcdef": me}, nil},
	} {
		got := slices.Sorted(maps.Keys(w.submissionsInFlight(tt.resolving)))
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: in flight %q, want %q", tt.name, got, tt.want)
		}
		if held := w.jobs.helper(cmd.Process.Pid); held != (len(tt.want) > 0) {
			t.Errorf("%s: its process group is a helper's: %v", tt.name, held)
		}
	}
}
