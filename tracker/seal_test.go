package tracker

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A sealed record reads back in a Store with the key; one whose sum was
// computed again after an edit, or that lost its seal, or was sealed under
// another key, does not; a Store without the key checks only the sum.
func TestSeal(t *testing.T) {
	s, root := newStore(t)
	key, created, err := LoadKey(root, true)
	if err != nil || !created {
		t.Fatalf("LoadKey = %v, %v", created, err)
	}
	s.SetKey(key)
	os.Mkdir(s.RunDir("a"), 0o755)
	st := &State{ID: "a", State: Running, Rev: 2, PID: 100, ProcStart: 7, CreatedAt: time.Now()}
	if err := s.Write(st); err != nil {
		t.Fatal(err)
	}
	if st.Seal == "" {
		t.Fatal("Write left the seal empty")
	}
	if _, err := s.Read("a"); err != nil {
		t.Fatalf("Read(sealed) = %v", err)
	}

	forge := func(edit func(*State)) error {
		t.Helper()
		if err := s.Write(st); err != nil {
			t.Fatal(err)
		}
		got, err := s.Read("a")
		if err != nil {
			t.Fatal(err)
		}
		edit(got)
		b, err := got.encode(nil) // a sum anyone can compute
		if err != nil {
			t.Fatal(err)
		}
		b = bytes.Replace(b, []byte(`"sum"`), []byte(`"seal": "`+got.Seal+`",`+"\n"+`  "sum"`), 1)
		if got.Seal == "" {
			b, _ = got.encode(nil)
		}
		path := filepath.Join(s.RunDir("a"), "state.json")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := NewStore(root).Read("a"); errors.Is(err, ErrEdited) {
			t.Fatalf("the forged record's sum does not match: the test forges badly: %v", err)
		}
		_, err = s.Read("a")
		return err
	}
	for name, edit := range map[string]func(*State){
		"another pid":  func(st *State) { st.PID = 1 },
		"seal removed": func(st *State) { st.Seal = "" },
		"another key": func(st *State) {
			other := *st
			other.encode(bytes.Repeat([]byte{1}, keySize))
			st.Seal = other.Seal
		},
	} {
		if err := forge(edit); !errors.Is(err, ErrUnsealed) {
			t.Errorf("%s: Read = %v, want ErrUnsealed", name, err)
		}
	}
	if err := s.Write(st); err != nil { // tend writes it again: trusted again
		t.Fatal(err)
	}
	if _, err := s.Read("a"); err != nil {
		t.Fatalf("Read(rewritten) = %v", err)
	}
}

// The key is the watcher's user's alone; one anyone else may read is
// refused, and a second LoadKey reads the first one's key.
func TestLoadKey(t *testing.T) {
	root := t.TempDir()
	if _, _, err := LoadKey(root, false); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("LoadKey(no key, no create) = %v, want ErrNotExist", err)
	}
	key, created, err := LoadKey(root, true)
	if err != nil || !created || len(key) != keySize {
		t.Fatalf("LoadKey = %d bytes, %v, %v", len(key), created, err)
	}
	again, created, err := LoadKey(root, true)
	if err != nil || created || !bytes.Equal(again, key) {
		t.Fatalf("LoadKey again = %v, %v (same key: %v)", created, err, bytes.Equal(again, key))
	}
	os.Chmod(filepath.Join(root, "record.key"), 0o644)
	if _, _, err := LoadKey(root, true); err == nil || !strings.Contains(err.Error(), "readable by others") {
		t.Fatalf("LoadKey(mode 0644) = %v", err)
	}
	os.Remove(filepath.Join(root, "record.key"))
	os.Symlink("/dev/zero", filepath.Join(root, "record.key"))
	if _, _, err := LoadKey(root, true); err == nil {
		t.Fatal("LoadKey(a link to /dev/zero) succeeded")
	}
}

// SealAll seals the records an earlier tend wrote, and only those.
func TestSealAll(t *testing.T) {
	s, root := newStore(t)
	for _, id := range []string{"old", "bad"} {
		os.Mkdir(s.RunDir(id), 0o755)
		if err := s.Write(&State{ID: id, State: Completed, Rev: 3, CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(s.RunDir("bad"), "state.json"), []byte(`{"id": "bad"}`), 0o600)
	key, _, err := LoadKey(root, true)
	if err != nil {
		t.Fatal(err)
	}
	s.SetKey(key)
	if _, err := s.Read("old"); !errors.Is(err, ErrUnsealed) {
		t.Fatalf("Read(old) before SealAll = %v, want ErrUnsealed", err)
	}
	sealed, errs := s.SealAll()
	if len(errs) != 0 || strings.Join(sealed, ",") != "old" {
		t.Fatalf("SealAll = %v, %v; want [old]", sealed, errs)
	}
	st, err := s.Read("old")
	if err != nil || st.Rev != 3 {
		t.Fatalf("Read(old) = %+v, %v", st, err)
	}
}
