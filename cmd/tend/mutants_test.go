//go:build tendmutants

package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	"github.com/tendhq/tend/tracker/durable"
)

// TestPowerLossMutants is make powerloss-mutants (a build with the
// tendmutants tag): the power-loss trial, once for each flush tend makes,
// with that flush left out of every tend process it starts. Each trial
// must find a violation: a flush whose removal nothing notices is either
// not needed or a gap in the trial.
func TestPowerLossMutants(t *testing.T) {
	p := scriptParams("testdata/mutants")
	p.Cmds["mutants"] = cmdMutants
	testscript.Run(t, p)
}

// mutants CUTS: a trial of at most CUTS cuts (TEND_MUTANT_CUTS) for each
// flush, or for those named in TEND_MUTANT_ONLY (comma-separated), each
// stopped at its first violation. It ends with "flushes: K, caught: C"
// and fails if C is not K.
func cmdMutants(ts *testscript.TestScript, neg bool, args []string) {
	cuts, err := strconv.Atoi(args[0])
	ts.Check(err)
	if n, err := strconv.Atoi(os.Getenv("TEND_MUTANT_CUTS")); err == nil {
		cuts = n
	}
	flushes := durable.Flushes()
	if only := os.Getenv("TEND_MUTANT_ONLY"); only != "" {
		flushes = nil
		for _, name := range strings.Split(only, ",") {
			flushes = append(flushes, durable.Flush(name))
		}
	}
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("TEND_POWERLOSS_SEED"), 10, 64); err == nil {
		seed = s
	}
	var missed []string
	for _, f := range flushes {
		t := newTrial(ts, ts.MkAbs(string(f)), seed, string(f))
		t.cuts(cuts)
		t.close()
		if t.violations == 0 {
			missed = append(missed, string(f))
			t.progress("not caught in %d cuts", t.cutNo)
		} else {
			t.progress("caught at cut %d", t.cutNo)
		}
	}
	line := fmt.Sprintf("flushes: %d, caught: %d", len(flushes), len(flushes)-len(missed))
	report(line)
	fmt.Fprintln(os.Stderr, line)
	if len(missed) > 0 {
		ts.Fatalf("%s: not caught: %s (TEND_POWERLOSS_SEED=%d)", line, strings.Join(missed, ", "), seed)
	}
}
