package watcher

import (
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestForkerOrphans checks what the forker relies on: an orphan adopted by
// this (child subreaper) process is in orphans, and a process the forker
// started is not (unless the forker's thread is the main thread).
func TestForkerOrphans(t *testing.T) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Skip("cannot become a child subreaper:", err)
	}
	defer unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	f := newForker(0)
	cmd := exec.Command("/bin/sh", "-c", "sleep 30 & echo $!; read x")
	out, _ := cmd.StdoutPipe()
	in, _ := cmd.StdinPipe()
	var err error
	f.run(func() { err = cmd.Start() })
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 32)
	n, _ := out.Read(buf)
	orphan, err := strconv.Atoi(strings.TrimSpace(string(buf[:n])))
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(orphan, syscall.SIGKILL)
	kids, err := f.orphans()
	if err != nil || !slices.Contains(f.tids, os.Getpid()) && slices.Contains(kids, cmd.Process.Pid) {
		t.Fatalf("orphans = %v, %v; the shell %d the forker started is among them", kids, err, cmd.Process.Pid)
	}
	in.Close() // the shell exits; sleep is orphaned
	cmd.Wait()
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		kids, err = f.orphans()
		if err == nil && slices.Contains(kids, orphan) {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("orphans = %v, %v; want the orphan %d (pid %d)", kids, err, orphan, os.Getpid())
		}
	}
}

// TestForkerRaisesProcsWhileForking checks that two calls run at once, on
// two threads, with GOMAXPROCS raised while they are pending and back once
// they are done.
func TestForkerRaisesProcsWhileForking(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	f := newForker(2)
	var procs, tids [2]int
	both := sync.WaitGroup{}
	both.Add(2)
	var dones [2]<-chan struct{}
	for i := range 2 {
		dones[i] = f.start(func() {
			procs[i], tids[i] = runtime.GOMAXPROCS(0), unix.Gettid()
			both.Done()
			both.Wait() // returns only if the other call runs meanwhile
		})
	}
	for _, done := range dones {
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the second call did not run while the first was under way")
		}
	}
	if procs != [2]int{2, 2} || tids[0] == tids[1] {
		t.Errorf("calls saw GOMAXPROCS %v on threads %v; want 2 on two threads", procs, tids)
	}
	for end := time.Now().Add(10 * time.Second); runtime.GOMAXPROCS(0) != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("GOMAXPROCS = %d once no call is pending; want 1", runtime.GOMAXPROCS(0))
		}
	}
}
