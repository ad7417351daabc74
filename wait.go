package tend

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/tendhq/tend/procfs"
	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
	"github.com/tendhq/tend/tracker/durable"
	"golang.org/x/sys/unix"
)

// Most waits end within a few milliseconds (a start is answered in about
// two), and an inotify instance costs more than that to give back: closing
// one waits for an SRCU grace period in the kernel (the marks' reaper),
// 8-20 ms measured, and a process's exit waits for that close. So a wait
// first checks on a timer, and sets up inotify only if it lasts longer.
//
// A wait for an answer checks more often (answerEvery): its check is an
// open that fails until the answer is there, a few microseconds, and a
// start is answered in a few milliseconds, of which a check every
// millisecond would add half a millisecond on average.
const (
	spinFor      = 20 * time.Millisecond
	spinEvery    = time.Millisecond
	answerEvery  = 250 * time.Microsecond
	recheckEvery = time.Second
)

// A waiter waits for conditions on files (watchUntil). Its zero value
// waits with the kernel's inotify; a Client has one.
type waiter struct {
	// newInotify, if not nil, replaces fsnotify.NewWatcher: a test puts
	// the kernel's refusal in its place.
	newInotify func() (*fsnotify.Watcher, error)
}

// inotify returns a new inotify instance (fsnotify.NewWatcher, or the
// waiter's own).
func (w waiter) inotify() (*fsnotify.Watcher, error) {
	if w.newInotify != nil {
		return w.newInotify()
	}
	return fsnotify.NewWatcher()
}

// watchUntil calls check until it reports done or fails, or ctx ends
// (then it returns ctx.Err()): each time every has passed, for the first
// spinFor, then whenever something changes in dir, and once every
// recheckEvery. Past the first checks it blocks on inotify, not on a
// timer; the regular check notices a watcher that died.
func (w waiter) watchUntil(ctx context.Context, dir string, every time.Duration, check func() (done bool, err error)) error {
	return w.watchUntilIn(ctx, dir, "", every, check)
}

// watchUntilIn is watchUntil, watching also dir's subdirectory sub (if
// not "") once it is there: the directory of a user's answers, which the
// watcher makes with the first (spool.Dir.OutcomesOf).
func (w waiter) watchUntilIn(ctx context.Context, dir, sub string, every time.Duration, check func() (done bool, err error)) error {
	if done, err := spin(ctx, every, check); done || err != nil {
		return err
	}
	fsw, err := w.inotify()
	if inotifyExhausted(err) {
		return poll(ctx, check)
	}
	if err != nil {
		return fmt.Errorf("inotify: %w", procfs.InotifyError(err))
	}
	defer fsw.Close()
	if err := fsw.Add(dir); inotifyExhausted(err) {
		return poll(ctx, check)
	} else if err != nil {
		return fmt.Errorf("watch %s: %w", dir, procfs.InotifyError(err))
	}
	tick := time.NewTicker(recheckEvery)
	defer tick.Stop()
	for {
		if sub != "" && fsw.Add(sub) == nil {
			sub = "" // watched from now on
		}
		// Check after the watch is in place, so no change falls in between.
		if done, err := check(); done || err != nil {
			return err
		}
		select {
		case <-fsw.Events:
		case err := <-fsw.Errors:
			if !errors.Is(err, fsnotify.ErrEventOverflow) {
				return err
			}
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// inotifyExhausted reports whether err is the kernel's refusal of an
// inotify instance or watch for want of one: a per-user limit
// (fs.inotify.max_user_instances is 128 by default, so 128 waits of one
// user hold them all), the process's open files, or memory. Such a wait
// polls instead of failing: the run it waits for is not at fault, and a
// script that waits on many runs at once must not read a failure of its
// own into one of them.
func inotifyExhausted(err error) bool {
	return errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE) ||
		errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.ENOMEM)
}

// pollEvery is how often a wait that could not have inotify checks.
const pollEvery = 50 * time.Millisecond

// poll calls check every pollEvery until it reports done or fails, or
// ctx ends (then it returns ctx.Err()).
func poll(ctx context.Context, check func() (bool, error)) error {
	for {
		if done, err := check(); done || err != nil {
			return err
		}
		if err := pause(ctx, pollEvery); err != nil {
			return err
		}
	}
}

// spin calls check each time every has passed, for spinFor, until it
// reports done or fails, or ctx ends.
func spin(ctx context.Context, every time.Duration, check func() (bool, error)) (bool, error) {
	for end := time.Now().Add(spinFor); time.Now().Before(end); {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		if done, err := check(); done || err != nil {
			return done, err
		}
		if err := pause(ctx, every); err != nil {
			return false, err
		}
	}
	return false, nil
}

// pause waits d, or until ctx ends. Less than a millisecond is slept by
// the thread: a Go timer wakes a process that has nothing else to do no
// sooner than a millisecond later (its poller waits in whole
// milliseconds: 1.1 ms measured for a timer of 250 µs).
func pause(ctx context.Context, d time.Duration) error {
	if d < time.Millisecond {
		ts := unix.NsecToTimespec(d.Nanoseconds())
		unix.Nanosleep(&ts, nil)
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// watcherCheck tells a client waiting for an answer whether no watcher
// runs on its root to give one, asking no more often than once every
// probeEvery: a probe is six system calls, and the answer's own check,
// made every answerEvery, is one.
type watcherCheck struct {
	root string
	next time.Time
}

// checkWatcher returns the watcherCheck of c, which has just submitted a
// request. If c starts watchers, it made sure of one before it submitted
// (autoStart): the first probe is due after probeEvery, and most answers
// come sooner. If not, it is due at once: a request submitted for a
// watcher that is not there is said so without waiting.
func (c *Client) checkWatcher() watcherCheck {
	w := watcherCheck{root: c.root}
	if c.watch != nil {
		w.next = time.Now().Add(probeEvery)
	}
	return w
}

const probeEvery = 5 * time.Millisecond

// gone reports whether no watcher runs on the root, as last probed.
func (w *watcherCheck) gone() bool {
	now := time.Now()
	if now.Before(w.next) {
		return false
	}
	w.next = now.Add(probeEvery)
	running, _, err := tracker.ProbeWatcher(w.root)
	return err == nil && !running
}

// Wait blocks until run id has ended, and returns its record. If ctx ends
// first, it returns the record as last read (nil if the run had none yet)
// with ctx's error; the run goes on.
func (c *Client) Wait(ctx context.Context, id string) (*Record, error) {
	return c.WaitFor(ctx, id, Ended)
}

// WaitFor blocks until run id's record satisfies until (Ended, Ready, or a
// condition of the caller's, which is also called with every record read
// on the way), and returns it. While the run's start request waits in the
// spool (no watcher yet, or one still busy), it waits for the request to
// be taken: a rejected one is an error wrapping ErrRefused. A watcher is
// started, if the client starts them, unless the record satisfies until
// already. If ctx ends first, WaitFor returns the record as last read
// (nil if the run had none yet) with ctx's error. The record returned is
// durable: a power loss after WaitFor returns does not take it back.
func (c *Client) WaitFor(ctx context.Context, id string, until func(*Record) bool) (*Record, error) {
	if err := CheckID(id); err != nil {
		return nil, err
	}
	first, ferr := c.read(id)
	if errors.Is(ferr, ErrRefused) {
		first, ferr = c.awaitHandOver(ctx, id)
	}
	if ferr == nil && until(first) {
		return first, c.seen(id) // no watcher needed, so none is started
	}
	if errors.Is(ferr, ErrRefused) {
		return nil, ferr // another user's: never readable, however long
	}
	var st *Record // as last read: returned if ctx ends first
	if ferr == nil {
		st = first
	}
	if err := c.autoStart(ctx); err != nil {
		return st, err
	}
	unwatched := c.unwatchedWait(id)
	// A queued run's request stays in the spool; only one whose run has
	// no record yet is waited for there.
	if ferr != nil && c.startWaiting(id) {
		if err := c.watchUntil(ctx, c.dir.Spool(), spinEvery, func() (bool, error) {
			unwatched()
			return !c.startWaiting(id), nil
		}); err != nil {
			return nil, err
		}
	}
	if _, err := os.Stat(c.store.RunDir(id)); err != nil {
		if outcome, detail, oerr := c.dir.ReadOutcome(spool.Name{ID: id, Verb: spool.VerbStart, Owner: c.answeredAs()}); oerr == nil && outcome == spool.Rejected {
			return nil, &OutcomeError{Outcome{ID: id, Verb: spool.VerbStart, Outcome: outcome, Detail: detail}}
		}
		return nil, c.notFound(id)
	}
	err := c.watchUntil(ctx, c.store.RunDir(id), spinEvery, func() (bool, error) {
		read, err := c.read(id)
		if errors.Is(err, ErrRefused) && st == nil {
			read, err = c.awaitHandOver(ctx, id) // made as root's, not handed over yet
		}
		if errors.Is(err, tracker.ErrNotFound) && st == nil && ferr != nil {
			if _, derr := os.Stat(c.store.RunDir(id)); derr == nil {
				return false, nil // claimed, its first state not written yet
			}
		}
		if errors.Is(err, tracker.ErrNotFound) {
			// Its record was there, or its directory is gone: deleted
			// (tend rm, the retention) as it ended, or removed by hand,
			// the run is not waited for.
			if _, _, deleted := lastDeletion(c.root, id); deleted {
				return false, c.notFound(id)
			}
			return false, errorf(ErrNotFound, "run %s: its record is gone from %s (removed by hand?)", id, c.store.RunDir(id))
		}
		if err != nil {
			return false, err
		}
		st = read
		if until(st) {
			return true, nil
		}
		unwatched()
		return false, nil
	})
	if err == nil {
		err = c.seen(id)
	}
	return st, err
}

// handOverWait is how long a wait gives a run directory that root owns,
// and this client's user may not read, to become theirs: the watcher
// makes every run's directory as root, and hands a member's over just
// before its run starts (or once it is queued), so a wait on a run whose
// request a member just dropped may find it root's for a moment. A run
// of root's own stays root's.
const handOverWait = 2 * time.Second

// awaitHandOver reads run id's record again until it is readable, or
// its directory belongs to another user than root, or handOverWait has
// passed: then the read's error (ErrRefused) is another user's run.
func (c *Client) awaitHandOver(ctx context.Context, id string) (*Record, error) {
	for end := time.Now().Add(handOverWait); ; {
		st, err := c.read(id)
		var fi unix.Stat_t
		if !errors.Is(err, ErrRefused) || time.Now().After(end) ||
			unix.Lstat(c.store.RunDir(id), &fi) != nil || fi.Uid != 0 {
			return st, err
		}
		if err := pause(ctx, 10*time.Millisecond); err != nil {
			return nil, err
		}
	}
}

// unwatchedWait returns, for a wait on run id by a client that starts no
// watcher, a check that tells the client's Late, once, that neither a
// watcher nor a keeper (which would start the next) runs on the root:
// the wait goes on, for one to start, as a script may start it later,
// but not in silence. A client that starts watchers made sure of one.
func (c *Client) unwatchedWait(id string) func() {
	if c.watch != nil || c.late == nil {
		return func() {}
	}
	w, said := c.checkWatcher(), false
	return func() {
		if said || !w.gone() {
			return
		}
		if keeper, _, err := tracker.ProbeKeeper(c.root); err == nil && keeper {
			return
		}
		said = true
		c.late(fmt.Sprintf("no watcher is running on %s: run %s does not move on until one starts (run: tend up); waiting for it", c.root, id))
	}
}

// seen makes run id's record, as the client just read it, durable before
// the client acts on it: the watcher syncs a record's directory just after
// it renames the record into place, and a record read in between would
// not survive a power loss.
func (c *Client) seen(id string) error {
	if err := durable.FlushSeen.SyncDir(c.store.RunDir(id)); err != nil {
		return fmt.Errorf("run %s: %w", id, err)
	}
	return nil
}

// startWaiting reports whether a start request for id waits in the spool.
func (c *Client) startWaiting(id string) bool {
	if spool.ValidID(id) != nil {
		return false
	}
	_, err := os.Lstat(c.spoolPath(spool.Name{ID: id, Verb: spool.VerbStart}))
	return err == nil
}

func (c *Client) spoolPath(n spool.Name) string {
	return filepath.Join(c.dir.Spool(), n.String())
}

// notFound is the error for a run id that has no record: it says whether
// its start request waits in the spool, or whether a run of id was
// deleted (by tend rm, or by the retention, which a script that waits
// long after it started a run may not expect), and how that run ended.
func (c *Client) notFound(id string) error {
	if c.startWaiting(id) {
		return errorf(ErrNotFound, "run %s has not started yet: its request waits in the spool", id)
	}
	if del, end, ok := lastDeletion(c.root, id); ok {
		how := ""
		if end != nil {
			how = ", after it ended " + string(end.State)
			switch {
			case end.ExitCode != nil:
				how += fmt.Sprintf(" (exit %d)", *end.ExitCode)
			case end.Signal != "":
				how += " (" + end.Signal + ")"
			}
		}
		err := &DeletedError{ID: id, Deleted: del, msg: fmt.Sprintf("run %s was deleted at %s (%s)%s: its record is gone; tend history %s shows what it did",
			id, del.Time.Local().Format(time.RFC3339), del.Reason, how, id)}
		if end != nil && tracker.Final(end.State) {
			err.Ended = &Record{ID: id, State: end.State, Session: end.Session, PID: end.PID,
				ExitCode: end.ExitCode, Signal: end.Signal, Reason: end.Reason, EndedAt: end.EndedAt}
		}
		return err
	}
	return errorf(ErrNotFound, "no run %q in %s", id, c.root)
}

// DeletedError is the error for a run that has no record because it was
// deleted (by tend rm, or by the retention) since it ended: the history
// still says how it ended, which a wait that comes late exits with (a
// script's "tend wait build && deploy" must not read "deleted" as either
// success or a typo). It wraps ErrNotFound.
type DeletedError struct {
	// ID is the run's ID.
	ID string
	// Deleted is the history's line of the deletion.
	Deleted tracker.Event
	// Ended is the run's record as the history's last line before the
	// deletion says it ended: its state, PID, exit code or signal and
	// reason, nothing else. It is nil if the history's newest two files
	// do not have that line.
	Ended *Record
	msg   string
}

func (e *DeletedError) Error() string { return e.msg }

// Unwrap returns ErrNotFound: the run has no record.
func (e *DeletedError) Unwrap() error { return ErrNotFound }

// lastDeletion returns the event that deleted the last run of id, and
// that run's last event before it (nil if the history has none), if the
// newest history file that names id says it was deleted since it was
// last used. It reads only the lines that name id, of the newest two
// files (a root's history may be large, and this is an error's path:
// a typo must not read every rotated file), a line at a time (each file
// may be 64 MiB, or more by hand: read whole, a typo took that much
// memory), and says nothing of a history it cannot read.
func lastDeletion(root, id string) (del tracker.Event, end *tracker.Event, ok bool) {
	files := tracker.HistoryFiles(root)
	for i := len(files) - 1; i >= 0 && i >= len(files)-2; i-- {
		var last, before *tracker.Event
		err := tracker.ScanRunHistoryFile(files[i], id, func(ev tracker.Event) {
			if last != nil && last.State != tracker.Deleted {
				before = last
			} else if last != nil {
				before = nil
			}
			last = &ev
		})
		if err != nil {
			continue
		}
		if last != nil {
			return *last, before, last.State == tracker.Deleted
		}
	}
	return tracker.Event{}, nil, false
}
