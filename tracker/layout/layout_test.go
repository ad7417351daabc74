package layout

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// names calls every method of v that takes nothing and returns a string,
// and returns the base names of the paths they give.
func names(v any) []string {
	var out []string
	rv := reflect.ValueOf(v)
	for i := range rv.NumMethod() {
		m := rv.Method(i)
		if m.Type().NumIn() == 0 && m.Type().NumOut() == 1 && m.Type().Out(0).Kind() == reflect.String {
			out = append(out, filepath.Base(m.Call(nil)[0].String()))
		}
	}
	slices.Sort(out)
	return out
}

// section returns the text of protocol.md from heading to the next heading
// of the same level.
func section(t *testing.T, heading string) string {
	b, err := os.ReadFile("../../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("docs/protocol.md has no %q", heading)
	}
	level := heading[:strings.IndexByte(heading, ' ')+1]
	if i := strings.Index(rest, "\n"+level); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

// TestRootIsTheProtocols checks that Root names every path protocol.md's
// "The root" table lists, and nothing else.
func TestRootIsTheProtocols(t *testing.T) {
	var documented []string
	cell := regexp.MustCompile("^\\| ([^|]+) \\|")
	path := regexp.MustCompile("`([^`]+)`")
	for _, line := range strings.Split(section(t, "## The root"), "\n") {
		m := cell.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		for _, p := range path.FindAllStringSubmatch(m[1], -1) {
			first, _, _ := strings.Cut(p[1], "/")
			if !slices.Contains(documented, first) {
				documented = append(documented, first)
			}
		}
	}
	slices.Sort(documented)
	if got := names(Root("/r")); !slices.Equal(got, documented) {
		t.Errorf("layout.Root names\n%q\nprotocol.md's \"The root\" lists\n%q", got, documented)
	}
	if got := Root("/r").RotatedHistory(2); got != "/r/history.2.jsonl" {
		t.Errorf("RotatedHistory(2) = %s", got)
	}
}

// TestRunIsTheProtocols checks that Run names every file protocol.md's
// "Runs" list names.
func TestRunIsTheProtocols(t *testing.T) {
	var documented []string
	item := regexp.MustCompile("^- `([^`]+)`(?:, `([^`]+)`)?:")
	for _, line := range strings.Split(section(t, "## Runs"), "\n") {
		if m := item.FindStringSubmatch(line); m != nil {
			documented = append(documented, m[1])
			if m[2] != "" {
				documented = append(documented, m[2])
			}
		}
	}
	slices.Sort(documented)
	run := Root("/r").Run("a")
	got := append(names(run), filepath.Base(run.Stream("stdout")), filepath.Base(run.Stream("stderr")))
	slices.Sort(got)
	if !slices.Equal(got, documented) {
		t.Errorf("layout.Run names\n%q\nprotocol.md's \"Runs\" lists\n%q", got, documented)
	}
	if string(run) != "/r/runs/a" {
		t.Errorf("Run(a) = %s", run)
	}
}
