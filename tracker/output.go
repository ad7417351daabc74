package tracker

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/tendhq/tend/spool"
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
// "stderr") from absolute offset off. It re-reads st's record if the file
// was cut meanwhile, so it never returns bytes at the wrong offset.
func (s *Store) ReadOutput(st *State, stream string, off, max int64) (Slice, error) {
	for range 3 {
		base, dropped := st.streamInfo(stream)
		sl, err := readAt(s.Path(st.ID, stream), off, max, base, dropped)
		if err != nil {
			return sl, err
		}
		again, err := s.Read(st.ID)
		if err != nil && !errors.Is(err, ErrEdited) {
			return sl, nil // the record is gone; what was read is right for the record read
		}
		if b, d := again.streamInfo(stream); b == base && d == dropped {
			return sl, nil
		}
		st = again // cut while reading: read again at the new base
	}
	return Slice{}, fmt.Errorf("run %s: %s kept being cut while read", st.ID, stream)
}

func (st *State) streamInfo(stream string) (base, dropped int64) {
	if st.Output == nil {
		return 0, 0
	}
	if stream == "stderr" {
		return st.Output.Stderr.Base, st.Output.Stderr.Dropped
	}
	return st.Output.Stdout.Base, st.Output.Stdout.Dropped
}

func readAt(path string, off, max, base, dropped int64) (Slice, error) {
	sl := Slice{Offset: off, Next: off}
	if off < dropped {
		sl.Dropped = dropped - off
		sl.Offset, sl.Next = dropped, dropped
	}
	fd, _, err := spool.OpenRegular(path)
	if errors.Is(err, os.ErrNotExist) {
		return sl, nil
	}
	if err != nil {
		return sl, fmt.Errorf("%s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	// Never more than the file holds past the offset: max may be anything
	// a client asked for.
	fi, err := f.Stat()
	if err != nil {
		return sl, err
	}
	max = min(max, fi.Size()-(sl.Offset-base))
	if max <= 0 {
		return sl, nil
	}
	buf := make([]byte, max)
	n, err := f.ReadAt(buf, sl.Offset-base)
	if err != nil && err != io.EOF {
		return sl, fmt.Errorf("%s: %w", path, err)
	}
	sl.Data = buf[:n]
	sl.Next = sl.Offset + int64(n)
	return sl, nil
}

// OutputSize returns the absolute size of run st's stream: everything it
// has written, dropped bytes included.
func (s *Store) OutputSize(st *State, stream string) int64 {
	base, _ := st.streamInfo(stream)
	fi, err := os.Stat(s.Path(st.ID, stream))
	if err != nil {
		return base
	}
	return base + fi.Size()
}
