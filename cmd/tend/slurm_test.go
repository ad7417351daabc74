package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
	"github.com/tendhq/tend/watcher"
	"github.com/tendhq/tend/watcher/cluster"
)

// The Slurm scripts share one cluster on this machine
// (scripts/slurm-local.sh), started by the first that needs it and
// stopped once every script has run.
var slurmCluster struct {
	once sync.Once
	said sync.Once
	conf string // its SLURM_CONF, once up
	skip string // why it cannot run here, if it cannot
	err  error  // why it did not start
}

// slurmScript is scripts/slurm-local.sh.
func slurmScript() string {
	abs, _ := filepath.Abs("../../scripts/slurm-local.sh")
	return abs
}

// startSlurm brings the shared cluster up, once per test process.
func startSlurm() {
	c := &slurmCluster
	c.once.Do(func() {
		cmd := exec.Command("sh", slurmScript(), "up", strconv.Itoa(os.Getpid()))
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		switch {
		case errors.As(err, &exit) && exit.ExitCode() == 3:
			c.skip = strings.TrimSpace(stderr.String())
		case err != nil:
			c.err = fmt.Errorf("slurm-local.sh up: %v: %s", err, stderr.Bytes())
		default:
			conf, ok := strings.CutPrefix(strings.TrimSpace(stdout.String()), "SLURM_CONF=")
			if !ok {
				c.err = fmt.Errorf("slurm-local.sh up printed %q, not SLURM_CONF=...", stdout.String())
			}
			c.conf = conf
		}
	})
}

// stopSlurm stops the shared cluster if this process started it (and no
// other process uses it: see slurm-local.sh).
func stopSlurm(t *testing.T) {
	if slurmCluster.conf == "" {
		return
	}
	if out, err := exec.Command("sh", slurmScript(), "down", strconv.Itoa(os.Getpid())).CombinedOutput(); err != nil {
		t.Errorf("slurm-local.sh down: %v: %s", err, out)
	}
}

// slurmCondition is the condition [slurm]: the shared cluster runs (it
// is started if need be). Where Slurm cannot be installed or run here
// (not root, no apt-get) it is false, and the test log says why, once;
// where TEND_REQUIRE_SLURM is set (CI), that is an error instead, as is a
// cluster that did not start.
func slurmCondition() (bool, error) {
	startSlurm()
	c := &slurmCluster
	switch {
	case c.skip != "" && os.Getenv("TEND_REQUIRE_SLURM") != "":
		return false, fmt.Errorf("%s (and TEND_REQUIRE_SLURM is set)", c.skip)
	case c.skip != "":
		c.said.Do(func() { fmt.Fprintf(os.Stderr, "skipping the Slurm tests: %s\n", c.skip) })
		return false, nil
	case c.err != nil:
		return false, c.err
	}
	return true, nil
}

// cmdSlurm is "slurm up": the script runs on the shared one-node cluster
// (see [slurm]), with SLURM_CONF set for it; whatever jobs of its root
// are left when it ends are canceled.
func cmdSlurm(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 || args[0] != "up" {
		ts.Fatalf("usage: slurm up")
	}
	if ok, err := slurmCondition(); !ok {
		ts.Fatalf("no Slurm cluster here (%v): put [!slurm] skip before slurm up", err)
	}
	ts.Setenv("SLURM_CONF", slurmCluster.conf)
	prefix := rootTagPrefix(ts)
	ts.Defer(func() {
		// Not through ts.Fatalf: a deferred function that fails the
		// script panics the test process, and every script still running
		// with it goes unreported.
		jobs, err := listSlurmJobs(prefix)
		if err != nil {
			ts.Logf("cleanup: %v", err)
		}
		for _, j := range jobs {
			if j.live {
				exec.Command("scancel", j.id).Run()
			}
		}
	})
}

// rootTagPrefix is how the tags of the script's root's jobs begin.
func rootTagPrefix(ts *testscript.TestScript) string {
	root, err := filepath.EvalSymlinks(ts.MkAbs("."))
	ts.Check(err)
	return cluster.TagPrefix(strings.TrimPrefix(watcher.MarkVar(filepath.Join(root, ".tend")), "TEND_MARK_"))
}

type slurmJob struct {
	id, name string
	live     bool
}

// slurmJobs lists the jobs Slurm knows whose names begin with prefix.
func slurmJobs(ts *testscript.TestScript, prefix string) []slurmJob {
	jobs, err := listSlurmJobs(prefix)
	ts.Check(err)
	return jobs
}

// listSlurmJobs is slurmJobs, with squeue's failure returned.
func listSlurmJobs(prefix string) ([]slurmJob, error) {
	cmd := exec.Command("squeue", "--noheader", "--states=all", "--Format=JobID:|,Name:|,State:|")
	cmd.Env = append(os.Environ(), "SLURM_CONF="+slurmCluster.conf)
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("squeue: %w", err)
	}
	var jobs []slurmJob
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(strings.TrimSpace(line), "|")
		if len(f) < 3 || !strings.HasPrefix(f[1], prefix) {
			continue
		}
		state := strings.TrimSpace(f[2])
		live := state == "PENDING" || state == "RUNNING" || state == "COMPLETING" || state == "CONFIGURING" || state == "SUSPENDED"
		jobs = append(jobs, slurmJob{id: strings.TrimSpace(f[0]), name: strings.TrimSpace(f[1]), live: live})
	}
	return jobs, nil
}

// cmdSlurmJobs is "slurmjobs ID N": Slurm knows exactly N jobs of run
// ID of the script's root, its attempts' together. With a single ID of
// "*", of every run of the root.
func cmdSlurmJobs(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: slurmjobs ID N")
	}
	want, err := strconv.Atoi(args[1])
	ts.Check(err)
	prefix := rootTagPrefix(ts)
	if args[0] != "*" {
		prefix += args[0] + "."
	}
	var names []string
	for _, j := range slurmJobs(ts, prefix) {
		names = append(names, j.id+" "+j.name)
	}
	if (len(names) == want) == neg {
		ts.Fatalf("Slurm knows %d jobs of %s, want %d: %v", len(names), args[0], want, names)
	}
}
