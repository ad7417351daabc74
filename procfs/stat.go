// Package procfs reads what Linux says about processes in /proc: a
// process's identity (PID plus start time), its group and session, and the
// members of a process group. It also holds pidfd handles, through which a
// process can be signaled, waited for and reaped without any risk of PID
// reuse.
//
// Nothing here starts a process; what signals or reaps one does so only
// through a handle on it, or on a PID checked against its start time.
package procfs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Stat is the part of /proc/<pid>/stat that tend uses.
type Stat struct {
	PID   int
	Comm  string
	State byte // R, S, D, Z, T, ...
	PPID  int
	PGID  int
	SID   int
	// StartTime is the process's start time in clock ticks after boot. With
	// the PID it identifies one process for the life of a boot (BootID): a
	// reused PID has a later start time.
	StartTime uint64
	// CPU is the CPU time the process used, and CPUChildren that of the
	// children it waited for, in clock ticks (TicksPerSecond).
	CPU, CPUChildren uint64
	// RSSPages is its resident set size, in pages.
	RSSPages int64
}

// TicksPerSecond is the unit of /proc's clock ticks (USER_HZ), 100 on
// every Linux architecture.
const TicksPerSecond = 100

// ErrNoProcess means no process has the PID asked for.
var ErrNoProcess = errors.New("no such process")

// ReadStat reads /proc/<pid>/stat. It returns an error wrapping ErrNoProcess
// if the process does not exist.
func ReadStat(pid int) (Stat, error) {
	var buf [512]byte
	n, err := readSmall(fmt.Sprintf("/proc/%d/stat", pid), buf[:])
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return Stat{}, fmt.Errorf("pid %d: %w", pid, ErrNoProcess)
		}
		return Stat{}, err
	}
	st, err := ParseStat(buf[:n])
	if err != nil {
		return Stat{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return st, nil
}

// readSmall reads a /proc file that fits in buf, in one read, with raw
// system calls (os.Open registers a file with the runtime's poller: five
// more calls, at every exit of a run).
func readSmall(path string, buf []byte) (int, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	n, err := unix.Read(fd, buf)
	if err != nil {
		return 0, &os.PathError{Op: "read", Path: path, Err: err}
	}
	return n, nil
}

// readAll reads a /proc file whole, with raw system calls.
func readAll(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	return readFd(fd, path)
}

// readFd reads the /proc file open as fd (at path) whole.
func readFd(fd int, path string) ([]byte, error) {
	buf := make([]byte, 0, 512)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

// ParseStat parses the contents of a /proc/<pid>/stat file. The command
// name may hold spaces and parentheses, so it is delimited by the first "("
// and the last ")".
func ParseStat(b []byte) (Stat, error) {
	open := bytes.IndexByte(b, '(')
	closing := bytes.LastIndexByte(b, ')')
	if open < 1 || closing < open {
		return Stat{}, errors.New("malformed stat: no command name")
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil {
		return Stat{}, fmt.Errorf("malformed stat: pid: %w", err)
	}
	// Fields after the name, numbered as in proc(5) starting at 3 (state).
	fields := bytes.Fields(b[closing+1:])
	if len(fields) < 20 {
		return Stat{}, fmt.Errorf("malformed stat: %d fields after the name", len(fields))
	}
	field := func(n int) []byte { return fields[n-3] }
	st := Stat{PID: pid, Comm: string(b[open+1 : closing])}
	if len(field(3)) != 1 {
		return Stat{}, errors.New("malformed stat: state")
	}
	st.State = field(3)[0]
	ints := []struct {
		n   int
		dst *int
	}{{4, &st.PPID}, {5, &st.PGID}, {6, &st.SID}}
	for _, f := range ints {
		if *f.dst, err = strconv.Atoi(string(field(f.n))); err != nil {
			return Stat{}, fmt.Errorf("malformed stat: field %d: %w", f.n, err)
		}
	}
	if st.StartTime, err = strconv.ParseUint(string(field(22)), 10, 64); err != nil {
		return Stat{}, fmt.Errorf("malformed stat: start time: %w", err)
	}
	var ticks [4]uint64 // utime, stime, cutime, cstime
	for i := range ticks {
		ticks[i], _ = strconv.ParseUint(string(field(14+i)), 10, 64)
	}
	st.CPU, st.CPUChildren = ticks[0]+ticks[1], ticks[2]+ticks[3]
	if len(fields) >= 22 {
		st.RSSPages, _ = strconv.ParseInt(string(field(24)), 10, 64)
	}
	return st, nil
}

// All returns every process in /proc, from one pass. Processes that end
// during the pass are left out.
func All() ([]Stat, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("/proc: %w", err)
	}
	out := make([]Stat, 0, len(names))
	for _, name := range names {
		if name[0] < '0' || name[0] > '9' {
			continue
		}
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		if st, err := ReadStat(pid); err == nil {
			out = append(out, st)
		}
	}
	return out, nil
}

// GroupMembers returns the processes whose process group is one of pgids,
// keyed by group, from one pass over /proc. Zombies are left out: they are
// dead and only wait to be reaped. One pass serves many groups, so callers
// gather the groups they care about and ask once.
func GroupMembers(pgids map[int]bool) (map[int][]Stat, error) {
	all, err := All()
	out := make(map[int][]Stat)
	for _, st := range all {
		if st.State != 'Z' && pgids[st.PGID] {
			out[st.PGID] = append(out[st.PGID], st)
		}
	}
	return out, err
}

// Getenv returns the value of key in the environment that process pid was
// started with (or last exec'd with), as /proc/<pid>/environ shows it. A
// zombie, a kernel thread or another user's process shows none, and so may a
// process in the middle of exec: its parent can see the exec succeed a moment
// before the kernel has laid out the new environment.
func Getenv(pid int, key string) (string, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return "", false
	}
	prefix := []byte(key + "=")
	for kv := range bytes.SplitSeq(b, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, prefix); ok {
			return string(v), true
		}
	}
	return "", false
}

// Lookup returns the values of keys in the environment of process pid, as
// Getenv does each ("" for a key it lacks), from one read. ok is false if
// the environment cannot be read.
func Lookup(pid int, keys ...string) (values []string, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return nil, false
	}
	values = make([]string, len(keys))
	for kv := range bytes.SplitSeq(b, []byte{0}) {
		k, v, found := bytes.Cut(kv, []byte{'='})
		if !found {
			continue
		}
		for i, key := range keys {
			if values[i] == "" && string(k) == key {
				values[i] = string(v)
			}
		}
	}
	return values, true
}

// ThreadChildren returns the PIDs of the children of thread tid of this
// process: those it created, and the orphans it adopted as a subreaper's.
func ThreadChildren(tid int) ([]int, error) {
	b, err := readAll(fmt.Sprintf("/proc/self/task/%d/children", tid))
	if err != nil {
		return nil, err
	}
	var out []int
	for _, field := range bytes.Fields(b) {
		if child, err := strconv.Atoi(string(field)); err == nil {
			out = append(out, child)
		}
	}
	return out, nil
}

// Usage is what a group of processes uses right now.
type Usage struct {
	CPUSeconds float64 // CPU time used so far by the live members (and the children they waited for)
	RSSBytes   int64   // resident memory of the live members
	Procs      int     // live members
}

// GroupUsage returns the usage of each process group in pgids, from one
// pass over /proc.
func GroupUsage(pgids map[int]bool) (map[int]Usage, error) {
	all, err := All()
	out := make(map[int]Usage)
	page := int64(os.Getpagesize())
	for _, st := range all {
		if st.State == 'Z' || !pgids[st.PGID] {
			continue
		}
		u := out[st.PGID]
		u.CPUSeconds += float64(st.CPU+st.CPUChildren) / TicksPerSecond
		u.RSSBytes += st.RSSPages * page
		u.Procs++
		out[st.PGID] = u
	}
	return out, err
}

// Age returns how long ago a process started, given its start time in
// clock ticks since boot (Stat.StartTime). It is measured on the boot-time
// clock, which setting the wall clock does not move, so a watcher that
// adopts a run measures its timeout as the one that started it did.
func Age(startTicks uint64) time.Duration {
	var now unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &now); err != nil {
		return 0
	}
	started := time.Duration(startTicks) * (time.Second / TicksPerSecond)
	return max(0, time.Duration(now.Nano())-started)
}

// BootID returns the kernel's random ID of the current boot
// (/proc/sys/kernel/random/boot_id). A PID and a start time name one
// process only within a boot: a process of an earlier boot may have had
// the same pair as one alive now.
func BootID() (string, error) {
	var buf [64]byte
	n, err := readSmall("/proc/sys/kernel/random/boot_id", buf[:])
	if err != nil {
		return "", err
	}
	id := string(bytes.TrimSpace(buf[:n]))
	if id == "" {
		return "", errors.New("/proc/sys/kernel/random/boot_id is empty")
	}
	return id, nil
}

// Process is what ReadProcess reads of one process.
type Process struct {
	Stat
	// UID and RealUID are its effective and real users, as
	// /proc/<pid>/status says: not the owner of /proc/<pid>, which some
	// kernels make root for a process that made itself not dumpable
	// (PR_SET_DUMPABLE), as anyone may. A set-user-ID program (sudo,
	// run under another name) has an effective user its real one is not.
	UID, RealUID uint32
	// Args is its command line, as /proc/<pid>/cmdline holds it.
	Args []string
}

// ReadProcess reads the owner, the stat and the command line of process
// pid through one handle on /proc/<pid>, so that all three are of one
// process: if pid ends and is reused between the reads, the later reads
// fail rather than read the new process's. It returns an error wrapping
// ErrNoProcess if there is no such process.
func ReadProcess(pid int) (Process, error) {
	dir := fmt.Sprintf("/proc/%d", pid)
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return Process{}, fmt.Errorf("pid %d: %w", pid, ErrNoProcess)
		}
		return Process{}, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	status, err := readAt(fd, dir, "status")
	if err != nil {
		return Process{}, err
	}
	real, uid, err := uids(status)
	if err != nil {
		return Process{}, fmt.Errorf("%s/status: %w", dir, err)
	}
	b, err := readAt(fd, dir, "stat")
	if err != nil {
		return Process{}, err
	}
	st, err := ParseStat(b)
	if err != nil {
		return Process{}, fmt.Errorf("%s/stat: %w", dir, err)
	}
	cmdline, err := readAt(fd, dir, "cmdline")
	if err != nil {
		return Process{}, err
	}
	var args []string // none for a zombie, a kernel thread, one mid-exec
	if len(cmdline) > 0 {
		for a := range bytes.SplitSeq(bytes.TrimSuffix(cmdline, []byte{0}), []byte{0}) {
			args = append(args, string(a))
		}
	}
	return Process{Stat: st, UID: uid, RealUID: real, Args: args}, nil
}

// uids returns the real and effective users of a /proc/<pid>/status:
// the first two figures of its "Uid:" line (real, effective, saved, fs).
func uids(status []byte) (real, effective uint32, err error) {
	for line := range bytes.SplitSeq(status, []byte{'\n'}) {
		if rest, ok := bytes.CutPrefix(line, []byte("Uid:")); ok {
			if f := strings.Fields(string(rest)); len(f) >= 2 {
				r, err1 := strconv.ParseUint(f[0], 10, 32)
				e, err2 := strconv.ParseUint(f[1], 10, 32)
				return uint32(r), uint32(e), errors.Join(err1, err2)
			}
		}
	}
	return 0, 0, errors.New("no Uid line")
}

// readAt reads the file name of /proc/<pid>, open as dirfd (at dir), whole.
func readAt(dirfd int, dir, name string) ([]byte, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH) {
			return nil, fmt.Errorf("%s: %w", dir, ErrNoProcess)
		}
		return nil, &os.PathError{Op: "open", Path: dir + "/" + name, Err: err}
	}
	defer unix.Close(fd)
	return readFd(fd, dir+"/"+name)
}
