package spool

import (
	"strings"
	"syscall"
	"testing"
)

func TestParseSelectorName(t *testing.T) {
	for _, tt := range []struct {
		name string
		ok   bool
		tag  string
	}{
		{"*@t1.cancel", true, "t1"},
		{"*@me.x.signal", true, "me.x"},
		{"*@t1.delete", false, ""},
		{"*.cancel", false, ""},
		{"*@.cancel", false, ""},
		{"*@-x.cancel", false, ""},
		{"a@t1.cancel", false, ""},
		{"*@t1", false, ""},
	} {
		n, ok := ParseSelectorName(tt.name)
		if ok != tt.ok || ok && (n.Tag != tt.tag || n.ID != SelectID || n.String() != tt.name) {
			t.Errorf("ParseSelectorName(%q) = %+v, %v; want tag %q, %v", tt.name, n, ok, tt.tag, tt.ok)
		}
	}
}

func TestParseSelect(t *testing.T) {
	for _, tt := range []struct {
		verb, body string
		err        string // a part of the error, or "" for none
	}{
		{VerbCancel, `{"all": true}`, ""},
		{VerbCancel, `{"all": true, "session": "s", "grace": "2s"}`, ""},
		{VerbCancel, `{"labels": {"k": "v"}}`, ""},
		{VerbCancel, `{"ids": ["a", "b.c"]}`, ""},
		{VerbCancel, `{"ids": []}`, ""},
		{VerbSignal, `{"all": true, "signal": "HUP"}`, ""},
		{VerbCancel, ``, "a JSON object naming its runs"},
		{VerbCancel, `all`, "a JSON object naming its runs"},
		{VerbCancel, `{}`, "names no runs"},
		{VerbCancel, `{"all": false}`, "names no runs"},
		{VerbCancel, `{"labels": {}}`, "names no runs"},
		{VerbCancel, `{"all": true, "ids": ["a"]}`, `"all" and "ids"`},
		{VerbCancel, `{"ids": ["../x"]}`, `"ids"`},
		{VerbCancel, `{"labels": {"": "v"}}`, "empty key"},
		{VerbCancel, `{"all": true, "signal": "HUP"}`, `"signal" is for`},
		{VerbCancel, `{"all": true, "bogus": 1}`, "bogus"},
		{VerbSignal, `{"all": true}`, `missing "signal"`},
		{VerbSignal, `{"all": true, "signal": "NOPE"}`, "NOPE"},
		{VerbSignal, `{"all": true, "signal": "STOP"}`, "pause the run instead"},
		{VerbSignal, `{"ids": ["a"], "signal": "CONT"}`, "resume the run instead"},
		{VerbSignal, `{"all": true, "signal": "HUP", "grace": "1s"}`, `"grace" is for`},
	} {
		_, err := ParseSelect(tt.verb, []byte(tt.body))
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("ParseSelect(%s, %s): %v", tt.verb, tt.body, err)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("ParseSelect(%s, %s) = %v, want an error with %q", tt.verb, tt.body, err, tt.err)
		}
	}
}

func TestSelectMatches(t *testing.T) {
	s, err := ParseSelect(VerbSignal, []byte(`{"ids": ["b", "a", "b"], "labels": {"k": "v"}, "signal": "USR1"}`))
	if err != nil {
		t.Fatal(err)
	}
	if s.Signal != syscall.SIGUSR1 || len(s.IDs) != 2 {
		t.Fatalf("got %+v", s)
	}
	for _, tt := range []struct {
		id     string
		labels map[string]string
		want   bool
	}{
		{"a", map[string]string{"k": "v", "x": "y"}, true},
		{"a", map[string]string{"k": "w"}, false},
		{"a", nil, false},
		{"c", map[string]string{"k": "v"}, false},
	} {
		if got := s.Matches(tt.id, tt.labels); got != tt.want {
			t.Errorf("Matches(%s, %v) = %v, want %v", tt.id, tt.labels, got, tt.want)
		}
	}
}

func TestSelectOutcomeRoundTrip(t *testing.T) {
	runs := []RunOutcome{{ID: "b", Outcome: "canceled"}, {ID: "a", Outcome: "not_found", Detail: "no run\nhas this id"}}
	b := SelectOutcome(runs)
	if want := "selected: 2\na: not_found: no run has this id\nb: canceled\n"; string(b) != want {
		t.Fatalf("SelectOutcome = %q, want %q", b, want)
	}
	got, err := ParseSelectOutcome(b)
	if err != nil || len(got) != 2 || got[0].ID != "a" || got[0].Detail != "no run has this id" || got[1].Outcome != "canceled" {
		t.Fatalf("ParseSelectOutcome = %+v, %v", got, err)
	}
	if got, err := ParseSelectOutcome([]byte("selected: 0\n")); err != nil || len(got) != 0 {
		t.Fatalf("ParseSelectOutcome(selected: 0) = %+v, %v", got, err)
	}
	for _, bad := range []string{"rejected: no", "selected: 2\na: canceled\n", "selected: 1\nnocolon\n"} {
		if _, err := ParseSelectOutcome([]byte(bad)); err == nil {
			t.Errorf("ParseSelectOutcome(%q): no error", bad)
		}
	}
}
