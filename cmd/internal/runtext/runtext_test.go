package runtext

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/tendhq/tend/tracker"
)

func TestParseProgress(t *testing.T) {
	for _, tt := range []struct {
		in          string
		frac        float64
		label, rest string
		ok          bool
	}{
		{"40", 0.4, "40%", "", true},
		{"40%", 0.4, "40%", "", true},
		{" 12.5 % ", 0.125, "12.5%", "", true},
		{"100", 1, "100%", "", true},
		{"3/10 compiling", 0.3, "3/10", "compiling", true},
		{"75 linking the binary", 0.75, "75%", "linking the binary", true},
		{"101", 0, "", "", false},
		{"-1", 0, "", "", false},
		{"4/3", 0, "", "", false},
		{"1/0", 0, "", "", false},
		{"NaN", 0, "", "", false},
		{"compiling", 0, "", "", false},
		{"", 0, "", "", false},
	} {
		frac, label, rest, ok := ParseProgress(tt.in)
		if ok != tt.ok || ok && (frac != tt.frac || label != tt.label || rest != tt.rest) {
			t.Errorf("ParseProgress(%q) = %v, %q, %q, %v; want %v, %q, %q, %v", tt.in, frac, label, rest, ok, tt.frac, tt.label, tt.rest, tt.ok)
		}
	}
}

func TestProgressBar(t *testing.T) {
	for _, tt := range []struct {
		frac float64
		want string
	}{
		{0, "░░░░░░░░░░"},
		{0.4, "████░░░░░░"},
		{0.45, "████▌░░░░░"},
		{1, "██████████"},
		{1.5, "██████████"},
		{-1, "░░░░░░░░░░"},
	} {
		if got := ProgressBar(tt.frac, 10); got != tt.want {
			t.Errorf("ProgressBar(%v) = %q, want %q", tt.frac, got, tt.want)
		}
	}
	// What a run wrote cannot reach the terminal as control codes.
	if got := Progress("\x1b]0;pwned\x07\x1b[2J50"); got != "█████░░░░░ 50%" {
		t.Errorf("Progress of escapes = %q", got)
	}
	if got := Progress("step\x1b[31m one\rtwo"); got != "step one two" {
		t.Errorf("Progress of text with escapes = %q", got)
	}
}

func TestPrintable(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"plain text", "plain text"},
		{"\x1b[31mred\x1b[0m", "red"},
		{"\x1b[?1049h\x1b[2J\x1b[1;1Hhome", "home"},
		{"\x1b]0;pwned\x07title", "title"},
		{"\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\", "link"},
		{"\x1bPq#0;2;0;0;0\x1b\\sixel", "sixel"},
		{"\x1b_apc\x1b\\ok", "ok"},
		{"\x1b(Bcharset", "charset"},
		{"\x1b7save\x1b8", "save"},
		{"\x1b=keypad\x1b>", "keypad"},
		{"\u009b2Jc1 csi", "c1 csi"},
		{"\u009d0;t\u009cc1 osc", "c1 osc"},
		{"tab\there\rcr\nnl", "tab here cr nl"},
		{"\x1b", ""},
		{"cut\x1b[12", "cut"},
		{"cut\x1b]0;never ends", "cut"},
		{"\x1b(é", "é"},
		{"\x1b\u00e9", "é"},
		{"bad \xff utf-8", "bad ? utf-8"},
		{"\x1b[31mé\x1b[0m ünïcode", "é ünïcode"},
		{"\u0085nel \x7fdel", " nel  del"},
	} {
		got := Printable(tt.in)
		if got != tt.want {
			t.Errorf("Printable(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if strings.ContainsFunc(got, unicode.IsControl) || !utf8.ValidString(got) {
			t.Errorf("Printable(%q) = %q: a control character, or invalid UTF-8", tt.in, got)
		}
	}
}

// FuzzPrintable: whatever a run writes, what reaches the terminal has no
// control character and is valid UTF-8.
func FuzzPrintable(f *testing.F) {
	for _, s := range []string{"\x1b[31mred", "\x1b]0;t\x07", "\u009b2J", "\x1bP\x1b\\", "\x1b(\xff", "ok"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := Printable(s)
		if strings.ContainsFunc(got, unicode.IsControl) || !utf8.ValidString(got) {
			t.Errorf("Printable(%q) = %q: a control character, or invalid UTF-8", s, got)
		}
	})
}

// TestState: a queued run shows its place, and "held" in place of
// "queued" while a bad version of its request holds it; other states
// show as they are.
func TestState(t *testing.T) {
	held := "held: its request does not parse or is refused (x); it waits for a good version"
	tests := []struct {
		st       tracker.State
		position int
		want     string
	}{
		{tracker.State{State: tracker.Queued}, 2, "queued #2"},
		{tracker.State{State: tracker.Queued}, 0, "queued"},
		{tracker.State{State: tracker.Queued, Reason: held}, 1, "held #1"},
		{tracker.State{State: tracker.Queued, Reason: held}, 0, "held"},
		{tracker.State{State: tracker.Queued, Reason: "waiting for b to complete; held up: x"}, 3, "queued #3"},
		{tracker.State{State: tracker.Canceled, Reason: held}, 0, "canceled"},
		{tracker.State{State: tracker.Running}, 0, "running"},
	}
	for _, tt := range tests {
		if got := State(&tt.st, tt.position); got != tt.want {
			t.Errorf("State(%s, %q, %d) = %q, want %q", tt.st.State, tt.st.Reason, tt.position, got, tt.want)
		}
	}
}
