package main

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
)

// term drives a real terminal, tmux's, for the script: what a person at
// it would type and see.
//
//	term start W H       a W x H terminal running sh in $WORK (tmux needed: see need)
//	term keys KEY...     type keys, as tmux send-keys names them (Enter, Escape, C-u)
//	term wait [-e] RE    wait until the screen matches RE ((?m) is on; -e:
//	                     with its colors and attributes, as escape codes)
//	term gone [-e] RE    wait until the screen no longer matches RE
//	term resize W H      resize the terminal
//	term screen          print the screen
//
// The terminal is gone when the script ends.
func cmdTerm(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) == 0 {
		ts.Fatalf("usage: term start|keys|wait|gone|resize|screen ...")
	}
	sock := ts.MkAbs("tmux.sock")
	tmux := func(args ...string) (string, error) {
		cmd := exec.Command("tmux", append([]string{"-S", sock, "-f", "/dev/null"}, args...)...)
		cmd.Dir = ts.MkAbs(".")
		var env []string
		for _, kv := range os.Environ() {
			if k, _, _ := strings.Cut(kv, "="); k != "TMUX" && k != "TMUX_PANE" {
				env = append(env, kv)
			}
		}
		for _, k := range []string{"PATH", "HOME", "TMPDIR", "TEND_ROOT", "TEND_NO_START", "WORK"} {
			env = append(env, k+"="+ts.Getenv(k))
		}
		cmd.Env = append(env, "NO_COLOR=", "TEND_COLOR=", "TEND_SESSION=")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	must := func(args ...string) string {
		out, err := tmux(args...)
		if err != nil {
			ts.Fatalf("tmux %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	screen := func(escapes bool) string {
		args := []string{"capture-pane", "-p", "-t", "t"}
		if escapes {
			args = append(args, "-e")
		}
		out, _ := tmux(args...)
		return out
	}
	switch args[0] {
	case "start":
		if len(args) != 3 {
			ts.Fatalf("usage: term start W H")
		}
		must("new-session", "-d", "-s", "t", "-x", args[1], "-y", args[2], "-c", ts.MkAbs("."), "sh")
		ts.Defer(func() { tmux("kill-server") })
	case "keys":
		must(append([]string{"send-keys", "-t", "t"}, args[1:]...)...)
	case "wait", "gone":
		escapes := len(args) == 3 && args[1] == "-e"
		re := regexp.MustCompile("(?m)" + args[len(args)-1])
		want := args[0] == "wait"
		end := time.Now().Add(deadline)
		for {
			s := screen(escapes)
			if re.MatchString(s) == want {
				return
			}
			if time.Now().After(end) {
				size, _ := tmux("display-message", "-p", "-t", "t", "#{pane_width}x#{pane_height}")
				ts.Fatalf("after %v, the screen (%s) %s %q:\n%s", deadline, strings.TrimSpace(size),
					map[bool]string{true: "does not match", false: "still matches"}[want], args[len(args)-1], s)
			}
			time.Sleep(50 * time.Millisecond) // a tmux client a time, on a busy machine
		}
	case "resize":
		must("resize-window", "-t", "t", "-x", args[1], "-y", args[2])
	case "screen":
		fmt.Fprint(ts.Stdout(), screen(false))
	default:
		ts.Fatalf("term: unknown %q", args[0])
	}
}
