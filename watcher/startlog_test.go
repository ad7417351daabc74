package watcher

import (
	"bytes"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
	"github.com/tendhq/tend/tracker/crashfs"
	"github.com/tendhq/tend/tracker/startlogtest"
)

// loggedLaunch makes, in a new root, run "r1" launched as writeLogged
// leaves it (startlogtest.Launch): its directory, record and request,
// its two history lines appended, and its launch in the start log, not
// applied. It returns the watcher (its start log opened) and the entry.
func loggedLaunch(t *testing.T) (*watcher, tracker.LogEntry) {
	t.Helper()
	return loggedLaunchIn(t, t.TempDir())
}

// loggedLaunchIn is loggedLaunch in root.
func loggedLaunchIn(t *testing.T, root string) (*watcher, tracker.LogEntry) {
	t.Helper()
	w := newWatcher(Config{Root: root, Log: io.Discard})
	if err := w.spool.Make(); err != nil {
		t.Fatal(err)
	}
	if err := w.store.Make(); err != nil {
		t.Fatal(err)
	}
	if err := w.openStartLog(); err != nil {
		t.Fatal(err)
	}
	return w, startlogtest.Launch(t, w.store, w.hist, w.startLog.log)
}

// wantLoggedRecord checks that run r1's record is launch e's, as logged.
func wantLoggedRecord(t *testing.T, w *watcher, e tracker.LogEntry) {
	t.Helper()
	if b, err := os.ReadFile(w.store.Run("r1").State()); err != nil || !bytes.Equal(b, e.Record) {
		t.Errorf("record: %q, %v: want the logged one", b, err)
	}
}

// wantNotInSpool checks that r1's claimed request is not back in the
// spool, to be started again.
func wantNotInSpool(t *testing.T, w *watcher) {
	t.Helper()
	if _, err := os.Lstat(filepath.Join(w.spool.Spool(), "r1.start")); !os.IsNotExist(err) {
		t.Errorf("the claimed request is back in the spool, to be started again (%v)", err)
	}
}

// wantApplied checks that the start log holds no pending entry: a
// watcher after puts back nothing.
func wantApplied(t *testing.T, w *watcher) {
	t.Helper()
	if _, pending, err := tracker.OpenStartLog(w.cfg.Root); err != nil || len(pending) != 0 {
		t.Errorf("after the replay the log holds %d entries (%v)", len(pending), err)
	}
}

// startUp does what a watcher does with the start log as it starts: it
// replays it, then, once recovery is done with the claims a watcher
// before left behind, syncs what the replay put back and marks the log.
func startUp(t *testing.T, w *watcher) {
	t.Helper()
	if err := w.openStartLog(); err != nil {
		t.Fatal(err)
	}
	w.claimsLeftBehind()
	w.syncLogged()
}

// What a watcher that starts finds after a power loss cut a logged
// launch short: whatever of its files, history lines and claim were lost
// is put back from the start log, once, and nothing else is touched.
func TestReplayStartLog(t *testing.T) {
	for _, tt := range []struct {
		name string
		// lose does to the root what the power loss did.
		lose func(t *testing.T, w *watcher, e tracker.LogEntry)
		// later is set where the run went on past its launch: nothing is put back.
		later bool
	}{
		{"nothing lost (a crash of the watcher)", func(*testing.T, *watcher, tracker.LogEntry) {}, false},
		{"everything lost", func(t *testing.T, w *watcher, e tracker.LogEntry) {
			must(t, os.RemoveAll(w.store.RunDir("r1")))
			must(t, os.Truncate(filepath.Join(w.cfg.Root, "history.jsonl"), 0))
			must(t, os.WriteFile(filepath.Join(w.spool.Spool(), "r1.start"), e.Request, 0o644))
		}, false},
		{"record torn, request empty", func(t *testing.T, w *watcher, e tracker.LogEntry) {
			must(t, os.WriteFile(w.store.Run("r1").State(), nil, 0o600))
			must(t, os.WriteFile(w.store.Run("r1").Request(), nil, 0o600))
		}, false},
		{"the launch's last line lost", func(t *testing.T, w *watcher, e tracker.LogEntry) {
			b, err := os.ReadFile(filepath.Join(w.cfg.Root, "history.jsonl"))
			must(t, err)
			lines := bytes.SplitAfter(b, []byte("\n"))
			must(t, os.WriteFile(filepath.Join(w.cfg.Root, "history.jsonl"), lines[0], 0o600))
		}, false},
		{"deleted since", func(t *testing.T, w *watcher, e tracker.LogEntry) {
			st := &tracker.State{ID: "r1", State: tracker.Deleted, Rev: 4}
			must(t, w.hist.Append(tracker.EventOf(st, time.Now())))
			must(t, os.RemoveAll(w.store.RunDir("r1")))
		}, true},
		{"deleted since, the clock stepped back", func(t *testing.T, w *watcher, e tracker.LogEntry) {
			// An NTP step back between the launch and the deletion: its
			// line is later in the history, its time earlier.
			st := &tracker.State{ID: "r1", State: tracker.Deleted, Rev: 4}
			must(t, w.hist.Append(tracker.EventOf(st, e.Events[0].Time.Add(-time.Minute))))
			must(t, os.RemoveAll(w.store.RunDir("r1")))
		}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w, e := loggedLaunch(t)
			tt.lose(t, w, e)
			histBefore, _ := os.ReadFile(filepath.Join(w.cfg.Root, "history.jsonl"))
			startUp(t, w)
			histAfter, _ := os.ReadFile(filepath.Join(w.cfg.Root, "history.jsonl"))
			if tt.later {
				if !bytes.Equal(histBefore, histAfter) {
					t.Errorf("history changed for a run that went on:\n%s", histAfter)
				}
				if _, err := os.Lstat(w.store.RunDir("r1")); !os.IsNotExist(err) {
					t.Errorf("the deleted run's directory was made again (%v)", err)
				}
			} else {
				wantLoggedRecord(t, w, e)
				if b, err := os.ReadFile(w.store.Run("r1").Request()); err != nil || !bytes.Equal(b, e.Request) {
					t.Errorf("request: %q, %v: want %q", b, err, e.Request)
				}
				if n := strings.Count(string(histAfter), `"id":"r1"`); n != 2 {
					t.Errorf("the history has %d lines of r1, want 2:\n%s", n, histAfter)
				}
				wantNotInSpool(t, w)
			}
			// Applied: a second watcher puts back nothing.
			wantApplied(t, w)
		})
	}
}

// A watcher that starts with durability watcher_crash (config.json
// changed, or tend watch --durability, after the power went) puts back
// the launches the log holds all the same: they were answered under
// power_loss, with the log as their only durable copy. Skipped, the run
// is lost, its request back in the spool is started again (its command
// run twice), and a later power_loss watcher meets the stale entry.
func TestReplayWithDurabilityWatcherCrash(t *testing.T) {
	w, e := loggedLaunch(t)
	must(t, os.RemoveAll(w.store.RunDir("r1")))
	must(t, os.Truncate(filepath.Join(w.cfg.Root, "history.jsonl"), 0))
	must(t, os.WriteFile(filepath.Join(w.spool.Spool(), "r1.start"), e.Request, 0o644))
	w.settings.Durability = tracker.WatcherCrash
	startUp(t, w)
	wantLoggedRecord(t, w, e)
	wantNotInSpool(t, w)
	wantApplied(t, w)
}

// A run made anew with the ID of one deleted, whose logged launch a
// power loss took all of: the deleted run's lines, of higher
// revisions, are not later lines of the new run, even where the clock
// was stepped back in between and their times are later than its
// launch's. Taken for them, the answered run would be lost, and its
// request, back in the spool, started again.
func TestReplayAfterTheIDWasUsedAgain(t *testing.T) {
	w, e := loggedLaunch(t)
	must(t, os.RemoveAll(w.store.RunDir("r1")))
	must(t, os.Truncate(filepath.Join(w.cfg.Root, "history.jsonl"), 0))
	launched := e.Events[0].Time
	for _, old := range []*tracker.State{
		{ID: "r1", State: tracker.Completed, Rev: 3, CreatedAt: launched.Add(-time.Hour)},
		{ID: "r1", State: tracker.Deleted, Rev: 4},
	} {
		must(t, w.hist.Append(tracker.EventOf(old, launched.Add(time.Duration(old.Rev)*time.Minute))))
	}
	must(t, os.WriteFile(filepath.Join(w.spool.Spool(), "r1.start"), e.Request, 0o644))
	if err := w.openStartLog(); err != nil {
		t.Fatal(err)
	}
	wantLoggedRecord(t, w, e)
	wantNotInSpool(t, w)
}

// A power loss that took back a logged launch's claim (the request's
// removal from the spool) may also take the request's content, which its
// writer did not sync: its name comes back in the spool, empty, or with
// part of what it held. That is the launch's own request, not another
// version: taken as one, it was rejected (as empty, or as a second start
// of the run), and its rejection overwrote the answer that accepted it.
func TestReplayTakesTheRequestBackEmpty(t *testing.T) {
	for _, tt := range []struct{ name, body string }{{"empty", ""}, {"torn", "echo"}} {
		t.Run(tt.name, func(t *testing.T) {
			w, _ := loggedLaunch(t)
			must(t, os.WriteFile(filepath.Join(w.spool.Spool(), "r1.start"), []byte(tt.body), 0o644))
			startUp(t, w)
			if _, err := os.Lstat(filepath.Join(w.spool.Spool(), "r1.start")); !os.IsNotExist(err) {
				t.Errorf("the launch's own request, its content lost, is left in the spool, to be rejected (%v)", err)
			}
			if rejected, _ := filepath.Glob(filepath.Join(w.spool.Rejected(), "r1.start*")); len(rejected) > 0 {
				t.Errorf("rejected: %q", rejected)
			}
		})
	}
}

// A watcher SIGKILLed after a logged launch's gate opened, before
// syncLogged, leaves the launch's files in the page cache, unsynced: the
// next watcher's replay finds them all there and marks the entry
// applied. It must make them durable first: a power loss that then kept
// the mark (written without a flush, and a file system writes back in
// any order) and not the record, the request or the history lines would
// lose a run answered accepted, with nothing left to put it back from.
// Checked on a crashfs: every image a reordered cut may leave after the
// replay either holds the entry still pending or the launch's files.
func TestReplayMakesFoundFilesDurable(t *testing.T) {
	if err := crashfs.Prepare(); err != nil {
		if os.Getenv("TEND_REQUIRE_FUSE") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	backing, mnt := filepath.Join(t.TempDir(), "backing"), filepath.Join(t.TempDir(), "mnt")
	setup := newWatcher(Config{Root: backing, Log: io.Discard})
	for _, err := range []error{os.Mkdir(backing, 0o700), os.Mkdir(mnt, 0o755), setup.spool.Make(), setup.store.Make()} {
		must(t, err)
	}
	f, err := crashfs.Mount(backing, mnt)
	must(t, err)
	defer f.Unmount()
	w, e := loggedLaunchIn(t, mnt) // the watcher SIGKILLed: nothing after the log's sync
	startUp(t, w)                  // the next watcher
	f.Freeze()
	must(t, f.Unmount())
	for seed := range uint64(40) {
		img := filepath.Join(t.TempDir(), "image")
		if _, err := f.Image(img, crashfs.Reordered, rand.New(rand.NewPCG(seed, seed))); err != nil {
			t.Fatal(err)
		}
		_, pending, err := tracker.OpenStartLog(img)
		must(t, err)
		if len(pending) > 0 {
			continue // the next watcher puts it back
		}
		rec, rerr := os.ReadFile(filepath.Join(img, "runs", "r1", "state.json"))
		req, qerr := os.ReadFile(filepath.Join(img, "runs", "r1", "request"))
		hist, _ := os.ReadFile(filepath.Join(img, "history.jsonl"))
		if rerr != nil || !bytes.Equal(rec, e.Record) || qerr != nil || !bytes.Equal(req, e.Request) || strings.Count(string(hist), `"id":"r1"`) != 2 {
			t.Fatalf("seed %d: the log's entry is marked applied, and the power loss took the launch's files: record %v, request %q (%v), history:\n%s", seed, rerr, req, qerr, hist)
		}
	}
}

// A replay cut short (a crash, a power loss) between its claim of the
// request the loss brought back into the spool and the claim's removal
// leaves it in the run's directory as .unspooled.tmp, and may leave its
// name in the spool too (each half of a rename is durable with its own
// directory). The next replay must not stop on it (a claim never
// replaces a file): every watcher after would refuse to start. The same
// request is removed; another version, claimed in a race with its
// writer, is rejected with a reason, never removed as a temporary file.
func TestReplayAfterAReplayCutShort(t *testing.T) {
	for _, tt := range []struct {
		name     string
		leftover string
	}{
		{"the same request", "echo hi\n"},
		{"another version", "echo another\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w, e := loggedLaunch(t)
			must(t, os.WriteFile(filepath.Join(w.spool.Spool(), "r1.start"), e.Request, 0o644))
			leftover := filepath.Join(w.store.RunDir("r1"), ".unspooled.tmp")
			must(t, os.WriteFile(leftover, []byte(tt.leftover), 0o644))
			if err := w.openStartLog(); err != nil {
				t.Fatalf("the replay after one cut short: %v", err)
			}
			if _, err := os.Lstat(leftover); !os.IsNotExist(err) {
				t.Errorf("%s is still there (%v)", leftover, err)
			}
			wantNotInSpool(t, w)
			rejected, _ := filepath.Glob(filepath.Join(w.spool.Rejected(), "r1.start*"))
			if tt.leftover != string(e.Request) {
				found := false
				for _, p := range rejected {
					b, _ := os.ReadFile(p)
					found = found || string(b) == tt.leftover
				}
				if !found {
					t.Errorf("the other version is not in rejected/ (%q)", rejected)
				}
			} else if len(rejected) > 0 {
				t.Errorf("the same request was rejected: %q", rejected)
			}
		})
	}
}

// A flush of syncLogged that failed is tried again with each flush; if a
// run it holds is deleted meanwhile (the deletion's own flush syncs what
// it must the usual way), its directory is gone for good, and the retry
// must not fail on it for the rest of the watcher's life: the log would
// stay unmarked, every start would be synced the usual way, and each
// flush would try and log it again.
func TestSyncLoggedAfterTheRunWasDeleted(t *testing.T) {
	w, _ := loggedLaunch(t)
	l, pending, err := tracker.OpenStartLog(w.cfg.Root)
	must(t, err)
	w.startLog.log, w.startLog.ids, w.startLog.seq = l, []string{"r1"}, pending[len(pending)-1].Seq
	w.histUnsynced = true
	must(t, os.RemoveAll(w.store.RunDir("r1"))) // trashed, durably
	w.syncLogged()
	if len(w.startLog.ids) != 0 {
		t.Errorf("syncLogged still holds %q: it fails on the deleted run", w.startLog.ids)
	}
}

// A watcher killed between a claim of its own and the claim's flush
// leaves the request's new name (runs/ID/request) and its removal from
// the spool unsynced. The next watcher's replay of the start log must
// not sync the spool before recovery has synced that new name (see
// claimsLeftBehind): a power loss could then keep the removal and not
// the name, and the request would be lost, unanswered.
func TestReplayLeavesTheSpoolToRecovery(t *testing.T) {
	if err := crashfs.Prepare(); err != nil {
		if os.Getenv("TEND_REQUIRE_FUSE") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	backing, mnt := filepath.Join(t.TempDir(), "backing"), filepath.Join(t.TempDir(), "mnt")
	setup := newWatcher(Config{Root: backing, Log: io.Discard})
	for _, err := range []error{os.Mkdir(backing, 0o700), os.Mkdir(mnt, 0o755), setup.spool.Make(), setup.store.Make(),
		os.WriteFile(filepath.Join(backing, "spool", "r2.start"), []byte("echo r2\n"), 0o644)} {
		must(t, err)
	}
	f, err := crashfs.Mount(backing, mnt)
	must(t, err)
	defer f.Unmount()
	w, _ := loggedLaunchIn(t, mnt)
	// The killed watcher's claim of r2, not flushed.
	must(t, w.store.MakeRunDir("r2"))
	must(t, os.Rename(filepath.Join(mnt, "spool", "r2.start"), w.store.Run("r2").Request()))
	if err := w.openStartLog(); err != nil { // the next watcher, before its recovery
		t.Fatal(err)
	}
	f.Freeze()
	must(t, f.Unmount())
	img := filepath.Join(t.TempDir(), "image")
	if _, err := f.Image(img, crashfs.Strict, rand.New(rand.NewPCG(1, 1))); err != nil {
		t.Fatal(err)
	}
	_, inSpool := os.Lstat(filepath.Join(img, "spool", "r2.start"))
	_, inRun := os.Lstat(filepath.Join(img, "runs", "r2", "request"))
	if inSpool != nil && inRun != nil {
		t.Errorf("after a power loss, r2's request is in neither the spool nor its run's directory: lost")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Another version found in the spool after a power loss, under the name
// a logged launch was claimed from (not its request, nor what the loss
// left of it: see TestReplayTakesTheRequestBackEmpty), is moved to
// rejected/ with its reason, and the start's answer stands: examined by
// the watcher, it would have been answered rejected over accepted.
func TestReplayRejectsWhatElseIsInTheSpool(t *testing.T) {
	for _, body := range []string{"echo another\n", "true\n"} {
		w, _ := loggedLaunch(t)
		answer := w.spool.OutcomePath(spool.Name{ID: "r1", Verb: spool.VerbStart, Owner: w.uid})
		must(t, os.MkdirAll(filepath.Dir(answer), 0o755))
		must(t, os.WriteFile(answer, []byte("accepted\n"), 0o644))
		other := filepath.Join(w.spool.Spool(), "r1.start")
		must(t, os.WriteFile(other, []byte(body), 0o644))
		must(t, w.openStartLog())
		if _, err := os.Lstat(other); !os.IsNotExist(err) {
			t.Errorf("%q: still in the spool (%v)", body, err)
		}
		if b, err := os.ReadFile(filepath.Join(w.spool.Rejected(), "r1.start")); err != nil || string(b) != body {
			t.Errorf("%q: in rejected/: %q, %v", body, b, err)
		}
		if b, err := os.ReadFile(filepath.Join(w.spool.Rejected(), "r1.start.error")); err != nil || !strings.Contains(string(b), "the start's answer stands") {
			t.Errorf("%q: its reason: %q, %v", body, b, err)
		}
		if b, _ := os.ReadFile(answer); string(b) != "accepted\n" {
			t.Errorf("%q: the answer is now %q", body, b)
		}
	}
}

// A run that started and ended with both changes in the start log, and
// both lost from its files: it is put back as it ended, its three lines
// in order.
func TestReplayStartAndEnd(t *testing.T) {
	w, e := loggedLaunch(t)
	l, pending, err := tracker.OpenStartLog(w.cfg.Root)
	if err != nil || len(pending) != 1 {
		t.Fatalf("%d pending, %v", len(pending), err)
	}
	st, err := w.store.ParseLogged("r1", e.Record)
	must(t, err)
	code := 0
	st.State, st.Rev, st.ExitCode = tracker.Completed, 3, &code
	end := tracker.EventOf(st, e.Events[1].Time.Add(time.Millisecond))
	must(t, w.hist.Append(end))
	records, errs := w.store.WriteLogged([]*tracker.State{st})
	must(t, errs[0])
	must(t, l.Write([]tracker.LogEntry{{ID: "r1", Record: records[0], Events: []tracker.Event{end}}}))
	must(t, os.RemoveAll(w.store.RunDir("r1")))
	must(t, os.Truncate(filepath.Join(w.cfg.Root, "history.jsonl"), 0))
	must(t, w.openStartLog())
	got, err := w.store.Read("r1")
	if err != nil || got.State != tracker.Completed || got.Rev != 3 {
		t.Fatalf("r1 put back as %+v, %v: want completed, rev 3", got, err)
	}
	if b, err := os.ReadFile(w.store.Run("r1").Request()); err != nil || !bytes.Equal(b, e.Request) {
		t.Errorf("request: %q, %v", b, err)
	}
	h, _ := os.ReadFile(filepath.Join(w.cfg.Root, "history.jsonl"))
	if s := string(h); strings.Count(s, `"id":"r1"`) != 3 || strings.Index(s, `"rev":1`) > strings.Index(s, `"rev":3`) {
		t.Errorf("history:\n%s", h)
	}
}

// A run whose history went on past its logged launch (a label's line,
// synced by a flush that did not sync the launch's request) has its
// request put back, and nothing else.
func TestReplayRequestOfARunThatWentOn(t *testing.T) {
	w, e := loggedLaunch(t)
	st, err := w.store.ParseLogged("r1", e.Record)
	must(t, err)
	st.Rev = 3
	must(t, w.hist.Append(tracker.EventOf(st, e.Events[1].Time.Add(time.Millisecond))))
	must(t, w.store.Write(st))
	must(t, os.WriteFile(w.store.Run("r1").Request(), nil, 0o600))
	must(t, w.openStartLog())
	if b, err := os.ReadFile(w.store.Run("r1").Request()); err != nil || !bytes.Equal(b, e.Request) {
		t.Errorf("request: %q, %v: want it put back", b, err)
	}
	if got, err := w.store.Read("r1"); err != nil || got.Rev != 3 {
		t.Errorf("record: %+v, %v: want rev 3 left as it is", got, err)
	}
}

// A batch meeting a full start log first syncs the files of the changes
// the log holds, which frees every slot, and is then logged: without
// room made, every flush after the log filled (64 changes within one
// startLogSyncDelay) would be synced the usual way until the timer came.
func TestMakeLogRoomSyncsAFullLog(t *testing.T) {
	w, e := loggedLaunch(t)
	var more []tracker.LogEntry
	for range w.startLog.log.Free() {
		more = append(more, tracker.LogEntry{ID: "r1", Record: e.Record})
	}
	must(t, w.startLog.log.Write(more))
	w.startLog.ids, w.startLog.seq = []string{"r1"}, w.startLog.log.Seq()
	if !w.makeLogRoom(0) || w.startLog.log.Free() != 0 {
		t.Fatalf("room for no entry: synced a log that needed no room (%d free)", w.startLog.log.Free())
	}
	if !w.makeLogRoom(2) {
		t.Fatalf("a full log, synced, has no room for 2 entries (%d free, holding %q)", w.startLog.log.Free(), w.startLog.ids)
	}
	if len(w.startLog.ids) != 0 {
		t.Errorf("after making room the watcher still holds %q to sync", w.startLog.ids)
	}
}
