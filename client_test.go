package tend_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tendhq/tend"
	"github.com/tendhq/tend/spool"
)

// hostileIDs are IDs no method may act on: each would be a path, an
// option or an empty name.
var hostileIDs = []string{"", "--help", "--version", "--all", "-", "../x", "..", ".", "a/b", "tests/", "x@y", "x\x00y", "a b", strings.Repeat("a", 65)}

// Every method refuses an invalid ID with ErrInvalid, before it writes
// anything: the root is not even made.
func TestInvalidIDsWriteNothing(t *testing.T) {
	root := filepath.Join(t.TempDir(), ".tend")
	c, err := tend.Open(root, tend.Options{Session: "s1", Watcher: &tend.WatcherOptions{Executable: "tend"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	methods := map[string]func(id string) error{
		"Start":  func(id string) error { _, err := c.Start(ctx, id, tend.Request{Shell: "true"}); return err },
		"Show":   func(id string) error { _, err := c.Show(ctx, id); return err },
		"Wait":   func(id string) error { _, err := c.Wait(ctx, id); return err },
		"Cancel": func(id string) error { _, err := c.Cancel(ctx, id, tend.Control{}); return err },
		"Signal": func(id string) error { _, err := c.Signal(ctx, id, "HUP", tend.Control{}); return err },
		"Pause":  func(id string) error { _, err := c.Pause(ctx, id, tend.Control{}); return err },
		"Label": func(id string) error {
			v := "x"
			_, err := c.Label(ctx, id, map[string]*string{"k": &v}, tend.Control{})
			return err
		},
		"Note":    func(id string) error { _, err := c.Note(ctx, id, "n", tend.Control{}); return err },
		"Delete":  func(id string) error { _, err := c.Delete(ctx, tend.Control{}, "ok", id); return err },
		"ReadLog": func(id string) error { _, err := c.ReadLog(ctx, id, tend.Stdout, 0, 0); return err },
		"ReadLines": func(id string) error {
			_, err := c.ReadLines(ctx, id, tend.LogPlace{}, 0)
			return err
		},
		"Events": func(id string) error {
			return c.Events(ctx, tend.EventFilter{ID: id + "x"}, false, func(tend.Event) error { return nil })
		},
	}
	for name, call := range methods {
		for _, id := range hostileIDs {
			if name == "Start" && id == "" {
				continue // an ID is made from the command
			}
			if name == "Events" && spool.ValidID(id+"x") == nil {
				continue
			}
			if err := call(id); !errors.Is(err, tend.ErrInvalid) {
				t.Errorf("%s(%q) = %v, want an error wrapping ErrInvalid", name, id, err)
			}
		}
	}
	if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the root was made (%v): something was written", err)
	}
}

// Sessions, labels, durations, signals, states and revisions are checked
// as the spool checks them, before anything is written.
func TestInvalidArgumentsWriteNothing(t *testing.T) {
	root := filepath.Join(t.TempDir(), ".tend")
	ctx := context.Background()
	if _, err := tend.Open(root, tend.Options{Session: "--all"}); !errors.Is(err, tend.ErrInvalid) {
		t.Errorf("Open with session --all = %v, want ErrInvalid", err)
	}
	c, err := tend.Open(root, tend.Options{Session: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	op, err := tend.Open(root, tend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	neg := spool.Duration(-time.Second)
	tests := []struct {
		name string
		call func() error
		want string
	}{
		{"empty command", func() error { _, err := c.Start(ctx, "a", tend.Request{}); return err }, "the command is empty"},
		{"other session", func() error { _, err := c.Start(ctx, "a", tend.Request{Shell: "true", Session: "s2"}); return err }, "acts as session s1"},
		{"bad env", func() error {
			_, err := c.Start(ctx, "a", tend.Request{Shell: "true", Env: map[string]string{"A=B": "x"}})
			return err
		}, `bad variable "A=B"`},
		{"empty label", func() error {
			_, err := c.Start(ctx, "a", tend.Request{Shell: "true", Labels: map[string]string{"": "x"}})
			return err
		}, "a key is empty"},
		{"negative grace", func() error { _, err := c.Start(ctx, "a", tend.Request{Shell: "true", Grace: &neg}); return err }, "negative"},
		{"negative timeout", func() error { _, err := c.Start(ctx, "a", tend.Request{Shell: "true", Timeout: neg}); return err }, "negative"},
		{"NUL in command", func() error { _, err := c.Start(ctx, "a", tend.Request{Shell: "a\x00b"}); return err }, "NUL"},
		{"cancel grace", func() error { _, err := c.Cancel(ctx, "a", tend.Control{Grace: -time.Second}); return err }, "negative"},
		{"huge grace", func() error { _, err := c.Cancel(ctx, "a", tend.Control{Grace: 48 * time.Hour}); return err }, "longer than the limit"},
		{"grace on a signal", func() error { _, err := c.Signal(ctx, "a", "HUP", tend.Control{Grace: time.Second}); return err }, "a grace is for cancel and restart"},
		{"bad signal", func() error { _, err := c.Signal(ctx, "a", "KILLL", tend.Control{}); return err }, "KILLL"},
		{"negative revision", func() error { _, err := c.Cancel(ctx, "a", tend.Control{IfRev: -1}); return err }, "not a revision"},
		{"empty label key", func() error {
			v := "x"
			_, err := c.Label(ctx, "a", map[string]*string{"": &v}, tend.Control{})
			return err
		}, "label"},
		{"huge note", func() error { _, err := c.Note(ctx, "a", strings.Repeat("x", 5000), tend.Control{}); return err }, "note"},
		{"bad state", func() error { _, err := c.List(ctx, tend.Filter{States: []string{"runing"}}); return err }, `did you mean "running"`},
		{"other session's list", func() error { _, err := c.List(ctx, tend.Filter{Session: "s2"}); return err }, "acts as session s1"},
		{"bad session filter", func() error { _, err := op.List(ctx, tend.Filter{Session: "../x"}); return err }, "session"},
		{"cancel all with no session", func() error { _, err := op.CancelAll(ctx, tend.Control{}); return err }, "no session"},
		{"revision for several", func() error { _, err := c.Delete(ctx, tend.Control{IfRev: 2}, "a", "b"); return err }, "one ID"},
		{"bad stream", func() error { _, err := c.ReadLog(ctx, "a", "stdin", 0, 0); return err }, `stream "stdin"`},
		{"negative offset", func() error { _, err := c.ReadLog(ctx, "a", tend.Stdout, -1, 0); return err }, "negative"},
		{"huge environment", func() error {
			_, err := c.Start(ctx, "a", tend.Request{Shell: "true", Env: map[string]string{"BIG": strings.Repeat("x", 2<<20)}})
			return err
		}, "start: the request would be"},
		{"huge selector", func() error {
			_, err := c.CancelSelected(ctx, spool.Select{Labels: map[string]string{"k": strings.Repeat("x", 2<<20)}}, tend.Control{})
			return err
		}, "cancel: the request would be"},
	}
	for _, tt := range tests {
		err := tt.call()
		if !errors.Is(err, tend.ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want ErrInvalid saying %q", tt.name, err, tt.want)
		}
	}
	if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the root was made (%v): something was written", err)
	}
}

// A client that starts no watcher leaves its request in the spool when
// none runs, and says so with ErrNoWatcher.
func TestNoWatcherLeavesTheRequest(t *testing.T) {
	root := filepath.Join(t.TempDir(), ".tend")
	c, err := tend.Open(root, tend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Start(context.Background(), "later", tend.Request{Shell: "true"})
	if !errors.Is(err, tend.ErrNoWatcher) || !strings.Contains(err.Error(), "later.start until one starts") {
		t.Fatalf("Start = %v, want ErrNoWatcher naming the request", err)
	}
	if _, err := os.Stat(filepath.Join(root, "spool", "later.start")); err != nil {
		t.Errorf("the request is not in the spool: %v", err)
	}
	_, err = c.Show(context.Background(), "later")
	if !errors.Is(err, tend.ErrNotFound) || !strings.Contains(err.Error(), "waits in the spool") {
		t.Errorf("Show = %v, want ErrNotFound saying it waits in the spool", err)
	}
}

// Outcomes map to the errors callers test for.
func TestOutcomeErr(t *testing.T) {
	tests := []struct {
		outcome string
		want    error
	}{
		{spool.Canceled, nil},
		{spool.Deleted, nil},
		{spool.Accepted, nil},
		{spool.NotFound, tend.ErrNotFound},
		{spool.AlreadyFinished, tend.ErrFinished},
		{spool.Conflict, tend.ErrConflict},
		{spool.NotPermitted, tend.ErrRefused},
		{spool.Rejected, tend.ErrRefused},
		{spool.StillActive, tend.ErrRefused},
	}
	for _, tt := range tests {
		err := tend.Outcome{ID: "a", Verb: "cancel", Outcome: tt.outcome}.Err()
		if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
			t.Errorf("Outcome %s: Err() = %v, want %v", tt.outcome, err, tt.want)
		}
	}
}

// TestFindRootRefusesOthers: a .tend above the working directory that
// another user owns (made in /tmp, say) is not taken for the client's
// root, nor is a link to one; the client's own, and root's, are.
func TestFindRootRefusesOthers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving a directory to another user needs root")
	}
	top := t.TempDir()
	work := filepath.Join(top, "a", "b")
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(top, ".tend")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := tend.FindRoot(work); err != nil || got != root {
		t.Fatalf("FindRoot with root's own .tend = %q, %v; want %q", got, err, root)
	}
	if err := os.Chown(root, 4242, 4242); err != nil {
		t.Fatal(err)
	}
	if got, err := tend.FindRoot(work); err == nil || !strings.Contains(err.Error(), "belongs to uid 4242") {
		t.Errorf("FindRoot with another's .tend = %q, %v; want an error naming uid 4242", got, err)
	}
	other := filepath.Join(top, "other")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other, filepath.Join(top, "a", ".tend")); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(filepath.Join(top, "a", ".tend"), 4242, 4242); err != nil {
		t.Fatal(err)
	}
	if _, err := tend.FindRoot(work); err == nil || !strings.Contains(err.Error(), "belongs to uid 4242") {
		t.Errorf("FindRoot with another's link = %v; want an error naming uid 4242", err)
	}
}
