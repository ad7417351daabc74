package tracker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker/durable"
	"golang.org/x/sys/unix"
)

func TestPersisting(t *testing.T) {
	tmp := Problem{"runs/a/state.json123", "a temporary file left by an interrupted write"}
	gone := Problem{"runs/b/state.json", "recorded running, but its process (pid 9) is gone; a watcher records its end when it starts"}
	rev3 := Problem{"runs/c/state.json", "rev 3 (running) has no event in the history"}
	rev4 := Problem{"runs/c/state.json", "rev 4 (completed) has no event in the history"}
	tests := []struct {
		name           string
		earlier, later []Problem
		want           []Problem
	}{
		{"none", nil, nil, nil},
		{"a write in flight, then done", []Problem{tmp}, nil, nil},
		{"cut short: found both times", []Problem{tmp, gone}, []Problem{gone, tmp}, []Problem{gone, tmp}},
		{"found only the second time: not yet persisting", nil, []Problem{gone}, nil},
		{"same path, another problem", []Problem{rev3}, []Problem{rev4}, nil},
		{"some of each", []Problem{tmp, rev3, gone}, []Problem{rev4, gone}, []Problem{gone}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Persisting(tt.earlier, tt.later); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Persisting(%v, %v) = %v, want %v", tt.earlier, tt.later, got, tt.want)
			}
		})
	}
}

// TestCheckRunCovered: a record whose run's next changes (an end) are in
// the history is reported as lacking them, unless it has ended itself
// (fsck --repair's rebuilt record, say): recovery applies them only to
// runs not ended, and so must fsck report.
func TestCheckRunCovered(t *testing.T) {
	created := time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		state StateName
		want  bool
	}{
		{Running, true},
		{Completed, false},
	} {
		s := NewStore(t.TempDir())
		s.SetDurability(WatcherCrash)
		if err := s.MakeRunDir("a"); err != nil {
			t.Fatal(err)
		}
		st := &State{ID: "a", State: tc.state, Rev: 4, CreatedAt: created}
		if err := s.Write(st); err != nil {
			t.Fatal(err)
		}
		events := []Event{{ID: "a", Rev: 4, State: tc.state}, {ID: "a", Rev: 5, State: Completed, CreatedAt: &created}}
		got := false
		for _, p := range checkRun(s, "a", events, nil) {
			got = got || strings.Contains(p.What, "its record lacks the changes after rev 4 that the history has (completed, rev 5)")
		}
		if got != tc.want {
			t.Errorf("a %s record, the history's completed after it: reported %v, want %v", tc.state, got, tc.want)
		}
	}
}

// TestFsckRequests: each way a loss (a power loss, a disk error, a
// hand) leaves the requests the watcher took is reported with what it
// costs, and only those: a queued run's request is in the spool, an
// ended run needs its own no more, a claim under way is the watcher's.
// Repair removes only what nothing needs (a partial write, what an
// answered request left) and leaves the rest, saying why.
func TestFsckRequests(t *testing.T) {
	service := &spool.Restart{Policy: spool.RestartAlways}
	badStart := `{"command": 1}`
	_, badStartErr := spool.ParseStart([]byte(badStart))
	tests := []struct {
		name     string
		make     func(r *fakeRoot)
		watching bool
		want     string // "PATH: what" with PATH from the root, or ""
		removed  bool   // repair removes PATH
	}{
		{"a running run's request, whole", func(r *fakeRoot) { r.run("a", Running, nil, "true") }, false, "", false},
		{"a running run's request missing", func(r *fakeRoot) { r.run("a", Running, nil, "") },
			false, "runs/a/request: missing: the run cannot be restarted: a restart request ends it failed", false},
		{"a service's request empty", func(r *fakeRoot) { r.run("a", Running, service, ""); r.file("runs/a/request", "") },
			false, "runs/a/request: empty (a power loss took back what was not synced, or a hand emptied it): the service cannot be restarted: its next restart ends it failed", false},
		{"a starting run's request a symlink", func(r *fakeRoot) { r.run("a", Starting, nil, ""); r.symlink("runs/a/request", "../../x") },
			false, "runs/a/request: a symbolic link: not a regular file: not the request the run was claimed from (tend claims regular files; the run's owner put this there): if the run has not started yet, it cannot be (the next watcher records it failed), nor restarted", false},
		{"a run in backoff whose request does not parse", func(r *fakeRoot) { r.run("a", Backoff, service, badStart) },
			false, "runs/a/request: it does not parse (" + badStartErr.Error() + "): its next attempt cannot start: the run ends failed", false},
		{"a run too large to be a request", func(r *fakeRoot) {
			r.run("a", Running, nil, "")
			r.file("runs/a/request", strings.Repeat("x", spool.MaxBody+1))
		}, false, fmt.Sprintf("runs/a/request: %d bytes, larger than the limit of %d: the run cannot be restarted: a restart request ends it failed", spool.MaxBody+1, spool.MaxBody), false},
		{"a run's request with another name", func(r *fakeRoot) {
			r.run("a", Running, nil, `{"command": "x", "secret": 1}`)
			if err := os.Link(filepath.Join(r.root, "runs/a/request"), filepath.Join(r.root, "elsewhere")); err != nil {
				t.Fatal(err)
			}
		}, false, "runs/a/request: it has 2 links: not read (a file of another's, or linked elsewhere, by the run's owner; or a claim a power loss cut, which the next watcher mends)", false},
		{"a queued run's request is in the spool", func(r *fakeRoot) { r.run("a", Queued, nil, "") }, false, "", false},
		{"a Slurm job's queued run needs its own", func(r *fakeRoot) {
			r.run("a", Queued, nil, "")
			st, _ := r.s.Read("a")
			st.Job = &Job{Engine: "slurm", Tag: "t"}
			r.write(st)
		}, false, "runs/a/request: missing: if the run has not started yet, it cannot be (the next watcher records it failed), nor restarted", false},
		{"an ended run needs its own no more", func(r *fakeRoot) { r.run("a", Completed, nil, ""); r.file("runs/b", "") }, false, "", false},

		{"a claim not carried out, no watcher", func(r *fakeRoot) { r.file("claims/0:a@t.cancel", "") },
			false, "claims/0:a@t.cancel: a claimed cancel request not yet carried out (a watcher takes it again when it starts)", false},
		{"a claim under way", func(r *fakeRoot) { r.file("claims/0:a@t.cancel", `{"grace": "5s"}`) }, true, "", false},
		{"a claim emptied", func(r *fakeRoot) { r.file("claims/1000:a@t.note", "") },
			true, "claims/1000:a@t.note: empty (a power loss took back what was not synced, or a hand emptied it): the next watcher puts it back in the spool, where it is rejected with the reason: send it again", false},
		{"a claim that does not parse", func(r *fakeRoot) { r.file("claims/0:*@t.signal", `{"all": true}`) },
			true, `claims/0:*@t.signal: it does not parse (missing "signal"): the next watcher puts it back in the spool, where it is rejected with the reason: send it again`, false},
		{"a claim that is a FIFO", func(r *fakeRoot) { r.fifo("claims/0:a.delete") },
			true, "claims/0:a.delete: a FIFO: not a regular file: no watcher takes it, and a request of this name is rejected while it is in the way", false},
		{"a start in claims/", func(r *fakeRoot) { r.file("claims/0:a.start", "true") },
			true, "claims/0:a.start: not a claimed request (the watcher claims to <uid>:<request name>, and a selector's runs beside it as .chosen): nothing reads it", false},
		{"a stranger in claims/", func(r *fakeRoot) { r.file("claims/notes.txt", "hi") },
			true, "claims/notes.txt: not a claimed request (the watcher claims to <uid>:<request name>, and a selector's runs beside it as .chosen): nothing reads it", false},
		{"a selector's runs, with it", func(r *fakeRoot) {
			r.file("claims/0:*@t.cancel", `{"all": true}`)
			r.file("claims/0:*@t.cancel.chosen", "12\na\n")
		}, true, "", false},
		{"a selector's runs, it back in the spool", func(r *fakeRoot) {
			r.file("spool/*@t.cancel", `{"all": true}`)
			r.file("claims/0:*@t.cancel.chosen", "12\na\n")
		}, false, "", false},
		{"a selector's runs, it answered", func(r *fakeRoot) { r.file("claims/0:*@t.cancel.chosen", "12\na\n") },
			true, "claims/0:*@t.cancel.chosen: " + chosenOrphan, true},
		{"a selector's runs lost", func(r *fakeRoot) {
			r.file("claims/0:*@t.cancel", `{"all": true}`)
			r.file("claims/0:*@t.cancel.chosen", "")
		}, true, "claims/0:*@t.cancel.chosen: empty: the runs its selector request selected are lost; taken again, it acts on those it selects then", false},
		{"a selector's runs being written", func(r *fakeRoot) { r.file("claims/0:*@t.cancel.chosen4242", "12\n") }, true, "", false}, // a leftover
		{"a chosen of no selector", func(r *fakeRoot) { r.file("claims/0:a@t.cancel.chosen", "12\n") },
			true, "claims/0:a@t.cancel.chosen: not a claimed request (the watcher claims to <uid>:<request name>, and a selector's runs beside it as .chosen): nothing reads it", false},

		{"a rejection, whole", func(r *fakeRoot) { r.reject("x.strat", "x.strat") }, false, "", false},
		{"a rejection, numbered and cut short", func(r *fakeRoot) {
			long := strings.Repeat("0", 255-len(".start")) + ".start"
			r.reject(long, long)
			r.reject(long, long)
		}, false, "", false},
		{"a request without its reason", func(r *fakeRoot) { r.reject("x.strat", "x.strat"); r.remove("rejected/x.strat.error") },
			false, "rejected/x.strat: a rejected request without its reason (x.strat.error is gone: a power loss or a hand took it): why it was refused is lost, but for its answer in outcomes/", false},
		{"a reason emptied", func(r *fakeRoot) {
			r.reject("x.strat", "x.strat")
			r.reject("x.strat", "x.strat")
			r.file("rejected/x.strat.1.error", "")
		},
			false, "rejected/x.strat.1.error: an empty reason (a power loss took back what was written, or a hand emptied it): why its request was refused is lost, but for its answer in outcomes/", false},
		{"a reason without its request", func(r *fakeRoot) { r.reject("x.strat", "x.strat"); r.remove("rejected/x.strat") },
			false, "rejected/x.strat.error: " + reasonOrphan, true},
		{"a numbered reason without its request", func(r *fakeRoot) {
			r.reject("x.strat", "x.strat")
			r.reject("x.strat", "x.strat")
			r.remove("rejected/x.strat.1")
		},
			false, "rejected/x.strat.1.error: " + reasonOrphan, true},
		{"a request named .error, with its reason", func(r *fakeRoot) { r.reject("y.error", "y.error") }, false, "", false},
		{"a request named .error, without its reason", func(r *fakeRoot) { r.reject("y.error", "y.error"); r.remove("rejected/y.error.error") },
			false, "rejected/y.error: a rejected request without its reason (y.error.error is gone: a power loss or a hand took it): why it was refused is lost, but for its answer in outcomes/", false},
		{"a reason being written", func(r *fakeRoot) { r.file("rejected/x.strat.error4242", "") }, false, "rejected/x.strat.error4242: " + tempFile, true},
		{"a reason being written, its data lost", func(r *fakeRoot) { r.file("rejected/x.strat.error4242", "\x00\x00\x00") }, false, "rejected/x.strat.error4242: " + tempFile, true},
		{"a reason being written, whole", func(r *fakeRoot) { r.file("rejected/x.strat.error4242", "x.strat: bad\n") }, false, "rejected/x.strat.error4242: " + tempFile, true},
		{"a request named like a reason being written", func(r *fakeRoot) { r.file("rejected/x.error4242", "echo hi") },
			false, "rejected/x.error4242: a rejected request without its reason (x.error4242.error is gone: a power loss or a hand took it): why it was refused is lost, but for its answer in outcomes/", false},
		{"a hidden file in rejected/", func(r *fakeRoot) { r.file("rejected/.x.start.error", "") }, false, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newFakeRoot(t)
			tt.make(r)
			var got []string
			for _, f := range requestFindings(r.s, r.root, tt.watching) {
				got = append(got, strings.TrimPrefix(f.String(), r.root+"/"))
			}
			var want []string
			if tt.want != "" {
				want = []string{tt.want}
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("found:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			if tt.want == "" {
				return
			}
			path := filepath.Join(r.root, tt.want[:strings.Index(tt.want, ": ")])
			if strings.Contains(tt.want, " without its reason (") || strings.Contains(tt.want, ": an empty reason (") {
				// The reason is written again, saying it was lost: the
				// request stays, and rejected/ is whole.
				reason := path // emptied
				if strings.Contains(tt.want, " without its reason (") {
					reason += ".error"
				}
				done, left := repairRequests(r.s, r.root)
				b, err := os.ReadFile(reason)
				if err != nil || !strings.Contains(string(b), LostReason) || len(left) > 0 || !slices.Contains(done, reason+": written (saying its request's reason was lost)") {
					t.Fatalf("repair: did %q, left %v; %s holds %q (%v)", done, left, reason, b, err)
				}
				if found := requestFindings(r.s, r.root, tt.watching); len(found) > 0 {
					t.Errorf("after repair: %v", found)
				}
				return
			}
			_, err := os.Lstat(path)
			was := err == nil
			done, left := repairRequests(r.s, r.root)
			_, err = os.Lstat(path)
			removed := was && errors.Is(err, os.ErrNotExist)
			said := slices.ContainsFunc(done, func(line string) bool { return strings.HasPrefix(line, path+": removed (") })
			kept := slices.ContainsFunc(left, func(p Problem) bool { return p.Path == path })
			if removed != tt.removed || said != tt.removed || kept == tt.removed {
				t.Errorf("repair: removed %v (want %v), did %q, left %v", removed, tt.removed, done, left)
			}
			if found := requestFindings(r.s, r.root, tt.watching); tt.removed && len(found) > 0 {
				t.Errorf("after repair: %v", found)
			}
		})
	}
}

// fakeRoot is a root made by hand, as a watcher would have left it.
type fakeRoot struct {
	t    *testing.T
	root string
	s    *Store
}

func newFakeRoot(t *testing.T) *fakeRoot {
	root := t.TempDir()
	for _, dir := range []string{"spool", "claims", "rejected", "runs"} {
		if err := os.Mkdir(filepath.Join(root, dir), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	s := NewStore(root)
	s.SetDurability(WatcherCrash)
	return &fakeRoot{t, root, s}
}

// run makes run id's record in state, and its claimed request with body
// (none if body is "").
func (r *fakeRoot) run(id string, state StateName, restart *spool.Restart, body string) {
	if err := r.s.MakeRunDir(id); err != nil {
		r.t.Fatal(err)
	}
	r.write(&State{ID: id, State: state, Rev: 1, Restart: restart, CreatedAt: time.Now()})
	if body != "" {
		r.file("runs/"+id+"/request", body)
	}
}

func (r *fakeRoot) write(st *State) {
	if err := r.s.Write(st); err != nil {
		r.t.Fatal(err)
	}
}

func (r *fakeRoot) file(name, body string) {
	if err := os.WriteFile(filepath.Join(r.root, name), []byte(body), 0o600); err != nil {
		r.t.Fatal(err)
	}
}

func (r *fakeRoot) symlink(name, to string) {
	if err := os.Symlink(to, filepath.Join(r.root, name)); err != nil {
		r.t.Fatal(err)
	}
}

func (r *fakeRoot) fifo(name string) {
	if err := unix.Mkfifo(filepath.Join(r.root, name), 0o600); err != nil {
		r.t.Fatal(err)
	}
}

func (r *fakeRoot) remove(name string) {
	if err := os.Remove(filepath.Join(r.root, name)); err != nil {
		r.t.Fatal(err)
	}
}

// reject has spool.Dir reject a request named name from the spool, as
// the watcher does.
func (r *fakeRoot) reject(name, body string) {
	r.file("spool/"+name, body)
	if _, err := (spool.Dir{Root: r.root}).Reject(name, "bad: very"); err != nil {
		r.t.Fatal(err)
	}
}

// TestFsckLeftoversOfRequests: what an interrupted write of a selector's runs
// leaves in claims/ is a leftover, which repair removes; a claimed
// request that merely ends in digits is not.
func TestFsckLeftoversOfRequests(t *testing.T) {
	r := newFakeRoot(t)
	r.file("claims/0:*@t.cancel.chosen4242", "12\n")
	r.file("claims/0:a@t.cancel", "")
	var got []string
	for _, p := range leftovers(r.root) {
		got = append(got, strings.TrimPrefix(p.String(), r.root+"/"))
	}
	want := []string{"claims/0:*@t.cancel.chosen4242: a temporary file left by an interrupted write"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("leftovers = %q, want %q", got, want)
	}
}

// TestFsckRejectedRequestNamedAsReason: a request whose reason was lost
// (a hand took it) and, rejected since, a request with that reason's name
// (x.start.error, an unknown verb's) are not taken for a request and its
// reason: repair must not remove the second request's own reason as one
// without its request, nor write the first one's over the second
// request. Each request keeps what it has; the first one's lost reason is
// reported, and left.
func TestFsckRejectedRequestNamedAsReason(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		root       bool // needs root: the request is root's, which only the mark tells from a reason
	}{
		{"a member's request, not read as a reason", "echo y", false},
		// Root's file that reads as x.start's reason: moved into the
		// spool by a member (root leaves files in their directories).
		{"root's request, read as a reason", "x.start: refused for a reason root's file made up\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.root && os.Geteuid() != 0 {
				t.Skip("the mark tend puts on root's files is root's alone to set and read")
			}
			r := newFakeRoot(t)
			r.reject("x.start", `{"command": "echo x"}`)
			r.remove("rejected/x.start.error")
			r.reject("x.start.error", tc.body)
			if tc.root {
				fd, _, err := durable.OpenRegular(filepath.Join(r.root, "rejected", "x.start.error"))
				if err != nil {
					t.Fatal(err)
				}
				marked := spool.CarriesMark(fd)
				unix.Close(fd)
				if !marked {
					t.Skip("the file system holds no trusted attributes: root's requests in rejected/ look like reasons there")
				}
			}
			before := r.files("rejected")
			var got []string
			for _, f := range requestFindings(r.s, r.root, false) {
				got = append(got, strings.TrimPrefix(f.String(), r.root+"/"))
			}
			want := []string{"rejected/x.start: a rejected request without its reason (x.start.error is another rejected request: a power loss or a hand took its own): why it was refused is lost, but for its answer in outcomes/"}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("found:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			done, left := repairRequests(r.s, r.root)
			if after := r.files("rejected"); !reflect.DeepEqual(after, before) || len(done) > 0 || len(left) != 1 {
				t.Errorf("repair did %q, left %v: rejected/ held\n%v\nand holds\n%v", done, left, before, after)
			}
		})
	}
}

// files returns the files of directory name in the root, by name.
func (r *fakeRoot) files(name string) map[string]string {
	ents, err := os.ReadDir(filepath.Join(r.root, name))
	if err != nil {
		r.t.Fatal(err)
	}
	files := make(map[string]string)
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(r.root, name, e.Name()))
		if err != nil {
			r.t.Fatal(err)
		}
		files[e.Name()] = string(b)
	}
	return files
}

// TestRepairedEventsCarryTheBases: the events tend fsck --repair appends
// for a record (one the history lacks, one rebuilt) carry its output, so
// that a record rebuilt from the history later still finds its bases.
func TestRepairedEventsCarryTheBases(t *testing.T) {
	root := t.TempDir()
	out := &Output{Limit: 65536, Stdout: Stream{Dropped: 40960, Base: 40960}}
	st := &State{ID: "a", Rev: 7, State: Running, Output: out}
	// fsck keeps the events of the runs in runs/ alone.
	if err := os.MkdirAll(filepath.Join(root, "runs", "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := addMissingEvent(root, st, nil); err != nil {
		t.Fatal(err)
	}
	events, bad, _ := scanHistory(root)
	if len(bad) > 0 || len(events["a"]) != 1 {
		t.Fatalf("history: %v, bad lines %v; want the one event", events, bad)
	}
	if got := events["a"][0].Output; got == nil || *got != *out {
		t.Fatalf("the appended event's output is %+v, want %+v", got, out)
	}
	rebuilt := Rebuild(NewStore(root), "a", events["a"], func(int, string) (uint64, bool) { return 0, false })
	if rebuilt.Output == nil || rebuilt.Output.Stdout != out.Stdout {
		t.Fatalf("rebuilt from it: output %+v, want %+v", rebuilt.Output, out)
	}
}

// TestRebuildCutsAtAReusedID: a record rebuilt from the history is of the
// last run made with its ID alone, even where the deleted line of the run
// before was lost (a power loss, a hand): a run begins at rev 1, and an
// end or stop says when its run was created.
func TestRebuildCutsAtAReusedID(t *testing.T) {
	at := func(s int) time.Time { return time.Date(2026, 11, 29, 6, 0, s, 0, time.UTC) }
	old := "old"
	created0, created1 := at(0), at(10)
	exit := 0
	first := []Event{
		{Time: at(0), ID: "a", Rev: 1, State: Starting},
		{Time: at(1), ID: "a", Rev: 2, State: Running, PID: 100},
		{Time: at(2), ID: "a", Rev: 3, State: Running, PID: 100, Labels: map[string]*string{"k": &old}, Note: "of the first run"},
		{Time: at(3), ID: "a", Rev: 4, State: Completed, ExitCode: &exit, CreatedAt: &created0},
	}
	tests := []struct {
		name string
		then []Event // the second run's, its deleted line before them lost
	}{
		{"from rev 1", []Event{
			{Time: at(10), ID: "a", Rev: 1, State: Starting},
			{Time: at(11), ID: "a", Rev: 2, State: Running, PID: 200},
		}},
		{"its rev 1 lost too, told by created_at", []Event{
			{Time: at(11), ID: "a", Rev: 2, State: Running, PID: 200},
			{Time: at(12), ID: "a", Rev: 3, State: Stopping, PID: 200, Stop: &Stop{Cause: CauseCanceled}, CreatedAt: &created1},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			events := append(slices.Clone(first), tt.then...)
			st := Rebuild(NewStore(t.TempDir()), "a", events, func(int, string) (uint64, bool) { return 0, false })
			if st.Attempt != 1 || st.StartedAt == nil || !st.StartedAt.Equal(at(11)) {
				t.Errorf("attempt %d, started at %v: want the second run's one start, at %v", st.Attempt, st.StartedAt, at(11))
			}
			if st.Labels != nil || st.Notes != nil {
				t.Errorf("labels %v, notes %v: want none of the first run's", st.Labels, st.Notes)
			}
			if want := tt.then[0].Time; tt.then[0].Rev == 1 && !st.CreatedAt.Equal(want) || tt.then[0].Rev != 1 && !st.CreatedAt.Equal(created1) {
				t.Errorf("created at %v: want the second run's", st.CreatedAt)
			}
		})
	}
}
