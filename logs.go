package tend

import (
	"context"
	"errors"

	"github.com/tendhq/tend/tracker"
)

// The streams of a run's output.
const (
	Stdout = "stdout"
	Stderr = "stderr"
)

// LogSlice is a piece of one stream of a run's output, read by absolute
// offset (docs/schema/logs.schema.json): byte N of everything the run
// wrote to the stream has offset N, whatever was dropped since.
type LogSlice struct {
	Stream string `json:"stream"`
	// Offset is where Data starts: the offset asked for, or the first byte
	// still kept if that was dropped (output is capped).
	Offset int64 `json:"offset"`
	// Next is the offset to read from next time: no byte is read twice.
	Next int64 `json:"next"`
	// Dropped is how many of the bytes asked for were gone.
	Dropped int64 `json:"dropped"`
	// EOF says Data reaches the end of what the stream holds now, and
	// Final that the run has ended: then nothing more will come.
	EOF   bool   `json:"eof"`
	Final bool   `json:"final"`
	Data  string `json:"data"`
	// Size is the stream's size as read: the offset just past the last
	// byte written (at least Next, if Data is not empty). An offset past
	// it reads nothing. It is not in tend logs --json, whose schema names
	// every member.
	Size int64 `json:"-"`
}

// LogLine is a line of a run's output, or its last bytes if they have no
// newline yet, with the stream it was written to. A line longer than
// MaxLogLine comes in pieces of MaxLogLine bytes, each but the last
// without a newline: the output is its owner's, who may write one line
// as long as the disk, or make a sparse file of zeros without one.
type LogLine struct {
	Stream string `json:"stream"`
	Offset int64  `json:"offset"`
	Next   int64  `json:"next"`
	Data   string `json:"data"`
}

// MaxLogLine is the most a LogLine holds (1 MiB).
const MaxLogLine = tracker.MaxLine

// MaxLogRead is the most one ReadLog or ReadLines call returns (4 MiB),
// however much is asked for: a run's output may be as large as its
// owner makes the file (a sparse file costs them nothing), and a reader
// holds what it returns in memory. A read cut short says so (EOF false)
// and says where to go on (Next).
const MaxLogRead = 4 << 20

// ReadLog reads at most max bytes of run id's stream (Stdout or Stderr)
// from absolute offset offset: all there is now if max is 0, but never
// more than MaxLogRead. When it stops short of what the stream holds, EOF
// is false: read on from Next.
func (c *Client) ReadLog(ctx context.Context, id, stream string, offset, max int64) (LogSlice, error) {
	st, err := c.readForLogs(ctx, id, stream, offset, max)
	if err != nil {
		return LogSlice{Stream: stream}, err
	}
	return c.readLog(st, stream, offset, max)
}

func (c *Client) readLog(st *Record, stream string, offset, max int64) (LogSlice, error) {
	size := c.store.OutputSize(st, stream)
	if max <= 0 || max > MaxLogRead {
		max = MaxLogRead // the file's size is its owner's to choose
	}
	sl, err := c.store.ReadOutput(st, stream, offset, max)
	if err != nil {
		return LogSlice{Stream: stream}, err
	}
	end := size
	if len(sl.Data) > 0 && sl.Next > end {
		end = sl.Next // written since size was read
	}
	return LogSlice{Stream: stream, Offset: sl.Offset, Next: sl.Next, Dropped: sl.Dropped,
		EOF: sl.Next >= size, Final: tracker.Final(st.State), Data: string(sl.Data), Size: end}, nil
}

// TailLog returns the last n lines (n > 0) of run id's stream as a slice
// (Offset is where the first of them starts), and reads no more than it
// needs: windows from the end, each four times the last, from 16 KiB up
// to MaxLogRead. If the last n lines are longer than that, it returns
// their last MaxLogRead bytes, so Data may start inside a line; then
// Offset is past the stream's first byte kept, and not just after a
// newline.
func (c *Client) TailLog(ctx context.Context, id, stream string, n int) (LogSlice, error) {
	if n <= 0 {
		return LogSlice{Stream: stream}, invalidf("tail %d: want at least one line", n)
	}
	st, err := c.readForLogs(ctx, id, stream, 0, 0)
	if err != nil {
		return LogSlice{Stream: stream}, err
	}
	size := c.store.OutputSize(st, stream)
	for window := int64(16 << 10); ; window *= 4 {
		window = min(window, MaxLogRead)
		from := max(0, size-window)
		sl, err := c.readLog(st, stream, from, window)
		if err != nil {
			return sl, err
		}
		tail := LastLines([]byte(sl.Data), n)
		// All n lines are in the window if a newline comes before them;
		// else only if the window starts at the first byte there is.
		if len(tail) < len(sl.Data) || from == 0 || sl.Dropped > 0 || window == MaxLogRead {
			sl.Offset += int64(len(sl.Data) - len(tail))
			sl.Data = string(tail)
			return sl, nil
		}
	}
}

// readForLogs checks a read's arguments and returns the run's record.
func (c *Client) readForLogs(ctx context.Context, id, stream string, offset, max int64) (*Record, error) {
	if stream != Stdout && stream != Stderr {
		return nil, invalidf("stream %q: want %s or %s", stream, Stdout, Stderr)
	}
	if offset < 0 || max < 0 {
		return nil, invalidf("offsets and sizes are not negative (offset %d, max %d)", offset, max)
	}
	return c.Show(ctx, id)
}

// LogPlace is a place in both streams of a run's output: the absolute
// offset of the next byte of each to read.
type LogPlace struct {
	Stdout int64 `json:"stdout"`
	Stderr int64 `json:"stderr"`
}

// OutputSize returns the size of each stream of st's output: the offset
// just past its last byte written, as ReadLog's Size says. A reader that
// keeps its last read's Next learns from it whether there is more to
// read, without reading it.
func (c *Client) OutputSize(st *Record) LogPlace {
	return LogPlace{c.store.OutputSize(st, Stdout), c.store.OutputSize(st, Stderr)}
}

// PlaceAt returns the place at offset off of both streams.
func PlaceAt(off int64) LogPlace { return LogPlace{off, off} }

func (p LogPlace) pair() [2]int64 { return [2]int64{p.Stdout, p.Stderr} }
func placeOf(p [2]int64) LogPlace { return LogPlace{p[0], p[1]} }

func (p LogPlace) check() error {
	if p.Stdout < 0 || p.Stderr < 0 {
		return invalidf("offsets %d and %d: offsets are not negative", p.Stdout, p.Stderr)
	}
	return nil
}

// Lines is what ReadLines read of both streams of a run's output.
type Lines struct {
	Lines []LogLine `json:"lines"`
	// Next is where to read on from: no line is read twice or skipped.
	Next LogPlace `json:"next"`
	// Dropped is how many bytes were gone (capped) when their turn came.
	Dropped int64 `json:"dropped"`
	// EOF says Lines reaches what the streams hold now, and Final that
	// the run has ended: then nothing more will come.
	EOF   bool `json:"eof"`
	Final bool `json:"final"`
	// Size is each stream's size after the read: the offset just past
	// its last byte written. An offset past it reads nothing.
	Size LogPlace `json:"-"`
}

// ReadLines returns run id's lines of both streams from place from, in
// the order the run wrote them (as the watcher recorded its switches from
// one stream to the other), each with its stream, up to what is written
// now: a line not ended yet is returned only once the run has ended.
//
// It returns at most about max bytes of lines (MaxLogRead if max is 0 or
// more): it stops before the line that would pass max, though it returns
// one line at least, and then EOF is false: read on from Next.
func (c *Client) ReadLines(ctx context.Context, id string, from LogPlace, max int64) (Lines, error) {
	if max <= 0 || max > MaxLogRead {
		max = MaxLogRead
	}
	var (
		out  = Lines{Next: from, EOF: true}
		size int64
	)
	st, next, dropped, err := c.eachLine(ctx, id, from, func(l LogLine) error {
		if size += int64(len(l.Data)); size > max && len(out.Lines) > 0 {
			out.EOF = false
			return errBudget
		}
		out.Lines = append(out.Lines, l)
		return nil
	})
	out.Next, out.Dropped = next, dropped
	if errors.Is(err, errBudget) {
		err = nil
	}
	if st != nil {
		out.Final = tracker.Final(st.State)
		out.Size = c.OutputSize(st)
	}
	return out, err
}

// errBudget stops ReadLines' walk through the lines at its byte budget.
var errBudget = errors.New("the lines read reached their budget")

// EachLine passes run id's lines of both streams from place from to emit,
// in the order ReadLines returns them, and returns where to read on from
// and how many bytes were gone (capped) when their turn came. It holds
// one line (at most MaxLogLine bytes) at a time, so it reads output of
// any size; an error from emit stops it and is returned, and the line
// emit refused is where next is.
func (c *Client) EachLine(ctx context.Context, id string, from LogPlace, emit func(LogLine) error) (next LogPlace, dropped int64, err error) {
	_, next, dropped, err = c.eachLine(ctx, id, from, emit)
	return next, dropped, err
}

// eachLine is EachLine, which also returns the run's record as read.
func (c *Client) eachLine(ctx context.Context, id string, from LogPlace, emit func(LogLine) error) (*Record, LogPlace, int64, error) {
	if err := from.check(); err != nil {
		return nil, from, 0, err
	}
	st, err := c.Show(ctx, id)
	if err != nil {
		return nil, from, 0, err
	}
	it := c.store.Interleave(id, from.pair())
	var refused *tracker.Line
	err = it.Read(st, true, func(l tracker.Line) error {
		if err := ctx.Err(); err != nil {
			refused = &l
			return err // a huge output takes a while: let the caller give up
		}
		if err := emit(logLine(l)); err != nil {
			refused = &l
			return err
		}
		return nil
	})
	return st, placeAfter(it, refused), it.Dropped, err
}

// placeAfter returns where to go on from after it's read, which stopped
// at line refused if it is not nil.
func placeAfter(it *tracker.Interleaver, refused *tracker.Line) LogPlace {
	next := it.Next()
	if refused != nil {
		next[streamIndex(refused.Stream)] = refused.Offset
	}
	return placeOf(next)
}

func streamIndex(stream string) int {
	if stream == Stderr {
		return 1
	}
	return 0
}

// TailLines returns the last n lines (n > 0) of both streams of the run
// st records, in the order written, and the place after them, from which
// FollowLines goes on. A line not ended yet is among them only if the run
// has ended, or unended is set. It reads no more than it needs: the same
// last bytes of each stream, from 16 KiB up to MaxLogRead. If the last n
// lines are longer than that, it returns those it found whole.
func (c *Client) TailLines(ctx context.Context, st *Record, n int, unended bool) ([]LogLine, LogPlace, error) {
	if n <= 0 {
		return nil, LogPlace{}, invalidf("tail %d: want at least one line", n)
	}
	final := unended || tracker.Final(st.State)
	for window := int64(16 << 10); ; window *= 4 {
		window = min(window, MaxLogRead)
		it := c.store.InterleaveTail(st, window)
		start := it.Next()
		var lines []LogLine
		err := it.Read(st, final, func(l tracker.Line) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			// A window's first line may have started before it.
			if i := streamIndex(l.Stream); l.Offset > start[i] || start[i] == 0 || window == MaxLogRead {
				lines = append(lines, logLine(l))
			}
			return nil
		})
		if err != nil {
			return nil, LogPlace{}, err
		}
		if len(lines) >= n || window == MaxLogRead || start == [2]int64{} {
			return lines[max(0, len(lines)-n):], placeOf(it.Next()), nil
		}
	}
}

func logLine(l tracker.Line) LogLine {
	return LogLine{Stream: l.Stream, Offset: l.Offset, Next: l.Offset + int64(len(l.Data)), Data: string(l.Data)}
}

// FollowLog passes run id's stream to emit from offset on, as the run
// writes it, until the run ends, and returns its last record. emit also
// gets the record as last read, with every slice (an empty one when only
// the record changed). Bytes dropped meanwhile are neither passed twice nor
// skipped unsaid: a slice's Dropped counts them.
func (c *Client) FollowLog(ctx context.Context, id, stream string, offset int64, emit func(*Record, LogSlice) error) (*Record, error) {
	if _, err := c.readForLogs(ctx, id, stream, offset, 0); err != nil {
		return nil, err
	}
	var final *Record
	err := c.watchUntil(ctx, c.store.RunDir(id), spinEvery, func() (bool, error) {
		cur, err := c.read(id)
		if err != nil {
			return false, err
		}
		for first := true; ; first = false {
			sl, err := c.readLog(cur, stream, offset, 1<<20)
			if err != nil {
				return false, err
			}
			if len(sl.Data) > 0 || sl.Dropped > 0 || first {
				if err := emit(cur, sl); err != nil {
					return false, err
				}
			}
			offset = sl.Next
			if len(sl.Data) == 0 {
				break
			}
		}
		if tracker.Final(cur.State) {
			final = cur
			return true, nil
		}
		return false, nil
	})
	return final, err
}

// FollowLines passes run id's lines of both streams to emit, in the order
// written, from place from, as the run writes them,
// until the run ends, and returns its last record and how many bytes were
// gone (capped) when their turn came. emit gets the record as last read
// too (and a zero LogLine when only the record changed).
func (c *Client) FollowLines(ctx context.Context, id string, from LogPlace, emit func(*Record, LogLine) error) (*Record, int64, error) {
	if err := from.check(); err != nil {
		return nil, 0, err
	}
	if _, err := c.Show(ctx, id); err != nil {
		return nil, 0, err
	}
	it := c.store.Interleave(id, from.pair())
	var final *Record
	err := c.watchUntil(ctx, c.store.RunDir(id), spinEvery, func() (bool, error) {
		cur, err := c.read(id)
		if err != nil {
			return false, err
		}
		if err := emit(cur, LogLine{}); err != nil {
			return false, err
		}
		done := tracker.Final(cur.State)
		if err := it.Read(cur, done, func(l tracker.Line) error { return emit(cur, logLine(l)) }); err != nil {
			return false, err
		}
		if done {
			final = cur
		}
		return done, nil
	})
	return final, it.Dropped, err
}
