package tracker

import (
	"errors"
	"fmt"
	"io"
	"os"

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
	cuts, err := s.ReadCuts(st.ID)
	if err != nil {
		return Slice{}, err
	}
	for range 3 {
		base, dropped := st.Layout(stream, f, cuts)
		sl, err := readAt(f, off, max, base, dropped)
		if err != nil {
			return sl, err
		}
		again, err := s.Read(st.ID)
		if err != nil && !errors.Is(err, ErrEdited) {
			again = st // the record is gone: it was right if the file was not cut since
		}
		if cuts, err = s.ReadCuts(st.ID); err != nil {
			return Slice{}, err
		}
		if b, d := again.Layout(stream, f, cuts); b == base && d == dropped {
			return sl, nil
		}
		st = again // cut while reading: read again at the new base
	}
	return Slice{}, fmt.Errorf("run %s: %s kept being cut while read", st.ID, stream)
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
	cuts, _ := s.ReadCuts(st.ID) // unreadable: the record's base, as ReadOutput refuses to read
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
