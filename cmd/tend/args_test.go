package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/alecthomas/kong"
)

// TestFlagsFirst: a flag among a command's IDs ends kong's list of them;
// flagsFirst moves the flags before the IDs, their values with them, so
// that every ID is still taken, in the order given.
func TestFlagsFirst(t *testing.T) {
	tests := []struct{ in, want string }{
		{"wait a --timeout 1m b", "wait --timeout 1m a b"},
		{"wait a b --json --any", "wait --json --any a b"},
		{"--root r wait a --timeout=1m b", "--root r wait --timeout=1m a b"},
		{"cancel a --grace 0 b c", "cancel --grace 0 a b c"},
		{"signal a b --session= HUP", "signal --session= a b HUP"},
		{"signal a --json b HUP", "signal --json a b HUP"},
		{"rm a --json b", "rm --json a b"},
		{"label a k=v --json l=", "label --json a k=v l="},
		{"wait a -- -b", "wait -- a -b"},
		{"wait --timeout 1s a -- b --json", "wait --timeout 1s -- a b --json"},
		// Not a list of IDs: unchanged.
		{"start --id x -- echo --json", "start --id x -- echo --json"},
		{"show a --json", "show a --json"},
	}
	for _, tt := range tests {
		args := strings.Fields(tt.in)
		var c cli
		p, err := kong.New(&c, kong.Name("tend"), kong.Vars{"version": "test"})
		if err != nil {
			t.Fatal(err)
		}
		got := flagsFirst(p.Model, args)
		if !slices.Equal(got, strings.Fields(tt.want)) {
			t.Errorf("flagsFirst(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if _, err := p.Parse(got); err != nil {
			t.Errorf("tend %s: %v", strings.Join(got, " "), err)
		}
	}
}
