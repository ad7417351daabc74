package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rogpeppe/go-internal/testscript"
	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
)

// mcpcall TOOL [JSON]: start `tend mcp` in the script's directory, as an
// agent's MCP client would (the SDK's client over stdio), call TOOL with
// the JSON arguments and print its structured content, indented (after
// the text of an error); "tools" lists the tools instead, each
// with its input schema, and fails if one has no output schema. A result
// that is not an error must be structured content. It fails (or with !,
// succeeds) on a tool error. TEND_SESSION is passed on from the script's
// environment.
func cmdMCPCall(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 1 || len(args) > 2 {
		ts.Fatalf("usage: mcpcall TOOL [JSON]")
	}
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	session := mcpSession(ts, ctx)
	defer session.Close()
	if args[0] == "tools" {
		res, err := session.ListTools(ctx, nil)
		ts.Check(err)
		for _, t := range res.Tools {
			if t.OutputSchema == nil {
				ts.Fatalf("tool %s has no output schema", t.Name)
			}
			schema, _ := json.Marshal(t.InputSchema)
			fmt.Fprintf(ts.Stdout(), "%s %s\n", t.Name, schema)
		}
		return
	}
	// The arguments go as written, not through float64: 9007199254740993
	// must reach the server as it is.
	var in any
	if len(args) == 2 {
		var obj map[string]any
		ts.Check(json.Unmarshal([]byte(args[1]), &obj))
		in = json.RawMessage(args[1])
	}
	res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: args[0], Arguments: in})
	ts.Check(err)
	fmt.Fprint(ts.Stdout(), resultText(ts, res))
	if res.IsError != neg {
		ts.Fatalf("tool %s: error %v, want %v: %s", args[0], res.IsError, neg, resultText(ts, res))
	}
}

// mcpSession starts `tend mcp` in the script's directory and connects the
// SDK's client to it.
func mcpSession(ts *testscript.TestScript, ctx context.Context) *mcp.ClientSession {
	cmd := exec.Command("tend", "mcp")
	cmd.Dir = ts.Getenv("WORK")
	cmd.Env = append(os.Environ(), "PATH="+ts.Getenv("PATH"), "TEND_ROOT=", "TEND_SESSION="+ts.Getenv("TEND_SESSION"), "TEND_NO_START="+ts.Getenv("TEND_NO_START"))
	client := mcp.NewClient(&mcp.Implementation{Name: "tend-test", Version: "v0"}, nil)
	session, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: 5 * time.Second}, nil)
	ts.Check(err)
	return session
}

// resultText is a tool's result as mcpcall prints it: an error's text,
// then its structured content, indented, if it has any (an error's
// text, what a client shows the model, says why as a sentence).
func resultText(ts *testscript.TestScript, res *mcp.CallToolResult) string {
	var text strings.Builder
	if res.IsError {
		for _, c := range res.Content {
			if t, ok := c.(*mcp.TextContent); ok {
				text.WriteString(t.Text)
			}
		}
		text.WriteString("\n")
	}
	if res.StructuredContent == nil {
		if !res.IsError {
			ts.Fatalf("a result that is not an error has no structured content")
		}
		return text.String()
	}
	b, err := json.Marshal(res.StructuredContent)
	ts.Check(err)
	var v any
	ts.Check(json.Unmarshal(b, &v))
	b, err = json.MarshalIndent(v, "", "  ")
	ts.Check(err)
	return text.String() + string(b) + "\n"
}

// schema NAME [FILE]: the last command's stdout (or FILE) is valid against
// docs/schema/NAME.schema.json: one JSON value, or JSON lines, each valid.
func cmdSchema(ts *testscript.TestScript, neg bool, args []string) {
	dir, err := filepath.Abs("../../docs/schema")
	ts.Check(err)
	load := func(name string) (*jsonschema.Schema, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		var s jsonschema.Schema
		return &s, json.Unmarshal(b, &s)
	}
	root, err := load(args[0] + ".schema.json")
	ts.Check(err)
	rs, err := root.Resolve(&jsonschema.ResolveOptions{Loader: func(u *url.URL) (*jsonschema.Schema, error) {
		return load(path.Base(u.Path))
	}})
	ts.Check(err)
	data := ts.ReadFile("stdout")
	if len(args) > 1 {
		data = ts.ReadFile(args[1])
	}
	var values []any
	var whole any
	if json.Unmarshal([]byte(data), &whole) == nil {
		values = append(values, whole)
	} else {
		for line := range strings.Lines(data) {
			var v any
			ts.Check(json.Unmarshal([]byte(line), &v))
			values = append(values, v)
		}
	}
	if len(values) == 0 {
		ts.Fatalf("no JSON to check")
	}
	for _, v := range values {
		err := rs.Validate(v)
		if err != nil && !neg {
			ts.Fatalf("not valid against %s: %v", args[0], err)
		}
		if err == nil && neg && len(values) == 1 {
			ts.Fatalf("valid against %s, unexpectedly", args[0])
		}
	}
}

// fixture: write a root with finished runs whose every field is fixed
// (times, durations, output, history), for golden files of human output.
func cmdFixture(ts *testscript.TestScript, neg bool, args []string) {
	root := filepath.Join(ts.Getenv("WORK"), ".tend")
	store := tracker.NewStore(root)
	ts.Check(os.MkdirAll(filepath.Join(root, "spool"), 0o700))
	ts.Check(store.Make())
	hist := tracker.OpenHistory(root)
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(d time.Duration) *time.Time { t := t0.Add(d); return &t }
	code := func(c int) *int { return &c }
	runs := []*tracker.State{
		{ID: "ok", State: tracker.Completed, ExitCode: code(0), Command: []string{"/bin/sh", "-c", "make test"},
			Labels: map[string]string{"kind": "test"}, Notes: []tracker.Note{{Time: *at(2 * time.Second), Text: "looked fine"}},
			CPUSeconds: 0.25, DurationSeconds: 1.5},
		{ID: "bad", State: tracker.Failed, ExitCode: code(3), Reason: "exited with code 3", Command: []string{"go", "vet", "./..."},
			Session: "agent-7", DurationSeconds: 0.042},
		{ID: "cxl", State: tracker.Canceled, Signal: "SIGTERM", Reason: "canceled (by cxl.cancel)", Command: []string{"/bin/sh", "-c", "sleep 600"},
			DurationSeconds: 12.3},
		{ID: "svc", State: tracker.Canceled, Signal: "SIGTERM", Reason: "canceled (by svc.cancel)", Command: []string{"/bin/sh", "-c", "exec ./server --port 8080"},
			Restart: &spool.Restart{Policy: "always", Limit: 5, Window: spool.Duration(time.Minute), Delay: spool.Duration(time.Second), MaxDelay: spool.Duration(30 * time.Second)},
			Attempt: 2, Restarts: 1, Attempts: []tracker.Attempt{{Attempt: 1, StartedAt: t0, EndedAt: *at(time.Second), ExitCode: code(1), Reason: "exited with code 1"}},
			HealthStatus: &tracker.HealthStatus{Status: "healthy", Checks: []tracker.HealthCheck{{Time: *at(3 * time.Second), OK: true, Detail: "exited 0", DurationSeconds: 0.012}}},
			ReadyAt:      at(3 * time.Second), DurationSeconds: 60},
	}
	for i, st := range runs {
		st.Rev, st.Cwd, st.Grace, st.OwnerUID = 3, "/src", spool.Duration(10*time.Second), 0
		st.CreatedAt = t0.Add(time.Duration(i) * time.Minute)
		st.StartedAt, st.EndedAt = at(time.Duration(i)*time.Minute+100*time.Millisecond), at(time.Duration(i)*time.Minute+2*time.Second)
		ts.Check(os.MkdirAll(store.RunDir(st.ID), 0o755))
		for j, state := range []tracker.StateName{tracker.Starting, tracker.Running, st.State} {
			c := *st
			c.State, c.Rev = state, int64(j+1)
			when := *st.StartedAt
			if j == 2 {
				when = *st.EndedAt
			} else {
				c.ExitCode, c.Signal, c.Reason = nil, "", ""
			}
			ts.Check(hist.Append(tracker.EventOf(&c, when)))
		}
		ts.Check(store.Write(st))
	}
	for name, data := range map[string]string{"stdout": "building\nok  tend/spool\nok  tend/tracker\n", "stderr": "warning: slow test\n", "order": "stdout 9\nstderr 19\n"} {
		ts.Check(os.WriteFile(filepath.Join(store.RunDir("ok"), name), []byte(data), 0o644))
	}
}

// mcpfuzz: connect the SDK's client to one `tend mcp`, as mcpcall does,
// and call every tool it lists with hostile values in each of its
// arguments in turn, the others kept harmless: options and paths for
// strings (--help, --all, ../x, NUL bytes, shell syntax, huge ones),
// wrong types, negative, huge and tiny numbers. Every call must be
// answered (the server never dies nor hangs), every hostile ID must be a
// tool error (but start's empty one, which makes one), every answer that
// is not an error must be structured
// content, and the server must still answer a ping after each tool.
// Runs named mine and theirs are left alone by the harmless values.
func cmdMCPFuzz(ts *testscript.TestScript, neg bool, args []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*deadline)
	defer cancel()
	session := mcpSession(ts, ctx)
	defer session.Close()
	list, err := session.ListTools(ctx, nil)
	ts.Check(err)
	base := map[string]map[string]any{
		"start":   {"command": "true"},
		"show":    {"id": "mine"},
		"logs":    {"id": "mine"},
		"wait":    {"id": "nosuch", "timeout_seconds": 0.01},
		"cancel":  {"id": "nosuch"},
		"restart": {"id": "nosuch"},
		"signal":  {"id": "nosuch", "signal": "HUP"},
		"delete":  {"id": "nosuch"},
		// Only runs labeled so, which none is, whatever else is fuzzed;
		// a fuzzed "labels" alone selects no run either.
		"cancel_all": {"labels": map[string]any{"nosuch": "x"}},
		"delete_all": {"labels": map[string]any{"nosuch": "x"}},
		"ls":         {},
	}
	calls := 0
	began := time.Now()
	for _, tool := range list.Tools {
		props := schemaProps(ts, tool.InputSchema)
		if len(props) == 0 {
			ts.Fatalf("tool %s takes no arguments to fuzz", tool.Name)
		}
		for name, typ := range props {
			for _, v := range hostile(name, typ) {
				in := map[string]any{}
				for k, bv := range base[tool.Name] {
					in[k] = bv
				}
				in[name] = v
				cctx, ccancel := context.WithTimeout(ctx, deadline)
				res, err := session.CallTool(cctx, &mcp.CallToolParams{Name: tool.Name, Arguments: in})
				ccancel()
				calls++
				if err != nil {
					ts.Fatalf("%s(%s=%.80q): no answer: %v", tool.Name, name, fmt.Sprint(v), err)
				}
				// start's id is optional: "" or null (left out) makes one.
				if s, ok := v.(string); name == "id" && !res.IsError && (!ok && !(v == nil && tool.Name == "start") || spool.ValidID(s) != nil && s != "") {
					ts.Fatalf("%s(id=%.80q): not an error: %s", tool.Name, fmt.Sprint(v), resultText(ts, res))
				}
				resultText(ts, res) // structured content, unless an error
			}
		}
		if err := session.Ping(ctx, nil); err != nil {
			ts.Fatalf("after fuzzing %s, the server does not answer: %v", tool.Name, err)
		}
		ts.Logf("%s: %d calls by %v", tool.Name, calls, time.Since(began).Round(time.Millisecond))
	}
	ts.Logf("%d calls of %d tools answered", calls, len(list.Tools))
}

// schemaProps returns the properties of a tool's input schema, each with
// its JSON type.
func schemaProps(ts *testscript.TestScript, schema any) map[string]string {
	b, err := json.Marshal(schema)
	ts.Check(err)
	var s struct {
		Properties map[string]struct {
			Type any `json:"type"`
		} `json:"properties"`
	}
	ts.Check(json.Unmarshal(b, &s))
	props := map[string]string{}
	for name, p := range s.Properties {
		typ := fmt.Sprint(p.Type)
		for _, t := range []string{"string", "integer", "number", "boolean", "array", "object"} {
			if strings.Contains(typ, t) {
				typ = t
				break
			}
		}
		props[name] = typ
	}
	return props
}

// hostile returns values to try in argument name, of JSON type typ: values
// of its type meant to break a parser, a path or a command line, then
// values of every other type.
func hostile(name, typ string) []any {
	strs := []any{"", " ", "-", "--", "-h", "--help", "--version", "--all", "--root=/", "-f", ".", "..",
		"../x", "../../etc/passwd", "/etc/passwd", "a/b", "tests/", "x.start", "x@y", "x\x00y", "\x00", "a\nb",
		"*", "~", "%s%n%x", "null", "{}", "-1", "1e309", "NaN", "日本語", "\u202egnp.exe", "\ufeffx",
		strings.Repeat("a", 65), strings.Repeat("x", 1<<20)}
	if name != "command" {
		// Shell syntax, which must never reach a shell but in a command.
		strs = append(strs, "$(touch pwned)", "`touch pwned`", "x; touch pwned", "x && touch pwned")
	}
	nums := []any{-1, 0, 0.5, 1e-9, -1e308, 1e308, 1 << 62, 9007199254740993}
	other := []any{nil, true, []any{}, map[string]any{}, 7, "x"}
	switch typ {
	case "string":
		return append(strs, other...)
	case "integer", "number":
		return append(nums, other...)
	case "boolean":
		return append([]any{true, false}, other...)
	case "array":
		return append([]any{[]any{"runing"}, []any{"--all"}, []any{""}, []any{"=", "a"}, []any{"a=b=c", "k="}, []any{5}, []any{nil}}, other...)
	case "object":
		return append([]any{map[string]any{"": "x"}, map[string]any{"A=B": "x"}, map[string]any{"X": "\x00"},
			map[string]any{"--all": "y"}, map[string]any{"k": 5}, map[string]any{"PATH": ""}}, other...)
	}
	return append(strs, other...)
}

// mcpends dies|term ID: start `tend mcp` as mcpcall does, with a wait
// of an hour on run ID under way, then end its client: dies closes both
// of its pipes (a client killed), term sends it SIGTERM with its input
// still open (a client that stops it). Either way `tend mcp` must exit
// within 10 s, not once the wait is over.
func cmdMCPEnds(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 || args[0] != "dies" && args[0] != "term" {
		ts.Fatalf("usage: mcpends dies|term ID")
	}
	cmd := exec.Command("tend", "mcp")
	cmd.Dir = ts.Getenv("WORK")
	cmd.Env = append(os.Environ(), "PATH="+ts.Getenv("PATH"), "TEND_ROOT=", "TEND_SESSION="+ts.Getenv("TEND_SESSION"))
	in, err := cmd.StdinPipe()
	ts.Check(err)
	out, err := cmd.StdoutPipe()
	ts.Check(err)
	ts.Check(cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer cmd.Process.Kill()
	fmt.Fprintln(in, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`)
	fmt.Fprintln(in, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	fmt.Fprintf(in, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"wait","arguments":{"id":%q,"timeout_seconds":3600}}}`+"\n", args[1])
	line, err := bufio.NewReader(out).ReadString('\n')
	ts.Check(err)
	if !strings.Contains(line, `"id":1`) {
		ts.Fatalf("not initialize's answer: %s", line)
	}
	time.Sleep(300 * time.Millisecond) // the wait is under way: nothing to poll for
	switch args[0] {
	case "dies":
		in.Close()
		out.Close()
	case "term":
		ts.Check(cmd.Process.Signal(syscall.SIGTERM))
	}
	select {
	case err := <-exited:
		ts.Logf("tend mcp exited: %v", err)
	case <-time.After(10 * time.Second):
		ts.Fatalf("tend mcp runs on 10 s after its client %s, a wait under way", map[string]string{"dies": "died", "term": "sent SIGTERM"}[args[0]])
	}
}
