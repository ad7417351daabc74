package tracker

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// The checksum is checked without marshaling when the file is byte for
// byte what Write wrote; every other file is judged by its fields, as
// before, so a reformatted record is trusted and an edited one is not.
func TestChecksumOfFiles(t *testing.T) {
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	st := &State{ID: "a", State: Running, Rev: 2, Command: []string{"/bin/sh", "-c", `echo "a  b" \ <&>`},
		Labels: map[string]string{"k": "v w"}, CreatedAt: now, StartedAt: &now}
	st.Sum = st.checksum()
	written, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	var reindented bytes.Buffer
	json.Indent(&reindented, mustCompact(t, written), "", "\t")
	tests := []struct {
		name      string
		file      []byte
		fast, ok  bool // fileSumMatches; ParseState trusts it
		wantState string
	}{
		{"as written", written, true, true, Running},
		{"reindented", reindented.Bytes(), true, true, Running},
		{"blank line appended", append(append([]byte{}, written...), "\n\n"...), true, true, Running},
		{"fields reordered", reorder(t, written), false, true, Running},
		{"state edited", bytes.Replace(written, []byte(`"running"`), []byte(`"failed"`), 1), false, false, Failed},
		{"space in a string", bytes.Replace(written, []byte(`a  b`), []byte(`a b`), 1), false, false, Running},
		{"sum edited", bytes.Replace(written, []byte(st.Sum), []byte(strings.Repeat("0", 24)), 1), false, false, Running},
		{"sum emptied", bytes.Replace(written, []byte(`"sum": "`+st.Sum), []byte(`"sum": "`), 1), false, false, Running},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var parsed State
			if err := json.Unmarshal(tt.file, &parsed); err != nil {
				t.Fatal(err)
			}
			if got := fileSumMatches(tt.file, parsed.Sum); got != tt.fast {
				t.Errorf("fileSumMatches = %v, want %v", got, tt.fast)
			}
			got, err := ParseState("state.json", tt.file)
			if tt.ok && err != nil || !tt.ok && !errors.Is(err, ErrEdited) {
				t.Fatalf("ParseState: %v, want trusted %v", err, tt.ok)
			}
			if got.State != tt.wantState {
				t.Errorf("state %q, want %q", got.State, tt.wantState)
			}
		})
	}
}

// encode marshals once what checksum and json.MarshalIndent made by
// marshaling twice: the same bytes, the same sum.
func TestEncodeIsMarshalIndent(t *testing.T) {
	now := time.Date(2026, 11, 21, 10, 0, 0, 123456789, time.UTC)
	code := 7
	tests := []*State{
		{ID: "min", State: Queued, Rev: 1},
		{ID: "a", State: Failed, Rev: 9, Session: "s", Command: []string{"/bin/sh", "-c", "echo \"a  b\" \\ <&> \u00e9\u2028\t"},
			Labels: map[string]string{"k": "v w", "a": "}\"{"}, CreatedAt: now, StartedAt: &now, EndedAt: &now,
			ExitCode: &code, Reason: `exited with code 7, "sum":""}`, CPUSeconds: 0.25},
	}
	for _, st := range tests {
		t.Run(st.ID, func(t *testing.T) {
			st.Sum = "stale"
			got, err := st.encode()
			if err != nil {
				t.Fatal(err)
			}
			want := *st
			want.Sum = ""
			want.Sum = want.checksum()
			b, err := json.MarshalIndent(&want, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			if st.Sum != want.Sum || string(got) != string(b)+"\n" {
				t.Errorf("encode: sum %s, file\n%s\nwant sum %s, file\n%s", st.Sum, got, want.Sum, b)
			}
			if _, err := ParseState("state.json", got); err != nil {
				t.Errorf("ParseState of what encode wrote: %v", err)
			}
		})
	}
}

func mustCompact(t *testing.T, b []byte) []byte {
	var c bytes.Buffer
	if err := json.Compact(&c, b); err != nil {
		t.Fatal(err)
	}
	return c.Bytes()
}

// reorder moves a record's "sum" field to its start: the same fields.
func reorder(t *testing.T, b []byte) []byte {
	c := string(mustCompact(t, b))
	i := strings.LastIndex(c, `,"sum":`)
	return []byte("{" + c[i+1:len(c)-1] + "," + c[1:i] + "}")
}

// List reads each record relative to runs/; it finds what Read finds.
func TestListReadsWhatReadReads(t *testing.T) {
	s, _ := newStore(t)
	for _, id := range []string{"a", "b", "c"} {
		os.Mkdir(s.RunDir(id), 0o755)
		if err := s.Write(&State{ID: id, State: Completed, Rev: 1, CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	os.Mkdir(s.RunDir("empty"), 0o755) // being created: skipped
	list, errs := s.List()
	if len(list) != 3 || len(errs) != 0 {
		t.Fatalf("List = %d records, %v", len(list), errs)
	}
	for _, st := range list {
		one, err := s.Read(st.ID)
		if err != nil || one.Sum != st.Sum {
			t.Errorf("Read(%s) = %v, %v; List gave %v", st.ID, one, err, st)
		}
	}
}
