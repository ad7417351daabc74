package tend_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestMain builds the tend command, which the examples and tests run as
// their watcher (tend watch), and puts it first on the PATH.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tend-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "tend"), "./cmd/tend")
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
