package tracker

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Stamp changes with every write, by the watcher or by hand.
func TestStamp(t *testing.T) {
	s, _ := newStore(t)
	os.Mkdir(s.RunDir("a"), 0o755)
	st := &State{ID: "a", State: Running, Rev: 1, CreatedAt: time.Now()}
	if _, err := s.Stamp("a"); err == nil {
		t.Fatal("Stamp of a missing record: no error")
	}
	s.Write(st)
	first, err := s.Stamp("a")
	if again, _ := s.Stamp("a"); err != nil || again != first {
		t.Fatalf("Stamp twice: %v, %v, %v", first, again, err)
	}
	st.Rev++
	s.Write(st)
	second, _ := s.Stamp("a")
	f, _ := os.OpenFile(filepath.Join(s.RunDir("a"), "state.json"), os.O_WRONLY, 0)
	f.WriteAt([]byte("{"), 0) // in place, the same size
	f.Close()
	third, _ := s.Stamp("a")
	if second == first || third == second {
		t.Fatalf("stamps do not change: %v %v %v", first, second, third)
	}
}

// WriteAll writes records Read reads, as Write does.
func TestWriteAll(t *testing.T) {
	s, _ := newStore(t)
	var states []*State
	for _, id := range []string{"a", "b", "c"} {
		os.Mkdir(s.RunDir(id), 0o755)
		states = append(states, &State{ID: id, State: Completed, Rev: 2, CreatedAt: time.Now()})
	}
	os.RemoveAll(s.RunDir("b")) // b's directory is gone: only b fails
	errs := s.WriteAll(states, nil)
	for i, st := range states {
		got, err := s.Read(st.ID)
		if st.ID == "b" {
			if errs[i] == nil {
				t.Errorf("b: no error")
			}
			continue
		}
		if errs[i] != nil || err != nil || got.Sum != st.Sum || got.State != Completed {
			t.Errorf("%s: %v, %v, %+v", st.ID, errs[i], err, got)
		}
	}
}
