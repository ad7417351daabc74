package main

import (
	"bytes"
	"io"
	"reflect"
	"regexp"
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
				var whole, only cli
				var cmds [2]string
				var targets [2]any
				for i, opts := range [][]kong.Option{nil, {onlyCommand(words[1:])}} {
					c := &whole
					if i == 1 {
						c = &only
					}
					p, err := kong.New(c, append(opts, kong.Name("tend"), kong.Vars{"version": "test"}, kong.Exit(func(int) {}), kong.Writers(io.Discard, io.Discard))...)
					if err != nil {
						t.Fatal(err)
					}
					ctx, err := p.Parse(words[1:])
					if err != nil {
						t.Errorf("tend %s --help: example %q: %v", n.Name, strings.Join(words, " "), err)
						continue
					}
					cmds[i] = ctx.Command()
					if sel := ctx.Selected(); sel != nil {
						targets[i] = sel.Target.Interface()
					}
				}
				globals := func(c cli) [4]any { return [4]any{c.Root, c.Version, c.NoStart, c.Color} }
				if cmds[0] != cmds[1] || !reflect.DeepEqual(targets[0], targets[1]) || globals(whole) != globals(only) {
					t.Errorf("example %q: the whole model parses %q %+v, the one command's %q %+v", strings.Join(words, " "), cmds[0], targets[0], cmds[1], targets[1])
				}
			}
		}
	}
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
