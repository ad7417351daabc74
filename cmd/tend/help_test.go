package main

import (
	"bytes"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"
)

// TestEveryCommandHasAnExample: #9 asks for --help with a short example on
// every command; an example is a line that runs tend.
func TestEveryCommandHasAnExample(t *testing.T) {
	var c cli
	parser, err := kong.New(&c, kong.Name("tend"), kong.Vars{"version": "test"})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range parser.Model.Node.Children {
		if n.Hidden {
			continue
		}
		d := strings.Join(strings.Fields(n.Detail), " ")
		if !strings.Contains(d, "Example: tend ") && !strings.Contains(d, "Examples: tend ") && !strings.Contains(d, "Examples: source <(tend ") {
			t.Errorf("tend %s --help has no example (\"Example: tend ...\"):\n%s", n.Name, n.Detail)
		}
	}
}

// Every example in a command's help is shown on a line of its own, whole,
// so that it can be pasted: kong reflows a paragraph, but not the lines
// indented under "Example:" or "Examples:".
func TestHelpExamplesAreWhole(t *testing.T) {
	var c cli
	var out bytes.Buffer
	parser, err := kong.New(&c, kong.Name("tend"), kong.Vars{"version": "test"}, kong.Writers(&out, &out), kong.Exit(func(int) {}))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range parser.Model.Node.Children {
		if n.Hidden {
			continue
		}
		out.Reset()
		parser.Parse([]string{n.Name, "--help"})
		shown := out.String()
		for _, ex := range examples(n.Detail) {
			if !strings.Contains(shown, "\n    "+ex+"\n") && !strings.Contains(shown, "\n    "+ex+" ") {
				t.Errorf("tend %s --help does not show %q on a line of its own:\n%s", n.Name, ex, shown)
			}
		}
	}
}

// examples returns the commands a help text gives as examples: the text
// after "Example:" on its line, and the lines indented under it.
func examples(detail string) []string {
	var out []string
	in := false
	for _, line := range strings.Split(detail, "\n") {
		switch {
		case exampleHead.MatchString(line):
			in = true
			if ex := strings.TrimSpace(exampleHead.FindStringSubmatch(line)[1]); ex != "" {
				out = append(out, ex)
			}
		case in && strings.HasPrefix(line, "  "):
			ex, _, _ := strings.Cut(strings.TrimSpace(line), "  #")
			out = append(out, strings.TrimSpace(ex))
		default:
			in = false
		}
	}
	return out
}

var exampleHead = regexp.MustCompile(`Examples?:(.*)$`)

// Every --help prints what was written, so that what it shows can be
// pasted: kong's renderer (go/doc) turns two single quotes, or two
// backquotes, into a typographic quote, which a shell passes on as it is
// (--session ” names the session ”, not the empty one).
func TestHelpHasNoTypographicQuotes(t *testing.T) {
	var c cli
	var out bytes.Buffer
	parser, err := kong.New(&c, kong.Name("tend"), kong.Vars{"version": "test"}, kong.Writers(&out, &out), kong.Exit(func(int) {}))
	if err != nil {
		t.Fatal(err)
	}
	helps := [][]string{{"--help"}}
	for _, n := range parser.Model.Node.Children {
		helps = append(helps, []string{n.Name, "--help"})
	}
	for _, args := range helps {
		out.Reset()
		parser.Parse(args)
		for i, line := range strings.Split(out.String(), "\n") {
			if strings.ContainsAny(line, "\u201c\u201d\u2018\u2019") {
				t.Errorf("tend %s: line %d has a typographic quote (write --session= or \"\" in the help, not ''):\n%s", strings.Join(args, " "), i+1, line)
			}
		}
	}
}

// Every tend command in a help example parses: its flags and arguments
// are the command's own (the words are split as sh would, at && || ; |
// and braces).
func TestHelpExamplesParse(t *testing.T) {
	var c cli
	parser, err := kong.New(&c, kong.Name("tend"), kong.Vars{"version": "test"})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range parser.Model.Node.Children {
		for _, ex := range examples(n.Detail) {
			for _, words := range simpleCommands(ex) {
				if len(words) == 0 || words[0] != "tend" {
					continue
				}
				// Parsed by the whole model, and by the one command's
				// that tend builds (onlyCommand): the same.
				whole, only := parseBoth(t, words[1:])
				if whole.err != "" {
					t.Errorf("tend %s --help: example %q: %v", n.Name, strings.Join(words, " "), whole.err)
					continue
				}
				if !reflect.DeepEqual(whole, only) {
					t.Errorf("example %q: the whole model parses %+v, the one command's %+v", strings.Join(words, " "), whole, only)
				}
			}
		}
	}
}

// TestOnlyCommandParsesAsWhole: the model onlyCommand has kong build (the
// one command, without the flag groups args name no flag of) parses what
// the whole model does, to the same request, or fails with the same
// error and suggestion.
func TestOnlyCommandParsesAsWhole(t *testing.T) {
	for _, line := range []string{
		"start -- true",
		"start --id x --json -e A=1 -l k=v --timeout 2s --grace 1s -- sleep 1",
		"start --restart always -- ./serve",
		"start --restart=on-failure --restart-limit 3 -- ./serve",
		"start --restart-limit 3 -- ./serve",
		"start --health-tcp localhost:80 --health-retries 2 -- ./serve",
		"start --ready-file -- ./serve",
		"start --slurm -- ./job",
		"start --cpus=4 --mem 8G -- ./job",
		"start --local -- ./job",
		"start --restart always --cpus 2 -- ./job",
		"start --restrat always -- ./serve",
		"start --restart-limt 3 -- ./serve",
		"start --cpu 3 -- ./job",
		"start --bogus -- x",
		"start -- grep --restart-limit file",
		"start ls -l --cpus",
		"start --at 10:00 --in 1m -- x",
		"start --timeout nope -- x",
		"--root /tmp/r --no-start start --session s -- x",
		"--color=never start --json -- x",
		"cancel --all --session s",
		"ls --all --json",
	} {
		whole, only := parseBoth(t, strings.Fields(line))
		if !reflect.DeepEqual(whole, only) {
			t.Errorf("tend %s: the whole model parses\n%+v\nthe one command's\n%+v", line, whole, only)
		}
	}
}

// parsed is what tend does with a command line: the command, tend's own
// flags, and the command's fields, or for start (whose flag groups that
// no word names onlyCommand leaves at their zero values, see
// unnamedGroups) the request it builds; or the error.
type parsed struct {
	cmd     string
	globals [4]any
	target  any
	err     string
}

// parseBoth parses args with the whole model and with onlyCommand's.
func parseBoth(t *testing.T, args []string) (whole, only parsed) {
	t.Helper()
	return parseWith(t, args), parseWith(t, args, onlyCommand(args))
}

// parseWith parses args with kong and opts.
func parseWith(t *testing.T, args []string, opts ...kong.Option) parsed {
	t.Helper()
	var c cli
	p, err := kong.New(&c, append(opts, kong.Name("tend"), kong.Vars{"version": "test"}, kong.Exit(func(int) {}), kong.Writers(io.Discard, io.Discard))...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := p.Parse(args)
	if err != nil {
		return parsed{err: err.Error()}
	}
	var target any
	if sel := ctx.Selected(); sel != nil {
		target = sel.Target.Interface()
	}
	return parsedAs(ctx.Command(), &c, target)
}

// parsedAs returns what c and target, parsed as command, say.
func parsedAs(command string, c *cli, target any) parsed {
	got := parsed{cmd: command, globals: [4]any{c.Root, c.Version, c.NoStart, c.Color}, target: target}
	if s, ok := target.(startCmd); ok {
		req, err := s.request(s.args(), io.Discard)
		body, _ := req.MarshalJSON()
		id := "(none)"
		if s.ID != nil {
			id = strconv.Quote(*s.ID)
		}
		got.target = fmt.Sprintf("id %s, json %v: %s, %v", id, s.JSON, body, err)
	}
	return got
}

// simpleCommands splits a shell line into its simple commands' words,
// with quotes and redirections removed; a comment ends it.
func simpleCommands(line string) [][]string {
	var cmds [][]string
	var words []string
	var word strings.Builder
	inWord, redirect := false, false
	endWord := func() {
		if inWord && !redirect {
			words = append(words, word.String())
		}
		if inWord {
			word.Reset()
			inWord, redirect = false, false
		}
	}
	endCmd := func() {
		endWord()
		cmds = append(cmds, words)
		words = nil
	}
	for i := 0; i < len(line); i++ {
		switch ch := line[i]; {
		case ch == '\'':
			j := strings.IndexByte(line[i+1:], '\'')
			word.WriteString(line[i+1 : i+1+j])
			inWord, i = true, i+1+j
		case ch == '"':
			j := strings.IndexByte(line[i+1:], '"')
			word.WriteString(line[i+1 : i+1+j])
			inWord, i = true, i+1+j
		case ch == '#' && !inWord:
			endCmd()
			return cmds
		case ch == ' ' || ch == '\t':
			endWord()
		case ch == '>' || ch == '<':
			endWord()
			redirect = true
		case strings.IndexByte(";|&{}", ch) >= 0:
			endCmd()
		default:
			word.WriteByte(ch)
			inWord = true
		}
	}
	endCmd()
	return cmds
}

func TestParseAt(t *testing.T) {
	loc := time.FixedZone("X", 3600)
	now := time.Date(2026, 11, 26, 14, 30, 0, 0, loc)
	for _, tt := range []struct {
		in, want string // want in RFC 3339; "" for an error
	}{
		{"22:00", "2026-11-26T22:00:00+01:00"},
		{"14:30", "2026-11-27T14:30:00+01:00"}, // now: the next one
		{"09:15:30", "2026-11-27T09:15:30+01:00"},
		{"2026-12-01T08:00:00Z", "2026-12-01T08:00:00Z"},
		{"25:00", ""},
		{"tomorrow", ""},
	} {
		got, err := parseAt(tt.in, now)
		if tt.want == "" {
			if err == nil {
				t.Errorf("parseAt(%q) = %v, want an error", tt.in, got)
			}
			continue
		}
		if err != nil || got.Format(time.RFC3339) != tt.want {
			t.Errorf("parseAt(%q) = %v, %v; want %s", tt.in, got.Format(time.RFC3339), err, tt.want)
		}
	}
}

// TestFlagNamesAreKongs: flagName names every flag of tend and of its
// commands as kong does, which unnamedGroups relies on.
func TestFlagNamesAreKongs(t *testing.T) {
	var c cli
	parser, err := kong.New(&c, kong.Name("tend"), kong.Vars{"version": "test"})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range append([]*kong.Node{parser.Model.Node}, parser.Model.Node.Children...) {
		flags := map[string]bool{}
		for _, f := range n.Flags {
			flags[f.Name] = true
		}
		eachField(n.Target.Type(), func(f reflect.StructField) {
			_, cmd := f.Tag.Lookup("cmd")
			_, arg := f.Tag.Lookup("arg")
			if !cmd && !arg && f.IsExported() && !flags[flagName(f)] {
				t.Errorf("%s: field %s: flagName says --%s, which kong does not have", n.Name, f.Name, flagName(f))
			}
		})
	}
}

// TestUnnamedGroups: start's service and Slurm flags are left out of its
// model unless a word names one of their group; an unknown flag leaves
// them all in.
func TestUnnamedGroups(t *testing.T) {
	start := reflect.TypeFor[startCmd]()
	groups := func(args string) string {
		var got []string
		for _, f := range unnamedGroups(reflect.TypeFor[cli](), start, strings.Fields(args)) {
			got = append(got, f)
		}
		return strings.Join(got, " ")
	}
	services := "Restart RestartLimit RestartWindow RestartDelay HealthTCP HealthHTTP HealthExec HealthInterval HealthRetries HealthStartPeriod ReadyFile"
	slurm := "Slurm SlurmPartition CPUs Mem GPUs Nodes SlurmTime Account QOS Constraint SbatchArg Local"
	for _, tc := range []struct{ args, want string }{
		{"start -- true", services + " " + slurm},
		{"--root r start --id x --json -e A=1 -- true", services + " " + slurm},
		{"start --restart-limit=3 -- x", slurm},
		{"start --health-http http://x -- x", slurm},
		{"start --gpus 1 -- x", services},
		{"start --restart always --local -- x", ""},
		{"start --restrat always -- x", ""},
		{"start -- x --bogus", ""},
	} {
		if got := groups(tc.args); got != tc.want {
			t.Errorf("tend %s: left out %q, want %q", tc.args, got, tc.want)
		}
	}
}
