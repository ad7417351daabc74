package tracker

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestInterleave(t *testing.T) {
	tests := []struct {
		name           string
		stdout, stderr string
		order          string
		from           int64
		dropped        [2]int64 // of stdout, stderr: cut from the files' start
		want           string
	}{
		{name: "no switches: stream order", stdout: "a\nb\n", stderr: "x\n",
			want: "o a|o b|e x|"},
		{name: "switches", stdout: "o1\no2\no3\n", stderr: "e1\ne2\n",
			order: "stdout 3\nstderr 3\nstdout 6\n",
			want:  "o o1|e e1|o o2|e e2|o o3|"},
		{name: "after the last switch, the stream written to first", stdout: "o1\no2\n", stderr: "e1\n",
			order: "stdout 3\n",
			want:  "o o1|e e1|o o2|"},
		{name: "a line across a switch waits for its end", stdout: "o1\no2\n", stderr: "par" + "tial\n",
			order: "stdout 3\nstderr 3\n",
			want:  "o o1|o o2|e partial|"},
		{name: "a torn or bad line is skipped", stdout: "o1\no2\n", stderr: "e1\n",
			order: "stdout 3\nbogus\nstderr 3\nstdout",
			want:  "o o1|e e1|o o2|"},
		{name: "an unended last line is passed at the end", stdout: "o1\nlast", stderr: "e1\n",
			order: "stdout 3\n",
			want:  "o o1|e e1|o last"},
		{name: "from an offset", stdout: "o1\no2\n", stderr: "e1\ne2\n",
			order: "stdout 3\nstderr 3\n", from: 3,
			want: "o o2|e e2|"},
		{name: "dropped bytes are skipped", stdout: "o1\no2\n", stderr: "e1\ne2\n",
			order: "stdout 3\nstderr 3\nstdout 6\n", dropped: [2]int64{3, 0},
			want: "e e1|o o2|e e2|"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, st := newCompletedRun(t)
			st.Output = &Output{Limit: 1 << 20}
			st.Output.Stdout.Dropped, st.Output.Stdout.Base = tt.dropped[0], tt.dropped[0]
			st.Output.Stderr.Dropped, st.Output.Stderr.Base = tt.dropped[1], tt.dropped[1]
			for name, data := range map[string]string{"stdout": tt.stdout[tt.dropped[0]:], "stderr": tt.stderr[tt.dropped[1]:], "order": tt.order} {
				if err := os.WriteFile(filepath.Join(s.RunDir("r"), name), []byte(data), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			var got strings.Builder
			it := s.Interleave("r", [2]int64{tt.from, tt.from})
			err := it.Read(st, true, func(l Line) error {
				got.WriteString(l.Stream[3:4] + " " + strings.ReplaceAll(string(l.Data), "\n", "|"))
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if got.String() != tt.want {
				t.Errorf("got  %q\nwant %q", got.String(), tt.want)
			}
		})
	}
}

// TestInterleaveFollows reads while the streams grow: lines are passed
// once each, and a line is held until it ends.
func TestInterleaveFollows(t *testing.T) {
	s, _ := newStore(t)
	st := &State{ID: "r", State: Running}
	if err := os.MkdirAll(s.RunDir("r"), 0o755); err != nil {
		t.Fatal(err)
	}
	add := func(name, data string) {
		f, err := os.OpenFile(filepath.Join(s.RunDir("r"), name), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString(data)
		f.Close()
	}
	it := s.Interleave("r", [2]int64{})
	var got []string
	read := func(final bool) {
		t.Helper()
		if err := it.Read(st, final, func(l Line) error {
			got = append(got, l.Stream+":"+string(l.Data))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	add("stdout", "o1\npar")
	read(false)
	add("stderr", "e1\n")
	if err := s.AppendSwitches("r", 0, []Switch{{From: "stdout", At: 6}}); err != nil {
		t.Fatal(err)
	}
	read(false)
	add("stdout", "tial\n")
	add("stderr", "e2")
	read(false)
	read(true)
	want := []string{"stdout:o1\n", "stderr:e1\n", "stdout:partial\n", "stderr:e2"}
	if strings.Join(got, "") != strings.Join(want, "") {
		t.Errorf("got %q, want %q", got, want)
	}
}

// A follower that finds new bytes in both streams, which no switch
// orders yet, waits for the switch: the run may have written either
// first. Before, it passed stdout's, then stderr's, and a run that wrote
// stderr first was shown the other way round.
func TestInterleaveWaitsForTheSwitch(t *testing.T) {
	f := newFollowing(t)
	f.add("stderr", "e1\n")
	f.add("stdout", "o1\n")
	f.read(false)
	f.want()
	f.switched("stderr", 3)
	f.read(false)
	f.want("stderr:e1\n", "stdout:o1\n")
}

// The two streams' sizes are read one after the other, and a run may
// write its last line of one and its first of the other in between (the
// flake of output.txtar's tail -f of both: stderr's "d" came before
// stdout's "partial"). Neither is passed ahead of the other.
func TestInterleaveSizesReadApart(t *testing.T) {
	f := newFollowing(t)
	f.add("stdout", "o1\npar")
	f.read(false)
	f.want("stdout:o1\n")
	f.it.sized = func(i int) {
		if i == 0 { // between stdout's size and stderr's
			f.it.sized = nil
			f.add("stdout", "tial\n")
			f.add("stderr", "e1\n")
		}
	}
	f.read(false)
	f.read(false)
	f.want("stdout:o1\n")
	f.switched("stdout", 11)
	f.read(false)
	f.want("stdout:o1\n", "stdout:partial\n", "stderr:e1\n")
}

// Bytes of both streams that no switch orders pass after the grace, in
// stream order: a watcher that is not watching the run records none.
func TestInterleaveUnorderedAfterGrace(t *testing.T) {
	f := newFollowing(t)
	f.add("stdout", "o1\n")
	f.add("stderr", "e1\n")
	f.read(false)
	f.want()
	f.it.grace = 0
	f.read(false)
	f.want("stdout:o1\n", "stderr:e1\n")
}

// following is a run's output read by one Interleaver as it grows.
type following struct {
	t   *testing.T
	s   *Store
	st  *State
	it  *Interleaver
	got []string
}

func newFollowing(t *testing.T) *following {
	s, _ := newStore(t)
	if err := os.MkdirAll(s.RunDir("r"), 0o755); err != nil {
		t.Fatal(err)
	}
	return &following{t: t, s: s, st: &State{ID: "r", State: Running}, it: s.Interleave("r", [2]int64{})}
}

// add appends data to stream name, as the run writes it.
func (f *following) add(name, data string) {
	f.t.Helper()
	fh, err := os.OpenFile(filepath.Join(f.s.RunDir("r"), name), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		f.t.Fatal(err)
	}
	defer fh.Close()
	if _, err := fh.WriteString(data); err != nil {
		f.t.Fatal(err)
	}
}

// switched records a switch, as the watcher does.
func (f *following) switched(from string, at int64) {
	f.t.Helper()
	if err := f.s.AppendSwitches("r", 0, []Switch{{From: from, At: at}}); err != nil {
		f.t.Fatal(err)
	}
}

func (f *following) read(final bool) {
	f.t.Helper()
	if err := f.it.Read(f.st, final, func(l Line) error {
		f.got = append(f.got, l.Stream+":"+string(l.Data))
		return nil
	}); err != nil {
		f.t.Fatal(err)
	}
}

// want checks every line passed so far.
func (f *following) want(lines ...string) {
	f.t.Helper()
	if !slices.Equal(f.got, lines) {
		f.t.Errorf("passed %q, want %q", f.got, lines)
	}
}

func TestTrimSwitches(t *testing.T) {
	s, _ := newStore(t)
	os.MkdirAll(s.RunDir("r"), 0o755)
	var sw []Switch
	for i := range 10 {
		sw = append(sw, Switch{From: streams[i%2], At: int64(i)})
	}
	if err := s.AppendSwitches("r", 0, sw); err != nil {
		t.Fatal(err)
	}
	size, err := s.TrimSwitches("r", 0, 3)
	if err != nil {
		t.Fatal(err)
	}
	got, next, err := s.ReadSwitches("r", 0)
	if err != nil || next != size || len(got) != 3 || got[0] != sw[7] || got[2] != sw[9] {
		t.Errorf("after trimming to 3: %v, next %d, size %d, %v", got, next, size, err)
	}
}

// A line longer than MaxLine is passed in pieces of MaxLine bytes, each
// at its own offset, so a reader never holds more of one line: the output
// is its owner's, who may write one line as long as the disk.
func TestInterleaveSplitsLongLines(t *testing.T) {
	tests := []struct {
		name string
		data string
		want []int // the pieces' lengths; their offsets follow
	}{
		{name: "short lines", data: "a\nbc\n", want: []int{2, 3}},
		{name: "exactly MaxLine with its newline", data: strings.Repeat("x", MaxLine-1) + "\n", want: []int{MaxLine}},
		{name: "one byte more", data: strings.Repeat("x", MaxLine) + "\n", want: []int{MaxLine, 1}},
		{name: "no newline at all", data: strings.Repeat("\x00", 2*MaxLine+5), want: []int{MaxLine, MaxLine, 5}},
		{name: "a long line, then a short one", data: strings.Repeat("x", MaxLine+3) + "\nend\n", want: []int{MaxLine, 4, 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, st := newCompletedRun(t)
			if err := os.WriteFile(filepath.Join(s.RunDir("r"), "stdout"), []byte(tt.data), 0o644); err != nil {
				t.Fatal(err)
			}
			var got []int
			var off int64
			var joined strings.Builder
			err := s.Interleave("r", [2]int64{}).Read(st, true, func(l Line) error {
				if l.Offset != off {
					t.Errorf("piece %d at offset %d, want %d", len(got), l.Offset, off)
				}
				got = append(got, len(l.Data))
				off += int64(len(l.Data))
				joined.Write(l.Data)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) || joined.String() != tt.data {
				t.Errorf("pieces %v, want %v (all bytes passed once: %v)", got, tt.want, joined.String() == tt.data)
			}
		})
	}
}

// newCompletedRun returns a store with the directory of run "r", and its
// record: completed, with nothing else.
func newCompletedRun(t *testing.T) (*Store, *State) {
	s, _ := newStore(t)
	if err := os.MkdirAll(s.RunDir("r"), 0o755); err != nil {
		t.Fatal(err)
	}
	return s, &State{ID: "r", State: Completed}
}
