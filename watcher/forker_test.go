package watcher

import (
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
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
	f := newForker()
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
	if err != nil || f.tid != os.Getpid() && slices.Contains(kids, cmd.Process.Pid) {
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
