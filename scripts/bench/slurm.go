package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tendhq/tend/tracker"
)

// slurmJobs is how many jobs S1 submits each way.
const slurmJobs = 100

// slurmPoll is how often both ways ask squeue whether the jobs ended:
// tend's slurm.poll_interval, and the loop's own.
const slurmPoll = 250 * time.Millisecond

// s1: 100 short jobs on the one-node cluster of scripts/slurm-local.sh
// (started here, and stopped unless another user of it runs), submitted
// through tend (requests dropped into the spool of a root that sends runs
// to Slurm, until every run is recorded ended) against the same 100
// through sbatch in a loop (until squeue says every one ended), in the
// same run, both asking squeue as often. Every run must end completed,
// its output its own.
func (b *bench) s1() {
	const name = "S1 100 short jobs on Slurm (one node), vs sbatch in a loop"
	conf, err := slurmUp()
	if err != nil {
		b.row(name, "not measured", "-", true, "")
		fmt.Fprintf(os.Stderr, "bench: S1: %v\n", err)
		return
	}
	defer slurmDown()
	os.Setenv("SLURM_CONF", conf)

	floor := sbatchLoop(b.tempDir(b.disk.path, "tend-bench-sbatch-"))

	r := b.upIn(b.tempDir(b.disk.path, "tend-bench-slurm-"),
		[]byte(fmt.Sprintf(`{"slurm": {"default": {}, "poll_interval": %q}}`, slurmPoll)))
	defer r.down()
	start := time.Now()
	for i := range slurmJobs {
		r.drop(fmt.Sprintf("s%d.start", i), fmt.Sprintf("echo %d", i))
	}
	// Every end counts: a job that went wrong is counted wrong below, not
	// waited for until the deadline.
	r.waitStates(slurmJobs, tracker.Completed, tracker.Failed, tracker.Canceled, tracker.TimedOut)
	// The history has an end before the record does (history before
	// state): the run has ended for a client once its record says so.
	store := tracker.NewStore(r.path)
	for i := range slurmJobs {
		id := fmt.Sprintf("s%d", i)
		for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(time.Millisecond) {
			if st, err := store.Read(id); err == nil && tracker.Final(st.State) {
				break
			}
		}
	}
	took := time.Since(start)
	bad := 0
	for i := range slurmJobs {
		id := fmt.Sprintf("s%d", i)
		st, err := store.Read(id)
		out, _ := os.ReadFile(store.Run(id).Stream("stdout"))
		if err != nil || st.State != tracker.Completed || st.ExitCode == nil || *st.ExitCode != 0 || st.Job == nil || string(out) != fmt.Sprintf("%d\n", i) {
			bad++
			if err != nil {
				fmt.Fprintf(os.Stderr, "bench: S1: run %s: %v\n", id, err)
			} else {
				fmt.Fprintf(os.Stderr, "bench: S1: run %s: %s (%s), stdout %q\n", id, st.State, st.Reason, out)
			}
		}
	}
	ratio := took.Seconds() / floor.Seconds()
	b.row(name, fmt.Sprintf("%s, %d wrong", took.Round(10*time.Millisecond), bad), floor.Round(10*time.Millisecond).String(),
		ratio <= 1.2 && bad == 0, fmt.Sprintf("<= 1.2x, all right; is %.2fx", ratio))
}

// sbatchLoop submits slurmJobs jobs with sbatch, one after the other, and
// returns how long until squeue says every one ended.
func sbatchLoop(dir string) time.Duration {
	start := time.Now()
	var ids []string
	for i := range slurmJobs {
		out, err := exec.Command("sbatch", "--parsable", "--output="+filepath.Join(dir, strconv.Itoa(i)), "--chdir="+dir,
			"--wrap", fmt.Sprintf("echo %d", i)).Output()
		check(err)
		ids = append(ids, strings.TrimSpace(string(out)))
	}
	for {
		out, err := exec.Command("squeue", "--noheader", "--states=PENDING,RUNNING,COMPLETING,CONFIGURING", "--format=%i", "--jobs="+strings.Join(ids, ",")).Output()
		if err == nil && strings.TrimSpace(string(out)) == "" {
			return time.Since(start)
		}
		time.Sleep(slurmPoll)
	}
}

// slurmScript is scripts/slurm-local.sh, for bench run from the
// repository's top (make bench).
const slurmScript = "scripts/slurm-local.sh"

// slurmUp starts the one-node cluster (or joins it) and returns its
// SLURM_CONF.
func slurmUp() (string, error) {
	out, err := exec.Command("sh", slurmScript, "up", strconv.Itoa(os.Getpid())).Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return "", fmt.Errorf("%s up: %v: %s", slurmScript, err, exit.Stderr)
	}
	if err != nil {
		return "", err
	}
	conf, ok := strings.CutPrefix(strings.TrimSpace(string(out)), "SLURM_CONF=")
	if !ok {
		return "", fmt.Errorf("%s up printed %q", slurmScript, out)
	}
	return conf, nil
}

// slurmDown lets the cluster go: slurm-local.sh stops it once no other
// holder uses it.
func slurmDown() {
	exec.Command("sh", slurmScript, "down", strconv.Itoa(os.Getpid())).Run()
}
