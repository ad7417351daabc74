package main

import (
	"math/rand/v2"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/alecthomas/kong"
)

// kongStart parses args as run does without fastStart: kong, with
// onlyCommand's model. It returns the parsed command line, or false if
// kong refuses it or it names no start.
func kongStart(t *testing.T, args []string) (*cli, bool) {
	t.Helper()
	var c cli
	p, err := kong.New(&c, kong.Name("tend"), kong.Vars{"version": "test"}, kong.Exit(func(int) {}), onlyCommand(args))
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := p.Parse(args)
	if err != nil || !strings.HasPrefix(ctx.Command(), "start") {
		return nil, false
	}
	return &c, true
}

// sameAsKong fails t unless fastStart and kong parse args alike: when
// fastStart takes a line, kong takes it too, into the same fields, and
// start builds the same request from them.
func sameAsKong(t *testing.T, args []string) (fast bool) {
	t.Helper()
	got, ok := fastStart(args)
	if !ok {
		return false
	}
	want, kongOK := kongStart(t, args)
	if !kongOK {
		t.Errorf("tend %q: fastStart takes it, kong refuses it", args)
		return true
	}
	if g, w := startFields(got), startFields(want); !reflect.DeepEqual(g, w) {
		t.Errorf("tend %q:\nfastStart %+v\nkong      %+v", args, g, w)
	}
	if g, w := parsedAs("start", got, got.Start), parsedAs("start", want, want.Start); g != w {
		t.Errorf("tend %q: the request differs:\nfastStart %v\nkong      %v", args, g, w)
	}
	return true
}

// startFields returns what tend start reads of c: tend's flags, and
// start's outside its flag groups, which it reads only when a flag of
// theirs is given (and fastStart leaves such a line to kong).
func startFields(c *cli) []any {
	out := []any{c.Root, c.Version, c.NoStart, c.Color}
	v := reflect.ValueOf(c.Start)
	for i := range v.NumField() {
		if v.Type().Field(i).Tag.Get("group") == "" {
			out = append(out, v.Field(i).Interface())
		}
	}
	return out
}

func TestFastStartIsKongs(t *testing.T) {
	for _, name := range []string{"TEND_ROOT", "TEND_SESSION"} {
		t.Setenv(name, "") // restored at the end
		os.Unsetenv(name)
	}
	// What scripts, the README and the bench write: each must take the
	// fast path.
	for _, line := range []string{
		"start -- true",
		"start true",
		"start make test",
		"start ls -l --json",
		"start -- ls -l /",
		"start --id nap -- sleep 5",
		"--root /tmp/r start --id w7-1 -- true",
		"start --root /tmp/r --id=x --json -- true",
		"start -e LIST=a,b -l kind=demo --env A=1 --label k=v -- echo",
		"start --timeout 2s --grace=1s -- sleep 60",
		"start --after build --after lint:ended --in 10m -- ./deploy",
		"start --at 22:00 -- ./deploy",
		"start --cwd /tmp --session s1 -- pwd",
		"--no-start --color never start -- true",
		"start --color=always -- true",
		"start -- --help",
		"start -- -",
	} {
		if !sameAsKong(t, strings.Fields(line)) {
			t.Errorf("tend %s: not taken by fastStart", line)
		}
	}
	// What it must leave to kong: help, errors, flags of the groups, and
	// anything else it does not know.
	for _, line := range []string{
		"start",
		"start --",
		"start --help -- true",
		"start -h true",
		"--version start true",
		"start --restart always -- ./serve",
		"start --cpus 2 -- ./job",
		"start --bogus -- x",
		"start --timeout nope -- x",
		"start --timeout -- x",
		"start --id -x -- y",
		"start --json=true -- x",
		"start -e=A=1 -- x",
		"start -eA=1 -- x",
		"start --at 10:00 --in 1m -- x",
		"start --color blue -- x",
		"--id x start -- true",
		"ls --all",
		"cancel --all",
	} {
		if _, ok := fastStart(strings.Fields(line)); ok {
			t.Errorf("tend %s: taken by fastStart, which should leave it to kong", line)
		}
	}
	// Lines made at random from the words that matter, with TEND_ROOT and
	// TEND_SESSION unset, empty, set and not UTF-8: whatever fastStart
	// takes, kong parses alike.
	words := []string{"start", "start", "--", "--", "true", "x", "a=b", "1s", "-1s", "5", "", "-", "-x", "10:00",
		"--root", "--root=", "--root=/r", "--no-start", "--no-start=1", "--color", "--color=never", "auto", "never",
		"--id", "--id=", "--json", "--cwd", "-e", "--env", "--env=A=1", "-l", "--label", "--after", "--after=b:ended",
		"--timeout", "--timeout=0", "--grace", "--in", "--in=1h", "--at", "--session", "--help", "--version", "-h",
		"--restart", "--slurm", "--idx", "ls", "r\xff", "--root=r\xff", "\xe2\x82"}
	r := rand.New(rand.NewPCG(1, 2))
	for _, value := range []*string{nil, ptr(""), ptr("s1"), ptr("r\xff")} {
		for _, name := range []string{"TEND_ROOT", "TEND_SESSION"} {
			if value == nil {
				os.Unsetenv(name)
			} else {
				os.Setenv(name, *value)
			}
		}
		fast := 0
		for range 2000 {
			args := make([]string, r.IntN(9))
			for i := range args {
				args[i] = words[r.IntN(len(words))]
			}
			if r.IntN(3) > 0 {
				args = append([]string{"start"}, args...)
			}
			if sameAsKong(t, args) {
				fast++
			}
		}
		if value == nil || *value != "r\xff" {
			if fast < 200 {
				t.Errorf("fastStart took %d of 2000 random lines: too few to compare", fast)
			}
		} else if fast > 0 {
			t.Errorf("fastStart took %d lines with an environment that is not UTF-8", fast)
		}
	}
}

func ptr(s string) *string {
	return &s
}
