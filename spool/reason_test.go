package spool

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestIsReason: what Reject writes beside each request it moves aside is
// a reason of that request's name in rejected/, numbered, cut short or
// quoted, and of no other name; what it does not write is none.
func TestIsReason(t *testing.T) {
	long := strings.Repeat("0", nameMax-len(".start")) + ".start"
	d := newDir(t)
	var names []string
	for _, name := range []string{"x.strat", "x.strat", "x: y.start", "a\x1bb.cancel", long, long} {
		os.WriteFile(filepath.Join(d.Spool(), name), []byte("true"), 0o600)
		dst, err := d.Reject(name, "bad: very")
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, filepath.Base(dst))
	}
	for _, file := range names {
		b, err := os.ReadFile(filepath.Join(d.Rejected(), file+".error"))
		if err != nil {
			t.Fatal(err)
		}
		if !IsReason(file, b) {
			t.Errorf("IsReason(%q, %q) = false, want true", file, b)
		}
	}
	for _, tt := range []struct{ file, b string }{
		{"x.strat", ""},
		{"x.strat", "x.strat: bad"},                // no newline: cut short
		{"x.strat", "x.strat: bad\nmore\n"},        // two lines
		{"x.strat", "y.strat: bad\n"},              // another's
		{"x.strat.1", "x.strat.1.start: bad\n"},    // another's
		{"x.strat.0", "x.strat: bad\n"},            // no such suffix
		{"x.strat.01", "x.strat: bad\n"},           // nor this one
		{"x.error", "echo not a reason: at all\n"}, // a request named x.error
		{"a\x1bb.cancel", "a\x1bb.cancel: bad\n"},  // Reject quotes it
	} {
		if IsReason(tt.file, []byte(tt.b)) {
			t.Errorf("IsReason(%q, %q) = true, want false", tt.file, tt.b)
		}
	}
}

func TestParseChosen(t *testing.T) {
	for _, tt := range []struct {
		b    string
		ino  uint64
		ids  int
		fail bool
	}{
		{"12\na\nb\n", 12, 2, false},
		{"12\n", 12, 0, false},
		{"", 0, 0, true},
		{"\n", 0, 0, true},
		{"12\n../x\n", 0, 0, true},
		{"12\n\n", 0, 0, true},
		{"\x00\x00\x00", 0, 0, true}, // a power loss's zeros
	} {
		ino, ids, err := ParseChosen([]byte(tt.b))
		if (err != nil) != tt.fail || ino != tt.ino || len(ids) != tt.ids {
			t.Errorf("ParseChosen(%q) = %d, %q, %v", tt.b, ino, ids, err)
		}
	}
}

// TestIsReasonLongLine: a line that is no reason, as long as a request
// may be and full of ": ", is told from one in a time linear in its
// length. Each ": " could end the name a reason begins with, but no name
// Printable makes is longer than a request's name quoted whole: reading
// further is quadratic (64 KiB took 8 s, a request's 1 MiB over half an
// hour of root's fsck). A reason naming the longest name quoted still
// is one.
func TestIsReasonLongLine(t *testing.T) {
	b := append(bytes.Repeat([]byte(": "), 32<<10), '\n')
	start := time.Now()
	if IsReason("x.strat", b) {
		t.Fatal("a line of colons taken for a reason")
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("IsReason of %d bytes took %v", len(b), took)
	}
	name := strings.Repeat("\xff", nameMax)
	file := rejectedName(name, 0)
	if line := Printable(name) + ": bad: " + strings.Repeat(": ", 100) + "\n"; !IsReason(file, []byte(line)) {
		t.Errorf("the reason of a request named %d bytes \\xff not taken for one", nameMax)
	}
}
