package main

import (
	"strings"
	"testing"
	"time"
)

// TestParseSince: tend events --since takes a duration back from now, an
// RFC 3339 time, or the last time of day not after now; anything else is
// an error that says what to write.
func TestParseSince(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.Local)
	tests := []struct {
		in   string
		want time.Time
		err  string
	}{
		{"0s", now, ""},
		{"90m", now.Add(-90 * time.Minute), ""},
		{"2026-11-28T10:00:00Z", time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC), ""},
		{"2026-11-28T10:00:00.5+01:00", time.Date(2026, 11, 28, 9, 0, 0, 5e8, time.UTC), ""},
		{"11:30", time.Date(2026, 11, 29, 11, 30, 0, 0, time.Local), ""},
		{"12:00:00", now, ""},
		{"13:15", time.Date(2026, 11, 28, 13, 15, 0, 0, time.Local), ""}, // later today: yesterday's
		{"-5m", time.Time{}, "not negative"},
		{"5", time.Time{}, "has no unit"},
		{"yesterday", time.Time{}, "want a duration back from now"},
	}
	for _, tt := range tests {
		got, err := parseSince(tt.in, now)
		switch {
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("parseSince(%q) = %v, %v; want an error with %q", tt.in, got, err, tt.err)
		case tt.err == "" && (err != nil || !got.Equal(tt.want)):
			t.Errorf("parseSince(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}
