package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/tendhq/tend"
	"github.com/tendhq/tend/tracker"
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
		"ls":         describeResult(schemaOf[lsOut]()),
		"cancel":     describeResult(schemaOf[cancelOut]()),
		"cancel ids": describeResult(schemaOf[cancelOut]()).Properties["runs"].Items,
		"show":       describeResult(schemaOf[shownRun]()),
		"wait":       describeResult(schemaOf[waitOut]()),
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

// TestShown: a run's view keeps what an agent acts on and drops tend's
// bookkeeping; full is the whole record, with ready; the output schema
// of show and ls admits both.
func TestShown(t *testing.T) {
	code := 3
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rec := &tend.Record{ID: "srv", State: tracker.Running, Session: "a", Command: []string{"/bin/sh", "-c", "serve"},
		PID: 42, PGID: 42, ProcStart: 123, Boot: "b00t", RequestSum: "rs", Seal: "seal", Sum: "sum", CreatedAt: now, StartedAt: &now,
		Labels: map[string]string{"k": "v"}, Notes: []tracker.Note{{Time: now, Text: "hi"}}, ExitCode: &code, Attempt: 2,
		HealthStatus: &tracker.HealthStatus{Status: "healthy", Checks: []tracker.HealthCheck{}}, ReadyAt: &now,
		Output: &tracker.Output{Limit: 10, Stdout: tracker.Stream{Dropped: 5, Base: 5}}, After: []string{"x"}}
	queued := &tend.Record{ID: "q", State: tracker.Queued, After: []string{"srv:ready"}, CreatedAt: now, Sum: "sum"}
	// Their processes have exited: their PIDs may be another's now.
	ended := &tend.Record{ID: "e", State: tracker.Completed, PID: 42, PGID: 42, ExitCode: &code, CreatedAt: now}
	backoff := &tend.Record{ID: "b", State: tracker.Backoff, PID: 42, PGID: 42, CreatedAt: now}
	// A health check's status outlives the process it checked: an ended
	// run, or one in backoff, shows none.
	starting := &tracker.HealthStatus{Status: "starting", Checks: []tracker.HealthCheck{}}
	endedHealth := &tend.Record{ID: "eh", State: tracker.Canceled, PID: 42, PGID: 42, HealthStatus: starting, CreatedAt: now}
	backoffHealth := &tend.Record{ID: "bh", State: tracker.Backoff, PID: 42, PGID: 42, HealthStatus: starting, CreatedAt: now}
	liveHealth := &tend.Record{ID: "lh", State: tracker.Starting, PID: 42, PGID: 42, HealthStatus: starting, CreatedAt: now}
	// Labels are capped in a view, and it says so; full has them whole.
	many := map[string]string{"big": strings.Repeat("é", 200), strings.Repeat("k", 300): "long key"}
	for i := range 60 {
		many[fmt.Sprintf("l%02d", i)] = "v"
	}
	labeled := &tend.Record{ID: "lab", State: tracker.Completed, Labels: many, CreatedAt: now}
	// So are notes, to the newest: a run may be noted on all its life.
	var notes []tracker.Note
	for i := range 25 {
		notes = append(notes, tracker.Note{Time: now, Text: fmt.Sprintf("n%02d", i)})
	}
	noted := &tend.Record{ID: "noted", State: tracker.Running, Notes: notes, CreatedAt: now}
	schema, err := describeResult(schemaOf[shownRun]()).Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		l          tend.Listed
		full       bool
		want, drop []string // members (as "name": or "name":value) the JSON has, and has not
	}{
		{tend.Listed{Record: rec}, false,
			[]string{`"id":"srv"`, `"session":"a"`, `"state":"running"`, `"pid":42`, `"exit_code":3`, `"labels":{"k":"v"}`, `"notes":`,
				`"attempt":2`, `"health_state":"healthy"`, `"ready":true`, `"dropped":{"stdout":5,"stderr":0}`, `"started_at":`,
				`"size":{"stdout":12,"stderr":3}`},
			[]string{`"seal"`, `"sum"`, `"boot"`, `"proc_start"`, `"request_sum"`, `"pgid"`, `"base"`, `"after"`, `"rev"`, `"health_status"`}},
		{tend.Listed{Record: queued, Position: 2}, false,
			[]string{`"after":["srv:ready"]`, `"position":2`, `"ready":false`, `"size":{"stdout":12,"stderr":3}`}, []string{`"sum"`, `"pid"`}},
		{tend.Listed{Record: ended}, false, []string{`"exit_code":3`}, []string{`"pid"`}},
		{tend.Listed{Record: backoff}, false, []string{`"state":"backoff"`}, []string{`"pid"`}},
		{tend.Listed{Record: endedHealth}, false, []string{`"state":"canceled"`}, []string{`"health_state"`}},
		{tend.Listed{Record: backoffHealth}, false, []string{`"state":"backoff"`}, []string{`"health_state"`}},
		{tend.Listed{Record: liveHealth}, false, []string{`"health_state":"starting"`}, nil},
		{tend.Listed{Record: labeled}, false,
			[]string{`"big":"` + strings.Repeat("é", 128) + `…"`, `"l00":"v"`, `"l48":"v"`,
				`"labels_cut":"12 of 62 labels left out (at most 50 shown, keys of at most 256 bytes); 1 value cut to 256 bytes (ending …): show with full has them whole"`},
			[]string{`"l49"`, `"kkkk`}},
		{tend.Listed{Record: labeled}, true, []string{`"l59":"v"`, `"kkkk`, `"big":"` + strings.Repeat("é", 200) + `"`}, []string{`"labels_cut"`}},
		{tend.Listed{Record: noted}, false,
			[]string{`{"time":"2026-01-02T03:04:05Z","text":"n15"}`, `"n24"`, `"notes_total":25`, `"notes_truncated":true`},
			[]string{`"n14"`, `"n00"`}},
		{tend.Listed{Record: noted}, true, []string{`"n00"`, `"n24"`}, []string{`"notes_total"`, `"notes_truncated"`}},
		{tend.Listed{Record: rec}, false, []string{`"notes_total":1`}, []string{`"notes_truncated"`}},
		{tend.Listed{Record: rec}, true,
			[]string{`"seal":"seal"`, `"sum":"sum"`, `"boot":"b00t"`, `"proc_start":123`, `"ready":true`, `"health_status":`,
				`"size":{"stdout":12,"stderr":3}`},
			[]string{`"health_state"`}},
	}
	for _, tt := range tests {
		r, err := shown(tt.l, tend.LogPlace{Stdout: 12, Stderr: 3}, tt.full)
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range tt.want {
			if !strings.Contains(string(b), w) {
				t.Errorf("%s full %v: %s has no %s", tt.l.ID, tt.full, b, w)
			}
		}
		for _, d := range tt.drop {
			if strings.Contains(string(b), d) {
				t.Errorf("%s full %v: %s has %s", tt.l.ID, tt.full, b, d)
			}
		}
		var v any
		json.Unmarshal(b, &v)
		if err := schema.Validate(v); err != nil {
			t.Errorf("%s full %v: the output schema refuses it: %v", tt.l.ID, tt.full, err)
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

// TestCancelIDsResult: a cancel of ids is an error, naming each run
// that was neither canceled nor ended already (it may run on), in the
// order named; every run's outcome is its structured content either way.
func TestCancelIDsResult(t *testing.T) {
	o := func(id, outcome, detail string) tend.Outcome {
		return tend.Outcome{ID: id, Verb: "cancel", Outcome: outcome, Detail: detail}
	}
	tests := []struct {
		ids  []string
		runs []tend.Outcome
		want string // the error's text, or "" for none
	}{
		{[]string{"a", "b"}, []tend.Outcome{o("b", "already_finished", "completed"), o("a", "canceled", "")}, ""},
		{[]string{"x", "y"}, []tend.Outcome{o("y", "not_found", "no run has this id"), o("x", "not_permitted", "run x belongs to session s, not to session t")},
			"cancel: 2 of 2 runs were not canceled (every run's outcome is in runs): x: not_permitted: run x belongs to session s, not to session t; y: not_found: no run has this id"},
		{[]string{"a", "nope"}, []tend.Outcome{o("nope", "not_found", ""), o("a", "canceled", "")},
			"cancel: 1 of 2 runs were not canceled (every run's outcome is in runs): nope: not_found"},
	}
	for _, tt := range tests {
		res, out, err := cancelIDsResult(tt.ids, slices.Clone(tt.runs))
		if err != nil || out == nil || len(out.Runs) != len(tt.runs) {
			t.Fatalf("%v: %+v, %v", tt.ids, out, err)
		}
		for i, r := range out.Runs {
			if r.ID != tt.ids[i] {
				t.Errorf("%v: runs[%d] is %s, not in the order named", tt.ids, i, r.ID)
			}
		}
		switch {
		case tt.want == "" && res != nil:
			t.Errorf("%v: an error: %+v", tt.ids, res)
		case tt.want != "" && (res == nil || !res.IsError):
			t.Errorf("%v: not an error", tt.ids)
		case tt.want != "" && res.Content[0].(*mcp.TextContent).Text != tt.want:
			t.Errorf("%v: %q, want %q", tt.ids, res.Content[0].(*mcp.TextContent).Text, tt.want)
		}
	}
}

// TestDrainOutputGone: a server that drains stops once nobody reads its
// output (its client died), and ends the calls under way; a file it
// writes to is never gone.
func TestDrainOutputGone(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if outputGone(w) {
		t.Fatal("a pipe still read is gone")
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if outputGone(f) {
		t.Fatal("a file is gone")
	}
	gone := make(chan struct{})
	c := &drainingConn{out: w, gone: func() { close(gone) }, pending: map[jsonrpc.ID]bool{{}: true}, answered: make(chan struct{}, 1)}
	r.Close()
	drained := make(chan struct{})
	go func() { c.drain(context.Background()); close(drained) }()
	select {
	case <-drained:
	case <-time.After(10 * time.Second):
		t.Fatal("drain waits on, its output gone")
	}
	select {
	case <-gone:
	default:
		t.Fatal("drain stopped, but did not end the calls under way")
	}
}

// TestEndWith: a call under way ends when the server does.
func TestEndWith(t *testing.T) {
	ctx, stop := context.WithCancel(context.Background())
	h := endWith(ctx)(func(hctx context.Context, _ string, _ mcp.Request) (mcp.Result, error) {
		<-hctx.Done()
		return nil, hctx.Err()
	})
	done := make(chan error)
	go func() { _, err := h(context.Background(), "tools/call", nil); done <- err }()
	stop()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the call ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call runs on after the server's end")
	}
}

// TestStartNames: a start's bad argument is named in its error, where
// the spool's error names several at once.
func TestStartNames(t *testing.T) {
	tests := []struct {
		in   startIn
		want string
	}{
		{startIn{Command: "true\x00x"}, "start: command has a NUL byte at byte 4, which no command line can hold"},
		{startIn{Command: "true", Cwd: "/tmp\x00"}, "start: cwd has a NUL byte at byte 4, which no path can hold"},
		{startIn{Command: "true", Health: &healthIn{Exec: "true", Interval: duration("0")}}, "start: health.interval: 0s: want at least 100ms (left out: 1s)"},
		{startIn{Command: "true", Health: &healthIn{Exec: "true", Timeout: duration("0")}}, "start: health.timeout: 0s: want more than 0 (left out: 1s)"},
		{startIn{Command: "true", Health: &healthIn{Exec: "true", Retries: -1}}, "start: health.retries: -1: want at least 1 (left out: 3)"},
	}
	for _, tt := range tests {
		res, _, _ := (&tools{}).start(context.Background(), tt.in)
		if res == nil || !res.IsError {
			t.Errorf("%+v: not refused", tt.in)
			continue
		}
		if text := res.Content[0].(*mcp.TextContent).Text; text != tt.want {
			t.Errorf("%+v: %q, want %q", tt.in, text, tt.want)
		}
	}
}

// TestLogsBothLines: a read of both streams has lines even when it read
// none, as an agent's loop over them expects; one of one stream has
// none.
func TestLogsBothLines(t *testing.T) {
	b, err := json.Marshal(logsOut{Lines: []tend.LogLine{}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"lines":[]`) {
		t.Errorf("both, nothing read: %s has no lines", b)
	}
	if b, _ := json.Marshal(logsOut{}); strings.Contains(string(b), `"lines"`) {
		t.Errorf("one stream: %s has lines", b)
	}
	if s := schemaOf[logsOut](); slices.Contains(s.Required, "lines") {
		t.Errorf("the output schema requires lines, which a read of one stream has not")
	}
}
