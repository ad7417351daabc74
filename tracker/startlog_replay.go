package tracker

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker/durable"
	"golang.org/x/sys/unix"
)

// ReplayStartLog puts back, for each change in entries (l's pending
// ones, not marked applied), what a power loss took of it: its run's
// directory, its record, a launch's request and its history lines, each
// only if missing or behind; and it takes out of the spool what the loss
// brought back under the name a launch's request was claimed from. Then
// it syncs each run's files, those it found as those it wrote (a watcher
// killed before syncLogged left them unsynced), runs/ and the history,
// and returns what it put back, a line a change. The caller syncs the
// spool, once every directory a request may have been claimed into is (a
// watcher killed between a claim and its flush left others), and only
// then marks the entries applied. Of a run whose history went on since
// (a later line: it ended, or was deleted) only a launch's request is
// put back, if the run is the same. It fails, leaving the entries to the
// next try, if the history cannot be read (it could not tell what is
// missing) or anything cannot be put back: going on without it, a run
// answered accepted would be lost, or recorded without its history.
func ReplayStartLog(s *Store, h *History, d spool.Dir, l *StartLog, entries []LogEntry) ([]string, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	ids := make(map[string]bool, len(entries))
	for _, e := range entries {
		ids[e.ID] = true
	}
	// The whole history, not a tail: an entry stays pending for as long
	// as its syncs fail (a watcher's whole life, while the history
	// rotates), so no byte window (RecentEvents's) nor time (the clock
	// may be stepped) surely reaches back to its lines, and the ID's last
	// deletion before them may be older still (missingEvents). The log
	// keeps no place in the history to start from, and one it kept would
	// not survive a rotation or the loss of the history's unsynced end.
	// This is read only after a crash or a power loss left entries
	// pending, once, as the watcher starts.
	events, err := EventsOf(string(s.root), ids)
	if err != nil {
		return nil, fmt.Errorf("start log: reading the history of the %d runs it holds: %w", len(ids), err)
	}
	var done []string
	for _, e := range entries {
		r, err := replayEntry(s, h, d, e, events[e.ID])
		if err != nil {
			return done, fmt.Errorf("start log: run %s: putting back its change: %w", e.ID, err)
		}
		if len(r.put) > 0 {
			done = append(done, fmt.Sprintf("run %s: its change to %s (rev %d) was in %s and not all in its files (a power loss): put back %s", e.ID, r.state, r.rev, l.path, strings.Join(r.put, ", ")))
		}
	}
	// Each file found there is synced, not only those put back: a
	// watcher killed before it synced a launch's files (syncLogged)
	// leaves them in the page cache, and the mark, written later without
	// a flush, may reach the disk before them. So are the history and its
	// name, whatever this replay changed.
	errs := []error{durable.FlushRunsDir.SyncDir(s.Dir()), h.Sync(), durable.FlushHistoryDir.SyncDir(string(s.root))}
	if err := errors.Join(errs...); err != nil {
		return done, fmt.Errorf("start log: syncing what it put back: %w", err)
	}
	return done, nil
}

// launchPutBack is what replayEntry put back of a change.
type launchPutBack struct {
	state     StateName // the record's, and its rev
	rev       int64
	put       []string // in words
	unspooled bool     // from the spool
}

// replayEntry puts back what is missing of change e (see
// ReplayStartLog), given its run's events in the history.
func replayEntry(s *Store, h *History, d spool.Dir, e LogEntry, events []Event) (r launchPutBack, err error) {
	st, err := s.ParseLogged(e.ID, e.Record)
	if err != nil {
		return r, err
	}
	r.state, r.rev = st.State, st.Rev
	missing, later := missingEvents(e.Events, events)
	if later {
		// It went on: what it is now was synced by what made it go on,
		// but for a launch's request (a flush that synced its later lines
		// synced its directory, not the request's content) and, if the
		// watcher that logged it was killed before syncLogged, its files.
		if cur, err := s.Read(e.ID); err == nil && cur.CreatedAt.Equal(st.CreatedAt) {
			if e.Request != nil {
				if err := restoreRequest(s, e, st, &r); err != nil {
					return r, err
				}
			}
			return r, syncLaunch(s, e.ID)
		}
		return r, nil
	}
	if err := s.MakeRunDir(e.ID); err == nil {
		if err := giveRunDir(s.RunDir(e.ID), st.OwnerUID); err != nil {
			return r, err
		}
		r.put = append(r.put, "its directory")
	} else if !errors.Is(err, os.ErrExist) {
		return r, err
	}
	cur, err := s.Read(e.ID)
	switch {
	case err == nil && !cur.CreatedAt.Equal(st.CreatedAt):
		return r, fmt.Errorf("its record is another run's (made %s)", cur.CreatedAt.Format(time.RFC3339Nano))
	case err == nil && cur.Rev >= st.Rev:
	default:
		if err := s.RestoreLogged(st, e.Record); err != nil {
			return r, err
		}
		r.put = append(r.put, "its record")
	}
	if e.Request != nil {
		if err := restoreRequest(s, e, st, &r); err != nil {
			return r, err
		}
	}
	if len(missing) > 0 {
		// After a torn end (one this very power loss left, which tend fsck
		// --repair moves aside after the replay) the lines wait in the
		// pending changes, on disk, synced below as the history is, and
		// are appended first once the end is whole.
		if err := h.Append(missing...); err != nil && !errors.Is(err, ErrTornEnd) {
			return r, err
		}
		r.put = append(r.put, fmt.Sprintf("%d history lines", len(missing)))
	}
	if err := syncLaunch(s, e.ID); err != nil {
		return r, err
	}
	if e.Request == nil {
		return r, nil
	}
	if r.unspooled, err = unspool(s, d, e, st.OwnerUID); err != nil {
		return r, err
	}
	if r.unspooled {
		r.put = append(r.put, "its claim (the request was back in the spool)")
	}
	return r, nil
}

// giveRunDir gives dir, a run's directory just made, to owner, its run's,
// where root makes it (a watcher as root, for a member's run whose end was
// logged; sudo tend fsck --repair in a teammate's root): a directory of
// root's would shut its owner out of their own run.
func giveRunDir(dir string, owner int) error {
	if RunPerm(owner).Owner == 0 {
		return nil
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	if err := unix.Fchown(fd, owner, -1); err != nil {
		return &os.PathError{Op: "chown", Path: dir, Err: err}
	}
	return nil
}

// restoreRequest writes the request of launch e, of run st, in place of
// runs/<id>/request if that is missing or not what was claimed.
func restoreRequest(s *Store, e LogEntry, st *State, r *launchPutBack) error {
	path := s.Run(e.ID).Request()
	if kept, _, err := durable.ReadRegular(path, spool.MaxBody); err == nil && bytes.Equal(kept, e.Request) {
		return nil
	}
	if err := durable.Replace(path, e.Request, RunPerm(st.OwnerUID), durable.Durable{File: durable.FlushClaimed, Dir: durable.FlushRecordDir}); err != nil {
		return err
	}
	r.put = append(r.put, "its request")
	return nil
}

// syncLaunch makes durable run id's record, its request and its
// directory, as they are: what syncLogged would have.
func syncLaunch(s *Store, id string) error {
	path := s.Run(id).Request()
	fd, st, err := durable.OpenRegular(path)
	if err == nil && st.Size <= spool.MaxBody {
		err = durable.FlushClaimed.Fdatasync(fd)
	}
	if fd >= 0 {
		unix.Close(fd)
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("run %s: its request: %w", id, err)
	}
	return s.syncRecord(id)
}

// missingEvents returns the events of logged that history, a run's
// events in the order of the history's lines, lacks; later is set if
// history has a later event of the run than the last logged (it went on
// since, or it is a run made anew with its ID). Later is told by the
// line's place after the launch's own, found there, not by its time: the
// clock may have been stepped back in between, and a deleted run must
// not come back. Where none of the launch's lines is there (then no
// later line can be, but a rotation's), it is a line of a higher
// revision after the ID's last deletion: those before are of a run the
// ID named before, deleted before it was used again.
func missingEvents(logged, history []Event) (missing []Event, later bool) {
	if len(logged) == 0 {
		return nil, false
	}
	isLogged := func(h Event) bool {
		return slices.ContainsFunc(logged, func(ev Event) bool { return h.Rev == ev.Rev && h.Time.Equal(ev.Time) })
	}
	last, deleted := -1, -1 // the launch's last line in history; the ID's last deletion
	for i, h := range history {
		if isLogged(h) {
			last = i
		}
		if h.State == Deleted {
			deleted = i
		}
	}
	for i, ev := range history {
		switch {
		case last >= 0 && i > last && !isLogged(ev):
			return nil, true
		case last < 0 && i > deleted && ev.Rev > logged[len(logged)-1].Rev:
			return nil, true
		}
	}
	for _, ev := range logged {
		if !slices.ContainsFunc(history, func(h Event) bool { return h.Rev == ev.Rev && h.Time.Equal(ev.Time) }) {
			missing = append(missing, ev)
		}
	}
	return missing, false
}

// unspool takes out of the spool what a power loss brought back under
// the name launch e's request was claimed from, its owner's: its claim's
// removal was lost, and the file is its request, or what the loss left
// of it (see launchedFrom), which is claimed and removed; or another
// version written since, which is moved to rejected/ with its reason,
// unanswered: the start's answer, accepted, stands, where the watcher,
// examining it, would answer it rejected over that. What a replay cut
// short left claimed (.unspooled.tmp) is removed or rejected first: a
// claim never replaces a file, and every replay after would stop on it.
// Another user's file is left to the watcher, which answers it in that
// user's directory. It reports whether it took one.
func unspool(s *Store, d spool.Dir, e LogEntry, owner int) (bool, error) {
	if e.Name == "" {
		return false, nil
	}
	taken := filepath.Join(s.RunDir(e.ID), ".unspooled.tmp")
	// One a replay cut short left: taken from the spool, as below.
	if kept, _, err := durable.ReadRegular(taken, spool.MaxBody); err == nil && launchedFrom(kept, e.Request) {
		if err := os.Remove(taken); err != nil {
			return false, err
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		if _, err := d.RejectFrom(taken, e.Name, secondStart(e.ID)); err != nil {
			return false, err
		}
	}
	var lst unix.Stat_t
	if err := unix.Lstat(filepath.Join(d.Spool(), e.Name), &lst); err != nil || int(lst.Uid) != owner {
		return false, nil // none, or another's: the watcher examines it
	}
	f, err := d.Read(e.Name)
	if err != nil || f.UID != owner || !launchedFrom(f.Body, e.Request) {
		_, err := d.Reject(e.Name, secondStart(e.ID))
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil // gone meanwhile
		}
		return err == nil, err
	}
	claimed, err := d.Claim(f, taken)
	if err != nil {
		return false, err
	}
	if claimed.UID == owner && launchedFrom(claimed.Body, e.Request) {
		return true, os.Remove(taken)
	}
	_, err = d.RejectFrom(taken, e.Name, secondStart(e.ID))
	return true, err
}

// launchedFrom reports whether body, found in the spool under the name a
// launch's request was claimed from, is that request: the same bytes, or
// a part of them from its start (none, too), as the power loss that
// brought its name back left its content, which its writer need not
// have synced. Another version is rejected as a second start; this one,
// so rejected, would overwrite the answer that accepted it.
func launchedFrom(body, request []byte) bool {
	return bytes.HasPrefix(request, body)
}

// secondStart is the reason a version of run id's start request, written
// over the one it was started from, is rejected as a watcher starts.
func secondStart(id string) string {
	return fmt.Sprintf("run %s already exists: run ids are used once (this was under the name its start was claimed from, as a watcher started after a power loss; the start's answer stands)", id)
}
