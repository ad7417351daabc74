package tracker

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tendhq/tend/spool"
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
		wantState StateName
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
			got, err := st.encode(nil)
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

// ParseState decodes with encoding/json's v2; a record tend wrote must read
// back exactly as v1 reads it. Every field is set, so a field v2 would
// read differently (a tag, a custom type) fails here.
func TestParseStateReadsWhatV1Reads(t *testing.T) {
	st := fullState(time.FixedZone("", 5*3600+1800))
	v := reflect.ValueOf(*st)
	for i := range v.NumField() {
		if name := v.Type().Field(i).Name; v.Field(i).IsZero() && name != "Sum" && name != "Seal" {
			t.Fatalf("fullState leaves %s unset: set it, so this test reads it", v.Type().Field(i).Name)
		}
	}
	file, err := st.encode(make([]byte, keySize)) // sealed, so the seal is read too
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseState("state.json", file)
	if err != nil {
		t.Fatal(err)
	}
	var want State
	if err := json.Unmarshal(file, &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, &want) {
		gotJSON, _ := json.Marshal(got)
		t.Errorf("ParseState read\n%s\nencoding/json reads\n%s", gotJSON, file)
	}
}

// fullState returns a record with every field set, its times in zone.
func fullState(zone *time.Location) *State {
	t := time.Date(2026, 11, 21, 10, 0, 0, 123456789, zone)
	i64 := func(n int64) *int64 { return &n }
	d := spool.Duration(90 * time.Second)
	code := 3
	return &State{
		ID: "a@b", State: Failed, Rev: 12, Session: "s", OwnerUID: 1000,
		Command: []string{"/bin/sh", "-c", "echo \"é <&>\" \\ \u2028"}, Cwd: "/w", Labels: map[string]string{"k": "v"},
		Timeout: spool.Duration(time.Hour), Grace: spool.Duration(1500 * time.Millisecond),
		After: []string{"build", "db:ready"}, NotBefore: &t, AfterSince: map[string]time.Time{"db": t}, RequestSum: "0123456789abcdef0123456789abcdef", HeldSum: "fedcba9876543210fedcba9876543210",
		Slurm: &spool.Slurm{Partition: "gpu", CPUs: 4, Memory: "8G", GPUs: "a100:1", Nodes: 2, Time: d, Account: "a", QOS: "q", Constraint: "x&y", Args: []string{"--exclusive"}},
		PID:   10, PGID: 10, ProcStart: 12345, Boot: "4d0a0f0e-5b4a-4c53-9a43-0e4a4f0f7a11",
		Job:       &Job{Engine: "slurm", Tag: "tend.0123456789abcdef.a.3", ID: "42", State: "FAILED", Reason: "NonZeroExitCode", Nodes: "n[1-2]", SubmittedAt: &t},
		CreatedAt: t, StartedAt: &t, EndedAt: &t, ExitCode: &code, Signal: "SIGTERM", Reason: "exited with code 3",
		Stop:      &Stop{Cause: CauseCanceled, Requests: []string{"a.cancel"}, RequestedAt: t, KillAt: t},
		Notes:     []Note{{Time: t, Text: "n"}},
		Done:      []string{"a@t1.note"},
		Restart:   &spool.Restart{Policy: "on-failure", Limit: 5, Window: d, Delay: d, MaxDelay: d},
		Health:    &spool.Health{HTTP: "http://x/", Interval: d, Timeout: d, Retries: 2, StartPeriod: d},
		ReadyFile: true,
		Limits:    &spool.Rlimits{NoFile: i64(64), NProc: i64(10), CPU: &d, Core: i64(0), AS: i64(1 << 30)},
		Attempt:   3, Restarts: 2,
		Attempts:    []Attempt{{Attempt: 1, StartedAt: t, EndedAt: t, ExitCode: &code, Signal: "SIGKILL", Reason: "r", Job: "41"}},
		NextStartAt: &t, ReadyAt: &t,
		HealthStatus: &HealthStatus{Status: "healthy", Failures: 1, Checks: []HealthCheck{{Time: t, OK: true, Detail: "200"}}},
		PausedAt:     &t, PausedFor: d,
		Output:   &Output{Limit: 100, Stdout: Stream{Dropped: 5, Base: 5}, Stderr: Stream{Dropped: 1}},
		Progress: "50", ProgressAt: &t, CPUSeconds: 0.25, DurationSeconds: 1.5,
	}
}
