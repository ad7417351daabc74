package tracker

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/tendhq/tend/tracker/durable"
	"golang.org/x/sys/unix"
)

// A run writes stdout and stderr to two files, which do not say how the
// writes interleaved. The watcher sees the order: inotify reports each
// write, in order, for both files. When a run's writes go from one stream
// to the other, it appends a Switch to the run's "order" file, and the
// readers put the two streams back in that order. Offsets are taken when
// the watcher handles the switch, so the order is exact while the watcher
// keeps up with the writes and a close approximation when it falls behind;
// output written while no watcher ran is in stream order.

// A Switch says that a run's writes went from stream From ("stdout" or
// "stderr") to the other one when From had At bytes (an absolute offset).
type Switch struct {
	From string
	At   int64
}

// String is the switch's line in the order file, without its newline.
func (s Switch) String() string { return s.From + " " + strconv.FormatInt(s.At, 10) }

// ParseSwitch parses a line of an order file.
func ParseSwitch(line string) (Switch, error) {
	from, at, ok := strings.Cut(line, " ")
	n, err := strconv.ParseInt(at, 10, 64)
	if !ok || err != nil || n < 0 || (from != "stdout" && from != "stderr") {
		return Switch{}, fmt.Errorf("bad stream switch %q", line)
	}
	return Switch{From: from, At: n}, nil
}

// AppendSwitches adds switches to run id's order file, which belongs to
// owner (the run's owner). Nothing depends on the file for correctness, so
// it is not synced.
func (s *Store) AppendSwitches(id string, owner int, sw []Switch) error {
	var b bytes.Buffer
	for _, x := range sw {
		b.WriteString(x.String())
		b.WriteByte('\n')
	}
	fd, err := OpenRunFile(s.Run(id).Order(), unix.O_WRONLY|unix.O_APPEND, owner)
	if err != nil {
		return err
	}
	err = durable.WriteAll(fd, b.Bytes())
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	return err
}

// ReadSwitches reads run id's switches from byte off of its order file, and
// returns them with the offset to read from next time. A line not yet
// ended is left for then.
//
// The file is its run's owner's, who may make it anything: it reads at most
// the last maxOrderRead bytes from off, and no line longer than a switch
// can be (longer ones are skipped).
func (s *Store) ReadSwitches(id string, off int64) ([]Switch, int64, error) {
	fd, st, err := durable.OpenRegular(s.Run(id).Order())
	if errors.Is(err, os.ErrNotExist) {
		return nil, off, nil
	}
	if err != nil {
		return nil, off, err
	}
	f := os.NewFile(uintptr(fd), s.Run(id).Order())
	defer f.Close()
	skip := st.Size-off > maxOrderRead // up to the first line past the bound
	if skip {
		off = st.Size - maxOrderRead
	}
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return nil, off, err
	}
	var sw []Switch
	br := bufio.NewReaderSize(io.LimitReader(f, maxOrderRead), 64)
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			for errors.Is(err, bufio.ErrBufferFull) { // no switch is this long
				off += int64(len(line))
				line, err = br.ReadSlice('\n')
			}
			off += int64(len(line))
			continue
		}
		if err != nil {
			return sw, off, nil // EOF, or a line still being written
		}
		off += int64(len(line))
		if skip {
			skip = false // the rest of a line cut by the bound
			continue
		}
		x, perr := ParseSwitch(strings.TrimSuffix(string(line), "\n"))
		if perr != nil {
			continue // a line torn by a crash: the order there is lost, not the output
		}
		sw = append(sw, x)
	}
}

// maxOrderRead bounds what ReadSwitches reads at once: four times the most a
// trimmed order file holds (about 16 bytes a switch, maxSwitches of them).
const maxOrderRead = 4 * 16 * 65536

// TrimSwitches rewrites run id's order file, which belongs to owner, with
// only its newest keep switches, so that a run switching streams all the
// time does not grow it without bound. It returns the file's new size.
func (s *Store) TrimSwitches(id string, owner int, keep int) (int64, error) {
	sw, _, err := s.ReadSwitches(id, 0)
	if err != nil {
		return 0, err
	}
	if len(sw) > keep {
		sw = sw[len(sw)-keep:]
	}
	var b bytes.Buffer
	for _, x := range sw {
		b.WriteString(x.String())
		b.WriteByte('\n')
	}
	return int64(b.Len()), durable.ReplaceUnsynced(s.Run(id).Order(), b.Bytes(), RunPerm(owner))
}

// A Line is a line of a run's output, or its last bytes if they have no
// newline yet (then Data does not end in one), or a piece of MaxLine
// bytes of a longer line (nor then).
type Line struct {
	Stream string // "stdout" or "stderr"
	Offset int64  // the absolute offset of its first byte in Stream
	Data   []byte
}

// MaxLine is the most an Interleaver holds of one line: a longer one is
// passed in pieces of MaxLine bytes. The output is its run's owner's, who
// may write a line as long as the disk, or make the file a sparse one of
// zeros with no newline at all; a reader must not hold it all.
const MaxLine = 1 << 20

// An Interleaver reads a run's two streams as one sequence of lines, in
// the order its switches record.
type Interleaver struct {
	store    *Store
	id       string
	pos      [2]int64 // the next offset to read, per stream
	partial  [2]Line  // the start of a line not yet ended, per stream
	orderOff int64
	// current is the stream written to since the last switch, if
	// switched says there was one.
	current  int
	switched bool
	// unordered is when a read first found new bytes in both streams that
	// no switch ordered yet (zero while it has not), and grace how long
	// it waits for that switch before it passes them all the same.
	unordered time.Time
	grace     time.Duration
	// sized, if not nil, is called after each read of a stream's size: a
	// test writes there, between two reads, as a run can.
	sized func(stream int)
	// Dropped counts the bytes that were gone (capped) when their turn came.
	Dropped int64
}

// orderGrace is how long a reader that follows a run waits for the switch
// that orders new bytes of both streams before it passes them in stream
// order, the stream written to last first. The watcher records a switch
// within capCheckDelay (100 ms) of the writes; it takes longer only when
// the watcher is far behind, or not watching (none runs, or inotify
// refused it the run's directory), and then the order is not known.
const orderGrace = 2 * time.Second

var streams = [2]string{"stdout", "stderr"}

func streamIndex(name string) int {
	if name == "stderr" {
		return 1
	}
	return 0
}

// Interleave returns an Interleaver of run id's output from absolute
// offset from[0] of stdout and from[1] of stderr: any two offsets, such
// as those Next gave an earlier Interleaver, since the switches before
// them are read again to tell which stream comes next.
func (s *Store) Interleave(id string, from [2]int64) *Interleaver {
	return &Interleaver{store: s, id: id, pos: from, grace: orderGrace}
}

// Next returns where an Interleaver made now would go on from, for
// stdout and stderr: after the lines passed, at the start of a line not
// ended yet. A caller that refused a line (its emit returned an error)
// goes on from that line's Offset in its stream instead.
func (it *Interleaver) Next() [2]int64 {
	next := it.pos
	for i, p := range it.partial {
		if len(p.Data) > 0 {
			next[i] = p.Offset
		}
	}
	return next
}

// InterleaveTail returns an Interleaver of run st's last bytes: at most
// tail bytes of each stream. It reads once, so it does not wait for a
// switch: new bytes of both streams that none orders yet are passed in
// stream order, the stream written to last first.
func (s *Store) InterleaveTail(st *State, tail int64) *Interleaver {
	it := &Interleaver{store: s, id: st.ID}
	for i, name := range streams {
		it.pos[i] = max(0, s.OutputSize(st, name)-tail)
	}
	return it
}

// Read passes to emit every line that can be placed now, given st, the
// run's record as just read: those the recorded switches order, then the
// new bytes of one stream while the other has none that they could have
// followed. New bytes of both streams wait for the switch that orders
// them (for the Interleaver's grace, then they pass in stream order, the
// stream written to last first), and lines not ended yet wait for their
// end, unless final is set (the run has ended, or one read is all there
// will be), which passes everything, the stream written to last first.
func (it *Interleaver) Read(st *State, final bool, emit func(Line) error) error {
	// Sizes first, then switches: a byte counted here was written before
	// any switch recorded after it, so none is passed ahead of its place.
	// Stdout's size is read again after stderr's (see rest).
	var size [2]int64
	for i := range streams {
		size[i] = it.size(st, i)
	}
	stdoutAgain := it.size(st, 0)
	sw, next, err := it.store.ReadSwitches(it.id, it.orderOff)
	if err != nil {
		return err
	}
	it.orderOff = next
	for _, x := range sw {
		i := streamIndex(x.From)
		if err := it.take(st, i, x.At, emit); err != nil {
			return err
		}
		it.current, it.switched = 1-i, true
	}
	if !final {
		return it.rest(st, size, stdoutAgain, emit)
	}
	order := []int{it.current, 1 - it.current}
	for _, i := range order {
		if err := it.take(st, i, size[i], emit); err != nil {
			return err
		}
	}
	for _, i := range order {
		if p := it.partial[i]; len(p.Data) > 0 {
			it.partial[i] = Line{}
			if err := emit(p); err != nil {
				return err
			}
		}
	}
	return nil
}

// rest passes the bytes past the last switch, size[i] of stream i as read
// in that order, and stdout's size read again after stderr's, for a read
// that is not final. A stream's new bytes are placed only if the other
// had none waiting when looked at after them: then they were all written
// before any the other will get. The two sizes are read microseconds
// apart, and a run may write both streams in between (its last line of
// one, the first of the other): each is checked against a size of the
// other read later, never earlier.
func (it *Interleaver) rest(st *State, size [2]int64, stdoutAgain int64, emit func(Line) error) error {
	if size[1] <= it.pos[1] {
		if err := it.take(st, 0, size[0], emit); err != nil {
			return err
		}
	}
	if stdoutAgain <= it.pos[0] {
		if err := it.take(st, 1, size[1], emit); err != nil {
			return err
		}
	}
	if size[0] <= it.pos[0] || size[1] <= it.pos[1] {
		it.unordered = time.Time{}
		return nil
	}
	// Both streams grew and no switch says in what order: the watcher
	// records it within a moment, unless it is behind or not watching.
	if it.unordered.IsZero() {
		it.unordered = time.Now()
	}
	if time.Since(it.unordered) < it.grace {
		return nil
	}
	it.unordered = time.Time{}
	for _, i := range []int{it.current, 1 - it.current} {
		if err := it.take(st, i, size[i], emit); err != nil {
			return err
		}
	}
	return nil
}

// size returns the size of stream i of st's output.
func (it *Interleaver) size(st *State, i int) int64 {
	n := it.store.OutputSize(st, streams[i])
	if it.sized != nil {
		it.sized(i)
	}
	return n
}

// take passes stream i's lines up to offset end.
func (it *Interleaver) take(st *State, i int, end int64, emit func(Line) error) error {
	const chunk = 1 << 20
	for it.pos[i] < end {
		sl, err := it.store.ReadOutput(st, streams[i], it.pos[i], min(end-it.pos[i], chunk))
		if err != nil {
			return err
		}
		if sl.Dropped > 0 {
			it.Dropped += sl.Dropped
			it.partial[i] = Line{} // its start is gone
		}
		// Past dropped bytes, the slice starts later than asked, and may
		// reach past end.
		sl.Data = sl.Data[:max(0, min(int64(len(sl.Data)), end-sl.Offset))]
		if len(sl.Data) == 0 {
			it.pos[i] = max(it.pos[i], min(sl.Offset, end))
			if sl.Offset < end {
				return nil // nothing more written yet
			}
			continue
		}
		if err := it.split(i, sl, emit); err != nil {
			return err
		}
		it.pos[i] = sl.Offset + int64(len(sl.Data))
	}
	return nil
}

// split passes the lines of sl that end in it, and keeps its last bytes
// as stream i's partial line if they do not end in a newline. A line that
// reaches MaxLine bytes is passed in pieces of MaxLine bytes.
func (it *Interleaver) split(i int, sl Slice, emit func(Line) error) error {
	data, off := sl.Data, sl.Offset
	for len(data) > 0 {
		p := &it.partial[i]
		if len(p.Data) == 0 {
			p.Stream, p.Offset = streams[i], off
		}
		room := MaxLine - len(p.Data)
		n := bytes.IndexByte(data[:min(len(data), room)], '\n') + 1 // the line's length here, if it ends
		if n == 0 && len(data) < room {
			p.Data = append(p.Data, data...)
			return nil
		}
		if n == 0 {
			n = room // a full piece of a line that goes on
		}
		line := Line{Stream: p.Stream, Offset: p.Offset, Data: append(p.Data, data[:n]...)}
		*p = Line{}
		if err := emit(line); err != nil {
			return err
		}
		data, off = data[n:], off+int64(n)
	}
	return nil
}
