package tend

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/gofrs/flock"
	"github.com/tendhq/tend/procfs"
	"github.com/tendhq/tend/tracker"
	"github.com/tendhq/tend/tracker/layout"
)

// WatcherOptions say how a client starts a watcher: as "tend watch" in
// the background, in a session of its own, logging to ROOT/watcher.log.
type WatcherOptions struct {
	// Executable is the tend binary; "" is the running program, which
	// must then be tend itself.
	Executable string
	// Args are more arguments for "tend watch" (--max-running 2, ...).
	Args []string
	// Started, if set, is called with the watcher's PID when the client
	// started one (and not when one was running already).
	Started func(pid int)
}

// readyTimeout bounds how long EnsureWatcher waits for a watcher to be
// ready, recovery of earlier runs included.
const readyTimeout = 60 * time.Second

// exitWatcherRefused is the exit code of "tend watch" when another watcher
// holds the root (tend's "refused").
const exitWatcherRefused = 4

// autoStart starts a watcher as the client's options say, unless one runs
// or the client starts none.
func (c *Client) autoStart(ctx context.Context) error {
	if c.watch == nil {
		return nil
	}
	if running, _, err := tracker.ProbeWatcher(c.root); err == nil && running {
		return nil
	}
	_, _, err := c.EnsureWatcher(ctx, *c.watch)
	return err
}

// Watching reports whether a watcher holds the root (by its lock: a PID
// file may be stale).
func (c *Client) Watching() (bool, error) {
	running, _, err := tracker.ProbeWatcher(c.root)
	return running, err
}

// EnsureWatcher starts a keeper and watcher in the background unless a
// watcher runs, and returns once the watcher takes requests, with its PID
// and whether this call started it. Concurrent callers, in any process,
// take turns on ROOT/up.lock, so exactly one starts. A keeper whose
// watcher died is told to start the next one at once, rather than racing
// with a second keeper.
//
// A root that someone other than this user (and root) could change is
// refused with ErrRefused before anything is made in it or written to its
// log (tracker.CheckSafe): sudo tend in a teammate's checkout starts no
// watcher there.
func (c *Client) EnsureWatcher(ctx context.Context, opts WatcherOptions) (pid int, started bool, err error) {
	if err := tracker.CheckSafe(c.root, os.Geteuid()); err != nil {
		return 0, false, errorf(ErrRefused, "%v", err)
	}
	if err := c.dir.Make(); err != nil {
		return 0, false, err
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	l := flock.New(layout.Root(c.root).UpLock(), flock.SetFlag(os.O_CREATE|os.O_RDONLY|syscall.O_NOFOLLOW))
	if _, err := l.TryLockContext(ctx, 10*time.Millisecond); err != nil {
		return 0, false, fmt.Errorf("%s: %w", l.Path(), err)
	}
	defer l.Unlock()
	var hurried time.Time
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if info, ok := c.ReadyWatcher(); ok {
			if started && opts.Started != nil {
				opts.Started(info.PID)
			}
			return info.PID, started, nil
		}
		if running, _, err := tracker.ProbeWatcher(c.root); err != nil || !running {
			if k, _ := c.LiveKeeper(); k != nil {
				if time.Since(hurried) > time.Second {
					k.Signal(syscall.SIGUSR2)
					hurried, started = time.Now(), true
				}
				k.Close()
			} else if err := tracker.CheckWritable(c.root); err != nil {
				return 0, false, err
			} else if err := c.spawnKeeper(ctx, opts); err != nil {
				return 0, false, err
			} else {
				started = true
			}
		} // else starting, or recovering the runs of the last one
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return 0, false, fmt.Errorf("no watcher got ready on %s within %v; see %s", c.root, readyTimeout, c.logPath())
			}
			return 0, false, ctx.Err()
		case <-tick.C:
		}
	}
}

// ReadyWatcher returns what the watcher holding the root says of itself
// (watcher.json), if it is ready: it has written that, and it is alive.
func (c *Client) ReadyWatcher() (tracker.WatcherInfo, bool) {
	running, _, err := tracker.ProbeWatcher(c.root)
	if err != nil || !running {
		return tracker.WatcherInfo{}, false
	}
	return c.LiveInfo()
}

// LiveInfo reads the root's watcher.json if the watcher it names is alive:
// one that died leaves its watcher.json behind, until the next one
// replaces it.
func (c *Client) LiveInfo() (tracker.WatcherInfo, bool) {
	info, err := tracker.ReadWatcherInfo(c.root)
	if err != nil {
		return info, false
	}
	st, err := procfs.ReadStat(info.PID)
	return info, err == nil && st.State != 'Z' && st.Comm == tracker.WatcherComm
}

// LiveKeeper returns a handle on the keeper in charge of the root, if one
// is and it is still the process that wrote keeper.pid, and its PID. The
// caller closes the handle.
func (c *Client) LiveKeeper() (*procfs.Handle, int) {
	running, pid, err := tracker.ProbeKeeper(c.root)
	if err != nil || !running || pid == 0 {
		return nil, 0
	}
	st, err := procfs.ReadStat(pid)
	if err != nil || st.Comm != tracker.KeeperComm {
		return nil, 0
	}
	h, err := procfs.Open(pid, st.StartTime)
	if err != nil {
		return nil, 0
	}
	return h, pid
}

func (c *Client) logPath() string { return layout.Root(c.root).WatcherLog() }

// spawnKeeper runs "tend watch" in a new session, detached, with its output
// appended to watcher.log, and waits for its watcher to say it is ready,
// or for the keeper to give up (another may have won the root meanwhile).
func (c *Client) spawnKeeper(ctx context.Context, opts WatcherOptions) error {
	// The watcher's user's alone: it logs what runs do, whoever they are.
	logf, err := os.OpenFile(c.logPath(), os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer readyR.Close()
	exe, argv0 := opts.Executable, opts.Executable
	if exe == "" {
		if exe, err = os.Executable(); err != nil {
			return err
		}
		argv0 = os.Args[0]
		if strings.Contains(argv0, "/") {
			// The keeper starts in /, and finds the programs installed
			// with it beside the name it was run by.
			if abs, err := filepath.Abs(argv0); err == nil {
				argv0 = abs
			}
		}
	}
	cmd := exec.Command(exe)
	cmd.Args = append([]string{argv0, "--root", c.root, "watch", "--ready-fd", "3"}, opts.Args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{readyW}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	readyW.Close()
	if err != nil {
		return fmt.Errorf("starting a watcher: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	if dl, ok := ctx.Deadline(); ok {
		readyR.SetReadDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { readyR.SetReadDeadline(time.Now()) })
	defer stop()
	line, _ := bufio.NewReader(readyR).ReadString('\n')
	if strings.TrimSpace(line) == "ready" {
		return nil
	}
	// The first watcher is gone without being ready. Its keeper either
	// gives up (it cannot start, or another watcher won the root) or
	// restarts it, and then stays.
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() == exitWatcherRefused {
			return nil // another watcher won the root; it will do
		}
	case <-time.After(time.Second):
		return nil
	}
	return fmt.Errorf("the watcher did not start on %s; see %s:\n%s", c.root, c.logPath(), tail(c.logPath(), 5))
}

// tail returns the last n lines of a file, indented.
func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	lines = lines[max(0, len(lines)-n):]
	return "  " + strings.Join(lines, "\n  ")
}
