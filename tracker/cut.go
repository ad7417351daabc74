package tracker

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/tendhq/tend/tracker/durable"
	"golang.org/x/sys/unix"
)

// A Cut is a cut of the start of a run's output file that may have been
// made but is not recorded yet: the watcher writes it to runs/ID/cut
// before it cuts the file (FALLOC_FL_COLLAPSE_RANGE), which moves every
// offset, and records the new base in state.json after. Readers, and a
// watcher that takes over from one that died meanwhile, tell from the
// file whether the cut was made (see Layout): the bytes to be cut were
// first punched out as a hole, so the file starts with that hole until it
// is cut.
type Cut struct {
	Stream string // "stdout" or "stderr"
	Base   int64  // the stream's base in the record when the cut began
	Bytes  int64  // how many bytes are cut from the file's start
}

// String is c's line in runs/ID/cut.
func (c Cut) String() string {
	return c.Stream + " " + strconv.FormatInt(c.Base, 10) + " " + strconv.FormatInt(c.Bytes, 10)
}

// CutsText is the content of a cut file that holds cuts.
func CutsText(cuts []Cut) string {
	var b strings.Builder
	for _, c := range cuts {
		b.WriteString(c.String() + "\n")
	}
	return b.String()
}

// WriteCuts replaces run id's cut file, which belongs to owner (the run's),
// with cuts, durably unless the store's durability is WatcherCrash, and
// returns what it wrote.
func (s *Store) WriteCuts(id string, owner int, cuts []Cut) (string, error) {
	text := CutsText(cuts)
	if s.durability == WatcherCrash {
		return text, durable.ReplaceUnsynced(s.Run(id).Cut(), []byte(text), RunPerm(owner))
	}
	// Part of the run's record: synced as its state.json is.
	record := durable.Durable{File: durable.FlushRecord, Dir: durable.FlushRecordDir}
	return text, durable.Replace(s.Run(id).Cut(), []byte(text), RunPerm(owner), record)
}

// maxCuts bounds a cut file read: it holds a line or two, and is its
// run's owner's, who may make it anything.
const maxCuts = 64 << 10

// HasCuts reports whether run id has a cut file.
func (s *Store) HasCuts(id string) bool {
	_, err := os.Lstat(s.Run(id).Cut())
	return err == nil
}

// RemoveCuts removes run id's cut file if it still holds what, which a
// WriteCuts returned: the cut it describes is recorded. A later cut's file
// is left alone.
func (s *Store) RemoveCuts(id, what string) error {
	path := s.Run(id).Cut()
	b, _, err := durable.ReadRegular(path, maxCuts)
	if errors.Is(err, os.ErrNotExist) || err == nil && string(b) != what {
		return nil
	}
	if err == nil {
		err = os.Remove(path)
	}
	return err
}

// ReadCuts returns run id's cuts under way, if any. A line it cannot
// parse is an error that names the file: offsets are not guessed.
func (s *Store) ReadCuts(id string) ([]Cut, error) {
	path := s.Run(id).Cut()
	b, _, err := durable.ReadRegular(path, maxCuts)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var cuts []Cut
	for i, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if line == "" && len(b) == 0 {
			break
		}
		f := strings.Fields(line)
		var c Cut
		var err1, err2 error
		if len(f) == 3 {
			c.Stream = f[0]
			c.Base, err1 = strconv.ParseInt(f[1], 10, 64)
			c.Bytes, err2 = strconv.ParseInt(f[2], 10, 64)
		}
		if len(f) != 3 || c.Stream != "stdout" && c.Stream != "stderr" || err1 != nil || err2 != nil || c.Base < 0 || c.Bytes <= 0 {
			return nil, fmt.Errorf("%s:%d: want \"STREAM BASE BYTES\", not %q", path, i+1, line)
		}
		cuts = append(cuts, c)
	}
	return cuts, nil
}

// Layout returns where run st's stream stands in f, its output file (nil
// if it has none), given the run's cuts under way: byte N of f is
// absolute offset base+N, and the offsets below dropped are gone. It takes
// the record's word, and the file's for what a watcher that died in the
// middle of a cut could not record: a cut under way from the record's
// base has been made if f no longer starts with the hole punched for it,
// and a hole at f's start is dropped bytes (they read as zeros), recorded
// or not.
func (st *State) Layout(stream string, f *os.File, cuts []Cut) (base, dropped int64) {
	s := st.stream(stream)
	base, dropped = s.Base, s.Dropped
	if f == nil {
		return base, dropped
	}
	hole := LeadingHole(f)
	// A cut under way from base was made if a later one began from the
	// base after it (one begins only once the last was made), or else if
	// the file no longer starts with its hole.
	for {
		c, ok := cutFrom(cuts, stream, base)
		if !ok {
			break
		}
		if _, later := cutFrom(cuts, stream, base+c.Bytes); !later && hole >= c.Bytes {
			break
		}
		base += c.Bytes
	}
	return base, max(dropped, base+hole)
}

// cutFrom returns the cut of stream in cuts that began from base.
func cutFrom(cuts []Cut, stream string, base int64) (Cut, bool) {
	for _, c := range cuts {
		if c.Stream == stream && c.Base == base {
			return c, true
		}
	}
	return Cut{}, false
}

// LeadingHole returns how many bytes at the start of f are a hole (read as
// zeros, with no data on disk), as a cut punches one. It is 0 where the
// file system cannot tell.
func LeadingHole(f *os.File) int64 {
	off, err := f.Seek(0, unix.SEEK_DATA)
	if errors.Is(err, unix.ENXIO) { // no data at all
		if fi, err := f.Stat(); err == nil {
			return fi.Size()
		}
	}
	if err != nil {
		return 0
	}
	return off
}
