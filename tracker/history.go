package tracker

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tendhq/tend/tracker/durable"
	"github.com/tendhq/tend/tracker/layout"
	"golang.org/x/sys/unix"
)

// Event is one line of history.jsonl: a run reached a state.
type Event struct {
	Time     time.Time `json:"time"`
	ID       string    `json:"id"`
	Rev      int64     `json:"rev"`
	State    StateName `json:"state"`
	Session  string    `json:"session,omitempty"`
	PID      int       `json:"pid,omitempty"`
	ExitCode *int      `json:"exit_code,omitempty"`
	Signal   string    `json:"signal,omitempty"`
	Reason   string    `json:"reason,omitempty"`
	// Labels and Note say what a label or note request changed, on the
	// event of that change: the labels it set (null: removed) and the
	// note it added. With the run's start request, the history says all
	// that its record holds (see Repair). The watcher never writes them
	// in clear (the history is the group's to read, labels and notes are
	// not): it writes them in Sealed (see SealChange), which Rebuild
	// opens. Lines of a tend before 2026-11-29 carry them in clear.
	Labels map[string]*string `json:"labels,omitempty"`
	Note   string             `json:"note,omitempty"`
	// Sealed is Labels and Note, sealed with a key only the watcher's
	// user may read (see SealChange, OpenChange).
	Sealed string `json:"sealed,omitempty"`
	// EndedAt, DurationSeconds and CPUSeconds are, on the event of a run's
	// end, what its record says of the end besides the fields above: with
	// the record the run had before, the event says all that its ended
	// record holds (see ApplyCovered), so that an end whose record was written
	// without a flush of its own can be brought back from the history.
	EndedAt         *time.Time `json:"ended_at,omitempty"`
	DurationSeconds float64    `json:"duration_seconds,omitempty"`
	CPUSeconds      float64    `json:"cpu_seconds,omitempty"`
	// Stop is, on the event of a run's stop (state stopping), what its
	// record says of the stop besides the fields above (see ApplyCovered).
	Stop *Stop `json:"stop,omitempty"`
	// CreatedAt is, on the same events (an end, a stop), when the run was
	// created: it tells the run from one made anew with its ID once it was
	// deleted (see CoveredAfter).
	CreatedAt *time.Time `json:"created_at,omitempty"`
	// Request is, on a deleted event, the key of the delete request that
	// deleted the run (spool.Name.Key): taken again after a crash, that
	// request is answered deleted, not not_found.
	Request string `json:"request,omitempty"`
	// Output is, on the event of a change of the record's output (bytes
	// dropped from an output file, its start cut), the record's output
	// as it is then. A cut moves every offset in the file, and only the
	// record says by how much: a record rebuilt from the history takes
	// its bases from here (see Rebuild), where it would otherwise shift
	// every absolute offset by all that was cut. A live run's record is
	// saved for its cuts at most every 10 s (the cut file holds those
	// made since), so the history grows by a line per 10 s at most.
	Output *Output `json:"output,omitempty"`
}

// ApplyChange applies what a label or note event changed (see
// Event.Labels) to st: the watcher, when it takes the request, and fsck,
// when it rebuilds a record from the history, apply it the same way.
func ApplyChange(st *State, ev Event) {
	for k, v := range ev.Labels {
		if st.Labels == nil {
			st.Labels = make(map[string]string)
		}
		if v == nil {
			delete(st.Labels, k)
		} else {
			st.Labels[k] = *v
		}
	}
	if len(st.Labels) == 0 {
		st.Labels = nil
	}
	if ev.Note != "" {
		st.Notes = append(st.Notes, Note{Time: ev.Time, Text: ev.Note})
	}
}

// EventOf returns the history event for st's current state.
func EventOf(st *State, at time.Time) Event {
	ev := Event{Time: at, ID: st.ID, Rev: st.Rev, State: st.State, Session: st.Session, PID: st.PID,
		ExitCode: st.ExitCode, Signal: st.Signal, Reason: st.Reason}
	switch {
	case Final(st.State):
		created := st.CreatedAt
		ev.EndedAt, ev.DurationSeconds, ev.CPUSeconds, ev.CreatedAt = st.EndedAt, st.DurationSeconds, st.CPUSeconds, &created
	case st.State == Stopping && st.Stop != nil:
		created, stop := st.CreatedAt, *st.Stop
		stop.Requests = slices.Clone(stop.Requests) // the event is written later; the stop may grow meanwhile
		ev.Stop, ev.CreatedAt = &stop, &created
	}
	return ev
}

// ApplyCovered makes st, a run's record as it was before a change that
// may be recorded without a flush (an end or a stop: see CoveredAfter),
// the record of the change that ev (its event, see EventOf) says. It is
// what the watcher wrote then if the change changed nothing else of the
// record, as only such changes are written without a flush (see
// Store.WriteCovered).
func ApplyCovered(st *State, ev Event) {
	st.Rev, st.State, st.Reason = ev.Rev, ev.State, ev.Reason
	if ev.State == Stopping {
		stop := *ev.Stop
		stop.Requests = slices.Clone(stop.Requests)
		st.Stop = &stop
		return
	}
	st.ExitCode, st.Signal = ev.ExitCode, ev.Signal
	st.EndedAt, st.DurationSeconds, st.CPUSeconds = ev.EndedAt, ev.DurationSeconds, ev.CPUSeconds
}

// History appends to a root's history.jsonl. Every append holds an
// exclusive flock on history.lock and writes one whole line with a single
// write to a file opened with O_APPEND, so concurrent writers never
// interleave within a line. It refuses to append after a torn last line,
// which a new line would join (ErrTornEnd), and rotates the file by size
// under the same lock.
type History struct {
	root string
	// lockFD is history.lock, opened at the first append and kept open:
	// an append is then two flock calls, not an open and a close too. mu
	// orders this History's own appends (a flock held through one open
	// file is not exclusive within it).
	mu     sync.Mutex
	lockFD int
	// made is set when an append made history.jsonl (or rotated the
	// files) since the last Sync: their names are not durable until the
	// root is synced.
	made bool
	// MaxSize is the size beyond which history.jsonl is rotated before an
	// append: it becomes history.1.jsonl, history.1.jsonl becomes
	// history.2.jsonl, and so on; none is deleted. Zero: never.
	MaxSize int64
	// pending is true while changes may wait in history.pending.jsonl
	// (see layout.Root.PendingHistory): at first, and after this History kept some there.
	pending bool
}

// DefaultMaxHistorySize is History.MaxSize unless set otherwise.
const DefaultMaxHistorySize = 64 << 20

// ErrTornEnd means the history's last line has no newline: appending would
// join a new line to it, so nothing is appended until it is repaired.
var ErrTornEnd = errors.New("the last line is torn (no newline at the end): nothing is appended until tend fsck --repair")

// OpenHistory returns the History of the tend root at root.
func OpenHistory(root string) *History {
	return &History{root: root, lockFD: -1, MaxSize: DefaultMaxHistorySize, pending: true}
}

// The changes that could not be appended to a root's history while its
// last line was torn are kept in its history.pending.jsonl, in order, and
// appended before anything else once the history is whole again (at the
// next append after tend fsck --repair, or by it). Failing closed must not
// mean forgetting.

// Append adds events to the history, each on its own line.
func (h *History) Append(events ...Event) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.lock(); err != nil {
		return err
	}
	defer flockRetry(h.lockFD, unix.LOCK_UN)
	return h.appendLocked(events...)
}

// lock takes the exclusive flock on history.lock through the descriptor h
// keeps (see lockHistory).
func (h *History) lock() error {
	return lockHistory(h.root, &h.lockFD, unix.LOCK_EX)
}

// lockHistory takes the flock (how: LOCK_EX or LOCK_SH) on root's
// history.lock, which orders the appends and rotations of its history,
// through *fd: opened if it is -1, never through a link, and opened again
// if the file it holds is no longer history.lock (removed or replaced by
// hand): a lock on a file nobody else opens excludes no one. The file is
// the watcher's user's alone (0600): anyone who may open it may hold it,
// and hold up every append. Closing *fd releases the lock.
func lockHistory(root string, fd *int, how int) error {
	path := layout.Root(root).HistoryLock()
	for range 3 {
		if *fd < 0 {
			f, err := unix.Open(path, unix.O_RDONLY|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
			if err != nil {
				return &os.PathError{Op: "open", Path: path, Err: err}
			}
			*fd = f
		}
		if err := flockRetry(*fd, how); err != nil {
			return &os.PathError{Op: "flock", Path: path, Err: err}
		}
		var held, now unix.Stat_t
		if unix.Fstat(*fd, &held) == nil && unix.Stat(path, &now) == nil && held.Dev == now.Dev && held.Ino == now.Ino {
			return nil
		}
		unix.Close(*fd) // releases the lock
		*fd = -1
	}
	return fmt.Errorf("%s keeps changing", path)
}

// closeLock closes *fd, if open, releasing its lock.
func closeLock(fd *int) {
	if *fd >= 0 {
		unix.Close(*fd)
		*fd = -1
	}
}

func flockRetry(fd, how int) error {
	for {
		if err := unix.Flock(fd, how); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// appendLocked appends events, after the changes that waited while the
// history's end was torn; while it still is, it keeps them waiting too
// and returns an error wrapping ErrTornEnd. The caller holds the history
// lock.
func (h *History) appendLocked(events ...Event) error {
	var buf bytes.Buffer
	for _, e := range events {
		b, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("%s: %w", layout.Root(h.root).History(), err)
		}
		buf.Write(b)
		buf.WriteByte('\n')
	}
	path := layout.Root(h.root).History()
	fd, size, made, err := openEnd(path)
	if errors.Is(err, ErrTornEnd) {
		if perr := appendPending(h.root, buf.Bytes()); perr != nil {
			// Not ErrTornEnd's: a caller takes that for changes kept on
			// disk, and these are not: it must keep them and try again.
			return fmt.Errorf("%v; and keeping the changes in %s meanwhile: %w", err, layout.Root(h.root).PendingHistory(), perr)
		}
		h.pending = true
		h.made = true // the pending file may be new: the root is synced too
		return fmt.Errorf("%w; %d change(s) wait in %s meanwhile", err, len(events), layout.Root(h.root).PendingHistory())
	}
	if err != nil {
		return err
	}
	data := buf.Bytes()
	var waited []byte
	if h.pending {
		if waited, err = readPending(h.root); err != nil {
			unix.Close(fd)
			return err
		}
		data = append(waited, data...)
	}
	if h.MaxSize > 0 && size > 0 && size+int64(len(data)) > h.MaxSize {
		unix.Close(fd)
		h.made = true // before: a failed rotation may have moved some
		if err := rotate(h.root); err != nil {
			return err
		}
		if fd, size, _, err = openEnd(path); err != nil {
			return err
		}
	}
	h.made = h.made || made
	err = writeWhole(fd, size, data)
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if h.pending {
		if len(waited) > 0 {
			if err := os.Remove(layout.Root(h.root).PendingHistory()); err != nil {
				return err
			}
		}
		h.pending = false
	}
	return nil
}

// writeWhole appends data to the file fd, of size bytes, or nothing: a
// write cut short (a full disk) leaves part of a line, which would tear
// the file's end and stop every later append until tend fsck --repair;
// those bytes are this append's own (the caller holds the history lock),
// so it takes them back, and the lines are appended whole when tried
// again.
func writeWhole(fd int, size int64, data []byte) error {
	err := durable.WriteAll(fd, data)
	if err == nil {
		return nil
	}
	if terr := unix.Ftruncate(fd, size); terr != nil {
		return fmt.Errorf("%w; and taking back what was written of it: %v", err, terr)
	}
	return err
}

// appendPending keeps lines, whole, in root's pending changes. A pending
// file whose own last line was torn (a power loss mid-write) gets a
// newline first: that line stays, as one bad line fsck reports, and no
// line is joined to it.
func appendPending(root string, lines []byte) error {
	path := layout.Root(root).PendingHistory()
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_APPEND|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	if st.Size > 0 {
		var last [1]byte
		if _, err := unix.Pread(fd, last[:], st.Size-1); err == nil && last[0] != '\n' {
			lines = append([]byte{'\n'}, lines...)
		}
	}
	if err := writeWhole(fd, st.Size, lines); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// readPending returns the changes waiting in root's pending file, whole
// lines, in order; none if there is no such file.
func readPending(root string) ([]byte, error) {
	b, _, err := durable.ReadRegular(layout.Root(root).PendingHistory(), 1<<30)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		b = append(b, '\n') // as appendPending would have
	}
	return b, nil
}

// PendingChanges returns how many changes wait in root's pending file.
func PendingChanges(root string) int {
	b, _ := readPending(root)
	return bytes.Count(b, []byte("\n"))
}

// appendPendingLocked appends the changes waiting in root's pending file
// to its history, if it no longer ends torn, and returns how many it
// appended. The caller holds the history lock (fsck --repair).
func appendPendingLocked(root string) (int, error) {
	n := PendingChanges(root)
	if n == 0 {
		return 0, nil
	}
	h := OpenHistory(root)
	if err := h.appendLocked(); err != nil {
		return 0, err
	}
	return n, nil
}

// openEnd opens the history file at path for appending, creating it (made
// says so), and returns it with its size; ErrTornEnd if it does not end
// with a newline. Raw system calls: it runs at every state change of
// every run.
func openEnd(path string) (fd int, size int64, made bool, err error) {
	const flags = unix.O_RDWR | unix.O_APPEND | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err = unix.Open(path, flags, 0)
	if errors.Is(err, unix.ENOENT) {
		fd, err = unix.Open(path, flags|unix.O_CREAT, 0o644)
		made = true
	}
	if err != nil {
		return -1, 0, false, &os.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, 0, false, &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	if st.Size == 0 {
		return fd, 0, made, nil
	}
	var last [1]byte
	if _, err := unix.Pread(fd, last[:], st.Size-1); err != nil {
		unix.Close(fd)
		return -1, 0, false, &os.PathError{Op: "read", Path: path, Err: err}
	}
	if last[0] != '\n' {
		unix.Close(fd)
		return -1, 0, false, fmt.Errorf("%s: %w", path, ErrTornEnd)
	}
	return fd, st.Size, made, nil
}

// Sync makes the lines appended so far durable: a power loss takes back
// none of them. The file's data is synced, and the root too if an append
// made the file, or rotated it, since the last Sync.
func (h *History) Sync() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sync(durable.FlushHistory, durable.FlushHistoryDir)
}

// syncData makes the history file's data durable, as flush file, not its
// name.
func (h *History) syncData(file durable.Flush) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sync(file, "")
}

// sync is Sync, as the flushes named file and dir (none if empty); the
// caller holds h.mu. Changes waiting in the pending file, while the
// history's end is torn, are synced as the history's own lines are.
func (h *History) sync(file, dir durable.Flush) error {
	paths := []string{layout.Root(h.root).History()}
	if h.pending {
		paths = append(paths, layout.Root(h.root).PendingHistory())
	}
	for _, path := range paths {
		if err := syncData(path, file); err != nil {
			return err
		}
	}
	if h.made && dir != "" {
		if err := dir.SyncDir(h.root); err != nil {
			return err
		}
		h.made = false
	}
	return nil
}

// syncData fdatasyncs the file at path, as flush file; a missing file
// has nothing to sync.
func syncData(path string, file durable.Flush) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil // nothing appended
	}
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	err = file.Fdatasync(fd)
	unix.Close(fd)
	if err != nil {
		return fmt.Errorf("%s: fdatasync: %w", path, err)
	}
	return nil
}

// checkEnd returns the size of the history file at path, and ErrTornEnd if
// it does not end with a newline.
func checkEnd(path string) (int64, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size() == 0 {
		return 0, err
	}
	var last [1]byte
	if _, err := f.ReadAt(last[:], fi.Size()-1); err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	if last[0] != '\n' {
		return fi.Size(), fmt.Errorf("%s: %w", path, ErrTornEnd)
	}
	return fi.Size(), nil
}

// CheckHistoryEnd checks, cheaply, that root's history ends with a whole,
// valid line: the one condition under which appending is unsafe, and the
// usual result of a crash mid-write. tend fsck checks every line.
func CheckHistoryEnd(root string) error {
	path := layout.Root(root).History()
	if _, err := checkEnd(path); err != nil {
		return err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size() == 0 {
		return nil
	}
	off := max(0, fi.Size()-64<<10)
	buf := make([]byte, fi.Size()-off)
	if _, err := f.ReadAt(buf, off); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	lines := bytes.Split(bytes.TrimSuffix(buf, []byte("\n")), []byte("\n"))
	if _, err := parseEvent(append(lines[len(lines)-1], '\n')); err != nil {
		return fmt.Errorf("%s: the last line: %v", path, err)
	}
	return nil
}

// rotate shifts history.N.jsonl to history.N+1.jsonl, oldest first, then
// history.jsonl to history.1.jsonl. The caller holds the lock.
func rotate(root string) error {
	n := rotatedCount(root)
	for i := n; i >= 1; i-- {
		if err := os.Rename(layout.Root(root).RotatedHistory(i), layout.Root(root).RotatedHistory(i+1)); err != nil {
			return fmt.Errorf("rotating the history: %w", err)
		}
	}
	if err := os.Rename(layout.Root(root).History(), layout.Root(root).RotatedHistory(1)); err != nil {
		return fmt.Errorf("rotating the history: %w", err)
	}
	return nil
}

// rotatedCount returns how many rotated history files root has.
func rotatedCount(root string) int {
	n := 0
	for {
		if _, err := os.Lstat(layout.Root(root).RotatedHistory(n + 1)); err != nil {
			return n
		}
		n++
	}
}

// HistoryFiles returns root's history files, oldest first: the rotated
// ones, then history.jsonl. Every history.N.jsonl there is one, whatever
// numbers are missing before it: an operator who compresses or removes
// history.1.jsonl hides no older file from the readers (nor, from the
// watcher, how the runs deleted in them ended). Rotation, which counts
// the files up to the first missing number, fills such a gap.
func HistoryFiles(root string) []string {
	var ns []int
	ents, _ := os.ReadDir(root)
	for _, e := range ents {
		num, ok := strings.CutPrefix(e.Name(), "history.")
		if num, ok = strings.CutSuffix(num, ".jsonl"); !ok {
			continue
		}
		if n, err := strconv.Atoi(num); err == nil && n >= 1 && strconv.Itoa(n) == num {
			ns = append(ns, n)
		}
	}
	slices.Sort(ns)
	var files []string
	for i := len(ns) - 1; i >= 0; i-- {
		files = append(files, layout.Root(root).RotatedHistory(ns[i]))
	}
	return append(files, layout.Root(root).History())
}

// historyAndPending is HistoryFiles, then the changes that wait to be
// appended, if any do (see layout.Root.PendingHistory): what fsck checks and repairs.
func historyAndPending(root string) []string {
	files := HistoryFiles(root)
	if _, err := os.Lstat(layout.Root(root).PendingHistory()); err == nil {
		files = append(files, layout.Root(root).PendingHistory())
	}
	return files
}

// ReadAllHistory reads every event of root's history, across its rotated
// files, oldest first, as FindHistorySet found them (a rotation meanwhile
// skips no file, nor shows one twice), history.jsonl up to where it
// ended then. It fails closed, like ReadHistory.
//
// It holds every event in memory: a reader that needs only some (of one
// run) scans them with ScanHistory, whose memory does not grow with a
// history that is never deleted.
func ReadAllHistory(root string) ([]Event, error) {
	var all []Event
	err := ScanHistory(root, func(e Event) error {
		all = append(all, e)
		return nil
	})
	return all, err
}

// ScanHistory passes every event of root's history to each, as
// ReadAllHistory reads them (oldest first, failing closed at the first
// bad line, after the events before it), one line at a time, keeping
// none. An error of each stops it, and is returned.
//
// It holds one file open at a time, and no lock while it reads: a
// reader that holds the shared history lock while each waits (on a
// pipe to a pager, say) holds up every append of the watcher's.
func ScanHistory(root string, each func(Event) error) error {
	set, err := FindHistorySet(root)
	if err != nil {
		return err
	}
	return set.Scan(each)
}

// ScanHistorySince is ScanHistory for the events at or after since (the
// zero time: every one). It does not read the rotated files that
// HistoryFileBefore says are older: a follower that wants the last hour
// need not read a history of years.
func ScanHistorySince(root string, since time.Time, each func(Event) error) error {
	set, err := FindHistorySet(root)
	if err != nil {
		return err
	}
	return set.ScanSince(since, each)
}

// HistoryFileBefore reports whether f, a history file of root opened
// from a HistorySet, has only events from before t: it is a rotated file,
// never written again, modified last over historyClockSlack before t. An
// event's time is read from the clock just before its line is written,
// so the file's modification time is later, but for a clock set back
// meanwhile; a file rewritten since (fsck --repair) is only read again.
func HistoryFileBefore(root string, f *os.File, t time.Time) bool {
	if t.IsZero() || f.Name() == layout.Root(root).History() {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.ModTime().Before(t.Add(-historyClockSlack))
}

// historyClockSlack is how far before its file's modification time a
// history line's time may be, for HistoryFileBefore: the clock may be set
// back between the two.
const historyClockSlack = time.Minute

// ReadHistory reads every event in the history file at path. It fails
// closed: the first line that is torn, not JSON, or not an event makes it
// return an error "history.jsonl:LINE: what is wrong", with the events
// before that line. A missing file is an empty history.
func ReadHistory(path string) ([]Event, error) {
	var events []Event
	err := ScanHistoryFile(path, func(e Event) error {
		events = append(events, e)
		return nil
	})
	return events, err
}

// openIfThere opens the file at path to read, or returns nil and no
// error if there is none: a history file not made yet, or rotated away
// meanwhile, holds no events.
func openIfThere(path string) (*os.File, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return f, err
}

// ScanHistoryFile passes the events of the history file at path to each,
// a line at a time, keeping none, failing closed as ReadHistory does. An
// error of each stops it, and is returned.
func ScanHistoryFile(path string, each func(Event) error) error {
	f, err := openIfThere(path)
	if f == nil {
		return err
	}
	defer f.Close()
	return ScanHistoryFrom(f, path, each)
}

// ScanHistoryFrom is ScanHistoryFile, of the history file r reads, from
// where it is, its lines named after the file at path.
func ScanHistoryFrom(r io.Reader, path string, each func(Event) error) error {
	name := filepath.Base(path)
	var ofLine error // a line's error, or each's: returned as it is
	err := eachLineOf(r, func(n int, b []byte) error {
		switch e, err := parseEvent(b); {
		case b[len(b)-1] != '\n':
			ofLine = fmt.Errorf("%s:%d: torn line: no newline at the end of the file", name, n)
		case err != nil:
			ofLine = fmt.Errorf("%s:%d: %v", name, n, err)
		default:
			ofLine = each(e)
		}
		return ofLine
	})
	if err != nil && err != ofLine {
		return fmt.Errorf("%s: %w", name, err) // reading the file
	}
	return err
}

// A HistorySet is root's history files (HistoryFiles) as FindHistorySet
// found them, all at one moment: each named by its inode, which a
// rotation does not change, and history.jsonl's size then. A rotation
// renames files, and changes nothing they hold up to their ends then: a
// reader of the set that reads the rotated files, then history.jsonl to
// its end and on (a rotation appends nothing more to it), sees every line
// once, wherever a rotation moved each file by the time it is read. By
// their names, a rotation after they were listed made it read one file
// for another and skip the lines of the one before.
//
// It holds no file open: a root's rotated files may be more than a
// process may open at once. Each is opened when its turn comes, found by
// its inode under whichever name it has then.
type HistorySet struct {
	root  string
	files []historyFile // oldest first; history.jsonl last, if it was there
}

// A historyFile is one file of a HistorySet.
type historyFile struct {
	path     string // its name when the set was found
	dev, ino uint64
	size     int64 // its size then
}

// FindHistorySet finds root's history files as one set: no rotation
// comes between finding one and the next. It holds the shared history
// lock while it looks, where it may (no rotation happens meanwhile); a
// reader who may not open history.lock (another user of a shared root)
// looks again, until two looks find the same files under the same names.
func FindHistorySet(root string) (*HistorySet, error) {
	lockFD := -1
	if err := lockHistory(root, &lockFD, unix.LOCK_SH); err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, os.ErrPermission) {
		return nil, err
	}
	defer closeLock(&lockFD)
	for range 10 {
		files, err := listHistory(root)
		if err != nil {
			return nil, err
		}
		if lockFD >= 0 {
			return &HistorySet{root: root, files: files}, nil
		}
		again, err := listHistory(root)
		if err != nil {
			return nil, err
		}
		if sameFiles(files, again) {
			return &HistorySet{root: root, files: files}, nil
		}
	}
	return nil, fmt.Errorf("%s: the history rotated each time it was looked at", root)
}

// listHistory returns root's history files that are there, oldest
// first: regular files only, no link followed.
func listHistory(root string) ([]historyFile, error) {
	var files []historyFile
	for _, path := range HistoryFiles(root) {
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); errors.Is(err, unix.ENOENT) {
			continue // a gap, or no history.jsonl yet
		} else if err != nil {
			return nil, &os.PathError{Op: "lstat", Path: path, Err: err}
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			return nil, fmt.Errorf("%s: %w", path, durable.ErrNotRegular)
		}
		files = append(files, historyFile{path: path, dev: st.Dev, ino: st.Ino, size: st.Size})
	}
	return files, nil
}

// sameFiles reports whether a and b are the same files under the same
// names, whatever their sizes.
func sameFiles(a, b []historyFile) bool {
	return slices.EqualFunc(a, b, func(x, y historyFile) bool {
		return x.path == y.path && x.dev == y.dev && x.ino == y.ino
	})
}

// Scan passes the events of the set's files to each, oldest first, as
// ScanHistory does: history.jsonl's up to where it ended when the set
// was found, a line appended after being no part of the set.
func (s *HistorySet) Scan(each func(Event) error) error { return s.ScanSince(time.Time{}, each) }

// ScanSince is Scan for the events at or after since (the zero time:
// every one), skipping the rotated files HistoryFileBefore says are
// older.
func (s *HistorySet) ScanSince(since time.Time, each func(Event) error) error {
	pass := each
	if !since.IsZero() {
		pass = func(ev Event) error {
			if ev.Time.Before(since) {
				return nil
			}
			return each(ev)
		}
	}
	for i := range s.files {
		f, err := s.open(i)
		if err != nil {
			return err
		}
		if HistoryFileBefore(s.root, f, since) {
			f.Close()
			continue
		}
		err = ScanHistoryFrom(io.NewSectionReader(f, 0, s.files[i].size), f.Name(), pass)
		f.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// ScanRotated passes the events of the set's rotated files to each,
// oldest first, as Scan does: all but history.jsonl, which a reader
// that follows the history reads from OpenCurrent.
func (s *HistorySet) ScanRotated(each func(Event) error) error {
	return s.ScanRotatedSince(time.Time{}, each)
}

// ScanRotatedSince is ScanRotated as ScanSince scans.
func (s *HistorySet) ScanRotatedSince(since time.Time, each func(Event) error) error {
	rotated := s.files
	if n := len(rotated); n > 0 && rotated[n-1].path == layout.Root(s.root).History() {
		rotated = rotated[:n-1]
	}
	return (&HistorySet{root: s.root, files: rotated}).ScanSince(since, each)
}

// OpenCurrent opens the set's history.jsonl, under whatever name it has
// now (history.1.jsonl after a rotation), at its start; nil if the set
// has none (there was no history.jsonl yet). The caller closes it.
func (s *HistorySet) OpenCurrent() (*os.File, error) {
	if n := len(s.files); n > 0 && s.files[n-1].path == layout.Root(s.root).History() {
		return s.open(n - 1)
	}
	return nil, nil
}

// open opens the set's file i, found by its inode: under the name it had
// if it is still there, else under the one a rotation gave it.
func (s *HistorySet) open(i int) (*os.File, error) {
	want := s.files[i]
	paths := []string{want.path}
	for range 10 {
		for _, path := range paths {
			var st unix.Stat_t
			if path != want.path && (unix.Lstat(path, &st) != nil || st.Dev != want.dev || st.Ino != want.ino) {
				continue
			}
			fd, st, err := durable.OpenRegular(path)
			if err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, durable.ErrNotRegular) {
				return nil, err
			}
			if err == nil && st.Dev == want.dev && st.Ino == want.ino {
				return os.NewFile(uintptr(fd), path), nil
			}
			if err == nil {
				unix.Close(fd) // another file: the set's was moved
			}
		}
		paths = HistoryFiles(s.root) // rotated meanwhile: look under every name
	}
	return nil, fmt.Errorf("%s: gone while the history was read (removed or compressed by hand?): its events are not read", want.path)
}

// ScanRunHistoryFile passes to each the events of run id in the history
// file at path, oldest first, a line at a time, keeping none: a line that
// names another run is passed over unparsed, and one that does not parse
// as an event is skipped, as RecentEvents skips it. Its memory is bounded
// whatever the file holds: a line of another run's longer than its buffer
// is passed over without being gathered, and one of id's longer than
// maxEventLine (far more than tend writes) is skipped too. A missing
// file has no events; a link is not followed, nor anything but a regular
// file opened.
func ScanRunHistoryFile(path, id string, each func(Event)) error {
	fd, _, err := durable.OpenRegular(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	r := bufio.NewReaderSize(f, 64<<10)
	for {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			line, err = readRest(r, line, namesRun(line, id), maxEventLine)
		}
		if len(line) > 0 && line[len(line)-1] == '\n' && namesRun(line, id) {
			if ev, perr := parseEvent(line); perr == nil {
				each(ev)
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
}

// maxEventLine bounds the history line of one run ScanRunHistoryFile
// gathers: far more than the longest line tend appends (a label or note
// request of spool.MaxBody, its JSON escaped and sealed in base64).
const maxEventLine = 16 << 20

// readRest reads the rest of a line that filled r's buffer, head its
// start: gathered with it if keep, and if it is no longer than limit;
// else passed over, and nil returned with the reader's error.
func readRest(r *bufio.Reader, head []byte, keep bool, limit int) ([]byte, error) {
	var long []byte
	if keep {
		long = bytes.Clone(head)
	}
	for {
		b, err := r.ReadSlice('\n')
		if keep && len(long)+len(b) > limit {
			keep, long = false, nil
		}
		if keep {
			long = append(long, b...)
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return long, err
		}
	}
}

// namesRun reports whether history line names run id, found as eventID
// finds it, without parsing the line or allocating.
func namesRun(line []byte, id string) bool {
	const key = `"id":"`
	i := bytes.Index(line, []byte(key))
	if i < 0 {
		return false
	}
	rest := line[i+len(key):]
	return len(rest) > len(id) && string(rest[:len(id)]) == id && rest[len(id)] == '"'
}

func parseEvent(b []byte) (Event, error) {
	var e Event
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		return e, fmt.Errorf("not a JSON event: %v", err)
	}
	if dec.More() {
		return e, errors.New("more than one JSON value on the line")
	}
	if e.ID == "" || e.State == "" || e.Time.IsZero() || e.Rev < 1 {
		return e, errors.New("not an event: missing time, id, rev or state")
	}
	return e, nil
}
