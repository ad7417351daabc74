package watcher_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tendhq/tend"
	"github.com/tendhq/tend/tracker"
	"github.com/tendhq/tend/watcher"
)

// otherUID is a user config.json lets submit, who owns no queued run.
const otherUID = 4242

// A queued run's request replaced between the watcher's read of it and
// its claim, as it starts the run: the version claimed is checked as a
// new request (one with a label key the rule refuses ends the run
// failed, never run), and one of another owner is not the run's; a
// version that passes starts the run, as it says.
func TestQueuedSwappedAsClaimed(t *testing.T) {
	for _, tc := range []struct {
		name  string
		body  string
		uid   int
		state tracker.StateName
		want  string // in the run's reason; for a completed run, its label
	}{
		{name: "refused label key", body: `{"command": "echo swapped", "labels": {"k=x": "v"}}`, state: tracker.Failed,
			want: `its request, changed as it was claimed to start it, is refused: "labels": key "k=x"`},
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
				if st.Labels["k"] != tc.want || !strings.Contains(strings.Join(st.Command, " "), "swapped") {
					t.Errorf("run q ran %q with labels %v, want the swapped version's", st.Command, st.Labels)
				}
			}
			if _, err := os.Stat(filepath.Join(root, "runs", "q", "request")); err != nil {
				t.Errorf("the version claimed is not kept as run q's request: %v", err)
			}
		})
	}
}

// queuedSwapping starts a watcher with one slot (max_running 1) that lets
// otherUID submit, and calls claiming on its loop before each claim of
// a queued run's request, with the spool and the request's name. It
// returns a client and the root.
func queuedSwapping(t *testing.T, claiming func(spoolDir, name string)) (*tend.Client, string) {
	var mu sync.Mutex
	var root string
	c := inProcessWith(t, func(cfg watcher.Config) error {
		cfg.Settings.MaxRunning = 1
		cfg.Settings.Users = []int{otherUID}
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
