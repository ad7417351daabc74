package mcpserver

import (
	"encoding/json"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestFitArgs: arguments that do not fit a tool's schema are refused with
// an error naming the argument and what it wants; optional arguments given
// as null are dropped, required ones never are.
func TestFitArgs(t *testing.T) {
	schemas := addTools(mcp.NewServer(&mcp.Implementation{Name: "tend"}, nil), &tools{})
	tests := []struct {
		tool, args string
		want       string // the arguments passed on, or the error
		err        bool
	}{
		{"show", `{"id": "x"}`, `{"id": "x"}`, false},
		{"show", ``, `missing argument id (a string)`, true},
		{"show", `null`, `missing argument id (a string)`, true},
		{"show", `{}`, `missing argument id (a string)`, true},
		{"show", `{"id": null}`, `id: null: want a string`, true},
		{"delete", `{"id": null}`, `id: null: want a string`, true},
		{"cancel", `{"id": 5}`, `id: 5 (a number): want a string`, true},
		{"show", `{"id": ["x"]}`, `id: ["x"] (an array): want a string`, true},
		{"show", `"x"`, `the arguments are "x" (a string): want an object of named arguments (id, full)`, true},
		{"show", `[1]`, `the arguments are [1] (an array): want an object of named arguments (id, full)`, true},
		{"ls", `{"bogus": 1}`, `unknown argument "bogus": the arguments are all, state, label, full, limit`, true},
		{"ls", `{"label": "a=b"}`, `label: "a=b" (a string): want an array of strings`, true},
		{"ls", `{"label": [5]}`, `label[0]: 5 (a number): want a string`, true},
		{"ls", `{"state": null, "label": null}`, `{"state": null, "label": null}`, false}, // their schema takes null
		{"logs", `{"id": "x", "offset": "10"}`, `offset: "10" (a string): want an integer, as a JSON number (not in quotes)`, true},
		{"logs", `{"id": "x", "offset": 1.5}`, `offset: 1.5 (a number): want an integer`, true},
		{"logs", `{"id": "x", "offset": 1.0}`, `{"id": "x", "offset": 1.0}`, false},
		{"logs", `{"id": "x", "offset": null, "stream": null}`, `{"id":"x"}`, false},
		{"logs", `{"id": "x", "max_bytes": null}`, `{"id": "x", "max_bytes": null}`, false}, // its schema takes null (a nil pointer: 65536)
		{"logs", `{"id": "x", "max_bytes": "0"}`, `max_bytes: "0" (a string): want an integer, as a JSON number (not in quotes)`, true},
		{"wait", `{"id": "x", "timeout_seconds": "5"}`, `timeout_seconds: "5" (a string): want a number, as a JSON number (not in quotes)`, true},
		{"wait", `{"id": "x", "timeout_seconds": null}`, `{"id": "x", "timeout_seconds": null}`, false}, // its schema takes null (a nil pointer: 30 s)
		{"start", `{"command": null}`, `command: null: want a string`, true},
		{"start", `{"command": "x", "timeout": null, "slurm": {"cpus": null}}`, `{"command":"x","slurm":{}}`, false},
		{"start", `{"command": "x", "grace": null, "timeout": 9007199254740993}`, `{"command":"x","timeout":9007199254740993}`, false}, // as written, for exactNumbers
		{"start", `{"command": "x", "timeout": true}`, `timeout: true (a boolean): want a string or a number`, true},
		{"start", `{"command": "x", "labels": {"k": 5}}`, `labels.k: 5 (a number): want a string`, true},
		{"start", `{"command": "x", "env": {"A": null}}`, `env."A": null: want a string`, true},
		{"start", `{"command": "x", "slurm": {"cpus": "4"}}`, `slurm.cpus: "4" (a string): want an integer, as a JSON number (not in quotes)`, true},
		{"start", `{"command": "x", "slurm": {"bogus": 1}}`, `slurm: unknown argument "bogus": the arguments are partition, cpus, memory, gpus, nodes, time, account, qos, constraint, args`, true},
		{"cancel_all", `{"all": "true"}`, `all: "true" (a string): want a boolean`, true},
		{"cancel_all", `{"all": null}`, `{}`, false}, // and then "name the runs", not every run
		{"pause", `{}`, `missing argument id (a string)`, true},
		{"resume", `{"id": 1}`, `id: 1 (a number): want a string`, true},
		{"cancel", `{"ids": "a"}`, `ids: "a" (a string): want an array of strings`, true},
		{"cancel", `{"ids": ["a", null]}`, `ids[1]: null: want a string`, true},
		{"show", `{"id": "x", "full": "yes"}`, `full: "yes" (a string): want a boolean`, true},
		{"signal", `{"id": "x", "signal": 9}`, `signal: 9 (a number): want a string`, true},
		{"show", `{"id": "x"`, `{"id": "x"`, false}, // no JSON: the SDK's to refuse
	}
	for _, tt := range tests {
		got, err := fitArgs(schemas[tt.tool], json.RawMessage(tt.args))
		switch {
		case tt.err && err == nil:
			t.Errorf("%s %s: passed as %s, want error %q", tt.tool, tt.args, got, tt.want)
		case tt.err && err.Error() != tt.want:
			t.Errorf("%s %s: error %q, want %q", tt.tool, tt.args, err, tt.want)
		case !tt.err && err != nil:
			t.Errorf("%s %s: error %q", tt.tool, tt.args, err)
		case !tt.err && string(got) != tt.want:
			t.Errorf("%s %s: passed as %s, want %s", tt.tool, tt.args, got, tt.want)
		}
	}
}
