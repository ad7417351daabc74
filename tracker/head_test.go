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
	// Each file is run's, under its own ID, then edited (and re-summed).
	as := func(id string) []byte { return bytes.Replace(b, []byte(`"run"`), []byte(`"`+id+`"`), 1) }
	edit := func(id, old, new string) []byte { return bytes.Replace(as(id), []byte(old), []byte(new), 1) }
	files := map[string][]byte{
		"edited":  edit("edited", `"state": "running"`, `"state": "failed"`),
		"resumed": resum(edit("resumed", `"state": "running"`, `"state": "failed"`)),
		"twice":   resum(edit("twice", `"state": "running"`, `"state": "running", "state": "failed"`)),
		"float":   resum(edit("float", `"pid": 4242`, `"pid": 4242.5`)),
		"exp":     resum(edit("exp", `"pid": 4242`, `"pid": 4.242e3`)),
		"pidstr":  resum(edit("pidstr", `"pid": 4242`, `"pid": "4242"`)),
		"badutf8": resum(edit("badutf8", `"sleep"`, "\"sl\xffeep\"")),
		"after":   resum(append(as("after")[:len(as("after"))-2:len(as("after"))-2], ` x}`...)),
		"torn":    as("torn")[:len(b)/2],
		"empty":   nil,
		"noid":    resum(edit("noid", `"id": "noid"`, `"id": ""`)),
	}
	for name, f := range files {
		os.Mkdir(s.RunDir(name), 0o755)
		if err := os.WriteFile(s.Run(name).State(), f, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Members ReadHead does not decode are not checked (see its doc).
	unchecked := map[string][2]string{
		"badgrace":   {`"grace": "0s"`, `"grace": "-5s"`},
		"badcreated": {`"created_at": "`, `"created_at": "x`},
		"badcommand": {`"command": [`, `"command": 7, "x": [`},
	}
	for name, change := range unchecked {
		os.Mkdir(s.RunDir(name), 0o755)
		f := resum(edit(name, change[0], change[1]))
		if err := os.WriteFile(s.Run(name).State(), f, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Read(name); err == nil {
			t.Errorf("%s: Read took it", name)
		}
		if h, err := s.ReadHead(name); err != nil || h != (Head{ID: name, State: Running, Rev: 2, PID: 4242}) {
			t.Errorf("%s: ReadHead = %+v, %v", name, h, err)
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
