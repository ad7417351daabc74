package procfs

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func TestParseStat(t *testing.T) {
	tail := " 1 10 10 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 777 1000 100"
	tests := []struct {
		name, in string
		want     Stat
		wantErr  bool
	}{
		{"plain", "42 (sleep) S" + tail, Stat{PID: 42, Comm: "sleep", State: 'S', PPID: 1, PGID: 10, SID: 10, StartTime: 777, RSSPages: 100}, false},
		{"spaces and parens in name", "43 (a) b (c)) Z" + tail, Stat{PID: 43, Comm: "a) b (c)", State: 'Z', PPID: 1, PGID: 10, SID: 10, StartTime: 777, RSSPages: 100}, false},
		{"no name", "44 S 1", Stat{}, true},
		{"truncated", "45 (x) S 1 2", Stat{}, true},
		{"bad pid", "x (y) S" + tail, Stat{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseStat([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestReadStatSelfAndMissing(t *testing.T) {
	st, err := ReadStat(os.Getpid())
	if err != nil || st.PID != os.Getpid() || st.StartTime == 0 {
		t.Fatalf("ReadStat(self) = %+v, %v", st, err)
	}
	if _, err := ReadStat(1 << 30); !errors.Is(err, ErrNoProcess) {
		t.Fatalf("ReadStat(missing) err = %v, want ErrNoProcess", err)
	}
}

// ReadProcess reads a process's owner, stat and arguments (an empty one
// and one with spaces kept apart), and names a missing one.
func TestReadProcess(t *testing.T) {
	// (sleep itself would take "" and "a b" for bad intervals, and end.)
	cmd := exec.Command("sh", "-c", "sleep 60; :", "x", "", "a b")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	var p Process
	// Until its exec is done: the new comm comes a moment before the
	// new arguments.
	for deadline := time.Now().Add(10 * time.Second); p.Comm != "sh" || len(p.Args) == 0; {
		var err error
		if p, err = ReadProcess(cmd.Process.Pid); err != nil || time.Now().After(deadline) {
			t.Fatalf("ReadProcess = %+v, %v", p, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if p.PID != cmd.Process.Pid || p.UID != uint32(os.Geteuid()) || p.RealUID != uint32(os.Getuid()) || p.State == 'Z' || fmt.Sprintf("%q", p.Args) != `["sh" "-c" "sleep 60; :" "x" "" "a b"]` {
		t.Errorf("ReadProcess = %+v", p)
	}
	if _, err := ReadProcess(1 << 30); !errors.Is(err, ErrNoProcess) {
		t.Errorf("ReadProcess(missing) err = %v, want ErrNoProcess", err)
	}
}

// readSigchld finds si_code, si_pid and si_status where the kernel puts
// them: checked against a real child's end, read with waitid.
func TestReadSigchld(t *testing.T) {
	p, err := os.StartProcess("/bin/sh", []string{"sh", "-c", "exit 7"}, &os.ProcAttr{})
	if err != nil {
		t.Fatal(err)
	}
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, p.Pid, &info, unix.WEXITED, nil); err != nil {
		t.Fatal(err)
	}
	got := readSigchld(&info)
	if got != (sigchldInfo{Code: cldExited, PID: int32(p.Pid), Status: 7}) {
		t.Fatalf("readSigchld = %+v, want code %d, pid %d, status 7", got, cldExited, p.Pid)
	}
	if unsafe.Sizeof(unix.Siginfo{}) < sigchldFields+12 {
		t.Fatalf("unix.Siginfo is %d bytes, too small for si_status at %d", unsafe.Sizeof(unix.Siginfo{}), sigchldFields+8)
	}
}

// startChild starts sh -c script in its own process group and returns a
// Handle on it.
func startChild(t *testing.T, script string) *Handle {
	t.Helper()
	pidfd := -1
	p, err := os.StartProcess("/bin/sh", []string{"sh", "-c", script}, &os.ProcAttr{
		Sys: &syscall.SysProcAttr{Setpgid: true, PidFD: &pidfd},
	})
	if err != nil {
		t.Fatal(err)
	}
	pid := p.Pid
	p.Release() // the Handle, not os.Process, owns this child from here on
	h, err := NewHandle(pidfd, pid)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Signal(syscall.SIGKILL); h.Reap(); h.Close() })
	return h
}

func TestHandleExitCodeAndPeekKeepsPID(t *testing.T) {
	// The loop burns some CPU, which Peek and Reap report.
	h := startChild(t, "i=0; while [ $i -lt 30000 ]; do i=$((i+1)); done; exit 3")
	if err := h.WaitExited(); err != nil {
		t.Fatal(err)
	}
	e, ok, err := h.Peek()
	if err != nil || !ok || e.Code != 3 || e.Signal != 0 || e.CPU <= 0 {
		t.Fatalf("Peek = %+v, %v, %v; want code 3 and the CPU it used", e, ok, err)
	}
	// Not reaped: the zombie still holds its PID and group.
	if st, err := ReadStat(h.PID()); err != nil || st.State != 'Z' {
		t.Fatalf("after Peek, stat = %+v, %v; want a zombie", st, err)
	}
	if err := unix.Kill(-h.PID(), 0); err != nil {
		t.Fatalf("group of unreaped zombie: %v", err)
	}
	if r, err := h.Reap(); err != nil || r != e {
		t.Fatalf("Reap = %+v, %v; want what Peek said, %+v", r, err, e)
	}
	if _, err := ReadStat(h.PID()); !errors.Is(err, ErrNoProcess) {
		t.Fatalf("after Reap, stat err = %v", err)
	}
}

func TestHandleSignalAndPeekRunning(t *testing.T) {
	h := startChild(t, "exec sleep 100")
	if _, ok, err := h.Peek(); ok || err != nil {
		t.Fatalf("Peek of a running child = %v, %v", ok, err)
	}
	if err := h.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- h.WaitExited() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("child did not exit after SIGTERM")
	}
	e, err := h.Reap()
	if err != nil || e.Signal != syscall.SIGTERM || e.Code != -1 {
		t.Fatalf("Reap = %+v, %v; want SIGTERM", e, err)
	}
	if err := h.Signal(syscall.SIGTERM); !errors.Is(err, unix.ESRCH) {
		t.Fatalf("Signal after reap = %v, want ESRCH", err)
	}
}

func TestOpenChecksIdentity(t *testing.T) {
	h := startChild(t, "exec sleep 100")
	st, err := ReadStat(h.PID())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(h.PID(), st.StartTime+1); !errors.Is(err, ErrNotSame) {
		t.Fatalf("Open with wrong start time: %v, want ErrNotSame", err)
	}
	o, err := Open(h.PID(), st.StartTime)
	if err != nil {
		t.Fatalf("Open with right identity: %v", err)
	}
	o.Close()
}

func TestGroupMembers(t *testing.T) {
	h := startChild(t, "sleep 100 & sleep 100 & wait")
	deadline := time.Now().Add(10 * time.Second)
	for {
		m, err := GroupMembers(map[int]bool{h.PID(): true})
		if err != nil {
			t.Fatal(err)
		}
		if len(m[h.PID()]) == 3 { // sh and two sleeps
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %d has %d members, want 3", h.PID(), len(m[h.PID()]))
		}
		time.Sleep(10 * time.Millisecond)
	}
	unix.Kill(-h.PID(), syscall.SIGKILL)
}

func TestPeekAnyChildThenReap(t *testing.T) {
	h := startChild(t, "exit 7")
	if err := h.WaitExited(); err != nil {
		t.Fatal(err)
	}
	if !h.Exited() {
		t.Fatal("Exited() = false for an exited child")
	}
	for {
		pid, e, err := PeekAnyChild()
		if err != nil || pid == 0 {
			t.Fatalf("PeekAnyChild = %d, %+v, %v; want %d", pid, e, err, h.PID())
		}
		if pid != h.PID() {
			ReapChild(pid) // left over by an earlier test
			continue
		}
		if e.Code != 7 {
			t.Fatalf("PeekAnyChild = %d, %+v; want code 7", pid, e)
		}
		break
	}
	if !ReapChild(h.PID()) || ReapChild(h.PID()) {
		t.Fatalf("ReapChild(%d) did not reap exactly once", h.PID())
	}
}

func TestExitedWhileRunning(t *testing.T) {
	h := startChild(t, "exec sleep 100")
	if h.Exited() {
		t.Fatal("Exited() = true for a running child")
	}
}

func TestGetenv(t *testing.T) {
	h := startChild(t, "exec sleep 100")
	waitEnviron(t, h.PID())
	t.Setenv("TEND_PROCFS_TEST", "x=y")
	// A process's environ is the one it started with: the child's, not ours now.
	if v, ok := Getenv(h.PID(), "TEND_PROCFS_TEST"); ok {
		t.Fatalf("Getenv of a variable set after the child started = %q", v)
	}
	p, err := os.StartProcess("/bin/sleep", []string{"sleep", "100"}, &os.ProcAttr{Env: []string{"A=1", "TEND_RUN_ID=r-1", "B="}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { p.Kill(); p.Wait() }()
	waitEnviron(t, p.Pid)
	tests := []struct {
		key, want string
		ok        bool
	}{{"TEND_RUN_ID", "r-1", true}, {"B", "", true}, {"TEND_RUN", "", false}, {"C", "", false}}
	for _, tt := range tests {
		if v, ok := Getenv(p.Pid, tt.key); v != tt.want || ok != tt.ok {
			t.Errorf("Getenv(%s) = %q, %v; want %q, %v", tt.key, v, ok, tt.want, tt.ok)
		}
	}
}

// waitEnviron waits until process pid shows an environment: os.StartProcess
// returns once exec has begun, before the kernel has laid the new one out.
func waitEnviron(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err == nil && len(b) > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d shows no environment after 10s (%v)", pid, err)
		}
	}
}

// TestExitInfoAfterReap: the status is there for any pidfd once the
// process is reaped, not before.
func TestExitInfoAfterReap(t *testing.T) {
	tests := []struct {
		script string
		want   Exit
	}{
		{"exit 7", Exit{Code: 7}},
		{"kill -TERM $$", Exit{Code: -1, Signal: syscall.SIGTERM}},
	}
	for _, tt := range tests {
		t.Run(tt.script, func(t *testing.T) {
			h := startChild(t, tt.script)
			other, err := Open(h.PID(), mustStat(t, h.PID()).StartTime)
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close()
			if err := h.WaitExited(); err != nil {
				t.Fatal(err)
			}
			if _, ok, err := other.ExitInfo(); errors.Is(err, ErrNoExitInfo) {
				t.Skip(err)
			} else if err != nil || ok {
				t.Fatalf("ExitInfo of a zombie = %v, %v; want not yet", ok, err)
			}
			if _, err := h.Reap(); err != nil {
				t.Fatal(err)
			}
			got, ok, err := other.ExitInfo()
			if err != nil || !ok || got != tt.want {
				t.Fatalf("ExitInfo = %+v, %v, %v; want %+v", got, ok, err, tt.want)
			}
		})
	}
}

func mustStat(t *testing.T, pid int) Stat {
	t.Helper()
	st, err := ReadStat(pid)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// OrdersNewData is true on a journaled ext4 in its default data=ordered
// mode and in data=journal, and false wherever a new file's name may reach
// the disk before its data: without a journal, in data=writeback, on
// tmpfs.
func TestOrdersNewData(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to mount ext4 images")
	}
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		t.Skip("needs mkfs.ext4")
	}
	tests := []struct {
		name        string
		mkfs, mount []string
		want        bool
	}{
		{"default", nil, nil, true},
		{"data=journal", nil, []string{"-o", "data=journal"}, true},
		{"data=writeback", nil, []string{"-o", "data=writeback"}, false},
		{"no journal", []string{"-O", "^has_journal"}, nil, false},
	}
	for _, tt := range tests {
		dir := mountExt4(t, tt.mkfs, tt.mount)
		if got := OrdersNewData(dir); got != tt.want {
			t.Errorf("%s: OrdersNewData = %v, want %v", tt.name, got, tt.want)
		}
	}
	if OrdersNewData("/dev/shm") {
		t.Error("tmpfs: OrdersNewData = true, want false")
	}
}

// mountExt4 makes a small ext4 image with mkfs's extra args, mounts it
// with mount's, and returns a directory in it; it is unmounted when the
// test ends.
func mountExt4(t *testing.T, mkfs, mount []string) string {
	t.Helper()
	img := filepath.Join(t.TempDir(), "fs.img")
	mnt := t.TempDir()
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 32<<20); err != nil {
		t.Fatal(err)
	}
	for _, argv := range [][]string{
		append(append([]string{"mkfs.ext4", "-q", "-F"}, mkfs...), img),
		append(append([]string{"mount", "-o", "loop"}, mount...), img, mnt),
	} {
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", argv, err, out)
		}
	}
	t.Cleanup(func() { exec.Command("umount", mnt).Run() })
	dir := filepath.Join(mnt, "runs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// A process's users are the real and effective ones of its status's
// Uid line (real, effective, saved, fs), never the owner of /proc/<pid>.
func TestUIDs(t *testing.T) {
	for _, tt := range []struct {
		status          string
		real, effective uint32
		ok              bool
	}{
		{"Name:\tsbatch\nUid:\t1000\t0\t0\t0\nGid:\t5\t5\t5\t5\n", 1000, 0, true},
		{"Uid:\t0\t1000\t1000\t1000\n", 0, 1000, true},
		{"Name:\tx\n", 0, 0, false},
		{"Uid:\t1000\n", 0, 0, false},
	} {
		r, e, err := uids([]byte(tt.status))
		if (err == nil) != tt.ok || r != tt.real || e != tt.effective {
			t.Errorf("uids(%q) = %d, %d, %v; want %d, %d, ok %v", tt.status, r, e, err, tt.real, tt.effective, tt.ok)
		}
	}
}
