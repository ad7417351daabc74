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
			c, root := raceRoot(t)
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

// raceRoot returns a client of a new root, made, and the root's path:
// where two starts of the ID race run.
func raceRoot(t *testing.T) (*Client, string) {
	root := filepath.Join(t.TempDir(), ".tend")
	c, err := Open(root, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.dir.Make(); err != nil {
		t.Fatal(err)
	}
	return c, root
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

// A start request moved into rejected/ is answered by its reason there,
// whatever the answer to its name says: the watcher leaves the answer a
// second start is written over (another client's accepted, written after
// this one removed it), and this client's answer may never come.
func TestMovedAside(t *testing.T) {
	tests := []struct {
		name       string
		mineWent   string // "spool", "run" or a name in rejected/
		others     []string
		reason     string // in <name>.error, if not ""
		wantReason string
		want       bool
		another    bool // mine in rejected/ is another user's: its inode reused
	}{
		{name: "still in the spool", mineWent: "spool"},
		{name: "taken", mineWent: "run", others: []string{"race.start"}, reason: "race.start: old\n"},
		{name: "rejected", mineWent: "race.start", reason: "race.start: run race already exists\n",
			wantReason: "run race already exists", want: true},
		{name: "rejected after others of its name", mineWent: "race.start.2", others: []string{"race.start", "race.start.1"},
			reason: "race.start: run race already exists (completed)\n", wantReason: "run race already exists (completed)", want: true},
		{name: "its reason unreadable", mineWent: "race.start", want: true},
		{name: "its inode another's in rejected/", mineWent: "race.start", reason: "race.start: a member's\n", another: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, root := raceRoot(t)
			n := spool.Name{ID: "race", Verb: spool.VerbStart}
			rejected := filepath.Join(root, "rejected")
			os.MkdirAll(rejected, 0o755)
			for _, o := range tt.others {
				write(t, filepath.Join(rejected, o))
				if err := os.WriteFile(filepath.Join(rejected, o+".error"), []byte("race.start: another's\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			runReq := c.store.Run(n.ID).Request()
			if err := os.MkdirAll(filepath.Dir(runReq), 0o755); err != nil {
				t.Fatal(err)
			}
			dst := map[string]string{"run": runReq, "spool": c.spoolPath(n)}[tt.mineWent]
			if dst == "" {
				dst = filepath.Join(rejected, tt.mineWent)
				if tt.reason != "" {
					if err := os.WriteFile(dst+".error", []byte(tt.reason), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			write(t, dst)
			if tt.another {
				if os.Geteuid() != 0 {
					t.Skip("another user's file: needs root")
				}
				if err := os.Chown(dst, 65534, 65534); err != nil {
					t.Fatal(err)
				}
			}
			reason, ok := c.movedAside(n, inode(t, dst))
			if ok != tt.want || tt.wantReason != "" && reason != tt.wantReason {
				t.Errorf("movedAside = %q, %v; want %q, %v", reason, ok, tt.wantReason, tt.want)
			}
		})
	}
}
