package watcher_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tendhq/tend"
	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
	"github.com/tendhq/tend/watcher"
)

// otherUID is a user config.json lets submit, who owns no queued run.
const otherUID = 4242

// A queued run's request replaced between the watcher's read of it and
// its claim, as it starts the run: the version claimed is checked as a
// new request (one its owner wrote with a label key the rule refuses is
// put back in the spool, and holds the run until it is mended, never
// run), and one of another owner is not the run's (the run ends failed);
// a version that passes starts the run, as it says.
func TestQueuedSwappedAsClaimed(t *testing.T) {
	for _, tc := range []struct {
		name  string
		body  string
		uid   int
		state tracker.StateName
		want  string // in the run's reason; for a completed run, its label
		held  string // the reason of a run held by the version, mended then into one labeled "mended"
	}{
		{name: "refused label key", body: `{"command": "echo swapped", "labels": {"k=x": "v"}}`, state: tracker.Completed,
			held: `held: its request does not parse or is refused ("labels": key "k=x"`, want: "mended"},
		{name: "another owner", body: `{"command": "echo swapped"}`, uid: otherUID, state: tracker.Failed,
			want: "the request claimed to start it is not its own: owned by uid 4242, not by the run's owner"},
		{name: "a version that passes", body: `{"command": "echo swapped", "labels": {"k": "x"}}`, state: tracker.Completed, want: "x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.uid != 0 && os.Geteuid() != 0 {
				t.Skip("a file of another owner needs root")
			}
			var swapped atomic.Bool
			c, root := queuedSwapping(t, func(spoolDir, name string) {
				if name != "q.start" || swapped.Load() {
					return
				}
				swapped.Store(true)
				swapIn(t, filepath.Join(spoolDir, name), tc.body, tc.uid)
			})
			ctx := deadline(t)
			if _, err := c.Start(ctx, "blocker", tend.Request{Shell: "exec sleep 1000"}); err != nil {
				t.Fatal(err)
			}
			st, err := c.Start(ctx, "q", tend.Request{Shell: "echo original"})
			if err != nil {
				t.Fatal(err)
			}
			if st.State != tracker.Queued {
				t.Fatalf("run q is %s, want queued behind blocker", st.State)
			}
			if _, err := c.Cancel(ctx, "blocker", tend.Control{}); err != nil {
				t.Fatal(err)
			}
			if tc.held != "" {
				heldThenMended(t, root, tc.held)
			}
			st = ended(t, c, "q")
			if !swapped.Load() {
				t.Fatal("run q started, and its request was never swapped")
			}
			if st.State != tc.state {
				t.Fatalf("run q ended %s (%s), want %s", st.State, st.Reason, tc.state)
			}
			switch tc.state {
			case tracker.Failed:
				if !strings.Contains(st.Reason, tc.want) {
					t.Errorf("run q's reason is %q, want it to say %q", st.Reason, tc.want)
				}
				if st.StartedAt != nil || st.PID != 0 {
					t.Errorf("run q failed, but it started: %+v", st)
				}
			default:
				ran := "swapped"
				if tc.held != "" {
					ran = "mended"
				}
				if st.Labels["k"] != tc.want || !strings.Contains(strings.Join(st.Command, " "), ran) {
					t.Errorf("run q ran %q with labels %v, want the %s version's", st.Command, st.Labels, ran)
				}
			}
			if _, err := os.Stat(filepath.Join(root, "runs", "q", "request")); err != nil {
				t.Errorf("the version claimed is not kept as run q's request: %v", err)
			}
		})
	}
}

// heldThenMended waits for queued run q of root to be held, its reason
// beginning with held, by the bad version of its request put back in
// the spool, and mends it: a version labeled "mended".
func heldThenMended(t *testing.T, root, held string) {
	t.Helper()
	store := tracker.NewStore(root)
	for ctx := deadline(t); ; {
		st, err := store.Read("q")
		if err == nil && strings.HasPrefix(st.Reason, held) && st.State == tracker.Queued {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("run q is not held (%v): %+v", err, st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if b, err := os.ReadFile(filepath.Join(root, "spool", "q.start")); err != nil || !strings.Contains(string(b), "k=x") {
		t.Errorf("the bad version is not back in the spool, to mend: %q, %v", b, err)
	}
	swapIn(t, filepath.Join(root, "spool", "q.start"), `{"command": "echo mended", "labels": {"k": "mended"}}`, 0)
}

// queuedSwapping starts a watcher with one slot (max_running 1) that lets
// otherUID submit, and calls claiming on its loop before each claim of
// a queued run's request, with the spool and the request's name. It
// returns a client and the root.
func queuedSwapping(t *testing.T, claiming func(spoolDir, name string)) (*tend.Client, string) {
	return queuedSwappingWith(t, nil, claiming)
}

// queuedSwappingWith is queuedSwapping, with settings (if not nil)
// changing the watcher's configuration first.
func queuedSwappingWith(t *testing.T, settings func(*watcher.Config), claiming func(spoolDir, name string)) (*tend.Client, string) {
	var mu sync.Mutex
	var root string
	c := inProcessWith(t, func(cfg watcher.Config) error {
		cfg.Settings.MaxRunning = 1
		cfg.Settings.Users = []int{otherUID}
		if settings != nil {
			settings(&cfg)
		}
		mu.Lock()
		root = cfg.Root
		mu.Unlock()
		return watcher.RunClaiming(cfg, func(name string) { claiming(filepath.Join(cfg.Root, "spool"), name) })
	})
	mu.Lock()
	defer mu.Unlock()
	return c, root
}

// swapIn renames a file holding body, owned by uid, over path: a new
// version of the request there, as an editor saves one.
func swapIn(t *testing.T, path, body string, uid int) {
	tmp := filepath.Join(filepath.Dir(filepath.Dir(path)), "swap.tmp")
	err := os.WriteFile(tmp, []byte(body), 0o600)
	if err == nil && uid != 0 {
		err = os.Chown(tmp, uid, -1)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		t.Errorf("swapping %s: %v", path, err)
	}
}

// A queued run's version taken as it starts, which the root's settings
// send to a cluster where a run cannot have a ready file, is refused as
// it would be when taken (it holds the run), never started on the
// cluster unchecked. (The request's own rules alone passed it.)
func TestQueuedVersionRefusedOnACluster(t *testing.T) {
	var swapped atomic.Bool
	c, root := queuedSwappingWith(t, func(cfg *watcher.Config) {
		cfg.Settings.Slurm.Default = &spool.Slurm{} // every run not local goes to Slurm
	}, func(spoolDir, name string) {
		if name == "q.start" && !swapped.Swap(true) {
			swapIn(t, filepath.Join(spoolDir, name), `{"command": "echo swapped", "ready_file": true}`, 0)
		}
	})
	ctx := deadline(t)
	if _, err := c.Start(ctx, "blocker", tend.Request{Shell: "exec sleep 1000", Local: true}); err != nil {
		t.Fatal(err)
	}
	if st, err := c.Start(ctx, "q", tend.Request{Shell: "echo original", Local: true}); err != nil || st.State != tracker.Queued {
		t.Fatalf("run q: %+v, %v; want it queued behind blocker", st, err)
	}
	if _, err := c.Cancel(ctx, "blocker", tend.Control{}); err != nil {
		t.Fatal(err)
	}
	store := tracker.NewStore(root)
	for {
		st, err := store.Read("q")
		if err == nil && st.State == tracker.Queued && strings.HasPrefix(st.Reason, "held: ") {
			break
		}
		if err == nil && st.State != tracker.Queued || ctx.Err() != nil {
			t.Fatalf("run q is not held by the version a cluster refuses (%v): %+v", err, st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	swapIn(t, filepath.Join(root, "spool", "q.start"), `{"command": "echo mended", "slurm": false}`, 0)
	st := ended(t, c, "q")
	if st.State != tracker.Completed || !strings.Contains(strings.Join(st.Command, " "), "mended") {
		t.Fatalf("run q ended %s running %q, want the mended version completed", st.State, st.Command)
	}
}
