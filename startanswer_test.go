package tend

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/tendhq/tend/spool"
	"golang.org/x/sys/unix"
)

// An answer to a start request's name answers this client's request only
// if where its own file went says so: two clients of one user that start
// the same ID at once may each read the other's answer.
func TestStartAnswer(t *testing.T) {
	const (
		accepted = spool.Accepted
		rejected = spool.Rejected
	)
	tests := []struct {
		name        string
		mineWent    string // where this client's file is: "run", "spool" or "aside"
		otherInRun  bool   // another's request made the run
		outcome     string
		wantOutcome string
		wantMine    bool
	}{
		{"taken, answered accepted", "run", false, accepted, accepted, true},
		{"taken, then another's copy rejected", "run", false, rejected, accepted, true},
		{"queued", "spool", false, accepted, accepted, true},
		{"not yet examined, another's acceptance read", "spool", true, accepted, "", false},
		{"not yet examined, another's rejection read", "spool", true, rejected, "", false},
		{"rejected, another's acceptance read", "aside", true, accepted, "", false},
		{"rejected", "aside", true, rejected, rejected, true},
		{"rejected, no run", "aside", false, rejected, rejected, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), ".tend")
			c, err := Open(root, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if err := c.dir.Make(); err != nil {
				t.Fatal(err)
			}
			n := spool.Name{ID: "race", Verb: spool.VerbStart}
			mine := write(t, filepath.Join(t.TempDir(), "mine"))
			runReq := c.store.Run(n.ID).Request()
			if err := os.MkdirAll(filepath.Dir(runReq), 0o755); err != nil {
				t.Fatal(err)
			}
			if tt.otherInRun {
				write(t, runReq)
			}
			dst := map[string]string{"run": runReq, "spool": c.spoolPath(n), "aside": filepath.Join(root, "rejected", "race.start")}[tt.mineWent]
			if err := os.Rename(mine, dst); err != nil {
				t.Fatal(err)
			}
			outcome, _, ok := c.startAnswer(n, inode(t, dst), tt.outcome, "detail")
			if ok != tt.wantMine || ok && outcome != tt.wantOutcome {
				t.Errorf("startAnswer = %q, %v; want %q, %v", outcome, ok, tt.wantOutcome, tt.wantMine)
			}
		})
	}
}

func write(t *testing.T, path string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte("true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}
