package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"net/url"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rogpeppe/go-internal/testscript"
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
