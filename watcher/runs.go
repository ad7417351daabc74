package watcher

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/tendhq/tend/procfs"
	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
	"golang.org/x/sys/unix"
)

// defaultGrace is the time between SIGTERM and SIGKILL when a run is stopped.
const defaultGrace = 10 * time.Second

// run is a run whose process this watcher supervises.
type run struct {
	st   *tracker.State
	proc *procfs.Handle
	// adopted runs were started by an earlier watcher: they are not our
	// children, so their exit status cannot be collected.
	adopted bool

	exit     *procfs.Exit // set once the leader has exited (it stays unreaped until the group is empty)
	exitedAt time.Time
	termSent bool      // SIGTERM went to the group
	killAt   time.Time // when SIGKILL follows, once stopping or draining
	timers   []*time.Timer
}

func (r *run) grace() time.Duration { return r.st.Grace.D() }

// launch starts st's process in its own process group, with its output
// going straight to files in the run's directory (so output survives the
// watcher), and records it running, or failed if it could not start.
func (w *watcher) launch(st *tracker.State, env map[string]string) {
	r := &run{st: st}
	h, err := w.startProcess(st, env)
	now := time.Now()
	if err != nil {
		st.State, st.Reason, st.EndedAt = tracker.Failed, "could not start: "+err.Error(), &now
		w.save(st)
		w.log.Printf("run %s: %s", st.ID, st.Reason)
		return
	}
	r.proc = h
	st.State, st.PID, st.PGID, st.StartedAt = tracker.Running, h.PID(), h.PID(), &now
	if ps, err := procfs.ReadStat(h.PID()); err == nil {
		st.ProcStart = ps.StartTime
	}
	w.save(st)
	w.log.Printf("run %s: running (pid %d)", st.ID, st.PID)
	w.supervise(r)
}

// supervise watches r's process: its exit, and its timeout.
func (w *watcher) supervise(r *run) {
	w.runs[r.st.ID] = r
	go func() {
		if err := r.proc.WaitExited(); err != nil {
			w.log.Printf("run %s: waiting for pid %d: %v", r.st.ID, r.proc.PID(), err)
		}
		w.exited <- r
	}()
	if r.st.Timeout > 0 && r.st.Stop == nil && r.st.StartedAt != nil {
		left := time.Until(r.st.StartedAt.Add(r.st.Timeout.D()))
		r.timers = append(r.timers, w.after(max(left, 0), func() {
			if w.runs[r.st.ID] == r && r.st.Stop == nil && r.exit == nil {
				w.log.Printf("run %s: timed out after %s", r.st.ID, r.st.Timeout.D())
				w.stop(r, tracker.TimedOut, "timed out after "+r.st.Timeout.D().String(), r.grace(), "")
			}
		}))
	}
}

func (w *watcher) startProcess(st *tracker.State, extraEnv map[string]string) (*procfs.Handle, error) {
	dir := w.store.RunDir(st.ID)
	files := make([]*os.File, 3)
	var err error
	if files[0], err = os.Open(os.DevNull); err != nil {
		return nil, err
	}
	for i, name := range []string{"stdout", "stderr"} {
		if files[i+1], err = os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644); err != nil {
			break
		}
	}
	defer func() {
		for _, f := range files {
			if f != nil {
				f.Close()
			}
		}
	}()
	if err != nil {
		return nil, err
	}
	env := childEnv(os.Environ(), extraEnv, map[string]string{
		"TEND_ROOT": w.cfg.Root, "TEND_RUN_ID": st.ID, "TEND_SESSION": st.Session,
	})
	path, err := lookPath(st.Command[0], st.Cwd, env)
	if err != nil {
		return nil, err
	}
	pidfd := -1
	p, err := os.StartProcess(path, st.Command, &os.ProcAttr{
		Dir: st.Cwd, Env: env, Files: files,
		Sys: &syscall.SysProcAttr{Setpgid: true, PidFD: &pidfd},
	})
	if err != nil {
		return nil, unwrapStart(err)
	}
	pid := p.Pid
	p.Release() // the Handle, not os.Process, reaps this child
	if pidfd < 0 {
		// No CLONE_PIDFD: the child is ours and unreaped, so its PID cannot
		// have been reused yet.
		if pidfd, err = unix.PidfdOpen(pid, 0); err != nil {
			return nil, fmt.Errorf("pidfd_open: %w", err)
		}
	}
	return procfs.NewHandle(pidfd, pid)
}

func unwrapStart(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		if errors.Is(pe.Err, syscall.ENOENT) && pe.Op == "chdir" {
			return fmt.Errorf("working directory %s does not exist", pe.Path)
		}
		return fmt.Errorf("%s %s: %v", pe.Op, pe.Path, pe.Err)
	}
	return err
}

// childEnv builds a child's environment: base, then extra, then tend's own
// variables, each later one replacing an earlier one of the same name.
func childEnv(base []string, layers ...map[string]string) []string {
	index := make(map[string]int, len(base))
	env := make([]string, 0, len(base)+8)
	set := func(k, v string) {
		if i, ok := index[k]; ok {
			env[i] = k + "=" + v
			return
		}
		index[k] = len(env)
		env = append(env, k+"="+v)
	}
	for _, kv := range base {
		if k, v, ok := strings.Cut(kv, "="); ok {
			set(k, v)
		}
	}
	for _, layer := range layers {
		for k, v := range layer {
			set(k, v)
		}
	}
	return env
}

// lookPath finds name the way a shell would, but in the child's PATH and
// relative to the child's working directory.
func lookPath(name, cwd string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	path := "/usr/local/bin:/usr/bin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		if !filepath.IsAbs(p) {
			p = filepath.Join(cwd, p)
		}
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("executable %q not found in PATH", name)
}

// stop sends SIGTERM to r's process group and arranges SIGKILL after
// grace. The run ends in state cause (Canceled or TimedOut) once no process
// of its group is left. request names the cancel request that asked, if one
// did; it is answered when the run has ended.
func (w *watcher) stop(r *run, cause, reason string, grace time.Duration, request string) {
	now := time.Now()
	killAt := now.Add(grace)
	if r.st.Stop != nil {
		// Already stopping: a new request waits with it, and can only bring
		// SIGKILL forward.
		changed := request != "" && r.st.Stop.Request == ""
		if changed {
			r.st.Stop.Request = request
		}
		if killAt.Before(r.st.Stop.KillAt) {
			r.st.Stop.KillAt = killAt
			r.killAt = killAt
			r.timers = append(r.timers, w.after(grace, func() { w.killGroup(r) }))
			changed = true
		}
		if changed {
			w.save(r.st)
		}
		return
	}
	if r.exit != nil {
		return // it has ended by itself; draining its group is under way
	}
	r.st.State = tracker.Stopping
	r.st.Stop = &tracker.Stop{Cause: cause, Request: request, RequestedAt: now, KillAt: killAt}
	r.st.Reason = reason
	r.killAt = killAt
	w.save(r.st)
	w.signalGroup(r, syscall.SIGTERM)
	r.termSent = true
	r.timers = append(r.timers, w.after(grace, func() { w.killGroup(r) }))
}

// killGroup sends SIGKILL to r's group if its time has come and it is
// still supervised.
func (w *watcher) killGroup(r *run) {
	if w.runs[r.st.ID] != r || time.Now().Before(r.killAt) {
		return
	}
	w.log.Printf("run %s: grace over, sending SIGKILL to group %d", r.st.ID, r.st.PGID)
	w.signalGroup(r, syscall.SIGKILL)
}

// signalGroup signals r's process group. It is safe from PID reuse because
// the group's leader is our child and stays unreaped (alive or a zombie)
// until the group is empty: while it exists, no new process can take its
// PID, and so no new group can take the group's ID. Adopted runs, whose
// leader is not our child, are only signaled while the pidfd says the
// leader lives.
func (w *watcher) signalGroup(r *run, sig syscall.Signal) {
	if r.adopted {
		if r.exit != nil || r.proc.Signal(0) != nil {
			return
		}
	}
	if err := unix.Kill(-r.st.PGID, sig); err != nil && !errors.Is(err, unix.ESRCH) {
		w.log.Printf("run %s: signal %v to group %d: %v", r.st.ID, sig, r.st.PGID, err)
	}
	if sig == syscall.SIGTERM {
		unix.Kill(-r.st.PGID, syscall.SIGCONT) // a stopped process acts on SIGTERM only once continued
	}
}

// leadersExited handles runs whose leader process has exited. The leader
// is left a zombie, holding the group's ID, until no other process of its
// group is left: leftovers get SIGTERM at once and SIGKILL when the run's
// grace is over. One pass over /proc serves every run in the batch and
// every run still draining.
func (w *watcher) leadersExited(batch []*run) {
	now := time.Now()
	for _, r := range batch {
		if r.exit != nil {
			continue
		}
		if r.adopted {
			r.exit = &procfs.Exit{Code: -1}
		} else {
			e, ok, err := r.proc.Peek()
			if err != nil || !ok {
				w.log.Printf("run %s: pid %d readable but not exited (%v)", r.st.ID, r.proc.PID(), err)
				continue
			}
			r.exit = &e
		}
		r.exitedAt = now
		if r.killAt.IsZero() {
			r.killAt = now.Add(r.grace())
		}
	}
	w.drain()
}

// drain checks every run whose leader has exited; those whose group is
// empty are reaped and finished, the others are signaled and checked again.
// At most one re-check is scheduled at a time, whoever asks.
func (w *watcher) drain() {
	groups := make(map[int]bool)
	for _, r := range w.runs {
		if r.exit != nil {
			groups[r.st.PGID] = true
		}
	}
	if len(groups) == 0 {
		return
	}
	members, err := procfs.GroupMembers(groups)
	if err != nil {
		w.log.Printf("scanning /proc: %v", err)
	}
	again := false
	for _, r := range w.runs {
		if r.exit == nil {
			continue
		}
		if len(members[r.st.PGID]) == 0 || r.adopted {
			w.finish(r)
			continue
		}
		again = true
		if !r.termSent {
			w.log.Printf("run %s: leader exited, %d processes of its group remain: SIGTERM", r.st.ID, len(members[r.st.PGID]))
			w.signalGroup(r, syscall.SIGTERM)
			r.termSent = true
		}
		if !time.Now().Before(r.killAt) {
			w.signalGroup(r, syscall.SIGKILL)
		}
	}
	if again && !w.draining {
		w.draining = true
		w.after(20*time.Millisecond, func() {
			w.draining = false
			w.drain()
		})
	}
}

// finish reaps r's leader and records how the run ended.
func (w *watcher) finish(r *run) {
	e := *r.exit
	if !r.adopted {
		if reaped, err := r.proc.Reap(); err == nil {
			e = reaped
		} else {
			w.log.Printf("run %s: reaping pid %d: %v", r.st.ID, r.proc.PID(), err)
		}
	}
	r.proc.Close()
	for _, t := range r.timers {
		t.Stop()
	}
	delete(w.runs, r.st.ID)

	st := r.st
	st.EndedAt = &r.exitedAt
	how := describeExit(e, r.adopted)
	if !r.adopted {
		if e.Signal != 0 {
			st.Signal = unix.SignalName(e.Signal)
		} else {
			code := e.Code
			st.ExitCode = &code
		}
	}
	switch {
	case st.Stop != nil && st.Stop.Cause == tracker.Canceled:
		st.State = tracker.Canceled
		st.Reason = st.Reason + "; " + how
	case st.Stop != nil && st.Stop.Cause == tracker.TimedOut:
		st.State = tracker.TimedOut
		st.Reason = st.Reason + "; " + how
	case !r.adopted && e.Signal == 0 && e.Code == 0:
		st.State, st.Reason = tracker.Completed, ""
	default:
		st.State, st.Reason = tracker.Failed, how
	}
	w.save(st)
	w.log.Printf("run %s: %s (%s)", st.ID, st.State, how)
	w.answerStop(st, st.State)
}

// answerStop answers the cancel request that waits on st's stop, if any:
// canceled if the run ended canceled, else already_finished.
func (w *watcher) answerStop(st *tracker.State, detail string) {
	if st.Stop == nil || st.Stop.Request == "" {
		return
	}
	n := spool.Name{ID: st.ID, Verb: spool.VerbCancel}
	if st.State == tracker.Canceled {
		w.outcome(n, spool.Canceled, "")
	} else {
		w.outcome(n, spool.AlreadyFinished, detail)
	}
}

func describeExit(e procfs.Exit, adopted bool) string {
	switch {
	case adopted:
		return "exit status unknown: the run outlived the watcher that started it"
	case e.Signal != 0:
		s := "killed by " + unix.SignalName(e.Signal)
		if e.Core {
			s += " (core dumped)"
		}
		return s
	}
	return fmt.Sprintf("exited with code %d", e.Code)
}
