package mcpserver

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestCheckNumbers(t *testing.T) {
	tests := []struct{ args, err string }{
		{``, ""},
		{`{}`, ""},
		{`{"offset": 0, "max_bytes": 65536}`, ""},
		{`{"offset": 9007199254740991}`, ""},
		{`{"offset": -9007199254740991}`, ""},
		{`{"offset": 1e3, "x": 4.0, "y": 0.5, "z": -0, "w": 0e999999999999}`, ""},
		{`{"timeout_seconds": 0.1}`, ""},
		{`{"timeout_seconds": 1e-9}`, ""},
		{`{"offset": 100000000000000e-10}`, ""},
		{`{"offset": 0.00000000000000000000000000000001e32}`, ""},
		{`{"offset": 9007199254740992}`, "offset: 9007199254740992 is too large: a number is read exactly only if its magnitude is below 2^53 (9007199254740992)"},
		{`{"offset": 9007199254740993}`, "offset: 9007199254740993 is too large"},
		{`{"offset": -9007199254740993}`, "offset: -9007199254740993 is too large"},
		{`{"max_bytes": 1e308}`, "max_bytes: 1e308 is too large"},
		{`{"max_bytes": 1e309}`, "max_bytes: 1e309 is too large"},
		{`{"offset": 1` + strings.Repeat("0", 5000) + `}`, "offset: 100000000000000000000000... (5001 bytes) is too large"},
		{`{"offset": 4.0000000000000001}`, "offset: 4.0000000000000001 would be read as 4: write the number itself"},
		{`{"offset": 9007199254740990.5}`, "offset: 9007199254740990.5 would be read as 9007199254740990"},
		{`{"timeout_seconds": 1e-400}`, "timeout_seconds: 1e-400 would be read as 0"},
		{`{"offset": 1e-99999999999999999999}`, "offset: 1e-99999999999999999999 would be read as 0"},
		{`{"slurm": {"cpus": 4, "nodes": 18014398509481984}}`, "slurm.nodes: 18014398509481984 is too large"},
		{`{"after": [1, 2, 1e20]}`, "after[2]: 1e20 is too large"},
		{`{"labels": {"a b": 1e20}}`, `labels."a b": 1e20 is too large`},
		{`{"a": 1e20, "b": 1e20}`, "a: 1e20"},
		{`{"offset": "9007199254740993"}`, ""}, // a string: the schema refuses it
		{`{"offset": 9007199254740993`, ""},    // no JSON: the SDK says so
	}
	for _, tt := range tests {
		err := checkNumbers([]byte(tt.args))
		if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.err)) {
			t.Errorf("checkNumbers(%.60s) = %v, want %q", tt.args, err, tt.err)
		}
	}
}

func TestDenotes(t *testing.T) {
	tests := []struct {
		lit  string
		f    float64
		want bool
	}{
		{"0", 0, true}, {"-0.0e5", 0, true}, {"1", 1, true}, {"10", 10, true}, {"1.0", 1, true},
		{"1.5e1", 15, true}, {"150e-1", 15, true}, {"-15", -15, true}, {"9007199254740991", 9007199254740991, true},
		{"1.0000000000000001", 1, false}, {"0.99999999999999999", 1, false}, {"15e-1", 1.5, false},
		{"1e-500", 0, false}, {"1e99999999999999999999", 1, false}, {"10000000000000000", 1e16, false},
	}
	for _, tt := range tests {
		if got := denotes(tt.lit, tt.f); got != tt.want {
			t.Errorf("denotes(%q, %v) = %v, want %v", tt.lit, tt.f, got, tt.want)
		}
	}
}

// TestExactNumbersOnlyOfTools: a call of no tool goes on to the SDK, which
// refuses it as one, whatever numbers it holds; a tool's is checked.
func TestExactNumbersOnlyOfTools(t *testing.T) {
	passed := false
	next := func(context.Context, string, mcp.Request) (mcp.Result, error) {
		passed = true
		return nil, nil
	}
	h := exactNumbers([]string{"logs"})(next)
	call := func(name string) (mcp.Result, bool) {
		passed = false
		req := &mcp.ServerRequest[*mcp.CallToolParamsRaw]{Params: &mcp.CallToolParamsRaw{Name: name, Arguments: json.RawMessage(`{"offset": 9007199254740993}`)}}
		res, _ := h(context.Background(), "tools/call", req)
		return res, passed
	}
	if _, passed := call("nosuch"); !passed {
		t.Errorf("a call of no tool was answered by the numbers' check")
	}
	if res, passed := call("logs"); passed || res == nil {
		t.Errorf("a tool's call with an inexact number went on")
	}
}
