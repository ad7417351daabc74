package watcher

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/tendhq/tend/procfs"
	"github.com/tendhq/tend/tracker/durable"
	"os"
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
		w.log.Printf("run %s: watching its directory: %v (its output is capped only when it ends, and --both shows its streams one after the other)", r.st.ID, procfs.InotifyError(err))
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
		j := w.jobs.byID[id]
		if j == nil {
			return
		}
		r = j.run // a run on a cluster whose node writes where this host sees it
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
		if w.runs[r.st.ID] == r || w.jobs.byID[r.st.ID] != nil && w.jobs.byID[r.st.ID].run == r {
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
//
// A switch from a stream that has not grown since the last switch from it
// is left out: the event that switched to it was older than the bytes it
// came for, which the switch before placed (a run that outran the
// watcher). It would tell nothing, and take a place in the order file.
func (w *watcher) noteStream(r *run, stream string) {
	prev := r.writingTo
	r.writingTo = stream
	if prev == "" || prev == stream {
		return
	}
	at := w.store.RecordedOutputSize(r.st, prev)
	if last, ok := r.switchedAt[prev]; (ok && at == last) || at == 0 {
		return
	}
	if r.switchedAt == nil {
		r.switchedAt = make(map[string]int64, 2)
	}
	r.switchedAt[prev] = at
	r.switches = append(r.switches, tracker.Switch{From: prev, At: at})
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
// writer is cut now and then, not on every write), keeping the newest.
func (w *watcher) capOutput(r *run) {
	w.writeSwitches(r)
	limit := outputLimit(r.st)
	for _, name := range []string{"stdout", "stderr"} {
		c, ok, unmarked := w.capStream(r.st, name, limit)
		if c != "" {
			r.cutsText = c // a cut file written later holds the earlier one's cuts
		}
		// Unmarked, its cuts need their save to be cut again: at most
		// every cutsSavedEvery too, or a mark that keeps failing would
		// flood the history as the cuts did.
		if ok || unmarked {
			r.cutsUnsaved = true
		}
	}
	if r.cutsUnsaved {
		w.saveCutsSoon(r)
	}
}

// saveCutsSoon saves r's record for the cuts made since it was last
// saved for them, at most every cutsSavedEvery while r lives, and at once
// once it has ended (its end's save follows). Each save is a line in the
// history, which every user of a shared root keeps: a run that writes
// fast with a small cap is cut at every check of its size, every
// capCheckDelay, and saving each cut would add ten lines a second for as
// long as it writes. Meanwhile its cut file holds every cut not yet
// recorded, which readers and the next watcher apply to the record's
// bases (tracker.Layout), as they do for a watcher that died between a
// cut and its record.
func (w *watcher) saveCutsSoon(r *run) {
	live := w.runs[r.st.ID] == r || w.jobs.byID[r.st.ID] != nil && w.jobs.byID[r.st.ID].run == r
	if wait := cutsSavedEvery - time.Since(r.cutsSaved); live && wait > 0 {
		if r.cutsSave == nil {
			r.cutsSave = w.after(wait, func() {
				r.cutsSave = nil
				if r.cutsUnsaved && (w.runs[r.st.ID] == r || w.jobs.byID[r.st.ID] != nil && w.jobs.byID[r.st.ID].run == r) {
					w.saveRunCuts(r)
				}
			})
		}
		return
	}
	w.saveRunCuts(r)
}

// saveRunCuts saves r's record for the cuts made since it was last saved
// for them (see saveCuts).
func (w *watcher) saveRunCuts(r *run) {
	if r.cutsSave != nil {
		r.cutsSave.Stop()
		r.cutsSave = nil
	}
	text := r.cutsText
	r.cutsSaved, r.cutsUnsaved, r.cutsText = time.Now(), false, ""
	w.saveCuts(r.st, text)
}

// cutsSavedEvery is how often at most a live run's record is saved for
// the cuts of its output.
const cutsSavedEvery = 10 * time.Second

// capStream drops the oldest bytes of st's stream name beyond limit. It
// punches a hole over them, which moves no offset; where the file system
// can cut a file's start (FALLOC_FL_COLLAPSE_RANGE) it then cuts the file,
// which moves every offset (see cutStart). It returns what the run's cut
// file holds then if it wrote it ("" if not), and reports whether it
// dropped anything. If the mark a cut needs first could not be written
// (see markMade), it drops nothing and reports unmarked: once the run's
// record is saved for its cuts, none is needed.
func (w *watcher) capStream(st *tracker.State, name string, limit int64) (cuts string, ok, unmarked bool) {
	// Checked with a stat first: at the end of every run, and every 100 ms
	// of a run that writes, the file is almost never over its limit. An
	// lstat: the size of whatever a link points to is not the run's.
	path := w.store.Run(st.ID).Stream(name)
	var size unix.Stat_t
	if err := unix.Lstat(path, &size); err != nil || size.Mode&unix.S_IFMT != unix.S_IFREG {
		return "", false, false
	}
	// Recorded only once something is cut: a record says "output" when its
	// output was capped, or its request set the cap.
	uncapped := st.Output == nil
	if uncapped {
		st.Output = &tracker.Output{Limit: limit}
	}
	s := outputStream(st, name)
	// Summed without overflow: a sparse file may be of exabytes.
	total := tracker.AddOffsets(s.Base, size.Size)
	const block = 4096 // what both operations need their range aligned to
	n := (total - limit - s.Dropped) / block * block
	if total-s.Dropped <= limit+limit/8 || n <= 0 {
		if uncapped {
			st.Output = nil
		}
		return "", false, false
	}
	failed := func(err error) (string, bool, bool) {
		w.log.Printf("run %s: capping %s: %v", st.ID, name, err)
		if uncapped {
			st.Output = nil // nothing was cut: the record, saved or not, says so
		}
		return cuts, false, unmarked
	}
	f, err := w.openOutput(st, name)
	if err != nil {
		return failed(err)
	}
	defer f.Close()
	if s.Base == s.Dropped {
		// The hole is punched at the file's start, where it says that the
		// last cut listed was not made.
		if cuts, err = w.markMade(st, name); err != nil {
			unmarked = true
			return failed(err)
		}
	}
	if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, s.Dropped-s.Base, n); err != nil {
		return failed(err)
	}
	w.crash("cut-punched")
	if s.Base == s.Dropped {
		if c := w.cutStart(st, name, f, n); c != "" {
			cuts = c
		}
		return cuts, true, false
	}
	s.Dropped += n
	return cuts, true, false
}

// markMade writes a mark to run st's cut file if the last cut of its
// stream name that the file lists was made, and nothing after it says
// so (see tracker.MarkMade), and returns what the file holds then ("" if
// it did not write it). It is written before the next cut's hole is
// punched at the file's start: until that cut is listed (cutStart), the
// hole would otherwise tell readers, and the next watcher, that the last
// cut was not made, and place every byte of the file by its size. With
// its record saved for its cuts only every cutsSavedEvery, a run that
// writes fast is cut again and again with the last cut unrecorded.
//
// A cut file it cannot read (its owner's to spoil) needs no mark: readers
// refuse it, and cutStart leaves the dropped bytes a hole. Its error is
// the mark's write's.
func (w *watcher) markMade(st *tracker.State, name string) (string, error) {
	cuts, err := w.store.ReadCuts(st.ID, st.OwnerUID)
	if err != nil {
		return "", nil
	}
	cuts, marked := tracker.MarkMade(cuts, name, outputStream(st, name).Base)
	if !marked {
		return "", nil
	}
	text, err := w.store.WriteCuts(st.ID, st.OwnerUID, cuts)
	if err != nil {
		w.noteFlushFailure(err)
		return "", fmt.Errorf("marking its last cut made: %w", err)
	}
	return text, nil
}

// cutStart cuts the first n bytes of f, st's stream name, which are a
// hole punched for them (dropped, recorded or not), and sets the stream's
// base and dropped bytes after them. It returns what the run's cut file
// holds then ("" if it was not written).
//
// The cut moves every offset in the file, and the record that says so is
// written only later (saveCuts). So it is first added to the run's cut
// file: whatever step a watcher dies at, the record, the cut file and the
// file's leading hole tell readers and the next watcher where the bytes
// are (tracker.Layout), and the next watcher finishes the cut
// (settleCuts). Where the file cannot be cut the dropped bytes stay a
// hole, as on file systems that cannot cut at all.
func (w *watcher) cutStart(st *tracker.State, name string, f *os.File, n int64) string {
	s := outputStream(st, name)
	s.Dropped = s.Base + n
	if tracker.LeadingHole(f) < n {
		return "" // the file system does not show the hole: a cut would be undecidable
	}
	// Cuts not yet recorded stay in the file until they are.
	cuts, err := w.store.ReadCuts(st.ID, st.OwnerUID)
	var text string
	if err == nil {
		text, err = w.store.WriteCuts(st.ID, st.OwnerUID, tracker.WithCut(cuts, tracker.Cut{Stream: name, Base: s.Base, Bytes: n}))
	}
	if err != nil {
		w.log.Printf("run %s: cutting %s: %v (its dropped bytes stay a hole)", st.ID, name, err)
		w.noteFlushFailure(err)
		return ""
	}
	w.crash("cut-recorded")
	if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_COLLAPSE_RANGE, 0, n); err != nil {
		if !errors.Is(err, unix.EOPNOTSUPP) {
			w.log.Printf("run %s: cutting %s: %v (its dropped bytes stay a hole)", st.ID, name, err)
		}
		return text // the cut file says so until the record does
	}
	w.crash("cut-collapsed")
	s.Base = s.Dropped
	return text
}

// saveCuts saves st, whose output was capped, and once that is recorded
// removes its cut file, if it still holds cuts ("" if none was written):
// a later cut may have written it again meanwhile.
//
// The save's history event carries the output's bases (see outputChange):
// they are then durable in two places, its record and its history, before
// the cut file goes.
func (w *watcher) saveCuts(st *tracker.State, cuts string) {
	w.saveChange(st, outputChange(st), changed)
	if cuts == "" {
		return
	}
	w.follow(effectRemoveCut, st.ID, func() {
		if err := w.store.RemoveCuts(st.ID, cuts); err != nil {
			w.log.Printf("run %s: %v", st.ID, err)
		}
	})
}

// outputChange is the change of a save that records st's output as it
// is: its event says where the output's offsets stand, for a record
// rebuilt from the history (tracker.Rebuild) once this one is lost.
func outputChange(st *tracker.State) tracker.Event {
	if st.Output == nil {
		return tracker.Event{}
	}
	o := *st.Output // the event is written later; the record may be cut again meanwhile
	return tracker.Event{Output: &o}
}

// settleCuts brings run st's record up to date with the cuts of its
// output files that an earlier watcher left under way when it died, and
// finishes them: a cut made but not recorded is recorded; a hole punched
// at a file's start is recorded as dropped bytes, and the file cut. It
// reports whether it saved st.
func (w *watcher) settleCuts(st *tracker.State) bool {
	cuts, err := w.store.ReadCuts(st.ID, st.OwnerUID)
	if err != nil {
		w.log.Printf("recover: run %s: %v (its offsets are left as recorded)", st.ID, err)
		return false
	}
	text := tracker.CutsText(cuts)
	changed := false
	for _, name := range []string{"stdout", "stderr"} {
		if c, ok := w.settleCut(st, name, cuts); ok {
			changed = true
			if c != "" {
				text = c // cutStart kept the cuts the file held
			}
		}
	}
	switch {
	case changed:
		w.saveCuts(st, text)
	case len(cuts) > 0:
		w.store.RemoveCuts(st.ID, text) // recorded before the watcher died
	}
	return changed
}

// settleCut settles st's stream name (see settleCuts). It reports whether
// the record changed, and what the cut file holds if it wrote it.
func (w *watcher) settleCut(st *tracker.State, name string, cuts []tracker.Cut) (string, bool) {
	f, err := w.openOutput(st, name)
	if err != nil {
		return "", false
	}
	defer f.Close()
	base, dropped := st.Layout(name, f, cuts)
	if st.Output == nil {
		if dropped == 0 {
			return "", false // the usual case: never capped
		}
		st.Output = &tracker.Output{Limit: outputLimit(st)}
	}
	s := outputStream(st, name)
	switch {
	case base != s.Base && dropped > base && s.Base == s.Dropped:
		// Its cuts were unrecorded when the watcher died punching the
		// next cut's hole, as a fast writer's often are (their record is
		// saved every cutsSavedEvery): cut that hole too, or the file
		// keeps it, and every later cut is a hole punched after it.
		w.log.Printf("recover: run %s: %s was cut by %d bytes, and %d more dropped, which was not recorded: recording it, and cutting them", st.ID, name, base-s.Base, dropped-base)
		s.Base, s.Dropped = base, base
		return w.cutStart(st, name, f, dropped-base), true
	case base != s.Base:
		w.log.Printf("recover: run %s: %s was cut by %d bytes, which was not recorded: recording it", st.ID, name, base-s.Base)
		s.Base, s.Dropped = base, dropped
		return "", true
	case dropped != s.Dropped && s.Base == s.Dropped:
		w.log.Printf("recover: run %s: %d bytes of %s were dropped, which was not recorded: recording it, and cutting them", st.ID, dropped-s.Dropped, name)
		return w.cutStart(st, name, f, dropped-s.Base), true
	case dropped != s.Dropped:
		w.log.Printf("recover: run %s: %d bytes of %s were dropped, which was not recorded: recording it", st.ID, dropped-s.Dropped, name)
		s.Dropped = dropped
		return "", true
	}
	return "", false
}

// openOutput opens st's output file name to cut it: the run's own regular
// file, never through a link nor into another file put in its place (its
// directory may be its owner's).
func (w *watcher) openOutput(st *tracker.State, name string) (*os.File, error) {
	path := w.store.Run(st.ID).Stream(name)
	fd, err := tracker.OpenRunFile(path, unix.O_WRONLY, st.OwnerUID)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), path), nil
}

// outputStream returns st's record of its stream name.
func outputStream(st *tracker.State, name string) *tracker.Stream {
	if name == "stderr" {
		return &st.Output.Stderr
	}
	return &st.Output.Stdout
}

// readProgress takes what r wrote to its progress file.
func (w *watcher) readProgress(r *run) {
	b, err := readHead(w.store.Run(r.st.ID).Progress(), 4096, r.st.OwnerUID)
	if errors.Is(err, errNotTheOwners) && !r.progressRefused {
		r.progressRefused = true
		w.log.Printf("run %s: %v (said once, until its progress is read)", r.st.ID, err)
	}
	if err != nil {
		return
	}
	r.progressRefused = false
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
	w.saveProgress(r)
}

// progressSavedEvery is how often at most a run's record is saved for
// its progress.
const progressSavedEvery = 10 * time.Second

// saveProgress saves run r's record for its progress, noted in r.st
// already: at once if it was last saved for it progressSavedEvery ago or
// more, else once that time has passed. Each save is a record written
// and synced, and a line in the history, which every user of a shared
// root keeps and nothing deletes: a run that writes its progress in a
// loop would otherwise add five lines a second (one per progressDelay)
// for as long as it runs. Meanwhile the progress rides along with any
// other save of the record (its end's too), so its last value is always
// recorded.
func (w *watcher) saveProgress(r *run) {
	if wait := progressSavedEvery - time.Since(r.progressSaved); wait > 0 {
		if r.progressSave == nil {
			r.progressSave = w.after(wait, func() {
				r.progressSave = nil
				if w.supervised(r) && r.exit == nil && !tracker.Final(r.st.State) {
					r.progressSaved = time.Now()
					w.save(r.st)
				}
			})
		}
		return
	}
	r.progressSaved = time.Now()
	w.save(r.st)
}

// supervised reports whether r is still one of the watcher's runs (or
// jobs), not one ended and let go.
func (w *watcher) supervised(r *run) bool {
	return w.runs[r.st.ID] == r || w.jobs.byID[r.st.ID] != nil && w.jobs.byID[r.st.ID].run == r
}

// errNotTheOwners is readHead's error for a file it does not read.
var errNotTheOwners = errors.New("not read")

// readHead reads at most the first limit bytes of the regular file at
// path, never through a link or from a FIFO (a run writes the file, and
// may put anything in its place), and only one tracker.CheckRunFile
// allows: the watcher reads it as root, and copies it into the record.
func readHead(path string, limit, owner int) ([]byte, error) {
	fd, st, err := durable.OpenRegular(path)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	if err := tracker.CheckRunFile(&st, owner); err != nil {
		return nil, fmt.Errorf("%s: %w: %v", path, errNotTheOwners, err)
	}
	b := make([]byte, limit)
	n, err := unix.Read(fd, b)
	if err != nil {
		return nil, err
	}
	return b[:n], nil
}
