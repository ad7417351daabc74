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
	"io/fs"
	"log"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/gofrs/flock"
	"github.com/tendhq/tend/procfs"
	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
	"github.com/tendhq/tend/tracker/durable"
	"github.com/tendhq/tend/tracker/layout"
	"github.com/tendhq/tend/watcher/cluster"
	"github.com/tendhq/tend/watcher/config"
	"golang.org/x/sys/unix"
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
	// Stop delivers shutdown requests. SIGTERM or SIGINT stops every run
	// (SIGTERM, then SIGKILL after its grace) and returns when all have
	// ended; a second one kills what is left at once. SIGUSR1 returns at
	// once and leaves the runs running, for the keeper to keep and the next
	// watcher to adopt.
	Stop <-chan os.Signal
	// Ready, if set, gets one line and is closed once the watcher has
	// recovered the runs of earlier watchers and takes requests.
	Ready *os.File
	// Version is written to watcher.json, for "tend status".
	Version string
	// Settings are the watcher's own settings; ROOT/config.json may
	// change them, at start and whenever it changes.
	Settings config.Settings
	// BecomeKeeper, if set, is the command line (run as /proc/self/exe)
	// that turns this process into a keeper, should its own keeper die:
	// the runs are this process's children, so only this PID can keep them.
	BecomeKeeper []string
	// NetCheck, if set, is the command line (run as /proc/self/exe) of a
	// tcp or http health check made as another user than the watcher's,
	// followed by --tcp ADDR or --http URL and --timeout D: it prints the
	// check's detail, and exits 0 if it passed (see CheckNetwork). Without
	// it, such checks are made by the watcher itself.
	NetCheck []string
	// ForkProcs, if above GOMAXPROCS, is GOMAXPROCS while the watcher
	// forks: a fork holds its thread's P until the child has exec'd, and
	// a watcher on one P does nothing else meanwhile.
	ForkProcs int
	// Held are the processes on which the watcher's keeper holds pidfds
	// (KeeperConfig.Held), each passed on by it as the file descriptor
	// named: the watcher adopts their runs through them (see
	// openProcess).
	Held []Held
	// CrashAt is for tests of crash safety: the steps (see crash) at
	// which a watcher kills itself with SIGKILL, each the first time a
	// watcher on the root reaches it.
	CrashAt []string
	// FailSyncfs is for tests of a disk whose write-back fails: every
	// syncfs(2) of the root's file system fails with EIO.
	FailSyncfs bool
	// RenameNewAnywhere is for the power-loss trial: a run's first record
	// is renamed in before its flush on any file system, not only on one
	// that orders a new file's data before its name (see
	// tracker.Store.SetRenameNew), so that a cut can leave it torn.
	RenameNewAnywhere bool
	// Boot is the machine's boot ID, recorded with every process the
	// watcher starts; "" reads it (procfs.BootID). The power-loss trial
	// gives each power cut's next watcher a boot of its own, as a
	// restarted machine has.
	Boot string
	// Engine runs the runs that go to a cluster (see jobs.go); nil:
	// Slurm, through its commands in the PATH.
	Engine cluster.Engine
	// processes, for the race tests, replaces the system's (see
	// processes); its zero value is the system's.
	processes processes
	// claiming, for the race tests, is called with the spool name of a
	// queued run's request once startQueued has read it, just before it
	// claims it: a test replaces the file there, as a writer may at that
	// moment. Nil calls nothing.
	claiming func(name string)
	// atStep, for the tests of cuts, is called at each step a watcher
	// may crash at (see crash), before it would. Nil calls nothing.
	atStep func(step string)
}

// DefaultSettle is the default of Config.Settle.
const DefaultSettle = time.Second

// ErrRunning means another watcher holds the root's lock.
var ErrRunning = errors.New("another watcher is already running")

// newLock returns the flock on the lock file at path, made if it is
// missing, and never opened through a link. It is the watcher's user's
// alone (0600): anyone who may open a lock file may hold it, and so keep
// the next watcher from starting. Other users' clients probe for a
// watcher by watcher.json instead (see Probe).
func newLock(path string) *flock.Flock {
	return flock.New(path, flock.SetFlag(os.O_CREATE|os.O_RDONLY|syscall.O_NOFOLLOW), flock.SetPermissions(0o600))
}

// lock takes the root's watcher lock. Clients probing with a shared lock
// hold it only for a moment, so it retries for a while before it decides
// that another watcher runs.
func lock(root string) (*flock.Flock, error) {
	l := newLock(layout.Root(root).WatcherLock())
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	got, err := l.TryLockContext(ctx, 5*time.Millisecond)
	if got {
		return l, nil
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return nil, fmt.Errorf("%s: %w", layout.Root(root).WatcherLock(), err)
	}
	return nil, fmt.Errorf("%w on %s (pid %d)", ErrRunning, root, tracker.ReadPID(layout.Root(root).WatcherPID()))
}

// loadKey reads the key that seals the records, or makes it. A root whose
// key is new has its records sealed as they are: an earlier tend, which
// did not seal them, wrote them.
func (w *watcher) loadKey() error {
	key, created, err := tracker.LoadKey(w.cfg.Root, true)
	if err != nil {
		w.noteFlushFailure(err)
		return err
	}
	w.store.SetKey(key)
	if created {
		sealed, errs := w.store.SealAll()
		for _, err := range errs {
			w.syncFailed(fmt.Errorf("sealing: %w", err))
		}
		if len(sealed) > 0 {
			w.log.Printf("%s made: sealed the %d records an earlier tend wrote", w.root().RecordKey(), len(sealed))
		}
	}
	return nil
}

// relock takes the watcher lock again when its file was removed, renamed
// away or replaced (an operator clearing locks thought stale): a lock held
// on a file that is no longer watcher.lock keeps no second watcher from
// starting. If another process locked the new file first, a second
// watcher may have started on the root: this one stops (its keeper starts
// one, which waits for the lock) rather than supervise the same runs
// twice.
func (w *watcher) relock() error {
	path := w.root().WatcherLock()
	if now, err := os.Stat(path); err == nil {
		for _, l := range w.locks {
			if held, err := l.Stat(); err == nil && os.SameFile(held, now) {
				return nil // the file this watcher locked, or locked again
			}
		}
	}
	l := newLock(path)
	got, err := l.TryLock()
	if err == nil && !got {
		err = ErrRunning
	}
	if err != nil {
		return fmt.Errorf("%s was removed or replaced, and cannot be locked again: %w", path, err)
	}
	w.locks = append(w.locks, l)
	w.log.Printf("%s was removed or replaced: locked it again", path)
	return nil
}

// ErrCannotStart wraps what kept a watcher from starting (the spool cannot
// be watched, config.json is invalid, ...), as opposed to what ended one
// that ran: a keeper does not try again a first watcher that cannot start.
var ErrCannotStart = errors.New("the watcher cannot start")

// Run runs a watcher on cfg.Root until a stop signal has ended every run.
// It returns ErrRunning if another watcher holds the root, and an error
// wrapping ErrCannotStart if it cannot start.
func Run(cfg Config) error {
	started := false
	err := runWatcher(cfg, &started)
	if err != nil && !started && !errors.Is(err, ErrRunning) {
		return fmt.Errorf("%w: %w", ErrCannotStart, err)
	}
	return err
}

// runWatcher is Run; it sets *started once the watcher takes requests.
func runWatcher(cfg Config, started *bool) error {
	if cfg.Settle == 0 {
		cfg.Settle = DefaultSettle
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	if err := (spool.Dir{Root: cfg.Root}).Make(); err != nil {
		return err
	}
	if err := (spool.Dir{Root: cfg.Root}).MakeClaims(); err != nil {
		return err
	}
	// The root by the path with no link in it: one that went through a
	// link would go wherever whoever may change the link wants.
	real, err := filepath.EvalSymlinks(cfg.Root)
	if err != nil {
		return err
	}
	cfg.Root = real
	w := newWatcher(cfg)
	if w.jobs.engine == nil {
		w.jobs.engine = w.slurmEngine()
	}
	defer func() {
		if w.stdin >= 0 {
			unix.Close(w.stdin) // no fork is under way once the loop has returned
		}
	}()
	// A root that someone other than this user (and root) could change is
	// not one to act on: see tracker.CheckAccess.
	if err := tracker.CheckSafe(w.cfg.Root, w.uid); err != nil {
		return err
	}
	settings, err := config.Load(w.cfg.Root, cfg.Settings, systemNames())
	if err != nil {
		return err
	}
	w.settings = settings
	// The store writes with power_loss until startDurability has marked
	// the root for watcher_crash: what it writes before (sealing an
	// earlier tend's records) is synced.
	if err := w.loadKey(); err != nil {
		return err
	}
	if err := w.store.Make(); err != nil {
		return err
	}
	w.ordersData = cfg.RenameNewAnywhere || procfs.OrdersNewData(w.store.Dir())
	w.store.SetRenameNew(w.ordersData)
	w.boot = cfg.Boot
	if w.boot == "" {
		if w.boot, err = procfs.BootID(); err != nil {
			w.log.Printf("%v: a process of an earlier boot is told apart by its PID and start time alone, and gates are synced", err)
		}
	}
	if err := os.MkdirAll(layout.Root(cfg.Root).Exits(), 0o755); err != nil {
		return err
	}
	if w.settings.Durability != tracker.WatcherCrash {
		// The directories made before, by tend up or a client (rejected/
		// must hold what it is answered about), durable before anything
		// in them is.
		if err := durable.FlushRootDirs.SyncDir(cfg.Root); err != nil {
			w.noteFlushFailure(err) // the keeper's next watcher may sync it well
			return err
		}
	}
	l, err := lock(cfg.Root)
	if err != nil {
		return err
	}
	w.locks = []*flock.Flock{l}
	defer func() {
		for _, l := range w.locks {
			l.Unlock()
		}
	}()
	// One descriptor of the root for syncfs, opened before anything is
	// written without a flush: syncfs reports the write-back errors that
	// came after its descriptor was opened, and only to its first caller.
	w.rootFD, err = unix.Open(cfg.Root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: cfg.Root, Err: err}
	}
	defer unix.Close(w.rootFD)
	// Only once the lock is held: before, what it reads could be a live
	// watcher's.
	if err := w.startDurability(); err != nil {
		return err
	}
	// Before the lock goes: the next watcher finishes what is left of a
	// deletion (finishDeletions), and must not find one under way.
	defer w.finishPurges()
	// Descendants of runs that leave their group (setsid, double fork)
	// become this watcher's children when their parent dies, so they can
	// be found and ended with their run, and never run on unsupervised.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("becoming a child subreaper: %w", err)
	}
	w.keeper = keeperPID()
	if err := w.watchKeeper(); err != nil {
		return err
	}
	// A name for ps, next to the keeper's; no harm if it cannot be set.
	os.WriteFile("/proc/self/comm", []byte(tracker.WatcherComm), 0)
	sigchld := make(chan os.Signal, 1)
	signal.Notify(sigchld, syscall.SIGCHLD)
	defer signal.Stop(sigchld)

	fsw, err := fsnotify.NewBufferedWatcher(eventBatch)
	if err != nil {
		return fmt.Errorf("inotify: %w", procfs.InotifyError(err))
	}
	defer fsw.Close()
	// Watch first, then look: a request dropped in between is seen twice,
	// which is harmless, instead of not at all.
	for _, dir := range []string{w.spool.Spool(), layout.Root(cfg.Root).Exits(), cfg.Root} {
		if err := fsw.Add(dir); err != nil {
			return fmt.Errorf("watch %s: %w", dir, procfs.InotifyError(err))
		}
	}
	w.fsw = fsw
	if did, err := tracker.MendTornEnd(cfg.Root); err != nil {
		w.log.Printf("history: %v", err)
	} else if did != "" {
		w.log.Printf("%s", did)
	}
	if err := w.openStartLog(); err != nil {
		return err
	}
	defer w.syncLogged() // what the log holds, for the next watcher to find synced
	w.takePassed()
	if err := w.recoverRuns(); err != nil {
		w.closePassed()
		return err
	}
	w.closePassed()
	w.lookForEscapes()
	w.writeQueue()
	w.sweepExitRecords()
	w.restoreControls()
	w.finishDeletions()
	w.claimsLeftBehind()
	w.syncLogged() // what the start log put back: the claims left behind first
	w.rescan()
	w.dequeue()
	w.drain()
	w.collectGarbage()
	w.crash("recovered")
	w.startedAt = time.Now().UTC()
	if err := w.writeInfo(); err != nil {
		return err
	}
	defer os.Remove(layout.Root(cfg.Root).WatcherPID())
	defer os.Remove(layout.Root(cfg.Root).WatcherInfo())
	defer func() {
		if w.settings.Durability == tracker.WatcherCrash {
			w.syncUnflushed("stopping")
		}
	}()
	w.log.Printf("watching %s (pid %d, keeper %d), durability %s", cfg.Root, os.Getpid(), w.keeper, w.settings.Durability)
	if cfg.Ready != nil {
		fmt.Fprintln(cfg.Ready, "ready")
		cfg.Ready.Close()
	}
	*started = true
	return w.loop(fsw, sigchld)
}

type watcher struct {
	cfg Config
	log *log.Logger
	// purging are the deleted runs' directories being removed, beside
	// the loop (one with 400,000 files held it up 12 s): see purge.
	purging sync.WaitGroup
	purges  purges
	uid     int // the watcher's own: its user's requests are taken, and root's
	spool   spool.Dir
	store   *tracker.Store
	hist    *tracker.History
	// histUnsynced is set while lines appended to the history are not
	// yet synced, spoolUnsynced while a claim from the spool is not (see
	// writeRecords).
	histUnsynced, spoolUnsynced bool
	// syncFailureNoted is set once a failed flush is recorded in the
	// root's unsynced file (see noteSyncFailure).
	syncFailureNoted atomic.Bool
	// movedOutOf are the runs whose requests were moved out of the spool
	// since it was last synced for them (see movedOut).
	movedOutOf []string
	// claimDirs are the directories requests were claimed or moved into
	// from the spool since it was last synced, each true if it was made
	// for it (its name in runs/ is new too): they are synced before the
	// spool is (see claimedInto).
	claimDirs map[string]bool
	// ordersData is set where the root's file system commits a new file's
	// data before its name (procfs.OrdersNewData): a run's first record is
	// renamed in before its flush there, and an end's or a stop's is not
	// flushed at all (see coverable).
	ordersData bool
	// boot is this boot's ID (Config.Boot), recorded with each process the
	// watcher starts; "" if it could not be read.
	boot string

	locks []*flock.Flock // watcher.lock, and again each time its file was replaced (see relock)

	runs  map[string]*run // runs with a live process, by ID
	jobs  jobs            // runs on a cluster, submitted or being submitted (see jobs.go)
	queue []*queuedRun    // runs waiting for a slot, in arrival order
	// queuedByID holds queue's runs by ID: a chain of runs that each wait
	// for the one before looks each one up, at every link.
	queuedByID map[string]*queuedRun
	waiting    map[string]*backoff // runs in backoff, waiting to start again
	unsaved    unsaved
	passed     []tracker.Event // events of states passed through, for the next save (see passing)
	batch      batch           // saves held back while runs end together (see batched)
	// spawning are the runs launched in this batch whose forks are under
	// way, in no other list until settleSpawns.
	spawning []*spawn
	// written holds the stamp of the state.json this watcher wrote last
	// for each run not yet ended: guard's proof, with one stat, that
	// nobody changed it since.
	written  map[string]tracker.Stamp
	settings config.Settings
	// configProblem is why the last reading of config.json failed (see
	// tracker.WatcherInfo.ConfigProblem).
	configProblem string
	pending       map[string]*pending // spool entries not yet taken, by file name
	// pendingDropped is set when names whose events came while the
	// history held were not kept in pending, past maxHeldPending: the
	// spool is looked over again for them once it is appended.
	pendingDropped bool
	// waiters counts the queued runs that wait for other runs or a time
	// (see deps.go); dequeueDue is set while a dequeue is scheduled, and
	// startDue while one waits for the end of the batch (see startSoon).
	waiters int
	// waitedBy counts, for each run ID, the names of it in the After of
	// queued runs (see waitedOn).
	waitedBy map[string]int
	// waitedChanges counts the changes of runs that queued runs wait for
	// (see waitedChanged).
	waitedChanges uint64
	dequeueDue    bool
	startDue      bool
	// unkept are the requests of queued runs to sync with the next
	// records (see keep).
	unkept []spool.File
	// unsyncedClaims are the requests claimed since the last records were
	// written, to sync with the next (see keepClaimed).
	unsyncedClaims []claimedFile
	// startLog is the root's start log, and the launches it holds (see
	// startlog.go).
	startLog  startLogState
	deletedAs map[string]deletion // how runs waited for ended, once deleted
	// waitedDeletions are the deletions of runs others waited for, made
	// by this watcher, and histDeletions those read from the history, by
	// ID: kept when the ID is used again (see deletionBetween).
	waitedDeletions map[string][]deletion
	histDeletions   map[string][]deletion
	// restoredDeletes holds the delete requests an earlier watcher had
	// claimed, by key, until each is taken again (see deletedByItself).
	restoredDeletes map[string]spool.Name
	ended           map[string]endedRun // how runs waited for ended (see conditions)
	// unreadHistory is the last error that kept the queue from reading
	// the history (see history), logged once, and kept while its files
	// are the same (see historyFault), not read at each turn of the queue.
	unreadHistory historyFault
	// historyRetryDue is set while a turn of the queue is due to read a
	// history found bad again (see history).
	historyRetryDue bool
	// turnHistory is the history as the current turn of the loop read it
	// (see history): the IDs it is read for in one turn share one parse.
	turnHistory  readHistory
	historyReads int // how many times it was read whole, for the tests
	// selections holds the selector requests under way, by the name of
	// each of their parts (see selection).
	selections map[spool.Name]*selection
	// faulted holds, by file name, the fault that keeps a request from
	// being taken or rejected, as last logged (see takeLater).
	faulted map[string]string
	// leftVersions holds the IDs of queued runs that ended without
	// starting while a file under their start name was not examined yet
	// (see leaveToExamine), until it is decided.
	leftVersions map[string]bool
	// afterStart holds cancel requests that wait for a start request of the
	// same ID to be decided.
	afterStart map[string][]string
	// claims holds the control requests claimed and under way, by their
	// path in claims/, each with the spool names of the requests of the
	// same name and owner that wait for it to be done (see claimControl).
	claims map[string][]string

	keeper int // the keeper above this watcher, 0 if there is none
	// startedAt is when this watcher started taking requests.
	startedAt time.Time
	// rootFD is the root, open since before the watcher wrote anything,
	// for syncUnflushed (-1 before).
	rootFD int
	fsw    *fsnotify.Watcher
	forker *forker // starts every child process (see forker)
	stdin  int     // /dev/null, every run's stdin (see devNull); -1 until opened
	// strays are processes that left their run's group and outlived it,
	// being ended, by PID.
	strays map[int]*stray
	// mark is the variable that marks the processes of this root's runs
	// (MarkVar); escapes is set while some of them may be outside the
	// tree of this watcher and the keepers (see lookForEscapes).
	mark    string
	escapes bool
	// heldByKeepers are the processes, by exit record name, on which a
	// keeper of the root holds a pidfd, as recovery found them (see
	// keeperHolds).
	heldByKeepers map[string]bool
	// recovering is set while recoverRuns looks at each run; undecided
	// are the starts it leaves until every run is recovered (see
	// startUnlessWaitFailed).
	recovering bool
	undecided  []undecidedStart
	// fromKeeper are the handles of Config.Held not yet used, by exit
	// record name; recovery uses them and closes the rest.
	fromKeeper map[string]*procfs.Handle

	do       chan func() // work from timers, run on the loop
	exited   chan *run   // runs whose leader exited
	stopping int         // shutdown signals received
	// draining is true while a re-check of draining groups is scheduled,
	// so that one chain of checks serves them all.
	draining bool
	// lastExit is when a leader's exit was last seen (see leadersExited).
	lastExit time.Time
	// scanned is set once drain has read all of /proc (see onlyLeadersLeft).
	scanned bool
}

func newWatcher(cfg Config) *watcher {
	if cfg.processes.fork == nil {
		cfg.processes = systemProcesses()
	}
	return &watcher{
		cfg:             cfg,
		log:             log.New(lineWriter{cfg.Log}, "", log.LstdFlags|log.Lmicroseconds),
		uid:             os.Getuid(),
		spool:           spool.Dir{Root: cfg.Root},
		store:           tracker.NewStore(cfg.Root),
		hist:            tracker.OpenHistory(cfg.Root),
		runs:            make(map[string]*run),
		jobs:            newJobs(cfg.Engine),
		written:         make(map[string]tracker.Stamp),
		claimDirs:       make(map[string]bool),
		pending:         make(map[string]*pending),
		faulted:         make(map[string]string),
		forker:          newForker(cfg.ForkProcs),
		purges:          newPurges(),
		stdin:           -1,
		rootFD:          -1,
		afterStart:      make(map[string][]string),
		leftVersions:    make(map[string]bool),
		claims:          make(map[string][]string),
		strays:          make(map[int]*stray),
		mark:            MarkVar(cfg.Root),
		waiting:         make(map[string]*backoff),
		deletedAs:       make(map[string]deletion),
		restoredDeletes: make(map[string]spool.Name),
		waitedDeletions: make(map[string][]deletion),
		histDeletions:   make(map[string][]deletion),
		ended:           make(map[string]endedRun),
		queuedByID:      make(map[string]*queuedRun),
		selections:      make(map[spool.Name]*selection),
		unsaved:         unsaved{states: make(map[string]*tracker.State), waiting: make(map[string][]effect), outcomes: make(map[spool.Name][2]string), gone: make(map[string]*goneRecord)},
		do:              make(chan func(), 64),
		exited:          make(chan *run, 64),
	}
}

func (w *watcher) loop(fsw *fsnotify.Watcher, sigchld <-chan os.Signal) error {
	for {
		if w.stopping > 0 && len(w.runs) == 0 && len(w.jobs.byID) == 0 {
			w.log.Printf("stopped: every run has ended")
			if n := len(w.unsaved.states) + len(w.unsaved.events); n > 0 {
				w.log.Printf("%d records or events could not be written; tend fsck will show what is missing", n)
			}
			return nil
		}
		select {
		case ev, ok := <-fsw.Events:
			if !ok {
				return errors.New("inotify closed")
			}
			if !w.concerns(ev) {
				continue
			}
			if err := w.fsEvents(ev, fsw.Events); err != nil {
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
			w.leadersExited(w.moreExited(r))
		case f := <-w.do:
			f()
		case <-sigchld:
			w.reapOrphans()
		case sig := <-w.cfg.Stop:
			if sig == syscall.SIGUSR1 {
				w.log.Printf("%v: leaving %s running, for the next watcher to adopt", sig, runsText(len(w.runs)+len(w.jobs.byID)))
				return nil
			}
			w.shutdown(sig)
		}
	}
}

// moreExited returns r and the runs whose exits are queued behind it.
func (w *watcher) moreExited(r *run) []*run {
	batch := []*run{r}
	for {
		select {
		case r := <-w.exited:
			batch = append(batch, r)
		default:
			return batch
		}
	}
}

// takeExits takes the exits queued now into the batch of requests under
// way: the ends of the runs whose processes are all gone are recorded in
// it, with one commit for both. Taken on the loop's next turn instead,
// they waited for every request of a burst.
func (w *watcher) takeExits() {
	select {
	case r := <-w.exited:
		w.leadersExited(w.moreExited(r))
		w.drain()
	default:
	}
}

// after runs f on the loop after d.
func (w *watcher) after(d time.Duration, f func()) *time.Timer {
	return time.AfterFunc(d, func() { w.do <- f })
}

// concerns reports whether ev may need the loop. The root is watched for
// its lock and config.json (and for its spool's and exits/' removal), so
// every write to its other files comes too: each history append, each
// line of this watcher's log, each queue file written. Those would wake
// the loop for a turn and an empty flush each, several a run.
func (w *watcher) concerns(ev fsnotify.Event) bool {
	if filepath.Dir(ev.Name) != filepath.Clean(w.cfg.Root) {
		return true
	}
	switch ev.Name {
	case w.root().WatcherLock(), w.root().Config(), w.spool.Spool(), w.root().Exits():
		return true
	}
	return false
}

// eventBatch is the most events handled in one turn of the loop; fsnotify
// queues as many while the loop is busy.
const eventBatch = 1024

// fsEvents handles ev and the events queued behind it as one batch: the
// requests dropped together (a burst of starts, a storm of cancels) are
// recorded with rounds of fsyncs before their runs pass their gates or
// get their signals. A request written with a temporary name brings the
// events of that name along; they cost nothing here. After each flush,
// the exits that came meanwhile join the batch (takeExits): the ends of
// the runs a burst started first are recorded with its next records, not
// after the whole burst.
func (w *watcher) fsEvents(ev fsnotify.Event, queued <-chan fsnotify.Event) (err error) {
	w.batched(func() {
		err = w.fsEvent(ev)
		for n := 1; n < eventBatch && err == nil; n++ {
			if w.flushIfFull() {
				w.takeExits()
			}
			select {
			case ev, ok := <-queued:
				if !ok {
					return // the loop's next receive reports it
				}
				err = w.fsEvent(ev)
			default:
				return
			}
		}
	})
	return err
}

func (w *watcher) fsEvent(ev fsnotify.Event) error {
	// A watched directory removed is not watched again when it is made
	// again, and the spool brings every request, exits/ an adopted run's
	// end: the watcher stops, and the one its keeper starts makes them.
	if ev.Has(fsnotify.Remove | fsnotify.Rename) {
		switch ev.Name {
		case w.spool.Spool():
			return fmt.Errorf("the spool %s was removed", ev.Name)
		case w.root().Exits():
			return fmt.Errorf("the exit records' directory %s was removed", ev.Name)
		}
	}
	if ev.Name == w.root().WatcherLock() {
		return w.relock()
	}
	if ev.Name == w.root().Config() {
		w.reloadSettings()
		return nil
	}
	if dir := filepath.Dir(ev.Name); filepath.Dir(dir) == w.store.Dir() {
		w.runDirEvent(filepath.Base(dir), filepath.Base(ev.Name))
		return nil
	}
	if filepath.Dir(ev.Name) == w.root().Exits() {
		if ev.Has(fsnotify.Create) {
			w.exitRecorded(filepath.Base(ev.Name))
		}
		return nil
	}
	if w.stopping > 0 || filepath.Dir(ev.Name) != w.spool.Spool() {
		return nil // requests wait in the spool for the next watcher
	}
	name := filepath.Base(ev.Name)
	if spool.Ignored(name) {
		return nil
	}
	if w.historyHeld() {
		w.holdPending(name)
		return nil
	}
	w.pendingFor(name).lastChange = time.Now()
	w.examine(name)
	return nil
}

// reloadSettings applies a changed config.json. A bad one is reported and
// the settings stay as they were.
func (w *watcher) reloadSettings() {
	l, err := config.Load(w.cfg.Root, w.cfg.Settings, systemNames())
	problem := ""
	if err != nil {
		w.log.Printf("config: %v (keeping the settings in force)", err)
		problem, l = err.Error(), w.settings
	}
	infoChanged := problem != w.configProblem || l.Durability != w.settings.Durability || l.MaxRunning != w.settings.MaxRunning || l.MaxPerSession != w.settings.MaxPerSession
	w.configProblem = problem
	if !l.Equal(w.settings) {
		switch {
		case w.settings.Durability == tracker.WatcherCrash && l.Durability != tracker.WatcherCrash:
			w.syncUnflushed("config: durability power_loss")
		case w.settings.Durability != tracker.WatcherCrash && l.Durability == tracker.WatcherCrash:
			if err := w.markUnsynced(); err != nil {
				w.log.Printf("config: durability watcher_crash: %v (keeping durability %s)", err, w.settings.Durability)
				l.Durability = w.settings.Durability
			}
		}
		w.settings = l
		w.store.SetDurability(l.Durability)
		w.log.Printf("config: max_running %d, max_running_per_session %d, keep_finished %d, keep_finished_for %v, durability %s, queue_edit_window %v",
			l.MaxRunning, l.MaxPerSession, l.KeepFinished, l.KeepFinishedFor, l.Durability, l.QueueEditWindow)
		defer w.dequeue()
	}
	if infoChanged {
		if err := w.writeInfo(); err != nil { // for tend status and tend top
			w.log.Printf("%v", err)
		}
	}
}

// rescan examines every entry in the spool: at start, and after the kernel
// dropped events.
func (w *watcher) rescan() {
	if w.historyHeld() {
		// Nothing is taken while it holds: releaseHeld rescans.
		w.pendingDropped = true
		return
	}
	d, err := os.Open(w.spool.Spool())
	if err != nil {
		w.log.Printf("rescan: %v", err)
		return
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		w.log.Printf("rescan: %v", err)
	}
	// Cancels first, all of them: one found beside the start of its run
	// (both written while no watcher ran) then waits for that start,
	// which it keeps from running (takeStart), wherever the directory
	// lists the two.
	for _, cancels := range []bool{true, false} {
		for _, name := range names {
			if !spool.Ignored(name) && strings.HasSuffix(name, "."+spool.VerbCancel) == cancels {
				w.pendingFor(name)
				w.examine(name)
			}
		}
	}
}

// runsText is "1 run", "2 runs".
func runsText(n int) string {
	if n == 1 {
		return "1 run"
	}
	return fmt.Sprintf("%d runs", n)
}

// shutdown stops every run; a second signal kills what is left at once.
func (w *watcher) shutdown(sig os.Signal) {
	w.stopping++
	if w.stopping == 1 {
		for _, b := range w.waiting {
			w.endBackoff(b, tracker.Canceled, "the watcher was stopped while it waited to start again")
		}
		w.log.Printf("%v: stopping %s (send it again to kill them at once)", sig, runsText(len(w.runs)+len(w.jobs.byID)))
		for _, r := range w.runs {
			w.stop(r, tracker.CauseCanceled, "the watcher was stopped", r.grace(), "")
		}
		w.stopJobs(false)
		return
	}
	w.log.Printf("%v: killing %s", sig, runsText(len(w.runs)))
	for _, r := range w.runs {
		r.killAt = time.Now()
		w.killGroup(r)
	}
	w.stopJobs(true)
}

// guard checks that the state file the watcher is about to replace is the
// one it wrote last. One changed by hand is not trusted: it is kept aside
// as state.json.edited, reported, and replaced by the watcher's record.
// It reports whether the file is the one it wrote last (or is behind on
// purpose): only then may the record be written without a flush (see
// coverable), the file on disk standing for it until its history line is
// applied to it.
func (w *watcher) guard(st *tracker.State) bool {
	if st.Rev == 0 {
		return false // nothing written yet: no file stands for the record
	}
	if w.unsaved.states[st.ID] != nil || w.held(st) {
		return true // the last write failed or is held back: the file is behind
	}
	if stamp, ok := w.written[st.ID]; ok {
		if now, err := w.store.Stamp(st.ID); err == nil && now == stamp {
			return true
		}
	}
	path := w.store.Run(st.ID).State()
	b, err := w.store.RecordBytes(st.ID)
	if errors.Is(err, fs.ErrNotExist) {
		return false // removed: it is written anew
	}
	if err != nil {
		// Not a record (a link, a FIFO, a huge file): not read, and
		// replaced, not followed, by the record's rename.
		w.log.Printf("run %s: %v; replaced by the watcher's record", st.ID, err)
		return false
	}
	disk, err := tracker.ParseState(path, b)
	if err == nil && disk.Rev == st.Rev {
		return true // (st itself may have changed already: it is about to be saved)
	}
	if err == nil {
		err = fmt.Errorf("%s: its revision is %d, not %d as written", path, disk.Rev, st.Rev)
	}
	w.log.Printf("run %s: %v; kept as state.json.edited, replaced by the watcher's record", st.ID, err)
	os.Rename(path, path+".edited")
	if disk != nil && disk.Rev <= tracker.MaxRev {
		st.Rev = max(st.Rev, disk.Rev) // revisions never go back
	}
	return false
}

// save records a change of st: rev grows, the change is appended to the
// history, then state.json is replaced. History first, so that whoever sees
// a state in state.json finds its event in history.jsonl.
func (w *watcher) save(st *tracker.State) { w.saveChange(st, tracker.Event{}, changed) }

// A saveKind says what a save is, for how its record may be written (see
// writeRecords).
type saveKind int

const (
	changed  saveKind = iota // synced, then renamed in
	covered                  // an end or a stop that the history covers (coverable)
	launched                 // its run's process waits at its gate (launchRecord)
)

// saveChange is save, with what a label or note request changed (its
// Labels and Note), or a cut (its Output), on the change's history event.
func (w *watcher) saveChange(st *tracker.State, change tracker.Event, kind saveKind) {
	if !w.guard(st) && kind == covered {
		kind = changed // the file on disk is not the record before the change
	}
	st.Rev++
	ev := tracker.EventOf(st, time.Now())
	if !change.Time.IsZero() {
		ev.Time = change.Time // a note's time, as the record has it
	}
	ev.Labels, ev.Note, ev.Output = change.Labels, change.Note, change.Output
	// Labels and notes are the owner's, the history the group's: sealed
	// for a rebuild alone. The watcher always holds the key.
	if err := w.store.SealChange(&ev); err != nil {
		w.log.Printf("history: %v", err)
	}
	events := append(w.passed, ev)
	w.passed = nil
	if w.waitedOn(st.ID) {
		if tracker.Final(st.State) {
			// How it ended, for the runs that wait for it (conditions)
			// to learn without reading its record each time.
			w.ended[st.ID] = endedRun{st.State, st.Reason, st.CreatedAt}
		}
		w.waitedChanged() // once what it waits for is recorded
	}
	if w.batch.active {
		w.hold(st, events, kind)
		return
	}
	if !w.appendHistory(events) && kind == covered {
		kind = changed // its line is not in the history, to be synced
	}
	if states := w.holdBehindHistory([]*tracker.State{st}); len(states) > 0 {
		w.recorded(st, w.writeRecords(states, map[*tracker.State]saveKind{st: kind})[0])
	}
	w.retryUnsaved()
}

// saveEnd is save for the end of run st (finish, endQueued), written
// without a flush of its own where it may be (coverable).
func (w *watcher) saveEnd(st *tracker.State) { w.saveChange(st, tracker.Event{}, w.coverable(st)) }

// launchRecord is the kind of the save that records run st starting (or
// running, as its process waits at its gate) for its first attempt:
// nothing the run does has happened, and nothing about it has been
// answered, until the record is durable. So a batch of nothing else
// may keep it in the start log instead of syncing it (see startlog.go),
// and where the file system orders new data before names, it is renamed
// over the run's last record before its flush, and one journal commit makes its data and its name durable
// where a sync, a rename and its directory's sync take two
// (tracker.Store.WriteAll); a power loss before that commit takes back a
// change nothing has acted on, as it would a run's first record
// (durable.Durable.RenameNew). Only a first attempt's, over a record
// that holds no more than its request (none, or a queued run's record as
// it was taken: see startQueued): should a file system keep such a name
// without its data after all, recovery takes the torn record for none
// and makes the run anew from its claimed request (recoverTorn), which
// loses nothing an answer said. A restart's would lose its attempts.
func (w *watcher) launchRecord(st *tracker.State) saveKind {
	if w.settings.Durability == tracker.PowerLoss && st.Restarts == 0 && st.Attempt <= 1 {
		return launched
	}
	return changed
}

// coverable says whether the next change of run st, an end or a stop
// that cancels or times it out, may be written without a flush of its
// record (covered, else changed): where the file system orders new data before names, once the
// history line of the change is synced, if the change is the only one of
// the run that the record holds (its earlier record on disk, with that
// line, then says all it does: see tracker.ApplyCovered). A batch of ends
// or stops then costs the disk one flush, not two for each run. A run
// whose last record could not be written (a full disk) has the change
// synced as before: the record on disk is older than the one before the
// change, and the changes between would be lost.
//
// Nor is a change of a run with a health check: its checks are noted in
// its record's health status as they come, without a save of their own
// (see checked), and ride along with the next record written, which the
// change's line does not say.
func (w *watcher) coverable(st *tracker.State) saveKind {
	if _, behind := w.unsaved.states[st.ID]; behind || st.Health != nil {
		return changed
	}
	if w.ordersData && w.settings.Durability == tracker.PowerLoss {
		return covered
	}
	return changed
}

// stamp notes the stamp of the state.json just written for st, while the
// run goes on; an ended run's record changes rarely (a label, a note) and
// is checked the long way, so the map holds only runs not yet ended.
func (w *watcher) stamp(st *tracker.State) {
	delete(w.written, st.ID)
	if tracker.Final(st.State) {
		return
	}
	if stamp, err := w.store.Stamp(st.ID); err == nil {
		w.written[st.ID] = stamp
	}
}

// passing records that run st passes through its current state on its
// way to the next, saved at once: the state's event goes to the history
// with the next save's, and state.json skips it. It spares a record write
// for starting, when a run is launched as soon as it is taken; recovery
// needs nothing from that record (a claimed run without one is started,
// see recoverClaimed).
func (w *watcher) passing(st *tracker.State) {
	st.Rev++
	w.passed = append(w.passed, tracker.EventOf(st, time.Now()))
}

// unsaved holds what could not be written (a full or read-only disk): it
// is written again every second until it is, so the records catch up. A
// record whose run directory was removed is tried a few times only (see
// gone).
type unsaved struct {
	events   []tracker.Event
	states   map[string]*tracker.State
	waiting  map[string][]effect // for a record in states (see follow)
	outcomes map[spool.Name][2]string
	// afterHistory are the effects that came while the history held (see
	// historyHeld), in order, run once it is appended.
	afterHistory []effect
	// gone holds the records in states whose run directory is gone,
	// tried again with a growing delay, then given up.
	gone     map[string]*goneRecord
	retrying *time.Timer
}

// A goneRecord is how often, and until when, the record of a run whose
// directory was removed has been tried again.
type goneRecord struct {
	tries int
	next  time.Time
}

// goneTries is how often a record whose run directory is gone is tried
// again (after 0.1 s, doubling: about 3 s in all) before it is given up.
// Removing the directory throws away the record; trying longer would only
// keep the run's leader from being reaped.
const goneTries = 5

// runDirGone reports whether run id's directory no longer exists.
func (w *watcher) runDirGone(id string) bool {
	_, err := os.Lstat(w.store.RunDir(id))
	return errors.Is(err, os.ErrNotExist)
}

// retryUnsaved schedules the next try of what could not be written: in a
// second, or sooner for a record whose run directory is gone.
func (w *watcher) retryUnsaved() {
	u := &w.unsaved
	if len(u.events)+len(u.states)+len(u.outcomes) == 0 {
		return
	}
	d := time.Second
	for _, g := range u.gone {
		d = min(d, max(time.Until(g.next), time.Millisecond))
	}
	if u.retrying != nil {
		if d == time.Second || !u.retrying.Stop() {
			return // the try scheduled comes soon enough, or is under way
		}
	}
	u.retrying = w.after(d, func() {
		u.retrying = nil
		released := false
		if len(u.events) > 0 {
			// Kept on disk if not appended: the history's end torn (see
			// tracker.PendingPath).
			if err := w.hist.Append(u.events...); err == nil || errors.Is(err, tracker.ErrTornEnd) {
				w.log.Printf("history: %d events that could not be written are written now; the records, answers and requests held behind them go ahead", len(u.events))
				u.events = nil
				w.histUnsynced = true
				released = true
			}
		}
		w.syncHistory()
		if w.historyHeld() {
			// History before state: no record is written before its line.
			for n, o := range u.outcomes {
				if w.spool.WriteOutcome(n, o[0], o[1]) == nil {
					delete(u.outcomes, n) // answers of records written before
				}
			}
			w.retryUnsaved()
			return
		}
		var written []string
		for id, st := range u.states {
			if g := u.gone[id]; g != nil && time.Now().Before(g.next) {
				continue
			}
			if w.store.Write(st) == nil {
				w.log.Printf("run %s: its record (%s, rev %d) is written now", id, st.State, st.Rev)
				delete(u.states, id)
				delete(u.gone, id)
				w.stamp(st)
				written = append(written, id)
				continue
			}
			if w.giveUpGone(st) {
				written = append(written, id) // what waited for it goes ahead
			}
		}
		for _, id := range written {
			w.runWaiting(id)
		}
		if released {
			w.releaseHeld()
		}
		for n, o := range u.outcomes {
			if w.spool.WriteOutcome(n, o[0], o[1]) == nil {
				delete(u.outcomes, n)
			}
		}
		w.retryUnsaved()
	})
}

// releaseHeld runs, in order, the effects that waited while the history
// held (see historyHeld), its lines appended and the records behind them
// written now (those that still fail hold theirs on), and takes the
// requests that waited in the spool.
func (w *watcher) releaseHeld() {
	effects := w.unsaved.afterHistory
	w.unsaved.afterHistory = nil
	w.batched(func() {
		for _, e := range effects {
			w.runEffect(e)
		}
		// The names whose events came while it held: those gone from the
		// spool (a queued run's request removed) are examined for that,
		// then the spool's.
		names := slices.Collect(maps.Keys(w.pending))
		if w.pendingDropped {
			// Some names were not kept (see holdPending): those whose
			// removal means something are looked at again, and the
			// rescan finds the others.
			w.pendingDropped = false
			names = append(names, w.startsAwaited()...)
			slices.Sort(names)
			names = slices.Compact(names)
		}
		for _, name := range names {
			if _, err := os.Lstat(filepath.Join(w.spool.Spool(), name)); errors.Is(err, fs.ErrNotExist) {
				w.examine(name)
			}
		}
		w.rescan()
	})
}

// maxHeldPending bounds the spool names kept pending while the history
// holds (see holdPending): a flood of requests written then (a client
// looping on a full disk) must not grow the watcher without limit.
const maxHeldPending = 4096

// holdPending keeps spool entry name, whose event came while the history
// held (see historyHeld), pending, to be examined once it is appended,
// unless maxHeldPending names are already: then it only notes that some
// were dropped, and releaseHeld looks the spool over again for them.
func (w *watcher) holdPending(name string) {
	if p := w.pending[name]; p != nil {
		p.lastChange = time.Now()
		return
	}
	if len(w.pending) >= maxHeldPending {
		w.pendingDropped = true
		return
	}
	w.pendingFor(name)
}

// startsAwaited returns the spool names of the start requests whose
// removal is news that the spool cannot tell once the name is gone:
// queued runs' (a removal cancels the run), and those cancels wait for
// (see afterStartDecided). The others, once gone, need nothing done.
func (w *watcher) startsAwaited() []string {
	var names []string
	for _, q := range w.queue {
		names = append(names, spool.Name{ID: q.st.ID, Verb: spool.VerbStart}.String())
	}
	for id := range w.afterStart {
		names = append(names, spool.Name{ID: id, Verb: spool.VerbStart}.String())
	}
	return names
}

// giveUpGone counts a failed try of st's record if its run directory is
// gone, and gives the record up after goneTries: what waited for it (the
// reaping of its leader, the answers to its cancel requests) then goes
// ahead, and its events stay in the history. It reports whether it gave up.
func (w *watcher) giveUpGone(st *tracker.State) bool {
	u := &w.unsaved
	if !w.runDirGone(st.ID) {
		delete(u.gone, st.ID) // a full disk, say: tried every second until written
		return false
	}
	g := u.gone[st.ID]
	if g == nil {
		g = &goneRecord{}
		u.gone[st.ID] = g
	}
	g.tries++
	if g.tries <= goneTries {
		g.next = time.Now().Add(50 * time.Millisecond << g.tries)
		return false
	}
	w.log.Printf("run %s: its directory %s is gone: its record (%s, rev %d) is not written; its history has its events", st.ID, w.store.RunDir(st.ID), st.State, st.Rev)
	delete(u.states, st.ID)
	delete(u.gone, st.ID)
	delete(w.written, st.ID)
	return true
}

// crash kills the watcher, as a crash at this step would, if step is one
// of Config.CrashAt that no watcher on the root has reached yet (a file
// ROOT/.crashed-STEP says one has): tests use it to kill a watcher between
// two writes that must survive it in either order.
func (w *watcher) crash(step string) {
	if w.cfg.atStep != nil {
		w.cfg.atStep(step)
	}
	if !slices.Contains(w.cfg.CrashAt, step) {
		return
	}
	f, err := os.OpenFile(filepath.Join(w.cfg.Root, ".crashed-"+step), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return // reached before
	}
	f.Close()
	w.log.Printf("crashing at %s, as TEND_TEST_CRASH_AT says", step)
	unix.Kill(os.Getpid(), unix.SIGKILL)
	time.Sleep(time.Minute) // it does not return
}

// root names the files of the watcher's root.
func (w *watcher) root() layout.Root { return layout.Root(w.cfg.Root) }
