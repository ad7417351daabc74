package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Slurm is the Engine of a Slurm cluster, through its commands: sbatch,
// squeue, scancel and scontrol, found in this process's PATH. It needs no
// accounting database (sacct): squeue knows a job until MinJobAge after
// it ended, and the job's exit file says the rest.
type Slurm struct {
	// Start starts cmd (the watcher starts its children from threads of
	// its own: see watcher/forker.go). Nil: cmd.Start.
	Start func(cmd *exec.Cmd) error
	// Env is added to each command's environment: SLURM_CONF, where the
	// configuration is not in its default place.
	Env []string
	// Track, if set, is told the process group of each command once it
	// has started (live) and once it has ended: the watcher leaves those
	// alone when it ends what its runs left behind.
	Track func(pgid int, live bool)
}

// Name is "slurm".
func (s *Slurm) Name() string { return "slurm" }

// commandTimeout bounds each command: a slurmctld that does not answer
// makes them retry for a while (MessageTimeout), then fail.
const commandTimeout = 2 * time.Minute

// Submit runs sbatch as spec's user, with the batch script on its standard
// input, and returns the job's ID.
func (s *Slurm) Submit(ctx context.Context, spec Spec) (string, error) {
	args := []string{
		"--parsable", "--job-name=" + spec.Tag, "--comment=" + spec.Comment,
		"--output=" + spec.Stdout, "--error=" + spec.Stderr, "--open-mode=append",
		"--chdir=" + spec.Dir, "--export=ALL",
	}
	args = append(args, spec.Slurm.SbatchArgs()...)
	out, err := s.run(ctx, spec.Cred, sanitize(spec.Env), strings.NewReader(spec.Script), "sbatch", args...)
	if err != nil {
		return "", err
	}
	// "ID" or "ID;CLUSTER".
	id, _, _ := strings.Cut(strings.TrimSpace(string(out)), ";")
	if !validJobID(id) {
		return "", fmt.Errorf("sbatch: %q is not a job ID", strings.TrimSpace(string(out)))
	}
	return id, nil
}

// squeueFormat is what Jobs asks squeue for, one job a line, fields
// ended by '|': none holds one (the only names it asks for are Tags).
const squeueFormat = "JobID:|,Name:|,UserID:|,State:|,Reason:|,exit_code:|,NodeList:|,StartTime:|,EndTime:|"

// Jobs runs squeue once for the known jobs, by their IDs and tags, and
// once more for those named by the given tags. squeue takes IDs and
// names together as both conditions at once, not either: so the first
// prints only jobs that still have their tags. A job's name is its
// owner's to change (scontrol update JobName=), to one with '|' and
// newlines in it, which would make lines of its own in squeue's output:
// a job of the root's whose owner renamed it is left out, never read.
//
// The known jobs are asked about maxQuery bytes of IDs and tags at a
// time: Linux takes at most 128 KiB in one argument.
func (s *Slurm) Jobs(ctx context.Context, known map[string]string, tags []string) ([]Job, error) {
	var queries [][]string
	for ids := slices.Sorted(maps.Keys(known)); len(ids) > 0; {
		n, size := 0, 0
		for ; n < len(ids) && size < maxQuery; n++ {
			size += len(ids[n]) + len(known[ids[n]]) + 2
		}
		names := make([]string, n)
		for i, id := range ids[:n] {
			names[i] = known[id]
		}
		slices.Sort(names)
		queries = append(queries, []string{"--jobs=" + strings.Join(ids[:n], ","), "--name=" + strings.Join(slices.Compact(names), ",")})
		ids = ids[n:]
	}
	if len(tags) > 0 {
		queries = append(queries, []string{"--name=" + strings.Join(tags, ",")})
	}
	var jobs []Job
	for _, q := range queries {
		out, err := s.run(ctx, nil, nil, nil, "squeue", append([]string{"--noheader", "--states=all", "--Format=" + squeueFormat}, q...)...)
		if err != nil {
			if strings.Contains(err.Error(), "Invalid job id specified") {
				continue // the one job asked for is gone
			}
			return nil, err
		}
		got, err := parseSqueue(out)
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, got...)
	}
	return jobs, nil
}

// Signal runs scancel --full --signal=SIG as cred's user: the signal goes
// to the batch script and every process it started.
func (s *Slurm) Signal(ctx context.Context, id string, cred *syscall.Credential, sig syscall.Signal) error {
	name := strings.TrimPrefix(unix.SignalName(sig), "SIG")
	if name == "" {
		name = strconv.Itoa(int(sig))
	}
	_, err := s.run(ctx, cred, nil, nil, "scancel", "--full", "--signal="+name, id)
	return err
}

// Cancel runs scancel as cred's user.
func (s *Slurm) Cancel(ctx context.Context, id string, cred *syscall.Credential) error {
	_, err := s.run(ctx, cred, nil, nil, "scancel", id)
	return err
}

// Suspend runs scontrol suspend (or resume) as cred's user: Slurm lets
// only its operators and administrators.
func (s *Slurm) Suspend(ctx context.Context, id string, cred *syscall.Credential, resume bool) error {
	verb := "suspend"
	if resume {
		verb = "resume"
	}
	_, err := s.run(ctx, cred, nil, nil, "scontrol", verb, id)
	return err
}

// maxQuery is about how many bytes of job IDs and names Jobs puts in one
// squeue's arguments.
const maxQuery = 32 << 10

// maxStderr bounds what is kept of a command's error output.
const maxStderr = 4 << 10

// run runs a Slurm command as cred's user (nil: this process's), with env
// (nil: this process's own, or for another user a PATH) and s.Env, and
// returns its output. An error says what the command said.
func (s *Slurm) run(ctx context.Context, cred *syscall.Credential, env []string, stdin *strings.Reader, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	if env == nil {
		env = sanitize(os.Environ())
		if cred != nil {
			env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
		}
	}
	cmd.Env = append(env, s.Env...)
	cmd.Dir = "/"
	// A session (and group) of its own: as cred's user, in the
	// watcher's session, it (or that user, who may ptrace it) would have
	// the watcher's terminal, if it has one, and could SIGCONT what is
	// stopped there.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: cred}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if stdin != nil {
		cmd.Stdin = stdin
	}
	var stdout bytes.Buffer
	stderr := &capped{max: maxStderr}
	cmd.Stdout, cmd.Stderr = &stdout, stderr
	start := s.Start
	if start == nil {
		start = (*exec.Cmd).Start
	}
	if err := start(cmd); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if s.Track != nil {
		s.Track(cmd.Process.Pid, true)
		defer s.Track(cmd.Process.Pid, false)
	}
	err := cmd.Wait()
	if err != nil {
		msg := strings.Join(strings.Fields(stderr.String()), " ")
		if msg == "" {
			msg = err.Error()
		}
		if ctx.Err() != nil {
			msg = "no answer within " + commandTimeout.String() + ": " + msg
		}
		return stdout.Bytes(), errors.New(strings.TrimPrefix(msg, name+": "))
	}
	return stdout.Bytes(), nil
}

// sanitize returns env without the variables that would change what the
// Slurm commands do or print (SBATCH_*, SQUEUE_*, SLURM_* but SLURM_CONF,
// ...): a request's environment is its writer's, and a run started from
// inside a Slurm job carries that job's.
func sanitize(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		switch {
		case strings.HasPrefix(kv, "SLURM_CONF="):
		case strings.HasPrefix(kv, "SLURM_"), strings.HasPrefix(kv, "SBATCH_"), strings.HasPrefix(kv, "SQUEUE_"),
			strings.HasPrefix(kv, "SCANCEL_"), strings.HasPrefix(kv, "SCONTROL_"), strings.HasPrefix(kv, "SALLOC_"),
			strings.HasPrefix(kv, "SRUN_"):
			continue
		}
		out = append(out, kv)
	}
	return out
}

// capped keeps the first max bytes written to it.
type capped struct {
	bytes.Buffer
	max int
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.Len(); room > 0 {
		c.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func validJobID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return true
}

// parseSqueue parses squeue's output in squeueFormat.
func parseSqueue(out []byte) ([]Job, error) {
	var jobs []Job
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		f := strings.Split(strings.TrimSuffix(line, "|"), "|")
		if len(f) != 9 {
			return nil, fmt.Errorf("squeue: a line of %d fields, not 9: %q", len(f), line)
		}
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		uid, err := strconv.Atoi(f[2])
		if err != nil || !validJobID(f[0]) {
			return nil, fmt.Errorf("squeue: a line that names no job: %q", line)
		}
		j := Job{ID: f[0], Tag: f[1], UID: uid, State: f[3], Reason: f[4], Nodes: f[6]}
		j.Phase, j.End = phase(j.State)
		if j.Phase == Ended {
			j.Exit = decodeStatus(f[5])
			// A job that never ran on a node: launching it failed, its node
			// never booted, or it was canceled while pending.
			j.NotStarted = j.Reason == "JobLaunchFailure" || j.State == "BOOT_FAIL" || j.Nodes == "" || j.Nodes == "(null)"
			if j.NotStarted {
				j.Exit = nil
			}
		}
		if j.Nodes == "(null)" {
			j.Nodes = ""
		}
		if j.Phase != Pending && !j.NotStarted {
			j.StartedAt = slurmTime(f[7])
		}
		if j.Phase == Ended {
			j.EndedAt = slurmTime(f[8])
		}
		jobs = append(jobs, j)
	}
	return jobs, nil
}

// slurmTime reads a time as squeue prints it, in its local time zone
// (this process's: it runs squeue); zero for N/A, Unknown and the like.
func slurmTime(s string) time.Time {
	t, err := time.ParseInLocation("2006-01-02T15:04:05", s, time.Local)
	if err != nil {
		return time.Time{}
	}
	return t
}

// phase maps a Slurm job state onto a Phase, and an ended one onto an End.
// A state this does not know is taken as running: the job is followed
// until one says it ended.
func phase(state string) (Phase, End) {
	switch state {
	case "PENDING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESV_DEL_HOLD", "CONFIGURING":
		return Pending, ""
	case "SUSPENDED", "STOPPED":
		return Suspended, ""
	case "COMPLETED":
		return Ended, Completed
	case "CANCELLED":
		return Ended, Canceled
	case "TIMEOUT":
		return Ended, TimedOut
	case "FAILED", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL", "DEADLINE", "PREEMPTED", "REVOKED", "SPECIAL_EXIT":
		return Ended, Failed
	}
	return Running, "" // RUNNING, COMPLETING, SIGNALING, STAGE_OUT, RESIZING
}

// decodeStatus reads squeue's exit_code, the batch script's wait status.
func decodeStatus(s string) *Exit {
	status, err := strconv.Atoi(s)
	if err != nil || status < 0 {
		return nil
	}
	ws := syscall.WaitStatus(status)
	switch {
	case ws.Exited():
		return &Exit{Code: ws.ExitStatus()}
	case ws.Signaled() && ws.Signal() > 0 && ws.Signal() <= 64:
		return &Exit{Signal: ws.Signal()}
	}
	return nil
}
