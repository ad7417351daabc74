package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rogpeppe/go-internal/testscript"
	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
)

// mcpcall TOOL [JSON]: start `tend mcp` in the script's directory, as an
// agent's MCP client would (the SDK's client over stdio), call TOOL with
// the JSON arguments and print the text it returns; "tools" lists the
// tools instead. It fails (or with !, succeeds) on a tool error.
// TEND_SESSION is passed on from the script's environment.
func cmdMCPCall(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 1 || len(args) > 2 {
		ts.Fatalf("usage: mcpcall TOOL [JSON]")
	}
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	cmd := exec.Command("tend", "mcp")
	cmd.Dir = ts.Getenv("WORK")
	cmd.Env = append(os.Environ(), "PATH="+ts.Getenv("PATH"), "TEND_ROOT=", "TEND_SESSION="+ts.Getenv("TEND_SESSION"))
	client := mcp.NewClient(&mcp.Implementation{Name: "tend-test", Version: "v0"}, nil)
	session, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: 5 * time.Second}, nil)
	ts.Check(err)
	defer session.Close()
	if args[0] == "tools" {
		res, err := session.ListTools(ctx, nil)
		ts.Check(err)
		for _, t := range res.Tools {
			schema, _ := json.Marshal(t.InputSchema)
			fmt.Fprintf(ts.Stdout(), "%s %s\n", t.Name, schema)
		}
		return
	}
	var in map[string]any
	if len(args) == 2 {
		ts.Check(json.Unmarshal([]byte(args[1]), &in))
	}
	res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: args[0], Arguments: in})
	ts.Check(err)
	var text strings.Builder
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			text.WriteString(t.Text)
		}
	}
	fmt.Fprint(ts.Stdout(), text.String())
	if res.IsError != neg {
		ts.Fatalf("tool %s: error %v, want %v: %s", args[0], res.IsError, neg, text.String())
	}
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
		for j, state := range []string{tracker.Starting, tracker.Running, st.State} {
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
	for name, data := range map[string]string{"stdout": "building\nok  tend/spool\nok  tend/tracker\n", "stderr": "warning: slow test\n", tracker.OrderFile: "stdout 9\nstderr 19\n"} {
		ts.Check(os.WriteFile(store.Path("ok", name), []byte(data), 0o644))
	}
}
