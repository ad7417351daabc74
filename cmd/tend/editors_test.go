package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/rogpeppe/go-internal/testscript"
	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
)

// need PROGRAM[:PACKAGE]...: each program is on the PATH; one that is
// not is installed with apt-get (after apt-get update), from the Debian
// package of its name or PACKAGE, which takes root: a script that may
// run without it skips first ([!exec:P] [!root] skip).
func cmdNeed(ts *testscript.TestScript, neg bool, args []string) {
	var missing []string
	for _, arg := range args {
		p, pkg, ok := strings.Cut(arg, ":")
		if !ok {
			pkg = p
		}
		if _, err := exec.LookPath(p); err != nil {
			missing = append(missing, pkg)
		}
	}
	if len(missing) == 0 {
		return
	}
	if os.Getuid() != 0 {
		ts.Fatalf("needs %s, which only root may install", strings.Join(missing, ", "))
	}
	aptMu.Lock() // scripts run in parallel; dpkg takes one at a time
	defer aptMu.Unlock()
	for _, argv := range [][]string{{"apt-get", "update"}, append([]string{"apt-get", "install", "-y", "--no-install-recommends"}, missing...)} {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			ts.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
		}
	}
}

var aptMu sync.Mutex

// edits TOOL ID N: edit queued run ID's request in the spool N times with
// a real tool, each time from "v<i-1>" to "v<i>", and after each edit wait
// until the run's record shows the new version. The run must stay queued
// throughout, and its request must never be rejected. TOOL is one of:
//
//	vim:SETTINGS   vim -es saving with these settings (e.g. "backup")
//	install        install(1) of a file prepared outside the spool
//	mv:DIR         mv of a file prepared in DIR (another file system)
func cmdEdits(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 3 {
		ts.Fatalf("usage: edits TOOL ID N")
	}
	tool, id := args[0], args[1]
	n, err := strconv.Atoi(args[2])
	ts.Check(err)
	root := ts.MkAbs(".tend")
	name := spool.Name{ID: id, Verb: spool.VerbStart}.String()
	path := filepath.Join(root, "spool", name)
	store := tracker.NewStore(root)
	for i := 1; i <= n; i++ {
		from, to := fmt.Sprintf("v%d ", i-1), fmt.Sprintf("v%d ", i)
		editWith(ts, tool, path, from, to)
		poll(ts, func() string {
			if _, err := os.Stat(filepath.Join(root, "rejected", name)); err == nil {
				ts.Fatalf("edit %d of %s with %s: the request was rejected: %s", i, id, tool, ts.ReadFile(filepath.Join(root, "rejected", name+".error")))
			}
			st, err := store.Read(id)
			if err != nil {
				return err.Error()
			}
			if st.State != tracker.Queued {
				ts.Fatalf("edit %d of %s with %s: the run is %s, not queued (%s)", i, id, tool, st.State, st.Reason)
			}
			if cmd := strings.Join(st.Command, " "); !strings.Contains(cmd, to) {
				return fmt.Sprintf("edit %d of %s with %s: its record says %q, want %q in it", i, id, tool, cmd, to)
			}
			return ""
		})
	}
}

// editWith replaces from with to in the request at path, saving it the
// way tool does.
func editWith(ts *testscript.TestScript, tool, path, from, to string) {
	kind, arg, _ := strings.Cut(tool, ":")
	var cmd *exec.Cmd
	switch kind {
	case "vim":
		// No vimrc, no viminfo; backupskip's default skips /tmp, where the
		// scripts run.
		cmd = exec.Command("vim", "-N", "-u", "NONE", "-i", "NONE", "-es",
			"-c", "set backupskip= "+arg, "-c", "%s/"+from+"/"+to+"/", "-c", "wq", path)
	case "install", "mv":
		dir := ts.MkAbs("stage")
		if kind == "mv" {
			dir = ts.MkAbs(arg)
		}
		ts.Check(os.MkdirAll(dir, 0o755))
		b, err := os.ReadFile(path)
		ts.Check(err)
		tmp := filepath.Join(dir, filepath.Base(path))
		ts.Check(os.WriteFile(tmp, []byte(strings.Replace(string(b), from, to, 1)), 0o644))
		if kind == "install" {
			cmd = exec.Command("install", "-m", "0644", tmp, path)
		} else {
			cmd = exec.Command("mv", tmp, path)
		}
	default:
		ts.Fatalf("edits: unknown tool %q", tool)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		ts.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
}
