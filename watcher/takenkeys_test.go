package watcher_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
	"github.com/tendhq/tend/watcher"
)

// A run queued by an earlier tend, which let through a label key this
// one refuses ("k=x"), keeps it: its request, read again as the watcher
// starts and checked (once the settle period passed) before the run's
// time comes, is the version taken, not a new request, whether its
// record names that version (request_sum) or, made by a tend before
// request_sum, names none. It runs with the key when its time comes.
func TestQueuedKeepsTakenLabelKey(t *testing.T) {
	for _, tc := range []struct {
		name    string
		withSum bool
	}{{"its record names the version", true}, {"a record of a tend before request_sum", false}} {
		t.Run(tc.name, func(t *testing.T) {
			c := inProcessWith(t, func(cfg watcher.Config) error {
				if err := plantQueued(cfg.Root, tc.withSum); err != nil {
					return err
				}
				return watcher.Run(cfg)
			})
			st := ended(t, c, "keyed")
			if st.State != tracker.Completed || st.Labels["k=x"] != "v" {
				t.Fatalf("run keyed ended %s (%s), labels %v: want completed, with the key it was queued with", st.State, st.Reason, st.Labels)
			}
		})
	}
}

// keyedBody is the request of the run plantQueued queues: it waits a
// second, twenty settle periods of inProcess's watcher.
const keyedBody = `{"command": "echo keyed", "not_before": "1s", "labels": {"k=x": "v"}}`

// plantQueued makes root hold run keyed queued, as a tend that let its
// label key through left it: its record, and its request in the spool;
// with withSum, the record names the request's version.
func plantQueued(root string, withSum bool) error {
	req, err := spool.ParseStart([]byte(keyedBody))
	if err != nil {
		return err
	}
	store, dir := tracker.NewStore(root), spool.Dir{Root: root}
	now := time.Now()
	notBefore := now.Add(time.Second)
	st := &tracker.State{
		ID: "keyed", Rev: 1, State: tracker.Queued, Reason: "waiting until its not_before", OwnerUID: os.Getuid(),
		Command: req.Args(), Cwd: filepath.Dir(root), Labels: req.Labels, Grace: spool.Duration(10 * time.Second),
		CreatedAt: now, NotBefore: &notBefore,
	}
	if withSum {
		st.RequestSum = spool.BodySum([]byte(keyedBody))
	}
	for _, step := range []func() error{
		dir.Make, store.Make,
		func() error { return store.MakeRunDir(st.ID) },
		func() error { return store.Write(st) },
		func() error { return os.WriteFile(filepath.Join(dir.Spool(), "keyed.start"), []byte(keyedBody), 0o600) },
	} {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}
