package tracker

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// Readers of records and history must never panic on what a crash, a
// disk or a person leaves in them: they fail closed with an error.

func FuzzParseState(f *testing.F) {
	st := &State{ID: "a", State: Running, Rev: 3}
	st.Sum = st.checksum()
	good, _ := jsonIndent(st)
	for _, s := range [][]byte{good, []byte(`{"id": "a"}`), []byte("{"), []byte("null"), []byte(`{"id": "a", "state": "x", "rev": 1, "sum": "0"}`)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := ParseState("state.json", b)
		if err == nil && (st.ID == "" || st.State == "" || st.Rev < 1 || st.Sum != st.checksum()) {
			t.Fatalf("ParseState accepted %q as %+v", b, st)
		}
	})
}

func FuzzReadHistory(f *testing.F) {
	line := `{"time":"2026-01-02T03:04:05Z","id":"a","rev":1,"state":"running"}`
	for _, s := range []string{line + "\n", line, line + "\ngarbage\n", "\n\n", `{"time":"x"}` + "\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(t.TempDir(), "history.jsonl")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		events, err := ReadHistory(path)
		for _, e := range events {
			if e.ID == "" || e.State == "" || e.Rev < 1 {
				t.Fatalf("ReadHistory returned a bad event %+v (err %v)", e, err)
			}
		}
	})
}

func jsonIndent(st *State) ([]byte, error) { return json.MarshalIndent(st, "", "  ") }

func FuzzParseBrief(f *testing.F) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	for _, st := range []*State{
		{ID: "a", State: Completed, Command: []string{"/bin/sh", "-c", "true"}, CreatedAt: at, EndedAt: &at},
		{ID: "a", State: Failed, Labels: map[string]string{"k": "v\t"}, Signal: "SIGTERM", Progress: "50"},
	} {
		f.Add(briefFields(st))
	}
	f.Add("")
	f.Add("completed\t\"\"\t0\t-\t-\t-\t\"\"\t0\t\"\"\t99\t0")
	f.Fuzz(func(t *testing.T, fields string) {
		st, err := parseBrief("a", fields)
		if err != nil {
			return
		}
		again, err := parseBrief("a", briefFields(st))
		if err != nil || !reflect.DeepEqual(again, st) {
			t.Fatalf("parseBrief(%q) = %+v, which reads back as %+v, %v", fields, st, again, err)
		}
	})
}
