package watcher

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tendhq/tend/procfs"
	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
	"github.com/tendhq/tend/tracker/layout"
	"github.com/tendhq/tend/watcher/cluster"
	"golang.org/x/sys/unix"
)

// Runs on a cluster. A run whose record has Slurm settings is not a
// process of this host: it is submitted to the cluster's scheduler as a
// job (one job an attempt), and followed there. The watcher keeps its
// record, answers its requests and applies its timeout, grace, restart
// policy and dependencies as for a local run; the engine (cluster.Engine)
// runs it. Where a local run has its gate, its pidfd and its exit record,
// a job has its tag, its ID and its exit file:
//
//   - before it submits a job, the watcher records the run starting with
//     the job's tag (the root, the run's ID and the attempt), durably; so a
//     watcher that dies before it records the job's ID leaves the next one
//     a tag to find the job by in the engine (recoverJob), and a job is
//     never submitted twice;
//   - the engine is asked about every live job of the root in one call
//     per poll interval (config.SlurmSettings.Poll), and not at all while no run
//     is on a cluster; no process per job runs on this host;
//   - the job writes how its command ended into the run's directory (see
//     cluster.Script), which decides its exit code; the engine's view is
//     the fallback for a job that never ran or was killed with its node.

// effectSubmit submits a job once its record, with its tag, is on disk.
const effectSubmit = "submit the job"

// A job is a run on a cluster. Its run holds its record, timers and output
// bookkeeping; it has no process on this host.
type job struct {
	*run
	// submitting is set while its submission is under way; resolving
	// while its ID is not known (a watcher died after it submitted the
	// job, before it recorded the ID) and it is looked for by its tag.
	submitting, resolving bool
	// answers are the start requests answered once it is submitted.
	answers []spool.Name
	// missing counts the polls in a row that did not find it; endWaits
	// those that waited for its exit file after it ended.
	missing, endWaits int
	// hidden is set once its reason says its output cannot be seen here.
	hidden bool
	cred   *syscall.Credential // whom its commands run as; nil: the watcher's user
}

// jobs are the watcher's runs on a cluster.
type jobs struct {
	engine cluster.Engine
	byID   map[string]*job
	// poll is the next poll, due at pollAt; gen tells a poll that was
	// rescheduled; polling is set while one is under way.
	poll    *time.Timer
	pollAt  time.Time
	gen     int
	polling bool
	// queued counts the queued runs (waiting in tend's queue, not yet
	// submitted) that are to run on a cluster: tend's slots do not hold
	// them back.
	queued int
	// slots bounds the engine's commands (sbatch, scancel) under way at
	// once.
	slots chan struct{}
	// logged is the last poll error logged, so that a scheduler that is
	// down fills no log.
	logged string
	// helpers are the process groups of the engine's commands under way
	// (and of an earlier watcher's submissions still under way): they
	// are no run's strays.
	mu      sync.Mutex
	helpers map[int]bool
	orphans map[int]bool
}

// jobCommands is how many of the engine's commands may run at once: a
// burst of submissions is done side by side, but never forks hundreds of
// sbatch at once.
const jobCommands = 4

func newJobs(engine cluster.Engine) jobs {
	return jobs{engine: engine, byID: make(map[string]*job), slots: make(chan struct{}, jobCommands), helpers: make(map[int]bool)}
}

// track notes that a command of the engine's runs (or has ended) in its
// own process group pgid.
func (js *jobs) track(pgid int, live bool) {
	js.mu.Lock()
	defer js.mu.Unlock()
	if live {
		js.helpers[pgid] = true
	} else {
		delete(js.helpers, pgid)
	}
}

// start starts cmd, an engine's command in a process group of its own, and
// notes it as a helper before any reapOrphans can see it: a forker's
// thread may be the main one, whose children reapOrphans reaps, and it
// would take the command's exit from under its Wait (helper waits for
// the lock held here).
func (js *jobs) start(cmd *exec.Cmd) error {
	js.mu.Lock()
	defer js.mu.Unlock()
	if err := cmd.Start(); err != nil {
		return err
	}
	js.helpers[cmd.Process.Pid] = true
	return nil
}

// helper reports whether process group pgid is one of the engine's
// commands, this watcher's or an earlier one's.
func (js *jobs) helper(pgid int) bool {
	js.mu.Lock()
	defer js.mu.Unlock()
	return js.helpers[pgid] || js.orphans[pgid]
}

// slurmEngine returns the engine of a Slurm cluster whose commands this
// watcher starts from its forker's threads (see forker), with the
// SLURM_CONF it was given.
func (w *watcher) slurmEngine() cluster.Engine {
	s := &cluster.Slurm{Track: w.jobs.track}
	s.Start = func(cmd *exec.Cmd) error {
		var err error
		w.forker.run(func() { err = w.jobs.start(cmd) })
		return err
	}
	if conf := os.Getenv("SLURM_CONF"); conf != "" {
		s.Env = []string{"SLURM_CONF=" + conf}
	}
	return s
}

// isJob reports whether run st runs on a cluster.
func isJob(st *tracker.State) bool { return st.Slurm != nil }

// slurmFor returns the Slurm settings run of request req runs with: the
// root's defaults (config.json's slurm.default), its session's over them
// (slurm.sessions), and the request's over both; nil for a run of this
// host.
func (w *watcher) slurmFor(req spool.Start) *spool.Slurm {
	if req.Local {
		return nil
	}
	c := w.settings.Slurm
	session := c.Sessions[req.Session]
	if req.Slurm == nil && c.Default == nil && session == nil {
		return nil
	}
	var s spool.Slurm
	if c.Default != nil {
		s = *c.Default
	}
	s = s.Merge(session).Merge(req.Slurm)
	return &s
}

// checkJob says why request req, which runs on a cluster as slurm says,
// cannot: what only a run of this host has.
func checkJob(req spool.Start, slurm *spool.Slurm) error {
	if slurm == nil {
		return nil
	}
	req.Slurm = slurm
	return req.CheckSlurm()
}

// accepted answers start request n: at once, or for a run being
// submitted to a cluster, once it is (or could not be).
func (w *watcher) accepted(n spool.Name) {
	if j := w.jobs.byID[n.ID]; j != nil && j.submitting {
		j.answers = append(j.answers, n)
		return
	}
	w.outcome(n, spool.Accepted, "")
}

// launchJob submits run st to its cluster, as launch starts a local run:
// its record says it is starting, with its job's tag, before the job is
// submitted (see submitJob).
func (w *watcher) launchJob(st *tracker.State, env map[string]string) {
	id := st.ID
	dir := w.store.Run(id)
	as, err := w.runAs(st)
	if err == nil && strings.ContainsAny(string(dir), "%\\") {
		err = fmt.Errorf("the run's directory %s has a %% or a \\, which sbatch takes for a pattern in --output", dir)
	}
	if err == nil {
		err = w.jobFiles(dir, st.OwnerUID, as)
	}
	if err != nil {
		w.notStarted(st, err)
		return
	}
	var cred *syscall.Credential
	if as != nil {
		cred = &syscall.Credential{Uid: uint32(as.uid), Gid: uint32(as.gid), Groups: as.groups}
	}
	st.Attempt++
	st.PID, st.PGID, st.ProcStart, st.Boot = 0, 0, 0, ""
	st.Job = &tracker.Job{Engine: w.jobs.engine.Name(), Tag: cluster.Tag(strings.TrimPrefix(w.mark, "TEND_MARK_"), id, st.Attempt)}
	st.State, st.Reason = tracker.Starting, tracker.Submitting+w.jobs.engine.Name() // its attempt's start, to a rebuild
	j := &job{run: &run{st: st}, submitting: true, cred: cred}
	w.jobs.byID[id] = j
	w.unpass(st)
	w.save(st)
	w.watchRunDir(j.run)
	spec := cluster.Spec{
		Tag: st.Job.Tag, Comment: "tend run " + id + " of " + w.cfg.Root,
		Script: cluster.Script(st.Command, st.Cwd, dir), Dir: st.Cwd,
		Stdout: dir.Stream("stdout"), Stderr: dir.Stream("stderr"),
		Env:   jobEnv(as, env, map[string]string{"TEND_ROOT": w.cfg.Root, "TEND_RUN_ID": id, "TEND_SESSION": st.Session, "TEND_ATTEMPT": strconv.Itoa(st.Attempt), "TEND_PROGRESS": dir.Progress()}),
		Slurm: *st.Slurm, Cred: cred,
	}
	// Submitted once its record, with the tag, is on disk.
	w.follow(effectSubmit, id, func() { w.submitJob(j, spec) })
}

// unpass takes back the event passing noted for st, if it is the last
// one noted: st is saved in that very state now.
func (w *watcher) unpass(st *tracker.State) {
	if n := len(w.passed); n > 0 && w.passed[n-1].ID == st.ID && w.passed[n-1].Rev == st.Rev {
		w.passed = w.passed[:n-1]
		st.Rev--
	}
}

// jobEnv is a job's environment: a local run's, without any root's mark.
// The mark finds the local processes of a root's runs; a job's are the
// engine's to follow, and on this host (a node that is also the
// submitting host) they must not be taken for a local run's strays.
func jobEnv(as *account, env map[string]string, own map[string]string) []string {
	out := childEnv(as.baseEnv(), as.env(), withoutMarks(env), own)
	return slices.DeleteFunc(out, func(kv string) bool { return strings.HasPrefix(kv, "TEND_MARK_") })
}

// jobFiles makes a job's output files in its run's directory dir, the
// owner's, as a local run's (the job appends to them), and hands the
// directory to the user as runs on their behalf (as).
func (w *watcher) jobFiles(dir layout.Run, owner int, as *account) error {
	for _, name := range []string{"stdout", "stderr"} {
		fd, err := tracker.OpenRunFile(dir.Stream(name), unix.O_WRONLY|unix.O_APPEND, owner)
		if err != nil {
			return err
		}
		unix.Close(fd)
	}
	os.Remove(dir.Exit()) // an earlier attempt's
	if as != nil {
		return handOver(string(dir), *as)
	}
	return nil
}

// submitJob submits j's job off the loop, and takes the answer on it.
func (w *watcher) submitJob(j *job, spec cluster.Spec) {
	j.submitting, j.resolving = true, false
	go func() {
		w.jobs.slots <- struct{}{}
		w.crash("slurm-submitting")
		id, err := w.jobs.engine.Submit(context.Background(), spec)
		if err == nil {
			w.crash("slurm-submitted")
		}
		<-w.jobs.slots
		w.do <- func() { w.submitted(j, id, err) }
	}()
}

// submitted records j's job submitted as id, or the run failed if err
// says it could not be.
func (w *watcher) submitted(j *job, id string, err error) {
	j.submitting = false
	st := j.st
	if w.jobs.byID[st.ID] != j {
		return
	}
	answers := j.answers
	j.answers = nil
	defer func() {
		for _, n := range answers {
			w.outcome(n, spool.Accepted, "")
		}
	}()
	if err != nil {
		w.endJob(j)
		now := time.Now()
		st.State, st.EndedAt = tracker.Failed, &now
		st.Reason = "could not start: " + w.jobs.engine.Name() + ": " + err.Error()
		w.save(st)
		w.log.Printf("run %s: %s", st.ID, st.Reason)
		w.answerStop(st, string(st.State))
		w.startSoon()
		return
	}
	now := time.Now()
	st.Job.ID, st.Job.SubmittedAt = id, &now
	if st.State == tracker.Starting {
		st.State, st.Reason = tracker.Queued, tracker.SubmittedReason(w.jobs.engine.Name(), id) // the job's ID, to a rebuild
	}
	w.save(st)
	w.log.Printf("run %s: submitted to %s as job %s (attempt %d)", st.ID, w.jobs.engine.Name(), id, st.Attempt)
	if st.Stop != nil {
		w.termJob(j) // canceled while it was being submitted
	}
	w.pollSoon(w.settings.Slurm.Poll)
}

// pollSoon arranges a poll of the engine within d, unless one is due
// sooner; none while no run is on a cluster.
func (w *watcher) pollSoon(d time.Duration) {
	js := &w.jobs
	if len(js.byID) == 0 {
		return
	}
	at := time.Now().Add(d)
	if js.poll != nil {
		if !js.pollAt.After(at) {
			return
		}
		js.poll.Stop()
	}
	js.gen++
	gen := js.gen
	js.pollAt = at
	js.poll = w.after(d, func() {
		if js.gen != gen {
			return // rescheduled
		}
		js.poll = nil
		w.pollJobs()
	})
}

// pollJobs asks the engine about every job of the root at once (and for
// those whose ID is not known, by their tags), off the loop.
func (w *watcher) pollJobs() {
	js := &w.jobs
	if js.polling {
		return // the one under way schedules the next
	}
	var ids, tags []string
	known := make(map[string]string)
	resolving := make(map[string]uint32)
	for _, j := range js.byID {
		switch {
		case j.submitting:
		case j.resolving:
			resolving[j.st.Job.Tag] = j.submitter()
		default:
			ids = append(ids, j.st.Job.ID)
			known[j.st.Job.ID] = j.st.Job.Tag
		}
	}
	if len(resolving) > 0 {
		inFlight := w.submissionsInFlight(resolving)
		for tag := range resolving {
			if !inFlight[tag] { // else an earlier watcher's sbatch may be about to submit it
				tags = append(tags, tag)
			}
		}
		slices.Sort(tags)
	}
	if len(ids)+len(tags) == 0 {
		w.pollSoon(w.settings.Slurm.Poll)
		return
	}
	slices.Sort(ids)
	js.polling = true
	go func() {
		got, err := js.engine.Jobs(context.Background(), known, tags)
		w.do <- func() {
			js.polling = false
			w.polled(ids, tags, got, err)
			w.pollSoon(w.settings.Slurm.Poll)
		}
	}()
}

// polled takes the engine's answer about the jobs with ids and tags.
func (w *watcher) polled(ids, tags []string, got []cluster.Job, err error) {
	js := &w.jobs
	if err != nil {
		if msg := err.Error(); msg != js.logged {
			w.log.Printf("%s: asking about %d jobs: %v (asking again every %v)", js.engine.Name(), len(ids)+len(tags), err, w.settings.Slurm.Poll)
			js.logged = msg
		}
		return
	}
	js.logged = ""
	byID := make(map[string]cluster.Job, len(got))
	byTag := make(map[string][]cluster.Job)
	for _, cj := range got {
		byID[cj.ID] = cj
		byTag[cj.Tag] = append(byTag[cj.Tag], cj)
	}
	live := make(map[string]*job, len(js.byID))
	for _, j := range js.byID {
		if !j.submitting && !j.resolving {
			live[j.st.Job.ID] = j
		}
	}
	w.batched(func() {
		for _, id := range ids {
			j := live[id]
			if j == nil || js.byID[j.st.ID] != j {
				continue // ended meanwhile
			}
			if cj, ok := byID[id]; ok && cj.Tag == j.st.Job.Tag {
				j.missing = 0
				w.jobSeen(j, cj)
			} else {
				w.jobMissing(j) // gone, or its ID is another job's now
			}
		}
		for _, tag := range tags {
			for _, j := range js.byID {
				if j.resolving && j.st.Job.Tag == tag {
					w.resolved(j, byTag[tag])
				}
			}
		}
	})
}

// resolved takes what the engine knows of the jobs named by j's tag: j's
// job was submitted by a watcher that died before it recorded its ID.
// One of its owner's is adopted. With none, the job was never submitted
// and is now; unless the run's directory shows it ran (the engine has
// forgotten it since), when what its exit file says is recorded.
func (w *watcher) resolved(j *job, found []cluster.Job) {
	st := j.st
	found = slices.DeleteFunc(slices.Clone(found), func(cj cluster.Job) bool { return cj.UID != st.OwnerUID })
	if len(found) == 0 {
		// The exit file of this attempt's job (launchJob removed any
		// earlier one), whose ID is not known: the engine has forgotten it.
		x, err := cluster.ReadExit(w.store.Run(st.ID))
		if err == nil || w.hasStarted(st.ID) {
			w.log.Printf("recover: run %s: no job is named %s, but it ran: recording how it ended", st.ID, st.Job.Tag)
			j.resolving = false
			st.Job.ID = x.Job
			w.finishJob(j, nil, x.Exit, x.NotStarted)
			return
		}
		if waitedForRuns(st) && w.waitFailed(st) {
			w.endJob(j) // see startUnlessWaitFailed: what it waited for is recovered as ended otherwise
			return
		}
		w.log.Printf("recover: run %s: no job is named %s: it was never submitted; submitting it", st.ID, st.Job.Tag)
		b, _, err := w.readRequest(st.ID)
		req, perr := spool.ParseStart(b)
		w.endJob(j)
		if err != nil || perr != nil {
			w.notStarted(st, fmt.Errorf("its claimed request is unreadable: %w", errors.Join(err, perr)))
			return
		}
		st.Attempt-- // counted again, with the same tag
		w.launchJob(st, req.Env)
		return
	}
	slices.SortFunc(found, func(a, b cluster.Job) int { return compareJobIDs(a.ID, b.ID) })
	cj := found[0]
	if len(found) > 1 {
		w.log.Printf("recover: run %s: %d jobs are named %s: following the first, %s", st.ID, len(found), st.Job.Tag, cj.ID)
	}
	j.resolving = false
	st.Job.ID = cj.ID
	w.save(st)
	w.log.Printf("recover: run %s: adopted %s job %s, which was submitted before the watcher stopped", st.ID, w.jobs.engine.Name(), cj.ID)
	if st.Stop != nil {
		w.termJob(j)
	}
	w.jobSeen(j, cj)
}

// compareJobIDs orders job IDs as numbers where they are.
func compareJobIDs(a, b string) int {
	x, errx := strconv.ParseUint(a, 10, 64)
	y, erry := strconv.ParseUint(b, 10, 64)
	if errx == nil && erry == nil {
		return cmp.Compare(x, y)
	}
	return strings.Compare(a, b)
}

// jobSeen takes what the engine says of j's job now.
func (w *watcher) jobSeen(j *job, cj cluster.Job) {
	st := j.st
	before := *st.Job
	state, reason := st.State, st.Reason
	st.Job.State = cj.State
	switch cj.Phase {
	case cluster.Pending:
		st.Job.Reason = cj.Reason
		if st.State != tracker.Stopping {
			st.State = tracker.Queued
			st.Reason = fmt.Sprintf("%s job %s is pending: %s", w.jobs.engine.Name(), cj.ID, cj.Reason)
		}
	case cluster.Running:
		st.Job.Reason = ""
		if cj.Nodes != "" {
			st.Job.Nodes = cj.Nodes
		}
		if j.started.IsZero() {
			at := startedAt(cj)
			j.started = time.Now().Add(-max(0, time.Since(at))) // on this watcher's monotonic clock
			if st.StartedAt == nil {
				st.StartedAt = &at
			}
		}
		switch st.State {
		case tracker.Queued, tracker.Starting:
			st.State, st.Reason = tracker.Running, ""
		case tracker.Paused:
			w.resumed(j, "")
		}
		w.scheduleJobTimeout(j)
		if st.Stop != nil && !j.termSent {
			w.termJob(j)
		}
		w.checkVisible(j)
	case cluster.Suspended:
		if st.State != tracker.Paused && st.State != tracker.Stopping {
			now := time.Now()
			st.PausedAt = &now
			st.Reason = "suspended in " + w.jobs.engine.Name()
			st.State = tracker.Paused
			j.stopTimeout()
		}
	case cluster.Ended:
		w.jobEnded(j, cj)
		return
	}
	if st.State != state || st.Reason != reason || *st.Job != before {
		w.save(st)
	}
}

// hiddenAfter is how long a job may run without its started file showing
// here before its reason says that this host does not see the job's
// directory.
const hiddenAfter = 10 * time.Second

// checkVisible says in running job j's reason if this host does not see
// what the job writes in its run's directory: the root must be on a file
// system the cluster's nodes share.
func (w *watcher) checkVisible(j *job) {
	st := j.st
	seen := w.hasStarted(st.ID)
	switch {
	case seen && j.hidden:
		j.hidden = false
		if st.State == tracker.Running {
			st.Reason = ""
		}
	case !seen && !j.hidden && time.Since(j.started) >= hiddenAfter && st.State == tracker.Running:
		j.hidden = true
		st.Reason = w.notVisible(st, st.Job.Nodes)
	}
}

// notVisible says that this host does not see what run st's job writes.
func (w *watcher) notVisible(st *tracker.State, nodes string) string {
	where := "its node"
	if nodes != "" {
		where = nodes
	}
	return fmt.Sprintf("%s job %s runs on %s, but this host does not see its output: %s must be on a file system the nodes share (docs/protocol.md, \"Runs on a Slurm cluster\")",
		w.jobs.engine.Name(), st.Job.ID, where, w.store.RunDir(st.ID))
}

// jobMissing handles a poll that did not find j's job: the engine has
// forgotten it (it ended long ago: Slurm keeps an ended job for
// MinJobAge). Its exit file says how it ended; twice missing without one,
// it is lost.
func (w *watcher) jobMissing(j *job) {
	j.missing++
	if x, err := cluster.ReadExit(w.store.Run(j.st.ID)); err == nil && x.Job == j.st.Job.ID {
		w.finishJob(j, nil, x.Exit, x.NotStarted)
		return
	}
	if j.missing >= 2 {
		w.finishJob(j, nil, nil, "")
	}
}

// jobEnded handles the end of j's job, as the engine says it. A job that
// ran and ended by itself has written its exit file; one more poll is
// waited for it if it is not there yet (a shared file system's caches).
func (w *watcher) jobEnded(j *job, cj cluster.Job) {
	x, err := cluster.ReadExit(w.store.Run(j.st.ID))
	if err != nil && !errors.Is(err, cluster.ErrNoExitFile) {
		w.log.Printf("run %s: %v", j.st.ID, err)
	}
	if err == nil && x.Job != cj.ID {
		w.log.Printf("run %s: its exit file names job %s, not job %s: not taken", j.st.ID, x.Job, cj.ID)
		err, x = cluster.ErrNoExitFile, cluster.ExitStatus{}
	}
	if err != nil && j.endWaits == 0 && !cj.NotStarted && (cj.End == cluster.Completed || cj.End == cluster.Failed) && w.hasStarted(j.st.ID) {
		j.endWaits++
		return
	}
	w.finishJob(j, &cj, x.Exit, x.NotStarted)
}

// endJob takes j out of the live jobs.
func (w *watcher) endJob(j *job) {
	for _, t := range j.timers {
		t.Stop()
	}
	if j.run.progressSave != nil {
		j.run.progressSave.Stop() // its end's save records its progress
	}
	delete(w.jobs.byID, j.st.ID)
	w.unwatchRunDir(j.st.ID)
}

// finishJob records how j's run ended: cj is the engine's view of its
// job (nil if it knows it no longer), e and notStarted what the job's exit
// file says (nil and "" if it left none). As for a local run, a run
// stopped by a cancel ends canceled and one stopped by its timeout
// timed_out, whatever its exit status; a restart policy submits it again.
func (w *watcher) finishJob(j *job, cj *cluster.Job, e *cluster.Exit, notStarted string) {
	st := j.st
	id, engine := st.ID, w.jobs.engine.Name()
	w.endJob(j)
	w.capOutput(j.run)
	if cj != nil {
		st.Job.State, st.Job.Reason = cj.State, cj.Reason
		if cj.Nodes != "" {
			st.Job.Nodes = cj.Nodes
		}
		if e == nil && notStarted == "" {
			e = cj.Exit
		}
	}
	ran := notStarted == "" && (cj == nil || !cj.NotStarted) && (e != nil || w.hasStarted(id))
	w.jobTimes(j, cj, ran)
	exit := procfs.Exit{Code: -1}
	how := "it left no exit status"
	switch {
	case e == nil:
	case e.Signal != 0:
		exit = procfs.Exit{Signal: e.Signal}
		st.Signal = unix.SignalName(e.Signal)
		how = describeExit(exit, false)
	default:
		exit = procfs.Exit{Code: e.Code}
		code := e.Code
		st.ExitCode = &code
		how = describeExit(exit, false)
		if code > 128 && code <= 128+64 && unix.SignalName(syscall.Signal(code-128)) != "" {
			how += " (as a shell reports a command killed by " + unix.SignalName(syscall.Signal(code-128)) + ")"
		}
	}
	if !ran {
		how = "it never ran"
	}
	if ran && wantsRestart(st, exit, e == nil) && w.stopping == 0 {
		w.restartAfter(st, how)
		return
	}
	slurm := func() string {
		if cj == nil {
			return ""
		}
		s := fmt.Sprintf("%s job %s %s", engine, cj.ID, cj.State)
		if cj.Reason != "" && cj.Reason != "None" {
			s += " (" + cj.Reason + ")"
		}
		return s
	}
	hidden := ""
	if cj != nil && cj.Nodes != "" && !w.hasStarted(id) && e == nil && notStarted == "" {
		hidden = "; " + w.notVisible(st, cj.Nodes)
	}
	switch {
	case st.Stop != nil && st.Stop.Cause == tracker.CauseCanceled:
		st.State, st.Reason = tracker.Canceled, st.Reason+"; "+how
	case st.Stop != nil && st.Stop.Cause == tracker.CauseTimedOut:
		st.State, st.Reason = tracker.TimedOut, st.Reason+"; "+how
	case notStarted != "":
		st.State, st.Reason = tracker.Failed, "could not start: "+notStarted
	case cj != nil && cj.End == cluster.Canceled:
		st.State, st.Reason = tracker.Canceled, slurm()+": canceled outside tend (scancel, or an operator); "+how
	case cj != nil && cj.NotStarted:
		st.State, st.Reason = tracker.Failed, "could not start: "+slurm()+hidden
	case cj != nil && cj.End == cluster.TimedOut:
		st.State, st.Reason = tracker.TimedOut, slurm()+": its time limit was reached; "+how
	case e != nil && e.Signal == 0 && e.Code == 0 && (cj == nil || cj.End == cluster.Completed):
		st.State, st.Reason = tracker.Completed, ""
	case cj == nil && e == nil:
		st.State = tracker.Failed
		st.Reason = fmt.Sprintf("lost: %s no longer knows job %s, and it left no exit status in %s", engine, st.Job.ID, w.store.Run(id).Exit())
	case cj == nil:
		st.State, st.Reason = tracker.Failed, how
	case cj.End == cluster.Failed && cj.Reason == "NonZeroExitCode" && e != nil:
		st.State, st.Reason = tracker.Failed, how
	default:
		st.State, st.Reason = tracker.Failed, how+"; "+slurm()+hidden
	}
	w.save(st)
	w.log.Printf("run %s: %s (%s job %s: %s)", id, st.State, engine, st.Job.ID, how)
	w.answerStop(st, string(st.State))
	w.startSoon()
}

// startedAt is when job cj started, as its engine says, or now.
func startedAt(cj cluster.Job) time.Time {
	if !cj.StartedAt.IsZero() && cj.StartedAt.Before(time.Now()) {
		return cj.StartedAt
	}
	return time.Now()
}

// jobTimes records when j's job started (if it ran and no poll saw it
// running, its record passes through running), ended and how long it ran:
// from the engine's times where it has them (Slurm's are whole seconds),
// else as the watcher saw them.
func (w *watcher) jobTimes(j *job, cj *cluster.Job, ran bool) {
	st := j.st
	now := time.Now()
	if ran && st.StartedAt == nil {
		at := now
		if cj != nil {
			at = startedAt(*cj)
		}
		st.StartedAt = &at
		if st.State == tracker.Queued || st.State == tracker.Starting {
			st.State, st.Reason = tracker.Running, ""
			w.passing(st)
		}
	}
	end := now
	if cj != nil && !cj.EndedAt.IsZero() && cj.EndedAt.Before(now) {
		end = cj.EndedAt
	}
	st.EndedAt = &end
	switch {
	case cj != nil && !cj.StartedAt.IsZero() && !cj.EndedAt.IsZero():
		st.DurationSeconds = max(0, cj.EndedAt.Sub(cj.StartedAt).Seconds())
	case !j.started.IsZero():
		st.DurationSeconds = max(0, now.Sub(j.started).Seconds())
	}
}

// scheduleJobTimeout arms j's timeout once its job runs: from when it was
// seen running, not counting the time it spent paused.
func (w *watcher) scheduleJobTimeout(j *job) {
	st := j.st
	if st.Timeout == 0 || st.Stop != nil || j.started.IsZero() || st.PausedAt != nil || j.timeout != nil {
		return
	}
	left := time.Until(j.started.Add(st.Timeout.D() + st.PausedFor.D()))
	j.timeout = w.after(max(left, 0), func() {
		if w.jobs.byID[st.ID] == j && st.Stop == nil && st.PausedAt == nil {
			w.log.Printf("run %s: timed out after %s", st.ID, st.Timeout.D())
			w.stopJob(j, tracker.CauseTimedOut, "timed out after "+st.Timeout.D().String(), j.grace(), "")
		}
	})
	j.timers = append(j.timers, j.timeout)
}

// stopTimeout disarms j's timeout (it is paused).
func (j *job) stopTimeout() {
	if j.timeout != nil {
		j.timeout.Stop()
		j.timeout = nil
	}
}

// stopJob stops j's job as stop stops a local run: its record says
// stopping, then its processes get SIGTERM (a pending job is canceled),
// and once grace is over SIGKILL and a cancel. It ends in state cause
// once the engine says it ended; request, the cancel request that asked,
// is answered then.
func (w *watcher) stopJob(j *job, cause tracker.StopCause, reason string, grace time.Duration, request string) {
	st := j.st
	now := time.Now()
	killAt := now.Add(grace)
	if st.Stop != nil {
		changed := request != "" && !slices.Contains(st.Stop.Requests, request)
		if changed {
			st.Stop.Requests = append(st.Stop.Requests, request)
		}
		if cause == tracker.CauseCanceled && st.Stop.Cause == tracker.CauseRestart {
			st.Stop.Cause, st.Reason, changed = tracker.CauseCanceled, reason, true
		}
		if killAt.Before(st.Stop.KillAt) {
			st.Stop.KillAt, j.killAt, changed = killAt, killAt, true
			j.timers = append(j.timers, w.after(grace, func() { w.killJob(j) }))
		}
		if changed {
			w.save(st)
		}
		return
	}
	st.State = tracker.Stopping
	st.Stop = &tracker.Stop{Cause: cause, RequestedAt: now, KillAt: killAt}
	if request != "" {
		st.Stop.Requests = []string{request}
	}
	st.Reason = reason
	j.killAt = killAt
	j.stopTimeout()
	w.save(st)
	j.timers = append(j.timers, w.after(grace, func() { w.killJob(j) }))
	w.follow(effectSignal, "", func() { w.termJob(j) })
}

// termJob sends SIGTERM to j's job's processes, or cancels it if it has
// not started; a job still being submitted, or looked for, is stopped
// once it is known.
func (w *watcher) termJob(j *job) {
	if w.jobs.byID[j.st.ID] != j || j.submitting || j.resolving {
		return
	}
	j.termSent = true
	id, cred, ran := j.st.Job.ID, j.cred, j.st.StartedAt != nil
	w.jobCommand(j, func(ctx context.Context, e cluster.Engine) error {
		if ran {
			return e.Signal(ctx, id, cred, syscall.SIGTERM)
		}
		return e.Cancel(ctx, id, cred)
	}, "stopping")
}

// killJob ends j's job at once when its grace is over: SIGKILL to its
// processes, and a cancel.
func (w *watcher) killJob(j *job) {
	if w.jobs.byID[j.st.ID] != j || time.Now().Before(j.killAt) || j.submitting || j.resolving {
		return
	}
	w.log.Printf("run %s: grace over: killing %s job %s", j.st.ID, w.jobs.engine.Name(), j.st.Job.ID)
	id, cred := j.st.Job.ID, j.cred
	w.jobCommand(j, func(ctx context.Context, e cluster.Engine) error {
		err := e.Signal(ctx, id, cred, syscall.SIGKILL)
		return errors.Join(err, e.Cancel(ctx, id, cred))
	}, "killing")
}

// jobCommand runs f off the loop, logs what it failed to do, and polls
// soon after: the job's end is seen then.
func (w *watcher) jobCommand(j *job, f func(context.Context, cluster.Engine) error, what string) {
	id := j.st.ID
	job := j.st.Job.ID
	go func() {
		w.jobs.slots <- struct{}{}
		err := f(context.Background(), w.jobs.engine)
		<-w.jobs.slots
		w.do <- func() {
			if err != nil {
				w.log.Printf("run %s: %s job %s: %v", id, what, job, err)
			}
			w.pollSoon(jobPollAfter)
		}
	}()
}

// jobPollAfter is how soon the engine is asked again after tend acted on a
// job: a cancel of a pending job ends it at once.
const jobPollAfter = 250 * time.Millisecond

// cancelJob answers cancel request n of j's run, as takeCancel does a
// local run's.
func (w *watcher) cancelJob(j *job, n spool.Name, req spool.Cancel) {
	grace := j.grace()
	if req.Grace != nil {
		grace = req.Grace.D()
	}
	w.stopJob(j, tracker.CauseCanceled, "canceled", grace, n.Key())
	w.log.Printf("%s: canceling %s job %s (grace %s)", n, w.jobs.engine.Name(), j.st.Job.ID, grace)
}

// restartJob stops j's job to submit it again, as takeRestart does a
// local run.
func (w *watcher) restartJob(j *job, n spool.Name, req spool.Cancel) {
	st := j.st
	if st.Restart == nil {
		st.Restart = &spool.Restart{Policy: spool.RestartNever, Limit: 0, Window: spool.DefaultRestart.Window}
	}
	if st.Stop != nil && st.Stop.Cause != tracker.CauseRestart {
		w.answer(n, spool.NotRunning, "it is being stopped ("+string(st.Stop.Cause)+")")
		return
	}
	grace := j.grace()
	if req.Grace != nil {
		grace = req.Grace.D()
	}
	w.stopJob(j, tracker.CauseRestart, "restart requested", grace, n.Key())
}

// jobRunning answers n not_running, and reports false, unless j's job
// runs (or is paused).
func (w *watcher) jobRunning(j *job, n spool.Name) bool {
	st := j.st
	if j.submitting || j.resolving || st.StartedAt == nil || st.Stop != nil && st.Stop.Cause != tracker.CauseRestart {
		detail := string(st.State)
		if st.State == tracker.Queued {
			detail += ": its " + w.jobs.engine.Name() + " job has not started"
		}
		w.answer(n, spool.NotRunning, detail)
		return false
	}
	return true
}

// jobTarget is target for a request that acts on a live job: it also
// answers the request itself (and returns ok false) when the run's job
// is not running.
func (w *watcher) jobTarget(n spool.Name, f spool.File, session string, ifRev *int64) (st *tracker.State, j *job, done func(), ok bool) {
	st, done, ok = w.target(n, f, session, ifRev)
	if !ok {
		return nil, nil, nil, false
	}
	j = w.jobs.byID[st.ID]
	if j == nil || !w.jobRunning(j, n) {
		done()
		return nil, nil, nil, false
	}
	return st, j, done, true
}

// takeJobSignal answers signal request n of a run on a cluster: the
// signal goes to every process of its job.
func (w *watcher) takeJobSignal(n spool.Name, f spool.File, req spool.Signal) {
	st, j, done, ok := w.jobTarget(n, f, req.Session, req.IfRev)
	if !ok {
		return
	}
	id, cred := st.Job.ID, j.cred
	w.jobAnswer(func(ctx context.Context, e cluster.Engine) error {
		return e.Signal(ctx, id, cred, req.Signal)
	}, func(err error) {
		defer done()
		if err != nil {
			w.answer(n, spool.Rejected, fmt.Sprintf("%s did not signal job %s: %v", w.jobs.engine.Name(), id, err))
			return
		}
		w.answer(n, spool.Signaled, unix.SignalName(req.Signal))
	})
}

// takeJobSuspend answers pause request n of a run on a cluster (resume
// request, with resume): its job is suspended or resumed in the engine,
// as its user, which many clusters allow only their operators; a refusal
// is answered not_permitted, with what the engine said.
func (w *watcher) takeJobSuspend(n spool.Name, f spool.File, req spool.Cancel, resume bool) {
	st, j, done, ok := w.jobTarget(n, f, req.Session, req.IfRev)
	if !ok {
		return
	}
	switch {
	case !resume && st.State == tracker.Paused:
		w.answer(n, spool.Paused, "already paused")
		done()
		return
	case resume && st.State != tracker.Paused:
		w.answer(n, spool.Resumed, fmt.Sprintf("it was not paused (%s)", st.State))
		done()
		return
	}
	id, cred := st.Job.ID, j.cred
	w.jobAnswer(func(ctx context.Context, e cluster.Engine) error {
		return e.Suspend(ctx, id, cred, resume)
	}, func(err error) {
		defer done()
		if w.jobs.byID[st.ID] != j {
			w.answer(n, spool.NotRunning, string(st.State))
			return
		}
		verb := map[bool]string{false: "suspend", true: "resume"}[resume]
		if err != nil {
			outcome := spool.Rejected
			if strings.Contains(strings.ToLower(err.Error()), "permission") || strings.Contains(err.Error(), "not authorized") {
				outcome = spool.NotPermitted
			}
			w.answer(n, outcome, fmt.Sprintf("%s did not %s job %s: %v", w.jobs.engine.Name(), verb, id, err))
			return
		}
		if resume {
			w.resumed(j, "")
			w.save(st)
			w.answer(n, spool.Resumed, "")
			return
		}
		now := time.Now()
		st.PausedAt = &now
		st.Reason = "paused from " + string(st.State)
		st.State = tracker.Paused
		j.stopTimeout()
		w.save(st)
		w.answer(n, spool.Paused, "")
	})
}

// resumed records paused run j running again.
func (w *watcher) resumed(j *job, reason string) {
	st := j.st
	if st.PausedAt != nil {
		st.PausedFor += spool.Duration(max(0, time.Since(*st.PausedAt)))
	}
	st.PausedAt = nil
	st.State, st.Reason = tracker.Running, reason
	w.scheduleJobTimeout(j)
}

// jobAnswer runs f off the loop, then answer on it with f's error.
func (w *watcher) jobAnswer(f func(context.Context, cluster.Engine) error, answer func(error)) {
	go func() {
		w.jobs.slots <- struct{}{}
		err := f(context.Background(), w.jobs.engine)
		<-w.jobs.slots
		w.do <- func() { answer(err) }
	}()
}

// stopJobs stops every job, as the watcher's shutdown stops every run;
// kill (a second signal) ends them at once.
func (w *watcher) stopJobs(kill bool) {
	for _, j := range w.jobs.byID {
		if kill {
			j.killAt = time.Now()
			w.killJob(j)
			continue
		}
		w.stopJob(j, tracker.CauseCanceled, "the watcher was stopped", j.grace(), "")
	}
}

// recoverJob takes over run st, which an earlier watcher submitted to a
// cluster (or was about to): it is followed as before, and one whose job's
// ID was never recorded is looked for by its tag first (see resolved).
func (w *watcher) recoverJob(st *tracker.State) {
	n := spool.Name{ID: st.ID, Verb: spool.VerbStart, Owner: st.OwnerUID}
	if fi, err := os.Stat(w.spool.OutcomePath(n)); errors.Is(err, os.ErrNotExist) || err == nil && fi.Size() == 0 {
		w.outcome(n, spool.Accepted, "")
	}
	if st.Job.Tag == "" {
		w.rebuiltJob(st)
	}
	j := &job{run: &run{st: st}, resolving: st.Job.ID == ""}
	if a, err := lookupAccount(st.OwnerUID); err == nil && tracker.RunPerm(st.OwnerUID).Owner > 0 {
		j.cred = &syscall.Credential{Uid: uint32(a.uid), Gid: uint32(a.gid), Groups: a.groups}
	}
	if st.StartedAt != nil {
		j.started = time.Now().Add(-max(0, time.Since(*st.StartedAt)))
	}
	w.jobs.byID[st.ID] = j
	w.watchRunDir(j.run)
	if j.resolving {
		w.log.Printf("recover: run %s: its job was being submitted when the watcher stopped: looking for %s", st.ID, st.Job.Tag)
	} else {
		w.log.Printf("recover: run %s: following %s job %s", st.ID, w.jobs.engine.Name(), st.Job.ID)
	}
	if st.Stop != nil {
		// The earlier watcher may have died between recording the stop
		// and sending it: sent (again), and killed at most its grace from
		// now.
		j.killAt = time.Now().Add(min(time.Until(st.Stop.KillAt), st.Grace.D()))
		j.timers = append(j.timers, w.after(time.Until(j.killAt), func() { w.killJob(j) }))
		w.termJob(j)
	}
	w.pollSoon(0)
}

// rebuiltJob gives run st, whose record was rebuilt from the history
// (tracker.Rebuild), what the history does not hold of its job: the tag
// its attempt's job was submitted with, made again, and its Slurm
// settings with config.json's defaults, as its request is taken (the
// rebuilt record has the request's own alone, and a later attempt is
// submitted with them).
func (w *watcher) rebuiltJob(st *tracker.State) {
	st.Job.Tag = cluster.Tag(strings.TrimPrefix(w.mark, "TEND_MARK_"), st.ID, st.Attempt)
	b, _, err := w.readRequest(st.ID)
	req, perr := spool.ParseStart(b)
	if err != nil || perr != nil {
		return
	}
	if slurm := w.slurmFor(req); slurm != nil {
		st.Slurm = slurm
	}
}

// submissionsInFlight returns the tags of resolving (a job's tag -> the
// user its sbatch runs as) whose sbatch, started by an earlier watcher,
// still runs: the job it submits may not be known to squeue yet, so it is
// not looked for by its tag until that sbatch is gone. Its process group
// is no run's stray meanwhile. Only a process of the job's own user (its
// real and effective user both: a set-user-ID program such as sudo, run
// as "sbatch", is another's), named sbatch and submitting exactly that
// tag, counts: in a shared root
// a member may start a process that calls itself sbatch and names another
// member's tag (tags are in records), which held up the look-up of every
// job of the root for as long as it ran; now it can hold up only their
// own. If /proc cannot be read, every tag is taken to be in flight.
func (w *watcher) submissionsInFlight(resolving map[string]uint32) map[string]bool {
	inFlight := make(map[string]bool)
	all, err := procfs.All()
	if err != nil {
		for tag := range resolving {
			inFlight[tag] = true
		}
		return inFlight
	}
	orphans := make(map[int]bool)
	for _, p := range all {
		if p.Comm != "sbatch" || p.State == 'Z' {
			continue
		}
		proc, err := procfs.ReadProcess(p.PID)
		if err != nil || proc.State == 'Z' {
			continue
		}
		for _, arg := range proc.Args {
			tag, ok := strings.CutPrefix(arg, "--job-name=")
			if uid, want := resolving[tag]; ok && want && proc.UID == uid && proc.RealUID == uid {
				inFlight[tag] = true
				orphans[proc.PGID] = true
			}
		}
	}
	w.jobs.mu.Lock()
	w.jobs.orphans = orphans
	w.jobs.mu.Unlock()
	if len(inFlight) > 0 {
		w.log.Printf("recover: %d submissions of an earlier watcher are still under way: waiting for them before looking for their jobs", len(inFlight))
	}
	return inFlight
}

// submitter returns the user j's engine commands run as (see cred).
func (j *job) submitter() uint32 {
	if j.cred != nil {
		return j.cred.Uid
	}
	return uint32(os.Geteuid())
}
