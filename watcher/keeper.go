package watcher

import (
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gofrs/flock"
	"github.com/tendhq/tend/procfs"
	"github.com/tendhq/tend/tracker"
	"github.com/tendhq/tend/tracker/layout"
	"golang.org/x/sys/unix"
)

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
	// Held are processes this keeper is to record the end of although
	// they are not its children: the runs a watcher had adopted when it
	// took the place of its dead keeper (see watcher.keeperDied), each by
	// the pidfd it kept across its exec. The keeper writes each one's
	// exit record from its pidfd (see procfs.Handle.ExitInfo).
	Held []Held
	// Successor is set for a keeper that a watcher became when its own
	// keeper died: it keeps its children and Held until they end even if
	// another keeper took charge of the root meanwhile.
	Successor bool
}

// Held is a process a keeper holds a pidfd on: the leader of a run.
type Held struct {
	FD    int    // the pidfd, inherited across exec
	PID   int    // its PID
	Start uint64 // and start time, which name its exit record
}

// String renders h as the --hold flag of tend watch takes it.
func (h Held) String() string { return fmt.Sprintf("%d:%d:%d", h.FD, h.PID, h.Start) }

// ParseHeld parses Held.String's form.
func ParseHeld(s string) (Held, error) {
	var h Held
	f := strings.Split(s, ":")
	if len(f) != 3 {
		return h, fmt.Errorf("held process %q: want FD:PID:START", s)
	}
	fd, err1 := strconv.Atoi(f[0])
	pid, err2 := strconv.Atoi(f[1])
	start, err3 := strconv.ParseUint(f[2], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil || fd < 0 || pid <= 0 {
		return h, fmt.Errorf("held process %q: want FD:PID:START", s)
	}
	return Held{FD: fd, PID: pid, Start: start}, nil
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
	// held are the processes of cfg.Held not yet recorded, by PID;
	// heldExited receives each one once it has exited.
	held       map[int]*heldProc
	heldExited chan *heldProc
	// unrecorded are the exited leaders whose exit record could not be
	// written (a full disk), by PID: left unreaped, so that their status
	// stays with the kernel, and tried again every second (retry).
	unrecorded map[int]bool
	retry      *time.Timer
	// scanned is when peekChild last looked for children in /proc, and
	// found the exited ones it found there, not yet looked at.
	scanned time.Time
	found   []int
}

// heldProc is a process of KeeperConfig.Held, which the keeper waits for.
type heldProc struct {
	Held
	h     *procfs.Handle
	delay time.Duration // before it looks again for the status of a zombie
}

// Keep runs a keeper on cfg.Root and returns the exit code for the keeper's
// process: the exit code of its watcher's last, deliberate exit.
func Keep(cfg KeeperConfig) (int, error) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return 1, fmt.Errorf("becoming a child subreaper: %w", err)
	}
	// The name lets watchers, ps and tests tell the keeper from a watcher.
	if err := os.WriteFile("/proc/self/comm", []byte(tracker.KeeperComm), 0); err != nil {
		return 1, fmt.Errorf("naming the keeper: %w", err)
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	if !cfg.Successor { // a successor keeps the runs its watcher had, writable or not
		if err := tracker.CheckWritable(cfg.Root); err != nil {
			return 1, err
		}
	}
	k := &keeper{cfg: cfg, log: log.New(lineWriter{cfg.Log}, "keeper: ", log.LstdFlags|log.Lmicroseconds),
		held: make(map[int]*heldProc), heldExited: make(chan *heldProc, len(cfg.Held)), unrecorded: make(map[int]bool)}
	k.hold(cfg.Held)
	sigchld := make(chan os.Signal, 1)
	signal.Notify(sigchld, syscall.SIGCHLD)
	defer signal.Stop(sigchld)
	if err := k.takeCharge(); err != nil {
		if !cfg.Successor {
			return cfg.Refused, err
		}
		// Its children and held processes are runs that only it can
		// keep: it keeps them, and leaves the root to that keeper.
		k.log.Printf("%v; keeping the runs this process holds until they end", err)
		k.done = true
	} else if err := k.startWatcher(); err != nil {
		k.releaseCharge()
		return 1, err
	}
	defer k.releaseCharge()
	for {
		if k.done {
			k.releaseCharge()
		}
		if k.reap() {
			return k.exitCode, nil
		}
		var restart, retry <-chan time.Time
		if k.restart != nil {
			restart = k.restart.C
		}
		if k.retry != nil {
			retry = k.retry.C
		}
		select {
		case <-sigchld:
		case <-retry:
			k.retry = nil
			k.retryUnrecorded()
		case p := <-k.heldExited:
			k.heldEnded(p)
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
	held, args := k.passHeld(len(files))
	files = append(files, held...)
	// Its own process group: Ctrl-C at a terminal reaches the keeper only,
	// which passes it on once.
	p, err := os.StartProcess(k.cfg.Path, append(slices.Clone(k.cfg.Args), args...), &os.ProcAttr{
		Files: files, Sys: &syscall.SysProcAttr{Setpgid: true},
	})
	for _, f := range held {
		f.Close()
	}
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
	l := newLock(layout.Root(k.cfg.Root).KeeperLock())
	got, err := l.TryLock()
	if err != nil {
		return fmt.Errorf("%s: %w", layout.Root(k.cfg.Root).KeeperLock(), err)
	}
	if !got {
		if running, pid, _ := tracker.ProbeWatcher(k.cfg.Root); running {
			return fmt.Errorf("%w on %s (pid %d)", ErrRunning, k.cfg.Root, pid)
		}
		return fmt.Errorf("%w of %s (pid %d) and restarts its watcher; run: tend up", ErrKeeperRunning, k.cfg.Root, tracker.ReadPID(layout.Root(k.cfg.Root).KeeperPID()))
	}
	k.charge = l
	if err := os.WriteFile(layout.Root(k.cfg.Root).KeeperPID(), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		l.Unlock()
		return err
	}
	return nil
}

func (k *keeper) releaseCharge() {
	if k.charge == nil {
		return
	}
	os.Remove(layout.Root(k.cfg.Root).KeeperPID())
	k.charge.Unlock()
	k.charge = nil
}

// restartWatcher starts a new watcher, unless another one has taken the
// root meanwhile: that one adopts the runs this keeper keeps.
func (k *keeper) restartWatcher() {
	if k.done || k.watcher != 0 {
		return
	}
	if running, pid, _ := tracker.ProbeWatcher(k.cfg.Root); running {
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
//
// A leader whose record cannot be written (a full disk) is left unreaped,
// its status kept by the kernel, and tried again in a second: reaped, its
// status would live only in the keeper's memory, and a watcher started
// meanwhile would find neither the process nor its record and take the
// run for lost.
func (k *keeper) reap() (finished bool) {
	for {
		pid, e, err := k.peekChild()
		if errors.Is(err, unix.ECHILD) {
			return k.done && k.restart == nil && len(k.held) == 0
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
				k.log.Printf("pid %d: %v (left unreaped, its status with the kernel; retrying every second)", pid, err)
				k.unrecorded[pid] = true
				k.retryLater()
				continue
			}
		}
		procfs.ReapChild(pid)
	}
}

func (k *keeper) retryLater() {
	if k.retry == nil {
		k.retry = time.NewTimer(time.Second)
	}
}

// retryUnrecorded tries again to write the exit records of the leaders
// left unreaped (see reap), and reaps those it wrote.
func (k *keeper) retryUnrecorded() {
	for pid := range k.unrecorded {
		e, ok, err := procfs.PeekChild(pid)
		st, serr := procfs.ReadStat(pid)
		if err != nil || !ok || serr != nil {
			delete(k.unrecorded, pid) // not a child that exited: reap finds it if it is
			continue
		}
		if writeExitRecord(k.cfg.Root, pid, st.StartTime, e) != nil {
			continue // logged once, when it first failed
		}
		k.log.Printf("pid %d: its exit record is written now", pid)
		delete(k.unrecorded, pid)
		procfs.ReapChild(pid)
	}
	if len(k.unrecorded) > 0 {
		k.retryLater()
	}
}

// scanEvery is how often, at most, peekChild reads /proc for the children
// hidden behind one left unreaped.
const scanEvery = 100 * time.Millisecond

// peekChild is procfs.PeekAnyChild, past the children left unreaped
// (unrecorded): the kernel would report the first of them each time, and
// hide the others. While there are some, the children are found in /proc,
// every process's stat read: not more often than scanEvery, as every
// SIGCHLD wakes the keeper, and the runs and the orphans it adopts make
// as many as their owners like (a child stopped and continued in a loop
// sends two each time), each a scan of the whole system. A child found
// later waits for the next retry (armed while any is unrecorded), at most
// a second more.
func (k *keeper) peekChild() (int, procfs.Exit, error) {
	pid, e, err := procfs.PeekAnyChild()
	if err != nil || pid == 0 || !k.unrecorded[pid] {
		return pid, e, err
	}
	for len(k.found) > 0 { // those the last scan found first
		pid := k.found[0]
		k.found = k.found[1:]
		if e, ok, err := procfs.PeekChild(pid); err == nil && ok && !k.unrecorded[pid] {
			return pid, e, nil
		}
	}
	if time.Since(k.scanned) < scanEvery {
		return 0, procfs.Exit{}, nil
	}
	k.scanned = time.Now()
	all, err := procfs.All()
	if err != nil {
		return 0, procfs.Exit{}, err
	}
	for _, p := range all {
		if p.PPID == os.Getpid() && p.State == 'Z' && !k.unrecorded[p.PID] {
			k.found = append(k.found, p.PID)
		}
	}
	if len(k.found) == 0 {
		return 0, procfs.Exit{}, nil // only those left unreaped: none new
	}
	return k.peekChild()
}

// passHeld returns copies of the pidfds of the processes this keeper
// holds and has not recorded yet, for a watcher it starts to have from
// file descriptor first on, and the arguments that tell it which is which
// (tend-watch watcher --held). The watcher adopts their runs through them: a
// process reaped by init before the keeper has written its record can be
// found by no other means, and its status would be lost if the keeper
// died next.
func (k *keeper) passHeld(first int) (files []*os.File, args []string) {
	for _, p := range k.held {
		fd, err := p.h.Dup()
		if err != nil {
			k.log.Printf("%v", err)
			continue
		}
		files = append(files, os.NewFile(uintptr(fd), fmt.Sprintf("pidfd:%d", p.PID)))
		args = append(args, "--held", Held{FD: first + len(files) - 1, PID: p.PID, Start: p.Start}.String())
	}
	return files, args
}

// hold starts waiting for the processes in held.
func (k *keeper) hold(held []Held) {
	for _, hp := range held {
		h, err := procfs.NewHandle(hp.FD, hp.PID)
		if err != nil {
			k.log.Printf("%v", err)
			continue
		}
		p := &heldProc{Held: hp, h: h}
		k.held[hp.PID] = p
		go func() {
			h.WaitExited()
			k.heldExited <- p
		}()
	}
	switch n := len(k.held); {
	case n == 1:
		k.log.Printf("holding 1 adopted run that is not its child, to record its end")
	case n > 1:
		k.log.Printf("holding %d adopted runs that are not its children, to record their ends", n)
	}
}

// heldEnded writes the exit record of held process p, which has exited,
// once its parent has reaped it; until then it looks again now and then.
func (k *keeper) heldEnded(p *heldProc) {
	e, ok, err := p.h.ExitInfo()
	switch {
	case err != nil:
		k.log.Printf("pid %d: its exit status is lost: %v", p.PID, err)
	case !ok:
		p.delay = min(max(2*p.delay, 10*time.Millisecond), time.Second)
		time.AfterFunc(p.delay, func() { k.heldExited <- p })
		return
	default:
		if err := writeExitRecord(k.cfg.Root, p.PID, p.Start, e); err != nil {
			// Its status is read from the pidfd, kept open, again.
			if p.delay < time.Second {
				k.log.Printf("pid %d: %v (retrying every second)", p.PID, err)
			}
			p.delay = time.Second
			time.AfterFunc(time.Second, func() { k.heldExited <- p })
			return
		}
	}
	p.h.Close()
	delete(k.held, p.PID)
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
	argv := append(slices.Clone(w.cfg.BecomeKeeper), w.holdArgs()...)
	err := syscall.Exec("/proc/self/exe", argv, os.Environ())
	w.log.Printf("becoming the keeper: %v", err)
	w.keeper = 0
}

// holdArgs passes the pidfds of the runs this watcher adopted, which are
// not its children, on to the keeper it is about to become: the keeper
// that died was the parent of some, and their exit statuses would
// otherwise be lost if this process died too, even after a new watcher
// adopted them again. The keeper records their ends from the pidfds
// (Held). The runs it started itself stay its children across the exec.
func (w *watcher) holdArgs() []string {
	var args []string
	for _, r := range w.runs {
		if !r.adopted || r.proc == nil {
			continue
		}
		fd, err := r.proc.Inherit()
		if err != nil {
			w.log.Printf("run %s: %v", r.st.ID, err)
			continue
		}
		args = append(args, "--hold", Held{FD: fd, PID: r.st.PID, Start: r.st.ProcStart}.String())
	}
	return args
}
