package tracker

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestLayout: where a stream's bytes are, for each state a watcher that
// dies in the middle of a cut can leave (see watcher's capStream).
func TestLayout(t *testing.T) {
	const B, C1, C2 = 40960, 8192, 4096
	rec := func(base, dropped int64) *State {
		return &State{ID: "x", Output: &Output{Limit: 65536, Stdout: Stream{Base: base, Dropped: dropped}}}
	}
	tests := []struct {
		name                  string
		st                    *State
		hole                  int64 // bytes punched at the file's start
		cuts                  []Cut
		wantBase, wantDropped int64
	}{
		{"never capped", &State{ID: "x"}, 0, nil, 0, 0},
		{"cut and recorded", rec(B, B), 0, nil, B, B},
		{"holes recorded, none cut", rec(0, B), B, nil, 0, B},
		{"punched, not recorded", rec(B, B), C1, nil, B, B + C1},
		{"cut begun, not made", rec(B, B), C1, []Cut{{"stdout", B, C1}}, B, B + C1},
		{"cut made, not recorded", rec(B, B), 0, []Cut{{"stdout", B, C1}}, B + C1, B + C1},
		{"two cuts, the second not made", rec(B, B), C2, []Cut{{"stdout", B, C1}, {"stdout", B + C1, C2}}, B + C1, B + C1 + C2},
		{"two cuts, both made", rec(B, B), 0, []Cut{{"stdout", B, C1}, {"stdout", B + C1, C2}}, B + C1 + C2, B + C1 + C2},
		{"a cut of the other stream", rec(B, B), 0, []Cut{{"stderr", B, C1}}, B, B},
		{"a cut recorded already", rec(B+C1, B+C1), 0, []Cut{{"stdout", B, C1}}, B + C1, B + C1},
		// A hole as large as the last cut's, at the start of a file cut
		// since: the next cut's, punched before it is listed.
		{"cut made, marked, the next punched", rec(B, B), C1, []Cut{{"stdout", B, C1}, {"stdout", B + C1, 0}}, B + C1, B + C1 + C1},
		{"two cuts made, marked", rec(B, B), 0, []Cut{{"stdout", B, C1}, {"stdout", B + C1, C2}, {"stdout", B + C1 + C2, 0}}, B + C1 + C2, B + C1 + C2},
		{"a mark recorded already", rec(B+C1, B+C1), C2, []Cut{{"stdout", B, C1}, {"stdout", B + C1, 0}}, B + C1, B + C1 + C2},
		{"the other stream's mark", rec(B, B), C1, []Cut{{"stdout", B, C1}, {"stderr", B + C1, 0}}, B, B + C1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := fileWithHole(t, tt.hole)
			base, dropped := tt.st.Layout("stdout", f, tt.cuts)
			if base != tt.wantBase || dropped != tt.wantDropped {
				t.Fatalf("Layout = base %d, dropped %d; want %d, %d", base, dropped, tt.wantBase, tt.wantDropped)
			}
		})
	}
}

// fileWithHole returns a file of 64 KiB of data after hole bytes that
// are a hole.
func fileWithHole(t *testing.T, hole int64) *os.File {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "stdout"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if _, err := f.Write([]byte(strings.Repeat("x", int(hole)+65536))); err != nil {
		t.Fatal(err)
	}
	if hole > 0 {
		if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, hole); err != nil {
			t.Skipf("the file system cannot punch holes: %v", err)
		}
		if got := LeadingHole(f); got != hole {
			t.Skipf("the file system shows a hole of %d bytes, not %d", got, hole)
		}
	}
	return f
}

func TestReadCuts(t *testing.T) {
	s := NewStore(t.TempDir())
	if err := s.MakeRunDir("x"); err != nil {
		t.Fatal(err)
	}
	if cuts, err := s.ReadCuts("x", 0); err != nil || cuts != nil {
		t.Fatalf("no cut file: ReadCuts = %v, %v", cuts, err)
	}
	want := []Cut{{"stdout", 0, 4096}, {"stderr", 8192, 4096}}
	text, err := s.WriteCuts("x", 0, want)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.ReadCuts("x", 0); err != nil || len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("ReadCuts = %v, %v; want %v", got, err, want)
	}
	if err := s.RemoveCuts("x", "another\n"); err != nil || !s.HasCuts("x") {
		t.Fatalf("RemoveCuts of other content: %v, the file is there: %v", err, s.HasCuts("x"))
	}
	if err := s.RemoveCuts("x", text); err != nil || s.HasCuts("x") {
		t.Fatalf("RemoveCuts: %v, the file is there: %v", err, s.HasCuts("x"))
	}
	// A cut file that is not the run's own is not read: the watcher
	// writes what it reads back into a file its owner reads.
	cut := s.Run("x").Cut()
	os.WriteFile(cut, []byte("stdout 0 4096\n"), 0o644)
	if err := os.Link(cut, cut+".other"); err != nil {
		t.Fatal(err)
	}
	if got, err := s.ReadCuts("x", 0); err == nil || !strings.Contains(err.Error(), cut+": not read: it has 2 links") {
		t.Errorf("ReadCuts of a cut file with 2 links = %v, %v; want an error that says so", got, err)
	}
	os.Remove(cut + ".other")
	if os.Geteuid() == 0 {
		if got, err := s.ReadCuts("x", 4242); err == nil || !strings.Contains(err.Error(), "not by the run's owner (uid 4242)") {
			t.Errorf("ReadCuts, as root, of a cut file not of the run's owner = %v, %v; want an error that says so", got, err)
		}
	}
	for _, bad := range []string{"stdout 1\n", "stdin 0 4096\n", "stdout 0 -1\n", "stdout -1 4096\n", "stdout x 4096\n",
		"stdout 0 9007199254740993\n", "stdout 9007199254740992 1\n", "stdout 9223372036854775000 0\n"} {
		os.WriteFile(s.Run("x").Cut(), []byte(bad), 0o644)
		if _, err := s.ReadCuts("x", 0); err == nil || !strings.Contains(err.Error(), s.Run("x").Cut()+":1:") {
			t.Errorf("ReadCuts of %q: err = %v, want one naming the file and line", bad, err)
		}
	}
}

// TestMarkMade: a mark is added where the last cut of a stream listed
// ends at its base, and only there; adding a cut takes its stream's mark.
func TestMarkMade(t *testing.T) {
	const B, C = 40960, 8192
	cut, mark := Cut{"stdout", B, C}, Cut{"stdout", B + C, 0}
	tests := []struct {
		name   string
		cuts   []Cut
		base   int64
		want   []Cut
		marked bool
	}{
		{"no cut file", nil, B, nil, false},
		{"the last cut ends at the base", []Cut{cut}, B + C, []Cut{cut, mark}, true},
		{"marked already", []Cut{cut, mark}, B + C, []Cut{cut, mark}, false},
		{"a cut not made", []Cut{cut}, B, []Cut{cut}, false},
		{"the other stream's cut", []Cut{{"stderr", B, C}}, B + C, []Cut{{"stderr", B, C}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, marked := MarkMade(tt.cuts, "stdout", tt.base)
			if !slices.Equal(got, tt.want) || marked != tt.marked {
				t.Fatalf("MarkMade = %v, %v; want %v, %v", got, marked, tt.want, tt.marked)
			}
		})
	}
	next := Cut{"stdout", B + C, 4096}
	if got := WithCut([]Cut{cut, {"stderr", 0, 0}, mark}, next); !slices.Equal(got, []Cut{cut, {"stderr", 0, 0}, next}) {
		t.Fatalf("WithCut = %v, want the stdout mark gone, the stderr one kept", got)
	}
	if got := WithCut([]Cut{cut, next}, Cut{"stdout", B + C, 8192}); !slices.Equal(got, []Cut{cut, {"stdout", B + C, 8192}}) {
		t.Fatalf("WithCut = %v, want the cut from the same base replaced", got)
	}
}

// TestRebuildKeepsTheBases: a record rebuilt from the history (its own
// lost or torn) places its output's bytes where the lost one did: at the
// bases its last cut's event recorded, corrected, as any record is, by
// the cut file and the file's leading hole for a cut the watcher died in
// the middle of (see capStream). Offsets read before the rebuild then
// name the same bytes after it.
func TestRebuildKeepsTheBases(t *testing.T) {
	const L, B, C1, C2 = 65536, 40960, 8192, 4096
	out := func(base, dropped int64) *Output {
		return &Output{Limit: L, Stdout: Stream{Base: base, Dropped: dropped}}
	}
	t0 := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	ev := func(rev int64, state StateName, o *Output) Event {
		return Event{Time: t0.Add(time.Duration(rev) * time.Second), ID: "r", Rev: rev, State: state, Output: o}
	}
	// A run that ran, was cut at B (two cuts), then at B+C1, and completed.
	cutTwice := []Event{ev(1, Starting, nil), ev(2, Running, nil), ev(3, Running, out(B-C1, B-C1)), ev(4, Running, out(B, B)), ev(5, Completed, nil)}
	tests := []struct {
		name                  string
		events                []Event
		hole                  int64 // bytes punched at the file's start
		cuts                  []Cut // the run's cut file
		wantBase, wantDropped int64
	}{
		{"never cut", []Event{ev(1, Starting, nil), ev(2, Running, nil), ev(3, Completed, nil)}, 0, nil, 0, 0},
		{"cut and recorded", cutTwice, 0, nil, B, B},
		{"cut again, its event after the end's", append(slices.Clone(cutTwice), ev(6, Completed, out(B+C1, B+C1))), 0, nil, B + C1, B + C1},
		{"punched, not recorded", cutTwice, C1, nil, B, B + C1},
		{"cut begun, not made", cutTwice, C1, []Cut{{"stdout", B, C1}}, B, B + C1},
		{"cut made, not recorded", cutTwice, 0, []Cut{{"stdout", B, C1}}, B + C1, B + C1},
		{"two cuts made, neither recorded", cutTwice, 0, []Cut{{"stdout", B, C1}, {"stdout", B + C1, C2}}, B + C1 + C2, B + C1 + C2},
		{"recorded, its cut file not yet removed", append(slices.Clone(cutTwice[:4]), ev(5, Running, out(B+C1, B+C1))), 0, []Cut{{"stdout", B, C1}}, B + C1, B + C1},
		{"holes punched, none cut", []Event{ev(1, Running, nil), ev(2, Running, out(0, B))}, B, nil, 0, B},
		{"cuts of a deleted run with its ID", append(slices.Clone(cutTwice), ev(6, Deleted, nil), ev(1, Starting, nil), ev(2, Completed, nil)), 0, nil, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newStore(t)
			if err := os.MkdirAll(s.RunDir("r"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(s.Run("r").Request(), []byte(`{"command": "seq 1000000", "output_limit": 65536}`), 0o600); err != nil {
				t.Fatal(err)
			}
			st := Rebuild(s, "r", tt.events, func(int, string) (uint64, bool) { return 0, false })
			if st.Output == nil || st.Output.Limit != L {
				t.Fatalf("output %+v, want its limit %d", st.Output, L)
			}
			base, dropped := st.Layout("stdout", fileWithHole(t, tt.hole), tt.cuts)
			if base != tt.wantBase || dropped != tt.wantDropped {
				t.Fatalf("rebuilt, then Layout = base %d, dropped %d; want %d, %d", base, dropped, tt.wantBase, tt.wantDropped)
			}
		})
	}
}

// TestReadOutputWhileCutAndSaved: a read by offset that a cut, and the
// save that records it, overtake returns the bytes at that offset. The
// re-check after the read once read the record and then the cut file: a
// record read before the save and a cut file read after the save removed
// it say neither that the cut was made, and the bytes read before at the
// old base passed for right.
func TestReadOutputWhileCutAndSaved(t *testing.T) {
	const lineLen, C = 16, 16384
	s, _ := newStore(t)
	if err := s.MakeRunDir("r"); err != nil {
		t.Fatal(err)
	}
	rec := &State{ID: "r", State: Running, Rev: 1, OwnerUID: os.Getuid(), Output: &Output{Limit: 65536}}
	if err := s.Write(rec); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(s.Run("r").Stream("stdout"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for off := 0; off < 80<<10; off += lineLen {
		fmt.Fprintf(f, "%0*d\n", lineLen-1, off)
	}
	// The watcher's cut and its save, as capStream and saveCuts make
	// them: each step once, at the reader's steps named.
	at := map[string]func(){
		"laid out": func() {
			if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, C); err != nil {
				t.Skipf("the file system cannot punch holes: %v", err)
			}
			if _, err := s.WriteCuts("r", os.Getuid(), []Cut{{"stdout", 0, C}}); err != nil {
				t.Fatal(err)
			}
			if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_COLLAPSE_RANGE, 0, C); err != nil {
				t.Skipf("the file system cannot cut a file's start: %v", err)
			}
		},
		"record read": func() {
			saved := *rec
			saved.Rev, saved.Output = 2, &Output{Limit: 65536, Stdout: Stream{Base: C, Dropped: C}}
			if err := s.Write(&saved); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(s.Run("r").Cut()); err != nil {
				t.Fatal(err)
			}
		},
	}
	s.readStep = func(step string) {
		if do := at[step]; do != nil {
			delete(at, step)
			do()
		}
	}
	sl, err := s.ReadOutput(rec, "stdout", C, lineLen)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("%0*d\n", lineLen-1, C); sl.Offset != C || string(sl.Data) != want {
		t.Fatalf("read %q at offset %d, want %q at %d", sl.Data, sl.Offset, want, C)
	}
	if len(at) != 0 {
		t.Fatalf("steps never reached: %v", at)
	}
}

// TestRebuildBasesOfAnOlderTend: a record rebuilt from the lines of a
// tend before 2026-11-29, which did not carry the record's output, takes
// its bases from the run's cut file where it names them (they came back
// as 0, every offset off by all that was cut); where nothing says them,
// the report says which stream's base is unknown, and only where its
// file may have been cut (as long as its cap, with no hole at its start).
func TestRebuildBasesOfAnOlderTend(t *testing.T) {
	const L, B, C1 = 65536, 40960, 8192
	t0 := time.Date(2026, 11, 28, 6, 0, 0, 0, time.UTC)
	ev := func(rev int64, state StateName) Event {
		return Event{Time: t0.Add(time.Duration(rev) * time.Second), ID: "r", Rev: rev, State: state}
	}
	older := []Event{ev(1, Starting), ev(2, Running), ev(3, Running), ev(4, Running), ev(5, Completed)}
	tests := []struct {
		name                  string
		cuts                  string // the run's cut file
		size, hole            int64  // its stdout: how long, and the hole at its start
		wantBase, wantDropped int64
		unknown               bool
	}{
		{"never cut: shorter than its cap", "", L / 2, 0, 0, 0, false},
		{"holes punched, none cut", "", B + L, B, 0, B, false},
		{"cut, the cut file gone", "", L, 0, 0, 0, true},
		{"a cut made, its record lost", "stdout 40960 8192\n", L, 0, B + C1, B + C1, false},
		{"a cut begun, not made", "stdout 40960 8192\n", C1 + L, C1, B, B + C1, false},
		{"a cut recorded, and a mark after it", "stdout 32768 8192\nstdout 40960 0\n", L, 0, B, B, false},
		{"stderr's cut only", "stderr 40960 8192\n", L, 0, 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newStore(t)
			if err := os.MkdirAll(s.RunDir("r"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(s.Run("r").Request(), []byte(`{"command": "seq 1000000", "output_limit": 65536}`), 0o600); err != nil {
				t.Fatal(err)
			}
			if tt.cuts != "" {
				if err := os.WriteFile(s.Run("r").Cut(), []byte(tt.cuts), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(s.Run("r").Stream("stdout"), []byte(strings.Repeat("x", int(tt.size))), 0o600); err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(s.Run("r").Stream("stdout"), os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if tt.hole > 0 {
				if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, tt.hole); err != nil || LeadingHole(f) != tt.hole {
					t.Skipf("the file system cannot punch a hole, or does not show it: %v", err)
				}
			}
			st := Rebuild(s, "r", older, func(int, string) (uint64, bool) { return 0, false })
			cuts, err := s.ReadCuts("r", st.OwnerUID)
			if err != nil {
				t.Fatal(err)
			}
			if base, dropped := st.Layout("stdout", f, cuts); base != tt.wantBase || dropped != tt.wantDropped {
				t.Errorf("rebuilt, then Layout = base %d, dropped %d; want %d, %d", base, dropped, tt.wantBase, tt.wantDropped)
			}
			note := UnknownBasesNote(s, st, older)
			if unknown := strings.Contains(note, "the base of its stdout is unknown"); unknown != tt.unknown {
				t.Errorf("the report's note %q; want stdout's base unknown: %v", note, tt.unknown)
			}
		})
	}
}
