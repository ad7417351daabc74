package tracker

import (
	"os"
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
	f, _ := os.OpenFile(s.Path("a", "state.json"), os.O_WRONLY, 0)
	f.WriteAt([]byte("{"), 0) // in place, the same size
	f.Close()
	third, _ := s.Stamp("a")
	if second == first || third == second {
		t.Fatalf("stamps do not change: %v %v %v", first, second, third)
	}
}
