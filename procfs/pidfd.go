package procfs

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Handle is a pidfd: a reference to one process that stays valid, and never
// refers to another process, even after the PID is reused. Signals sent
// through it reach that process or fail.
type Handle struct {
	f   *os.File // nonblocking, so Go's poller can wait on it without a thread
	pid int
}

// ErrNotSame means the PID now belongs to a process other than the one
// recorded: the recorded one has ended and its PID was reused.
var ErrNotSame = errors.New("pid now belongs to another process")

// NewHandle wraps a pidfd that the caller owns (for example one returned by
// SysProcAttr.PidFD). The Handle takes ownership and closes it in Close.
func NewHandle(pidfd, pid int) (*Handle, error) {
	flags, err := unix.FcntlInt(uintptr(pidfd), unix.F_GETFL, 0)
	if err == nil {
		_, err = unix.FcntlInt(uintptr(pidfd), unix.F_SETFL, flags|unix.O_NONBLOCK)
	}
	if err != nil {
		unix.Close(pidfd)
		return nil, fmt.Errorf("pidfd of %d: %w", pid, err)
	}
	return &Handle{f: os.NewFile(uintptr(pidfd), fmt.Sprintf("pidfd:%d", pid)), pid: pid}, nil
}

// Open returns a Handle on process pid if, and only if, it is still the
// process that started at startTime (it may have exited and not yet been
// reaped: WaitExited then returns at once). The identity is checked after
// the pidfd is open, so the handle cannot refer to a later owner of the PID.
func Open(pid int, startTime uint64) (*Handle, error) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil, fmt.Errorf("pid %d: %w", pid, ErrNoProcess)
		}
		return nil, fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	h, err := NewHandle(fd, pid)
	if err != nil {
		return nil, err
	}
	st, err := ReadStat(pid)
	if err == nil && st.StartTime != startTime {
		err = fmt.Errorf("pid %d started at tick %d, not %d: %w", pid, st.StartTime, startTime, ErrNotSame)
	}
	if err != nil {
		h.Close()
		return nil, err
	}
	return h, nil
}

// PID returns the process ID the handle refers to.
func (h *Handle) PID() int { return h.pid }

// Signal sends sig to the process itself (not its group). It fails with
// ESRCH once the process has exited, even if its PID was reused.
func (h *Handle) Signal(sig syscall.Signal) error {
	conn, err := h.f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = conn.Control(func(fd uintptr) { serr = unix.PidfdSendSignal(int(fd), sig, nil, 0) })
	if err != nil {
		return err
	}
	return serr
}

// WaitExited blocks until the process has exited (it may still be an
// unreaped zombie). It parks a goroutine on Go's poller, not an OS thread,
// so thousands of waits cost only their goroutines.
func (h *Handle) WaitExited() error {
	conn, err := h.f.SyscallConn()
	if err != nil {
		return err
	}
	return conn.Read(func(fd uintptr) bool {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(pfd, 0)
		return err == nil && n > 0 // false: not yet, wait for readiness
	})
}

// Exited reports whether the process has exited (a zombie has, though a
// signal to it still succeeds).
func (h *Handle) Exited() bool {
	conn, err := h.f.SyscallConn()
	if err != nil {
		return true
	}
	exited := false
	conn.Control(func(fd uintptr) {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(pfd, 0)
		exited = err == nil && n > 0
	})
	return exited
}

// Exit is how a child process ended.
type Exit struct {
	Code   int            // exit code, if the process exited
	Signal syscall.Signal // the signal that killed it, if one did (Code is then -1)
	Core   bool
	// CPU is the CPU time (user and system) the process and the children
	// it waited for used, as the kernel reports it to the waiting parent
	// (Peek and Reap; zero where the exit came from elsewhere).
	CPU time.Duration
}

// sigchldInfo is what the kernel's siginfo_t says of a child's end: its
// si_code, si_pid and si_status.
type sigchldInfo struct {
	Code, PID, Status int32
}

// sigchldFields is where si_pid is in a siginfo_t: after three ints
// (si_signo, si_errno, si_code), at the alignment of the union that
// follows them, which holds pointers: 16 on 64-bit, 12 on 32-bit. si_uid
// and si_status follow it (include/uapi/asm-generic/siginfo.h).
const sigchldFields = (3*4 + unsafe.Alignof(uintptr(0)) - 1) &^ (unsafe.Alignof(uintptr(0)) - 1)

// readSigchld reads a child's end from info as the kernel filled it in.
func readSigchld(info *unix.Siginfo) sigchldInfo {
	b := (*[unsafe.Sizeof(unix.Siginfo{})]byte)(unsafe.Pointer(info))
	word := func(off uintptr) int32 { return *(*int32)(unsafe.Pointer(&b[off])) }
	return sigchldInfo{Code: word(8), PID: word(sigchldFields), Status: word(sigchldFields + 8)}
}

// si_code values for a child that ended (include/uapi/asm-generic/siginfo.h).
const (
	cldExited = 1
	cldKilled = 2
	cldDumped = 3
)

func decodeExit(info *unix.Siginfo) (Exit, bool, error) {
	ci := readSigchld(info)
	switch {
	case ci.PID == 0:
		return Exit{}, false, nil // WNOHANG on a blocking pidfd: still running
	case ci.Code == cldExited:
		return Exit{Code: int(ci.Status)}, true, nil
	case ci.Code == cldKilled || ci.Code == cldDumped:
		return Exit{Code: -1, Signal: syscall.Signal(ci.Status), Core: ci.Code == cldDumped}, true, nil
	}
	return Exit{}, false, fmt.Errorf("waitid pid %d: unexpected si_code %d", ci.PID, ci.Code)
}

// Peek returns how the child ended without reaping it, so its PID (and so
// its process-group ID) stays reserved until Reap. ok is false while it
// still runs. Only the parent of the process can peek or reap.
func (h *Handle) Peek() (e Exit, ok bool, err error) {
	return h.waitid(unix.WEXITED | unix.WNOHANG | unix.WNOWAIT)
}

// Reap collects the exited child, releasing its PID.
func (h *Handle) Reap() (Exit, error) {
	e, _, err := h.waitid(unix.WEXITED)
	return e, err
}

func (h *Handle) waitid(options int) (Exit, bool, error) {
	conn, err := h.f.SyscallConn()
	if err != nil {
		return Exit{}, false, err
	}
	var info unix.Siginfo
	var usage unix.Rusage // filled in with WNOWAIT too, so Peek has it
	var werr error
	err = conn.Control(func(fd uintptr) {
		for {
			werr = unix.Waitid(unix.P_PIDFD, int(fd), &info, options, &usage)
			if werr != unix.EINTR {
				return
			}
		}
	})
	if err != nil {
		return Exit{}, false, err
	}
	if werr == unix.EAGAIN { // a nonblocking pidfd says "not yet" this way
		return Exit{}, false, nil
	}
	if werr != nil {
		return Exit{}, false, fmt.Errorf("waitid pid %d: %w", h.pid, werr)
	}
	e, ok, err := decodeExit(&info)
	e.CPU = time.Duration(usage.Utime.Nano() + usage.Stime.Nano())
	return e, ok, err
}

// ErrNoExitInfo means the kernel keeps no exit status for a process that
// is not the caller's child (PIDFD_INFO_EXIT came with Linux 6.15).
var ErrNoExitInfo = errors.New("the kernel keeps no exit status for pidfds (Linux 6.15 or newer does)")

// ExitInfo returns how the process ended, whoever its parent is, once its
// parent has reaped it: the kernel keeps the status for every pidfd that
// was open when the process was reaped (Linux 6.15, PIDFD_INFO_EXIT). ok
// is false while it runs or waits, a zombie, to be reaped. The error
// wraps ErrNoExitInfo where the kernel does not keep it.
func (h *Handle) ExitInfo() (e Exit, ok bool, err error) {
	conn, err := h.f.SyscallConn()
	if err != nil {
		return Exit{}, false, err
	}
	info := unix.PidfdInfo{Mask: unix.PIDFD_INFO_EXIT}
	var ierr error
	if err := conn.Control(func(fd uintptr) { ierr = unix.IoctlPidfdInfo(int(fd), &info) }); err != nil {
		return Exit{}, false, err
	}
	switch {
	case ierr == unix.ENOTTY || ierr == unix.EINVAL || ierr == unix.ESRCH:
		// No PIDFD_GET_INFO (before 6.13), or a process reaped with no
		// status kept for it (6.13 and 6.14).
		return Exit{}, false, fmt.Errorf("pid %d: %w", h.pid, ErrNoExitInfo)
	case ierr != nil:
		return Exit{}, false, fmt.Errorf("pidfd info of %d: %w", h.pid, ierr)
	case info.Mask&unix.PIDFD_INFO_EXIT == 0:
		return Exit{}, false, nil
	}
	return decodeStatus(unix.WaitStatus(info.Exit_code)), true, nil
}

// decodeStatus decodes a wait status, as wait(2) gives it.
func decodeStatus(ws unix.WaitStatus) Exit {
	if ws.Signaled() {
		return Exit{Code: -1, Signal: ws.Signal(), Core: ws.CoreDump()}
	}
	return Exit{Code: ws.ExitStatus()}
}

// Inherit makes the pidfd survive an exec of the calling process, and
// returns its number, for the program it execs to take it over with
// NewHandle.
func (h *Handle) Inherit() (int, error) {
	conn, err := h.f.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd, ferr := -1, error(nil)
	if err := conn.Control(func(p uintptr) {
		fd = int(p)
		_, ferr = unix.FcntlInt(p, unix.F_SETFD, 0)
	}); err != nil {
		return -1, err
	}
	if ferr != nil {
		return -1, fmt.Errorf("pidfd of %d: %w", h.pid, ferr)
	}
	return fd, nil
}

// Dup returns a new pidfd, close-on-exec, on the same process, for the
// caller to pass to a child it starts.
func (h *Handle) Dup() (int, error) {
	conn, err := h.f.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd, derr := -1, error(nil)
	if err := conn.Control(func(p uintptr) { fd, derr = unix.FcntlInt(p, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return -1, err
	}
	if derr != nil {
		return -1, fmt.Errorf("pidfd of %d: %w", h.pid, derr)
	}
	return fd, nil
}

// Close releases the pidfd. It does not signal or reap the process.
func (h *Handle) Close() error { return h.f.Close() }

// PeekAnyChild returns one exited child of the calling process, and how it
// ended, without reaping it. pid is 0 if children exist but none has
// exited; err wraps ECHILD if there are no children at all. It suits only a
// process that reaps every child itself (a keeper): a child kept unreaped
// on purpose would be returned again and again.
func PeekAnyChild() (pid int, e Exit, err error) {
	var info unix.Siginfo
	for {
		err = unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return 0, Exit{}, fmt.Errorf("waitid: %w", err)
	}
	e, ok, err := decodeExit(&info)
	if err != nil || !ok {
		return 0, Exit{}, err
	}
	return int(readSigchld(&info).PID), e, nil
}

// PeekChild is PeekAnyChild for child pid alone: ok is set if it has
// exited, and it is left unreaped.
func PeekChild(pid int) (e Exit, ok bool, err error) {
	var info unix.Siginfo
	for {
		err = unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return Exit{}, false, fmt.Errorf("waitid %d: %w", pid, err)
	}
	return decodeExit(&info)
}

// ReapChild reaps child pid if it has exited. It reports whether it did.
func ReapChild(pid int) bool {
	for {
		got, err := unix.Wait4(pid, nil, unix.WNOHANG, nil)
		if err == unix.EINTR {
			continue
		}
		return err == nil && got == pid
	}
}
