package watcher

import (
	"bytes"
	"path/filepath"
	"time"

	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
	"golang.org/x/sys/unix"
)

// A live run's directory is watched with inotify: a write to its output
// files schedules a check of their size, and a write to its progress file
// a read of it. Nothing runs while a run is quiet, so idle runs cost no
// CPU; a chatty one costs at most one check per capCheckDelay.

const (
	capCheckDelay  = 100 * time.Millisecond
	progressDelay  = 200 * time.Millisecond
	maxProgressLen = 200
)

// watchRunDir starts watching r's directory.
func (w *watcher) watchRunDir(r *run) {
	if w.fsw == nil {
		return
	}
	if err := w.fsw.Add(w.store.RunDir(r.st.ID)); err != nil {
		w.log.Printf("run %s: watching its directory: %v (its output is capped only when it ends, and --both shows its streams one after the other)", r.st.ID, InotifyError(err))
	}
}

func (w *watcher) unwatchRunDir(id string) {
	if w.fsw != nil {
		w.fsw.Remove(w.store.RunDir(id))
	}
}

// runDirEvent handles a change in a run's directory.
func (w *watcher) runDirEvent(id, name string) {
	r := w.runs[id]
	if r == nil {
		return
	}
	switch name {
	case "stdout", "stderr":
		w.noteStream(r, name)
		w.once(r, &r.capPending, capCheckDelay, w.capOutput)
	case "progress":
		w.once(r, &r.progressPending, progressDelay, w.readProgress)
	}
}

// once runs f(r) after d, unless *pending says it is scheduled already;
// by then, only if r is still supervised.
func (w *watcher) once(r *run, pending *bool, d time.Duration, f func(*run)) {
	if *pending {
		return
	}
	*pending = true
	w.after(d, func() {
		*pending = false
		if w.runs[r.st.ID] == r {
			f(r)
		}
	})
}

// outputLimit is r's cap per output file.
func outputLimit(st *tracker.State) int64 {
	if st.Output != nil && st.Output.Limit > 0 {
		return st.Output.Limit
	}
	return spool.DefaultOutputLimit
}

// noteStream records a switch when r's writes go to the other stream. Its
// offset is the other stream's size now: exact when the run's writes do
// not outrun this watcher, which is what docs/protocol.md promises.
func (w *watcher) noteStream(r *run, stream string) {
	prev := r.writingTo
	r.writingTo = stream
	if prev == "" || prev == stream {
		return
	}
	r.switches = append(r.switches, tracker.Switch{From: prev, At: w.store.OutputSize(r.st, prev)})
}

// maxSwitches bounds a run's order file (about 16 bytes a switch): beyond
// it, the oldest switches are let go, as capped output is.
const maxSwitches = 1 << 16

// writeSwitches appends r's new switches to its order file.
func (w *watcher) writeSwitches(r *run) {
	if len(r.switches) == 0 {
		return
	}
	id := r.st.ID
	if err := w.store.AppendSwitches(id, r.st.OwnerUID, r.switches); err != nil {
		w.log.Printf("run %s: recording the order of its output: %v", id, err)
		return
	}
	for _, x := range r.switches {
		r.orderSize += int64(len(x.String()) + 1)
	}
	r.switches = r.switches[:0]
	if r.orderSize > 2*16*maxSwitches {
		size, err := w.store.TrimSwitches(id, r.st.OwnerUID, maxSwitches)
		if err != nil {
			w.log.Printf("run %s: trimming its order file: %v", id, err)
		}
		r.orderSize = size
	}
}

// capOutput writes r's stream switches down and drops the oldest bytes of
// its output files beyond its limit (plus an eighth, so that a steady
// writer is cut now and then, not on every write), keeping the newest. It cuts the file's start where the
// file system can (FALLOC_FL_COLLAPSE_RANGE), else punches a hole.
func (w *watcher) capOutput(r *run) {
	w.writeSwitches(r)
	limit := outputLimit(r.st)
	changed := false
	for _, name := range []string{"stdout", "stderr"} {
		if w.capStream(r.st, name, limit) {
			changed = true
		}
	}
	if changed {
		w.save(r.st)
	}
}

func (w *watcher) capStream(st *tracker.State, name string, limit int64) bool {
	// Checked with a stat first: at the end of every run, and every 100 ms
	// of a run that writes, the file is almost never over its limit. An
	// lstat: the size of whatever a link points to is not the run's.
	path := w.store.Path(st.ID, name)
	var size unix.Stat_t
	if err := unix.Lstat(path, &size); err != nil || size.Mode&unix.S_IFMT != unix.S_IFREG {
		return false
	}
	out := st.Output
	if out == nil {
		// Recorded only once something is cut: a record says "output"
		// when its output was capped, or its request set the cap.
		out = &tracker.Output{Limit: limit}
	}
	s := &out.Stdout
	if name == "stderr" {
		s = &out.Stderr
	}
	total := s.Base + size.Size
	if total-s.Dropped <= limit+limit/8 {
		return false
	}
	st.Output = out
	const block = 4096 // what both operations need their range aligned to
	cut := (total - limit - s.Dropped) / block * block
	if cut <= 0 {
		return false
	}
	// Cut only the run's own file, never through a link or into another
	// file put in its place: its directory may be its owner's.
	fd, err := tracker.OpenRunFile(path, unix.O_WRONLY, st.OwnerUID)
	if err != nil {
		w.log.Printf("run %s: capping %s: %v", st.ID, name, err)
		return false
	}
	defer unix.Close(fd)
	if s.Base == s.Dropped {
		if err := unix.Fallocate(fd, unix.FALLOC_FL_COLLAPSE_RANGE, 0, cut); err == nil {
			s.Base += cut
			s.Dropped += cut
			return true
		}
	}
	// Punch a hole over the next dropped range: the file keeps its size,
	// and offsets stay absolute.
	off := s.Dropped - s.Base
	if err := unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, cut); err != nil {
		w.log.Printf("run %s: capping %s: %v", st.ID, name, err)
		return false
	}
	s.Dropped += cut
	return true
}

// readProgress takes what r wrote to its progress file.
func (w *watcher) readProgress(r *run) {
	b, err := readHead(filepath.Join(w.store.RunDir(r.st.ID), "progress"), 4096)
	if err != nil {
		return
	}
	if i := bytes.IndexByte(b, '\n'); i >= 0 && len(bytes.TrimSpace(b[:i])) > 0 {
		b = b[:i]
	}
	p := string(bytes.ToValidUTF8(bytes.TrimSpace(b), []byte("?")))
	if len(p) > maxProgressLen {
		p = p[:maxProgressLen]
	}
	if p == "" || p == r.st.Progress {
		return
	}
	now := time.Now()
	r.st.Progress, r.st.ProgressAt = p, &now
	w.save(r.st)
}

// readHead reads at most the first limit bytes of the regular file at
// path, never through a link or from a FIFO (a run writes the file, and
// may put anything in its place).
func readHead(path string, limit int) ([]byte, error) {
	fd, _, err := spool.OpenRegular(path)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	b := make([]byte, limit)
	n, err := unix.Read(fd, b)
	if err != nil {
		return nil, err
	}
	return b[:n], nil
}
