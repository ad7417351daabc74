package tracker

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestLastLineStart: where a file's torn last line starts, found from the
// end, across the blocks it is read in; -1 past the limit.
func TestLastLineStart(t *testing.T) {
	long := strings.Repeat("x", 150<<10) // more than two blocks
	for _, tc := range []struct {
		name, data string
		limit      int64
		want       int
	}{
		{"whole", "a\nb\n", maxTorn, 4},
		{"torn", "a\nb\n{\"time", maxTorn, 4},
		{"torn across blocks", "a\n" + long, maxTorn, 2},
		{"no newline at all", long, maxTorn, 0},
		{"a newline block-aligned", strings.Repeat("y", 64<<10-1) + "\n" + long, maxTorn, 64 << 10},
		{"longer than the limit", "a\n" + long, 100 << 10, -1},
		{"as long as the limit allows", "a\n" + long, 150 << 10, 2},
	} {
		path := filepath.Join(t.TempDir(), "h")
		if err := os.WriteFile(path, []byte(tc.data), 0o600); err != nil {
			t.Fatal(err)
		}
		fd, err := unix.Open(path, unix.O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		got, err := lastLineStart(fd, int64(len(tc.data)), tc.limit)
		unix.Close(fd)
		if err != nil || got != int64(tc.want) {
			t.Errorf("%s: lastLineStart = %d, %v; want %d", tc.name, got, err, tc.want)
		}
	}
}

// TestBadLinesKeepTheirFilesMode: the bad lines fsck --repair and a
// starting watcher move aside are no more readable than the history they
// came from, which keeps its own mode; an existing .bad is tightened to
// match, and a link in its place is not followed.
func TestBadLinesKeepTheirFilesMode(t *testing.T) {
	const good = `{"time":"2026-11-21T11:04:24Z","id":"a","rev":1,"state":"queued"}` + "\n"
	repair := func(root string) error { _, err := repairHistory(root, nil); return err }
	mend := func(root string) error { _, err := MendTornEnd(root); return err }
	for _, tc := range []struct {
		name    string
		mode    uint32 // the history's
		data    string
		prior   string // what is at history.jsonl.bad first: "" none, "file" a 0644 file, "link" a link
		act     func(root string) error
		wantBad uint32 // 0: the repair fails, the link's target unchanged
	}{
		{"repair, history 0600", 0o600, good + "not json\n", "", repair, 0o600},
		{"repair, history 0640", 0o640, good + "not json\n", "", repair, 0o640},
		{"repair, history 0644", 0o644, good + "not json\n", "", repair, 0o644},
		{"repair, history 0600, .bad 0644 there", 0o600, good + "not json\n", "file", repair, 0o600},
		{"repair, .bad a link", 0o600, good + "not json\n", "link", repair, 0},
		{"mend, history 0600", 0o600, good + `{"time":"2026`, "", mend, 0o600},
		{"mend, history 0600, .bad 0644 there", 0o600, good + `{"time":"2026`, "file", mend, 0o600},
		{"mend, .bad a link", 0o600, good + `{"time":"2026`, "link", mend, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			path := filepath.Join(root, "history.jsonl")
			if err := os.WriteFile(path, []byte(tc.data), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, os.FileMode(tc.mode)); err != nil {
				t.Fatal(err)
			}
			target := filepath.Join(t.TempDir(), "elsewhere")
			switch tc.prior {
			case "file":
				if err := os.WriteFile(path+".bad", []byte("older\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(path+".bad", 0o644); err != nil {
					t.Fatal(err)
				}
			case "link":
				if err := os.WriteFile(target, nil, 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(target, path+".bad"); err != nil {
					t.Fatal(err)
				}
			}
			err := tc.act(root)
			if tc.wantBad == 0 {
				if b, _ := os.ReadFile(target); err == nil || len(b) > 0 {
					t.Fatalf("err %v, the link's target holds %q: want an error and nothing written through the link", err, b)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			fi, err := os.Lstat(path + ".bad")
			if err != nil {
				t.Fatal(err)
			}
			if got := uint32(fi.Mode().Perm()); got != tc.wantBad {
				t.Errorf(".bad has mode %04o, want %04o", got, tc.wantBad)
			}
			if b, _ := os.ReadFile(path + ".bad"); tc.prior == "file" && !strings.HasPrefix(string(b), "older\n") || len(b) == 0 {
				t.Errorf(".bad holds %q: want the bad line appended to what it held", b)
			}
			if fi, err := os.Stat(path); err != nil || uint32(fi.Mode().Perm()) != tc.mode {
				t.Errorf("the history: %v, %v; want it to keep mode %04o", fi.Mode(), err, tc.mode)
			}
		})
	}
}
