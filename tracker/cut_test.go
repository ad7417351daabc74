package tracker

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

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
	if cuts, err := s.ReadCuts("x"); err != nil || cuts != nil {
		t.Fatalf("no cut file: ReadCuts = %v, %v", cuts, err)
	}
	want := []Cut{{"stdout", 0, 4096}, {"stderr", 8192, 4096}}
	text, err := s.WriteCuts("x", 0, want)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.ReadCuts("x"); err != nil || len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("ReadCuts = %v, %v; want %v", got, err, want)
	}
	if err := s.RemoveCuts("x", "another\n"); err != nil || !s.HasCuts("x") {
		t.Fatalf("RemoveCuts of other content: %v, the file is there: %v", err, s.HasCuts("x"))
	}
	if err := s.RemoveCuts("x", text); err != nil || s.HasCuts("x") {
		t.Fatalf("RemoveCuts: %v, the file is there: %v", err, s.HasCuts("x"))
	}
	for _, bad := range []string{"stdout 1\n", "stdin 0 4096\n", "stdout 0 0\n", "stdout -1 4096\n", "stdout x 4096\n"} {
		os.WriteFile(s.Run("x").Cut(), []byte(bad), 0o644)
		if _, err := s.ReadCuts("x"); err == nil || !strings.Contains(err.Error(), s.Run("x").Cut()+":1:") {
			t.Errorf("ReadCuts of %q: err = %v, want one naming the file and line", bad, err)
		}
	}
}
