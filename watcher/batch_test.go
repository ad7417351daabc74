package watcher

import (
	"io"
	"os"
	"testing"
	"time"

	"github.com/tendhq/tend/tracker"
)

// A batch holds saves back and writes them at its end; what waits on them
// runs after they are on disk, and a launch's unbatch writes what is held
// and lets its own saves through at once.
func TestBatchHoldsSavesUntilTheirFlush(t *testing.T) {
	root := t.TempDir()
	w := newWatcher(Config{Root: root, Log: io.Discard})
	if err := w.store.Make(); err != nil {
		t.Fatal(err)
	}
	run := func(id string) *tracker.State {
		os.Mkdir(w.store.RunDir(id), 0o755)
		return &tracker.State{ID: id, State: tracker.Completed, CreatedAt: time.Now()}
	}
	onDisk := func(st *tracker.State) bool {
		got, err := w.store.Read(st.ID)
		return err == nil && got.Rev == st.Rev
	}
	held, launched, after := run("held"), run("launched"), run("after")
	var order []string
	w.batched(func() {
		w.save(held)
		if onDisk(held) {
			t.Error("a save in a batch was written at once")
		}
		w.afterSaved(func() {
			if !onDisk(held) {
				t.Error("what waits on a save ran before it was written")
			}
			order = append(order, "after held")
		})
		resume := w.unbatch() // as a launch does
		if !onDisk(held) || len(order) != 1 {
			t.Errorf("unbatch did not write what was held first (order %v)", order)
		}
		w.save(launched)
		if !onDisk(launched) {
			t.Error("a save between unbatch and resume was held")
		}
		resume()
		w.save(after)
		w.save(after) // twice: one record, the second revision
		if onDisk(after) {
			t.Error("a save after resume was written at once")
		}
	})
	if !onDisk(after) || after.Rev != 2 {
		t.Errorf("the batch's end did not write its last save (rev %d)", after.Rev)
	}
	events, err := tracker.ReadHistory(tracker.HistoryPath(root))
	if err != nil || len(events) != 4 {
		t.Fatalf("history: %d events, %v; want 4, in save order", len(events), err)
	}
	for i, want := range []string{"held", "launched", "after", "after"} {
		if events[i].ID != want {
			t.Errorf("event %d is %s's, want %s's", i, events[i].ID, want)
		}
	}
}
