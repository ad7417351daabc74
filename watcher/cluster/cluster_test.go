package cluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tendhq/tend/tracker/layout"
)

// What squeue printed on the test cluster (slurm-wlm 22.05), one job in
// each state the watcher acts on.
const squeueOut = `     7|tend.0123456789abcdef.a.1|1000|PENDING|Resources|0||N/A|N/A|
8|tend.0123456789abcdef.b.1|1000|RUNNING|None|0|vm|2026-11-26T09:35:16|2026-11-26T09:36:16|
9|tend.0123456789abcdef.c.1|1000|FAILED|NonZeroExitCode|768|vm|2026-11-26T09:35:16|2026-11-26T09:35:17|
10|tend.0123456789abcdef.d.1|1000|CANCELLED|None|9|vm|2026-11-26T09:35:31|2026-11-26T09:35:34|
11|tend.0123456789abcdef.e.1|1000|FAILED|JobLaunchFailure|4021|vm|2026-11-26T09:35:40|2026-11-26T09:35:40|
12|tend.0123456789abcdef.f.1|1000|CANCELLED|Resources|0||2026-11-26T09:35:38|2026-11-26T09:35:38|
13|tend.0123456789abcdef.g.1|0|TIMEOUT|TimeLimit|15|vm|2026-11-26T09:35:16|2026-11-26T09:36:43|
14|tend.0123456789abcdef.h.1|1000|COMPLETED|None|0|vm|2026-11-26T09:35:16|2026-11-26T09:35:16|
15|tend.0123456789abcdef.i.1|1000|SUSPENDED|None|0|vm|2026-11-26T09:35:16|Unknown|
16|tend.0123456789abcdef.j.1|1000|COMPLETING|None|0|vm|2026-11-26T09:35:16|2026-11-26T09:35:19|
`

func TestParseSqueue(t *testing.T) {
	jobs, err := parseSqueue([]byte(squeueOut))
	if err != nil {
		t.Fatal(err)
	}
	at := func(s string) time.Time { return slurmTime(s) }
	want := []Job{
		{ID: "7", Tag: "tend.0123456789abcdef.a.1", UID: 1000, State: "PENDING", Reason: "Resources", Phase: Pending},
		{ID: "8", Tag: "tend.0123456789abcdef.b.1", UID: 1000, State: "RUNNING", Reason: "None", Nodes: "vm", Phase: Running, StartedAt: at("2026-11-26T09:35:16")},
		{ID: "9", Tag: "tend.0123456789abcdef.c.1", UID: 1000, State: "FAILED", Reason: "NonZeroExitCode", Nodes: "vm", Phase: Ended, End: Failed, Exit: &Exit{Code: 3},
			StartedAt: at("2026-11-26T09:35:16"), EndedAt: at("2026-11-26T09:35:17")},
		{ID: "10", Tag: "tend.0123456789abcdef.d.1", UID: 1000, State: "CANCELLED", Reason: "None", Nodes: "vm", Phase: Ended, End: Canceled, Exit: &Exit{Signal: syscall.SIGKILL},
			StartedAt: at("2026-11-26T09:35:31"), EndedAt: at("2026-11-26T09:35:34")},
		// It never ran: its node could not launch it (its status is Slurm's own code, no exit).
		{ID: "11", Tag: "tend.0123456789abcdef.e.1", UID: 1000, State: "FAILED", Reason: "JobLaunchFailure", Nodes: "vm", Phase: Ended, End: Failed, NotStarted: true,
			EndedAt: at("2026-11-26T09:35:40")},
		// Canceled while it was pending: no node.
		{ID: "12", Tag: "tend.0123456789abcdef.f.1", UID: 1000, State: "CANCELLED", Reason: "Resources", Phase: Ended, End: Canceled, NotStarted: true,
			EndedAt: at("2026-11-26T09:35:38")},
		{ID: "13", Tag: "tend.0123456789abcdef.g.1", UID: 0, State: "TIMEOUT", Reason: "TimeLimit", Nodes: "vm", Phase: Ended, End: TimedOut, Exit: &Exit{Signal: syscall.SIGTERM},
			StartedAt: at("2026-11-26T09:35:16"), EndedAt: at("2026-11-26T09:36:43")},
		{ID: "14", Tag: "tend.0123456789abcdef.h.1", UID: 1000, State: "COMPLETED", Reason: "None", Nodes: "vm", Phase: Ended, End: Completed, Exit: &Exit{},
			StartedAt: at("2026-11-26T09:35:16"), EndedAt: at("2026-11-26T09:35:16")},
		{ID: "15", Tag: "tend.0123456789abcdef.i.1", UID: 1000, State: "SUSPENDED", Reason: "None", Nodes: "vm", Phase: Suspended, StartedAt: at("2026-11-26T09:35:16")},
		// Ending: still running until Slurm says how it ended.
		{ID: "16", Tag: "tend.0123456789abcdef.j.1", UID: 1000, State: "COMPLETING", Reason: "None", Nodes: "vm", Phase: Running, StartedAt: at("2026-11-26T09:35:16")},
	}
	if len(jobs) != len(want) {
		t.Fatalf("parsed %d jobs, want %d", len(jobs), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(jobs[i], want[i]) {
			t.Errorf("job %d:\n got %+v\nwant %+v", i, jobs[i], want[i])
		}
	}
	for _, bad := range []string{"7|x|1000|PENDING|", "x|tend.a|1000|PENDING|None|0||N/A|N/A|", "7|t|me|PENDING|None|0||N/A|N/A|"} {
		if _, err := parseSqueue([]byte(bad)); err == nil {
			t.Errorf("parseSqueue(%q) did not fail", bad)
		}
	}
}

func TestPhases(t *testing.T) {
	for _, tt := range []struct {
		state string
		phase Phase
		end   End
	}{
		{"PENDING", Pending, ""}, {"REQUEUED", Pending, ""}, {"CONFIGURING", Pending, ""},
		{"RUNNING", Running, ""}, {"COMPLETING", Running, ""}, {"SIGNALING", Running, ""}, {"SOMETHING_NEW", Running, ""},
		{"SUSPENDED", Suspended, ""}, {"STOPPED", Suspended, ""},
		{"COMPLETED", Ended, Completed}, {"CANCELLED", Ended, Canceled}, {"TIMEOUT", Ended, TimedOut},
		{"FAILED", Ended, Failed}, {"OUT_OF_MEMORY", Ended, Failed}, {"NODE_FAIL", Ended, Failed}, {"BOOT_FAIL", Ended, Failed},
		{"PREEMPTED", Ended, Failed}, {"DEADLINE", Ended, Failed},
	} {
		if p, e := phase(tt.state); p != tt.phase || e != tt.end {
			t.Errorf("phase(%s) = %v, %q; want %v, %q", tt.state, p, e, tt.phase, tt.end)
		}
	}
}

// runScript runs Script's batch script as a job would, with SLURM_JOB_ID
// set, in a new process group; signal, if not 0, is sent to the group
// once the command has started.
func runScript(t *testing.T, argv []string, dir string, runDir layout.Run, signal syscall.Signal) (int, string) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", Script(argv, dir, runDir))
	cmd.Env = append(os.Environ(), "SLURM_JOB_ID=77")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if signal != 0 {
		for end := time.Now().Add(10 * time.Second); ; {
			if _, err := os.Stat(filepath.Join(dir, "ready")); err == nil {
				break
			}
			if time.Now().After(end) {
				t.Fatal("the command never started")
			}
			time.Sleep(5 * time.Millisecond)
		}
		syscall.Kill(-cmd.Process.Pid, signal) // as scancel --full: every process
	}
	err := cmd.Wait()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), out.String()
}

func TestScriptWritesStartedAndExit(t *testing.T) {
	dir, runDir := t.TempDir(), layout.Run(t.TempDir())
	code, out := runScript(t, []string{"/bin/sh", "-c", "echo \"it's $0\"; exit 3"}, dir, runDir, 0)
	if code != 3 || out != "it's /bin/sh\n" {
		t.Errorf("script: exit %d, output %q", code, out)
	}
	if _, err := os.Stat(runDir.Started()); err != nil {
		t.Error(err)
	}
	x, err := ReadExit(runDir)
	if err != nil || x.Job != "77" || *x.Exit != (Exit{Code: 3}) {
		t.Errorf("ReadExit = %+v, %v", x, err)
	}

	// An argv is executed as given, its arguments quoted.
	code, out = runScript(t, []string{"printf", "%s|", "a b", "'", "$HOME"}, dir, runDir, 0)
	if code != 0 || out != "a b|'|$HOME|" {
		t.Errorf("argv: exit %d, output %q", code, out)
	}
}

func TestScriptOutlivesSignals(t *testing.T) {
	// The batch script gets the signal too (scancel --full), and still
	// writes how its command ended.
	dir, runDir := t.TempDir(), layout.Run(t.TempDir())
	code, _ := runScript(t, []string{"/bin/sh", "-c", "trap 'exit 7' TERM; : > ready; while :; do sleep 0.05; done"}, dir, runDir, syscall.SIGTERM)
	if x, err := ReadExit(runDir); code != 7 || err != nil || *x.Exit != (Exit{Code: 7}) {
		t.Errorf("TERM trapped: exit %d, %+v, %v", code, x, err)
	}
	os.Remove(filepath.Join(dir, "ready"))
	code, _ = runScript(t, []string{"/bin/sh", "-c", ": > ready; exec sleep 60"}, dir, runDir, syscall.SIGTERM)
	if x, err := ReadExit(runDir); code != 143 || err != nil || *x.Exit != (Exit{Code: 143}) {
		t.Errorf("killed by TERM: exit %d, %+v, %v", code, x, err)
	}
}

func TestScriptWithoutItsDirectory(t *testing.T) {
	runDir := layout.Run(t.TempDir())
	code, _ := runScript(t, []string{"true"}, "/no/such/dir", runDir, 0)
	x, err := ReadExit(runDir)
	if code != 125 || err != nil || x.NotStarted != "cannot change to its working directory" || x.Exit != nil {
		t.Errorf("exit %d, %+v, %v", code, x, err)
	}
	if _, err := os.Stat(runDir.Started()); err == nil {
		t.Error("started, though its command never ran")
	}
	// A node that does not see the run's directory at all.
	code, out := runScript(t, []string{"true"}, t.TempDir(), layout.Run("/no/such/run"), 0)
	if code != 125 || !strings.Contains(out, "this node does not share tend's root") {
		t.Errorf("exit %d, output %q", code, out)
	}
}

func TestReadExitTrustsNothing(t *testing.T) {
	dir := t.TempDir()
	path := layout.Run(dir).Exit()
	if _, err := ReadExit(layout.Run(dir)); !errors.Is(err, ErrNoExitFile) {
		t.Fatalf("no file: %v", err)
	}
	for _, bad := range []string{
		"", "job 7 exited\n", "job 7 exited 256\n", "job 7 exited 1000\n", "job 7 exited 3", "job 7 exited 3\nmore\n",
		"job ../x exited 3\n", "job 7 killed SIGKILL\n", "job 7 not-started rm -rf /\n", strings.Repeat("x", 300),
	} {
		os.WriteFile(path, []byte(bad), 0o644)
		if x, err := ReadExit(layout.Run(dir)); err == nil {
			t.Errorf("ReadExit(%q) = %+v", bad, x)
		}
	}
	os.Remove(path)
	os.WriteFile(filepath.Join(dir, "target"), []byte("job 7 exited 0\n"), 0o644)
	os.Symlink("target", path)
	if _, err := ReadExit(layout.Run(dir)); err == nil || errors.Is(err, ErrNoExitFile) {
		t.Errorf("a link: %v", err)
	}
	os.Remove(path)
	syscall.Mkfifo(path, 0o644)
	if _, err := ReadExit(layout.Run(dir)); err == nil { // and it does not block
		t.Error("a FIFO was read")
	}
}

func TestSanitize(t *testing.T) {
	got := sanitize([]string{"PATH=/bin", "SLURM_CONF=/etc/x", "SLURM_JOB_ID=3", "SBATCH_WAIT=1", "SQUEUE_FORMAT=%i", "SLURMX=1", "HOME=/h"})
	want := []string{"PATH=/bin", "SLURM_CONF=/etc/x", "SLURMX=1", "HOME=/h"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("sanitize = %q, want %q", got, want)
	}
}

func TestTag(t *testing.T) {
	if got := Tag("0123456789abcdef", "my.run-1", 2); got != "tend.0123456789abcdef.my.run-1.2" || !strings.HasPrefix(got, TagPrefix("0123456789abcdef")) {
		t.Errorf("Tag = %q", got)
	}
}

// TestCommandsHaveSessionsOfTheirOwn: sbatch, scancel and scontrol run as
// the run's owner, who may take them over (ptrace); in the watcher's
// session they would have its terminal (tend watch run by root in one),
// to push input into, and could SIGCONT what is stopped there.
func TestCommandsHaveSessionsOfTheirOwn(t *testing.T) {
	fake := filepath.Join(t.TempDir(), "sbatch")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\nset -- $(cat /proc/$$/stat)\necho \"$$ $6\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := (&Slurm{}).run(t.Context(), nil, nil, nil, fake)
	if err != nil {
		t.Fatal(err)
	}
	var pid, sid int
	if _, err := fmt.Sscan(string(out), &pid, &sid); err != nil {
		t.Fatalf("%q: %v", out, err)
	}
	if pid != sid {
		t.Errorf("a Slurm command (pid %d) runs in session %d, not in one of its own", pid, sid)
	}
}

// TestJobsAsksByIDAndTag: the known jobs are asked for by their IDs and
// their tags together, so that squeue prints no job whose owner renamed
// it (to a name with '|' and newlines, that would read as other jobs'
// lines); and in as many squeues as keep each argument short.
func TestJobsAsksByIDAndTag(t *testing.T) {
	dir := t.TempDir()
	args := filepath.Join(dir, "args")
	script := "#!/bin/sh\nfor a; do printf '%s\\n' \"$a\"; done >> " + args + "\necho\n"
	if err := os.WriteFile(filepath.Join(dir, "squeue"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+":"+os.Getenv("PATH"))
	known := map[string]string{"12": "tend.0123456789abcdef.a.1", "11": "tend.0123456789abcdef.b.1"}
	if _, err := (&Slurm{}).Jobs(t.Context(), known, []string{"tend.0123456789abcdef.c.2"}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(args)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	for _, want := range []string{"--jobs=11,12\n--name=tend.0123456789abcdef.a.1,tend.0123456789abcdef.b.1\n", "--name=tend.0123456789abcdef.c.2\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("squeue was not given %q; it was given:\n%s", want, got)
		}
	}

	os.Remove(args)
	many := make(map[string]string)
	for i := range 3000 {
		many[fmt.Sprint(1000+i)] = fmt.Sprintf("tend.0123456789abcdef.run-%d.1", i)
	}
	if _, err := (&Slurm{}).Jobs(t.Context(), many, nil); err != nil {
		t.Fatal(err)
	}
	if b, err = os.ReadFile(args); err != nil {
		t.Fatal(err)
	}
	queries, asked := 0, 0
	for _, line := range strings.Split(string(b), "\n") {
		if ids, ok := strings.CutPrefix(line, "--jobs="); ok {
			queries++
			asked += len(strings.Split(ids, ","))
		}
		if len(line) > 64<<10 {
			t.Errorf("an argument of %d bytes", len(line))
		}
	}
	if queries < 2 || asked != len(many) {
		t.Errorf("%d jobs asked about in %d squeues, want %d in more than one", asked, queries, len(many))
	}
}
