package daemon

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/tendhq/tend/cmd/internal/watchargs"
	"github.com/tendhq/tend/tracker"
	"github.com/tendhq/tend/watcher"
	"github.com/tendhq/tend/watcher/config"
	"golang.org/x/sys/unix"
)

type watchCmd struct {
	watchargs.Flags
	ReadyFD int `default:"-1" help:"Write a line to this file descriptor once the watcher takes requests."`
	// Set by a watcher that becomes the keeper (watcher.Config.BecomeKeeper).
	Successor bool     `help:"This process was a watcher whose keeper died: keep its runs whatever happens."`
	Hold      []string `sep:"none" placeholder:"FD:PID:START" help:"Record the end of this process, by the pidfd FD inherited (repeatable)."`
}

// settings are the watcher's settings that f sets.
func settings(f watchargs.Flags) config.Settings {
	l := config.Default
	l.MaxRunning, l.MaxPerSession = f.MaxRunning, f.MaxPerSession
	if f.Durability != "" {
		l.Durability = tracker.Durability(f.Durability) // kong checked it is one of the two
	}
	return l
}

// Run makes this process the keeper; the watcher is a child of it, running
// this same program (the hidden "watcher" command).
func (c *watchCmd) Run(e *env) error {
	closeOnExec()
	oneProc()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(sigs)
	args := append([]string{os.Args[0], "--root", e.root, "watcher"}, c.Args()...)
	var ready *os.File
	if c.ReadyFD >= 0 {
		ready = os.NewFile(uintptr(c.ReadyFD), "ready")
		args = append(args, "--ready-fd", "3")
	}
	var held []watcher.Held
	for _, s := range c.Hold {
		h, err := watcher.ParseHeld(s)
		if err != nil {
			return exitf(watchargs.ExitUsage, "--hold: %v", err)
		}
		held = append(held, h)
	}
	code, err := watcher.Keep(watcher.KeeperConfig{
		Root: e.root, Log: e.stderr, Ready: ready, Signals: sigs, Refused: watchargs.ExitRefused, CannotStart: watchargs.ExitCannotStart,
		Held: held, Successor: c.Successor,
		// /proc/self/exe is this very program even if its file has been
		// replaced meanwhile, so a restarted watcher matches its keeper.
		Path: "/proc/self/exe", Args: args,
	})
	if errors.Is(err, watcher.ErrRunning) || errors.Is(err, watcher.ErrKeeperRunning) {
		return exitf(watchargs.ExitRefused, "%v", err)
	}
	if err != nil {
		return err
	}
	if code != 0 {
		return exitf(code, "")
	}
	return nil
}

// watcherCmd is the watcher proper, which a keeper runs.
type watcherCmd struct {
	watchargs.Flags
	ReadyFD int      `default:"-1"`
	Held    []string `sep:"none" placeholder:"FD:PID:START" help:"A pidfd the keeper holds and passes on, as FD (repeatable)."`
}

func (c *watcherCmd) Run(e *env) error {
	closeOnExec()
	forkProcs := 0
	if oneProc() {
		forkProcs = 2 // docs/performance.md, round 10
	}
	stop := make(chan os.Signal, 2)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR1)
	defer signal.Stop(stop)
	cfg := watcher.Config{
		Root: e.root, Log: e.stderr, Settle: c.Settle, Stop: stop, Version: e.version, Settings: settings(c.Flags),
		BecomeKeeper: append([]string{os.Args[0], "--root", e.root, "watch", "--successor"}, c.Args()...),
		NetCheck:     []string{os.Args[0], "--root", "/", "health-check"},
		ForkProcs:    forkProcs,
	}
	if steps := os.Getenv("TEND_TEST_CRASH_AT"); steps != "" {
		cfg.CrashAt = strings.Split(steps, ",")
	}
	cfg.RenameNewAnywhere = os.Getenv("TEND_TEST_RENAME_NEW") == "1"
	cfg.FailSyncfs = os.Getenv("TEND_TEST_FAIL_SYNCFS") == "1"
	cfg.Boot = os.Getenv("TEND_TEST_BOOT_ID") // a machine restarted, for the tests
	if c.ReadyFD >= 0 {
		cfg.Ready = os.NewFile(uintptr(c.ReadyFD), "ready")
	}
	for _, s := range c.Held {
		h, err := watcher.ParseHeld(s)
		if err != nil {
			return exitf(watchargs.ExitUsage, "--held: %v", err)
		}
		cfg.Held = append(cfg.Held, h)
	}
	if path := os.Getenv("TEND_CPUPROFILE"); path != "" {
		stopProfile, perr := profileCPU(path)
		if perr != nil {
			return perr
		}
		defer stopProfile()
	}
	err := watcher.Run(cfg)
	switch {
	case errors.Is(err, watcher.ErrRunning):
		return exitf(watchargs.ExitRefused, "%v", err)
	case errors.Is(err, watcher.ErrCannotStart):
		return exitf(watchargs.ExitCannotStart, "%v", err)
	}
	return err
}

// oneProc runs this process's goroutines on one P, unless GOMAXPROCS says
// otherwise, and reports whether it did. The watcher and the keeper are
// each one event loop: a second P only spins looking for work and hands
// goroutines across threads (futex and epoll calls at every event), and
// that CPU is taken from the runs on the same cores. Measured with make
// bench on 2 cores: W1 on tmpfs about 8 % more jobs a second, W4 about
// 15 % faster. Blocking system calls still run beside the loop: the
// runtime gives the P to another thread while one waits in the kernel. A
// fork is not such a call (see watcher.Config.ForkProcs).
func oneProc() bool {
	if os.Getenv("GOMAXPROCS") != "" {
		return false
	}
	runtime.GOMAXPROCS(1)
	return true
}

// profileCPU writes the watcher's CPU profile to path until the returned
// function is called (TEND_CPUPROFILE, for docs/performance.md's work).
func profileCPU(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("TEND_CPUPROFILE: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("TEND_CPUPROFILE %s: %w", path, err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// closeOnExec marks every descriptor above stderr close-on-exec: whatever
// the process that started the keeper left open without it (a CI runner's
// pipe, a lock, a log root may write) would else reach every run, whoever
// it runs as. The keeper and the watcher still use those they were given
// (--ready-fd); a child gets only what it is passed on purpose.
func closeOnExec() {
	unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
}
