package tracker

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/tendhq/tend/tracker/durable"
)

// Slice is a piece of a run's output, read by absolute offset.
type Slice struct {
	Data []byte
	// Offset is where Data starts: the offset asked for, or the first byte
	// still kept if that was dropped.
	Offset int64
	// Next is the offset to ask for next time.
	Next int64
	// Dropped is how many of the bytes asked for were dropped (capped).
	Dropped int64
}

// ReadOutput reads up to max bytes of run st's stream ("stdout" or
// "stderr") from absolute offset off. After the read it reads st's record,
// and the file's layout (see Layout), again, and reads again if the file
// was cut meanwhile, so it never returns bytes at the wrong offset.
//
// It holds up to max bytes in memory at once, so callers bound max: the
// file is the run owner's, who may make it as large as they like (a
// sparse file of terabytes costs them nothing).
func (s *Store) ReadOutput(st *State, stream string, off, max int64) (Slice, error) {
	f, err := openOutput(s.Run(st.ID).Stream(stream))
	if errors.Is(err, os.ErrNotExist) {
		_, dropped := st.Layout(stream, nil, nil)
		return readAt(nil, off, max, 0, dropped)
	}
	if err != nil {
		return Slice{}, err
	}
	defer f.Close()
	// The layout before the read may be behind (st may be old, the cut
	// file read after a save removed it), never ahead: it counts only
	// cuts made. The one after it is where the stream stood at some
	// moment after the read (see layoutNow). Offsets only grow, so if the
	// two agree, the stream stood there all through the read.
	cuts, err := s.ReadCuts(st.ID, st.OwnerUID)
	if err != nil {
		return Slice{}, err
	}
	base, dropped := st.Layout(stream, f, cuts)
	for range maxReads {
		s.step("laid out")
		sl, err := readAt(f, off, max, base, dropped)
		if err != nil {
			return sl, err
		}
		again, b, d, err := s.layoutNow(st, stream, f)
		if err != nil {
			return Slice{}, err
		}
		if b == base && d == dropped {
			return sl, nil
		}
		st, base, dropped = again, b, d // cut while reading: read again at the new base
	}
	return Slice{}, fmt.Errorf("run %s: %s kept being cut while read", st.ID, stream)
}

// maxReads bounds ReadOutput's reads of a file cut while it reads it: a
// fast writer with a small cap is cut ten times a second.
const maxReads = 10

// layoutNow returns run st's record as it is now (st if it is gone), and
// where its stream stands in f (see Layout) at some moment while it
// looked. Read once each, the record, the cut file and f's hole could be
// of different moments that together say where the stream never stood:
// the record read before a save and the cut file after the save removed
// it say neither the cuts it recorded; a cut file read just after a cut
// was made, and f's hole just after the next one's hole was punched, say
// that cut was not made. So the cut file is read before the record (it
// is removed only once a record says its cuts), and again after f's
// hole: the watcher changes it between punching a hole and cutting it,
// and again before it punches the next (see MarkMade), so while it reads
// the same f changed at most by one step it tells.
func (s *Store) layoutNow(st *State, stream string, f *os.File) (*State, int64, int64, error) {
	for range maxReads {
		cuts, err := s.ReadCuts(st.ID, st.OwnerUID)
		if err != nil {
			return nil, 0, 0, err
		}
		again, err := s.Read(st.ID)
		if err != nil && !errors.Is(err, ErrEdited) {
			again = st // the record is gone: it was right if the file was not cut since
		}
		s.step("record read")
		base, dropped := again.Layout(stream, f, cuts)
		after, err := s.ReadCuts(st.ID, st.OwnerUID)
		if err != nil {
			return nil, 0, 0, err
		}
		if slices.Equal(cuts, after) {
			return again, base, dropped, nil
		}
	}
	return nil, 0, 0, fmt.Errorf("run %s: %s kept being cut while read", st.ID, stream)
}

// step calls the test's hook at ReadOutput's step named.
func (s *Store) step(name string) {
	if s.readStep != nil {
		s.readStep(name)
	}
}

func (st *State) stream(stream string) Stream {
	if st.Output == nil {
		return Stream{}
	}
	if stream == "stderr" {
		return st.Output.Stderr
	}
	return st.Output.Stdout
}

func readAt(f *os.File, off, max, base, dropped int64) (Slice, error) {
	sl := Slice{Offset: off, Next: off}
	if off < dropped {
		sl.Dropped = dropped - off
		sl.Offset, sl.Next = dropped, dropped
	}
	if f == nil {
		return sl, nil
	}
	// Never more than the file holds past the offset: max may be anything
	// a client asked for.
	fi, err := f.Stat()
	if err != nil {
		return sl, err
	}
	if max = min(max, fi.Size()-(sl.Offset-base)); max <= 0 {
		return sl, nil
	}
	buf := make([]byte, max)
	n, err := f.ReadAt(buf, sl.Offset-base)
	if err != nil && err != io.EOF {
		return sl, fmt.Errorf("%s: %w", f.Name(), err)
	}
	sl.Data = buf[:n]
	sl.Next = sl.Offset + int64(n)
	return sl, nil
}

// OutputSize returns the absolute size of run st's stream: everything it
// has written, dropped bytes included.
func (s *Store) OutputSize(st *State, stream string) int64 {
	f, err := openOutput(s.Run(st.ID).Stream(stream))
	if err != nil {
		return st.stream(stream).Base
	}
	defer f.Close()
	cuts, _ := s.ReadCuts(st.ID, st.OwnerUID) // unreadable: the record's base, as ReadOutput refuses to read
	base, _ := st.Layout(stream, f, cuts)
	fi, err := f.Stat()
	if err != nil {
		return base
	}
	return base + fi.Size()
}

// RecordedOutputSize is OutputSize for the watcher, which knows its
// record to be right: the record's base plus the file's size.
func (s *Store) RecordedOutputSize(st *State, stream string) int64 {
	base := st.stream(stream).Base
	fi, err := os.Lstat(s.Run(st.ID).Stream(stream))
	if err != nil || !fi.Mode().IsRegular() {
		return base
	}
	return base + fi.Size()
}

// openOutput opens a run's output file to read it, never through a link
// and never blocking (the run's directory may be its owner's, who may put
// anything there).
func openOutput(path string) (*os.File, error) {
	fd, _, err := durable.OpenRegular(path)
	if errors.Is(err, durable.ErrNotRegular) {
		return nil, fmt.Errorf("%s: %w", path, err) // OpenRegular names the kind, not the file
	}
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), path), nil
}
