package main

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"

	"github.com/rogpeppe/go-internal/testscript"
	"github.com/tendhq/tend/procfs"
	"github.com/tendhq/tend/watcher"
)

// newwatcher PIDFILE...: wait until a watcher other than those whose PIDs
// the files hold takes requests on this script's root (its watcher.json
// names it, and it and its keeper are alive): the runs of the watchers
// before it are recovered, adopted or recorded. That ends a recovery
// window, after which another crash is a separate one.
func cmdNewWatcher(ts *testscript.TestScript, neg bool, args []string) {
	old := make(map[int]bool)
	for _, a := range args {
		pid, err := strconv.Atoi(strings.TrimSpace(ts.ReadFile(a)))
		ts.Check(err)
		old[pid] = true
	}
	root := ts.MkAbs(".tend")
	poll(ts, func() string {
		info, err := watcher.ReadInfo(root)
		if err != nil {
			return err.Error()
		}
		return recovered(info, old)
	})
}

// recovered says why info does not name a new watcher and keeper that
// run, or "" if it does.
func recovered(info watcher.Info, old map[int]bool) string {
	if old[info.PID] {
		return fmt.Sprintf("watcher.json still names the old watcher %d", info.PID)
	}
	for _, p := range []struct {
		pid  int
		comm string
	}{{info.PID, watcher.WatcherComm}, {info.KeeperPID, watcher.KeeperComm}} {
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
