package watcher

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
)

// batchWatcher returns a watcher on a new root, with no loop running: its
// batches are driven by the test.
func batchWatcher(t *testing.T) *watcher {
	w := newWatcher(Config{Root: t.TempDir(), Log: io.Discard})
	if err := w.store.Make(); err != nil {
		t.Fatal(err)
	}
	return w
}

// A batch holds saves back and writes them at its end; what waits on them
// runs after they are on disk, a batch inside it joins it, and lookups see
// the held record, not the older file.
func TestBatchHoldsSavesUntilTheirFlush(t *testing.T) {
	w := batchWatcher(t)
	run := func(id string) *tracker.State {
		os.Mkdir(w.store.RunDir(id), 0o755)
		return &tracker.State{ID: id, State: tracker.Completed, CreatedAt: time.Now()}
	}
	onDisk := func(st *tracker.State) bool {
		got, err := w.store.Read(st.ID)
		return err == nil && got.Rev == st.Rev
	}
	first, inner, after := run("first"), run("inner"), run("after")
	var order []string
	w.batched(func() {
		w.save(first)
		if onDisk(first) {
			t.Error("a save in a batch was written at once")
		}
		if got, err := w.lookup("first"); err != nil || got != first {
			t.Errorf("lookup of a held run gave %v, %v; want the held record", got, err)
		}
		w.follow(effectReap, "", func() {
			if !onDisk(first) || !onDisk(inner) {
				t.Error("what waits on a save ran before it was written")
			}
			order = append(order, "after first")
		})
		w.batched(func() { w.save(inner) }) // as drain does inside a batch of requests
		if onDisk(inner) || len(order) != 0 {
			t.Errorf("a batch inside a batch flushed on its own (order %v)", order)
		}
		w.save(after)
		w.save(after) // twice: one record, the second revision
		if onDisk(after) {
			t.Error("a save in a batch was written at once")
		}
	})
	if !onDisk(after) || after.Rev != 2 || len(order) != 1 {
		t.Errorf("the batch's end did not write its saves and run what waited (rev %d, order %v)", after.Rev, order)
	}
	events, err := tracker.ReadHistory(filepath.Join(w.cfg.Root, "history.jsonl"))
	if err != nil || len(events) != 4 {
		t.Fatalf("history: %d events, %v; want 4, in save order", len(events), err)
	}
	for i, want := range []string{"first", "inner", "after", "after"} {
		if events[i].ID != want {
			t.Errorf("event %d is %s's, want %s's", i, events[i].ID, want)
		}
	}
}

// A launched run's gate opens as soon as the batch's records are written,
// before what else waited for them (the outcomes, a file each), even what
// waited from earlier in the batch.
func TestBatchOpensGatesFirst(t *testing.T) {
	w := batchWatcher(t)
	st := &tracker.State{ID: "a", State: tracker.Running, CreatedAt: time.Now()}
	os.Mkdir(w.store.RunDir(st.ID), 0o755)
	var order []string
	w.batched(func() {
		w.follow(effectAnswer, "b", func() { order = append(order, "outcome") })
		w.save(st)
		w.follow(effectGate, st.ID, func() {
			if got, err := w.store.Read(st.ID); err != nil || got.Rev != st.Rev {
				t.Errorf("the gate opened before the record was written (%v)", err)
			}
			order = append(order, "gate")
		})
		if len(order) != 0 {
			t.Errorf("%v ran inside the batch", order)
		}
	})
	if want := []string{"gate", "outcome"}; !slices.Equal(order, want) {
		t.Errorf("order %v, want %v", order, want)
	}
	w.follow(effectGate, st.ID, func() { order = append(order, "gate outside a batch") })
	if len(order) != 3 {
		t.Errorf("a gate outside a batch did not open at once (order %v)", order)
	}
}

// A flush runs its effects in one order: the gates, in the order they
// were named, then every other effect in the order it was named.
func TestBatchRunsEffectsInOrder(t *testing.T) {
	w := batchWatcher(t)
	var ran []string
	note := func(name string) func() { return func() { ran = append(ran, name) } }
	w.batched(func() {
		w.follow(effectAnswer, "", note("answer 1"))
		w.follow(effectGate, "", note("gate 1"))
		w.follow(effectSignal, "", note("signal"))
		w.follow(effectGate, "", note("gate 2"))
		w.follow(effectReap, "", note("reap"))
	})
	if want := []string{"gate 1", "gate 2", "answer 1", "signal", "reap"}; !slices.Equal(ran, want) {
		t.Errorf("ran %v, want %v", ran, want)
	}
}

// What waits for a record that could not be written waits until it is,
// and only that run's: another run's gate in the same flush opens.
func TestBatchHoldsWhatWaitsOnAnUnwrittenRecord(t *testing.T) {
	w := batchWatcher(t)
	ok := &tracker.State{ID: "ok", State: tracker.Running, CreatedAt: time.Now()}
	lost := &tracker.State{ID: "lost", State: tracker.Running, CreatedAt: time.Now()}
	os.Mkdir(w.store.RunDir(ok.ID), 0o755) // lost has no directory: its write fails
	var ran []string
	w.batched(func() {
		w.save(ok)
		w.save(lost)
		w.follow(effectGate, ok.ID, func() { ran = append(ran, "ok's gate") })
		w.follow(effectGate, lost.ID, func() { ran = append(ran, "lost's gate") })
		w.follow(effectAnswer, lost.ID, func() { ran = append(ran, "lost's outcome") })
		w.follow(effectSignal, "", func() { ran = append(ran, "lost's SIGTERM") }) // waits for the flush only
	})
	if want := []string{"ok's gate", "lost's SIGTERM"}; !slices.Equal(ran, want) {
		t.Fatalf("after a flush where lost's record failed, ran %v; want %v", ran, want)
	}
	w.follow(effectReap, lost.ID, func() { ran = append(ran, "lost's reaping") }) // outside a batch
	if len(ran) != 2 {
		t.Fatalf("ran %v while lost's record is unwritten", ran)
	}
	os.Mkdir(w.store.RunDir(lost.ID), 0o755)
	w.save(lost) // as the retry, or the run's next change, would
	if want := []string{"ok's gate", "lost's SIGTERM", "lost's gate", "lost's outcome", "lost's reaping"}; !slices.Equal(ran, want) {
		t.Errorf("once lost's record is written, ran %v; want %v", ran, want)
	}
}

// A claimed request that cannot be moved to rejected/ stays claimed and
// unanswered, for the next watcher; once it can be, it is moved and
// answered.
func TestRejectClaimedAnswersOnlyOnceMoved(t *testing.T) {
	w := batchWatcher(t)
	if err := w.spool.Make(); err != nil {
		t.Fatal(err)
	}
	n := spool.Name{ID: "bad", Verb: spool.VerbStart}
	dir := w.store.RunDir(n.ID)
	rejected := w.spool.Rejected()
	if err := os.Remove(rejected); err != nil {
		t.Fatal(err)
	}
	request := filepath.Join(dir, "request")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(request, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}

	if err := os.WriteFile(rejected, nil, 0o644); err != nil { // not a directory: nothing can go in
		t.Fatal(err)
	}
	w.rejectClaimed(n, dir, "does not parse")
	if _, err := os.Stat(request); err != nil {
		t.Fatalf("the claimed request did not stay where it was: %v", err)
	}
	if _, err := os.Stat(w.spool.OutcomePath(n)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("answered before the request was in rejected/ (%v)", err)
	}
	os.Remove(rejected)
	w.rejectClaimed(n, dir, "does not parse")
	if b, err := os.ReadFile(w.spool.OutcomePath(n)); err != nil || !strings.HasPrefix(string(b), spool.Rejected) {
		t.Fatalf("outcome %q, %v; want rejected", b, err)
	}
	if _, err := os.Stat(filepath.Join(rejected, n.String())); err != nil {
		t.Errorf("not in rejected/: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("its run directory is still there (%v)", err)
	}
}

// A run that waits for another is settled in the flush that writes that
// run's end, not in one after it: what follows the flush (here an answer
// named before the end was saved) finds the waiting run's record written
// too. Here the dependency failed, so the waiting run ends canceled; one
// whose conditions hold is started the same way, its gate opening after
// that one flush.
func TestBatchSettlesWaitingRunsInTheEndsFlush(t *testing.T) {
	w := batchWatcher(t)
	dep := &tracker.State{ID: "build", State: tracker.Running, CreatedAt: time.Now()}
	waiting := &tracker.State{ID: "test", State: tracker.Queued, After: []string{"build"}, CreatedAt: time.Now()}
	for _, st := range []*tracker.State{dep, waiting} {
		os.Mkdir(w.store.RunDir(st.ID), 0o755)
		w.save(st)
	}
	w.addQueued(&queuedRun{st: waiting})
	var found *tracker.State
	w.batched(func() {
		w.follow(effectAnswer, "", func() { found, _ = w.store.Read(waiting.ID) })
		dep.State, dep.Reason = tracker.Failed, "exited with code 1"
		w.save(dep)
	})
	if found == nil || found.State != tracker.Canceled {
		t.Fatalf("after the flush of its dependency's end, the waiting run's record is %v; want canceled in the same flush", stateOf(found))
	}
	if want := "run build, which it waited to complete, ended failed: exited with code 1; it never started"; found.Reason != want {
		t.Errorf("reason %q, want %q", found.Reason, want)
	}
}

// A gate waits for the records of the runs its run waited for, as well as
// its own: a dependent started in the flush of its dependency's end does
// not run while that end is unwritten (a full disk), lest a crash leave a
// record that says the dependency still runs.
func TestBatchGateWaitsForItsDependenciesRecords(t *testing.T) {
	w := batchWatcher(t)
	dep := &tracker.State{ID: "build", State: tracker.Completed, CreatedAt: time.Now()}
	next := &tracker.State{ID: "test", State: tracker.Running, After: []string{"build:ended"}, CreatedAt: time.Now()}
	os.Mkdir(w.store.RunDir(next.ID), 0o755) // build has none: its write fails
	opened := false
	w.batched(func() {
		w.save(dep)
		w.save(next)
		w.followEffect(effect{name: effectGate, id: next.ID, also: gateWaitsFor(next), do: func() { opened = true }})
	})
	if got, err := w.store.Read(next.ID); err != nil || got.Rev != next.Rev {
		t.Fatalf("the dependent's own record was not written (%v)", err)
	}
	if opened {
		t.Fatal("the gate opened while the end of the run it waited for is unwritten")
	}
	os.Mkdir(w.store.RunDir(dep.ID), 0o755)
	w.save(dep) // as the retry would
	if !opened {
		t.Error("the gate did not open once the end of the run it waited for was written")
	}
}

func stateOf(st *tracker.State) tracker.StateName {
	if st == nil {
		return "(none)"
	}
	return st.State
}

// spoolRequest writes body as request name in w's spool and returns it
// as read.
func spoolRequest(t *testing.T, w *watcher, name, body string) spool.File {
	t.Helper()
	if err := w.spool.Make(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(w.spool.Spool(), name), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := w.spool.Read(name)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// A queued run that ends in the batch it was queued in (its dependency
// ended there) has its request moved into its directory before the
// flush, where the flush's keep finds no file in the spool: its content
// is synced from its new name, as a claim's is, before the answer
// accepted, which follows the flush. (The power-loss trial found such a
// run's request empty after a cut.)
func TestKeepRequestSyncsWhatKeepMissed(t *testing.T) {
	w := batchWatcher(t)
	f := spoolRequest(t, w, "q.start", "echo hi")
	if err := os.Mkdir(w.store.RunDir("q"), 0o755); err != nil {
		t.Fatal(err)
	}
	q := &queuedRun{st: &tracker.State{ID: "q", State: tracker.Queued, OwnerUID: os.Geteuid()}}
	w.batched(func() {
		w.keep(f)
		w.keepRequest(q)
		if len(w.unsyncedClaims) != 1 {
			t.Errorf("%d claimed requests wait to be synced with the flush; want q's, which keep will not find in the spool", len(w.unsyncedClaims))
		}
	})
	if b, err := os.ReadFile(w.store.Run("q").Request()); err != nil || string(b) != "echo hi" {
		t.Errorf("runs/q/request = %q, %v; want the request", b, err)
	}
}

// A queued run's request is synced before its answer: inside a batch
// with the batch's records, outside one (a request examined again on a
// timer) at once, since the answer follows at once.
func TestKeepSyncsBeforeTheAnswer(t *testing.T) {
	w := batchWatcher(t)
	f := spoolRequest(t, w, "q.start", "echo hi")
	w.batched(func() {
		w.keep(f)
		if len(w.unkept) != 1 {
			t.Errorf("inside a batch, %d requests wait to be synced; want 1, until the flush", len(w.unkept))
		}
	})
	if len(w.unkept) != 0 || w.spoolUnsynced {
		t.Errorf("after the flush, %d requests wait to be synced (spool unsynced: %v)", len(w.unkept), w.spoolUnsynced)
	}
	w.keep(f)
	if len(w.unkept) != 0 || w.spoolUnsynced {
		t.Errorf("outside a batch, keep left %d requests to sync later (spool unsynced: %v): its answer would come first", len(w.unkept), w.spoolUnsynced)
	}
}

// The loop wakes for the root's events that it acts on (its lock, its
// config, its spool's or exits/' removal) and for those in the spool,
// exits/ and run directories, not for the writes to the root's own files
// (the history, the log, the queue): several a run, each a turn for
// nothing.
func TestConcerns(t *testing.T) {
	w := batchWatcher(t)
	root := w.cfg.Root
	for _, tc := range []struct {
		name string
		op   fsnotify.Op
		want bool
	}{
		{"watcher.lock", fsnotify.Remove, true},
		{"config.json", fsnotify.Write, true},
		{"spool", fsnotify.Remove, true},
		{"exits", fsnotify.Rename, true},
		{"spool/a.start", fsnotify.Create, true},
		{"exits/123-456", fsnotify.Create, true},
		{"runs/a/ready", fsnotify.Create, true},
		{"history.jsonl", fsnotify.Write, false},
		{"watcher.log", fsnotify.Write, false},
		{"queue", fsnotify.Rename, false},
		{"queue123", fsnotify.Create, false},
		{"list.cache", fsnotify.Write, false},
	} {
		ev := fsnotify.Event{Name: filepath.Join(root, tc.name), Op: tc.op}
		if got := w.concerns(ev); got != tc.want {
			t.Errorf("concerns(%s %s) = %v, want %v", tc.op, tc.name, got, tc.want)
		}
	}
}

// TestRelabel: an edit of a queued run's request changes the labels the
// request names, and keeps those label requests set.
func TestRelabel(t *testing.T) {
	for _, tc := range []struct {
		name             string
		labels, was, now map[string]string
		want             map[string]string
	}{
		{"unchanged", map[string]string{"a": "1", "b": "2"}, map[string]string{"a": "1"}, map[string]string{"a": "1"}, map[string]string{"a": "1", "b": "2"}},
		{"changed", map[string]string{"a": "1", "b": "2"}, map[string]string{"a": "1"}, map[string]string{"a": "3"}, map[string]string{"a": "3", "b": "2"}},
		{"removed", map[string]string{"a": "1", "b": "2"}, map[string]string{"a": "1"}, nil, map[string]string{"b": "2"}},
		{"added", nil, nil, map[string]string{"c": "4"}, map[string]string{"c": "4"}},
	} {
		if got := relabel(tc.labels, tc.was, tc.now); !maps.Equal(got, tc.want) {
			t.Errorf("%s: relabel = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// The exits that come while a burst of requests is taken join its batch
// after a flush: the ends of the runs it started first are recorded with
// its next records, not after the burst, which can take seconds.
func TestBurstTakesExitsAfterAFlush(t *testing.T) {
	const first = 4 // few enough to be started with one flush
	w := batchWatcher(t)
	if err := w.spool.Make(); err != nil {
		t.Fatal(err)
	}
	burst := func(prefix string, n int, body string) {
		queued := make(chan fsnotify.Event, n)
		for i := range n {
			path := filepath.Join(w.spool.Spool(), fmt.Sprintf("%s%d.start", prefix, i))
			if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			queued <- fsnotify.Event{Name: path, Op: fsnotify.Create}
		}
		if err := w.fsEvents(<-queued, queued); err != nil {
			t.Fatal(err)
		}
	}
	states := func() map[tracker.StateName]int {
		got := make(map[tracker.StateName]int)
		for i := range first {
			st, err := w.store.Read(fmt.Sprintf("first%d", i))
			if err != nil {
				t.Fatal(err)
			}
			got[st.State]++
		}
		return got
	}
	burst("first", first, `{"command": ["true"]}`)
	for end := time.Now().Add(time.Minute); len(w.exited) < first; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%d of %d runs exited", len(w.exited), first)
		}
	}
	if got := states(); got[tracker.Running] != first {
		t.Fatalf("before the burst, the runs are %v; want all running, their exits not taken", got)
	}
	burst("burst", flushEvery+8, `{"command": ["true"], "not_before": "1h"}`)
	if got := states(); got[tracker.Completed] != first {
		t.Errorf("after the burst, the runs are %v; want all completed, their exits taken after its first flush", got)
	}
}

// The directories requests were claimed into are synced before the spool,
// except those the flush's records sync (see claimedInto).
func TestClaimDirsLeft(t *testing.T) {
	w := batchWatcher(t)
	runs := w.store.Dir()
	for _, tc := range []struct {
		name     string
		claimed  map[string]bool // dir -> made for the claim
		recorded []string        // runs whose records the flush writes
		want     []string
	}{
		{"a start, its first record written", map[string]bool{w.store.RunDir("a"): true}, []string{"a"}, nil},
		{"a queued run started", map[string]bool{w.store.RunDir("q"): false}, []string{"q"}, nil},
		{"a start with no record yet", map[string]bool{w.store.RunDir("a"): true}, nil, []string{w.store.RunDir("a"), runs}},
		{"a control request", map[string]bool{w.spool.Claims(): false}, []string{"a"}, []string{w.spool.Claims()}},
		{"a run that ends with no record synced", map[string]bool{w.store.RunDir("e"): false}, []string{"a"}, []string{w.store.RunDir("e")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w.claimDirs = tc.claimed
			got := w.claimDirsLeft(tc.recorded)
			slices.Sort(got)
			slices.Sort(tc.want)
			if !slices.Equal(got, tc.want) {
				t.Errorf("claimDirsLeft = %q, want %q", got, tc.want)
			}
		})
	}
}

// A directory a request was claimed into that is gone since (the request
// rejected from it, its run deleted) does not hold back the spool's sync:
// held back, the spool would never be synced again.
func TestGoneClaimDirLetsTheSpoolSync(t *testing.T) {
	w := batchWatcher(t)
	if err := w.spool.Make(); err != nil {
		t.Fatal(err)
	}
	w.claimedInto(w.store.RunDir("gone"), true)
	w.claimed(nil)
	w.writeRecords(nil, nil)
	if w.spoolUnsynced || len(w.claimDirs) != 0 {
		t.Errorf("after a flush, the spool is unsynced: %v, directories left to sync: %v", w.spoolUnsynced, w.claimDirs)
	}
}

// A record that cannot be written (its run's owner put a directory where
// state.json goes) holds back the spool's sync only if a request was
// claimed into its run's directory: otherwise its owner could keep every
// other claim's removal unsynced.
func TestFailingRecordHoldsBackOnlyItsClaim(t *testing.T) {
	w := batchWatcher(t)
	if err := w.spool.Make(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"good", "evil"} {
		if err := w.store.MakeRunDir(id); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(w.store.Run("evil").State(), 0o700); err != nil {
		t.Fatal(err)
	}
	good := &tracker.State{ID: "good", State: tracker.Starting, CreatedAt: time.Now()}
	evil := &tracker.State{ID: "evil", State: tracker.Running, CreatedAt: time.Now()}
	w.claimed(nil)
	w.claimedInto(w.store.RunDir("good"), true)
	w.writeRecords([]*tracker.State{good, evil}, nil)
	if w.spoolUnsynced {
		t.Errorf("another run's record failed, and the spool was left unsynced for good's claim")
	}
	w.claimed(nil)
	w.claimedInto(w.store.RunDir("evil"), false)
	w.writeRecords([]*tracker.State{evil}, nil)
	if !w.spoolUnsynced {
		t.Errorf("the spool was synced while the record of the run a request was claimed into failed")
	}
}

// A watcher that recovers a run its predecessor claimed syncs runs/, which
// holds the run's directory that watcher made, before the spool: its store
// syncs runs/ only for the directories it makes itself.
func TestClaimsLeftBehindSyncRunsDir(t *testing.T) {
	w := batchWatcher(t)
	w.claimsLeftBehind()
	got := w.claimDirsLeft([]string{"x"})
	if !slices.Contains(got, w.store.Dir()) || slices.Contains(got, w.spool.Claims()) {
		t.Errorf("after recovery, the directories synced before the spool are %q; want runs/, and not claims/ (see syncRestored)", got)
	}
}

// A control request put back in the spool from claims/ at recovery has
// the spool synced at once, after the directories claimed into so far:
// a later flush syncs claims/ before the spool, and a power loss in
// between would keep the request's removal from claims/ and lose its
// name in the spool.
func TestRestoredClaimSyncsTheSpool(t *testing.T) {
	w := batchWatcher(t)
	if err := w.spool.Make(); err != nil {
		t.Fatal(err)
	}
	if err := w.spool.MakeClaims(); err != nil {
		t.Fatal(err)
	}
	n := spool.Name{ID: "x", Verb: spool.VerbCancel, Owner: os.Getuid()}
	if err := os.WriteFile(filepath.Join(w.spool.Claims(), spool.ClaimedName(n)), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	w.claimedInto(w.store.Dir(), false) // recovery claimed a start into a run
	w.restoreControls()
	if _, err := os.Lstat(filepath.Join(w.spool.Spool(), n.String())); err != nil {
		t.Fatalf("the claimed request was not put back: %v", err)
	}
	if len(w.claimDirs) != 0 {
		t.Errorf("the spool was not synced after a request was put back in it (left to sync first: %v)", w.claimDirs)
	}
}

// The spool is not synced after a request moved out of it into a run's
// directory that could not be synced: its new name may not be durable.
func TestMovedOutUnsyncedHoldsTheSpool(t *testing.T) {
	w := batchWatcher(t)
	if err := w.spool.Make(); err != nil {
		t.Fatal(err)
	}
	w.claimedInto(w.store.Dir(), false)
	w.movedOutOf = []string{"gone"} // its directory cannot be opened
	w.syncMovedOut()
	if len(w.claimDirs) == 0 {
		t.Errorf("the spool was synced, though the directory a request moved to was not")
	}
}

// A request moved out of the spool has it synced once in a flush: what
// syncMovedOut synced is not synced again with the records, unless a
// queued request's content waits to be synced before the spool is.
func TestMovedOutSyncsTheSpoolOnce(t *testing.T) {
	w := batchWatcher(t)
	if err := w.spool.Make(); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(w.store.RunDir("moved"), 0o755); err != nil {
		t.Fatal(err)
	}
	w.claimedInto(w.store.Dir(), false)
	w.claimed(nil)
	w.movedOutOf = []string{"moved"}
	w.syncMovedOut()
	if w.spoolUnsynced || len(w.claimDirs) > 0 {
		t.Errorf("after the spool was synced: spoolUnsynced %v, %d claim directories left", w.spoolUnsynced, len(w.claimDirs))
	}
	w.claimed(nil)
	w.unkept = []spool.File{{}}
	w.movedOutOf = []string{"moved"}
	w.syncMovedOut()
	if !w.spoolUnsynced {
		t.Errorf("a queued request's content waits to be synced, but the spool is taken for synced")
	}
}

// syncClaimDirs syncs more directories than it holds at once, counts one
// gone as synced, and reports one it cannot sync.
func TestSyncClaimDirsMany(t *testing.T) {
	root := t.TempDir()
	var dirs []string
	for i := range 3 * claimDirsInFlight {
		dir := filepath.Join(root, fmt.Sprint(i))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, dir)
	}
	gone := filepath.Join(root, "gone")
	if !syncClaimDirs(append(dirs, gone), func(err error) { t.Log(err) }) {
		t.Errorf("%d directories and one gone: not all synced", len(dirs))
	}
	var mu sync.Mutex
	inFlight, most := 0, 0
	counted := func(dir string) error {
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		mu.Unlock()
		time.Sleep(time.Millisecond) // so that they overlap
		mu.Lock()
		inFlight--
		mu.Unlock()
		return nil
	}
	syncDirsBounded(dirs, counted, func(err error) { t.Log(err) })
	if most > claimDirsInFlight {
		t.Errorf("%d directories synced at once, more than %d", most, claimDirsInFlight)
	}
	file := filepath.Join(root, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if syncClaimDirs(append(dirs, filepath.Join(file, "sub")), func(err error) { t.Log(err) }) {
		t.Errorf("a directory that cannot be opened is taken for synced")
	}
}

// History before state: while the history cannot be appended (here a
// directory stands in its way, as a full disk would refuse it), the
// records of the changes it holds are not written and what follows them
// waits, all but a stop's signal; once it can be, the lines go first,
// then the records, then the effects, in order.
func TestRefusedHistoryHoldsRecordsAndEffects(t *testing.T) {
	w := batchWatcher(t)
	hist := w.root().History()
	if err := os.Mkdir(hist, 0o755); err != nil {
		t.Fatal(err)
	}
	a := &tracker.State{ID: "a", State: tracker.Completed, CreatedAt: time.Now()}
	os.Mkdir(w.store.RunDir(a.ID), 0o755)
	var ran []string
	note := func(what string) func() { return func() { ran = append(ran, what) } }
	w.batched(func() {
		w.save(a)
		w.follow(effectAnswer, a.ID, note("answer"))
		w.follow(effectSignal, "", note("SIGTERM"))
		w.follow(effectReap, "", note("reap"))
	})
	if !w.historyHeld() {
		t.Fatal("the history's refusal was not held")
	}
	if _, err := w.store.Read(a.ID); err == nil {
		t.Error("a record was written while its history line was refused")
	}
	if want := []string{"SIGTERM"}; !slices.Equal(ran, want) {
		t.Errorf("while the history was refused, ran %v; want %v", ran, want)
	}
	w.follow(effectAnswer, "", note("later answer")) // outside a batch: waits too
	w.examine("gone.start")                          // an event that came while it held
	if _, ok := w.pending["gone.start"]; !ok {
		t.Fatal("a request examined while the history held is not kept pending")
	}
	if err := os.Remove(hist); err != nil {
		t.Fatal(err)
	}
	select {
	case f := <-w.do: // the retry
		f()
	case <-time.After(5 * time.Second):
		t.Fatal("no retry came")
	}
	if w.historyHeld() {
		t.Fatal("the history is still held once it can be appended")
	}
	if got, err := w.store.Read(a.ID); err != nil || got.Rev != a.Rev {
		t.Errorf("once the history was appended, the record is %v, %v; want rev %d", got, err, a.Rev)
	}
	if b, err := os.ReadFile(hist); err != nil || !strings.Contains(string(b), `"id":"a"`) {
		t.Errorf("the history holds %q, %v; want a's line", b, err)
	}
	if want := []string{"SIGTERM", "answer", "reap", "later answer"}; !slices.Equal(ran, want) {
		t.Errorf("once the history was appended, ran %v; want %v", ran, want)
	}
	if _, ok := w.pending["gone.start"]; ok {
		t.Error("a request gone from the spool while the history held is still pending once it is appended")
	}
}

// While the history holds, the names of the spool entries to examine once
// it is appended are bounded (a client looping on a full disk writes
// names without end), and none is lost: past the bound, the spool is
// looked over again once the history is appended, and a queued run's
// request removed meanwhile is noticed as removed.
func TestHeldPendingIsBounded(t *testing.T) {
	w := batchWatcher(t)
	if err := w.spool.Make(); err != nil {
		t.Fatal(err)
	}
	hist := w.root().History()
	if err := os.Mkdir(hist, 0o755); err != nil {
		t.Fatal(err)
	}
	a := &tracker.State{ID: "a", State: tracker.Completed, CreatedAt: time.Now()}
	os.Mkdir(w.store.RunDir(a.ID), 0o755)
	w.batched(func() { w.save(a) })
	if !w.historyHeld() {
		t.Fatal("the history's refusal was not held")
	}
	q := &queuedRun{st: &tracker.State{ID: "q", State: tracker.Queued, OwnerUID: os.Geteuid(), CreatedAt: time.Now()}}
	w.addQueued(q)
	for i := range 2 * maxHeldPending {
		w.fsEvent(fsnotify.Event{Name: filepath.Join(w.spool.Spool(), fmt.Sprintf("flood%d.start", i)), Op: fsnotify.Create})
	}
	// Past the bound: a request written, and the queued run's removed.
	if err := os.Symlink("/nonexistent", filepath.Join(w.spool.Spool(), "late.start")); err != nil {
		t.Fatal(err)
	}
	w.fsEvent(fsnotify.Event{Name: filepath.Join(w.spool.Spool(), "late.start"), Op: fsnotify.Create})
	w.examine("q.start")
	if len(w.pending) > maxHeldPending {
		t.Fatalf("%d names pending while the history held; want at most %d", len(w.pending), maxHeldPending)
	}
	if err := os.Remove(hist); err != nil {
		t.Fatal(err)
	}
	select {
	case f := <-w.do: // the retry
		f()
	case <-time.After(5 * time.Second):
		t.Fatal("no retry came")
	}
	if w.historyHeld() {
		t.Fatal("the history is still held once it can be appended")
	}
	if _, err := os.Lstat(filepath.Join(w.spool.Rejected(), "late.start.error")); err != nil {
		t.Errorf("a request written past the bound was not taken once the history was appended: %v", err)
	}
	if !q.removed {
		t.Error("a queued run's request removed past the bound is not noticed once the history was appended")
	}
	if len(w.pending) != 0 {
		t.Errorf("%d names still pending, none in the spool", len(w.pending))
	}
}
