package main

import (
	"bytes"
	"testing"

	"github.com/tendhq/tend/tracker"
)

// TestFsckPrintLeft: after a repair, each problem still found is printed
// once, with why the repair left it where it says; what it left and the
// check no longer finds is printed once too, every why of its path on
// one line.
func TestFsckPrintLeft(t *testing.T) {
	var out bytes.Buffer
	problems := []tracker.Problem{{Path: "a", What: "lost"}, {Path: "b", What: "odd"}}
	left := []tracker.Problem{{Path: "a", What: "nowhere to take it back from"}, {Path: "c", What: "one"}, {Path: "c", What: "two"}}
	(&fsckCmd{Repair: true}).printLeft(&env{stdout: &out}, problems, left)
	want := "not repaired: a: lost; nowhere to take it back from\nnot repaired: b: odd\nnot repaired: c: one; two\n"
	if out.String() != want {
		t.Errorf("printed\n%swant\n%s", out.String(), want)
	}
	out.Reset()
	(&fsckCmd{Repair: true, JSON: true}).printLeft(&env{stdout: &out}, problems, left)
	if out.Len() > 0 {
		t.Errorf("with --json, printed %q", out.String())
	}
}
