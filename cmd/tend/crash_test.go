package main

import (
	"fmt"
	"github.com/tendhq/tend/tracker"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	"github.com/tendhq/tend/procfs"
	"github.com/tendhq/tend/watcher"
	"golang.org/x/sys/unix"
)

// recovered PIDFILE...: wait until a watcher other than those whose PIDs
// the files hold takes requests on this script's root (its watcher.json
// names it, and it and its keeper are alive): the runs of the watchers
// before it are recovered, adopted or recorded. That ends a recovery
// window, after which another crash is a separate one.
func cmdRecovered(ts *testscript.TestScript, neg bool, args []string) {
	old := make(map[int]bool)
	for _, a := range args {
		pid, err := strconv.Atoi(strings.TrimSpace(ts.ReadFile(a)))
		ts.Check(err)
		old[pid] = true
	}
	root := ts.MkAbs(".tend")
	poll(ts, func() string {
		info, err := tracker.ReadWatcherInfo(root)
		if err != nil {
			return err.Error()
		}
		return whyNotRecovered(info, old)
	})
}

// whyNotRecovered says why info does not name a new watcher and keeper that
// run, or "" if it does.
func whyNotRecovered(info tracker.WatcherInfo, old map[int]bool) string {
	if old[info.PID] {
		return fmt.Sprintf("watcher.json still names the old watcher %d", info.PID)
	}
	for _, p := range []struct {
		pid  int
		comm string
	}{{info.PID, tracker.WatcherComm}, {info.KeeperPID, tracker.KeeperComm}} {
		st, err := procfs.ReadStat(p.pid)
		if err != nil || st.Comm != p.comm || st.State == 'Z' {
			return fmt.Sprintf("pid %d, named in watcher.json, is no live %s", p.pid, p.comm)
		}
	}
	return ""
}

// keepsExitInfo reports whether the kernel keeps the exit status of a
// process for its pidfds (Linux 6.15), which exact exit codes across
// separate crashes of the watcher and its keeper need.
func keepsExitInfo() bool {
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		return false
	}
	st, err := procfs.ReadStat(cmd.Process.Pid)
	h, herr := procfs.Open(cmd.Process.Pid, st.StartTime)
	cmd.Wait()
	if err != nil || herr != nil {
		return false
	}
	defer h.Close()
	_, ok, err := h.ExitInfo()
	return ok && err == nil
}

// reaped pidfile...: wait until each PID the files hold, which has ended,
// is reaped: no zombie holds it (it is gone, or another process has it).
func cmdReaped(ts *testscript.TestScript, neg bool, args []string) {
	for _, a := range args {
		pid, err := strconv.Atoi(strings.TrimSpace(ts.ReadFile(a)))
		ts.Check(err)
		poll(ts, func() string {
			if st, err := procfs.ReadStat(pid); err == nil && st.State == 'Z' {
				return fmt.Sprintf("pid %d (%s, from %s) is a zombie, not reaped", pid, st.Comm, a)
			}
			return ""
		})
	}
}

// readcheck id want: read run id's stdout the way an agent does, with
// "tend logs --offset N --max-bytes M --json" from the last next, while
// it runs and until it has ended and all is read; every byte read must
// be the byte of file want at its absolute offset (bytes dropped by the
// cap may be skipped, never misplaced), and the read must end at want's
// end.
func cmdReadCheck(ts *testscript.TestScript, neg bool, args []string) {
	want := []byte(ts.ReadFile(args[1]))
	var off int64
	end := time.Now().Add(deadline)
	for reads := 0; ; reads++ {
		sl := readSlice(ts, args[0], off, 20000)
		if sl.Offset < off || sl.Next != sl.Offset+int64(len(sl.Data)) || sl.Next > int64(len(want)) {
			ts.Fatalf("asked for offset %d, got %d bytes at %d, next %d (%d bytes in all)", off, len(sl.Data), sl.Offset, sl.Next, len(want))
		}
		if got := want[sl.Offset:sl.Next]; string(got) != sl.Data {
			ts.Fatalf("read %d bytes at offset %d that are not the run's there: got %.40q..., want %.40q...", len(sl.Data), sl.Offset, sl.Data, got)
		}
		off = sl.Next
		if sl.EOF && sl.Final {
			break
		}
		if time.Now().After(end) {
			ts.Fatalf("after %s and %d reads, still not at the end (offset %d)", deadline, reads, off)
		}
	}
	if off != int64(len(want)) {
		ts.Fatalf("the run has ended, and its output with it at offset %d, not %d", off, len(want))
	}
}

// canCollapse reports whether the file system of the temporary directory,
// where the scripts run, can cut a file's start (FALLOC_FL_COLLAPSE_RANGE).
func canCollapse() bool {
	f, err := os.CreateTemp("", "collapse")
	if err != nil {
		return false
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if _, err := f.Write(make([]byte, 1<<16)); err != nil {
		return false
	}
	return unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_COLLAPSE_RANGE, 0, 1<<15) == nil
}

// ofRoot reports whether process pid is of one of root's runs by its
// environment: it names root in TEND_ROOT, or carries root's mark (which a
// run's daemon keeps when it changes TEND_ROOT).
func ofRoot(pid int, root string) bool {
	env, _ := procfs.Lookup(pid, "TEND_ROOT", watcher.MarkVar(root))
	return len(env) == 2 && (env[0] == root || env[1] != "")
}
