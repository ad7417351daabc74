// Package cluster runs tend's runs as jobs of a cluster's batch scheduler,
// where the local executor (the watcher's launch) runs them as processes
// of its own host. An Engine is what the watcher needs of a scheduler:
// submit a job, list what it knows of some jobs in one call, signal and
// cancel one. Slurm is the engine built (slurm.go); docs/design.md says
// how Kubernetes Jobs and Nomad batch jobs would map onto the same calls.
//
// The job itself writes how its command ended into the run's directory
// (Script, ReadExit), as conmon writes a container's exit file: a
// scheduler forgets an ended job after a while (Slurm after MinJobAge,
// and its accounting needs a database many clusters lack), so the engine's
// view is only the fallback, for a job that never ran or was killed with
// its node.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker/layout"
	"golang.org/x/sys/unix"
)

// An Engine submits and follows jobs on a cluster. Every method may block
// for as long as the scheduler takes to answer (it runs the scheduler's
// commands), and none keeps a process per job: the watcher calls them off
// its loop, and asks about all of its jobs at once.
//
// The watcher's tests use a second implementation, with no cluster.
type Engine interface {
	// Name is the engine's name, as records say it (Job.Engine).
	Name() string
	// Submit submits spec and returns the job's ID.
	Submit(ctx context.Context, spec Spec) (string, error)
	// Jobs returns what the engine knows of the jobs known (by ID, each
	// with its tag) that still have their tags, and of those named by
	// the given tags, in one call. A job it no longer knows (one that
	// ended long ago), or whose name is not its tag now, is not among
	// them.
	Jobs(ctx context.Context, known map[string]string, tags []string) ([]Job, error)
	// Signal sends sig to every process of job id (its batch script and
	// what that started), as the user cred names (nil: this process's).
	Signal(ctx context.Context, id string, cred *syscall.Credential, sig syscall.Signal) error
	// Cancel ends job id, pending or running, as that user.
	Cancel(ctx context.Context, id string, cred *syscall.Credential) error
	// Suspend stops job id's processes (or, with resume, continues
	// them), as that user: many schedulers let only their operators.
	Suspend(ctx context.Context, id string, cred *syscall.Credential, resume bool) error
}

// A Spec is a job to submit: one attempt of one run.
type Spec struct {
	// Tag is the job's name: unique to the root, the run and the attempt
	// (see Tag).
	Tag string
	// Comment is shown with the job, for people.
	Comment string
	// Script is the batch script (see Script).
	Script string
	// Dir is the job's working directory.
	Dir string
	// Stdout and Stderr are the files its output is appended to.
	Stdout, Stderr string
	// Env is the job's environment.
	Env []string
	// Slurm are the resources it asks for, and the rest.
	Slurm spool.Slurm
	// Cred is whom it is submitted, and runs, as (nil: this process's
	// user).
	Cred *syscall.Credential
}

// Phase is where a job is: the engine's states mapped onto the few the
// watcher acts on.
type Phase int

const (
	Pending   Phase = iota // waiting to run (Slurm's reason says why)
	Running                // its processes run (or are being set up, or ended and are being cleaned up)
	Suspended              // its processes are stopped
	Ended                  // for good: End says how
)

// End is how a job ended, in tend's words.
type End string

const (
	Completed End = "completed"
	Failed    End = "failed"
	Canceled  End = "canceled"
	TimedOut  End = "timed_out"
)

// Job is what an engine says of a job.
type Job struct {
	ID  string
	Tag string
	UID int // whose it is
	// State and Reason are the engine's own words (Slurm: PENDING,
	// Resources); Nodes where it runs or ran.
	State, Reason, Nodes string
	Phase                Phase
	// End is how it ended, once Ended; Exit its status as the engine
	// knows it, if it does (the job's exit file knows better: ReadExit).
	End  End
	Exit *Exit
	// NotStarted is set for a job that ended without its batch script
	// ever running (Slurm: it could not be launched on its node).
	NotStarted bool
	// StartedAt and EndedAt are when it started running and ended, as
	// the engine says (Slurm: to the second), if it does.
	StartedAt, EndedAt time.Time
}

// Exit is how a job's command ended: its exit code, or the signal that
// killed it.
type Exit struct {
	Code   int
	Signal syscall.Signal
}

// Tag returns the name of attempt of run id of the root whose mark is
// hash (the 16 hex digits of watcher.MarkVar): tend.HASH.ID.ATTEMPT. The
// ID alphabet has no other character, so no two are alike.
func Tag(hash, id string, attempt int) string {
	return TagPrefix(hash) + id + "." + strconv.Itoa(attempt)
}

// TagPrefix is how the tags of every job of the root whose mark is hash
// begin.
func TagPrefix(hash string) string { return "tend." + hash + "." }

// Script returns the batch script of a job that runs argv (a shell
// command line is ["/bin/sh", "-c", text]) in dir and records, in its
// run's directory, that it started (run.Started, as a local run's gate
// does) and how it ended (run.Exit). It catches the signals a cancel or
// `tend signal` sends to the job's processes, so that it outlives its
// command and writes its status (a caught signal is the default again in
// the command); SIGKILL, or the loss of its node, leaves no exit file, and
// the engine's view says how the job ended.
//
// A shell reports a command killed by signal N as status 128+N, as it
// does any exit with that code: the exit file holds what the shell saw.
func Script(argv []string, dir string, run layout.Run) string {
	var b strings.Builder
	b.WriteString("#!/bin/sh\n")
	b.WriteString("# tend: the run in " + quote(string(run)) + "\n")
	b.WriteString("trap : HUP INT QUIT TERM USR1 USR2 ALRM\n")
	b.WriteString("d=" + quote(string(run)) + "\n")
	b.WriteString("exitfile=" + quote(run.Exit()) + "\n")
	b.WriteString("started=" + quote(run.Started()) + "\n")
	// Written beside it, then renamed: a reader never sees half of it.
	b.WriteString(`x() { printf 'job %s %s\n' "$SLURM_JOB_ID" "$1" >"$d/.exit.$SLURM_JOB_ID" && mv -f "$d/.exit.$SLURM_JOB_ID" "$exitfile"; }` + "\n")
	b.WriteString("cd " + quote(dir) + " || { x 'not-started cannot change to its working directory'; exit 125; }\n")
	// true, not ':': a failed redirection of a special builtin ends the shell.
	b.WriteString(`true >"$started" || { echo "tend: cannot write $started: this node does not share tend's root with the submitting host" >&2; exit 125; }` + "\n")
	for i, a := range argv {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(quote(a))
	}
	b.WriteString("\ns=$?\nx \"exited $s\"\nexit $s\n")
	return b.String()
}

// quote quotes s for sh: in single quotes, each ' written as '\”.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// maxExitFile bounds what ReadExit reads: the file is its job's user's,
// who may put anything there.
const maxExitFile = 256

// exitLine is an exit file's line. Its parts' lengths are checked apart:
// counted repetitions such as {1,100} compile to that many copies, paid
// for at every tend command's start-up.
var exitLine = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^job ([A-Za-z0-9_.-]+) (exited ([0-9]{1,3})|not-started ([a-z ]+))\n$`)
})

// ErrNoExitFile means a run's directory holds no exit file (layout.Run.Exit).
var ErrNoExitFile = errors.New("no exit file")

// ExitStatus is what a job's exit file says: which job wrote it, and how
// its command ended, or why it never ran.
type ExitStatus struct {
	Job        string
	Exit       *Exit
	NotStarted string
}

// ReadExit reads run's exit file. The file belongs to the job's
// user, who may have put anything there: it is opened without following
// a link or blocking, and must be a regular file of at most 256 bytes
// holding one line as Script writes it. What it says is that user's own
// business: the caller checks it names the job it follows, and acts on
// nothing but that job's record.
func ReadExit(run layout.Run) (ExitStatus, error) {
	path := run.Exit()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return ExitStatus{}, ErrNoExitFile
	}
	if err != nil {
		return ExitStatus{}, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return ExitStatus{}, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size > maxExitFile {
		return ExitStatus{}, fmt.Errorf("%s: not a regular file of at most %d bytes", path, maxExitFile)
	}
	buf := make([]byte, maxExitFile+1)
	n, err := unix.Read(fd, buf)
	if err != nil {
		return ExitStatus{}, &os.PathError{Op: "read", Path: path, Err: err}
	}
	m := exitLine().FindSubmatch(buf[:n])
	if m == nil || len(m[1]) > 64 || len(m[4]) > 100 {
		return ExitStatus{}, fmt.Errorf("%s: not an exit status as tend's job script writes one", path)
	}
	x := ExitStatus{Job: string(m[1])}
	if m[4] != nil {
		x.NotStarted = string(m[4])
		return x, nil
	}
	code, _ := strconv.Atoi(string(m[3]))
	if code > 255 {
		return ExitStatus{}, fmt.Errorf("%s: exit status %d is out of range", path, code)
	}
	x.Exit = &Exit{Code: code}
	return x, nil
}
