package main

import (
	"os/exec"
	"testing"
	"time"

	"github.com/tendhq/tend/procfs"
)

// waitFor wakes when a process it is given exits, not at its next poll.
func TestWaitForWakesOnExit(t *testing.T) {
	cmd := exec.Command("sleep", "0.1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	st, err := procfs.ReadStat(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	h, err := procfs.Open(cmd.Process.Pid, st.StartTime)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	go cmd.Wait()
	const deadline = 30 * time.Second // polling once an hour, only the exit can end it sooner
	start := time.Now()
	if !waitFor(h.Exited, deadline, time.Hour, nil, h) {
		t.Fatal("waitFor = false after the process exited")
	}
	if took := time.Since(start); took >= deadline {
		t.Fatalf("waitFor returned after %v: at its deadline, not at the exit", took)
	}
}
