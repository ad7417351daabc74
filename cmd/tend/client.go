package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
	"github.com/tendhq/tend/watcher"
	"golang.org/x/sys/unix"
)

// waitUntil calls check until it reports done or fails: every
// spinEvery for the first spinFor, then whenever something changes in
// dir, and once every recheckEvery. Past the first checks it blocks on
// inotify, not on a timer; the regular check notices a watcher that died.
// It returns exitInterrupted on Ctrl-C or SIGTERM.
func waitUntil(dir string, check func() (done bool, err error)) error {
	return waitUntilBefore(dir, time.Time{}, check)
}

// errTimedOut is what waitUntilBefore returns when its deadline comes
// before check is done.
var errTimedOut = errors.New("timed out")

// waitUntilBefore is waitUntil that gives up at deadline (none if it is
// zero) with errTimedOut.
func waitUntilBefore(dir string, deadline time.Time, check func() (done bool, err error)) error {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	var expired <-chan time.Time
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		expired = t.C
	}
	if done, err := spin(sigs, expired, check); done || err != nil {
		return err
	}
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("inotify: %w", watcher.InotifyError(err))
	}
	defer fsw.Close()
	if err := fsw.Add(dir); err != nil {
		return fmt.Errorf("watch %s: %w", dir, watcher.InotifyError(err))
	}
	tick := time.NewTicker(recheckEvery)
	defer tick.Stop()
	for {
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
		case <-expired:
			return errTimedOut
		case <-sigs:
			return exitf(exitInterrupted, "interrupted")
		}
	}
}

// Most waits end within a few milliseconds (a start is answered in about
// two), and an inotify instance costs more than that to give back: closing
// one waits for an SRCU grace period in the kernel (the marks' reaper),
// 8-20 ms measured, and a process's exit waits for that close. So a wait
// first checks on a timer, and sets up inotify only if it lasts longer.
const (
	spinFor      = 20 * time.Millisecond
	spinEvery    = time.Millisecond
	recheckEvery = time.Second
)

// spin calls check every spinEvery for spinFor, until it reports done or
// fails.
func spin(sigs <-chan os.Signal, expired <-chan time.Time, check func() (bool, error)) (bool, error) {
	t := time.NewTimer(spinEvery)
	defer t.Stop()
	for end := time.Now().Add(spinFor); time.Now().Before(end); t.Reset(spinEvery) {
		if done, err := check(); done || err != nil {
			return done, err
		}
		select {
		case <-t.C:
		case <-expired:
			return false, errTimedOut
		case <-sigs:
			return false, exitf(exitInterrupted, "interrupted")
		}
	}
	return false, nil
}

// submit writes a request into the spool and waits for its outcome. With
// no watcher running it leaves the request there and says so.
func submit(e *env, n spool.Name, body []byte, replace bool) (outcome, detail string, err error) {
	answers, err := submitAll(e, []request{{n, body}}, replace)
	if err != nil {
		return "", "", err
	}
	return answers[0].outcome, answers[0].detail, nil
}

// request is a request to submit, and answer what became of it.
type request struct {
	name spool.Name
	body []byte
}

type answer struct {
	outcome, detail string
}

// submitAll writes every request into the spool, then waits for all of
// their outcomes, so that requests that each take a while (cancels wait
// for their run to end) are carried out side by side.
func submitAll(e *env, reqs []request, replace bool) ([]answer, error) {
	d := spool.Dir{Root: e.root}
	if err := d.Make(); err != nil {
		return nil, err
	}
	if err := e.autoStart(); err != nil {
		return nil, err
	}
	for i := range reqs {
		if reqs[i].name.Verb != spool.VerbStart {
			// A name of its own: clients acting on one run at once neither
			// replace each other's requests nor read each other's answers.
			reqs[i].name.Tag = newTag()
		}
	}
	// An outcome from an earlier request of the same name must not be
	// taken for this one's: it is removed, or where this user may not (a
	// shared root's outcomes/ is the watcher's), known by its inode.
	stale := make(map[spool.Name]uint64)
	for _, r := range reqs {
		if err := os.Remove(d.OutcomePath(r.name)); errors.Is(err, os.ErrPermission) {
			var st unix.Stat_t
			if unix.Stat(d.OutcomePath(r.name), &st) == nil {
				stale[r.name] = st.Ino
			}
		} else if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("cannot submit %s: %w", r.name, err)
		}
		if err := d.Submit(r.name, r.body, replace); err != nil {
			return nil, fmt.Errorf("cannot submit %s: %w", r.name, err)
		}
	}
	answers := make([]answer, len(reqs))
	done := 0
	err := waitUntil(d.Outcomes(), func() (bool, error) {
		for done < len(reqs) {
			if ino, ok := stale[reqs[done].name]; ok {
				var st unix.Stat_t
				if unix.Stat(d.OutcomePath(reqs[done].name), &st) != nil || st.Ino == ino {
					break // replaced atomically: a new answer is a new inode
				}
			}
			outcome, detail, err := d.ReadOutcome(reqs[done].name)
			if err != nil {
				break
			}
			answers[done] = answer{outcome, detail}
			if reqs[done].name.Tag != "" {
				os.Remove(d.OutcomePath(reqs[done].name)) // read: nobody else needs it
			}
			done++
		}
		if done == len(reqs) {
			return true, nil
		}
		if running, _, perr := watcher.Probe(e.root); perr == nil && !running {
			return false, exitf(exitNoWatcher, "no watcher is running on %s: the request waits in %s/%s until one starts (run: tend up)",
				e.root, d.Spool(), reqs[done].name)
		}
		return false, nil
	})
	return answers, err
}

// readRun returns run id's state, or a not-found error for people.
func readRun(e *env, id string) (*tracker.State, error) {
	st, err := tracker.NewStore(e.root).Read(id)
	if errors.Is(err, tracker.ErrNotFound) {
		if startWaiting(e, id) {
			return nil, exitf(exitNotFound, "run %s has not started yet: its request waits in the spool", id)
		}
		return nil, exitf(exitNotFound, "no run %q in %s", id, e.root)
	}
	return st, err
}

// startWaiting reports whether a start request for id waits in the spool.
func startWaiting(e *env, id string) bool {
	if spool.ValidID(id) != nil {
		return false
	}
	n := spool.Name{ID: id, Verb: spool.VerbStart}
	_, err := os.Lstat(filepath.Join(spool.Dir{Root: e.root}.Spool(), n.String()))
	return err == nil
}

// waitRun blocks until run id's record satisfies until, and returns it.
// While its start request waits in the spool (no watcher yet, or one still
// busy), it waits for the request to be taken or rejected. At deadline
// (none if zero) it gives up with errTimedOut, and returns the record as
// it last read it (nil if the run had none yet).
func waitRun(e *env, id string, deadline time.Time, until func(*tracker.State) bool) (*tracker.State, error) {
	d := spool.Dir{Root: e.root}
	store := tracker.NewStore(e.root)
	if st, err := store.Read(id); err == nil && until(st) {
		return st, seen(store, id) // no watcher needed, so none is started
	}
	if err := e.autoStart(); err != nil {
		return nil, err
	}
	if startWaiting(e, id) {
		if err := waitUntilBefore(d.Spool(), deadline, func() (bool, error) { return !startWaiting(e, id), nil }); err != nil {
			return nil, err
		}
	}
	if _, err := os.Stat(store.RunDir(id)); err != nil {
		if outcome, detail, oerr := d.ReadOutcome(spool.Name{ID: id, Verb: spool.VerbStart}); oerr == nil && outcome == spool.Rejected {
			return nil, exitf(exitRefused, "run %s was rejected: %s", id, detail)
		}
		return nil, exitf(exitNotFound, "no run %q in %s", id, e.root)
	}
	var st *tracker.State
	err := waitUntilBefore(store.RunDir(id), deadline, func() (bool, error) {
		read, err := store.Read(id)
		if errors.Is(err, tracker.ErrNotFound) {
			return false, nil // claimed, its first state not written yet
		}
		if err != nil {
			return false, err
		}
		st = read
		return until(st), nil
	})
	if err == nil {
		err = seen(store, id)
	}
	return st, err
}

// seen makes run id's record, as the client just read it, durable before
// the client acts on it: the watcher syncs a record's directory just after
// it renames the record into place, and a record read in between would
// not survive a power loss.
func seen(store *tracker.Store, id string) error {
	if err := spool.FlushSeen.SyncDir(store.RunDir(id)); err != nil {
		return fmt.Errorf("run %s: %w", id, err)
	}
	return nil
}

// runExitCode is the exit code a shell would report for the run: its own
// code, 128+N if signal N killed it, 127 if it could not start.
func runExitCode(st *tracker.State) int {
	switch {
	case st.ExitCode != nil:
		return *st.ExitCode
	case st.Signal != "":
		if sig := unix.SignalNum(st.Signal); sig > 0 {
			return 128 + int(sig)
		}
	case st.PID == 0:
		return 127
	}
	return exitFailed
}

// newTag returns a random request tag.
func newTag() string {
	var b [6]byte
	rand.Read(b[:])
	return "c" + hex.EncodeToString(b[:])
}
