package tracker

import (
	"fmt"
	"os"
	"testing"
	"time"
)

func benchState(id string) *State {
	now := time.Now()
	code := 0
	return &State{ID: id, State: Completed, Rev: 3, Command: []string{"/bin/sh", "-c", "make test"},
		CreatedAt: now, StartedAt: &now, EndedAt: &now, ExitCode: &code, PID: 1234, PGID: 1234}
}

// BenchmarkWrite is one durable state change: the atomic replace of
// state.json, synced with its directory.
func BenchmarkWrite(b *testing.B) {
	s, _ := newStore(b)
	st := benchState("r")
	if err := os.Mkdir(s.RunDir("r"), 0o755); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		st.Rev++
		if err := s.Write(st); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncode is a record's bytes and sum, without the file: the
// part of a write that is the watcher's CPU rather than the disk's.
func BenchmarkEncode(b *testing.B) {
	st := benchState("r")
	for b.Loop() {
		st.Rev++
		if _, err := st.encode(nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseState is a record's decoding and checksum check, without
// the file: the CPU tend ls spends on each run.
func BenchmarkParseState(b *testing.B) {
	file, err := benchState("r").encode(nil)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := ParseState("state.json", file); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRead is one record read, its checksum checked.
func BenchmarkRead(b *testing.B) {
	s, _ := newStore(b)
	st := benchState("r")
	os.Mkdir(s.RunDir("r"), 0o755)
	if err := s.Write(st); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := s.Read("r"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkList reads 1,000 records, as tend ls does.
func BenchmarkList(b *testing.B) {
	s, _ := newStore(b)
	for i := range 1000 {
		id := fmt.Sprintf("r%d", i)
		os.Mkdir(s.RunDir(id), 0o755)
		if err := s.Write(benchState(id)); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		if runs, errs := s.List(); len(runs) != 1000 || len(errs) > 0 {
			b.Fatal(len(runs), errs)
		}
	}
}

// BenchmarkAppend is one history event appended.
func BenchmarkAppend(b *testing.B) {
	_, root := newStore(b)
	h := OpenHistory(root)
	ev := Event{ID: "r", State: Running, Rev: 2, Time: time.Now()}
	for b.Loop() {
		if err := h.Append(ev); err != nil {
			b.Fatal(err)
		}
	}
}
