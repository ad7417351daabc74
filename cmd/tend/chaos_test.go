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
	"github.com/tendhq/tend/watcher"
)

// chaosRun is what one run of the chaos test must end as.
type chaosRun struct {
	state  tracker.StateName
	code   int    // its exit code, if it exits
	signal string // the signal that kills it, if one does
}

// chaos ROUNDS: with a watcher up on this script's root, each round drops
// a mix of short, long, failing, killed and canceled runs into the spool,
// SIGKILLs the watcher at a random moment, and starts a watcher again with
// "tend up". Then every run must reach its true final state and exit code,
// each must have run exactly once, its output must be whole, and once the
// watcher is down no process of any run may be left. TEND_CHAOS_ROUNDS
// overrides ROUNDS (make chaos); TEND_CHAOS_SEED replays a sequence.
func cmdChaos(ts *testscript.TestScript, neg bool, args []string) {
	rounds, err := strconv.Atoi(args[0])
	ts.Check(err)
	if n, err := strconv.Atoi(os.Getenv("TEND_CHAOS_ROUNDS")); err == nil {
		rounds = n
	}
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("TEND_CHAOS_SEED"), 10, 64); err == nil {
		seed = s
	}
	ts.Logf("chaos: %d rounds, TEND_CHAOS_SEED=%d", rounds, seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	root := ts.MkAbs(".tend")
	ranLog := ts.MkAbs("ran.log")
	want := make(map[string]chaosRun)
	toCancel := make(map[string]bool)
	for round := 0; round < rounds; round++ {
		for i := range 4 + rng.IntN(8) {
			id := fmt.Sprintf("c%d-%d", round, i)
			body, w := chaosRequest(rng, id, ranLog)
			want[id] = w
			submitFile(ts, root, id+".start", body)
			if w.state == tracker.Canceled {
				toCancel[id] = true
			}
		}
		time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
		cancelStarted(ts, root, ranLog, toCancel)
		killWatcher(ts, root)
		time.Sleep(time.Duration(rng.IntN(50)) * time.Millisecond)
		tendUp(ts)
	}
	poll(ts, func() string {
		if cancelStarted(ts, root, ranLog, toCancel); len(toCancel) > 0 {
			return fmt.Sprintf("%d runs to cancel have not started", len(toCancel))
		}
		return ""
	})
	checkChaos(ts, root, ranLog, want)
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
	running, _, err := watcher.Probe(root)
	ts.Check(err)
	if !running {
		return
	}
	info, err := watcher.ReadInfo(root)
	if err != nil {
		return // still starting: it will be killed in a later round
	}
	if st, err := procfs.ReadStat(info.PID); err == nil && st.Comm == watcher.WatcherComm {
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
// want, and that nothing is left running once the watcher is down.
func checkChaos(ts *testscript.TestScript, root, ranLog string, want map[string]chaosRun) {
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
		if got != w {
			ts.Fatalf("run %s ended %+v (reason %q), want %+v\n%s", id, got, st.Reason, w, ts.ReadFile(filepath.Join(store.RunDir(id), "request")))
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
	ts.Logf("chaos: %d runs, each ended as it should, exactly once", len(want))
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
	log, _ := os.ReadFile(filepath.Join(root, "watcher.log"))
	for _, line := range strings.Split(string(log), "\n") {
		if strings.Contains(line, " "+id+" ") || strings.Contains(line, " "+id+":") || strings.Contains(line, "keeper") || strings.Contains(line, "watching") {
			fmt.Fprintln(&b, line)
		}
	}
	return b.String()
}
