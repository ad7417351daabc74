package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
	"github.com/tendhq/tend/tracker/crashfs"
	"github.com/tendhq/tend/tracker/durable"
	"github.com/tendhq/tend/tracker/layout"
	"golang.org/x/sys/unix"
)

// powerloss CUTS: the power-loss trial of #20. The root lives on a crashfs
// mount, which forgets at a cut what tend did not make durable. Clients
// submit in all three forms, cancel, signal, label, note, delete and
// restart services, while runs write and end; the power is cut at a
// random moment, or (every other cut) right before or after one of the
// flushes a short scripted sequence makes, or (one cut in eight) on a
// slow disk once a run that waited for another has written its gate
// line. Then a watcher starts on what
// the disk kept, recovers, and the trial checks, for everything a client
// saw acknowledged before the cut:
//
//  1. an accepted request still has its run (and no rejection in its place);
//  2. no run's command ran twice (each appends a line to ran.log, on a
//     real file system outside the mount), and no request was carried out
//     twice (a signal, a note);
//  3. every end a client saw (state and exit code) is still there, and
//     every label, note, restart and delete answered;
//  4. records and the history parse, and the history has every change a
//     client saw acknowledged;
//  5. tend fsck is clean, or --repair makes it clean (and 1-4 hold after);
//  6. no run that never passed its gate is reported as started (a run
//     recorded running as the power went, whose gate's line did not
//     survive, may be reported lost with "whether it ran is unknown"), and
//     none that ran is reported as never started; none that ran is missing;
//  7. a run that waited for another's end and ran before the cut (or
//     passed its gate, as far as the disk knows) ran only once that end
//     was on disk: the end is still there, a real one (not "lost"), in
//     the record or, once deleted, in the history;
//  8. an accepted run keeps the request it was started with, whole: what
//     it is started from again if it never passed its gate, and what a
//     service is restarted from (failed in a mutant's trial; elsewhere
//     counted in the last line, until a rare case is explained: see
//     verifyRun).
//
// It ends with "powerloss: N cuts, M checks, V violations" and fails if V
// is not 0. TEND_POWERLOSS_CUTS overrides CUTS (make powerloss),
// TEND_POWERLOSS_SEED replays a trial, TEND_POWERLOSS_REPORT names a file
// the last line is written to.
func cmdPowerLoss(ts *testscript.TestScript, neg bool, args []string) {
	cuts, err := strconv.Atoi(args[0])
	ts.Check(err)
	if n, err := strconv.Atoi(os.Getenv("TEND_POWERLOSS_CUTS")); err == nil {
		cuts = n
	}
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("TEND_POWERLOSS_SEED"), 10, 64); err == nil {
		seed = s
	}
	t := newTrial(ts, ts.MkAbs("."), seed, "")
	defer t.close()
	t.progress("powerloss: %d cuts, TEND_POWERLOSS_SEED=%d", cuts, seed)
	t.cuts(cuts)
	line := fmt.Sprintf("powerloss: %d cuts, %d checks, %d violations (%d torn first records recovered, %d ends and stops brought back from the history)", t.cutNo, t.checks, t.violations, t.torn, t.ends)
	report(line)
	t.progress("%s", line)
	if t.violations > 0 {
		ts.Fatalf("%s (TEND_POWERLOSS_SEED=%d)", line, seed)
	}
}

// report writes the last line of a trial to $TEND_POWERLOSS_REPORT, if
// set, for make to show last.
func report(line string) {
	if path := os.Getenv("TEND_POWERLOSS_REPORT"); path != "" {
		os.WriteFile(path, []byte(line+"\n"), 0o644)
	}
}

// freshEvery is how many cuts a root takes before the trial starts
// another: a root's runs pile up, and each cut checks them all.
const freshEvery = 20

// cuts cuts the power n times, each followed by a recovery and the
// checks; every other cut is at one of the scripted sequence's flushes
// (one in eight of all at a gate, gateCut, and one in sixteen at a first
// record's, tornCut), two of every four use the reordered model, and two
// of every three have their watchers rename first records in before their
// flush and leave ends unflushed (TEND_TEST_RENAME_NEW). A mutant's trial
// (a flush left out) makes every third cut at the place of that flush
// instead (see crashfs.CutAfterMark), those in each way by turns, and
// starts a root every five cuts.
// It stops early if a watcher cannot start on what a cut left, or, for a
// mutant, at the first violation.
func (t *trial) cuts(n int) {
	// Measured on a root of its own: each root's first cut comes while
	// its first watcher has just made its key and its history.
	t.scriptFlushes = t.measureScript()
	every := freshEvery
	if t.mutant != "" {
		every = 5
	}
	for i := 0; i < n; i++ {
		if t.mutant != "" && t.violations > 0 {
			return
		}
		if i%every == 0 {
			t.fresh()
		}
		t.cutNo = i + 1
		t.renameNew = i%3 != 2 || i%16 == 13 // (tornCut's)
		switch {
		case t.mutant == string(durable.FlushSeen):
			// tend wait's flush keeps an end it read, renamed in and not
			// yet flushed by the watcher; where ends are not flushed at
			// all, their synced history lines keep them, and it has
			// nothing left to do for one. Where they are, their history
			// lines are synced beside them, and keep them too once that
			// flush is done: the trial's disk has it outlast the
			// record's (see mount).
			t.renameNew = false
		case t.mutant != "":
			// The cuts at the mark (markHere) take each path in turn.
			t.renameNew = i/3%2 == 1
		}
		model := crashfs.Strict
		if i%4 >= 2 {
			model = crashfs.Reordered
		}
		t0 := time.Now()
		if t.fs == nil {
			t.mount()
		}
		// As the file system the watcher takes it for keeps a replace.
		t.fs.SetReplacesKeepData(t.renameNew)
		if t.mutant != "" && t.mark == nil && t.markHere(i) {
			t.mark = t.fs.CutAfterMark(t.afterMark())
		}
		t.cutsOnRoot++
		if !t.up() {
			return
		}
		t1 := time.Now()
		switch {
		case t.mark != nil:
			t.markCut(t.mark)
		case t.mutant != "" && t.cutsOnRoot == 1:
			// A root's first watcher makes its directories, its key, its
			// history: a strict cut once clients have seen some answers.
			t.randomCut(crashfs.Strict)
		case t.mutant != "" && i%3 == 2:
			// Once every answer of the scripted sequence is in.
			t.script(t.fs.Frozen)
			t.fs.Freeze()
			t.powerCut(crashfs.Strict, "at the end of the scripted sequence")
		case t.mutant == "" && i%8 == 1: // strict: what was not synced is lost
			t.gateCut(model)
		case t.mutant == "" && i%16 == 13:
			t.tornCut()
		case t.mutant == "" && i%16 == 5:
			t.claimCut(1)
		case t.mutant == "" && i%16 == 3:
			t.claimCut(3)
		case i%2 == 1 && t.scriptFlushes > 0:
			point := (i/2 + int(t.seed%1000)) % (2 * t.scriptFlushes)
			t.scriptedCut(point/2+1, point%2 == 1, model)
		default:
			t.randomCut(model)
		}
		t2 := time.Now()
		if !t.recover() {
			return
		}
		t.progress("cut %d took: up %v, clients and cut %v, recovery and checks %v", t.cutNo, t1.Sub(t0), t2.Sub(t1), time.Since(t2))
	}
}

// markHere reports whether a mutant's cut i is at its flush's place: one
// in three, and the first of a root made as an earlier tend left it
// (where the first watcher makes the key and seals a record with it);
// the first of the others is at a random moment, where the first watcher
// makes the root's directories.
func (t *trial) markHere(i int) bool {
	if t.cutsOnRoot == 0 {
		return t.roots%4 == 2
	}
	return i%3 == 1
}

// afterMark returns at which flush after a mark a mutant's cut comes (see
// crashfs.CutAfterMark): at the mark itself in two cuts of five. The seen
// flush's always: it is a reader's, and the window it closes, from the
// read to the end of the watcher's flushes of what was read, is open at
// the read; the next flush anyone starts comes once they are done.
func (t *trial) afterMark() int {
	k := []int{0, 0, 1, 2, 3}[t.rng.IntN(5)]
	if t.mutant == string(durable.FlushSeen) {
		return 0
	}
	return k
}

// markCut runs the scripted sequence, then clients at random, until the
// cut at the flush after a mark (mark is closed then), and cuts the power
// keeping only what came after the mark; or, if no mark came, at the end,
// strictly.
func (t *trial) markCut(mark <-chan struct{}) {
	t.script(t.fs.Frozen)
	for end := time.Now().Add(time.Second); time.Now().Before(end) && !t.fs.Frozen(); {
		t.act()
		time.Sleep(time.Duration(t.rng.IntN(30)) * time.Millisecond)
	}
	select {
	case <-mark:
		if t.mutant == string(durable.FlushSeen) {
			// The disk holds what it did at the read, and tend wait goes
			// on (reads do, after a cut) to report what it read: the
			// processes die once it has returned.
			t.clientsReturn(time.Second)
		}
		t.powerCut(crashfs.AfterMark, "at the first flush after the place of the one left out")
	default:
		t.fs.Freeze()
		t.powerCut(crashfs.Strict, "at the end: no flush was left out")
	}
}

// trial is one power-loss trial: a root on a crashfs mount, the runs
// submitted to it, and what clients saw of them.
type trial struct {
	ts                       *testscript.TestScript
	rng                      *rand.Rand
	seed                     uint64
	mutant                   string // the flush left out, in make powerloss-mutants
	roots                    int    // roots made so far
	work, backing, mnt, root string
	ranLog, tend             string
	group                    *crashfs.Group
	fs                       *crashfs.FS
	cutNo, next              int
	scriptFlushes            int
	checks, violations       int
	torn                     int  // first records recovery took for never written (tornCut), for the report
	ends                     int  // ends recovery took from the history, their records taken back or torn, for the report
	renameNew                bool // this cut's watchers rename first records in before their flush, and flush no end's record
	clients                  sync.WaitGroup
	mu                       sync.Mutex // guards runs and what client goroutines record
	starting                 sync.RWMutex
	cutting                  bool            // a cut is under way: no process is started (guarded by starting)
	shared                   bool            // tend up --shared root has returned
	ups                      int             // tend ups on this root
	slow                     bool            // the next short run takes a while
	careful                  bool            // the next request dropped as a file is synced
	waitFor                  string          // the next run submitted waits for this one's end
	waitCompleted            bool            // ... to complete, not to end
	failing                  bool            // the next short run exits 1
	waiters                  sync.Map        // IDs of the runs that wait for another (read by gateCut's matcher, inside crashfs)
	downRun                  *plRun          // a request dropped while no watcher ran
	sharedDaemon             bool            // tend up --shared daemon, while a watcher ran, has returned
	cutsOnRoot               int             // cuts made on this root
	mark                     <-chan struct{} // a cut at the flush after a mark, armed, in a mutant trial
	rejectedSeen             []string        // requests whose rejection was read
	runs                     map[string]*plRun
	order                    []string        // run IDs, in the order submitted
	gated                    map[string]bool // runs whose started file a cut kept
	boots                    int             // power cuts so far: the machine's restarts
	pendingFiles             []string        // start requests dropped as files, outcome not read yet
	cancelFiles              []string        // cancel requests dropped as files, outcome not read yet
	busy                     int             // clients running
	reported                 map[string]bool // violations reported
}

// plRun is a run of the trial, and what clients saw acknowledged of it.
type plRun struct {
	id, kind string // kind: short, long, service
	how      string // how it was submitted: rename, inplace, cli
	cut      int    // the cut it was submitted before
	code     int    // a short run's exit code
	accepted bool   // its start was answered accepted
	// boot and acceptedBoot are the power cuts made (t.boots) when it
	// was submitted and when its acceptance was read: more by then if the
	// watcher that recovered from a cut answered it.
	boot, acceptedBoot int
	end                *tracker.State
	canceled           bool // a cancel was answered canceled
	// labels holds, per key, the values requested (each is used once);
	// labelSeen the keys of which a request was answered updated.
	labels      map[string][]string
	labelSeen   map[string]bool
	notesSent   map[string]bool // note texts requested
	notesSeen   map[string]bool // note texts answered updated
	revsSeen    []int64         // revisions answered (label, note)
	signalsSent int
	deleteSent  bool
	deleted     bool
	restartSeen int // the attempt a restart was answered with
	// sent and answered count the control requests the CLI made for it,
	// by verb, and those it was answered for (see answering).
	sent, answered map[string]int
	// after is the run it waited to end ("" for none); ranBeforeCut is
	// set if its command had run when the power was cut.
	after        string
	ranBeforeCut bool
	// lostAt is the cut after which it was first found lost (its process
	// ended with the power): a run that waited for it may run after that.
	lostAt int
}

func newTrial(ts *testscript.TestScript, dir string, seed uint64, mutant string) *trial {
	t := &trial{
		ts: ts, seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), mutant: mutant,
		work: dir, mnt: filepath.Join(dir, "mnt"), ranLog: filepath.Join(dir, "ran.log"), reported: make(map[string]bool),
	}
	t.root = filepath.Join(t.mnt, ".tend")
	ts.Check(os.MkdirAll(t.mnt, 0o755))
	for _, dir := range filepath.SplitList(ts.Getenv("PATH")) {
		if p := filepath.Join(dir, "tend"); exists(p) {
			t.tend = p
			break
		}
	}
	if t.tend == "" {
		ts.Fatalf("no tend in $PATH")
	}
	name := "powerloss"
	if mutant != "" {
		name = "mutant-" + mutant
	}
	g, err := crashfs.NewGroup(name)
	ts.Check(err)
	t.group = g
	t.fresh()
	return t
}

// fresh starts the trial over on a new root: what the next cuts check is
// only what they do.
func (t *trial) fresh() {
	if t.fs != nil {
		t.ts.Check(t.fs.Unmount())
		t.fs = nil
	}
	t.roots++
	t.backing = filepath.Join(t.work, fmt.Sprintf("backing%d", t.roots))
	t.runs, t.order, t.gated = make(map[string]*plRun), nil, make(map[string]bool)
	t.pendingFiles, t.cancelFiles, t.rejectedSeen, t.shared, t.ups, t.cutsOnRoot, t.mark = nil, nil, nil, false, 0, 0, nil
	t.downRun = nil
	t.sharedDaemon = false
	// Every finished run is kept, for the checks.
	t.ts.Check(os.MkdirAll(filepath.Join(t.backing, ".tend"), 0o700))
	t.ts.Check(os.WriteFile(filepath.Join(t.backing, ".tend", "config.json"), []byte(`{"keep_finished": 0, "keep_finished_for": 0}`+"\n"), 0o644))
	switch t.roots % 4 {
	case 0:
		// A history and no runs/ (a tend before any run): the first
		// watcher makes runs/ after its key.
		t.ts.Check(os.WriteFile(filepath.Join(t.backing, ".tend", "history.jsonl"), nil, 0o644))
	case 2:
		t.earlierTend()
	}
}

// earlierTend makes the root as an earlier tend, which sealed nothing,
// left it: a finished run, its record unsealed, with a label, and its
// history. The first watcher makes the key and seals the record with it:
// that record must stay trusted, its label with it.
func (t *trial) earlierTend() {
	root := filepath.Join(t.backing, ".tend")
	id := fmt.Sprintf("old%d", t.roots)
	store := tracker.NewStore(root)
	t.ts.Check(os.MkdirAll(store.RunDir(id), 0o700))
	t.ts.Check(os.WriteFile(store.Run(id).Request(), []byte("true"), 0o600))
	t.ts.Check(os.WriteFile(store.Run(id).Started(), nil, 0o600))
	now := time.Now()
	code := 0
	st := &tracker.State{ID: id, State: tracker.Completed, Rev: 2, Command: []string{"/bin/sh", "-c", "true"}, Cwd: t.mnt,
		Labels: map[string]string{"a": "old"}, Grace: spool.Duration(10 * time.Second), CreatedAt: now, StartedAt: &now, EndedAt: &now, ExitCode: &code}
	t.ts.Check(store.Write(st))
	t.ts.Check(tracker.OpenHistory(root).Append(tracker.EventOf(st, now)))
	end := *st
	t.runs[id] = &plRun{id: id, kind: "short", accepted: true, end: &end, labels: map[string][]string{"a": {"old"}},
		labelSeen: map[string]bool{"a": true}, notesSent: map[string]bool{}, notesSeen: map[string]bool{}}
	t.order = append(t.order, id)
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

func (t *trial) close() {
	t.group.Close()
	if t.fs != nil {
		t.fs.Unmount()
	}
}

// violation reports something a power cut must not do, once: a record
// lost stays lost at the next checks.
func (t *trial) violation(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	msg := fmt.Sprintf(format, args...)
	if t.reported[msg] {
		return
	}
	t.reported[msg] = true
	t.violations++
	t.progress("VIOLATION (cut %d): %s", t.cutNo, msg)
}

// progress logs a line, also at once on stderr if
// $TEND_POWERLOSS_PROGRESS is set (make powerloss): a script's log shows
// only when it ends.
func (t *trial) progress(format string, args ...any) {
	if t.mutant != "" {
		format = t.mutant + ": " + format
	}
	if os.Getenv("TEND_POWERLOSS_PROGRESS") != "" {
		fmt.Fprintf(os.Stderr, format+"\n", args...)
		return
	}
	t.ts.Logf(format, args...)
}

// check counts one check, and reports a violation if ok is false.
func (t *trial) check(ok bool, format string, args ...any) {
	t.mu.Lock()
	t.checks++
	t.mu.Unlock()
	if !ok {
		t.violation(format, args...)
	}
}

// mount mounts the crashfs over the backing directory.
func (t *trial) mount() {
	f, err := crashfs.Mount(t.backing, t.mnt)
	t.ts.Check(err)
	// A disk's fsync takes its time: a reader may see what it has not
	// made durable yet. Without the seen flush, tend wait returns an end
	// whose record's name is still on its way to the disk, for as long as
	// the watcher's flush of it takes: a slow disk's, in that trial, so
	// that a cut soon after finds it not yet there.
	delay := time.Millisecond
	if t.mutant == string(durable.FlushSeen) {
		delay = 50 * time.Millisecond
		// The watcher syncs an end's history line beside its record,
		// and recovery writes the end again from that line if the cut
		// took the record's name back (recoverCovered). With flushes
		// that all take as long, the line, whose flush starts first, is
		// on disk before the record has its name, and the seen flush
		// has nothing left to keep. A disk completes them in its own
		// order: here the history's outlasts, as that of a long file
		// behind others may, the record's, its directory's, and the
		// flush of that directory by tend wait (which waits behind the
		// watcher's), so that an end read in between is on disk only
		// once tend wait has synced its directory.
		f.SetSlowFlushes(func(fl crashfs.Flush) bool {
			return !fl.Dir && filepath.Base(fl.Path) == "history.jsonl"
		}, 6*delay)
	}
	f.SetFlushDelay(delay)
	t.fs = f
}

// command returns a tend command for the trial's root, started in the
// trial's group (so a cut kills it).
func (t *trial) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, t.tend, args...)
	cmd.Dir = t.work
	cmd.Env = append(os.Environ(), "PATH="+t.ts.Getenv("PATH"), "TEND_ROOT="+t.root, "TEND_NO_START=1", "TEND_SESSION=",
		"TEND_MUTANT_NOFLUSH="+t.mutant,
		// Each cut restarts the machine: what a watcher wrote before it
		// is of an earlier boot.
		"TEND_TEST_BOOT_ID="+fmt.Sprintf("trial-boot-%d", t.boots),
		// A run's first record renamed in before its flush, as on ext4
		// (the mount is FUSE), in two cuts of three: a cut can then leave
		// it torn, and recovery must take it for one never written; in
		// the others it is synced, then renamed, as everywhere else.
		"TEND_TEST_RENAME_NEW="+map[bool]string{true: "1"}[t.renameNew])
	cmd.SysProcAttr = t.group.SysProcAttr()
	return cmd
}

// run runs tend with args and returns its stdout and exit code (-1 if a
// signal ended it).
func (t *trial) run(args ...string) (string, int) {
	out, _, code := t.run3(args...)
	return out, code
}

// run3 is run, with stderr.
func (t *trial) run3(args ...string) (string, string, int) {
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	cmd := t.command(ctx, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// Not while the power is being cut: a process cloned into the frozen
	// group would stop before its exec, and its parent, this process, in
	// vfork with it.
	t.starting.RLock()
	if t.cutting {
		t.starting.RUnlock()
		return "", "", -1
	}
	err := cmd.Start()
	t.starting.RUnlock()
	if err == nil {
		err = cmd.Wait()
	}
	code := -1
	if cmd.ProcessState != nil {
		code = cmd.ProcessState.ExitCode()
	}
	if err != nil && code == 0 {
		code = -1
	}
	if code < 0 && !t.fs.Frozen() {
		t.progress("tend %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), stderr.String(), code
}

// background runs tend with args in the background, and passes its stdout
// to done if it exits 0 (a client the cut killed saw nothing).
func (t *trial) background(done func(out string), args ...string) {
	t.backgroundCode(func(out string, code int) {
		if code == 0 && done != nil {
			done(out)
		}
	}, args...)
}

// backgroundCode is background, for a client whose exit code is an
// answer too (tend wait exits with the run's): done gets it unless a
// signal ended the client.
func (t *trial) backgroundCode(done func(out string, code int), args ...string) {
	t.mu.Lock()
	t.busy++
	t.mu.Unlock()
	t.clients.Go(func() {
		out, code := t.run(args...)
		t.mu.Lock()
		defer t.mu.Unlock()
		if code >= 0 {
			done(out, code)
		}
		t.busy--
	})
}

// up starts a watcher on the root, which recovers what the last cut left.
// The second of a root is tend up --shared root, which writes config.json
// (groups): once it has returned, that must be there after every cut. It reports false if no watcher
// could start: a root that cannot be recovered ends the trial.
func (t *trial) up() bool {
	if t.fs == nil {
		t.mount()
	}
	args := []string{"up"}
	if t.ups == 1 {
		// Once a root has its key: then only this syncs the root after
		// config.json, and the trial notices if it did not.
		args = append(args, "--shared", "root")
	}
	t.ups++
	out, errOut, code := t.run3(args...)
	if code != 0 && t.fs.Frozen() {
		return true // a cut at a mark, during the start: the cut comes next
	}
	if code != 0 {
		t.violation("a watcher cannot start on what the disk kept: tend %s: exit %d: %s%s\n%s", strings.Join(args, " "), code, out, errOut, t.tail("watcher.log"))
		return false
	}
	t.shared = t.shared || len(args) > 1
	return true
}

// tail returns the end of a file of the root, for a failure's message.
func (t *trial) tail(name string) string {
	b, _ := os.ReadFile(filepath.Join(t.root, name))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// logSize returns the size of the root's watcher.log, if any.
func (t *trial) logSize() int64 {
	fi, err := os.Stat(filepath.Join(t.root, "watcher.log"))
	if err != nil {
		return 0
	}
	return fi.Size()
}

// logCount counts the lines of the root's watcher.log after its first
// from bytes that hold phrase.
func (t *trial) logCount(from int64, phrase string) int {
	b, _ := os.ReadFile(filepath.Join(t.root, "watcher.log"))
	if from > int64(len(b)) {
		from = 0 // a new log
	}
	return strings.Count(string(b[from:]), phrase)
}

// newID returns the ID of a new run.
func (t *trial) newID() string {
	t.next++
	return fmt.Sprintf("p%d", t.next)
}

// body returns the shell text of a run of kind: each logs its ID and
// attempt to ran.log first; a short one writes and exits with code, a
// long one logs each SIGUSR1 and runs until stopped, a service the same
// (it is restarted).
func (t *trial) body(kind string, code int) string {
	pre := fmt.Sprintf(`echo "$TEND_RUN_ID $TEND_ATTEMPT" >> %s; echo out-$TEND_RUN_ID; `, t.ranLog)
	switch kind {
	case "short":
		if t.rng.IntN(3) == 0 {
			pre += fmt.Sprintf("sleep 0.%d; ", t.rng.IntN(3))
		}
		return pre + "exit " + strconv.Itoa(code)
	case "slow":
		return pre + "sleep 0.2; exit " + strconv.Itoa(code)
	}
	return pre + fmt.Sprintf(`trap 'echo "$TEND_RUN_ID usr1" >> %s' USR1; while :; do sleep 5 & wait $!; done`, t.ranLog)
}

// submit submits a new run of kind, in one of the three forms (how:
// "rename", "inplace" or "cli"; "" picks one).
func (t *trial) submit(kind, how string) *plRun {
	r := &plRun{id: t.newID(), kind: kind, labels: make(map[string][]string), labelSeen: make(map[string]bool), notesSent: make(map[string]bool), notesSeen: make(map[string]bool)}
	r.cut, r.boot = t.cutNo, t.boots
	r.after, t.waitFor = t.waitFor, ""
	cond := ":ended"
	if t.waitCompleted {
		cond, t.waitCompleted = "", false // completed, the default
	}
	if r.after != "" {
		t.waiters.Store(r.id, true)
	}
	if kind == "short" {
		r.code = []int{0, 0, 1, 3}[t.rng.IntN(4)]
		if t.failing {
			r.code, t.failing = 1, false
		}
	}
	if kind == "service" {
		how = "cli"
	}
	if how == "" {
		how = []string{"rename", "inplace", "cli"}[t.rng.IntN(3)]
	}
	r.how = how
	t.mu.Lock()
	t.runs[r.id] = r
	t.order = append(t.order, r.id)
	t.mu.Unlock()
	body := t.body(kind, r.code)
	if t.slow {
		body, t.slow = t.body("slow", r.code), false
	}
	request := body
	if r.after != "" {
		request = fmt.Sprintf(`{"command": %q, "after": [%q]}`, body, r.after+cond)
	}
	spoolDir := filepath.Join(t.root, "spool")
	switch how {
	case "rename":
		tmp := filepath.Join(spoolDir, "."+r.id+".tmp")
		// A careful client: its request is on disk once submitted, synced
		// before its rename (after, the watcher may have taken it), and
		// the spool after (a power loss may keep it in the spool after
		// the watcher claimed it).
		careful := t.careful || t.rng.IntN(2) == 0
		if writeRequest(tmp, request) != nil {
			break
		}
		if careful {
			syncFile(tmp)
		}
		if os.Rename(tmp, filepath.Join(spoolDir, r.id+".start")) == nil {
			t.pendingFiles = append(t.pendingFiles, r.id)
			if careful {
				syncFile(spoolDir)
			}
		}
	case "inplace":
		if writeRequest(filepath.Join(spoolDir, r.id+".start"), request) == nil {
			t.pendingFiles = append(t.pendingFiles, r.id)
		}
	default:
		args := []string{"start", "--id", r.id}
		if kind == "service" {
			args = append(args, "--restart", "always", "--restart-limit", "1000")
		}
		if r.after != "" {
			args = append(args, "--after", r.after+cond)
		}
		t.background(func(out string) {
			if strings.TrimSpace(out) == r.id {
				r.accepted, r.acceptedBoot = true, t.boots
			}
		}, append(args, "--", body)...)
	}
	return r
}

// writeRequest writes a request file at path as a shell client of root's
// does in a shared root: marked (setfattr -n trusted.tend -v request)
// before its content, so that the watcher, which refuses a file of root's
// in a spool others may write unless it has that mark, takes it.
func writeRequest(path, body string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	err = unix.Fsetxattr(int(f.Fd()), "trusted.tend", []byte("request"), 0)
	if err == nil {
		_, err = f.WriteString(body)
	}
	return errors.Join(err, f.Close())
}

// syncFile fsyncs the file or directory at path.
func syncFile(path string) {
	if f, err := os.Open(path); err == nil {
		f.Sync()
		f.Close()
	}
}

// readOutcomes reads the outcomes of the requests dropped as files, as a
// shell client would, and notes those answered.
func (t *trial) readOutcomes() {
	var still []string
	for _, id := range t.pendingFiles {
		b, err := os.ReadFile(filepath.Join(t.root, "outcomes", id+".start"))
		switch {
		case err == nil && strings.TrimSpace(string(b)) == spool.Accepted:
			t.mu.Lock()
			if r := t.runs[id]; !r.accepted {
				r.accepted, r.acceptedBoot = true, t.boots
			}
			t.mu.Unlock()
		case err == nil && len(b) > 0 && t.runs[id].cut < t.cutNo:
			// Submitted before a cut that took back its body (its client
			// did not sync it): rejected, and never accepted.
		case err == nil && len(b) > 0:
			t.violation("run %s: its start was answered %q", id, b)
		default:
			still = append(still, id)
		}
	}
	t.pendingFiles = still
	still = nil
	for _, id := range t.cancelFiles {
		b, err := os.ReadFile(filepath.Join(t.root, "outcomes", id+".cancel"))
		if err == nil && strings.TrimSpace(string(b)) == spool.Canceled {
			t.mu.Lock()
			t.runs[id].canceled = true
			t.mu.Unlock()
		} else if err != nil || len(b) == 0 {
			still = append(still, id)
		}
	}
	t.cancelFiles = still
}

// pick returns a random run for which ok holds, or nil.
func (t *trial) pick(ok func(r *plRun) bool) *plRun {
	t.mu.Lock()
	defer t.mu.Unlock()
	var c []*plRun
	for _, id := range t.order {
		if r := t.runs[id]; ok(r) {
			c = append(c, r)
		}
	}
	if len(c) == 0 {
		return nil
	}
	return c[t.rng.IntN(len(c))]
}

// act does one random thing a client does.
func (t *trial) act() {
	t.readOutcomes()
	t.mu.Lock()
	busy := t.busy
	t.mu.Unlock()
	if busy >= 6 {
		return
	}
	live := func(r *plRun) bool { return r.accepted && r.kind != "short" && !r.canceled && r.end == nil }
	switch n := t.rng.IntN(20); {
	case n < 7:
		kind := "short"
		if k := t.rng.IntN(10); k < 2 {
			kind = "long"
		} else if k == 2 {
			kind = "service"
		} else if k == 3 {
			// One that waits for a short run's end, which may be under way.
			// (Accepted: one whose request a cut took back is no run.)
			if dep := t.pick(func(r *plRun) bool { return r.accepted && r.kind == "short" && !r.deleteSent }); dep != nil {
				t.waitFor = dep.id
			}
		}
		t.submit(kind, "")
	case n < 9:
		if r := t.pick(func(r *plRun) bool { return r.accepted && r.kind == "short" && r.end == nil }); r != nil {
			t.waitEnd(r)
		}
	case n < 11:
		if r := t.pick(live); r != nil {
			if t.rng.IntN(3) == 0 {
				tmp := filepath.Join(t.root, "spool", "."+r.id+".cancel.tmp")
				if writeRequest(tmp, "") == nil && os.Rename(tmp, filepath.Join(t.root, "spool", r.id+".cancel")) == nil {
					t.cancelFiles = append(t.cancelFiles, r.id)
				}
				return
			}
			t.background(func(out string) {
				if o := outcomeOf(out); o.Outcome == spool.Canceled {
					r.canceled = true
				}
			}, "cancel", r.id, "--json")
		}
	case n < 13:
		if r := t.pick(live); r != nil && r.kind == "long" {
			t.mu.Lock()
			r.signalsSent++
			t.mu.Unlock()
			t.background(nil, "signal", r.id, "USR1")
		}
	case n < 15:
		if r := t.pick(func(r *plRun) bool { return r.accepted && !r.deleteSent }); r != nil {
			key := []string{"a", "b"}[t.rng.IntN(2)]
			value := fmt.Sprintf("v%d", t.rng.IntN(1000))
			t.mu.Lock()
			r.labels[key] = append(r.labels[key], value)
			t.mu.Unlock()
			t.background(t.answering(r, "label", func(out string) {
				if o := outcomeOf(out); o.Outcome == spool.Updated {
					r.labelSeen[key] = true
					r.revsSeen = append(r.revsSeen, revOf(o.Detail))
				}
			}), "label", r.id, key+"="+value, "--json")
		}
	case n < 17:
		if r := t.pick(func(r *plRun) bool { return r.accepted && !r.deleteSent }); r != nil {
			text := fmt.Sprintf("note-%d-%d", t.cutNo, t.rng.IntN(1e6))
			t.mu.Lock()
			r.notesSent[text] = true
			t.mu.Unlock()
			t.background(t.answering(r, "note", func(out string) {
				if o := outcomeOf(out); o.Outcome == spool.Updated {
					r.notesSeen[text] = true
					r.revsSeen = append(r.revsSeen, revOf(o.Detail))
				}
			}), "note", r.id, text, "--json")
		}
	case n < 18:
		if r := t.pick(func(r *plRun) bool { return r.end != nil && !r.deleteSent }); r != nil {
			t.mu.Lock()
			r.deleteSent = true
			t.mu.Unlock()
			t.background(func(out string) {
				if o := outcomeOf(out); o.Outcome == spool.Deleted {
					r.deleted = true
				}
			}, "rm", r.id, "--json")
		}
	default:
		if r := t.pick(func(r *plRun) bool { return live(r) && r.kind == "service" }); r != nil {
			t.background(t.answering(r, "restart", func(out string) {
				if o := outcomeOf(out); o.Outcome == spool.Restarted {
					r.restartSeen = max(r.restartSeen, int(revOf(o.Detail)))
				}
			}), "restart", r.id, "--json")
		}
	}
}

// waitEnd waits for short run r's end in the background, as tend wait
// --json shows it.
func (t *trial) waitEnd(r *plRun) {
	t.backgroundCode(func(out string, code int) {
		var st tracker.State
		if json.Unmarshal([]byte(out), &st) == nil && tracker.Final(st.State) {
			r.end = &st
		}
	}, "wait", r.id, "--json")
}

// outcomeOf parses a control command's --json line.
func outcomeOf(out string) (o struct{ Outcome, Detail string }) {
	json.Unmarshal([]byte(out), &o)
	return o
}

// answering counts a control request of verb the CLI is to make for run
// r, and returns what notes its answer, then calls done (if not nil) with
// the CLI's output: a request answered whole must never be rejected after
// a cut (see verifyRejected). What it returns runs as background's done
// does, with t.mu held.
func (t *trial) answering(r *plRun, verb string, done func(out string)) func(out string) {
	t.mu.Lock()
	if r.sent == nil {
		r.sent, r.answered = make(map[string]int), make(map[string]int)
	}
	r.sent[verb]++
	t.mu.Unlock()
	return func(out string) {
		if o := outcomeOf(out); o.Outcome != "" && o.Outcome != spool.Rejected {
			r.answered[verb]++
		}
		if done != nil {
			done(out)
		}
	}
}

// revOf returns N from "rev N" or "attempt N".
func revOf(detail string) int64 {
	f := strings.Fields(detail)
	if len(f) == 0 {
		return 0
	}
	n, _ := strconv.ParseInt(f[len(f)-1], 10, 64)
	return n
}

// randomCut lets clients act for a random while, then cuts the power.
func (t *trial) randomCut(model crashfs.Model) {
	end := time.Now().Add(time.Duration(50+t.rng.IntN(1500)) * time.Millisecond)
	for time.Now().Before(end) {
		t.act()
		time.Sleep(time.Duration(t.rng.IntN(30)) * time.Millisecond)
	}
	t.fs.Freeze()
	t.powerCut(model, "at a random moment")
}

// script is the scripted sequence: each request of each kind, one after
// the other, every one waited for. stop reports whether to stop (the
// power was cut).
func (t *trial) script(stop func() bool) {
	steps := []func(){
		func() {
			if r := t.downRun; r != nil {
				t.downRun = nil
				t.awaitStart(r)
				t.waitEnd(r)
				t.awaitClients()
				t.remove(r)
			}
		},
		func() {
			// A wait under way when its run ends: it reads the end as soon
			// as the record is renamed into place.
			t.slow = true
			r := t.submit("short", "cli")
			t.awaitClients()
			t.waitEnd(r)
			t.awaitClients()
		},
		func() {
			// A careful client's request (synced once renamed in), which
			// the script deletes once it has ended.
			t.careful = true
			r := t.submit("short", "rename")
			t.careful = false
			t.awaitStart(r)
		},
		func() { t.awaitStart(t.submit("short", "inplace")) },
		func() {
			// A run that waits for another's end: it starts in the flush
			// that writes that end, and passes its gate after it.
			t.slow = true // still running when what waits for it is taken
			t.waitFor = t.submit("short", "").id
			t.awaitClients() // it exists before what waits for it is taken
			t.awaitStart(t.submit("short", ""))
		},
		func() {
			// A run that waits for another to complete, which fails: it
			// is canceled while queued, its request moved from the spool
			// into its directory, where no claim syncs the spool with its
			// end; after a cut the request must not be back in the spool,
			// to be rejected as a second start of the run. Another waits
			// for the same run's end, and is claimed from the spool in the
			// same flush: its request must not be lost between the two.
			t.slow, t.failing = true, true // still running when the waiters are taken
			dep := t.submit("short", "").id
			t.awaitClients() // it exists before what waits for it is taken
			t.waitFor, t.waitCompleted = dep, true
			r := t.submit("short", "")
			t.waitFor = dep
			ended := t.submit("short", "")
			t.awaitStart(r)
			t.awaitStart(ended)
			t.waitEnd(r)
		},
		func() { t.awaitStart(t.submit("long", "cli")) },
		func() { t.awaitStart(t.submit("service", "cli")) },
		func() {
			// A second group shared while the watcher runs: nothing but
			// config.json's own flushes make it durable.
			if !t.sharedDaemon {
				t.runOne(func(string) { t.sharedDaemon = true }, "up", "--shared", "daemon")
			}
		},
		func() {
			// A request that is rejected.
			name := t.newID() + ".start"
			if writeRequest(filepath.Join(t.root, "spool", name), `{"command": 5}`) != nil {
				return
			}
			for end := time.Now().Add(10 * time.Second); time.Now().Before(end) && !t.fs.Frozen(); time.Sleep(2 * time.Millisecond) {
				if b, err := os.ReadFile(filepath.Join(t.root, "outcomes", name)); err == nil && strings.HasPrefix(string(b), spool.Rejected) {
					t.rejectedSeen = append(t.rejectedSeen, name)
					return
				}
			}
		},
	}
	for _, step := range steps {
		if stop() {
			return
		}
		step()
		t.awaitClients()
	}
	for i, id := range t.order[len(t.order)-4:] {
		if stop() {
			return
		}
		r := t.runs[id]
		switch r.kind {
		case "short":
			t.waitEnd(r)
			t.awaitClients()
			r.labels["a"] = append(r.labels["a"], "x")
			t.runOne(t.answering(r, "label", func(out string) {
				if o := outcomeOf(out); o.Outcome == spool.Updated {
					r.labelSeen["a"] = true
					r.revsSeen = append(r.revsSeen, revOf(o.Detail))
				}
			}), "label", r.id, "a=x", "--json")
			r.notesSent["n-"+r.id] = true
			t.runOne(t.answering(r, "note", func(out string) {
				if o := outcomeOf(out); o.Outcome == spool.Updated {
					r.notesSeen["n-"+r.id] = true
					r.revsSeen = append(r.revsSeen, revOf(o.Detail))
				}
			}), "note", r.id, "n-"+r.id, "--json")
			if i == 0 || r.code != 0 {
				t.remove(r)
			}
		case "long":
			r.signalsSent++
			t.runOne(nil, "signal", r.id, "USR1")
			t.runOne(func(out string) {
				if o := outcomeOf(out); o.Outcome == spool.Canceled {
					r.canceled = true
				}
			}, "cancel", r.id, "--json")
		case "service":
			t.runOne(t.answering(r, "restart", func(out string) {
				if o := outcomeOf(out); o.Outcome == spool.Restarted {
					r.restartSeen = int(revOf(o.Detail))
				}
			}), "restart", r.id, "--json")
		}
	}
}

// remove deletes run r if a client saw it end, with tend rm, and waits.
func (t *trial) remove(r *plRun) {
	t.mu.Lock()
	ended := r.end != nil && !r.deleteSent
	r.deleteSent = r.deleteSent || ended
	t.mu.Unlock()
	if ended {
		t.runOne(func(out string) {
			if o := outcomeOf(out); o.Outcome == spool.Deleted {
				r.deleted = true
			}
		}, "rm", r.id, "--json")
	}
}

// runOne runs one client and waits for it.
func (t *trial) runOne(done func(string), args ...string) {
	t.background(done, args...)
	t.awaitClients()
}

// awaitClients waits until no client runs, or the power is cut (those
// that run then are killed with it).
func (t *trial) awaitClients() {
	for !t.fs.Frozen() && !t.idle() {
		time.Sleep(time.Millisecond)
	}
}

// clientsReturn waits until no client runs, for at most d, after a cut
// too.
func (t *trial) clientsReturn(d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end) && !t.idle(); {
		time.Sleep(time.Millisecond)
	}
}

// idle reports whether no client runs.
func (t *trial) idle() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.busy == 0
}

// awaitStart waits until run r's start is answered (or the power is cut).
func (t *trial) awaitStart(r *plRun) {
	t.awaitClients()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end) && !t.fs.Frozen(); time.Sleep(2 * time.Millisecond) {
		t.readOutcomes()
		t.mu.Lock()
		ok := r.accepted
		t.mu.Unlock()
		if ok || !slicesContains(t.pendingFiles, r.id) {
			return
		}
	}
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// measureScript runs the scripted sequence once, on a fresh watcher, and
// returns how many flushes it made; then stops the watcher and settles.
func (t *trial) measureScript() int {
	if !t.up() {
		t.ts.Fatalf("tend up failed on a fresh root")
	}
	before := len(t.fs.Flushes())
	t.script(func() bool { return false })
	n := len(t.fs.Flushes()) - before
	t.progress("powerloss: the scripted sequence makes %d flushes", n)
	t.settle()
	t.down()
	t.verify()
	return n
}

// scriptedCut runs the scripted sequence and cuts the power at its k-th
// flush, before or after it.
func (t *trial) scriptedCut(k int, after bool, model crashfs.Model) {
	cut := t.fs.CutAtFlush(len(t.fs.Flushes())+k, after)
	t.script(t.fs.Frozen)
	where := fmt.Sprintf("before the scripted sequence's flush %d", k)
	if after {
		where = fmt.Sprintf("after the scripted sequence's flush %d", k)
	}
	select {
	case <-cut:
		fl := t.fs.Flushes()
		where += " (" + fl[len(fl)-1].String() + ")"
	default:
		t.fs.Freeze() // the sequence made fewer flushes this time
		where += ", which did not come: at its end"
	}
	t.powerCut(model, where)
}

// gateCut runs the scripted sequence on a slow disk and cuts the power
// as soon as the command of a run that waited for another has started:
// check 7 then catches a gate opened before its dependency's end was on
// disk, which a cut at a random moment, or at a numbered flush, rarely
// comes at (the dependent's command and the flush of that end race for a
// millisecond on the trial's usual disk).
func (t *trial) gateCut(model crashfs.Model) {
	t.fs.SetFlushDelay(gateCutDelay) // the next mount has the usual one
	cut, scripted := make(chan struct{}), make(chan struct{})
	before, _ := os.ReadFile(t.ranLog) // the runs of earlier cuts
	go func() {
		defer close(cut)
		for !t.waiterRan(len(before)) {
			select {
			case <-scripted:
				t.fs.Freeze()
				return
			case <-time.After(time.Millisecond):
			}
		}
		t.fs.Freeze()
	}()
	t.script(t.fs.Frozen)
	where := "once a run that waited had started its command"
	select {
	case <-cut:
	case <-time.After(10 * time.Second):
		where += ", which did not come: 10 s after the scripted sequence"
		close(scripted)
		<-cut
	}
	t.powerCut(model, where)
}

// tornCut runs the scripted sequence and cuts the power as a run's first
// record, renamed in before its flush (TEND_TEST_RENAME_NEW), is about to
// be flushed, keeping every name and no data that was not synced
// (crashfs.NamesFirst): its name without its data, which recovery must
// take for a record never written. A cut at a random moment rarely comes
// in that millisecond, and keeps the name and not the data more rarely.
func (t *trial) tornCut() {
	cut := t.fs.CutAtFlushOf(func(f crashfs.Flush) bool {
		return !f.Dir && filepath.Base(f.Path) == "state.json" // synced under its own name: renamed in first
	})
	t.scriptUntil(cut, crashfs.NamesFirst, "as a run's first record, renamed in, was to be flushed")
}

// scriptUntil runs the scripted sequence, which stops once cut is closed
// (the power is cut there), and cuts the power as model has it: where
// says where, or that the cut did not come, and it came at the end.
func (t *trial) scriptUntil(cut <-chan struct{}, model crashfs.Model, where string) {
	t.script(t.fs.Frozen)
	select {
	case <-cut:
	default:
		t.fs.Freeze()
		where += ", which did not come: at the end of the scripted sequence"
	}
	t.powerCut(model, where)
}

// claimCut runs the scripted sequence with the flushes of run
// directories slow, and cuts the power, keeping nothing that was not
// synced (crashfs.Strict), as soon as the spool is synced after n queued
// runs that waited have had their requests claimed or moved into their
// directories: 1, the first to start; 3, as well the two that waited for
// a run that fails, one moved out as the other is claimed, in one flush.
// A watcher that synced a claim's removal from the spool no later than
// the request's new name loses the request of a run it answered accepted
// (check 8). The two flushes race, and a cut at a random moment rarely
// comes between the two.
func (t *trial) claimCut(n int) {
	earlier := make(map[string]bool) // waiters of the cuts before
	t.waiters.Range(func(id, _ any) bool {
		earlier[id.(string)] = true
		return true
	})
	t.fs.SetSlowFlushes(func(f crashfs.Flush) bool {
		return f.Dir && filepath.Dir(f.Path) == filepath.Join(".tend", "runs")
	}, 50*time.Millisecond) // the next mount has the usual disk
	cut := t.fs.CutAfterFlushOf(func(f crashfs.Flush) bool {
		return f.Dir && f.Path == filepath.Join(".tend", "spool") && t.waitersClaimed(earlier) >= n
	})
	t.scriptUntil(cut, crashfs.Strict, fmt.Sprintf("once the spool was synced after %d waiting runs' requests were claimed", n))
}

// waitersClaimed counts the runs that wait for another, not of earlier,
// whose requests are in their run's directories, as the backing file
// system has them (it is called inside crashfs, which must not be
// entered again).
func (t *trial) waitersClaimed(earlier map[string]bool) int {
	n := 0
	t.waiters.Range(func(id, _ any) bool {
		if !earlier[id.(string)] && exists(filepath.Join(t.backing, ".tend", "runs", id.(string), "request")) {
			n++
		}
		return true
	})
	return n
}

// waiterRan reports whether the command of a run that waits for another
// has started: its line is in ran.log, past its first skip bytes.
func (t *trial) waiterRan(skip int) bool {
	b, _ := os.ReadFile(t.ranLog)
	if len(b) < skip {
		return false
	}
	for _, line := range strings.Split(string(b[skip:]), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			if _, waits := t.waiters.Load(f[0]); waits {
				return true
			}
		}
	}
	return false
}

// gateCutDelay is how long each flush takes in gateCut: long enough that
// a dependency's end, a file's fsync and then its directory's, would
// still be on its way when a gate opened with it let its command start.
const gateCutDelay = 20 * time.Millisecond

// powerCut stops every process that used the mount, unmounts it, and
// turns the backing directory into what the disk kept.
func (t *trial) powerCut(model crashfs.Model, where string) {
	t.starting.Lock()
	t.cutting = true
	t.starting.Unlock()
	if err := t.group.Freeze(); err != nil {
		t.progress("%v", err)
	}
	t.fs.Freeze()
	t.mark = nil
	t.ts.Check(t.group.Kill())
	t.clients.Wait()
	t.noteRanBeforeCut()
	t.starting.Lock()
	t.cutting = false
	t.starting.Unlock()
	t.ts.Check(t.fs.Unmount())
	t.boots++
	img := t.backing + ".image"
	os.RemoveAll(img)
	stats, err := t.fs.Image(img, model, t.rng)
	t.ts.Check(err)
	t.ts.Check(os.RemoveAll(t.backing))
	t.ts.Check(os.Rename(img, t.backing))
	t.fs = nil
	// A request dropped as a file may have survived the cut: its client
	// reads its answer after, as a shell script waiting for it would.
	t.cancelFiles = nil
	t.progress("cut %d (%s, %s): kept %d of %d unsynced changes; %d files, %d dirs", t.cutNo, model, where, stats.Kept, stats.Pending, stats.Files, stats.Dirs)
	// Which runs passed their gates, as far as the disk knows: a cut
	// between a gate's line and the command's first step leaves a run
	// that is started and did nothing.
	paths, _ := filepath.Glob(filepath.Join(t.backing, ".tend", "runs", "*", "started"))
	gates, _ := filepath.Glob(filepath.Join(t.backing, ".tend", "runs", "*", "gate"))
	for _, p := range gates {
		if b, err := os.ReadFile(p); err == nil && len(b) > 0 && string(b) != "closed\n" {
			paths = append(paths, p)
		}
	}
	for _, p := range paths {
		id := filepath.Base(filepath.Dir(p))
		t.gated[id] = true
		if r := t.runs[id]; r != nil && r.after != "" {
			r.ranBeforeCut = true // its command may have started: check 7
		}
	}
}

// noteRanBeforeCut notes which runs that waited for another had run when
// the power was cut (see check 7).
func (t *trial) noteRanBeforeCut() {
	b, _ := os.ReadFile(t.ranLog)
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			if r := t.runs[f[0]]; r != nil && r.after != "" {
				r.ranBeforeCut = true
			}
		}
	}
}

// verifyWait checks that run r, which waited for run dep's end and ran
// before the cut, ran after a real end, which the disk kept: st is dep's
// record, events its history.
func (t *trial) verifyWait(r *plRun, dep *tracker.State, events []tracker.Event) {
	end := dep
	if end == nil { // deleted since: the history says how it ended
		for _, e := range events {
			if tracker.Final(e.State) && e.State != tracker.Deleted {
				end = &tracker.State{State: e.State, Rev: e.Rev, ExitCode: e.ExitCode, Signal: e.Signal, Reason: e.Reason}
			}
		}
	}
	lostBefore := false
	if d := t.runs[r.after]; d != nil {
		lostBefore = d.lostAt != 0 && d.lostAt < t.cutNo
	}
	t.check(end != nil && tracker.Final(end.State) && (!strings.HasPrefix(end.Reason, "lost") || lostBefore),
		"run %s: it ran before the cut, after run %s's end, which is now %s", r.id, r.after, stateOf(end))
}

// recover starts a watcher on what the disk kept, waits until it has
// settled every run, stops it, and checks.
func (t *trial) recover() bool {
	t0 := time.Now()
	logged := t.logSize()
	if !t.up() {
		return false
	}
	t1 := time.Now()
	t.settle()
	t2 := time.Now()
	t.down()
	t3 := time.Now()
	t.torn += t.logCount(logged, "cut short by a crash before its run started")
	t.ends += t.logCount(logged, "were in the history, not in its record")
	t.verify()
	t.progress("recovery: up %v, settle %v, down %v, checks %v", t1.Sub(t0), t2.Sub(t1), t3.Sub(t2), time.Since(t3))
	if t.downRun == nil {
		// A request a careful client drops, and syncs, while no watcher
		// runs: the next one claims it as it starts, and the scripted
		// sequence deletes it once it has ended. In the seen flush's
		// trial it takes a while, so that its wait, the first of the
		// sequence and the first mark, is under way when it ends.
		t.careful = true
		t.slow = t.mutant == string(durable.FlushSeen)
		t.downRun = t.submit("short", "rename")
		t.careful = false
	}
	return true
}

// settle waits until no run is starting, queued or stopping, and every
// short run has ended.
func (t *trial) settle() {
	store := tracker.NewStore(t.root)
	var last string
	for end := time.Now().Add(deadline); ; time.Sleep(10 * time.Millisecond) {
		runs, _ := store.List()
		last = ""
		for _, st := range runs {
			r := t.runs[st.ID]
			switch {
			case st.State == tracker.Starting || st.State == tracker.Queued || st.State == tracker.Stopping:
			case r != nil && r.kind == "short" && !tracker.Final(st.State):
			default:
				continue
			}
			last = fmt.Sprintf("run %s is %s (%s)", st.ID, st.State, st.Reason)
			break
		}
		if last == "" {
			return
		}
		if time.Now().After(end) {
			t.violation("after recovery, %s after %v", last, deadline)
			return
		}
	}
}

// down stops the watcher: its runs end canceled.
func (t *trial) down() {
	if out, code := t.run("down"); code != 0 {
		t.ts.Fatalf("cut %d: tend down: exit %d: %s\n%s", t.cutNo, code, out, t.tail("watcher.log"))
	}
}

// verify checks the root against what clients saw: fsck first (and its
// repair, if it finds problems), then every run.
func (t *trial) verify() {
	if t.cutsOnRoot == 2 {
		t.tearHistory()
	}
	out, errOut, code := t.run3("fsck")
	if code != 0 {
		t.progress("cut %d: tend fsck:\n%s%s", t.cutNo, out, errOut)
		marks := t.fs.Marks()
		if t.mutant != "" && t.mark == nil {
			// The repair's flushes are a mutant's too: cut at the next
			// flush after one it left out.
			t.mark = t.fs.CutAfterMark(t.afterMark())
		}
		rout, rerr, rcode := t.run3("fsck", "--repair")
		if t.mark != nil && t.fs.Marks() == marks {
			t.fs.Disarm() // it left none out
			t.mark = nil
		}
		t.progress("cut %d: tend fsck --repair (exit %d):\n%s%s", t.cutNo, rcode, rout, rerr)
		out, errOut, code = t.run3("fsck")
		t.check(code == 0, "tend fsck --repair left problems: %s%s", out, errOut)
		if code != 0 {
			for _, m := range regexp.MustCompile(`runs/([^/:]+)`).FindAllStringSubmatch(out+errOut, -1) {
				ls, _ := exec.Command("ls", "-la", filepath.Join(t.root, "runs", m[1])).CombinedOutput()
				t.progress("%s\n%s", ls, runDiagnosis(t.root, m[1]))
			}
		}
	} else {
		t.check(true, "")
	}
	store := tracker.NewStore(t.root)
	states, errs := store.List()
	t.check(len(errs) == 0, "records: %v", errs)
	byID := make(map[string]*tracker.State, len(states))
	for _, st := range states {
		byID[st.ID] = st
	}
	events, err := tracker.ReadAllHistory(t.root)
	t.check(err == nil, "history: %v", err)
	byRun := make(map[string][]tracker.Event)
	for _, e := range events {
		byRun[e.ID] = append(byRun[e.ID], e)
	}
	ran := make(map[string]int)      // "ID ATTEMPT" lines
	attempts := make(map[string]int) // per ID
	usr1 := make(map[string]int)
	b, _ := os.ReadFile(t.ranLog)
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		if f[1] == "usr1" {
			usr1[f[0]]++
			continue
		}
		ran[line]++
		attempts[f[0]]++
	}
	for line, n := range ran {
		t.check(n == 1, "%s: ran %d times (ran.log has %q %d times)", strings.Fields(line)[0], n, line, n)
	}
	ids := make([]string, 0, len(t.runs))
	for id := range t.runs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		r := t.runs[id]
		t.verifyRun(r, byID[id], byRun[id], attempts[id], usr1[id])
		if r.ranBeforeCut {
			t.verifyWait(r, byID[r.after], byRun[r.after])
		}
	}
	for _, id := range ids {
		if st := byID[id]; st != nil && strings.HasPrefix(st.Reason, "lost") && t.runs[id].lostAt == 0 {
			t.runs[id].lostAt = t.cutNo
		}
	}
	for id, st := range byID {
		t.check(tracker.Final(st.State), "run %s is %s after tend down", id, st.State)
	}
	t.verifyRejected()
	if t.shared || t.sharedDaemon {
		cfg, _ := os.ReadFile(filepath.Join(t.root, "config.json"))
		var c struct{ Groups []string }
		json.Unmarshal(cfg, &c)
		t.check(!t.shared || slicesContains(c.Groups, "root"), "config.json lost what tend up --shared root wrote: %q", cfg)
		t.check(!t.sharedDaemon || slicesContains(c.Groups, "daemon"), "config.json lost what tend up --shared daemon wrote: %q", cfg)
	}
}

// reasonTemp matches the temporary file a reason is written to before it
// has its name: a power loss may leave one, and nothing needs it (the
// trial's requests have no such names).
var reasonTemp = regexp.MustCompile(`\.error\d+$`)

// tearHistory leaves the history as a crash mid-append leaves it, with a
// torn last line, once a root: the watcher appends nothing more until
// tend fsck --repair moves it aside, which the repair then does, and what
// it rewrote must survive the cuts after.
func (t *trial) tearHistory() {
	f, err := os.OpenFile(layout.Root(t.root).History(), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return
	}
	f.WriteString(`{"time":"2026-11-21T11:04:24.126Z","id":"torn`)
	f.Close()
}

// verifyRejected checks rejected/: every request there has its reason,
// and every rejection a client read is there.
func (t *trial) verifyRejected() {
	dir := filepath.Join(t.root, "rejected")
	ents, _ := os.ReadDir(dir)
	names := make(map[string]bool)
	for _, e := range ents {
		names[e.Name()] = true
	}
	for name := range names {
		if strings.HasSuffix(name, ".error") || strings.HasPrefix(name, ".") || reasonTemp.MatchString(name) {
			continue // a reason, or what an interrupted write of one left
		}
		b, _ := os.ReadFile(filepath.Join(dir, name+".error"))
		t.check(len(b) > 0 && b[len(b)-1] == '\n', "rejected/%s has no reason (its .error holds %q)", name, b)
		// fsck --repair, above, writes one for a request whose reason was
		// lost: that it had to is the loss.
		t.check(!strings.Contains(string(b), tracker.LostReason), "rejected/%s lost its reason: tend fsck --repair wrote one", name)
		if n, err := spool.ParseName(name); err == nil && strings.HasPrefix(n.Tag, "c") && n.Verb != spool.VerbSignal {
			// One the CLI made (tagged), whole: every such request of its
			// run and verb was answered, so this one was too, and, taken
			// again after the cut, must be answered again, not rejected,
			// whatever a cut left of its content ("Carried out once" in
			// protocol.md). (A signal is answered once sent, with nothing
			// written: it may come back, as protocol.md says.)
			t.mu.Lock()
			r := t.runs[n.ID]
			answered := r != nil && r.sent[n.Verb] > 0 && r.answered[n.Verb] == r.sent[n.Verb]
			t.mu.Unlock()
			t.check(!answered, "rejected/%s: every %s request for run %s was answered, yet this one is rejected now: %s", name, n.Verb, n.ID, bytes.TrimSpace(b))
		}
		if !slicesContains(t.rejectedSeen, name) && !t.reported["rejected "+name] {
			t.reported["rejected "+name] = true // said once
			t.progress("cut %d: rejected/%s: %s", t.cutNo, name, bytes.TrimSpace(b))
		}
	}
	for _, name := range t.rejectedSeen {
		t.check(names[name], "%s: a client read its rejection, but rejected/ has no %s", name, name)
	}
}

// verifyRun checks run r: st is its record (nil if none), events its
// history, ran how many times its command ran, usr1 how many SIGUSR1 it
// caught.
func (t *trial) verifyRun(r *plRun, st *tracker.State, events []tracker.Event, ran, usr1 int) {
	has := func(match func(e tracker.Event) bool) bool {
		for _, e := range events {
			if match(e) {
				return true
			}
		}
		return false
	}
	// 1. What was accepted is there, unless a delete was answered.
	if r.accepted && !r.deleted {
		t.check(st != nil || r.deleteSent, "run %s: accepted, but it has no record", r.id)
		b, err := os.ReadFile(filepath.Join(t.root, "outcomes", r.id+".start"))
		t.check(err != nil || !strings.HasPrefix(string(b), spool.Rejected), "run %s: accepted, but its outcome is now %q", r.id, b)
	}
	if r.deleted {
		t.check(st == nil, "run %s: its delete was answered, but it has a record (%s)", r.id, stateOf(st))
		t.check(has(func(e tracker.Event) bool { return e.State == tracker.Deleted }), "run %s: its delete was answered, but the history has no deleted event", r.id)
	}
	// 2. Nothing ran or was carried out twice.
	if r.kind != "service" {
		t.check(ran <= 1, "run %s: its command ran %d times", r.id, ran)
	}
	t.check(usr1 <= r.signalsSent, "run %s: caught SIGUSR1 %d times, for %d signal requests", r.id, usr1, r.signalsSent)
	// 6. A run that ran is known, and known to have run.
	t.check(ran == 0 || st != nil || r.deleteSent, "run %s: its command ran, but it has no record", r.id)
	if st == nil {
		return
	}
	neverRan := strings.Contains(st.Reason, "never ran") || st.StartedAt == nil && tracker.Final(st.State) && st.Attempt == 0
	// (A service's reason is its last attempt's; ran.log has each attempt
	// once, as checked above.)
	t.check(ran == 0 || !neverRan || r.kind == "service", "run %s: its command ran, but it is reported as never run: %s", r.id, stateOf(st))
	// A run recorded running before the machine restarted, whose gate's
	// line (not synced) did not survive, may have run or not: its reason
	// says so, and neither is a contradiction.
	mayHaveRun := strings.Contains(st.Reason, "whether its command ran")
	reportedRan := st.ExitCode != nil || st.Signal != "" || strings.HasPrefix(st.Reason, "lost") && !mayHaveRun
	t.check(ran > 0 || !reportedRan || t.gated[r.id] || exists(filepath.Join(t.root, "runs", r.id, "started")),
		"run %s: it never passed its gate, but it is reported as run: %s", r.id, stateOf(st))
	// 3. Every end seen is still there, and the true exit code.
	if r.end != nil {
		t.check(st.State == r.end.State && eqCode(st.ExitCode, r.end.ExitCode) && st.Signal == r.end.Signal,
			"run %s: a client saw it end %s, it is now %s", r.id, stateOf(r.end), stateOf(st))
	}
	if r.canceled {
		t.check(st.State == tracker.Canceled, "run %s: its cancel was answered canceled, it is now %s", r.id, stateOf(st))
	}
	if r.kind == "short" && st.ExitCode != nil && st.Signal == "" && st.State != tracker.Canceled {
		t.check(*st.ExitCode == r.code, "run %s: exited %d, recorded %s", r.id, r.code, stateOf(st))
	}
	for key, values := range r.labels {
		t.check(slicesContains(values, st.Labels[key]) || !r.labelSeen[key],
			"run %s: label %s is %q, want one of %q", r.id, key, st.Labels[key], values)
	}
	seen := int64(0)
	if r.end != nil {
		seen = r.end.Rev
	}
	for _, rev := range r.revsSeen {
		seen = max(seen, rev)
	}
	t.check(st.Rev >= seen, "run %s: a client saw rev %d, it is at %s", r.id, seen, stateOf(st))
	notes := make(map[string]int)
	for _, n := range st.Notes {
		notes[n.Text]++
	}
	for text := range r.notesSent {
		t.check(notes[text] <= 1, "run %s: note %q is there %d times", r.id, text, notes[text])
		t.check(notes[text] > 0 || !r.notesSeen[text], "run %s: note %q was answered updated, but it is not there", r.id, text)
	}
	if r.restartSeen > 0 {
		t.check(st.Attempt >= r.restartSeen, "run %s: a restart was answered attempt %d, it is at attempt %d", r.id, r.restartSeen, st.Attempt)
	}
	// 8. An accepted run keeps the request it was started with: what it
	// is started from again, if it never passed its gate, and what a
	// service is restarted from. Unless it was answered only after a cut
	// that came after its request: that cut may have taken back what its
	// writer had not synced (and the watcher had not yet) before it was
	// answered, and the run then failed to start, with the reason.
	// (It once came back lost, rarely, where a batch synced the spool,
	// from which a queued run's request was claimed, beside the run's
	// directory, into which it was: claimCut makes that case at will.)
	if r.accepted && r.acceptedBoot == r.boot && !r.deleteSent {
		b, err := os.ReadFile(filepath.Join(t.root, "runs", r.id, "request"))
		req, perr := spool.ParseStart(b)
		whole := err == nil && perr == nil && slices.Equal(req.Args(), st.Command)
		var names []string
		if !whole {
			ents, _ := os.ReadDir(filepath.Join(t.root, "runs", r.id))
			for _, e := range ents {
				names = append(names, e.Name())
			}
		}
		t.check(whole, "run %s (%s, submitted %s before cut %d, after %q): accepted, but its claimed request is not what it was started with (%v): %q; it is %s; its directory holds %q",
			r.id, r.kind, r.how, r.cut, r.after, errors.Join(err, perr), b, stateOf(st), names)
	}
	// 4. The history has every change a client saw.
	if r.accepted {
		t.check(len(events) > 0, "run %s: accepted, but the history has no event of it", r.id)
	}
	if r.end != nil {
		t.check(has(func(e tracker.Event) bool { return e.State == r.end.State && e.Rev == r.end.Rev }),
			"run %s: a client saw it end %s at rev %d; the history has no such event", r.id, r.end.State, r.end.Rev)
	}
	for _, rev := range r.revsSeen {
		t.check(has(func(e tracker.Event) bool { return e.Rev == rev }), "run %s: rev %d was answered, the history has no event of it", r.id, rev)
	}
}

func eqCode(a, b *int) bool { return a == nil && b == nil || a != nil && b != nil && *a == *b }

func stateOf(st *tracker.State) string {
	if st == nil {
		return "no record"
	}
	s := fmt.Sprintf("%s rev %d", st.State, st.Rev)
	if st.ExitCode != nil {
		s += fmt.Sprintf(" exit %d", *st.ExitCode)
	}
	if st.Signal != "" {
		s += " " + st.Signal
	}
	if st.Reason != "" {
		s += " (" + st.Reason + ")"
	}
	return s
}
