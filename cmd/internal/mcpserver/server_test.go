package mcpserver

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/tendhq/tend"
)

func TestInvalidUTF8(t *testing.T) {
	tests := []struct {
		s    string
		want int64
	}{
		{"", 0}, {"hello\n", 0}, {"é日本\U0001F600", 0},
		{"\xff", 1}, {"a\xff\xfeb", 2}, {"\xc3", 1}, {"\xc3(", 1},
		{"\xe6\x97", 2},     // a character cut short: each byte is U+FFFD
		{"\xed\xa0\x80", 3}, // a surrogate is no UTF-8
		{"\xc0\xaf", 2},     // nor an overlong '/'
	}
	for _, tt := range tests {
		if got := invalidUTF8(tt.s); got != tt.want {
			t.Errorf("invalidUTF8(%q) = %d, want %d", tt.s, got, tt.want)
		}
	}
}

// TestToolNames: the numbers' check knows every tool the server has, and
// no other name (toolNames is kept beside addTools by hand).
func TestToolNames(t *testing.T) {
	ctx := context.Background()
	s := mcp.NewServer(&mcp.Implementation{Name: "tend"}, nil)
	addTools(s, &tools{})
	st, ct := mcp.NewInMemoryTransports()
	if _, err := s.Connect(ctx, st, nil); err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	want := slices.Sorted(slices.Values(toolNames))
	if !slices.Equal(names, want) {
		t.Errorf("tools %v, toolNames %v", names, want)
	}
}

// TestErrorText: a tool error names the tool once, even where the
// client's error names its verb already.
func TestErrorText(t *testing.T) {
	tests := []struct{ tool, err, want string }{
		{"start", "start: the request would be 2099199 bytes", "start: the request would be 2099199 bytes"},
		{"start", "start serve: rejected: run serve already exists", "start serve: rejected: run serve already exists"},
		{"show", `no run "x" in /r/.tend`, `show: no run "x" in /r/.tend`},
		{"cancel_all", "cancel: \"labels\": an empty key", "cancel_all: cancel: \"labels\": an empty key"},
		{"logs", "logsy thing", "logs: logsy thing"},
	}
	for _, tt := range tests {
		if got := errorText(tt.tool, errors.New(tt.err)); got != tt.want {
			t.Errorf("errorText(%q, %q) = %q, want %q", tt.tool, tt.err, got, tt.want)
		}
	}
}

// TestResultDocs: an agent that reads only a result's output schema
// learns what each member of a log read and of an outcome means.
func TestResultDocs(t *testing.T) {
	for name, s := range map[string]*jsonschema.Schema{
		"logs":       describeResult(schemaOf[logsOut]()),
		"cancel":     describeResult(schemaOf[cancelOut]()),
		"cancel ids": describeResult(schemaOf[cancelOut]()).Properties["runs"].Items,
		"cancel_all": describeResult(schemaOf[outcomesOut]()).Properties["runs"].Items,
	} {
		for prop, p := range s.Properties {
			if p.Description == "" && prop != "id" {
				t.Errorf("%s: result member %s has no description", name, prop)
			}
		}
	}
}

// TestRefusalText: a refused request's error says why in its text, as a
// sentence, beside the outcome as structured content.
func TestRefusalText(t *testing.T) {
	o := tend.Outcome{ID: "own", Verb: "cancel", Outcome: "not_permitted", Detail: "run own belongs to session a, not to session b"}
	res, out, err := outcomeResult("cancel")(o, &tend.OutcomeError{Outcome: o})
	if err != nil || out == nil || *out != o || !res.IsError || len(res.Content) != 1 {
		t.Fatalf("outcomeResult = %+v, %+v, %v", res, out, err)
	}
	want := "cancel own: not_permitted: run own belongs to session a, not to session b"
	if text := res.Content[0].(*mcp.TextContent).Text; text != want {
		t.Errorf("text %q, want %q", text, want)
	}
}

// TestLogsMaxBytes: a max_bytes of 0 reads nothing, so it is refused
// naming the argument, not taken for the default as left out is.
func TestLogsMaxBytes(t *testing.T) {
	n := func(v int64) *int64 { return &v }
	tests := []struct {
		in   logsIn
		want string
	}{
		{logsIn{ID: "x", MaxBytes: n(0)}, "logs: max_bytes 0: want 1 to 4194304 (leave it out for 65536)"},
		{logsIn{ID: "x", MaxBytes: n(-1)}, "logs: max_bytes -1: want 1 to 4194304 (leave it out for 65536)"},
		{logsIn{ID: "x", MaxBytes: n(maxLogBytes + 1)}, "logs: max_bytes 4194305: want 1 to 4194304 (leave it out for 65536)"},
		{logsIn{ID: "x", Stream: "both", MaxBytes: n(10)}, "logs: max_bytes reads one stream: read stdout and stderr each, or leave it out"},
	}
	for _, tt := range tests {
		res, _, _ := (&tools{}).logs(context.Background(), tt.in)
		if res == nil || !res.IsError {
			t.Errorf("%+v: not refused", tt.in)
			continue
		}
		if text := res.Content[0].(*mcp.TextContent).Text; text != tt.want {
			t.Errorf("%+v: %q, want %q", tt.in, text, tt.want)
		}
	}
}

// TestCancelIDs: a cancel names its runs by id or ids, not both nor
// neither; ids are checked, and each is canceled once.
func TestCancelIDs(t *testing.T) {
	tests := []struct {
		in   cancelIn
		want []string
		err  string
	}{
		{cancelIn{ID: "a"}, nil, ""},
		{cancelIn{IDs: []string{"a", "b", "a"}}, []string{"a", "b"}, ""},
		{cancelIn{}, nil, "name the runs: id, or ids"},
		{cancelIn{ID: "a", IDs: []string{"b"}}, nil, "give id or ids, not both"},
		{cancelIn{IDs: []string{}}, nil, "ids is empty: name at least one run"},
		{cancelIn{IDs: []string{"a", ""}}, nil, "ids[1]: "},
		{cancelIn{IDs: []string{"../x"}}, nil, "ids[0]: "},
	}
	for _, tt := range tests {
		got, err := cancelIDs(tt.in)
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("%+v: %v", tt.in, err)
		case tt.err != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.err)):
			t.Errorf("%+v: error %v, want %q", tt.in, err, tt.err)
		case !slices.Equal(got, tt.want):
			t.Errorf("%+v: %q, want %q", tt.in, got, tt.want)
		}
	}
}
