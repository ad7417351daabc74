package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

// upgradeFrom is the earlier tend that TestUpgrade builds: the first
// after the root's files were named in one place (tracker/layout,
// e49c328; 19033dc), three days of protocol changes before this test was
// written. Move it forward only to a commit whose roots users may still
// have.
const upgradeFrom = "19033dca89fd7cf8f47c13503c01db6b6239bf33"

// TestUpgrade runs testdata/upgrade: a root that an earlier tend ran,
// and left running with tend down --keep-runs, taken over by this one.
// The earlier tend is built from the repository's history; without it
// (no git, a shallow clone) the test skips, unless
// TEND_REQUIRE_UPGRADE is set, as CI sets it.
func TestUpgrade(t *testing.T) {
	old, err := buildEarlierTend(t.TempDir(), upgradeFrom)
	if err != nil {
		if os.Getenv("TEND_REQUIRE_UPGRADE") != "" {
			t.Fatalf("building tend %s: %v", upgradeFrom, err)
		}
		t.Skipf("no tend %s to upgrade from: %v", upgradeFrom, err)
	}
	p := scriptParams("testdata/upgrade")
	setup := p.Setup
	p.Setup = func(e *testscript.Env) error {
		e.Setenv("OLD", old)
		return setup(e)
	}
	testscript.Run(t, p)
}

// buildEarlierTend builds tend and tend-watch of commit into dir/bin
// from the repository's history, and returns dir/bin.
func buildEarlierTend(dir, commit string) (string, error) {
	src, bin := filepath.Join(dir, "src"), filepath.Join(dir, "bin")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", err
	}
	archive := exec.Command("sh", "-c", `cd "$(git rev-parse --show-toplevel)" && git archive "$1" >"$2.tar" && tar -x -C "$2" -f "$2.tar"`, "sh", commit, src)
	if out, err := archive.CombinedOutput(); err != nil {
		return "", fmt.Errorf("git archive: %v: %s", err, strings.TrimSpace(string(out)))
	}
	for _, pkg := range []string{"./cmd/tend", "./cmd/tend-watch"} {
		build := exec.Command("go", "build", "-o", bin+"/", pkg)
		build.Dir = src
		if pkg == "./cmd/tend" {
			build.Env = append(os.Environ(), "CGO_ENABLED=0") // as its Makefile built it
		}
		if out, err := build.CombinedOutput(); err != nil {
			return "", fmt.Errorf("go build %s: %v: %s", pkg, err, out)
		}
	}
	return bin, nil
}
