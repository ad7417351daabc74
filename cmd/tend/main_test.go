package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	"github.com/tendhq/tend/cmd/internal/daemon"
	"github.com/tendhq/tend/cmd/internal/mcpserver"
	"github.com/tendhq/tend/cmd/internal/top"
	"github.com/tendhq/tend/procfs"
	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
	"github.com/tendhq/tend/tracker/crashfs"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"tend":        func() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) },
		"tend-mcp":    func() { os.Exit(mcpserver.Main("test", os.Args[1:], os.Stdin, os.Stderr)) },
		"tend-top":    func() { os.Exit(top.Main(os.Args[1:], os.Stdout, os.Stderr)) },
		"tend-watch":  func() { os.Exit(daemon.Main(buildVersion(), os.Args[1:], os.Stderr)) },
		"statereader": stateReader,
		"tcpserver":   tcpServer,
		"httpserver":  httpServer,
		"asuser":      asUser,
		"raceswap":    raceSwap,
		"markreq":     markRequest,
	})
}

// TestScripts runs the end-to-end tests in testdata/script: the tend
// binary, a real watcher, real processes and real files.
func TestScripts(t *testing.T) {
	t.Cleanup(func() { stopSlurm(t) }) // once every script has run
	testscript.Run(t, scriptParams("testdata/script"))
}

// TestHardening runs the slow and privileged end-to-end tests of
// testdata/hardening (make hardening): a full disk, exhausted file
// descriptors, 10,000 requests at once.
func TestHardening(t *testing.T) {
	if os.Getenv("TEND_HARDENING") == "" {
		t.Skip("slow or privileged: run by make hardening (TEND_HARDENING=1)")
	}
	deadline = 10 * time.Minute
	testscript.Run(t, scriptParams("testdata/hardening"))
}

// TestClockJump runs testdata/clock (make hardening): it sets the wall
// clock back, so it runs alone, after the others, and its scripts wait at
// most a minute, far less than the jump: a timeout measured on the wall
// clock would fail them.
func TestClockJump(t *testing.T) {
	if os.Getenv("TEND_HARDENING") == "" {
		t.Skip("privileged: sets the clock; run by make hardening (TEND_HARDENING=1)")
	}
	deadline = time.Minute
	testscript.Run(t, scriptParams("testdata/clock"))
}

func scriptParams(dir string) testscript.Params {
	return testscript.Params{
		Dir:                 dir,
		RequireExplicitExec: true,
		// TEND_UPDATE_GOLDEN=1 rewrites the golden files a cmp finds different
		// (review the diff before committing it).
		UpdateScripts: os.Getenv("TEND_UPDATE_GOLDEN") != "",
		Condition: func(cond string) (bool, error) {
			switch cond {
			case "root":
				return os.Getuid() == 0, nil
			case "fuse":
				// A crashfs can be mounted: root, and a kernel with FUSE
				// (/dev/fuse is made if missing). CI never skips.
				err := crashfs.Prepare()
				if err != nil && os.Getenv("TEND_REQUIRE_FUSE") != "" {
					return false, fmt.Errorf("no crashfs here (and TEND_REQUIRE_FUSE is set): %w", err)
				}
				return err == nil, nil
			case "exitinfo":
				return keepsExitInfo(), nil
			case "collapse":
				return canCollapse(), nil
			case "cap_sys_resource":
				return hasCapability(unix.CAP_SYS_RESOURCE), nil
			case "slurm":
				return slurmCondition()
			}
			return false, fmt.Errorf("unknown condition %q", cond)
		},
		Setup: func(e *testscript.Env) error {
			e.Setenv("TEND_ROOT", "") // each script's root is found from $WORK
			// Built with -race (make test), every process of the test binary
			// (tend, its watcher, ...) sleeps 1 s as it exits, for races in
			// goroutines still running: a second on every tend a script
			// runs, minutes of CI's time, and nothing a watcher's own
			// goroutines would not have reported while it ran.
			e.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
			// Scripts start watchers themselves, except where they test
			// that clients do.
			e.Setenv("TEND_NO_START", "1")
			// The POSIX sh library, for scripts that drive tend as a shell
			// client does (. $TEND_SH).
			lib, err := filepath.Abs("../../scripts/tend.sh")
			if err != nil {
				return err
			}
			e.Setenv("TEND_SH", lib)
			root := filepath.Join(e.WorkDir, ".tend")
			e.Defer(func() { killLeftovers(root) })
			return nil
		},
		Cmds: map[string]func(*testscript.TestScript, bool, []string){
			"waitfile":   cmdWaitFile,
			"waitstate":  cmdWaitState,
			"waitmatch":  cmdWaitMatch,
			"nogroup":    cmdNoGroup,
			"dead":       cmdDead,
			"drop":       cmdDrop,
			"lines":      cmdLines,
			"waitruns":   cmdWaitRuns,
			"sig":        cmdSig,
			"catches":    cmdCatches,
			"fakerun":    cmdFakeRun,
			"watchers":   cmdWatchers,
			"strays":     cmdStrays,
			"chaos":      cmdChaos,
			"powerloss":  cmdPowerLoss,
			"maxlive":    cmdMaxLive,
			"races":      cmdRaces,
			"freeport":   cmdFreePort,
			"uidserver":  cmdUIDServer,
			"gaps":       cmdGaps,
			"pstate":     cmdPState,
			"holds":      cmdHolds,
			"filesize":   cmdFileSize,
			"dropall":    cmdDropAll,
			"dropped":    cmdDropped,
			"readall":    cmdReadAll,
			"mksock":     cmdMkSock,
			"tmpfs":      cmdTmpfs,
			"clockjump":  cmdClockJump,
			"settled":    cmdSettled,
			"mcpcall":    cmdMCPCall,
			"mcpfuzz":    cmdMCPFuzz,
			"mcpends":    cmdMCPEnds,
			"schema":     cmdSchema,
			"fixture":    cmdFixture,
			"mkusers":    cmdMkUsers,
			"forge":      cmdForge,
			"waitglob":   cmdWaitGlob,
			"need":       cmdNeed,
			"edits":      cmdEdits,
			"readme":     cmdReadme,
			"term":       cmdTerm,
			"recovered":  cmdRecovered,
			"reaped":     cmdReaped,
			"readcheck":  cmdReadCheck,
			"samerecord": cmdSameRecord,
			"slurm":      cmdSlurm,
			"slurmjobs":  cmdSlurmJobs,
		},
	}
}

// deadline is how long a waiting command waits for its condition. It is
// generous: these tests check behavior, not speed (make bench does that).
// The hardening tests, which start thousands of runs, wait longer.
var deadline = 60 * time.Second

// poll calls cond until it returns "" or the deadline passes, then fails
// with cond's last complaint.
func poll(ts *testscript.TestScript, cond func() string) { pollFor(ts, deadline, cond) }

// pollFor is poll, with a deadline of d.
func pollFor(ts *testscript.TestScript, d time.Duration, cond func() string) {
	end := time.Now().Add(d)
	for {
		msg := cond()
		if msg == "" {
			return
		}
		if time.Now().After(end) {
			ts.Fatalf("after %s: %s", d, msg)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitfile path...: wait until every path exists and holds something (a
// file is created before it is written); a path may be a glob pattern
// (for tagged request names), which must match.
func cmdWaitFile(ts *testscript.TestScript, neg bool, args []string) {
	for _, a := range args {
		path := ts.MkAbs(a)
		poll(ts, func() string {
			matches, _ := filepath.Glob(path)
			if neg == (len(matches) > 0) {
				return fmt.Sprintf("%s: exists=%v, want %v", a, len(matches) > 0, !neg)
			}
			if !neg && !slices.ContainsFunc(matches, written) {
				return fmt.Sprintf("%s: exists but is empty", a)
			}
			return ""
		})
	}
}

// written reports whether the file at path holds something: `echo $$ >
// x.pid` creates the file before it writes the line.
func written(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Size() > 0
}

// waitstate id state [deadline]: wait until run id's state.json says
// state, for at most the deadline given (a duration), or the default.
func cmdWaitState(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 && len(args) != 3 {
		ts.Fatalf("usage: waitstate ID STATE [DEADLINE]")
	}
	d := deadline
	if len(args) == 3 {
		var err error
		d, err = time.ParseDuration(args[2])
		ts.Check(err)
	}
	store := tracker.NewStore(ts.MkAbs(".tend"))
	pollFor(ts, d, func() string {
		st, err := store.Read(args[0])
		if err != nil {
			return err.Error()
		}
		if string(st.State) != args[1] {
			return fmt.Sprintf("run %s is %s, want %s (reason: %s)", args[0], st.State, args[1], st.Reason)
		}
		return ""
	})
}

// waitmatch file regexp: wait until the file's content matches.
func cmdWaitMatch(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: waitmatch FILE REGEXP")
	}
	re := regexp.MustCompile(args[1])
	poll(ts, func() string {
		b, _ := os.ReadFile(ts.MkAbs(args[0]))
		if !re.Match(b) {
			return fmt.Sprintf("%s = %q, does not match %q", args[0], b, args[1])
		}
		return ""
	})
}

// nogroup id: no process is left in run id's process group.
func cmdNoGroup(ts *testscript.TestScript, neg bool, args []string) {
	st, err := tracker.NewStore(ts.MkAbs(".tend")).Read(args[0])
	ts.Check(err)
	if st.PGID == 0 {
		ts.Fatalf("run %s has no process group", args[0])
	}
	m, err := procfs.GroupMembers(map[int]bool{st.PGID: true})
	ts.Check(err)
	if len(m[st.PGID]) > 0 {
		ts.Fatalf("run %s: %d processes left in group %d: %+v", args[0], len(m[st.PGID]), st.PGID, m[st.PGID])
	}
}

// dead pidfile...: wait until every PID listed in the files (one a line)
// has ended (a zombie counts: it runs no more and only waits to be reaped).
func cmdDead(ts *testscript.TestScript, neg bool, args []string) {
	for _, a := range args {
		for _, line := range strings.Fields(ts.ReadFile(a)) {
			pid, err := strconv.Atoi(line)
			ts.Check(err)
			poll(ts, func() string {
				if st, err := procfs.ReadStat(pid); err == nil && st.State != 'Z' {
					return fmt.Sprintf("pid %d (%s, from %s) is still alive", pid, st.Comm, a)
				}
				return ""
			})
		}
	}
}

// waitruns n state: wait until n runs are in state (and none is missing).
func cmdWaitRuns(ts *testscript.TestScript, neg bool, args []string) {
	want, err := strconv.Atoi(args[0])
	ts.Check(err)
	store := tracker.NewStore(ts.MkAbs(".tend"))
	poll(ts, func() string {
		runs, errs := store.List()
		if len(errs) > 0 {
			return fmt.Sprint(errs)
		}
		n := 0
		for _, st := range runs {
			if string(st.State) == args[1] {
				n++
			}
		}
		if n != want {
			return fmt.Sprintf("%d of %d runs are %s, want %d", n, len(runs), args[1], want)
		}
		return ""
	})
}

// drop n: drop n start requests into .tend/spool at once, named r0..r{n-1},
// alternately renamed in and written in place. Each appends its ID to
// ran.log in $WORK.
func cmdDrop(ts *testscript.TestScript, neg bool, args []string) {
	n, err := strconv.Atoi(args[0])
	ts.Check(err)
	sp := ts.MkAbs(".tend/spool")
	staging := ts.MkAbs("staging")
	ts.Check(os.MkdirAll(staging, 0o755))
	ts.Check(os.MkdirAll(sp, 0o755))
	log := ts.MkAbs("ran.log")
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("r%d.start", i)
		body := []byte(fmt.Sprintf("echo $TEND_RUN_ID >> %s\n", log))
		if i%2 == 0 {
			ts.Check(os.WriteFile(filepath.Join(staging, name), body, 0o644))
			ts.Check(os.Rename(filepath.Join(staging, name), filepath.Join(sp, name)))
		} else {
			ts.Check(os.WriteFile(filepath.Join(sp, name), body, 0o644))
		}
	}
}

// lines file n: the file has exactly n lines, all different.
func cmdLines(ts *testscript.TestScript, neg bool, args []string) {
	want, err := strconv.Atoi(args[1])
	ts.Check(err)
	seen := map[string]bool{}
	total := 0
	sc := bufio.NewScanner(strings.NewReader(ts.ReadFile(args[0])))
	for sc.Scan() {
		total++
		if seen[sc.Text()] {
			ts.Fatalf("%s: line %q appears twice", args[0], sc.Text())
		}
		seen[sc.Text()] = true
	}
	if total != want {
		ts.Fatalf("%s has %d lines, want %d", args[0], total, want)
	}
}

// stateReader is a program: statereader ROOT STOPFILE reads every
// runs/*/state.json in a loop until STOPFILE exists, and fails if any read
// gave anything but a whole, valid state file.
func stateReader() {
	root, stop := os.Args[1], os.Args[2]
	reads, bad := 0, 0
	for {
		if _, err := os.Stat(stop); err == nil {
			break
		}
		paths, _ := filepath.Glob(filepath.Join(root, "runs", "*", "state.json"))
		for _, p := range paths {
			b, err := os.ReadFile(p)
			if err != nil {
				continue // not created yet
			}
			var st tracker.State
			if err := json.Unmarshal(b, &st); err != nil || st.ID == "" || st.Rev < 1 {
				bad++
				fmt.Fprintf(os.Stderr, "%s: invalid: %v: %q\n", p, err, b)
			}
			reads++
		}
	}
	fmt.Printf("reads=%d invalid=%d\n", reads, bad)
	if bad > 0 || reads == 0 {
		os.Exit(1)
	}
}

// sig SIGNAL pidfile: send SIGNAL (a name such as KILL or USR1) to the
// process whose PID the file holds.
func cmdSig(ts *testscript.TestScript, neg bool, args []string) {
	sig, pid := signalAndPID(ts, "sig", args)
	ts.Check(unix.Kill(pid, sig))
}

// signalAndPID returns the signal (a name such as KILL) and the PID in
// the file that args name, for command cmd.
func signalAndPID(ts *testscript.TestScript, cmd string, args []string) (unix.Signal, int) {
	if len(args) != 2 {
		ts.Fatalf("usage: %s SIGNAL PIDFILE", cmd)
	}
	sig := unix.SignalNum("SIG" + args[0])
	if sig == 0 {
		ts.Fatalf("unknown signal %s", args[0])
	}
	pid, err := strconv.Atoi(strings.TrimSpace(ts.ReadFile(args[1])))
	ts.Check(err)
	return sig, pid
}

// catches SIGNAL PIDFILE: wait until the process in PIDFILE has run
// another program than its parent's (a shell's background command, once
// exec'd) and catches SIGNAL (its handler is installed: /proc/PID/status,
// SigCgt). Between its fork and its exec, a shell's child still has the
// shell's handlers: a SIGINT caught there is the shell's, not the command's.
func cmdCatches(ts *testscript.TestScript, neg bool, args []string) {
	sig, pid := signalAndPID(ts, "catches", args)
	poll(ts, func() string {
		if msg := execd(pid); msg != "" {
			return msg
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			return err.Error()
		}
		_, rest, _ := strings.Cut(string(b), "SigCgt:\t")
		mask, err := strconv.ParseUint(strings.TrimSpace(strings.SplitN(rest, "\n", 2)[0]), 16, 64)
		if err != nil || mask&(1<<(sig-1)) == 0 {
			return fmt.Sprintf("pid %d does not catch SIG%s (SigCgt %.16s)", pid, args[0], rest)
		}
		return ""
	})
}

// execd returns "" once process pid runs another program than its
// parent, or says why not. Its exe changes within execve, once the old
// program can run no more; the handlers it had are reset before the new
// one starts. A handler seen caught after that was caught by the old
// program before its exec (a shell's background child has set SIGINT
// ignored by then) or by the new one.
func execd(pid int) string {
	st, err := procfs.ReadStat(pid)
	if err != nil {
		return err.Error()
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return err.Error()
	}
	parent, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", st.PPID))
	if err != nil {
		return err.Error()
	}
	if exe == parent {
		return fmt.Sprintf("pid %d still runs its parent's %s", pid, exe)
	}
	return ""
}

// killLeftovers kills what a failed script may have left running under
// root: the keepers and watchers whose command line names it, processes
// whose environment names it (runs, strays), and the watcher and keeper
// it recorded. Only processes this test started carry that root.
func killLeftovers(root string) {
	all, _ := procfs.All()
	// Keepers first: one left alive would start its watcher again.
	for _, comm := range []string{tracker.KeeperComm, tracker.WatcherComm} {
		for _, p := range all {
			if p.Comm == comm && namesRoot(p.PID, root) {
				unix.Kill(p.PID, unix.SIGKILL)
			}
		}
	}
	for _, p := range all {
		if ofRoot(p.PID, root) {
			unix.Kill(p.PID, unix.SIGKILL)
		}
	}
	// A watcher started without --root (tend watch, in the root's parent)
	// is known by what it recorded.
	if info, err := tracker.ReadWatcherInfo(root); err == nil {
		for _, pid := range []int{info.KeeperPID, info.PID} {
			if st, err := procfs.ReadStat(pid); err == nil && strings.HasPrefix(st.Comm, "tend") {
				unix.Kill(pid, unix.SIGKILL)
			}
		}
	}
}

// namesRoot reports whether process pid's command line has root as one of
// its arguments, as a keeper's and a watcher's --root does.
func namesRoot(pid int, root string) bool {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.Contains(string(b), "\x00"+root+"\x00")
}

// fakerun [-boot BOOT] id pidfile: record run id as running with the PID
// in pidfile but another start time, as a watcher would have left it had
// that PID been reused since; and mark it started (it passed its gate).
// With -boot, the record has the process's own start time, but says it
// was started in boot BOOT: a run of a boot before a restart, whose PID
// and start time a process of this boot has. With -service, the run
// restarts always.
func cmdFakeRun(ts *testscript.TestScript, neg bool, args []string) {
	boot, service := "", false
	if len(args) > 0 && args[0] == "-service" {
		service, args = true, args[1:]
	}
	if len(args) == 4 && args[0] == "-boot" {
		boot, args = args[1], args[2:]
	}
	if len(args) != 2 {
		ts.Fatalf("usage: fakerun [-service] [-boot BOOT] ID PIDFILE")
	}
	pid, err := strconv.Atoi(strings.TrimSpace(ts.ReadFile(args[1])))
	ts.Check(err)
	ps, err := procfs.ReadStat(pid)
	ts.Check(err)
	store := tracker.NewStore(ts.MkAbs(".tend"))
	ts.Check(os.MkdirAll(store.RunDir(args[0]), 0o755))
	// Sealed, as the watcher's user can: a record that names a process
	// that is not the run's must be refused for its identity, not its seal.
	key, _, err := tracker.LoadKey(ts.MkAbs(".tend"), true)
	ts.Check(err)
	store.SetKey(key)
	now := time.Now().Add(-time.Hour)
	st := &tracker.State{
		ID: args[0], State: tracker.Running, Rev: 2, Command: []string{"/bin/sh", "-c", "sleep 1000"},
		PID: pid, PGID: pid, ProcStart: ps.StartTime - 1, CreatedAt: now, StartedAt: &now,
	}
	if boot != "" {
		// The process's very identity, in a boot that is not this one.
		st.ProcStart, st.Boot = ps.StartTime, boot
	}
	if service {
		r := spool.DefaultRestart
		r.Policy, r.Delay = "always", spool.Duration(10*time.Millisecond)
		st.Restart = &r
		// Its claimed request, which each attempt starts with.
		ts.Check(os.WriteFile(store.Run(args[0]).Request(), []byte(`{"command": "sleep 1000", "restart": {"policy": "always", "delay": "10ms"}}`), 0o644))
	}
	ts.Check(store.Write(st))
	ts.Check(os.WriteFile(filepath.Join(store.RunDir(args[0]), "started"), nil, 0o644))
}

// watchers n: exactly n watchers and n keepers run on this script's root
// (once the count has settled).
func cmdWatchers(ts *testscript.TestScript, neg bool, args []string) {
	want, err := strconv.Atoi(args[0])
	ts.Check(err)
	root := ts.MkAbs(".tend")
	poll(ts, func() string {
		w, k := countDaemons(root)
		if w != want || k != want {
			return fmt.Sprintf("%d watchers and %d keepers run on %s, want %d", w, k, root, want)
		}
		return ""
	})
}

// countDaemons counts the watchers and keepers whose command line names
// root.
func countDaemons(root string) (watchers, keepers int) {
	all, _ := procfs.All()
	for _, p := range all {
		if p.State == 'Z' {
			continue
		}
		if !namesRoot(p.PID, root) {
			continue
		}
		switch p.Comm {
		case tracker.WatcherComm:
			watchers++
		case tracker.KeeperComm:
			keepers++
		}
	}
	return watchers, keepers
}

// strays: no process whose environment names this script's root, or
// carries its mark, is left.
func cmdStrays(ts *testscript.TestScript, neg bool, args []string) {
	root := ts.MkAbs(".tend")
	poll(ts, func() string {
		all, _ := procfs.All()
		for _, p := range all {
			if ofRoot(p.PID, root) && p.State != 'Z' {
				id, _ := procfs.Getenv(p.PID, "TEND_RUN_ID")
				return fmt.Sprintf("pid %d (%s) of run %s is still alive", p.PID, p.Comm, id)
			}
		}
		return ""
	})
}

// maxlive log n: the log's "start ID" and "end ID" lines never show more
// than n runs between their start and their end at once.
func cmdMaxLive(ts *testscript.TestScript, neg bool, args []string) {
	limit, err := strconv.Atoi(args[1])
	ts.Check(err)
	live, most := 0, 0
	for _, line := range strings.Split(ts.ReadFile(args[0]), "\n") {
		switch {
		case strings.HasPrefix(line, "start "):
			live++
		case strings.HasPrefix(line, "end "):
			live--
		}
		most = max(most, live)
	}
	if most > limit {
		ts.Fatalf("%s: %d runs were live at once, want at most %d", args[0], most, limit)
	}
}

// tcpServer is a program: tcpserver ADDR listens on ADDR and accepts (and
// closes) connections until killed.
func tcpServer() {
	l, err := net.Listen("tcp", os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for {
		c, err := l.Accept()
		if err != nil {
			os.Exit(1)
		}
		c.Close()
	}
}

// freeport VAR: set VAR to a TCP port on 127.0.0.1 that was free a moment ago.
func cmdFreePort(ts *testscript.TestScript, neg bool, args []string) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	ts.Check(err)
	ts.Setenv(args[0], strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
	l.Close()
}

// uidserver PORTVAR FILE: an HTTP server on a free port of 127.0.0.1,
// set in PORTVAR, until the script ends, which answers 200 to any request
// once it has appended to FILE the uid that owns the client's socket (from
// /proc/net/tcp, read while the client waits for the answer).
func cmdUIDServer(ts *testscript.TestScript, neg bool, args []string) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	ts.Check(err)
	ts.Setenv(args[0], strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
	file := ts.MkAbs(args[1])
	ts.Defer(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			port := c.RemoteAddr().(*net.TCPAddr).Port
			uid := "unknown"
			if b, err := os.ReadFile("/proc/net/tcp"); err == nil {
				for _, line := range strings.Split(string(b), "\n") {
					f := strings.Fields(line)
					if len(f) > 7 && f[1] == fmt.Sprintf("0100007F:%04X", port) {
						uid = f[7]
					}
				}
			}
			if f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644); err == nil {
				fmt.Fprintln(f, uid)
				f.Close()
			}
			c.SetReadDeadline(time.Now().Add(time.Second))
			c.Read(make([]byte, 4096))
			io.WriteString(c, "HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n")
			c.Close()
		}
	}()
}

// gaps id: the delays between run id's attempts (from the end of one to
// the start of the next, as its record keeps them) grow.
func cmdGaps(ts *testscript.TestScript, neg bool, args []string) {
	st, err := tracker.NewStore(ts.MkAbs(".tend")).Read(args[0])
	ts.Check(err)
	var last time.Duration
	for i := 1; i < len(st.Attempts); i++ {
		gap := st.Attempts[i].StartedAt.Sub(st.Attempts[i-1].EndedAt)
		if gap <= last {
			ts.Fatalf("run %s: the delay before attempt %d (%v) is not longer than the one before (%v)", args[0], st.Attempts[i].Attempt, gap, last)
		}
		last = gap
	}
}

// pstate pidfile STATE: wait until the process in pidfile is in STATE
// (a letter of /proc/PID/stat: T stopped, S sleeping, ...), every one of
// its threads: kill(2) returns before a SIGSTOP has stopped them all, and
// a thread not yet stopped may still take a request.
func cmdPState(ts *testscript.TestScript, neg bool, args []string) {
	pid, err := strconv.Atoi(strings.TrimSpace(ts.ReadFile(args[0])))
	ts.Check(err)
	poll(ts, func() string {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			return err.Error()
		}
		for _, t := range tasks {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, t.Name()))
			if err != nil {
				return err.Error() // a thread that just exited; look again
			}
			st, err := procfs.ParseStat(b)
			if err != nil {
				return err.Error()
			}
			if string(st.State) != args[1] {
				return fmt.Sprintf("pid %d's thread %s is in state %c, want %s", pid, t.Name(), st.State, args[1])
			}
		}
		return ""
	})
}

// holds id state duration: run id stays in state for the whole duration
// (checked throughout, not slept through).
func cmdHolds(ts *testscript.TestScript, neg bool, args []string) {
	d, err := time.ParseDuration(args[2])
	ts.Check(err)
	store := tracker.NewStore(ts.MkAbs(".tend"))
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		st, err := store.Read(args[0])
		ts.Check(err)
		if string(st.State) != args[1] {
			ts.Fatalf("run %s became %s (%s) within %v, want it %s throughout", args[0], st.State, st.Reason, d, args[1])
		}
	}
}

// httpServer is a program: httpserver ADDR answers every GET with 200 OK
// while the file "healthy" exists in its directory, and 503 after.
func httpServer() {
	err := http.ListenAndServe(os.Args[1], http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := os.Stat("healthy"); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}

// dropall from to [name...]: renames the named files of directory from
// (all of them, in name order, if none is named) into directory to, back to
// back, so that the watcher sees them together. mv cannot do it: it stats
// each file it moved, which the watcher may have taken already.
func cmdDropAll(ts *testscript.TestScript, neg bool, args []string) {
	from, to := ts.MkAbs(args[0]), ts.MkAbs(args[1])
	names := args[2:]
	if len(names) == 0 {
		ents, err := os.ReadDir(from)
		ts.Check(err)
		for _, e := range ents {
			names = append(names, e.Name())
		}
	}
	for _, name := range names {
		ts.Check(os.Rename(filepath.Join(from, name), filepath.Join(to, name)))
	}
}

// filesize path max: the file is at most max bytes long.
func cmdFileSize(ts *testscript.TestScript, neg bool, args []string) {
	fi, err := os.Stat(ts.MkAbs(args[0]))
	ts.Check(err)
	max, err := strconv.ParseInt(args[1], 10, 64)
	ts.Check(err)
	if fi.Size() > max {
		ts.Fatalf("%s is %d bytes, want at most %d", args[0], fi.Size(), max)
	}
}

// dropped id stream min: run id's record says at least min bytes of the
// stream were dropped.
func cmdDropped(ts *testscript.TestScript, neg bool, args []string) {
	st, err := tracker.NewStore(ts.MkAbs(".tend")).Read(args[0])
	ts.Check(err)
	min, err := strconv.ParseInt(args[2], 10, 64)
	ts.Check(err)
	if st.Output == nil {
		ts.Fatalf("run %s: no output record", args[0])
	}
	got := st.Output.Stdout.Dropped
	if args[1] == "stderr" {
		got = st.Output.Stderr.Dropped
	}
	if got < min {
		ts.Fatalf("run %s: %d bytes of %s dropped, want at least %d", args[0], got, args[1], min)
	}
}

// readall id file: read run id's stdout the way an agent would, with
// "tend logs --offset N --max-bytes 4096 --json" over and over from the
// last next, until the run has ended and all is read; write what it read
// to file.
func cmdReadAll(ts *testscript.TestScript, neg bool, args []string) {
	var got []byte
	var off int64
	end := time.Now().Add(deadline)
	for reads := 0; ; reads++ {
		sl := readSlice(ts, args[0], off, 4096)
		if sl.Offset != off || sl.Dropped != 0 {
			ts.Fatalf("asked for offset %d, got a slice at %d with %d dropped", off, sl.Offset, sl.Dropped)
		}
		got = append(got, sl.Data...)
		off = sl.Next
		if sl.EOF && sl.Final {
			break
		}
		if time.Now().After(end) {
			ts.Fatalf("after %s and %d reads, still not at the end", deadline, reads)
		}
	}
	ts.Check(os.WriteFile(ts.MkAbs(args[1]), got, 0o644))
}

// logSlice is what tend logs --json prints: one slice of a stream.
type logSlice struct {
	Offset, Next, Dropped int64
	EOF, Final            bool
	Data                  string
}

// readSlice reads at most max bytes of run id's stdout from offset off,
// as an agent does: tend logs --offset --max-bytes --json.
func readSlice(ts *testscript.TestScript, id string, off, max int64) logSlice {
	cmd := exec.Command("tend", "logs", id, "--offset", strconv.FormatInt(off, 10), "--max-bytes", strconv.FormatInt(max, 10), "--json")
	cmd.Dir = ts.MkAbs(".")
	cmd.Env = append(os.Environ(), "PATH="+ts.Getenv("PATH"), "TEND_ROOT=", "TEND_NO_START=1")
	out, err := cmd.Output()
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		ts.Fatalf("tend logs --offset %d: %v: %s", off, err, ee.Stderr)
	}
	if err != nil {
		ts.Fatalf("tend logs --offset %d: %v", off, err)
	}
	var sl logSlice
	ts.Check(json.Unmarshal(out, &sl))
	return sl
}

// mksock path: create a Unix socket file at path (and leave it there).
func cmdMkSock(ts *testscript.TestScript, neg bool, args []string) {
	l, err := net.Listen("unix", ts.MkAbs(args[0]))
	ts.Check(err)
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
}

// tmpfs dir size: mount a tmpfs of size on dir (created), unmounted when
// the script ends, after whatever runs under it is killed.
func cmdTmpfs(ts *testscript.TestScript, neg bool, args []string) {
	dir := ts.MkAbs(args[0])
	ts.Check(os.MkdirAll(dir, 0o755))
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+args[1], "tmpfs", dir).CombinedOutput(); err != nil {
		ts.Fatalf("mount: %v: %s", err, out)
	}
	ts.Defer(func() {
		killLeftovers(filepath.Join(dir, ".tend"))
		exec.Command("umount", "-l", dir).Run()
	})
}

// settled n: wait until n runs exist and none is starting or queued (each
// is running, or has ended), then print how many are in each state.
func cmdSettled(ts *testscript.TestScript, neg bool, args []string) {
	want, err := strconv.Atoi(args[0])
	ts.Check(err)
	store := tracker.NewStore(ts.MkAbs(".tend"))
	var counts map[tracker.StateName]int
	poll(ts, func() string {
		runs, _ := store.List()
		counts = map[tracker.StateName]int{}
		for _, st := range runs {
			counts[st.State]++
		}
		if len(runs) < want || counts[tracker.Starting] > 0 || counts[tracker.Queued] > 0 {
			return fmt.Sprintf("%d of %d runs, states %v", len(runs), want, counts)
		}
		return ""
	})
	ts.Logf("states: %v", counts)
}

// clockjump duration: set the wall clock by duration (negative: back),
// and by as much the other way when the script ends, so the machine's
// clock is off only while the script runs.
func cmdClockJump(ts *testscript.TestScript, neg bool, args []string) {
	d, err := time.ParseDuration(args[0])
	ts.Check(err)
	shift := func(d time.Duration) error {
		var now unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_REALTIME, &now); err != nil {
			return err
		}
		to := unix.NsecToTimespec(now.Nano() + d.Nanoseconds())
		return unix.ClockSettime(unix.CLOCK_REALTIME, &to)
	}
	ts.Check(shift(d))
	ts.Defer(func() {
		if err := shift(-d); err != nil {
			ts.Logf("setting the clock back by %v: %v", -d, err)
		}
	})
}
