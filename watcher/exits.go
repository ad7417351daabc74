package watcher

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/tendhq/tend/procfs"
	"github.com/tendhq/tend/tracker/layout"
	"golang.org/x/sys/unix"
)

// Exit records are how a run's end outlives the watcher that started it.
// When a watcher dies, its runs become the keeper's children; the keeper
// reaps each and, for a process-group leader, first writes how it ended to
// ROOT/exits/PID-STARTTIME, a one-line file: "exited CODE" or
// "killed SIGNAL" (with " core" if it dumped core). The next watcher reads
// it to record the run's true end, then removes it. PID plus start time
// names one process for the life of a boot, so a record can never be taken
// for another process's of that boot (a run of an earlier boot is looked
// for in none: see otherBoot).

func exitRecordName(pid int, start uint64) string {
	return strconv.Itoa(pid) + "-" + strconv.FormatUint(start, 10)
}

// formatExit is the content of an exit record.
func formatExit(e procfs.Exit) string {
	if e.Signal != 0 {
		s := "killed " + unix.SignalName(e.Signal)
		if e.Core {
			s += " core"
		}
		return s + "\n"
	}
	return "exited " + strconv.Itoa(e.Code) + "\n"
}

// parseExit parses the content of an exit record.
func parseExit(b []byte) (procfs.Exit, error) {
	f := strings.Fields(string(b))
	switch {
	case len(f) == 2 && f[0] == "exited":
		code, err := strconv.Atoi(f[1])
		if err == nil && code >= 0 && code <= 255 {
			return procfs.Exit{Code: code}, nil
		}
	case (len(f) == 2 || len(f) == 3 && f[2] == "core") && f[0] == "killed":
		if sig := unix.SignalNum(f[1]); sig > 0 {
			return procfs.Exit{Code: -1, Signal: syscall.Signal(sig), Core: len(f) == 3}, nil
		}
	}
	return procfs.Exit{}, fmt.Errorf("malformed exit record %q", strings.TrimSpace(string(b)))
}

// writeExitRecord records how process pid (started at start) ended. It
// replaces the file atomically, so a reader sees all of it or nothing.
func writeExitRecord(root string, pid int, start uint64, e procfs.Exit) error {
	dir := layout.Root(root).Exits()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	path := filepath.Join(dir, exitRecordName(pid, start))
	// A hidden temporary name, which parseExitRecordName refuses, so a
	// watcher never takes it for a record.
	tmp, err := os.CreateTemp(dir, ".record-*")
	if err != nil {
		return err
	}
	_, err = tmp.WriteString(formatExit(e))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// readExitRecord returns the recorded end of process pid started at
// start; the error wraps fs.ErrNotExist if there is no record (yet).
func readExitRecord(root string, pid int, start uint64) (procfs.Exit, error) {
	path := filepath.Join(layout.Root(root).Exits(), exitRecordName(pid, start))
	b, err := os.ReadFile(path)
	if err != nil {
		return procfs.Exit{}, err
	}
	e, err := parseExit(b)
	if err != nil {
		return procfs.Exit{}, fmt.Errorf("%s: %w", path, err)
	}
	return e, nil
}

// removeExitRecord removes a record that has been used.
func removeExitRecord(root string, pid int, start uint64) error {
	err := os.Remove(filepath.Join(layout.Root(root).Exits(), exitRecordName(pid, start)))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// parseExitRecordName is the inverse of exitRecordName. It fails for the
// temporary files that atomic writes leave for a moment.
func parseExitRecordName(name string) (pid int, start uint64, ok bool) {
	p, s, found := strings.Cut(name, "-")
	if !found {
		return 0, 0, false
	}
	pid, err1 := strconv.Atoi(p)
	start, err2 := strconv.ParseUint(s, 10, 64)
	if err1 != nil || err2 != nil || pid <= 0 {
		return 0, 0, false
	}
	return pid, start, true
}
