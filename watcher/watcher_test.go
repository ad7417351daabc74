package watcher

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tendhq/tend/procfs"
)

func TestChildEnvLayers(t *testing.T) {
	got := childEnv([]string{"PATH=/bin", "HOME=/h", "TEND_RUN_ID=parent", "broken"},
		map[string]string{"HOME": "/x"},
		map[string]string{"TEND_RUN_ID": "child"})
	want := "PATH=/bin HOME=/x TEND_RUN_ID=child"
	if strings.Join(got, " ") != want {
		t.Fatalf("childEnv = %q, want %q", got, want)
	}
}

func TestLookPath(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "tool")
	os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755)
	os.WriteFile(filepath.Join(dir, "data"), nil, 0o644)
	tests := []struct {
		name, path, want, wantErr string
	}{
		{"tool", dir, exe, ""},
		{"./rel", "", "./rel", ""}, // a path is used as given, relative to the run's cwd
		{"data", dir, "", `executable "data" not found in PATH`},
		{"tool", "/nonexistent", "", "not found"},
		{"tool", "/nonexistent:", exe, ""}, // an empty PATH entry is the working directory
	}
	for _, tt := range tests {
		got, err := lookPath(tt.name, dir, []string{"PATH=" + tt.path})
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("lookPath(%q, PATH=%q) = %q, %v; want error %q", tt.name, tt.path, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("lookPath(%q, PATH=%q) = %q, %v; want %q", tt.name, tt.path, got, err, tt.want)
		}
	}
}

func TestDescribeExit(t *testing.T) {
	tests := []struct {
		e       procfs.Exit
		adopted bool
		want    string
	}{
		{procfs.Exit{Code: 3}, false, "exited with code 3"},
		{procfs.Exit{Code: -1, Signal: syscall.SIGKILL}, false, "killed by SIGKILL"},
		{procfs.Exit{Code: -1, Signal: syscall.SIGSEGV, Core: true}, false, "killed by SIGSEGV (core dumped)"},
		{procfs.Exit{Code: -1}, true, "exit status unknown: it ended while neither a watcher nor a keeper was its parent"},
	}
	for _, tt := range tests {
		if got := describeExit(tt.e, tt.adopted); got != tt.want {
			t.Errorf("describeExit(%+v, %v) = %q, want %q", tt.e, tt.adopted, got, tt.want)
		}
	}
}

func TestLockIsExclusiveAndProbeSeesIt(t *testing.T) {
	root := t.TempDir()
	if running, _, err := Probe(root); running || err != nil {
		t.Fatalf("Probe of an idle root = %v, %v", running, err)
	}
	l, err := lock(root)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(PIDPath(root), []byte("4242\n"), 0o644)
	if _, err := lock(root); !errors.Is(err, ErrRunning) || !strings.Contains(err.Error(), "(pid 4242)") {
		t.Fatalf("second lock = %v, want ErrRunning naming pid 4242", err)
	}
	if running, pid, err := Probe(root); !running || pid != 4242 || err != nil {
		t.Fatalf("Probe = %v, %d, %v; want running, 4242", running, pid, err)
	}
	l.Unlock()
	if _, err := lock(root); err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
}
