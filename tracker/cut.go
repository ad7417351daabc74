package tracker

import (
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/tendhq/tend/spool"
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
//
// A Cut of 0 Bytes is a mark: the cuts of its stream before it were all
// made, and the stream's base is its Base. The watcher writes it before
// it punches the hole of the next cut (see MarkMade): until that cut is
// listed, the file then starts with a hole again, which would otherwise
// say that the last cut listed was not made.
type Cut struct {
	Stream string // "stdout" or "stderr"
	Base   int64  // the stream's base in the record when the cut began
	Bytes  int64  // how many bytes are cut from the file's start; 0: a mark
}

// WithCut returns cuts with c (a cut or a mark) added after them, and
// without the marks of c's stream, nor its cut from c's base: a cut from
// the base a mark names says as much as the mark, and a later mark says
// more; a cut listed from where the stream still stands was not made (a
// watcher that took over cuts again).
func WithCut(cuts []Cut, c Cut) []Cut {
	kept := make([]Cut, 0, len(cuts)+1)
	for _, k := range cuts {
		if k.Stream != c.Stream || k.Bytes > 0 && k.Base != c.Base {
			kept = append(kept, k)
		}
	}
	return append(kept, c)
}

// MarkMade returns cuts with a mark added for stream, whose base is now
// base, if the last cut of stream they list ends there and is not yet
// followed by a cut or a mark: without it, that cut is made only by the
// file's word, a hole at its start no longer there, and the next cut's
// hole would unsay it. It reports whether it added the mark.
func MarkMade(cuts []Cut, stream string, base int64) ([]Cut, bool) {
	if _, ok := cutFrom(cuts, stream, base); ok {
		return cuts, false // a cut or a mark from there says it
	}
	for _, c := range cuts {
		if c.Stream == stream && c.Bytes > 0 && c.Base+c.Bytes == base {
			return WithCut(cuts, Cut{Stream: stream, Base: base}), true
		}
	}
	return cuts, false
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

// MaxOffset bounds the offsets a cut file may name (8 PiB): more than
// any run writes, the highest integer a reader holding JSON numbers as
// float64 keeps exact (as MaxRev), and far from an int64's end. The file
// is its run's owner's, and a watcher that takes over saves its cuts to
// the record and the history: a cut to near 2^63 put that base there,
// and the next cut wrapped it negative.
const MaxOffset = 1 << 53

// AddOffsets returns a+b, or math.MaxInt64 where that overflows: an
// output file may be sparse, of exabytes, at no cost to its owner.
func AddOffsets(a, b int64) int64 {
	if b > math.MaxInt64-a {
		return math.MaxInt64
	}
	return a + b
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

// ReadCuts returns run id's cuts under way, if any: owner's run, whose
// cut file it reads only if tracker.CheckRunFile allows it (the watcher
// reads it as root, and writes its cuts back into a file of the owner's:
// the owner may have put there a file they may not read). A line it
// cannot parse is an error that names the file: offsets are not guessed.
func (s *Store) ReadCuts(id string, owner int) ([]Cut, error) {
	path := s.Run(id).Cut()
	b, fi, err := durable.ReadRegular(path, maxCuts)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err == nil {
		if err = CheckRunFile(&fi, owner); err != nil {
			err = fmt.Errorf("%s: not read: %w", path, err)
		}
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
		if len(f) != 3 || c.Stream != "stdout" && c.Stream != "stderr" || err1 != nil || err2 != nil || c.Base < 0 || c.Bytes < 0 {
			return nil, fmt.Errorf("%s:%d: want \"STREAM BASE BYTES\", not %q", path, i+1, line)
		}
		if c.Base > MaxOffset || c.Bytes > MaxOffset-c.Base {
			return nil, fmt.Errorf("%s:%d: %q: a cut past offset %d, more than any run writes", path, i+1, line, int64(MaxOffset))
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
//
// A reader whose layout must be right reads the cuts before the record,
// as the cut file is removed only once a record says its cuts, and again
// after: see Store.ReadOutput.
func (st *State) Layout(stream string, f *os.File, cuts []Cut) (base, dropped int64) {
	s := st.stream(stream)
	base, dropped = s.Base, s.Dropped
	if f == nil {
		return base, dropped
	}
	hole := LeadingHole(f)
	// A cut under way from base was made if a later one, or a mark, began
	// from the base after it (one begins only once the last was made), or
	// else if the file no longer starts with its hole. A mark from base
	// says that base is where the stream stands: a hole at the file's
	// start is then the next cut's, punched before it is listed.
	for {
		c, ok := cutFrom(cuts, stream, base)
		if !ok || c.Bytes == 0 {
			break
		}
		if _, later := cutFrom(cuts, stream, base+c.Bytes); !later && hole >= c.Bytes {
			break
		}
		base += c.Bytes
	}
	return base, max(dropped, AddOffsets(base, hole))
}

// cutFrom returns the cut (or mark) of stream in cuts that began from
// base.
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

// basesFromCuts sets the bases of rebuilt record st, of which no history
// event said them (a tend before 2026-11-29 put them in the record
// alone), from the run's cut file where it names them: each of its
// cuts and marks says its stream's base when it was written, and the
// lowest of a stream's is the one the record had at the latest (a cut
// listed is removed from the file only once a record says it). Layout
// then walks the cuts listed from there, as for any record. A stream the
// file does not name keeps base 0 (see UnknownBases).
func (s *Store) basesFromCuts(st *State) {
	cuts, err := s.ReadCuts(st.ID, st.OwnerUID)
	if err != nil || len(cuts) == 0 {
		return // unread (refused), or none: what readers would do too
	}
	for _, name := range []string{"stdout", "stderr"} {
		base := int64(-1)
		for _, c := range cuts {
			if c.Stream == name && (base < 0 || c.Base < base) {
				base = c.Base
			}
		}
		if base <= 0 {
			continue
		}
		if st.Output == nil {
			st.Output = &Output{Limit: spool.DefaultOutputLimit} // the cap its cuts were made by
		}
		*st.outputStream(name) = Stream{Base: base, Dropped: base}
	}
}

// outputStream returns a pointer to st's stream name in its Output,
// which is not nil.
func (st *State) outputStream(name string) *Stream {
	if name == "stderr" {
		return &st.Output.Stderr
	}
	return &st.Output.Stdout
}

// UnknownBases returns the streams of run st, rebuilt from events (its
// history, as Rebuild took it), whose base neither says: none of the
// events carried the record's output (lines of a tend before
// 2026-11-29), the cut file names no cut of the stream, and its output
// file may have had its start cut. A cut leaves the file at least its
// cap long, and no hole at its start (where bytes are only punched out,
// the base stays 0 and the hole says what was dropped): a shorter file,
// or one that starts with a hole, was never cut, and its base of 0 is
// right. Of the others the base is taken as 0, and an offset read before
// the rebuild is off by what was cut.
func (s *Store) UnknownBases(st *State, events []Event) []string {
	if slices.ContainsFunc(replayed(events), func(e Event) bool { return e.Output != nil }) {
		return nil
	}
	limit := int64(spool.DefaultOutputLimit)
	if st.Output != nil && st.Output.Limit > 0 {
		limit = st.Output.Limit
	}
	var unknown []string
	for _, name := range []string{"stdout", "stderr"} {
		if st.stream(name).Base > 0 {
			continue // from the cut file
		}
		f, err := openOutput(s.Run(st.ID).Stream(name))
		if err != nil {
			continue
		}
		fi, err := f.Stat()
		if err == nil && fi.Size() >= limit && LeadingHole(f) == 0 {
			unknown = append(unknown, name)
		}
		f.Close()
	}
	return unknown
}

// UnknownBasesNote says, for a report of run st rebuilt from events,
// which of its streams' offsets it could not place (see UnknownBases):
// "" if none.
func UnknownBasesNote(s *Store, st *State, events []Event) string {
	unknown := s.UnknownBases(st, events)
	if len(unknown) == 0 {
		return ""
	}
	return fmt.Sprintf(" (the base of its %s is unknown, taken as 0: its history's lines, of a tend before 2026-11-29, do not carry it; offsets read before the rebuild are off by what was cut)", strings.Join(unknown, " and "))
}
