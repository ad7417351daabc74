package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/tendhq/tend/tracker"
)

type mcpCmd struct{}

func (c *mcpCmd) Help() string {
	return `Serves the Model Context Protocol over stdin and stdout, so that an agent
gets tend's control surface as typed tools: start, ls, show, logs (by
offset), cancel, wait, signal, delete. Each tool is the CLI command of the
same name, run in this process with --json: a client of the spool like any
other. The session is the server's TEND_SESSION, so an agent acts on its
own runs only. Examples:
  tend mcp                 # with TEND_SESSION=agent-1 in its environment
in an MCP client's configuration:
  {"mcpServers": {"tend": {"command": "tend", "args": ["mcp"], "env": {"TEND_SESSION": "agent-1"}}}}`
}

func (c *mcpCmd) Run(e *env) error {
	s := mcp.NewServer(&mcp.Implementation{Name: "tend", Version: version}, nil)
	t := &tools{root: e.root, noStart: e.noStart}
	t.add(s)
	return s.Run(context.Background(), &mcp.StdioTransport{})
}

// tools are the MCP tools, each a thin client of the spool: they run the
// CLI's own commands (run) against the server's root.
type tools struct {
	root    string
	noStart bool
}

type startIn struct {
	Command string            `json:"command" jsonschema:"the shell command to run (run by /bin/sh -c)"`
	ID      string            `json:"id,omitempty" jsonschema:"the run's ID (default: made from the command)"`
	Cwd     string            `json:"cwd,omitempty" jsonschema:"working directory (default: the server's)"`
	Timeout string            `json:"timeout,omitempty" jsonschema:"stop the run if it runs longer than this Go duration, e.g. 10m"`
	Env     map[string]string `json:"env,omitempty" jsonschema:"variables to set in the run's environment"`
	Labels  map[string]string `json:"labels,omitempty" jsonschema:"labels to attach"`
}

type lsIn struct {
	All   bool     `json:"all,omitempty" jsonschema:"include runs that ended more than a day ago"`
	State []string `json:"state,omitempty" jsonschema:"only runs in these states"`
	Label []string `json:"label,omitempty" jsonschema:"only runs with these K=V labels"`
}

type idIn struct {
	ID string `json:"id" jsonschema:"the run's ID"`
}

type logsIn struct {
	ID       string `json:"id" jsonschema:"the run's ID"`
	Stream   string `json:"stream,omitempty" jsonschema:"stdout (default), stderr, or both (lines in the order written)"`
	Offset   int64  `json:"offset,omitempty" jsonschema:"absolute byte offset to read from: the next of the last read"`
	MaxBytes int64  `json:"max_bytes,omitempty" jsonschema:"read at most this many bytes (default 65536)"`
}

type cancelIn struct {
	ID    string `json:"id" jsonschema:"the run's ID"`
	Grace string `json:"grace,omitempty" jsonschema:"time between SIGTERM and SIGKILL, a Go duration (default: the run's own)"`
}

type waitIn struct {
	ID      string  `json:"id" jsonschema:"the run's ID"`
	Timeout float64 `json:"timeout_seconds,omitempty" jsonschema:"give up waiting after this many seconds (default 30); the run goes on"`
}

type signalIn struct {
	ID     string `json:"id" jsonschema:"the run's ID"`
	Signal string `json:"signal" jsonschema:"HUP, INT, TERM, USR1, ... or a number"`
}

func (t *tools) add(s *mcp.Server) {
	mcp.AddTool(s, &mcp.Tool{Name: "start", Description: "Start a shell command in the background as a run; returns its record."}, t.start)
	mcp.AddTool(s, &mcp.Tool{Name: "ls", Description: "List runs (this session's first); returns their records."}, t.ls)
	mcp.AddTool(s, &mcp.Tool{Name: "show", Description: "One run's record: state, exit code, reason, times, usage."}, t.show)
	mcp.AddTool(s, &mcp.Tool{Name: "logs", Description: "Read a run's output from an absolute offset; read again from the returned next, so no byte is read twice."}, t.logs)
	mcp.AddTool(s, &mcp.Tool{Name: "cancel", Description: "Cancel a run: SIGTERM to its process group, SIGKILL after the grace; returns the outcome once it has ended."}, t.cancel)
	mcp.AddTool(s, &mcp.Tool{Name: "wait", Description: "Wait for a run to end, at most timeout_seconds; returns its record either way."}, t.wait)
	mcp.AddTool(s, &mcp.Tool{Name: "signal", Description: "Send a signal to a run's process group."}, t.signal)
	mcp.AddTool(s, &mcp.Tool{Name: "delete", Description: "Delete a finished run: its record, output and outcomes."}, t.delete)
}

// cli runs tend's own command line in this process, against the server's
// root, and makes its result the tool's: its output, or its error (with
// the exit code) as a tool error the agent can read.
func (t *tools) cli(args ...string) (*mcp.CallToolResult, any, error) {
	argv := append([]string{"--root", t.root}, args...)
	if t.noStart {
		argv = append([]string{"--no-start"}, argv...)
	}
	var out, errs bytes.Buffer
	code := run(argv, &out, &errs)
	if code != exitOK {
		msg := fmt.Sprintf("tend %s: exit %d\n%s%s", args[0], code, out.String(), errs.String())
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}}, nil, nil
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: out.String()}}}, nil, nil
}

func (t *tools) start(ctx context.Context, _ *mcp.CallToolRequest, in startIn) (*mcp.CallToolResult, any, error) {
	if in.Command == "" {
		return toolError("start: command is empty")
	}
	args := []string{"start"}
	for flag, v := range map[string]string{"--id": in.ID, "--cwd": in.Cwd, "--timeout": in.Timeout} {
		if v != "" {
			args = append(args, flag, v)
		}
	}
	for k, v := range in.Env {
		args = append(args, "--env", k+"="+v)
	}
	for k, v := range in.Labels {
		args = append(args, "--label", k+"="+v)
	}
	return t.cli(append(args, "--json", "--", in.Command)...)
}

func (t *tools) ls(ctx context.Context, _ *mcp.CallToolRequest, in lsIn) (*mcp.CallToolResult, any, error) {
	args := []string{"ls", "--json"}
	if in.All {
		args = append(args, "--all")
	}
	for _, s := range in.State {
		args = append(args, "--state", s)
	}
	for _, l := range in.Label {
		args = append(args, "--label", l)
	}
	if s := os.Getenv("TEND_SESSION"); s != "" {
		args = append(args, "--session", s)
	}
	return t.cli(args...)
}

func (t *tools) show(ctx context.Context, _ *mcp.CallToolRequest, in idIn) (*mcp.CallToolResult, any, error) {
	return t.cli("show", in.ID, "--json")
}

func (t *tools) logs(ctx context.Context, _ *mcp.CallToolRequest, in logsIn) (*mcp.CallToolResult, any, error) {
	args := []string{"logs", in.ID, "--json", "--offset", strconv.FormatInt(in.Offset, 10)}
	switch in.Stream {
	case "", "stdout":
		args = append(args, "--max-bytes", strconv.FormatInt(cmpOr(in.MaxBytes, 65536), 10))
	case "stderr":
		args = append(args, "--stderr", "--max-bytes", strconv.FormatInt(cmpOr(in.MaxBytes, 65536), 10))
	case "both":
		args = append(args, "--both")
	default:
		return toolError(fmt.Sprintf("logs: stream %q: want stdout, stderr or both", in.Stream))
	}
	return t.cli(args...)
}

func (t *tools) cancel(ctx context.Context, _ *mcp.CallToolRequest, in cancelIn) (*mcp.CallToolResult, any, error) {
	args := []string{"cancel", in.ID}
	if in.Grace != "" {
		args = append(args, "--grace", in.Grace)
	}
	return t.cli(args...)
}

// wait waits like tend wait, but at most its timeout: an agent's call must
// come back, and the run goes on regardless.
func (t *tools) wait(ctx context.Context, _ *mcp.CallToolRequest, in waitIn) (*mcp.CallToolResult, any, error) {
	deadline := time.Now().Add(time.Duration(cmpOr(in.Timeout, 30) * float64(time.Second)))
	e := &env{root: t.root, noStart: t.noStart, stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}}
	st, err := waitRun(e, in.ID, deadline, func(st *tracker.State) bool {
		return tracker.Final(st.State) || ctx.Err() != nil
	})
	if errors.Is(err, errTimedOut) {
		if st == nil {
			return toolError(fmt.Sprintf("wait: run %s has no record yet after %gs", in.ID, cmpOr(in.Timeout, 30)))
		}
		err = nil // the record as it is: "ended" says the run goes on
	}
	if err != nil {
		return toolError("wait: " + err.Error())
	}
	var b bytes.Buffer
	writeJSON(&b, struct {
		Ended bool `json:"ended"`
		*tracker.State
	}{tracker.Final(st.State), st})
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: b.String()}}}, nil, nil
}

func (t *tools) signal(ctx context.Context, _ *mcp.CallToolRequest, in signalIn) (*mcp.CallToolResult, any, error) {
	return t.cli("signal", in.ID, in.Signal)
}

func (t *tools) delete(ctx context.Context, _ *mcp.CallToolRequest, in idIn) (*mcp.CallToolResult, any, error) {
	return t.cli("rm", in.ID)
}

func toolError(msg string) (*mcp.CallToolResult, any, error) {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}}, nil, nil
}

func cmpOr[T int64 | float64](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}
