package main

import (
	"os"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// fastStart parses args as kong parses them (with onlyCommand) when they
// are a tend start line of the usual shape: tend's own flags, start's
// flags outside its service and Slurm groups, each as --name VALUE,
// --name=VALUE, -e VALUE or -l VALUE, then the command. It reports false
// for anything else (help, another command, a flag it does not know, a
// value kong would refuse), which kong then parses and answers.
//
// Building kong's model of start and parsing with it cost about 2 ms of
// CPU a call, more than the rest of what tend start does in the client,
// and scripts call tend start in loops (docs/performance.md, round 23).
// TestFastStartIsKongs holds the two to the same result.
func fastStart(args []string) (*cli, bool) {
	c := &cli{Color: "auto"}
	root, hasRoot := os.LookupEnv("TEND_ROOT")
	session, hasSession := os.LookupEnv("TEND_SESSION")
	// kong passes every string through JSON, which makes bytes that are
	// not UTF-8 into U+FFFD: a root so named would be another directory
	// for start than for every other command.
	if !utf8.ValidString(root) || !utf8.ValidString(session) || slices.ContainsFunc(args, func(a string) bool { return !utf8.ValidString(a) }) {
		return nil, false
	}
	if hasRoot {
		c.Root = root
	}
	if hasSession {
		c.Start.Session = session
	}
	s := &c.Start
	inStart, when := false, 0
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case !inStart && a == "start":
			inStart = true
			continue
		case inStart && (a == "--" || !strings.HasPrefix(a, "-")):
			s.Command = args[i:]
			return c, len(s.args()) > 0
		}
		name, value, inline := strings.Cut(a, "=")
		if inline && !strings.HasPrefix(name, "--") {
			return nil, false // -e=V: kong's short flags, left to kong
		}
		// next returns the flag's value: after "=", or the next word, if
		// that is one kong takes as a value.
		next := func() (string, bool) {
			if inline {
				return value, true
			}
			if i+1 == len(args) || strings.HasPrefix(args[i+1], "-") {
				return "", false
			}
			i++
			return args[i], true
		}
		var ok bool
		switch name {
		case "--no-start":
			c.NoStart, ok = true, !inline
		case "--root":
			c.Root, ok = next()
		case "--color":
			c.Color, ok = next()
			ok = ok && (c.Color == "auto" || c.Color == "always" || c.Color == "never")
		default:
			if inStart {
				ok = fastStartFlag(s, name, inline, next, &when)
			}
		}
		if !ok {
			return nil, false
		}
	}
	return nil, false // no command
}

// fastStartFlag sets start's flag name, whose value next returns; it
// reports false where kong would refuse it or fastStart leaves it to kong.
func fastStartFlag(s *startCmd, name string, inline bool, next func() (string, bool), when *int) bool {
	if name == "--json" {
		s.JSON = true
		return !inline
	}
	if name == "--id" {
		id, ok := next()
		s.ID = &id
		return ok
	}
	text := map[string]*string{"--cwd": &s.Cwd, "--session": &s.Session, "--at": &s.At}[name]
	list := map[string]*[]string{"-e": &s.Env, "--env": &s.Env, "-l": &s.Label, "--label": &s.Label, "--after": &s.After}[name]
	if name == "--grace" {
		s.Grace = new(time.Duration) // set, even to 0: no grace
	}
	duration := map[string]*time.Duration{"--timeout": &s.Timeout, "--grace": s.Grace, "--in": &s.In}[name]
	if text == nil && list == nil && duration == nil {
		return false
	}
	if name == "--at" || name == "--in" {
		*when++ // xor:"when": kong refuses both
	}
	v, ok := next()
	switch {
	case text != nil:
		*text = v
	case list != nil:
		*list = append(*list, v)
	default:
		d, err := time.ParseDuration(v)
		*duration, ok = d, ok && err == nil
	}
	return ok && *when < 2
}
