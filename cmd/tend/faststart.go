package main

import (
	"os"
	"strings"
	"time"
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
	if v, ok := os.LookupEnv("TEND_ROOT"); ok {
		c.Root = v
	}
	if v, ok := os.LookupEnv("TEND_SESSION"); ok {
		c.Start.Session = v
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
	switch name {
	case "--json":
		s.JSON = true
		return !inline
	case "--id", "--cwd", "--session", "--at", "-e", "--env", "-l", "--label", "--after":
		v, ok := next()
		switch name {
		case "--id":
			s.ID = v
		case "--cwd":
			s.Cwd = v
		case "--session":
			s.Session = v
		case "--at":
			s.At = v
			*when++
		case "-e", "--env":
			s.Env = append(s.Env, v)
		case "-l", "--label":
			s.Label = append(s.Label, v)
		case "--after":
			s.After = append(s.After, v)
		}
		return ok && *when < 2
	case "--timeout", "--grace", "--in":
		v, ok := next()
		d, err := time.ParseDuration(v)
		switch name {
		case "--timeout":
			s.Timeout = d
		case "--grace":
			s.Grace = d
		case "--in":
			s.In = d
			*when++
		}
		return ok && err == nil && *when < 2
	}
	return false
}
