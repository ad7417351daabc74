package tend

import (
	"strings"
	"testing"
	"time"
)

// TestControlGrace: a Control's Grace of 0 sends none (the run's own),
// NoGrace sends "0s" (SIGKILL right after SIGTERM), and another negative
// is refused, not taken for NoGrace.
func TestControlGrace(t *testing.T) {
	c := &Client{}
	tests := []struct {
		grace   time.Duration
		want    string // in the body
		wantErr string
	}{
		{0, `{}`, ""},
		{NoGrace, `{"grace":"0s"}`, ""},
		{2 * time.Second, `{"grace":"2s"}`, ""},
		{-2 * time.Second, "", "negative"},
	}
	for _, tt := range tests {
		b, err := c.body("cancel", Control{Grace: tt.grace}, nil)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("grace %v: %s, %v; want an error saying %q", tt.grace, b, err, tt.wantErr)
			}
			continue
		}
		if err != nil || string(b) != tt.want {
			t.Errorf("grace %v: %s, %v; want %s", tt.grace, b, err, tt.want)
		}
	}
}
