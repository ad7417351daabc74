package watcher

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tendhq/tend/procfs"
	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
	"github.com/tendhq/tend/tracker/durable"
	"golang.org/x/sys/unix"
)

// defaultGrace is the time between SIGTERM and SIGKILL when a run is stopped.
const defaultGrace = 10 * time.Second

// run is a run whose process this watcher supervises.
type run struct {
	st   *tracker.State
	proc *procfs.Handle
	// adopted runs were started by an earlier watcher: they are not our
	// children. kept ones are a keeper's, which records their exit status;
	// the others' status cannot be known.
	adopted, kept bool
	// pastBoot is set for a run started in an earlier boot: no process
	// alive now is its, whatever its PID or group ID (see otherBoot).
	pastBoot bool
	// awaiting is set while the leader of an adopted run has exited and its
	// exit record is not yet written; it gives up at the deadline.
	awaiting *time.Timer

	exit     *procfs.Exit // set once the leader has exited (our own leader stays unreaped until the group is empty)
	unknown  bool         // exit holds nothing: the status was lost
	exitedAt time.Time
	// started is when its process started, on this watcher's monotonic
	// clock: its timeout and duration do not move with the wall clock.
	started  time.Time
	termSent bool      // SIGTERM went to the group
	killAt   time.Time // when SIGKILL follows, once stopping or draining
	timers   []*time.Timer
	timeout  *time.Timer // the timeout's, also in timers
	// poll is the next health check or look for the ready file: each
	// schedules the next, in its place (in timers, one a check would add
	// for good, 86,400 a day at the default interval).
	poll *time.Timer
	// healthSaved is when a health check's result was last saved on its
	// own, healthSave the save due once healthSavedEvery has passed (see
	// saveHealth).
	healthSaved time.Time
	healthSave  *time.Timer
	// healthChangeSaved is when a change of its health status was last
	// saved at once (saveHealthChange).
	healthChangeSaved time.Time
	// unhealthyLogged is when it was last said unhealthy in the log;
	// unhealthySay is set while a line saying so is due (sayUnhealthy).
	unhealthyLogged time.Time
	unhealthySay    bool
	// progressRefused is set once a progress file it did not read is
	// logged, until one is read: said once, not at each write.
	progressRefused bool
	// progressSaved is when its record was last saved for its progress,
	// progressSave the save due once progressSavedEvery has passed (see
	// saveProgress).
	progressSaved time.Time
	progressSave  *time.Timer

	capPending, progressPending bool // a check of its output or progress is scheduled
	// cutsSaved is when the cuts of its output were last saved in its
	// record, cutsSave the save due once cutsSavedEvery has passed, and
	// cutsUnsaved whether cuts were made since, cutsText what its cut
	// file holds then ("" if none was written) (see saveCutsSoon).
	cutsSaved   time.Time
	cutsSave    *time.Timer
	cutsUnsaved bool
	cutsText    string

	// writingTo is the stream the run wrote to last, as inotify reported;
	// switches are the changes of stream not yet written to its order
	// file, and orderSize what this watcher has written there.
	// switchedAt is, for each stream, its size at the last switch from it.
	writingTo  string
	switches   []tracker.Switch
	switchedAt map[string]int64
	orderSize  int64
}

func (r *run) grace() time.Duration { return r.st.Grace.D() }

// launch starts st's process in its own session and process group, with its output
// going straight to files in the run's directory (so output survives the
// watcher), and records it running, or failed if it could not start.
//
// The process is held at a gate until its PID is recorded: whatever
// happens to the watcher, a run recorded as starting never ran, and one
// recorded running has the PID to find it by. Past the gate it writes
// "passed" over "closed" in runs/ID/gate (through a descriptor opened
// with O_DSYNC, so the line survives a power loss once written) and
// creates runs/ID/started, then execs the command; so a run whose process
// ended with neither never ran and can be started again (see recover.go).
//
// Inside a batch the fork is left to the forker's thread while the loop
// takes the next requests (it waits there until the child has exec'd,
// half of what a short run costs the loop); the batch settles it before
// it writes its records (see settleSpawns).
func (w *watcher) launch(st *tracker.State, env map[string]string) {
	if isJob(st) {
		w.launchJob(st, env) // on a cluster
		return
	}
	sp, err := w.prepareStart(st, env)
	if err != nil {
		w.notStarted(st, err)
		return
	}
	sp.done = w.forker.start(func() { w.cfg.processes.fork(sp) })
	if w.batch.active {
		w.spawning = append(w.spawning, sp)
		return
	}
	w.spawned(sp)
}

// settleSpawns finishes the launches whose forks are under way, in the
// order they were launched. Whatever looks at the runs settles them
// first: until then they are in no list but w.spawning.
func (w *watcher) settleSpawns() {
	for len(w.spawning) > 0 {
		sp := w.spawning[0]
		w.spawning = w.spawning[1:]
		w.spawned(sp)
	}
}

// spawned finishes launching sp once its fork is done: it records the run
// running, supervises it, and opens its gate once the record is durable.
func (w *watcher) spawned(sp *spawn) {
	<-sp.done
	st := sp.st
	h, err := sp.handle()
	if err != nil {
		w.notStarted(st, err)
		return
	}
	if err := setLimits(h.PID(), st); err != nil {
		// Its gate closed, the process exits 125 without running anything.
		unix.Close(sp.gate)
		w.cfg.processes.reap(h)
		h.Close()
		w.notStarted(st, err)
		return
	}
	now := time.Now()
	r := &run{st: st, proc: h, started: now}
	st.Attempt++
	st.State, st.PID, st.PGID, st.StartedAt = tracker.Running, h.PID(), h.PID(), &now
	if waitsForReady(st) {
		st.State = tracker.Starting // until a check passes
	}
	if ps, err := procfs.ReadStat(h.PID()); err == nil {
		st.ProcStart = ps.StartTime
	}
	st.Boot = w.boot
	w.saveChange(st, tracker.Event{}, w.launchRecord(st))
	// Watched before it writes, so that the order of its output is seen
	// from its first byte.
	w.watchRunDir(r)
	w.supervise(r)
	// Runs launched together in a batch wait at their gates while their
	// records are written with one round of fsyncs.
	gate := sp.gate
	w.followEffect(effect{name: effectGate, id: st.ID, also: gateWaitsFor(st), do: func() {
		if err := durable.WriteAll(gate, []byte("go\n")); err != nil {
			w.log.Printf("run %s: opening its gate: %v", st.ID, err)
		}
		unix.Close(gate)
		w.log.Printf("run %s: %s (pid %d, attempt %d)", st.ID, st.State, st.PID, st.Attempt)
	}})
}

// notStarted records st failed: its process could not be started.
func (w *watcher) notStarted(st *tracker.State, err error) {
	now := time.Now()
	st.State, st.Reason, st.EndedAt = tracker.Failed, "could not start: "+err.Error(), &now
	w.save(st)
	w.log.Printf("run %s: %s", st.ID, st.Reason)
}

// gateScript holds a run at the gate: it waits for a line on fd 3 and
// gives up (exit 125) if the watcher dies first, then marks the run
// started (a line to its gate file, fd 4, synced where the watcher made it
// so: see openGateFile; then $1) and execs the
// command. A mark that cannot be written stops it: a run that may have
// run must say so.
const gateScript = `IFS= read -r go <&3 || exit 125; exec 3<&-; echo ` + gateWord + ` >&4 || exit 125; exec 4>&-; : >"$1" || exit 125; shift; exec "$@"`

// gateLine is the gate for a run whose command is a shell command line
// (sh -c TEXT): the text follows it on the same line of the same script,
// so the gate's shell runs it without exec'ing a second /bin/sh, the most
// of what a short run costs beyond its own work. On the same line, the
// text sees what sh -c TEXT shows it: $0 is /bin/sh, no positional
// parameters, messages on line 1; a syntax error in it stops the script
// before the gate, with the same message and status 2.
const gateLine = `IFS= read -r go <&3 || exit 125; exec 3<&-; unset go; echo ` + gateWord + ` >&4 || exit 125; exec 4>&-; : >"$1" || exit 125; shift; `

// gateArgv returns the argv of st's process: a shell that waits at the
// gate, then runs st's command.
func gateArgv(st *tracker.State, started string) []string {
	if c := st.Command; len(c) == 3 && c[0] == "/bin/sh" && c[1] == "-c" {
		return []string{"/bin/sh", "-c", gateLine + c[2], "/bin/sh", started}
	}
	return append([]string{"/bin/sh", "-c", gateScript, "tend", started}, st.Command...)
}

// setLimits sets st's resource limits on its process, pid, held at its
// gate: with prlimit(2), not the gate shell's ulimit, whose flags differ
// from shell to shell (-p is the process limit in dash, the pipe size in
// bash).
//
// The watcher sets them as root for another user's run, which could raise
// a limit past what that user may have: there a limit only ever lowers
// what the process has (its hard limit caps what is asked for), as the
// user's own setrlimit would.
func setLimits(pid int, st *tracker.State) error {
	lowerOnly := tracker.RunPerm(st.OwnerUID).Owner > 0
	for _, l := range st.Limits.List() {
		if lowerOnly {
			var had unix.Rlimit
			if err := unix.Prlimit(pid, l.Resource, nil, &had); err != nil {
				if errors.Is(err, unix.EPERM) {
					return fmt.Errorf("limits: %s: %w (setting the limits of another user's run needs CAP_SYS_RESOURCE, which this watcher lacks)", l.Name, err)
				}
				return fmt.Errorf("limits: %s: %w", l.Name, err)
			}
			l.Max = min(l.Max, had.Max)
			l.Cur = min(l.Cur, l.Max)
		}
		if err := unix.Prlimit(pid, l.Resource, &l.Rlimit, nil); err != nil {
			return fmt.Errorf("limits: %s %d: %w", l.Name, l.Cur, err)
		}
	}
	return nil
}

// hasStarted reports whether run id's process passed its gate: it made
// started, or wrote to its gate file. A power loss may take back either,
// but for a gate file written through O_DSYNC: see gateTrusted. A run an
// earlier tend started has no gate file.
func (w *watcher) hasStarted(id string) bool { return w.store.MayHaveStarted(id) }

// supervise watches r's process: its exit, and its timeout.
func (w *watcher) supervise(r *run) {
	w.runs[r.st.ID] = r
	go func() {
		if err := w.cfg.processes.exited(r.proc); err != nil {
			w.log.Printf("run %s: waiting for pid %d: %v", r.st.ID, r.proc.PID(), err)
		}
		w.exited <- r
	}()
	w.scheduleTimeout(r)
	if waitsForReady(r.st) && r.st.Stop == nil {
		w.watchReadiness(r)
	}
}

// scheduleTimeout arms r's timeout, if it has one: from its start, not
// counting the time it spent paused.
func (w *watcher) scheduleTimeout(r *run) {
	if r.st.Timeout == 0 || r.st.Stop != nil || r.st.StartedAt == nil || r.st.PausedAt != nil {
		return
	}
	left := time.Until(r.started.Add(r.st.Timeout.D() + r.st.PausedFor.D()))
	r.timeout = w.after(max(left, 0), func() {
		if w.runs[r.st.ID] == r && r.st.Stop == nil && r.exit == nil && r.st.PausedAt == nil {
			w.log.Printf("run %s: timed out after %s", r.st.ID, r.st.Timeout.D())
			w.stop(r, tracker.CauseTimedOut, "timed out after "+r.st.Timeout.D().String(), r.grace(), "")
		}
	})
	r.timers = append(r.timers, r.timeout)
}

// A spawn is a run's process being started: prepared on the loop, forked
// on the forker's thread (see launch).
type spawn struct {
	st   *tracker.State
	argv []string
	env  []string
	// stdin is the watcher's /dev/null; files are the child's stdout,
	// stderr, the gate's read end and its gate file, closed in the
	// watcher once it is forked; gate is the write end.
	stdin int
	files [4]int
	gate  int
	done  <-chan struct{}     // closed once fork has returned
	cred  *syscall.Credential // whom it runs as, if not the watcher's user

	pid, pidfd int
	err        error
}

// prepareStart opens what st's process is started with. Every file is a
// raw descriptor and the fork is syscall.ForkExec's: os.StartProcess and
// os.File would make about a dozen fcntl and epoll_ctl calls a start to
// set up and undo the runtime poller, for files that only the child uses.
func (w *watcher) prepareStart(st *tracker.State, extraEnv map[string]string) (_ *spawn, err error) {
	dir := w.store.RunDir(st.ID)
	sp := &spawn{st: st, files: [4]int{-1, -1, -1, -1}, gate: -1, pidfd: -1}
	as, err := w.runAs(st)
	if err != nil {
		return nil, err
	}
	if sp.stdin, err = w.devNull(); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			sp.closeFiles()
			if sp.gate >= 0 {
				unix.Close(sp.gate)
			}
		}
	}()
	for i, name := range []string{"stdout", "stderr"} {
		if sp.files[i], err = tracker.OpenRunFile(filepath.Join(dir, name), unix.O_WRONLY|unix.O_APPEND, st.OwnerUID); err != nil {
			return nil, err
		}
	}
	if sp.files[3], err = w.openGateFile(st); err != nil {
		return nil, err
	}
	pipe := []int{-1, -1}
	if err = unix.Pipe2(pipe, unix.O_CLOEXEC); err != nil {
		return nil, fmt.Errorf("pipe: %w", err)
	}
	sp.files[2], sp.gate = pipe[0], pipe[1]
	sp.env = childEnv(as.baseEnv(), as.env(), withoutMarks(extraEnv), map[string]string{
		"TEND_ROOT": w.cfg.Root, "TEND_RUN_ID": st.ID, "TEND_SESSION": st.Session, w.mark: st.ID,
		"TEND_READY": w.readyPath(st.ID), "TEND_ATTEMPT": strconv.Itoa(st.Attempt + 1),
		"TEND_PROGRESS": w.store.Run(st.ID).Progress(),
	})
	// Found here, for a clear error; the gate's shell finds it the same way.
	// Not for a run of another user: the watcher would look as root, and
	// tell that user of paths only root may see; its shell says, as it.
	// The reason does not name the program (the history, readable by the
	// group in a shared root, has every reason, and a reason never quotes
	// a command); the run's stderr, its owner's alone, does.
	if as == nil {
		if _, err := lookPath(st.Command[0], st.Cwd, sp.env); err != nil {
			unix.Write(sp.files[1], []byte("tend: could not start: "+err.Error()+"\n"))
			return nil, errNotInPath
		}
	}
	if as != nil {
		if err := handOver(dir, *as); err != nil {
			return nil, err
		}
		sp.cred = &syscall.Credential{Uid: uint32(as.uid), Gid: uint32(as.gid), Groups: as.groups}
	}
	sp.argv = gateArgv(st, w.store.Run(st.ID).Started())
	return sp, nil
}

// openGateFile makes run st's gate file anew, holding gateClosed, for its
// process to overwrite with gatePassed once past its gate. Its name is
// durable with the run's record, which is written (and its directory
// synced) before the gate opens; its closed line need not be (an empty
// gate says the same).
//
// Where the watcher knows the boot, the line is not synced: in this boot
// every reader finds it in the page cache, and a run recorded running in
// an earlier one is taken for one that may have run, whatever its gate
// says after the power loss (see gateTrusted). Flushing it cost every
// start a cache flush before its command (0.2-0.7 ms on the bench's disk,
// performance.md round 26). Elsewhere (and unless the durability is
// watcher_crash) the process gets it opened with O_DSYNC, so that the line
// is on disk before the command runs: see syncedGate.
func (w *watcher) openGateFile(st *tracker.State) (int, error) {
	path := w.store.Run(st.ID).Gate()
	if err := unix.Unlink(path); err != nil && !errors.Is(err, unix.ENOENT) {
		return -1, &os.PathError{Op: "unlink", Path: path, Err: err}
	}
	fd, err := tracker.OpenRunFile(path, unix.O_WRONLY, st.OwnerUID)
	if err != nil {
		return -1, err
	}
	if w.settings.Durability != tracker.WatcherCrash && w.boot == "" {
		return syncedGate(fd, path)
	}
	// At offset 0, which the descriptor keeps for the process's line.
	if _, err := unix.Pwrite(fd, []byte(gateClosed), 0); err != nil && !errors.Is(err, unix.ENOSPC) && !errors.Is(err, unix.EDQUOT) {
		unix.Close(fd)
		return -1, &os.PathError{Op: "write", Path: path, Err: err}
	}
	return fd, nil
}

// syncedGate returns a descriptor of gate file fd (at path), new and
// empty, that writes with O_DSYNC at offset 0, and closes fd. The file
// holds gateClosed first, so that the process's line is an overwrite of a
// block the file system already holds, of the same size: a synced write
// that needs no journal commit, only the data's own write (0.25 ms
// against 1.1 for an append on a journaled ext4, performance.md round
// 17). Its write-back is started here, before the record's flush, so that
// a journaled ext4 allocates the block in the transaction the record's
// commit makes durable.
func syncedGate(fd int, path string) (int, error) {
	defer unix.Close(fd)
	err := durable.WriteAll(fd, []byte(gateClosed))
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
		// A full disk: the file stays empty, the process's line is an
		// append, as an earlier tend's was, and the run waits at its gate
		// for its record as it would anyway.
		err = unix.Ftruncate(fd, 0)
	}
	if err != nil {
		return -1, &os.PathError{Op: "write", Path: path, Err: err}
	}
	flags := unix.O_WRONLY | unix.O_CLOEXEC | durable.FlushGate.SyncFlag()
	durable.StartWriteBack(fd)
	// The same file, anew at offset 0, opened through the descriptor
	// that made it, not by its name.
	synced, err := unix.Open("/proc/self/fd/"+strconv.Itoa(fd), flags, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return synced, nil
}

// The gate file's words (tracker.GateClosed, GatePassed), in the
// watcher's own names.
const (
	gateClosed = tracker.GateClosed
	gateWord   = tracker.GateWord
	gatePassed = tracker.GatePassed
)

// runAs returns the account run st's process runs as where that is not
// the watcher's own: a root watcher runs each request as its owner, who
// must still be one config.json allows.
func (w *watcher) runAs(st *tracker.State) (*account, error) {
	if tracker.RunPerm(st.OwnerUID).Owner == 0 {
		return nil, nil
	}
	if !w.allowed(st.OwnerUID) {
		return nil, fmt.Errorf("its owner, uid %d, may no longer submit requests here (see users and groups in config.json)", st.OwnerUID)
	}
	a, err := lookupAccount(st.OwnerUID)
	if err != nil {
		return nil, err
	}
	return &a, nil
}

// handOver gives run directory dir to the account its run runs as, and
// to nobody else, before the run starts: its process writes there
// (started, ready, progress), and no other user may read its output.
func handOver(dir string, a account) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	if err := unix.Fchown(fd, a.uid, a.gid); err != nil {
		return &os.PathError{Op: "chown", Path: dir, Err: err}
	}
	if err := unix.Fchmod(fd, 0o700); err != nil {
		return &os.PathError{Op: "chmod", Path: dir, Err: err}
	}
	return nil
}

// devNull returns the watcher's descriptor of /dev/null, every run's
// stdin, opened on first use and kept (close-on-exec: each child gets it
// only as its fd 0).
func (w *watcher) devNull() (int, error) {
	if w.stdin < 0 {
		fd, err := unix.Open(os.DevNull, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, &os.PathError{Op: "open", Path: os.DevNull, Err: err}
		}
		w.stdin = fd
	}
	return w.stdin, nil
}

// fork starts sp's process, held at its gate; it runs on the forker's
// thread.
func (sp *spawn) fork() {
	f := sp.files
	sp.pid, sp.err = syscall.ForkExec(sp.argv[0], sp.argv, &syscall.ProcAttr{
		Dir: sp.st.Cwd, Env: sp.env, Files: []uintptr{uintptr(sp.stdin), uintptr(f[0]), uintptr(f[1]), uintptr(f[2]), uintptr(f[3])},
		Sys: &syscall.SysProcAttr{Setsid: true, PidFD: &sp.pidfd, Credential: sp.cred},
	})
	sp.closeFiles()
}

func (sp *spawn) closeFiles() {
	for _, fd := range sp.files {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// handle returns a handle on sp's forked process, or why it did not start.
func (sp *spawn) handle() (h *procfs.Handle, err error) {
	defer func() {
		if err != nil {
			unix.Close(sp.gate)
		}
	}()
	if sp.err != nil {
		if sp.cred != nil {
			// The errno of the child's chdir or exec, as that user: what
			// the watcher would find looking as root is not theirs to know.
			return nil, fmt.Errorf("could not start as uid %d in %s: %w", sp.cred.Uid, sp.st.Cwd, sp.err)
		}
		return nil, startError(sp.err, sp.st.Cwd)
	}
	if sp.pidfd < 0 {
		// No CLONE_PIDFD: the child is ours and unreaped, so its PID cannot
		// have been reused yet.
		if sp.pidfd, err = unix.PidfdOpen(sp.pid, 0); err != nil {
			return nil, fmt.Errorf("pidfd_open: %w", err)
		}
	}
	return procfs.NewHandle(sp.pidfd, sp.pid)
}

// startError says why a process could not be started. The child reports
// only an errno, from its chdir or its exec of /bin/sh.
func startError(err error, cwd string) error {
	if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.EACCES) {
		if fi, serr := os.Stat(cwd); serr != nil {
			return fmt.Errorf("working directory %s: %w", cwd, errors.Unwrap(serr))
		} else if !fi.IsDir() {
			return fmt.Errorf("working directory %s is not a directory", cwd)
		} else if unix.Access(cwd, unix.X_OK) != nil {
			return fmt.Errorf("working directory %s: %w", cwd, syscall.EACCES)
		}
	}
	return fmt.Errorf("fork/exec /bin/sh: %w", err)
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

// errNotInPath is why a run whose program lookPath did not find could not
// start, without its name: the run's stderr has that.
var errNotInPath = errors.New("executable not found in PATH (its stderr names it)")

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
func (w *watcher) stop(r *run, cause tracker.StopCause, reason string, grace time.Duration, request string) {
	now := time.Now()
	killAt := now.Add(grace)
	if r.st.Stop != nil {
		// Already stopping: a new request waits with it, and can only bring
		// SIGKILL forward.
		changed := request != "" && !slices.Contains(r.st.Stop.Requests, request)
		if changed {
			r.st.Stop.Requests = append(r.st.Stop.Requests, request)
		}
		if cause == tracker.CauseCanceled && r.st.Stop.Cause == tracker.CauseRestart {
			// A cancel wins over a restart under way: the run is not started again.
			r.st.Stop.Cause, r.st.Reason, changed = tracker.CauseCanceled, reason, true
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
	r.st.Stop = &tracker.Stop{Cause: cause, RequestedAt: now, KillAt: killAt}
	if request != "" {
		r.st.Stop.Requests = []string{request}
	}
	r.st.Reason = reason
	r.killAt = killAt
	// A stop to start the run again is synced: its record may hold more
	// than the stop (a failed health check's status).
	kind := changed
	if cause != tracker.CauseRestart {
		kind = w.coverable(r.st)
	}
	w.saveChange(r.st, tracker.Event{}, kind)
	r.termSent = true
	r.timers = append(r.timers, w.after(grace, func() { w.killGroup(r) }))
	// Runs stopped together in a batch get SIGTERM once all their stopping
	// records are written; or could not be: a run that fills the disk must
	// still stop.
	w.follow(effectSignal, "", func() {
		if w.runs[r.st.ID] == r {
			w.signalGroup(r, syscall.SIGTERM)
		}
	})
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
// PID, and so no new group can take the group's ID. An adopted run's leader
// is reaped by someone else, so its group is signaled one verified member
// at a time instead (signalMembers).
func (w *watcher) signalGroup(r *run, sig syscall.Signal) {
	if r.adopted {
		members, err := procfs.GroupMembers(map[int]bool{r.st.PGID: true})
		if err != nil {
			w.log.Printf("run %s: scanning /proc: %v", r.st.ID, err)
		}
		w.signalMembers(r, members[r.st.PGID], sig)
		return
	}
	if err := w.cfg.processes.signal(r.st.PGID, sig); err != nil && !errors.Is(err, unix.ESRCH) {
		w.log.Printf("run %s: signal %v to group %d: %v", r.st.ID, sig, r.st.PGID, err)
	}
	if sig == syscall.SIGTERM {
		w.cfg.processes.signal(r.st.PGID, syscall.SIGCONT) // a stopped process acts on SIGTERM only once continued
	}
}

// signalMembers signals the given members of adopted run r's group, each
// through a pidfd opened on its identity (PID and start time), so a PID
// reused meanwhile is never hit. If a process other than r's leader now
// holds the group's ID as its PID, the group ID was reused: nobody is
// signaled.
func (w *watcher) signalMembers(r *run, members []procfs.Stat, sig syscall.Signal) {
	if ps, err := procfs.ReadStat(r.st.PGID); err == nil && ps.StartTime != r.st.ProcStart {
		w.log.Printf("run %s: group %d now belongs to %s (pid %d): not signaled", r.st.ID, r.st.PGID, ps.Comm, ps.PID)
		return
	}
	for _, m := range members {
		signalProcess(m, sig)
	}
}

// signalProcess signals process m if it is still the process m describes.
func signalProcess(m procfs.Stat, sig syscall.Signal) {
	h, err := procfs.Open(m.PID, m.StartTime)
	if err != nil {
		return // gone, or its PID is another process's now
	}
	defer h.Close()
	h.Signal(sig)
	if sig == syscall.SIGTERM {
		h.Signal(syscall.SIGCONT)
	}
}

// leadersExited handles runs whose leader process has exited. Our own
// leader is left a zombie, holding the group's ID, until no other process
// of its group is left; an adopted one's exit status comes from its exit
// record. Leftovers get SIGTERM at once and SIGKILL when the run's grace is
// over (drain).
func (w *watcher) leadersExited(batch []*run) {
	now := time.Now()
	for _, r := range batch {
		if r.exit != nil || r.awaiting != nil {
			continue
		}
		r.exitedAt = now
		if r.killAt.IsZero() {
			r.killAt = now.Add(r.grace())
		}
		if r.adopted {
			w.adoptedExited(r)
			continue
		}
		e, ok, err := r.proc.Peek()
		if err != nil || !ok {
			w.log.Printf("run %s: pid %d readable but not exited (%v)", r.st.ID, r.proc.PID(), err)
			continue
		}
		r.exit = &e
	}
	// Exits come in storms (a cancel of many runs, a shutdown): one pass
	// over /proc a millisecond later serves all the exits of that moment.
	// A lone exit is drained at once: what waits for its end (the next
	// link of a chain) should not wait for a storm that does not come.
	calm := now.Sub(w.lastExit) > exitStorm
	w.lastExit = now
	if calm {
		w.drainAgainIn(0)
	} else {
		w.drainAgainIn(time.Millisecond)
	}
}

// exitStorm is how soon after another an exit counts as part of a storm.
// The exits of a storm come well under a millisecond apart; a chain's
// links end 5-10 ms apart, and each should be drained at once.
const exitStorm = 2 * time.Millisecond

// recordWait is how long an adopted run's end waits for its status: an
// exit record from its keeper, or the kernel's (see takeExitInfo). The
// keeper writes it within milliseconds, and init reaps at once; the wait
// is long so that only a status that is gone, not a slow one, makes it
// unknown.
const recordWait = 30 * time.Second

// adoptedExited takes the exit status of adopted run r from its exit
// record or from its pidfd, or waits a while for either.
func (w *watcher) adoptedExited(r *run) {
	if w.takeExitRecord(r) || w.takeExitInfo(r) || r.exit != nil {
		return
	}
	w.awaitExit(r, time.Now(), 10*time.Millisecond)
}

// awaitExit looks again, after d, for the status of adopted run r, whose
// leader has exited: a keeper may be about to write its record, or its
// parent about to reap it. Exit records are also taken as they come (see
// exitRecorded). After recordWait its status is unknown.
func (w *watcher) awaitExit(r *run, since time.Time, d time.Duration) {
	r.awaiting = time.AfterFunc(d, func() {
		w.do <- func() {
			if r.awaiting == nil || r.exit != nil {
				return
			}
			r.awaiting = nil
			switch {
			case w.takeExitRecord(r) || w.takeExitInfo(r) || r.exit != nil:
			case time.Since(since) >= recordWait:
				w.log.Printf("run %s: no exit status for pid %d, from its keeper or the kernel", r.st.ID, r.st.PID)
				r.exit, r.unknown = &procfs.Exit{Code: -1}, true
			default:
				w.awaitExit(r, since, min(2*d, time.Second))
				return
			}
			w.drain()
		}
	})
}

// takeExitInfo sets adopted run r's exit from the status the kernel keeps
// for its pidfd once its parent has reaped it, whoever the parent is: a
// keeper that died before it wrote the record, or init. Where the kernel
// keeps none, a run whose parent is no keeper ends with its status
// unknown, at once.
func (w *watcher) takeExitInfo(r *run) bool {
	if r.proc == nil {
		return false // gone before this watcher looked: its record is awaited
	}
	e, ok, err := r.proc.ExitInfo()
	if err != nil {
		if !r.kept {
			r.exit, r.unknown = &procfs.Exit{Code: -1}, true
			if !errors.Is(err, procfs.ErrNoExitInfo) {
				w.log.Printf("run %s: %v", r.st.ID, err)
			}
		}
		return false
	}
	if !ok {
		return false
	}
	r.exit = &e
	if r.awaiting != nil {
		r.awaiting.Stop()
		r.awaiting = nil
	}
	return true
}

// takeExitRecord sets r's exit from its exit record, if there is one.
func (w *watcher) takeExitRecord(r *run) bool {
	e, err := readExitRecord(w.cfg.Root, r.st.PID, r.st.ProcStart)
	if errors.Is(err, fs.ErrNotExist) {
		return false
	}
	if err != nil {
		w.log.Printf("run %s: %v", r.st.ID, err)
		r.exit, r.unknown = &procfs.Exit{Code: -1}, true
	} else {
		r.exit = &e
	}
	if r.awaiting != nil {
		r.awaiting.Stop()
		r.awaiting = nil
	}
	return true
}

// exitRecorded handles a new file in exits/: the end of an adopted run
// the watcher waits for, or a record nobody needs (of a process that was
// no run's leader), which is removed.
func (w *watcher) exitRecorded(name string) {
	for _, r := range w.runs {
		if r.adopted && exitRecordName(r.st.PID, r.st.ProcStart) == name {
			if r.awaiting != nil && w.takeExitRecord(r) {
				w.drain()
			}
			return // otherwise its exit is handled when the pidfd says so
		}
	}
	if pid, start, ok := parseExitRecordName(name); ok {
		removeExitRecord(w.cfg.Root, pid, start)
	}
}

// finish reaps r's leader and records how the run ended. An adopted run
// whose process never passed its gate never ran: it is started now, as if
// the earlier watcher had never claimed it.
//
// The end is recorded before our own leader is reaped, and before an
// adopted one's exit record is removed: if the watcher dies in between, the
// unreaped leader goes to the keeper, which records its exit status again,
// and the record stays for the next watcher; the status is never lost.
func (w *watcher) finish(r *run) {
	e := *r.exit
	pid, start := r.st.PID, r.st.ProcStart
	defer w.follow(effectReap, r.st.ID, func() {
		if !r.adopted {
			if err := w.cfg.processes.reap(r.proc); err != nil {
				w.log.Printf("run %s: reaping pid %d: %v", r.st.ID, pid, err)
			}
		} else if err := removeExitRecord(w.cfg.Root, pid, start); err != nil {
			// Removed only now that the end is recorded: until then, it is
			// what the next watcher would need.
			w.log.Printf("run %s: %v", r.st.ID, err)
		}
		if r.proc != nil {
			r.proc.Close()
		}
	})
	for _, t := range r.timers {
		t.Stop()
	}
	if r.poll != nil {
		r.poll.Stop()
	}
	if r.healthSave != nil {
		r.healthSave.Stop()
	}
	if r.progressSave != nil {
		r.progressSave.Stop() // its end's save records its progress
	}
	delete(w.runs, r.st.ID)
	w.unwatchRunDir(r.st.ID)
	if r.proc != nil && !r.adopted {
		// As the kernel told Peek: no read of the zombie's /proc/PID/stat.
		r.st.CPUSeconds = e.CPU.Seconds()
	}
	w.capOutput(r)
	if r.adopted {
		if !w.hasStarted(r.st.ID) && w.gateTrusted(r.st) {
			w.neverRan(r.st, "its process ended at the start gate")
			return
		}
	}

	st := r.st
	st.EndedAt = &r.exitedAt
	if !r.started.IsZero() {
		st.DurationSeconds = max(0, r.exitedAt.Sub(r.started).Seconds())
	}
	how := describeExit(e, r.unknown)
	if !r.unknown {
		if e.Signal != 0 {
			st.Signal = unix.SignalName(e.Signal)
		} else {
			code := e.Code
			st.ExitCode = &code
		}
	}
	if wantsRestart(st, e, r.unknown) && w.stopping == 0 {
		w.restartAfter(st, how)
		return
	}
	switch {
	case st.Stop != nil && st.Stop.Cause == tracker.CauseCanceled:
		st.State = tracker.Canceled
		st.Reason = st.Reason + "; " + how
	case st.Stop != nil && st.Stop.Cause == tracker.CauseTimedOut:
		st.State = tracker.TimedOut
		st.Reason = st.Reason + "; " + how
	case !r.unknown && e.Signal == 0 && e.Code == 0:
		st.State, st.Reason = tracker.Completed, ""
	case !r.adopted && e.Signal == 0 && e.Code == 125 && !w.hasStarted(st.ID):
		st.State, st.Reason = tracker.Failed, "could not start: its start gate failed (see its stderr)"
	default:
		st.State, st.Reason = tracker.Failed, how
	}
	w.saveEnd(st)
	w.log.Printf("run %s: %s (%s)", st.ID, st.State, how)
	w.answerStop(st, string(st.State))
	w.startSoon() // in its slot, passing its gate once this end is written
}

// answerStop answers the requests that wait on st's stop, now that it has
// ended: a cancel canceled if the run ended canceled, else
// already_finished; a restart, which did not happen (a cancel won, or
// the run could not be started again), not_running with the run's state.
func (w *watcher) answerStop(st *tracker.State, detail string) {
	if st.Stop == nil {
		return
	}
	for _, key := range st.Stop.Requests {
		n, err := spool.ParseKey(key)
		switch {
		case err != nil:
		case n.Verb == spool.VerbRestart:
			w.outcome(n, spool.NotRunning, string(st.State))
		case st.State == tracker.Canceled:
			w.outcome(n, spool.Canceled, "")
		default:
			w.outcome(n, spool.AlreadyFinished, detail)
		}
	}
}

func describeExit(e procfs.Exit, unknown bool) string {
	switch {
	case unknown:
		return "exit status unknown: it ended while neither a watcher nor a keeper was its parent"
	case e.Signal != 0:
		s := "killed by " + unix.SignalName(e.Signal)
		switch e.Signal {
		case unix.SIGXCPU:
			s += ": its CPU time limit was reached"
		case unix.SIGXFSZ:
			s += ": its file size limit was reached"
		}
		if e.Core {
			s += " (core dumped)"
		}
		return s
	}
	return fmt.Sprintf("exited with code %d", e.Code)
}

// restartAfter handles the end of run st's attempt (how says what it
// was) when its policy wants it started again: it waits in backoff for
// its next attempt, or, past its restart limit, it has failed. Either
// way a slot may be free for a queued run.
func (w *watcher) restartAfter(st *tracker.State, how string) {
	defer w.startSoon()
	if st.Stop != nil {
		how = st.Reason + "; " + how // why it was stopped: unhealthy, a restart request
	}
	if !restartLimitReached(st) {
		w.enterBackoff(st, how)
		return
	}
	st.State = tracker.Failed
	st.Reason = fmt.Sprintf("restart limit reached: %d restarts within %v; last attempt: %s", st.Restart.Limit, st.Restart.Window.D(), how)
	w.save(st)
	w.log.Printf("run %s: %s", st.ID, st.Reason)
	w.answerStop(st, string(st.State))
}
