package spool

import (
	"strings"
	"testing"
	"time"
)

func TestParseStartWaits(t *testing.T) {
	at := time.Date(2026, 11, 26, 22, 0, 0, 0, time.UTC)
	tests := []struct {
		body      string
		after     string // the deps as they print, comma-separated
		notBefore *NotBefore
		err       string
	}{
		{`{"command": "x", "after": ["build", "lint:ended", "db:ready"]}`, "build,lint:ended,db:ready", nil, ""},
		{`{"command": "x", "after": ["build:completed"]}`, "build", nil, ""},
		{`{"command": "x", "after": []}`, "", nil, ""},
		{`{"command": "x", "not_before": "2026-11-26T22:00:00Z"}`, "", &NotBefore{At: at}, ""},
		{`{"command": "x", "not_before": "10m"}`, "", &NotBefore{In: 10 * time.Minute}, ""},
		{`{"command": "x", "not_before": 90}`, "", &NotBefore{In: 90 * time.Second}, ""},
		{`{"command": "x", "after": "build"}`, "", nil, `"after" must be a list of run IDs`},
		{`{"command": "x", "after": ["build:done"]}`, "", nil, `no condition "done"`},
		{`{"command": "x", "after": ["../x"]}`, "", nil, `"after": "../x"`},
		{`{"command": "x", "after": ["a", "a:ended"]}`, "", nil, "named twice"},
		{`{"command": "x", "not_before": "tomorrow"}`, "", nil, `"not_before": want an RFC 3339 time`},
		{`{"command": "x", "not_before": "-5m"}`, "", nil, `"not_before": want`},
	}
	for _, tt := range tests {
		s, err := ParseStart([]byte(tt.body))
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParseStart(%s) err = %v, want %q", tt.body, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseStart(%s) = %v", tt.body, err)
			continue
		}
		var deps []string
		for _, d := range s.After {
			deps = append(deps, d.String())
		}
		if got := strings.Join(deps, ","); got != tt.after {
			t.Errorf("ParseStart(%s).After = %s, want %s", tt.body, got, tt.after)
		}
		if (s.NotBefore == nil) != (tt.notBefore == nil) || s.NotBefore != nil && (!s.NotBefore.At.Equal(tt.notBefore.At) || s.NotBefore.In != tt.notBefore.In) {
			t.Errorf("ParseStart(%s).NotBefore = %+v, want %+v", tt.body, s.NotBefore, tt.notBefore)
		}
		// What MarshalJSON writes reads back the same.
		b, _ := s.MarshalJSON()
		again, err := ParseStart(b)
		if err != nil || len(again.After) != len(s.After) || (again.NotBefore == nil) != (s.NotBefore == nil) {
			t.Errorf("ParseStart(MarshalJSON(%s)) = %+v, %v", tt.body, again, err)
		}
	}
}
