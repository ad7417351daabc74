package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"github.com/rogpeppe/go-internal/testscript"
	"github.com/tendhq/tend/procfs"
	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
	"golang.org/x/sys/unix"
)

// The users the tests of shared roots act as: two members of the group
// they share a root with, and one who is not.
const (
	testGroup    = "tendtest"
	testUserA    = "tendtest-a"
	testUserB    = "tendtest-b"
	testOutsider = "tendtest-x"
)

// mkusersOnce serializes mkusers across the scripts running at once:
// useradd refuses to run beside itself.
var mkusersOnce sync.Mutex

// mkusers: make the tests' throwaway users and group, if missing, and let
// them reach the script's work directory and the test programs.
func cmdMkUsers(ts *testscript.TestScript, neg bool, args []string) {
	mkusersOnce.Lock()
	defer mkusersOnce.Unlock()
	if _, err := user.LookupGroup(testGroup); err != nil {
		runCmd(ts, "groupadd", testGroup)
	}
	for _, u := range []struct {
		name   string
		groups []string
	}{{testUserA, []string{testGroup}}, {testUserB, []string{testGroup}}, {testOutsider, nil}} {
		if _, err := user.Lookup(u.name); err == nil {
			continue
		}
		args := []string{"--no-create-home", "--user-group", "--shell", "/bin/sh"}
		if len(u.groups) > 0 {
			args = append(args, "--groups", strings.Join(u.groups, ","))
		}
		runCmd(ts, "useradd", append(args, u.name)...)
	}
	// The work directory and the test programs are made for root alone:
	// open them up to the users, up to the temporary directory.
	bin, err := exec.LookPath("tend")
	ts.Check(err)
	for _, start := range []string{ts.Getenv("WORK"), filepath.Dir(bin)} {
		for dir := start; dir != os.TempDir() && dir != "/"; dir = filepath.Dir(dir) {
			ts.Check(os.Chmod(dir, 0o755))
		}
	}
}

func runCmd(ts *testscript.TestScript, name string, args ...string) {
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		ts.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
}

// asUser is the program "asuser USER CMD ARGS...": it runs CMD as USER,
// with USER's groups and USER, LOGNAME and HOME set, as su would, keeping
// the rest of the environment (TEND_ROOT, TEND_NO_START).
func asUser() {
	fail := func(err error) { fmt.Fprintln(os.Stderr, "asuser:", err); os.Exit(2) }
	u, err := user.Lookup(os.Args[1])
	if err != nil {
		fail(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	ids, err := u.GroupIds()
	if err != nil {
		fail(err)
	}
	var groups []int
	for _, g := range ids {
		n, _ := strconv.Atoi(g)
		groups = append(groups, n)
	}
	path, err := exec.LookPath(os.Args[2])
	if err != nil {
		fail(err)
	}
	if err := syscall.Setgroups(groups); err != nil {
		fail(err)
	}
	if err := syscall.Setgid(gid); err != nil {
		fail(err)
	}
	if err := syscall.Setuid(uid); err != nil {
		fail(err)
	}
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "USER" && k != "LOGNAME" && k != "HOME" {
			env = append(env, kv)
		}
	}
	env = append(env, "USER="+u.Username, "LOGNAME="+u.Username, "HOME="+u.HomeDir)
	fail(syscall.Exec(path, os.Args[2:], env))
}

// raceSwap is the program "raceswap SPOOL PREFIX PAYLOAD": an attacker
// who, whenever a request whose name starts with PREFIX arrives in SPOOL,
// renames a file of its own holding PAYLOAD over it at once, hoping the
// watcher claims its file for the other's request. It runs until killed.
func raceSwap() {
	spoolDir, prefix, payload := os.Args[1], os.Args[2], []byte(os.Args[3])
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err == nil {
		_, err = unix.InotifyAddWatch(fd, spoolDir, unix.IN_MOVED_TO|unix.IN_CLOSE_WRITE)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "raceswap:", err)
		os.Exit(2)
	}
	buf := make([]byte, 64<<10)
	done := make(map[string]bool) // once each: its own rename is an event too
	for i := 0; ; i++ {
		n, err := unix.Read(fd, buf)
		if err != nil {
			continue
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+int(ev.Len)]), "\x00")
			off += unix.SizeofInotifyEvent + int(ev.Len)
			if !strings.HasPrefix(name, prefix) || !strings.HasSuffix(name, ".start") || done[name] {
				continue
			}
			done[name] = true
			tmp := filepath.Join(spoolDir, fmt.Sprintf(".swap%d.tmp", i))
			if os.WriteFile(tmp, payload, 0o644) == nil {
				if err := os.Rename(tmp, filepath.Join(spoolDir, name)); err != nil {
					os.Remove(tmp)
					fmt.Println("refused:", err)
				} else {
					fmt.Println("swapped:", name)
				}
			}
		}
	}
}

// forge ID PIDFILE: forge run ID's record as anyone who may write it
// could: name the process in PIDFILE, and compute the record's sum again
// the way docs/protocol.md says. Its seal, which needs the root's key, is
// left as it was.
func cmdForge(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: forge ID PIDFILE")
	}
	pid, err := strconv.Atoi(strings.TrimSpace(ts.ReadFile(args[1])))
	ts.Check(err)
	ps, err := procfs.ReadStat(pid)
	ts.Check(err)
	path := ts.MkAbs(filepath.Join(".tend", "runs", args[0], "state.json"))
	b, err := os.ReadFile(path)
	ts.Check(err)
	var st tracker.State
	ts.Check(json.Unmarshal(b, &st))
	st.PID, st.PGID, st.ProcStart, st.Sum = pid, pid, ps.StartTime, ""
	compact, err := json.Marshal(&st)
	ts.Check(err)
	h := sha256.Sum256(compact)
	st.Sum = hex.EncodeToString(h[:12])
	out, err := json.MarshalIndent(&st, "", "  ")
	ts.Check(err)
	ts.Check(os.WriteFile(path, append(out, '\n'), 0o600))
	if _, err := tracker.NewStore(ts.MkAbs(".tend")).Read(args[0]); err != nil {
		ts.Fatalf("the forged record's sum does not match, so the test proves nothing: %v", err)
	}
}

// waitglob n pattern: wait until at least n files match pattern.
func cmdWaitGlob(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 2 {
		ts.Fatalf("usage: waitglob N PATTERN...")
	}
	want, err := strconv.Atoi(args[0])
	ts.Check(err)
	poll(ts, func() string {
		n := 0
		for _, pattern := range args[1:] {
			matches, _ := filepath.Glob(ts.MkAbs(pattern))
			n += len(matches)
		}
		if n < want {
			return fmt.Sprintf("%d files match %s, want %d", n, strings.Join(args[1:], " "), want)
		}
		return ""
	})
}

// markRequest is the program "markreq FILE...": it puts the mark of a
// request of root's on each file, as tend's own clients do (spool.Mark),
// for the tests that write root's requests by hand into a shared spool.
func markRequest() {
	for _, path := range os.Args[1:] {
		fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			fmt.Fprintln(os.Stderr, "markreq:", err)
			os.Exit(1)
		}
		spool.Mark(fd)
		unix.Close(fd)
	}
}

// hasCapability reports whether this process has capability c in its
// effective set.
func hasCapability(c int) bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if hex, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
			return err == nil && caps&(1<<c) != 0
		}
	}
	return false
}
