package tracker

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// TestReadHeadIsRead holds ReadHead to Read's answer on records as tend
// writes them and as anything else may leave them.
func TestReadHeadIsRead(t *testing.T) {
	s, _ := newStore(t)
	code := 3
	now := time.Now().Round(0)
	written := []*State{
		{ID: "run", State: Running, Rev: 2, PID: 4242, PGID: 4242, Command: []string{"sleep", "9"}, CreatedAt: now},
		{ID: "failed", State: Failed, Rev: 3, Command: []string{"nope"}, Reason: `exec "nope": not found <&>`, CreatedAt: now},
		{ID: "ended", State: Completed, Rev: 9, PID: 7, ExitCode: &code, Reason: "naïve ☃ \"quoted\"\n", CreatedAt: now,
			Labels: map[string]string{"pid": "1", "state": "x"}, Notes: []Note{{Time: now, Text: "reason"}}},
	}
	for _, st := range written {
		os.Mkdir(s.RunDir(st.ID), 0o755)
		if err := s.Write(st); err != nil {
			t.Fatal(err)
		}
	}
	for _, st := range written { // read the short way
		b, _ := os.ReadFile(s.Run(st.ID).State())
		if h, sum, ok := parseHead(b); !ok || h != HeadOf(st) || !fileSumMatches(b, sum) {
			t.Errorf("%s: parseHead = %+v, %q, %v; want %+v, its sum", st.ID, h, sum, ok, HeadOf(st))
		}
	}
	// Files that are not what tend writes: ReadHead must say what Read says.
	b, err := os.ReadFile(s.Run("run").State())
	if err != nil {
		t.Fatal(err)
	}
	resum := func(b []byte) []byte { // the sum of an edited file made again, as anyone can
		c := compact(b)
		i := bytes.LastIndex(c, []byte(`,"sum":`))
		c = append(c[:i:i], sumSuffix...)
		sum := sumOf(c)
		return append(c[:len(c)-len(sumSuffix)], `,"sum":"`+sum+`"}`...)
	}
	files := map[string][]byte{
		"edited":  bytes.Replace(b, []byte(`"state": "running"`), []byte(`"state": "failed"`), 1),
		"resumed": resum(bytes.Replace(b, []byte(`"state": "running"`), []byte(`"state": "failed"`), 1)),
		"twice":   resum(bytes.Replace(b, []byte(`"state": "running"`), []byte(`"state": "running", "state": "failed"`), 1)),
		"float":   resum(bytes.Replace(b, []byte(`"pid": 4242`), []byte(`"pid": 4242.5`), 1)),
		"badutf8": resum(bytes.Replace(b, []byte(`"sleep"`), []byte("\"sl\xffeep\""), 1)),
		"torn":    b[:len(b)/2],
		"empty":   nil,
		"noid":    resum(bytes.Replace(b, []byte(`"id": "run"`), []byte(`"id": ""`), 1)),
	}
	for name, f := range files {
		os.Mkdir(s.RunDir(name), 0o755)
		f = bytes.Replace(f, []byte(`"run"`), []byte(`"`+name+`"`), 1)
		if err := os.WriteFile(s.Run(name).State(), f, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ids := []string{"missing", "../x"}
	for _, st := range written {
		ids = append(ids, st.ID)
	}
	for name := range files {
		ids = append(ids, name)
	}
	for _, id := range ids {
		st, err := s.Read(id)
		var want Head
		if st != nil {
			want = HeadOf(st)
		}
		got, gotErr := s.ReadHead(id)
		if got != want || errors.Is(gotErr, ErrNotFound) != errors.Is(err, ErrNotFound) ||
			errors.Is(gotErr, ErrEdited) != errors.Is(err, ErrEdited) || (gotErr == nil) != (err == nil) {
			t.Errorf("%s: ReadHead = %+v, %v; Read gives %+v, %v", id, got, gotErr, want, err)
		}
	}
	if h, err := s.ReadHead("failed"); err != nil || h.State != Failed || h.PID != 0 || !strings.Contains(h.Reason, "<&>") {
		t.Errorf("ReadHead(failed) = %+v, %v", h, err)
	}
}
