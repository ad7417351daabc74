package main

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/alecthomas/kong"
	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
)

type completionCmd struct {
	Shell string `arg:"" enum:"bash,zsh,fish" help:"bash, zsh or fish."`
}

func (c *completionCmd) Help() string {
	return `Prints a completion script: commands, flags, run IDs (from the root the
command line names), states and signal names. Examples:
  source <(tend completion bash)                     # in ~/.bashrc
  tend completion zsh > "${fpath[1]}/_tend"          # then restart zsh
  tend completion fish > ~/.config/fish/completions/tend.fish`
}

// The scripts ask tend itself (the hidden __complete command) for the
// words that fit, so they know what this binary knows, and run IDs.
var completionScripts = map[string]string{
	"bash": `# bash completion for tend
_tend() {
	local IFS=$'\n'
	COMPREPLY=($(compgen -W "$(tend __complete -- "${COMP_WORDS[@]:1:COMP_CWORD}" 2>/dev/null)" -- "${COMP_WORDS[COMP_CWORD]}"))
}
complete -o default -F _tend tend
`,
	"zsh": `#compdef tend
# zsh completion for tend
_tend() {
	local -a words_
	words_=("${(@f)$(tend __complete -- "${(@)words[2,CURRENT]}" 2>/dev/null)}")
	compadd -a words_
}
if [ "$funcstack[1]" = "_tend" ]; then _tend "$@"; else compdef _tend tend; fi
`,
	"fish": `# fish completion for tend
complete -c tend -f -a '(tend __complete -- (commandline -opc)[2..-1] (commandline -ct) 2>/dev/null)'
`,
}

func (c *completionCmd) Run(e *env) error {
	_, err := fmt.Fprint(e.stdout, completionScripts[c.Shell])
	return err
}

// completeCmd prints, one a line, the words that can complete the last of
// Words (the command line after "tend", the word being completed last).
type completeCmd struct {
	Words []string `arg:"" optional:"" passthrough:""`
}

func (c *completeCmd) Run(e *env, k *kong.Context) error {
	for _, w := range completions(k.Model.Node, c.Words, e.root) {
		fmt.Fprintln(e.stdout, w)
	}
	return nil
}

// completions returns the words that can complete the last of words.
func completions(app *kong.Node, words []string, root string) []string {
	if len(words) > 0 && words[0] == "--" {
		words = words[1:]
	}
	if len(words) == 0 {
		words = []string{""}
	}
	cur, before := words[len(words)-1], words[:len(words)-1]
	node := app
	var prevFlag *kong.Flag
	args := 0 // positional arguments of node given so far
	for _, w := range before {
		if f := findFlag(node, app, w); f != nil {
			if v, ok := strings.CutPrefix(w, "--root="); ok {
				root = v
			}
			prevFlag = nil
			if !f.IsBool() && !strings.Contains(w, "=") {
				prevFlag = f
			}
			continue
		}
		if prevFlag != nil { // the flag's value
			if prevFlag.Name == "root" {
				root = w // IDs from the root the command line names
			}
			prevFlag = nil
			continue
		}
		if child := findChild(node, w); child != nil {
			node, args = child, 0
			continue
		}
		args++
	}
	var out []string
	add := func(ws ...string) {
		for _, w := range ws {
			if strings.HasPrefix(w, cur) {
				out = append(out, w)
			}
		}
	}
	switch {
	case prevFlag != nil:
		add(flagValues(prevFlag, root)...)
	case strings.HasPrefix(cur, "-"):
		for _, n := range []*kong.Node{node, app} {
			for _, f := range n.Flags {
				if !f.Hidden {
					add("--" + f.Name)
				}
			}
			if n == app {
				break
			}
		}
	case node == app:
		for _, child := range app.Children {
			if !child.Hidden {
				add(child.Name)
			}
		}
	case len(node.Positional) > 0:
		p := node.Positional[min(args, len(node.Positional)-1)]
		if args < len(node.Positional) || p.IsSlice() {
			switch p.Name {
			case "id", "ids":
				add(runIDs(root)...)
			case "shell":
				add("bash", "zsh", "fish")
			case "signal":
				add(signalNames...)
				add(runIDs(root)...) // tend signal ID... SIG: more runs first
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func findChild(n *kong.Node, name string) *kong.Node {
	for _, c := range n.Children {
		if c.Name == name || slices.Contains(c.Aliases, name) {
			return c
		}
	}
	return nil
}

func findFlag(n, app *kong.Node, word string) *kong.Flag {
	if !strings.HasPrefix(word, "-") {
		return nil
	}
	name, _, _ := strings.Cut(strings.TrimLeft(word, "-"), "=")
	for _, node := range []*kong.Node{n, app} {
		for _, f := range node.Flags {
			if f.Name == name || len(word) == 2 && f.Short == rune(word[1]) {
				return f
			}
		}
	}
	return nil
}

// flagValues completes the value of flag f.
func flagValues(f *kong.Flag, root string) []string {
	switch {
	case f.Enum != "":
		return strings.Split(f.Enum, ",")
	case f.Name == "state":
		return stateNames()
	case f.Name == "root":
		return nil // the shell's own file completion is better
	}
	return nil
}

// stateNames returns tracker.States as strings, for completion.
func stateNames() []string {
	names := make([]string, len(tracker.States))
	for i, s := range tracker.States {
		names[i] = string(s)
	}
	return names
}

var signalNames = []string{"HUP", "INT", "QUIT", "KILL", "USR1", "USR2", "TERM", "WINCH"}

// runIDs lists the runs in root, from the directory names alone: it is
// asked at every Tab, and reads no record.
func runIDs(root string) []string {
	ents, _ := os.ReadDir(tracker.NewStore(root).Dir())
	var ids []string
	for _, e := range ents {
		if e.IsDir() && spool.ValidID(e.Name()) == nil {
			ids = append(ids, e.Name())
		}
	}
	return ids
}
