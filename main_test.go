package tend_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestMain builds the tend command, which the examples and tests run as
// their watcher (tend watch), with tend-watch, the program it becomes,
// and puts them first on the PATH.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tend-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	build := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "./cmd/tend", "./cmd/tend-watch")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building tend:", err)
		os.Exit(1)
	}
	os.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	os.Unsetenv("TEND_ROOT")
	os.Unsetenv("TEND_SESSION")
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
