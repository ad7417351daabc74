package main

import "testing"

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
		frac, label, rest, ok := parseProgress(tt.in)
		if ok != tt.ok || ok && (frac != tt.frac || label != tt.label || rest != tt.rest) {
			t.Errorf("parseProgress(%q) = %v, %q, %q, %v; want %v, %q, %q, %v", tt.in, frac, label, rest, ok, tt.frac, tt.label, tt.rest, tt.ok)
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
		if got := progressBar(tt.frac, 10); got != tt.want {
			t.Errorf("progressBar(%v) = %q, want %q", tt.frac, got, tt.want)
		}
	}
	// What a run wrote cannot reach the terminal as control codes.
	if got := progressText("\x1b]0;pwned\x07\x1b[2J50"); got != "█████░░░░░ 50%" {
		t.Errorf("progressText of escapes = %q", got)
	}
	if got := progressText("step\x1b[31m one\rtwo"); got != "step one two" {
		t.Errorf("progressText of text with escapes = %q", got)
	}
}
