package main

import (
	"github.com/tendhq/tend"
	"golang.org/x/sys/unix"
)

// runExitCode is the exit code a shell would report for the run: its own
// code, 128+N if signal N killed it, 127 if it could not start.
func runExitCode(st *tend.Record) int {
	switch {
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
