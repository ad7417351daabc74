package watcher

import (
	"os"
	"path/filepath"
	"testing"
)

// TestFirstProgram: a purge finds find(1) in /bin where /usr is not
// merged, and takes nothing that cannot be run for it.
func TestFirstProgram(t *testing.T) {
	dir := t.TempDir()
	mk := func(name string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if mode.IsDir() {
			if err := os.Mkdir(p, 0o755); err != nil {
				t.Fatal(err)
			}
			return p
		}
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	exe, plain, sub := mk("exe", 0o755), mk("plain", 0o644), mk("sub", os.ModeDir|0o755)
	missing := filepath.Join(dir, "missing")
	for _, tc := range []struct {
		name  string
		paths []string
		want  string
	}{
		{"the first", []string{exe, plain}, exe},
		{"past one missing", []string{missing, exe}, exe},
		{"past one not executable", []string{plain, exe}, exe},
		{"past a directory", []string{sub, exe}, exe},
		{"none", []string{missing, plain, sub}, ""},
	} {
		if got := firstProgram(tc.paths); got != tc.want {
			t.Errorf("%s: firstProgram(%q) = %q, want %q", tc.name, tc.paths, got, tc.want)
		}
	}
}
