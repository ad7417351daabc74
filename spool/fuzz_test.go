package spool

import (
	"strings"
	"testing"
)

// The fuzz targets: parsers of what anyone can write into the spool must
// never panic, hang, or accept what they would not accept again. make test
// replays the seeds and testdata/fuzz; make fuzz explores.

func FuzzParseName(f *testing.F) {
	for _, s := range []string{"a.start", "a.b.cancel", "x@t1.label", "..start", "a/b.start", "\xff.start",
		"a\nb.start", strings.Repeat("a", 300) + ".start", ".hidden.start", "-rf.delete", "a@.cancel", "a@b@c.note"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		n, err := ParseName(name)
		if err != nil {
			return
		}
		if n.String() != name {
			t.Fatalf("ParseName(%q) = %+v, which names %q", name, n, n.String())
		}
		if strings.ContainsAny(n.ID+n.Tag, "/\x00\n@") || n.ID == "." || n.ID == ".." || ValidID(n.ID) != nil {
			t.Fatalf("ParseName(%q) accepted an unsafe ID %q", name, n.ID)
		}
	})
}

func FuzzParseStart(f *testing.F) {
	for _, s := range []string{"make test", `{"command": "x"}`, `{"command": ["a", "b"], "env": {"A": "1"}}`,
		`{"command": "x", "restart": {"policy": "always", "limit": 3}}`, `{"command": "x", "health": {"tcp": "a:1"}}`,
		`{"command": "x", "limits": {"cpu": 5}, "timeout": "1h", "grace": 3}`, `{"command": [[[[[]]]]]}`,
		`{"command":`, "{ make; }", "\x00", `{"command": "x", "timeout": -1}`, `{"command": "x", "timeout": 1e308}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		s, err := ParseStart(body)
		if err != nil {
			return
		}
		// What parses marshals to a request that parses to the same.
		b, err := s.MarshalJSON()
		if err != nil {
			t.Fatalf("ParseStart(%q) parsed, but does not marshal: %v", body, err)
		}
		back, err := ParseStart(b)
		if err != nil {
			t.Fatalf("ParseStart(%q) parsed; its marshaling %s does not: %v", body, b, err)
		}
		if strings.Join(back.Args(), "\x00") != strings.Join(s.Args(), "\x00") || back.Timeout != s.Timeout {
			t.Fatalf("round trip of %q changed it: %+v vs %+v", body, s, back)
		}
	})
}

func FuzzParseControl(f *testing.F) {
	for _, s := range []string{"", `{"grace": "2s"}`, `{"session": "s", "if_rev": 3}`, "HUP", `{"signal": "USR1"}`,
		"k=v\nj=", `{"labels": {"a": null}}`, "a note", `{"text": "x", "if_rev": 0}`, "\xff\xfe"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		ParseCancel(body)
		ParseDelete(body)
		ParseLabel(body)
		ParseNote(body)
		ParseSignal(body)
	})
}
