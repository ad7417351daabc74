package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	"github.com/tendhq/tend/procfs"
	"github.com/tendhq/tend/tracker"
)

// chaosRun is what one run of the chaos test must end as.
type chaosRun struct {
	state  tracker.StateName
	code   int    // its exit code, if it exits
	signal string // the signal that kills it, if one does
}

// chaos ROUNDS [MODE]: with a watcher up on this script's root, each round
// drops a mix of short, long, failing, killed and canceled runs into the
// spool, SIGKILLs a part of tend at a random moment, and waits until a
// watcher has recovered. Then every run must reach its true final state
// and exit code, each must have run exactly once, its output must be
// whole, and once the watcher is down no process of any run may be left.
// MODE says what each round kills:
//
//   - watcher (the default): the watcher; "tend up" starts the next;
//   - keeper: the keeper; the watcher takes its place and starts the next;
//   - keeper-after-watcher: the watcher, then once a new one has
//     recovered, the keeper: two separate crashes;
//   - together: the watcher and the keeper at once, in the same recovery
//     window. Only there may exit codes be lost: runs that end in the
//     window end failed, as lost or with their status unknown, and are
//     counted, not failed.
//
// TEND_CHAOS_ROUNDS overrides ROUNDS (make chaos); TEND_CHAOS_SEED
// replays a sequence.
func cmdChaos(ts *testscript.TestScript, neg bool, args []string) {
	rounds, err := strconv.Atoi(args[0])
	ts.Check(err)
	if n, err := strconv.Atoi(os.Getenv("TEND_CHAOS_ROUNDS")); err == nil {
		rounds = n
	}
	mode := "watcher"
	if len(args) > 1 {
		mode = args[1]
	}
	kill, ok := chaosModes[mode]
	if !ok {
		ts.Fatalf("chaos: unknown mode %q", mode)
	}
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("TEND_CHAOS_SEED"), 10, 64); err == nil {
		seed = s
	}
	ts.Logf("chaos %s: %d rounds, TEND_CHAOS_SEED=%d", mode, rounds, seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	root := ts.MkAbs(".tend")
	ranLog := ts.MkAbs("ran.log")
	want := make(map[string]chaosRun)
	toCancel := make(map[string]bool)
	for round := 0; round < rounds; round++ {
		for i := range 4 + rng.IntN(8) {
			id := fmt.Sprintf("%s%d-%d", chaosPrefix[mode], round, i)
			body, w := chaosRequest(rng, id, ranLog)
			want[id] = w
			submitFile(ts, root, id+".start", body)
			if w.state == tracker.Canceled {
				toCancel[id] = true
			}
		}
		time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
		cancelStarted(ts, root, ranLog, toCancel)
		kill(ts, rng, root)
	}
	poll(ts, func() string {
		if cancelStarted(ts, root, ranLog, toCancel); len(toCancel) > 0 {
			return fmt.Sprintf("%d runs to cancel have not started", len(toCancel))
		}
		return ""
	})
	checkChaos(ts, root, ranLog, want, mode == "together")
}

// chaosPrefix starts the IDs of each mode's runs, so that modes can
// follow one another on a root.
var chaosPrefix = map[string]string{"watcher": "c", "keeper": "k", "keeper-after-watcher": "a", "together": "t"}

// chaosModes are what a round of each mode of chaos kills, and how it
// waits for a watcher to have recovered.
var chaosModes = map[string]func(ts *testscript.TestScript, rng *rand.Rand, root string){
	"watcher": func(ts *testscript.TestScript, rng *rand.Rand, root string) {
		killWatcher(ts, root)
		time.Sleep(time.Duration(rng.IntN(50)) * time.Millisecond)
		tendUp(ts)
	},
	"keeper": func(ts *testscript.TestScript, rng *rand.Rand, root string) {
		recoverFrom(ts, root, killDaemon(ts, root, tracker.KeeperComm))
	},
	"keeper-after-watcher": func(ts *testscript.TestScript, rng *rand.Rand, root string) {
		recoverFrom(ts, root, killDaemon(ts, root, tracker.WatcherComm))
		time.Sleep(time.Duration(rng.IntN(100)) * time.Millisecond)
		recoverFrom(ts, root, killDaemon(ts, root, tracker.KeeperComm))
	},
	"together": func(ts *testscript.TestScript, rng *rand.Rand, root string) {
		killDaemon(ts, root, tracker.WatcherComm)
		killDaemon(ts, root, tracker.KeeperComm)
		time.Sleep(time.Duration(rng.IntN(50)) * time.Millisecond)
		tendUp(ts)
	},
}

// killDaemon SIGKILLs root's watcher or keeper (by comm), as watcher.json
// names it, and returns the watcher's PID then (0 if none ran).
func killDaemon(ts *testscript.TestScript, root, comm string) int {
	info, err := tracker.ReadWatcherInfo(root)
	if err != nil {
		ts.Fatalf("chaos: %v", err)
	}
	pid := info.PID
	if comm == tracker.KeeperComm {
		pid = info.KeeperPID
	}
	st, err := procfs.ReadStat(pid)
	if err != nil || st.Comm != comm {
		ts.Fatalf("chaos: watcher.json names pid %d as the %s, which it is not", pid, comm)
	}
	h, err := procfs.Open(pid, st.StartTime)
	ts.Check(err)
	defer h.Close()
	h.Signal(syscall.SIGKILL)
	// Gone, its locks with it, before anything follows: a tend up that
	// probed the watcher's lock while the killed watcher still held it
	// said one ran, and none did (a loaded CI machine, 2026-11-29).
	ts.Check(h.WaitExited())
	return info.PID
}

// recoverFrom waits until a watcher other than old takes requests on
// root (see cmdRecovered), its keeper alive: the end of a recovery
// window.
func recoverFrom(ts *testscript.TestScript, root string, old int) {
	poll(ts, func() string {
		info, err := tracker.ReadWatcherInfo(root)
		if err != nil {
			return err.Error()
		}
		return whyNotRecovered(info, map[int]bool{old: true})
	})
}

// cancelStarted drops a cancel request for each run in toCancel that has
// logged its start, so that each is known to have run once, and forgets it.
func cancelStarted(ts *testscript.TestScript, root, ranLog string, toCancel map[string]bool) {
	b, _ := os.ReadFile(ranLog)
	for _, id := range strings.Fields(string(b)) {
		if toCancel[id] {
			submitFile(ts, root, id+".cancel", "")
			delete(toCancel, id)
		}
	}
}

// chaosRequest returns the body of a start request of one random kind,
// and how that run must end. Every run first logs its ID to ranLog, so a
// run started twice shows.
func chaosRequest(rng *rand.Rand, id, ranLog string) (string, chaosRun) {
	code := rng.IntN(4)
	state := tracker.Completed
	if code != 0 {
		state = tracker.Failed
	}
	pre := fmt.Sprintf("echo %s >> %s; echo out-%s; ", id, ranLog, id)
	nap := fmt.Sprintf("sleep 0.%d; ", rng.IntN(10))
	switch rng.IntN(4) {
	case 0:
		return pre + "exit " + strconv.Itoa(code), chaosRun{state: state, code: code}
	case 1:
		return pre + nap + nap + "exit " + strconv.Itoa(code), chaosRun{state: state, code: code}
	case 2:
		return pre + nap + "kill -KILL $$", chaosRun{state: tracker.Failed, signal: "SIGKILL"}
	}
	return pre + "exec sleep 1000", chaosRun{state: tracker.Canceled, signal: "SIGTERM"}
}

// submitFile drops a request into the spool the way a careful shell
// script does: written under a hidden name, then renamed in.
func submitFile(ts *testscript.TestScript, root, name, body string) {
	tmp := filepath.Join(root, "spool", "."+name)
	ts.Check(os.WriteFile(tmp, []byte(body), 0o644))
	ts.Check(os.Rename(tmp, filepath.Join(root, "spool", name)))
}

// killWatcher SIGKILLs the watcher running on root, if one does.
func killWatcher(ts *testscript.TestScript, root string) {
	running, _, err := tracker.ProbeWatcher(root)
	ts.Check(err)
	if !running {
		return
	}
	info, err := tracker.ReadWatcherInfo(root)
	if err != nil {
		return // still starting: it will be killed in a later round
	}
	if st, err := procfs.ReadStat(info.PID); err == nil && st.Comm == tracker.WatcherComm {
		h, err := procfs.Open(info.PID, st.StartTime)
		if err == nil {
			h.Signal(syscall.SIGKILL)
			h.Close()
		}
	}
}

func tendUp(ts *testscript.TestScript) {
	cmd := exec.Command("tend", "up")
	cmd.Dir = ts.MkAbs(".")
	cmd.Env = append(os.Environ(), "PATH="+ts.Getenv("PATH"), "TEND_ROOT=")
	if out, err := cmd.CombinedOutput(); err != nil {
		ts.Fatalf("tend up: %v\n%s", err, out)
	}
}

// checkChaos waits until every run has ended, then checks each against
// want, and that nothing is left running once the watcher is down. With
// mayLose, a run that ended failed with its status unknown (as lost) is
// counted, not failed: only there did the watcher and keeper die
// together.
func checkChaos(ts *testscript.TestScript, root, ranLog string, want map[string]chaosRun, mayLose bool) {
	store := tracker.NewStore(root)
	poll(ts, func() string {
		for id := range want {
			st, err := store.Read(id)
			if err != nil {
				return err.Error()
			}
			if !tracker.Final(st.State) {
				return fmt.Sprintf("run %s is %s\n%s", id, st.State, runDiagnosis(root, id))
			}
		}
		return ""
	})
	ran := make(map[string]int)
	for _, line := range strings.Fields(ts.ReadFile(ranLog)) {
		ran[line]++
	}
	lost := 0
	for id, w := range want {
		st, err := store.Read(id)
		ts.Check(err)
		got := chaosRun{state: st.State, signal: st.Signal, code: -1}
		if st.ExitCode != nil {
			got.code = *st.ExitCode
		}
		if w.signal != "" {
			w.code = -1
		}
		switch {
		case got == w:
		case mayLose && lostStatus(st):
			lost++
		default:
			ts.Fatalf("run %s ended %+v (reason %q), want %+v\n%s", id, got, st.Reason, w, runDiagnosis(root, id))
		}
		if ran[id] != 1 {
			ts.Fatalf("run %s ran %d times", id, ran[id])
		}
		out, _ := os.ReadFile(filepath.Join(store.RunDir(id), "stdout"))
		if string(out) != "out-"+id+"\n" {
			ts.Fatalf("run %s: stdout is %q", id, out)
		}
	}
	if _, errs := store.List(); len(errs) > 0 {
		ts.Fatalf("%v", errs)
	}
	if _, err := tracker.ReadAllHistory(root); err != nil {
		ts.Fatalf("history: %v", err)
	}
	ts.Logf("chaos: %d runs, each ended exactly once; %d lost exit codes, none wrong", len(want), lost)
}

// lostStatus reports whether st ended failed because its exit status was
// lost: what a crash of the watcher and its keeper together may cost.
func lostStatus(st *tracker.State) bool {
	return tracker.Final(st.State) && st.ExitCode == nil && st.Signal == "" &&
		(strings.HasPrefix(st.Reason, "lost:") || strings.Contains(st.Reason, "exit status unknown"))
}

// runDiagnosis gathers what tells why run id is stuck: its files and the
// watcher log's lines about it.
func runDiagnosis(root, id string) string {
	var b strings.Builder
	for _, name := range []string{"request", "state.json"} {
		data, _ := os.ReadFile(filepath.Join(root, "runs", id, name))
		fmt.Fprintf(&b, "--- %s:\n%s\n", name, data)
	}
	_, err := os.Stat(filepath.Join(root, "runs", id, "started"))
	fmt.Fprintf(&b, "--- started: %v\n", err == nil)
	out, _ := exec.Command("ls", "-la", filepath.Join(root, "spool"), filepath.Join(root, "exits"), filepath.Join(root, "outcomes")).CombinedOutput()
	fmt.Fprintf(&b, "--- ls:\n%s\n", out)
	// A deleted run's directory, renamed aside, is named for its ID.
	if name, ok := strings.CutPrefix(id, "."); ok {
		if i := strings.LastIndex(name, ".deleted-"); i > 0 {
			id = name[:i]
		}
	}
	log, _ := os.ReadFile(filepath.Join(root, "watcher.log"))
	for _, line := range strings.Split(string(log), "\n") {
		if strings.Contains(line, " "+id+" ") || strings.Contains(line, " "+id+":") || strings.Contains(line, " "+id+"@") || strings.Contains(line, " "+id+".") || strings.Contains(line, "keeper") || strings.Contains(line, "watching") {
			fmt.Fprintln(&b, line)
		}
	}
	return b.String()
}
