package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/rogpeppe/go-internal/testscript"
)

// readme FILE: run the examples of a Markdown file (relative to this
// package) as a reader would paste them, in order, in $WORK, with tend on
// the PATH and the repository's scripts/ beside, as in a clone: each
// ```sh block with sh -e, each ```bash block with bash -e, the "$ " lines
// of each ```console block with sh -e. Each ```json block must be valid
// JSON. A block right after a line <!-- not run: WHY --> is skipped (and
// logged). An indented code block is an error: it would escape all this.
// A block that fails, or does not finish within the deadline, fails the
// script, with its output.
func cmdReadme(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 {
		ts.Fatalf("usage: readme FILE")
	}
	text, err := os.ReadFile(args[0])
	ts.Check(err)
	work := ts.Getenv("WORK")
	ts.Check(os.MkdirAll(filepath.Join(work, "scripts"), 0o755))
	lib, err := os.ReadFile("../../scripts/tend.sh")
	ts.Check(err)
	ts.Check(os.WriteFile(filepath.Join(work, "scripts", "tend.sh"), lib, 0o644))
	blocks, err := markdownBlocks(string(text))
	if err != nil {
		ts.Fatalf("%s: %v", args[0], err)
	}
	ran := 0
	for _, b := range blocks {
		if b.skip != "" {
			ts.Logf("%s:%d: not run: %s", args[0], b.line, b.skip)
			continue
		}
		var shell, script string
		switch b.lang {
		case "sh":
			shell, script = "sh", b.text
		case "bash":
			shell, script = "bash", b.text
		case "console":
			shell = "sh"
			for line := range strings.Lines(b.text) {
				if cmd, ok := strings.CutPrefix(line, "$ "); ok {
					script += cmd
				}
			}
		case "json":
			if !json.Valid([]byte(b.text)) {
				ts.Fatalf("%s:%d: a json block that is not valid JSON:\n%s", args[0], b.line, b.text)
			}
			continue
		default:
			continue // go, ini, crontab: shown, not run
		}
		runBlock(ts, fmt.Sprintf("%s:%d", args[0], b.line), shell, script)
		ran++
	}
	if ran == 0 {
		ts.Fatalf("%s: no block to run", args[0])
	}
	ts.Logf("%s: %d blocks ran", args[0], ran)
}

// runBlock runs script with shell -e in $WORK, with the script's
// environment, and fails the script if it fails or outlasts the deadline.
func runBlock(ts *testscript.TestScript, where, shell, script string) {
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, shell, "-e", "-c", script)
	cmd.Dir = ts.Getenv("WORK")
	cmd.Env = append(os.Environ(), "HOME="+ts.Getenv("WORK"), "PATH="+ts.Getenv("PATH"), "TMPDIR="+ts.Getenv("TMPDIR"),
		"TEND_ROOT=", "TEND_SESSION=", "TEND_NO_START="+ts.Getenv("TEND_NO_START"), "NO_COLOR=", "COLUMNS=")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = deadline
	err := cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("not done after %v", deadline)
	}
	if err != nil {
		ts.Fatalf("%s: the %s block failed: %v\n--- block:\n%s--- output:\n%s", where, shell, err, script, out.String())
	}
}

// mdBlock is a fenced code block of a Markdown file.
type mdBlock struct {
	lang, text string
	line       int    // of its opening fence
	skip       string // why it is not run, if it is not
}

var notRun = regexp.MustCompile(`^<!-- not run: (.+) -->$`)

// markdownBlocks returns the fenced code blocks of a Markdown text, and
// an error for an indented code block (four spaces after a blank line).
func markdownBlocks(text string) ([]mdBlock, error) {
	var blocks []mdBlock
	var cur *mdBlock
	skip, blank := "", true
	for i, line := range strings.Split(text, "\n") {
		switch {
		case cur != nil && strings.HasPrefix(line, "```"):
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.text += line + "\n"
		case strings.HasPrefix(line, "```"):
			cur = &mdBlock{lang: strings.TrimPrefix(line, "```"), line: i + 1, skip: skip}
			skip = ""
		case notRun.MatchString(line):
			skip = notRun.FindStringSubmatch(line)[1]
		case blank && strings.HasPrefix(line, "    "):
			return nil, fmt.Errorf("line %d: an indented code block: fence it (```sh, ```json, ...) so that its examples are run or checked", i+1)
		}
		blank = strings.TrimSpace(line) == ""
	}
	if cur != nil {
		return nil, fmt.Errorf("line %d: a code block that is not closed", cur.line)
	}
	return blocks, nil
}
