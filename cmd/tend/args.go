package main

import (
	"slices"
	"strings"

	"github.com/alecthomas/kong"
)

// flagsFirst returns args with the flags of a command whose last
// argument is a list (wait, cancel, signal, rm, label, note) moved before its
// arguments, so that "tend wait a --timeout 1m b" waits for a and b.
// kong ends a list argument at the first flag, and refused every word
// after it as an "unexpected argument": a script that appends IDs to a
// command line with its flags in it failed with a usage error. The
// order of the arguments, and of the flags, is kept; everything after
// "--" stays an argument (and "--" moves before the first). Other commands' args are returned unchanged
// (start's command is its own, flags and all).
func flagsFirst(app *kong.Application, args []string) []string {
	word, ok := commandWord(args)
	if !ok {
		return args
	}
	cmd := childNamed(app.Node, word)
	if cmd == nil || len(cmd.Positional) == 0 {
		return args
	}
	if last := cmd.Positional[len(cmd.Positional)-1]; !last.IsSlice() || last.Passthrough {
		return args
	}
	at := slices.Index(args, word)
	flags := slices.Clone(args[:at+1])
	var rest, after []string
	for i := at + 1; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			// Every word, before and after, is an argument then: kong
			// reads one list, which must follow the flags.
			after = args[i:]
			i = len(args)
		case len(a) > 1 && strings.HasPrefix(a, "-"):
			flags = append(flags, a)
			if takesValue(app.Node, cmd, a) && i+1 < len(args) {
				i++
				flags = append(flags, args[i])
			}
		default:
			rest = append(rest, a)
		}
	}
	if after != nil {
		return slices.Concat(flags, after[:1], rest, after[1:])
	}
	return append(flags, rest...)
}

// childNamed returns node's command called name, or nil.
func childNamed(node *kong.Node, name string) *kong.Node {
	for _, c := range node.Children {
		if c.Type == kong.CommandNode && (c.Name == name || slices.Contains(c.Aliases, name)) {
			return c
		}
	}
	return nil
}

// takesValue reports whether flag, as written ("--timeout", "-t"; not
// "--timeout=1m"), is one of cmd's or the global flags that takes its
// value from the next word. An unknown flag takes none: kong refuses it.
func takesValue(global, cmd *kong.Node, flag string) bool {
	if strings.Contains(flag, "=") {
		return false
	}
	for _, f := range slices.Concat(global.Flags, cmd.Flags) {
		named := flag == "--"+f.Name || (f.Short != 0 && flag == "-"+string(f.Short))
		if named {
			return !f.IsBool() && !f.IsCounter()
		}
	}
	return false
}
