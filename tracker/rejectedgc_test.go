package tracker

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tendhq/tend/spool"
	"golang.org/x/sys/unix"
)

// ExpireRejected removes a refused request with its reason once its
// reason is old (whatever the request's own change time), and what --repair would remove once old; it leaves anything young,
// a request without its reason, a directory, and hidden files.
func TestExpireRejected(t *testing.T) {
	tests := []struct {
		name      string
		make      func(r *fakeRoot)
		young     []string // changed after the cutoff (chmod), or written ("written:NAME")
		wantN     int
		wantLeft  []string
		wantFound bool // fsck finds something in what is left
	}{
		{"a pair, old", func(r *fakeRoot) { r.reject("x.strat", "x") }, nil, 1, nil, false},
		{"two of a name, old", func(r *fakeRoot) { r.reject("x.strat", "x"); r.reject("x.strat", "y") }, nil, 2, nil, false},
		// Its owner renews its change time (a chmod) at will: it goes
		// by its reason's, the watcher's.
		{"a pair, its request changed since", func(r *fakeRoot) { r.reject("x.strat", "x") },
			[]string{"x.strat"}, 1, nil, false},
		// Its change time is renewed by a link made to it and removed,
		// where members may link what is not theirs: it goes by when it
		// was written.
		{"a pair, its reason's change time renewed", func(r *fakeRoot) { r.reject("x.strat", "x") },
			[]string{"x.strat.error"}, 1, nil, false},
		{"a pair, its reason written again", func(r *fakeRoot) { r.reject("x.strat", "x") },
			[]string{"written:x.strat.error"}, 0, []string{"x.strat", "x.strat.error"}, false},
		{"a request without its reason: a loss fsck says", func(r *fakeRoot) { r.reject("x.strat", "x"); r.remove("rejected/x.strat.error") },
			nil, 0, []string{"x.strat"}, true},
		{"a reason without its request: a removal cut short", func(r *fakeRoot) { r.reject("x.strat", "x"); r.remove("rejected/x.strat") },
			nil, 0, nil, false},
		{"a partial write of a reason", func(r *fakeRoot) { r.file("rejected/x.strat.error4242", "") }, nil, 0, nil, false},
		{"a request named .error", func(r *fakeRoot) { r.reject("y.error", "y") }, nil, 1, nil, false},
		{"a directory moved aside, empty", func(r *fakeRoot) { r.rejectDir("d.start", false) }, nil, 1, nil, false},
		{"a directory moved aside, holding a file", func(r *fakeRoot) { r.rejectDir("d.start", true) },
			nil, 0, []string{"d.start", "d.start.error"}, false},
		{"a hidden file", func(r *fakeRoot) { r.file("rejected/.x.strat.error", "") }, nil, 0, []string{".x.strat.error"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newFakeRoot(t)
			tt.make(r)
			cutoff := pastCtime(t, r.root)
			for _, name := range tt.young {
				if file, ok := strings.CutPrefix(name, "written:"); ok {
					now := time.Now()
					if err := os.Chtimes(filepath.Join(r.root, "rejected", file), now, now); err != nil {
						t.Fatal(err)
					}
					continue
				}
				touchCtime(t, filepath.Join(r.root, "rejected", name))
			}
			before := names(t, r.root)
			n, err := ExpireRejected(r.root, cutoff, true)
			if err != nil || n != tt.wantN || !slices.Equal(names(t, r.root), before) {
				t.Fatalf("dry run = %d, %v, left %q; want %d, nil, %q", n, err, names(t, r.root), tt.wantN, before)
			}
			n, err = ExpireRejected(r.root, cutoff, false)
			if err != nil || n != tt.wantN {
				t.Fatalf("ExpireRejected = %d, %v; want %d, nil", n, err, tt.wantN)
			}
			if left := names(t, r.root); !slices.Equal(left, tt.wantLeft) {
				t.Errorf("left %q, want %q", left, tt.wantLeft)
			}
			if found := checkRejected(r.root); (len(found) > 0) != tt.wantFound {
				t.Errorf("fsck then finds %v", found)
			}
		})
	}
}

// A crash between the removal of a request and of its reason (the
// request goes first) leaves what fsck takes for a write cut short,
// which --repair removes: never a request whose reason was lost.
func TestExpireRejectedCutShort(t *testing.T) {
	r := newFakeRoot(t)
	r.reject("x.strat", "x")
	r.remove("rejected/x.strat") // what ExpireRejected does first
	found := checkRejected(r.root)
	if len(found) != 1 || found[0].removed == "" || found[0].reasonFor != "" || !strings.Contains(found[0].What, "by the retention") {
		t.Fatalf("fsck finds %+v; want the reason, to remove, said to be what a removal by the retention leaves", found)
	}
}

// names returns the names in the root's rejected/, sorted.
func names(t *testing.T, root string) []string {
	ents, err := os.ReadDir(filepath.Join(root, "rejected"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// pastCtime returns a time after the change times of every file made in
// root so far, and before any change from now on: it waits (on a probe
// file's change time, not a fixed sleep) for the clock file systems use,
// which is coarse, to move on.
func pastCtime(t *testing.T, root string) time.Time {
	probe := filepath.Join(root, "probe")
	if err := os.WriteFile(probe, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	first := ctime(t, probe)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		touchCtime(t, probe)
		if c := ctime(t, probe); c.After(first) {
			os.Remove(probe)
			return c
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("the file system's clock did not move in 5 s")
	return time.Time{}
}

func ctime(t *testing.T, path string) time.Time {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return time.Unix(st.Ctim.Unix())
}

// touchCtime sets path's change time to now (a chmod to its own mode).
func touchCtime(t *testing.T, path string) {
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, fi.Mode().Perm()); err != nil {
		t.Fatal(err)
	}
}

// rejectDir makes directory name in the spool, holding a file if full,
// and rejects it, as the watcher does (it is moved, never opened).
func (r *fakeRoot) rejectDir(name string, full bool) {
	r.t.Helper()
	dir := filepath.Join(r.root, "spool", name)
	if err := os.Mkdir(dir, 0o700); err != nil {
		r.t.Fatal(err)
	}
	if full {
		if err := os.WriteFile(filepath.Join(dir, "f"), nil, 0o600); err != nil {
			r.t.Fatal(err)
		}
	}
	if _, err := (spool.Dir{Root: r.root}).Reject(name, "not a regular file"); err != nil {
		r.t.Fatal(err)
	}
}
