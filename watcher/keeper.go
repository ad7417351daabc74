package watcher

import (
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/gofrs/flock"
	"github.com/tendhq/tend/procfs"
	"golang.org/x/sys/unix"
)

// KeeperComm and WatcherComm are the names a keeper and a watcher give
// themselves (in /proc/PID/comm, and so in ps), by which each is told from
// other processes.
const (
	KeeperComm  = "tend-keeper"
	WatcherComm = "tend-watcher"
)

// KeeperPIDPath returns the file in which the keeper in charge of root
// writes its PID.
func KeeperPIDPath(root string) string { return filepath.Join(root, "keeper.pid") }

func keeperLockPath(root string) string { return filepath.Join(root, "keeper.lock") }

// ErrKeeperRunning means another keeper is in charge of the root: its
// watcher died and it is about to start a new one.
var ErrKeeperRunning = errors.New("another keeper is in charge")

// KeeperConfig is what a keeper needs.
type KeeperConfig struct {
	Root string
	Log  io.Writer
	// Path and Args run a watcher on Root (Args[0] is the program's name).
	// The watcher inherits the keeper's standard streams.
	Path string
	Args []string
	// Ready, if set, is given to the first watcher as file descriptor 3; it
	// writes a line there once it takes requests.
	Ready *os.File
	// Refused is the exit code with which a watcher says that another
	// watcher holds the root. The keeper then gives up instead of retrying.
	Refused int
	// CannotStart is the exit code with which a watcher says it cannot
	// start (ErrCannotStart, which it has printed). If the first watcher
	// exits with it, the keeper gives up and exits 1: a spool that cannot
	// be watched is for the user to fix, and retrying would hide it. A
	// later watcher is retried all the same, for the runs' sake.
	CannotStart int
	// Signals delivers the keeper's orders. SIGTERM and SIGINT are passed on
	// to the watcher, which stops every run and exits; the keeper exits
	// once its last child is gone. SIGUSR1 is passed on too: the watcher
	// exits and leaves the runs running, and the keeper keeps them, and
	// records their ends, until the last one is gone. SIGUSR2 starts a
	// watcher at once if the keeper waits to restart one.
	Signals <-chan os.Signal
}

// keeper is the small process above the watcher. It exists so that a
// watcher's crash costs nothing: it is a child subreaper, so the runs of a
// watcher that died become its children, and it records each one's end in
// an exit record before it reaps it (see exits.go). It restarts a watcher
// that died, with a backoff. It holds no other state: every decision stays
// with the watcher.
type keeper struct {
	cfg     KeeperConfig
	log     *log.Logger
	watcher int // the watcher's PID, 0 while none runs
	started time.Time
	starts  int // watchers started
	backoff time.Duration
	restart *time.Timer
	// done is set once no watcher is to be started again; the keeper exits
	// when it also has no child left.
	done     bool
	exitCode int
	// charge is the keeper lock, held while the keeper is in charge of the
	// root: it alone restarts watchers there. It lets go once done, and
	// then only keeps the runs it has.
	charge *flock.Flock
}

// Keep runs a keeper on cfg.Root and returns the exit code for the keeper's
// process: the exit code of its watcher's last, deliberate exit.
func Keep(cfg KeeperConfig) (int, error) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return 1, fmt.Errorf("becoming a child subreaper: %w", err)
	}
	// The name lets watchers, ps and tests tell the keeper from a watcher.
	if err := os.WriteFile("/proc/self/comm", []byte(KeeperComm), 0); err != nil {
		return 1, fmt.Errorf("naming the keeper: %w", err)
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	k := &keeper{cfg: cfg, log: log.New(cfg.Log, "keeper: ", log.LstdFlags|log.Lmicroseconds)}
	if err := k.takeCharge(); err != nil {
		return cfg.Refused, err
	}
	defer k.releaseCharge()
	sigchld := make(chan os.Signal, 1)
	signal.Notify(sigchld, syscall.SIGCHLD)
	defer signal.Stop(sigchld)
	if err := k.startWatcher(); err != nil {
		return 1, err
	}
	for {
		if k.done {
			k.releaseCharge()
		}
		if k.reap() {
			return k.exitCode, nil
		}
		var restart <-chan time.Time
		if k.restart != nil {
			restart = k.restart.C
		}
		select {
		case <-sigchld:
		case sig := <-cfg.Signals:
			k.order(sig)
		case <-restart:
			k.restart = nil
			k.restartWatcher()
		}
	}
}

func (k *keeper) startWatcher() error {
	files := []*os.File{os.Stdin, os.Stdout, os.Stderr}
	if k.cfg.Ready != nil {
		files = append(files, k.cfg.Ready)
	}
	// Its own process group: Ctrl-C at a terminal reaches the keeper only,
	// which passes it on once.
	p, err := os.StartProcess(k.cfg.Path, k.cfg.Args, &os.ProcAttr{
		Files: files, Sys: &syscall.SysProcAttr{Setpgid: true},
	})
	if k.cfg.Ready != nil {
		k.cfg.Ready.Close() // only the first watcher says it is ready
		k.cfg.Ready = nil
	}
	if err != nil {
		return fmt.Errorf("starting a watcher: %w", err)
	}
	k.watcher, k.started = p.Pid, time.Now()
	k.starts++
	p.Release() // the keeper reaps all its children itself
	return nil
}

// takeCharge takes the keeper lock and writes keeper.pid.
func (k *keeper) takeCharge() error {
	if err := os.MkdirAll(k.cfg.Root, 0o700); err != nil {
		return err
	}
	l := newLock(keeperLockPath(k.cfg.Root))
	got, err := l.TryLock()
	if err != nil {
		return fmt.Errorf("%s: %w", keeperLockPath(k.cfg.Root), err)
	}
	if !got {
		if running, pid, _ := Probe(k.cfg.Root); running {
			return fmt.Errorf("%w on %s (pid %d)", ErrRunning, k.cfg.Root, pid)
		}
		return fmt.Errorf("%w of %s (pid %d) and restarts its watcher; run: tend up", ErrKeeperRunning, k.cfg.Root, readPID(KeeperPIDPath(k.cfg.Root)))
	}
	k.charge = l
	if err := os.WriteFile(KeeperPIDPath(k.cfg.Root), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		l.Unlock()
		return err
	}
	return nil
}

func (k *keeper) releaseCharge() {
	if k.charge == nil {
		return
	}
	os.Remove(KeeperPIDPath(k.cfg.Root))
	k.charge.Unlock()
	k.charge = nil
}

// restartWatcher starts a new watcher, unless another one has taken the
// root meanwhile: that one adopts the runs this keeper keeps.
func (k *keeper) restartWatcher() {
	if k.done || k.watcher != 0 {
		return
	}
	if running, pid, _ := Probe(k.cfg.Root); running {
		k.log.Printf("another watcher (pid %d) runs on %s; not starting one", pid, k.cfg.Root)
		k.done = true
		return
	}
	if err := k.startWatcher(); err != nil {
		k.log.Printf("%v", err)
		k.scheduleRestart()
	}
}

// order carries out a signal sent to the keeper.
func (k *keeper) order(sig os.Signal) {
	if sig == syscall.SIGUSR2 {
		if k.restart != nil {
			k.restart.Stop()
			k.restart = nil
			k.restartWatcher()
		}
		return
	}
	k.done = true
	if k.restart != nil {
		k.restart.Stop()
		k.restart = nil
	}
	if k.watcher == 0 {
		k.log.Printf("%v: no watcher runs; exiting once the last run is gone", sig)
		return
	}
	if err := unix.Kill(k.watcher, sig.(syscall.Signal)); err != nil {
		k.log.Printf("passing %v to the watcher (pid %d): %v", sig, k.watcher, err)
	}
}

// reap collects every child that has exited, writing the exit record of
// each one that leads a process group (runs do) first. It reports whether
// the keeper is done: no watcher to start again, and no child left.
func (k *keeper) reap() (finished bool) {
	for {
		pid, e, err := procfs.PeekAnyChild()
		if errors.Is(err, unix.ECHILD) {
			return k.done && k.restart == nil
		}
		if err != nil {
			k.log.Printf("%v", err)
			return false
		}
		if pid == 0 {
			return false
		}
		if pid == k.watcher {
			procfs.ReapChild(pid)
			k.watcherExited(e)
			continue
		}
		if st, err := procfs.ReadStat(pid); err == nil && st.PGID == pid {
			if err := writeExitRecord(k.cfg.Root, pid, st.StartTime, e); err != nil {
				k.log.Printf("pid %d: %v", pid, err)
			}
		}
		procfs.ReapChild(pid)
	}
}

func (k *keeper) watcherExited(e procfs.Exit) {
	pid := k.watcher
	k.watcher = 0
	lived := time.Since(k.started)
	switch {
	case e.Signal == 0 && e.Code == 0:
		k.done = true // it stopped as told, or on its own after its runs ended
	case k.done:
		k.exitCode = max(e.Code, 1)
	case e.Signal == 0 && e.Code == k.cfg.Refused:
		// Another watcher holds the root; it adopts whatever this keeper
		// still keeps.
		k.log.Printf("another watcher runs on %s; not starting one", k.cfg.Root)
		k.done, k.exitCode = true, e.Code
	case e.Signal == 0 && e.Code == k.cfg.CannotStart && k.starts == 1:
		k.log.Printf("the watcher cannot start; not trying again")
		k.done, k.exitCode = true, 1
	default:
		if lived > 30*time.Second {
			k.backoff = 0
		}
		k.log.Printf("the watcher (pid %d) died: %s", pid, describeExit(e, false))
		k.scheduleRestart()
	}
}

func (k *keeper) scheduleRestart() {
	k.backoff = min(max(2*k.backoff, 100*time.Millisecond), 10*time.Second)
	k.log.Printf("starting a new watcher in %v", k.backoff)
	k.restart = time.NewTimer(k.backoff)
}

// watchKeeper arranges for the watcher to take its keeper's place if the
// keeper dies: it execs BecomeKeeper, keeping its PID and so its children,
// the runs. The new keeper starts a new watcher, which adopts them. Without
// this, a watcher crash after its keeper's death would lose exit codes.
func (w *watcher) watchKeeper() error {
	if w.keeper == 0 {
		return nil
	}
	st, err := procfs.ReadStat(w.keeper)
	if err != nil {
		return fmt.Errorf("keeper %d: %w", w.keeper, err)
	}
	h, err := procfs.Open(w.keeper, st.StartTime)
	if err != nil {
		return fmt.Errorf("keeper %d: %w", w.keeper, err)
	}
	go func() {
		h.WaitExited()
		h.Close()
		w.do <- w.keeperDied
	}()
	return nil
}

func (w *watcher) keeperDied() {
	if len(w.cfg.BecomeKeeper) == 0 {
		w.log.Printf("the keeper (pid %d) died: exit statuses are now lost if this watcher dies too", w.keeper)
		w.keeper = 0
		return
	}
	w.log.Printf("the keeper (pid %d) died: becoming the keeper, for a new watcher to adopt the runs", w.keeper)
	err := syscall.Exec("/proc/self/exe", w.cfg.BecomeKeeper, os.Environ())
	w.log.Printf("becoming the keeper: %v", err)
	w.keeper = 0
}
