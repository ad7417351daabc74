package main

import (
	"strings"
	"testing"

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
