package main

import (
	"github.com/tendhq/tend"
	"github.com/tendhq/tend/tracker"
	"golang.org/x/sys/unix"
)

// runExitCode is the exit code a shell would report for the run: its own
// code, 128+N if signal N killed it, 127 if it never ran (it could not
// start, or was canceled first). A run that did not complete is never 0:
// one canceled or timed out whose process exited 0 anyway (it caught the
// SIGTERM) is 1, so that `tend wait build && deploy` does not go on.
func runExitCode(st *tend.Record) int {
	switch {
	case st.ExitCode != nil && *st.ExitCode == 0 && st.State != tracker.Completed:
		return exitFailed
	case st.ExitCode != nil:
		return *st.ExitCode
	case st.Signal != "":
		if sig := unix.SignalNum(st.Signal); sig > 0 {
			return 128 + int(sig)
		}
	case st.PID == 0:
		return 127
	}
	return exitFailed
}
