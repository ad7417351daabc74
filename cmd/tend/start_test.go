package main

import "testing"

// TestWithFlags: an error of a start request's check names the flags
// that set the field it names, and is left as it is otherwise.
func TestWithFlags(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`"grace": -1s is negative`, `"grace": -1s is negative (set by --grace)`},
		{`"not_before": not a time`, `"not_before": not a time (set by --at or --in)`},
		{`"health": "http": not an http(s) URL with a host`, `"health": "http": not an http(s) URL with a host (set by --health-tcp, --health-http, --health-exec, --health-interval, --health-retries, --health-start-period)`},
		{`"command": empty`, `"command": empty`}, // the command is no flag
		{`empty command`, `empty command`},
		{`run "x": "timeout"`, `run "x": "timeout"`}, // a field only at the start
	} {
		if got := withFlags(tc.in); got != tc.want {
			t.Errorf("withFlags(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
