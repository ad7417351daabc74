// Package watcher is tend's daemon. It watches a root's spool with
// fsnotify, takes each request exactly once when its writer is done,
// launches and signals runs, and records every change of every run in the
// tracker. One goroutine owns all of its state; everything else (fsnotify,
// process exits, timers, signals) sends it messages, so every race between
// requests and exits resolves in one order.
package watcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/gofrs/flock"
	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
)

// Config is what a watcher needs to run.
type Config struct {
	Root string
	// Log receives one line per decision: requests taken and rejected, runs
	// started and ended, faults.
	Log io.Writer
	// Settle is how long a request that does not parse must stay unchanged
	// before it is rejected, so a writer that pauses is not cut off.
	// Zero means DefaultSettle.
	Settle time.Duration
	// Stop delivers shutdown requests: the first stops every run (SIGTERM,
	// then SIGKILL after its grace) and returns when all have ended; the
	// second kills what is left at once.
	Stop <-chan os.Signal
}

// DefaultSettle is the default of Config.Settle.
const DefaultSettle = time.Second

// ErrRunning means another watcher holds the root's lock.
var ErrRunning = errors.New("another watcher is already running")

// LockPath and PIDPath return the files that say whether a watcher runs.
func LockPath(root string) string { return filepath.Join(root, "watcher.lock") }
func PIDPath(root string) string  { return filepath.Join(root, "watcher.pid") }

// Probe reports whether a watcher holds root's lock, and the PID it wrote.
// It decides by the lock, not by the PID file. It holds a shared lock for a
// moment, which a starting watcher waits out (see lock).
func Probe(root string) (running bool, pid int, err error) {
	l := flock.New(LockPath(root))
	got, err := l.TryRLock()
	if errors.Is(err, os.ErrNotExist) {
		return false, 0, nil
	}
	if err != nil {
		return false, 0, err
	}
	if got {
		l.Unlock()
		return false, 0, nil
	}
	return true, readPID(root), nil
}

func readPID(root string) int {
	b, _ := os.ReadFile(PIDPath(root))
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// lock takes the root's watcher lock. Clients probing with a shared lock
// hold it only for a moment, so it retries for a while before it decides
// that another watcher runs.
func lock(root string) (*flock.Flock, error) {
	l := flock.New(LockPath(root))
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	got, err := l.TryLockContext(ctx, 5*time.Millisecond)
	if got {
		return l, nil
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return nil, fmt.Errorf("%s: %w", LockPath(root), err)
	}
	return nil, fmt.Errorf("%w on %s (pid %d)", ErrRunning, root, readPID(root))
}

// Run runs a watcher on cfg.Root until a stop signal has ended every run.
// It returns an error if another watcher holds the root, or if the spool
// cannot be watched.
func Run(cfg Config) error {
	if cfg.Settle == 0 {
		cfg.Settle = DefaultSettle
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	w := newWatcher(cfg)
	if err := w.spool.Make(); err != nil {
		return err
	}
	if err := w.store.Make(); err != nil {
		return err
	}
	l, err := lock(cfg.Root)
	if err != nil {
		return err
	}
	defer l.Unlock()
	if err := os.WriteFile(PIDPath(cfg.Root), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return err
	}
	defer os.Remove(PIDPath(cfg.Root))

	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("inotify: %w", err)
	}
	defer fsw.Close()
	// Watch first, then look: a request dropped in between is seen twice,
	// which is harmless, instead of not at all.
	if err := fsw.Add(w.spool.Spool()); err != nil {
		return fmt.Errorf("watch %s: %w", w.spool.Spool(), err)
	}
	w.recoverRuns()
	w.rescan()
	w.log.Printf("watching %s (pid %d)", cfg.Root, os.Getpid())
	return w.loop(fsw)
}

type watcher struct {
	cfg   Config
	log   *log.Logger
	spool spool.Dir
	store *tracker.Store
	hist  *tracker.History

	runs    map[string]*run     // runs with a live process, by ID
	pending map[string]*pending // spool entries not yet taken, by file name
	// afterStart holds cancel requests that wait for a start request of the
	// same ID to be decided.
	afterStart map[string][]string

	do       chan func() // work from timers, run on the loop
	exited   chan *run   // runs whose leader exited
	stopping int         // shutdown signals received
	// draining is true while a re-check of draining groups is scheduled,
	// so that one chain of checks serves them all.
	draining bool
}

func newWatcher(cfg Config) *watcher {
	return &watcher{
		cfg:        cfg,
		log:        log.New(cfg.Log, "", log.LstdFlags|log.Lmicroseconds),
		spool:      spool.Dir{Root: cfg.Root},
		store:      tracker.NewStore(cfg.Root),
		hist:       tracker.OpenHistory(cfg.Root),
		runs:       make(map[string]*run),
		pending:    make(map[string]*pending),
		afterStart: make(map[string][]string),
		do:         make(chan func(), 64),
		exited:     make(chan *run, 64),
	}
}

func (w *watcher) loop(fsw *fsnotify.Watcher) error {
	for {
		if w.stopping > 0 && len(w.runs) == 0 {
			w.log.Printf("stopped: every run has ended")
			return nil
		}
		select {
		case ev, ok := <-fsw.Events:
			if !ok {
				return errors.New("inotify closed")
			}
			if err := w.fsEvent(ev); err != nil {
				return err
			}
		case err, ok := <-fsw.Errors:
			if !ok {
				return errors.New("inotify closed")
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				w.log.Printf("inotify queue overflowed: rescanning the spool")
				w.rescan()
				continue
			}
			w.log.Printf("inotify: %v", err)
		case r := <-w.exited:
			batch := []*run{r}
			for more := true; more; {
				select {
				case r := <-w.exited:
					batch = append(batch, r)
				default:
					more = false
				}
			}
			w.leadersExited(batch)
		case f := <-w.do:
			f()
		case sig := <-w.cfg.Stop:
			w.shutdown(sig)
		}
	}
}

// after runs f on the loop after d.
func (w *watcher) after(d time.Duration, f func()) *time.Timer {
	return time.AfterFunc(d, func() { w.do <- f })
}

func (w *watcher) fsEvent(ev fsnotify.Event) error {
	if ev.Name == w.spool.Spool() && ev.Has(fsnotify.Remove|fsnotify.Rename) {
		return fmt.Errorf("the spool %s was removed", ev.Name)
	}
	if w.stopping > 0 || filepath.Dir(ev.Name) != w.spool.Spool() {
		return nil // requests wait in the spool for the next watcher
	}
	name := filepath.Base(ev.Name)
	if spool.Ignored(name) {
		return nil
	}
	w.pendingFor(name).lastChange = time.Now()
	w.examine(name)
	return nil
}

// rescan examines every entry in the spool: at start, and after the kernel
// dropped events.
func (w *watcher) rescan() {
	d, err := os.Open(w.spool.Spool())
	if err != nil {
		w.log.Printf("rescan: %v", err)
		return
	}
	defer d.Close()
	for {
		names, err := d.Readdirnames(1024)
		for _, name := range names {
			if !spool.Ignored(name) {
				w.pendingFor(name)
				w.examine(name)
			}
		}
		if err != nil {
			return
		}
	}
}

// shutdown stops every run; a second signal kills what is left at once.
func (w *watcher) shutdown(sig os.Signal) {
	w.stopping++
	if w.stopping == 1 {
		w.log.Printf("%v: stopping %d runs (send it again to kill them at once)", sig, len(w.runs))
		for _, r := range w.runs {
			w.stop(r, tracker.Canceled, "the watcher was stopped", r.grace(), "")
		}
		return
	}
	w.log.Printf("%v: killing %d runs", sig, len(w.runs))
	for _, r := range w.runs {
		r.killAt = time.Now()
		w.killGroup(r)
	}
}

// save records a change of st: rev grows, the change is appended to the
// history, then state.json is replaced. History first, so that whoever sees
// a state in state.json finds its event in history.jsonl.
func (w *watcher) save(st *tracker.State) {
	st.Rev++
	if err := w.hist.Append(tracker.EventOf(st, time.Now())); err != nil {
		w.log.Printf("run %s: history: %v", st.ID, err)
	}
	if err := w.store.Write(st); err != nil {
		w.log.Printf("run %s: recording %s: %v", st.ID, st.State, err)
	}
}
