package tracker

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tendhq/tend/tracker/layout"
)

// A label or note change sealed with the root's key opens with it, and
// only on its own run's line at its own rev; under a key made anew it
// does not open, and Rebuild drops it (and only it) cleanly; an old line
// with its labels and note in clear still rebuilds.
func TestSealChange(t *testing.T) {
	s, root := newStore(t)
	key, _, err := LoadKey(root, true)
	if err != nil {
		t.Fatal(err)
	}
	s.SetKey(key)
	v := "hunter2"
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	change := func() Event {
		return Event{Time: at, ID: "r", Rev: 3, State: Completed, Labels: map[string]*string{"token": &v}, Note: "swordfish"}
	}
	ev := change()
	if err := s.SealChange(&ev); err != nil {
		t.Fatal(err)
	}
	if ev.Labels != nil || ev.Note != "" || ev.Sealed == "" {
		t.Fatalf("sealed event %+v: want only Sealed", ev)
	}
	if b, _ := json.Marshal(ev); strings.Contains(string(b), "hunter2") || strings.Contains(string(b), "swordfish") || strings.Contains(string(b), "token") {
		t.Fatalf("the line %s shows what it seals", b)
	}
	again := change()
	s.SealChange(&again)
	if again.Sealed == ev.Sealed {
		t.Error("two seals of one change are the same: the nonce is not fresh")
	}

	opened, err := OpenChange(key, ev)
	if err != nil || opened.Note != "swordfish" || opened.Labels["token"] == nil || *opened.Labels["token"] != "hunter2" || opened.Sealed != "" {
		t.Fatalf("OpenChange = %+v, %v", opened, err)
	}
	for name, moved := range map[string]func(*Event){
		"another run": func(e *Event) { e.ID = "x" },
		"another rev": func(e *Event) { e.Rev = 4 },
		"edited": func(e *Event) {
			// A letter other than the one there: the seal is random, and
			// began with "A" once in 64 runs, which left it unedited.
			c := "A"
			if e.Sealed[0] == 'A' {
				c = "B"
			}
			e.Sealed = c + e.Sealed[1:]
		},
		"not base64":    func(e *Event) { e.Sealed = "!" },
		"too short":     func(e *Event) { e.Sealed = "AAAA" },
		"no key":        nil,
		"key made anew": nil,
	} {
		e, k := ev, key
		switch name {
		case "no key":
			k = nil
		case "key made anew":
			k = make([]byte, keySize)
		default:
			moved(&e)
		}
		if got, err := OpenChange(k, e); !errors.Is(err, ErrNotOpened) || got.Labels != nil || got.Note != "" {
			t.Errorf("%s: OpenChange = %+v, %v; want ErrNotOpened and nothing opened", name, got, err)
		}
	}

	// Rebuilt: with the key, the sealed change is applied as an old clear
	// line's is; under a key made anew it is lost, and counted.
	os.MkdirAll(s.RunDir("r"), 0o755)
	if err := os.WriteFile(s.Run("r").Request(), []byte(`{"command": "true", "labels": {"a": "1"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	old := "clear"
	exit := 0
	events := []Event{
		{Time: at.Add(-3 * time.Second), ID: "r", Rev: 1, State: Starting},
		{Time: at.Add(-2 * time.Second), ID: "r", Rev: 2, State: Completed, ExitCode: &exit, Labels: map[string]*string{"old": &old}, Note: "an old note"},
		ev,
	}
	none := func(int, string) (uint64, bool) { return 0, false }
	st := Rebuild(s, "r", events, none)
	if st.Labels["a"] != "1" || st.Labels["old"] != "clear" || st.Labels["token"] != "hunter2" || len(st.Notes) != 2 || st.Notes[1].Text != "swordfish" || !st.Notes[1].Time.Equal(at) {
		t.Errorf("rebuilt with the key: labels %v, notes %+v", st.Labels, st.Notes)
	}
	if n := UnopenedChanges(s, events); n != 0 {
		t.Errorf("UnopenedChanges with the key = %d, want 0", n)
	}
	s.SetKey(make([]byte, keySize))
	st = Rebuild(s, "r", events, none)
	if _, ok := st.Labels["token"]; ok || st.Labels["old"] != "clear" || len(st.Notes) != 1 {
		t.Errorf("rebuilt under a key made anew: labels %v, notes %+v; want the clear line's alone", st.Labels, st.Notes)
	}
	if n := UnopenedChanges(s, events); n != 1 {
		t.Errorf("UnopenedChanges under a key made anew = %d, want 1", n)
	}

	// The sealed line parses as a history line (fsck does not call it bad).
	b, _ := json.Marshal(ev)
	if _, err := parseEvent(b); err != nil {
		t.Errorf("parseEvent(%s) = %v", b, err)
	}
}

// fsck counts the lines a tend before 2026-11-29 wrote with labels or a
// note in clear, and its repair seals them in place, in order, so that
// they open to the same change and nothing else of the file changes.
func TestRepairSealsClearLines(t *testing.T) {
	root := t.TempDir()
	key, _, err := LoadKey(root, true)
	if err != nil {
		t.Fatal(err)
	}
	path := layout.Root(root).History()
	plain := `{"time":"2026-01-02T03:04:05Z","id":"r","rev":1,"state":"starting"}` + "\n"
	clear := `{"time":"2026-01-02T03:04:06Z","id":"r","rev":2,"state":"completed","labels":{"token":"hunter2"},"note":"swordfish"}` + "\n"
	if err := os.WriteFile(path, []byte(plain+clear), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, n := scanHistory(root); n[path] != 1 {
		t.Fatalf("scanHistory counts %v lines in clear, want 1 in %s", n, path)
	}
	done, err := repairHistory(root, key)
	if err != nil || len(done) != 1 {
		t.Fatalf("repairHistory = %q, %v", done, err)
	}
	b, _ := os.ReadFile(path)
	if !strings.HasPrefix(string(b), plain) || strings.Contains(string(b), "hunter2") || strings.Contains(string(b), "swordfish") {
		t.Fatalf("repaired history:\n%s", b)
	}
	events, err := ReadHistory(path)
	if err != nil || len(events) != 2 {
		t.Fatalf("ReadHistory = %v, %v", events, err)
	}
	ev, err := OpenChange(key, events[1])
	if err != nil || ev.Note != "swordfish" || ev.Labels["token"] == nil || *ev.Labels["token"] != "hunter2" {
		t.Errorf("the sealed line opens to %+v, %v", ev, err)
	}
	if _, _, n := scanHistory(root); n[path] != 0 {
		t.Errorf("after the repair, %d lines in clear", n[path])
	}
}
