package spool

import "testing"

// The request parsers run once per request the watcher takes.

func BenchmarkParseName(b *testing.B) {
	for b.Loop() {
		if _, err := ParseName("build-42@c0ffee.cancel"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseStartShell(b *testing.B) {
	body := []byte("make test\n")
	for b.Loop() {
		if _, err := ParseStart(body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseStartJSON(b *testing.B) {
	body := []byte(`{"command": ["go", "test", "./..."], "session": "agent-1", "timeout": "10m", "labels": {"kind": "test"}, "env": {"GOFLAGS": "-count=1"}}`)
	for b.Loop() {
		if _, err := ParseStart(body); err != nil {
			b.Fatal(err)
		}
	}
}
