package watcher

import (
	"errors"
	"testing"
	"time"
)

// TestHistoryFaultStill: a history found bad is not read again while it
// is the same files, for historyRetry at most.
func TestHistoryFaultStill(t *testing.T) {
	bad := errors.New("history.jsonl:2: not JSON")
	now := time.Now()
	for _, tc := range []struct {
		name  string
		fault historyFault
		files string
		want  error
	}{
		{"none", historyFault{}, "h:1:2;", nil},
		{"the same files", historyFault{bad, "h:1:2;", now}, "h:1:2;", bad},
		{"a file replaced", historyFault{bad, "h:1:2;", now}, "h:1:3;", nil},
		{"a file rotated", historyFault{bad, "h:1:2;", now}, "h.1:1:2;h:1:4;", nil},
		{"too long ago", historyFault{bad, "h:1:2;", now.Add(-historyRetry)}, "h:1:2;", nil},
	} {
		if got := tc.fault.still(tc.files); got != tc.want {
			t.Errorf("%s: still = %v, want %v", tc.name, got, tc.want)
		}
	}
}
