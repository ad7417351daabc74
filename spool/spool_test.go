package spool

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode"

	"golang.org/x/sys/unix"

	"github.com/tendhq/tend/tracker/durable"
)

func TestParseName(t *testing.T) {
	tests := []struct {
		in      string
		want    Name
		wantErr string
	}{
		{"a.start", Name{ID: "a", Verb: "start"}, ""},
		{"build-1.2_x.cancel", Name{ID: "build-1.2_x", Verb: "cancel"}, ""},
		{"a.b.start", Name{ID: "a.b", Verb: "start"}, ""},
		{"x.strat", Name{}, `unknown verb "strat" (did you mean "start"?)`},
		{"x.cancle", Name{}, `did you mean "cancel"?`},
		{"x.frobnicate", Name{}, `unknown verb "frobnicate": verbs are start, cancel`},
		{"noverb", Name{}, "no verb"},
		{".start", Name{}, "empty id"},
		{"-rf.start", Name{}, `starts with "-"`},
		{"a b.start", Name{}, `has " " at byte 1`},
		{"a\nb.start", Name{}, `has "\n" at byte 1`},
		{"\xff.start", Name{}, `has "\xff"`},
		{strings.Repeat("a", 65) + ".start", Name{}, "65 bytes long, the limit is 64"},
		{strings.Repeat("a", 64) + ".start", Name{ID: strings.Repeat("a", 64), Verb: "start"}, ""},
		{"a@t1.cancel", Name{ID: "a", Tag: "t1", Verb: "cancel"}, ""},
		{"a.b@x-9.label", Name{ID: "a.b", Tag: "x-9", Verb: "label"}, ""},
		{"a@t.start", Name{}, "a start request has no tag"},
		{"a@.cancel", Name{}, "tag: empty id"},
		{"a@b@c.cancel", Name{}, `tag: id "b@c" has "@"`},
		{"@t.cancel", Name{}, "empty id"},
		{"*.cancel", Name{}, "a selector request needs a tag: name it *@<tag>.cancel"},
		{"*@a b.signal", Name{}, "a selector request needs a tag: name it *@<tag>.signal"},
		{"*.start", Name{}, `id "*" has "*" at byte 0`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseName(tt.in)
			if tt.wantErr == "" {
				if err != nil || got != tt.want {
					t.Fatalf("ParseName(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("ParseName(%q) error = %v; want it to contain %q", tt.in, err, tt.wantErr)
			}
		})
	}
}

// TestValidIDNames: an ID's bad character is named whole, as the
// reader wrote it, not by its first byte.
func TestValidIDNames(t *testing.T) {
	tests := []struct{ id, want string }{
		{"café", `id "café" has "é" at byte 3`},
		{"a\u200bb", `id "a\u200bb" has "\u200b" at byte 1`},
		{"日本", `id "日本" has "日" at byte 0`},
		{"a\xc3", `id "a\xc3" has "\xc3" at byte 1`},
		{"a\xc3(", `id "a\xc3(" has "\xc3" at byte 1`},
		{"a\xffé", `id "a\xffé" has "\xff" at byte 1`},
		{"x y", `id "x y" has " " at byte 1`},
	}
	for _, tt := range tests {
		err := ValidID(tt.id)
		if err == nil || !strings.HasPrefix(err.Error(), tt.want+":") {
			t.Errorf("ValidID(%q) = %v, want %s: ...", tt.id, err, tt.want)
		}
	}
}

func TestIgnored(t *testing.T) {
	for _, name := range []string{
		".a.start.swp", ".a.start.swx", "4913", "5036", "5159", ".#a.start", "#a.start#", "#a", "a.start~",
		".a.start.1a2b3c.tmp", "a.start.tmp", "a.start___jb_tmp___", "a.start.kate-swp", ".hidden",
	} {
		if !Ignored(name) {
			t.Errorf("Ignored(%q) = false, want true", name)
		}
	}
	for _, name := range []string{"a.start", "a.cancel", "x.strat", "noverb", "tmp.start", "a.tmp.start", "4914", "5035", "04913", "+4913", "491"} {
		if Ignored(name) {
			t.Errorf("Ignored(%q) = true, want false", name)
		}
	}
}

func TestParseStart(t *testing.T) {
	tests := []struct {
		name, body string
		want       []string // argv
		wantErr    string
		incomplete bool
	}{
		{"shell text", "echo hi; exit 3\n", []string{"/bin/sh", "-c", "echo hi; exit 3"}, "", false},
		{"brace group is shell", "{ echo a; echo b; }", []string{"/bin/sh", "-c", "{ echo a; echo b; }"}, "", false},
		{"json string", `{"command": "make test"}`, []string{"/bin/sh", "-c", "make test"}, "", false},
		{"json argv", `{"command": ["make", "test"], "cwd": "/tmp"}`, []string{"make", "test"}, "", false},
		{"empty", "  \n", nil, "empty command", false},
		{"empty object", "{}", nil, `missing "command"`, false},
		{"cut off", `{"command":`, nil, "cut off", true},
		{"only brace", `{`, nil, "cut off", true},
		{"unknown field", `{"command": "x", "comand": "y"}`, nil, `unknown field "comand" (did you mean "command"?)`, false},
		{"unknown field, far from any", `{"command": "x", "zzzzzzzz": "y"}`, nil, `unknown field "zzzzzzzz"`, false},
		{"an env value not a string", `{"command": "x", "env": {"A": "1", "B": 2}}`, nil, `"env": "B": want string, not a JSON number`, false},
		{"a label value not a string", `{"command": "x", "labels": {"k": true}}`, nil, `"labels": "k": want string, not a JSON bool`, false},
		{"wrong type", `{"command": "x", "cwd": 5}`, nil, `"cwd": want string`, false},
		{"argv not strings", `{"command": [1, 2]}`, nil, "must be a string or an array of strings", false},
		{"empty argv", `{"command": []}`, nil, "array is empty", false},
		{"negative timeout", `{"command": "x", "timeout": "-5s"}`, nil, `"timeout": -5s is negative`, false},
		{"absurd timeout", `{"command": "x", "timeout": 1e12}`, nil, `"timeout": 1000000000000 seconds is longer than the limit of 8760h0m0s (31536000 seconds)`, false},
		{"bad duration", `{"command": "x", "timeout": "soon"}`, nil, `"timeout": "soon" is not a duration`, false},
		{"seconds timeout", `{"command": "x", "timeout": 1.5}`, []string{"/bin/sh", "-c", "x"}, "", false},
		{"huge grace", `{"command": "x", "grace": "48h"}`, nil, `"grace": 48h0m0s is longer than the limit`, false},
		{"bad env", `{"command": "x", "env": {"A=B": "c"}}`, nil, `"env": bad variable "A=B"`, false},
		{"label value with ESC", `{"command": "x", "labels": {"k": "\u001b[8m\u0000"}}`, []string{"/bin/sh", "-c", "x"}, "", false},
		{"NUL in an env value", `{"command": "x", "env": {"A": "b\u0000c"}}`, nil, `"env": variable "A": its value has a NUL byte`, false},
		{"bad session", `{"command": "x", "session": "../x"}`, nil, `"session"`, false},
		{"trailing data", `{"command": "x"} {}`, nil, "unexpected data after", false},
		{"garbage", `{"command" "x"}`, nil, "invalid JSON", false},
		{"nul in text", "echo \x00", nil, "NUL", false},
		{"byte order mark before json", "\ufeff{\"command\": [\"make\"]}", []string{"make"}, "", false},
		{"byte order mark before text", "\ufeffmake test", []string{"/bin/sh", "-c", "make test"}, "", false},
		{"windows line ends", "\ufeffcd src\r\nmake\r\n", []string{"/bin/sh", "-c", "cd src\nmake"}, "", false},
		{"only a byte order mark", "\ufeff", nil, "empty command", false},
		{"one byte order mark taken off", "\ufeff\ufeffmake", []string{"/bin/sh", "-c", "\ufeffmake"}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := ParseStart([]byte(tt.body))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want it to contain %q", err, tt.wantErr)
				}
				if errors.Is(err, ErrIncomplete) != tt.incomplete {
					t.Fatalf("incomplete = %v, want %v (%v)", !tt.incomplete, tt.incomplete, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := s.Args(); strings.Join(got, "\x00") != strings.Join(tt.want, "\x00") {
				t.Fatalf("Args = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestStartRoundTrip(t *testing.T) {
	g := Duration(3 * time.Second)
	in := Start{Argv: []string{"a", "b c"}, Cwd: "/x", Env: map[string]string{"K": "v"}, Session: "s1",
		Timeout: Duration(time.Minute), Grace: &g, Labels: map[string]string{"k": "v"}}
	b, err := in.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	out, err := ParseStart(b)
	if err != nil {
		t.Fatalf("ParseStart(%s): %v", b, err)
	}
	if out.Timeout != in.Timeout || *out.Grace != g || out.Cwd != "/x" || out.Env["K"] != "v" || out.Args()[1] != "b c" {
		t.Fatalf("round trip: %s gave %+v", b, out)
	}
}

// A new start request's label keys have no '=' and no control
// character; one taken before (read again to restart a service, to
// recover a claimed run) is read as it was taken.
func TestStartCheckNew(t *testing.T) {
	tests := []struct{ body, err string }{
		{`{"command": "x", "labels": {"k": "v", "été": "\u001b[8m\u0000"}}`, ""},
		{`{"command": "x", "labels": {"a=b": "c"}}`, `"labels": key "a=b" has "=" at byte 1: keys have no '=' and no control characters`},
		{`{"command": "x", "labels": {"\u001b[8mk": "c"}}`, `"labels": key "\x1b[8mk" has "\x1b" at byte 0`},
		{`{"command": "x", "labels": {"k\u0085": "c"}}`, `"labels": key "k\u0085" has "\u0085" at byte 1`},
		// What exec takes in one argument: 128 KiB, less the start gate's room.
		{`{"command": "` + strings.Repeat("x", MaxArg) + `"}`, ""},
		{`{"command": "` + strings.Repeat("x", MaxArg+1) + `"}`, "the command line is 130049 bytes"},
		{`{"command": ["echo", "` + strings.Repeat("x", MaxArg+1) + `"]}`, `"command": argument 1 is 130049 bytes`},
		{`{"command": "x", "env": {"BIG": "` + strings.Repeat("x", MaxArg) + `"}}`, `"env": BIG is 130052 bytes with its value`},
	}
	for _, tt := range tests {
		s, err := ParseStart([]byte(tt.body))
		if err != nil {
			t.Errorf("ParseStart(%s) = %v, want it read as taken before", tt.body, err)
			continue
		}
		err = s.CheckNew()
		if tt.err == "" && err != nil || tt.err != "" && (err == nil || err.Error() != tt.err && !strings.HasPrefix(err.Error(), tt.err+":")) {
			t.Errorf("CheckNew(%s) = %v, want %q", tt.body, err, tt.err)
		}
	}
}

func TestParseCancel(t *testing.T) {
	tests := []struct{ body, wantErr string }{
		{"", ""}, {"\n", ""}, {`{"grace": "2s"}`, ""}, {`{"session": "s"}`, ""},
		{"now please", "a cancel body is empty or a JSON object"},
		{`{"grace": -1}`, `"grace": -1s is negative`},
		{`{"force": true}`, `unknown field "force"`},
		{"\ufeff", ""}, {"\ufeff{\"grace\": \"2s\"}\r\n", ""},
	}
	for _, tt := range tests {
		_, err := ParseCancel([]byte(tt.body))
		if (tt.wantErr == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("ParseCancel(%q) = %v, want %q", tt.body, err, tt.wantErr)
		}
	}
}

func TestParseDelete(t *testing.T) {
	tests := []struct{ body, session, wantErr string }{
		{"", "", ""}, {" \n", "", ""}, {`{"session": "s-1"}`, "s-1", ""},
		{"please", "", "a delete body is empty or a JSON object"},
		{`{"session": "../x"}`, "", `"session"`},
		{`{"grace": "1s"}`, "", `unknown field "grace"`},
		{"\ufeff{\"session\": \"s-1\"}", "s-1", ""},
	}
	for _, tt := range tests {
		d, err := ParseDelete([]byte(tt.body))
		if (tt.wantErr == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tt.wantErr) || err == nil && d.Session != tt.session {
			t.Errorf("ParseDelete(%q) = %+v, %v; want session %q, error %q", tt.body, d, err, tt.session, tt.wantErr)
		}
	}
}

func TestParseLabel(t *testing.T) {
	tests := []struct {
		body, set, remove, err string // set: "k=v,k=v" in key order
	}{
		{"kind=test\nowner=me\n", "kind=test,owner=me", "", ""},
		{"\ufeffkind=test\r\ngone=\r\n", "kind=test", "gone", ""},
		{`{"labels": {"kind": "test", "gone": null}, "session": "s"}`, "kind=test", "gone", ""},
		{"\ufeff{\"labels\": {\"k\": \"v\"}}", "k=v", "", ""},
		{"just words", "", "", `line 1: want K=V`},
		{"\n\n", "", "", "no labels"},
		{`{"labels": {"k": 1}}`, "", "", "want string"},
		{`{"labels": {"k": "v"}, "if_rev": 0}`, "", "", `"if_rev": 0 is not a revision`},
		// A key has no '=' and no control character; a value is free text.
		{`{"labels": {"a=b": "v"}}`, "", "", `key "a=b" has "=" at byte 1: keys have no '=' and no control characters`},
		{`{"labels": {"k\u001b]0;x": "v"}}`, "", "", `key "k\x1b]0;x" has "\x1b" at byte 1`},
		{`{"labels": {"k\u0000": "v"}}`, "", "", `key "k\x00" has "\x00" at byte 1`},
		{`{"labels": {"k\u009b": "v"}}`, "", "", `key "k\u009b" has "\u009b" at byte 1`},
		{`{"labels": {"k\u007f": "v"}}`, "", "", `key "k\x7f" has "\x7f"`},
		{`{"labels": {"k\tx": "v"}}`, "", "", `key "k\tx" has "\t"`},
		{`{"labels": {"": "v"}}`, "", "", `a key is empty`},
		{"k\x00=v", "", "", `key "k\x00" has "\x00"`},
		{`{"labels": {"k": "v\u001b[2J\u0000\n"}}`, "k=v\x1b[2J\x00\n", "", ""},
		{`{"labels": {"k\u001b": null}}`, "", "k\x1b", ""},
		{"été=ok", "été=ok", "", ""},
	}
	for _, tt := range tests {
		l, err := ParseLabel([]byte(tt.body))
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParseLabel(%q) = %v, want %q", tt.body, err, tt.err)
			}
			continue
		}
		var set []string
		for _, k := range sortedKeys(l.Set) {
			set = append(set, k+"="+l.Set[k])
		}
		if err != nil || strings.Join(set, ",") != tt.set || strings.Join(l.Remove, ",") != tt.remove {
			t.Errorf("ParseLabel(%q) = set %q remove %q, %v; want %q, %q", tt.body, set, l.Remove, err, tt.set, tt.remove)
		}
	}
}

func TestParseNote(t *testing.T) {
	tests := []struct{ body, text, err string }{
		{"built on the second try\n", "built on the second try", ""},
		{"\ufeffline one\r\nline two\r\n", "line one\nline two", ""},
		{`{"text": "from json", "session": "s"}`, "from json", ""},
		{" \n", "", "an empty note"},
		{strings.Repeat("x", MaxNote+1), "", "at most 4096"},
		{"bad \xff", "", "UTF-8"},
	}
	for _, tt := range tests {
		n, err := ParseNote([]byte(tt.body))
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParseNote(%q) = %v, want %q", tt.body, err, tt.err)
			}
		} else if err != nil || n.Text != tt.text {
			t.Errorf("ParseNote(%q) = %q, %v; want %q", tt.body, n.Text, err, tt.text)
		}
	}
}

func newDir(t *testing.T) Dir {
	d := Dir{Root: filepath.Join(t.TempDir(), "root")}
	if err := d.Make(); err != nil {
		t.Fatal(err)
	}
	return d
}

func TestReadBusyUntilWriterCloses(t *testing.T) {
	d := newDir(t)
	w, err := os.Create(filepath.Join(d.Spool(), "a.start"))
	if err != nil {
		t.Fatal(err)
	}
	w.WriteString(`{"command":`)
	if _, err := d.Read("a.start"); !errors.Is(err, ErrBusy) {
		t.Fatalf("Read while open for writing: %v, want ErrBusy", err)
	}
	w.WriteString(`"true"}`)
	w.Close()
	f, err := d.Read("a.start")
	if err != nil || !f.Settled || string(f.Body) != `{"command":"true"}` || f.UID != os.Getuid() {
		t.Fatalf("Read after close = %+v, %v", f, err)
	}
}

func TestReadRefusesOddFiles(t *testing.T) {
	d := newDir(t)
	sp := d.Spool()
	os.Symlink("/etc/passwd", filepath.Join(sp, "link.start"))
	syscall.Mkfifo(filepath.Join(sp, "fifo.start"), 0o600)
	os.Mkdir(filepath.Join(sp, "dir.start"), 0o700)
	os.WriteFile(filepath.Join(sp, "big.start"), make([]byte, MaxBody+1), 0o600)
	for name, want := range map[string]string{
		"link.start": "a symbolic link", "fifo.start": "a FIFO", "dir.start": "a directory", "big.start": "larger than the limit",
	} {
		done := make(chan error, 1)
		go func() { _, err := d.Read(name); done <- err }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("Read(%s) = %v, want %q", name, err, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("Read(%s) blocked", name)
		}
	}
}

func TestClaimFollowsReplacement(t *testing.T) {
	d := newDir(t)
	p := filepath.Join(d.Spool(), "a.start")
	os.WriteFile(p, []byte("echo old"), 0o600)
	f, err := d.Read("a.start")
	if err != nil {
		t.Fatal(err)
	}
	// An editor replaces the file between the read and the claim.
	os.WriteFile(p+".tmp", []byte("echo new"), 0o600)
	os.Rename(p+".tmp", p)
	got, err := d.Claim(f, filepath.Join(d.Root, "claimed"))
	if err != nil || string(got.Body) != "echo new" {
		t.Fatalf("Claim = %q, %v; want the replacement's content", got.Body, err)
	}
}

func TestRejectKeepsEveryFile(t *testing.T) {
	d := newDir(t)
	for i := 0; i < 3; i++ {
		os.WriteFile(filepath.Join(d.Spool(), "x.strat"), []byte{byte('0' + i)}, 0o600)
		if _, err := d.Reject("x.strat", "unknown verb\n\"strat\""); err != nil {
			t.Fatal(err)
		}
	}
	for i, name := range []string{"x.strat", "x.strat.1", "x.strat.2"} {
		b, err := os.ReadFile(filepath.Join(d.Rejected(), name))
		if err != nil || b[0] != byte('0'+i) {
			t.Fatalf("rejected/%s = %q, %v", name, b, err)
		}
		e, _ := os.ReadFile(filepath.Join(d.Rejected(), name+".error"))
		if string(e) != "x.strat: unknown verb \"strat\"\n" {
			t.Fatalf("rejected/%s.error = %q", name, e)
		}
	}
}

// A rejected request is its owner's to read alone, whatever mode its
// writer gave it (group- and world-readable with umask 022): in a shared
// root rejected/ is open to the root's group. A directory too; a file
// with another name elsewhere (a hard link) and a link are left as they
// are.
func TestRejectedIsPrivate(t *testing.T) {
	d := newDir(t)
	spooled := func(name string) string { return filepath.Join(d.Spool(), name) }
	os.WriteFile(spooled("file.start"), []byte("{"), 0o644)
	os.Chmod(spooled("file.start"), os.ModeSetuid|0o755) // past any umask: setuid, all may read
	os.Mkdir(spooled("dir.start"), 0o755)
	os.WriteFile(spooled("linked.start"), []byte("{"), 0o644)
	elsewhere := filepath.Join(d.Root, "elsewhere")
	if err := os.Link(spooled("linked.start"), elsewhere); err != nil {
		t.Fatal(err)
	}
	os.Symlink("/etc/passwd", spooled("lnk.start"))
	for name, want := range map[string]os.FileMode{
		"file.start": 0o700, "dir.start": 0o700 | os.ModeDir, "linked.start": 0o644,
	} {
		dst, err := d.Reject(name, "bad")
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Lstat(dst)
		if err != nil || fi.Mode() != want {
			t.Errorf("rejected %s: mode %v, %v; want %v", name, fi.Mode(), err, want)
		}
	}
	if _, err := d.Reject("lnk.start", "bad"); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat("/etc/passwd"); err != nil || fi.Mode().Perm()&0o044 != 0o044 {
		t.Errorf("a link's target is made private: %v, %v", fi.Mode(), err)
	}
}

// A copy set aside (a queued run's bad version, left in the spool to
// mend) takes the next free name beside a moved request, with its
// reason, mode 0600, and leaves the request where it is.
func TestRejectCopyLeavesTheRequest(t *testing.T) {
	d := newDir(t)
	p := filepath.Join(d.Spool(), "q.start")
	os.WriteFile(p, []byte("first"), 0o644)
	if _, err := d.Reject("q.start", "bad"); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(p, []byte(`{"comand": "x"}`), 0o644)
	dst, err := d.RejectCopy("q.start", []byte(`{"comand": "x"}`), os.Geteuid(), "unknown field")
	if err != nil || dst != filepath.Join(d.Rejected(), "q.start.1") {
		t.Fatalf("RejectCopy = %q, %v; want rejected/q.start.1", dst, err)
	}
	var st unix.Stat_t
	if b, err := os.ReadFile(dst); err != nil || string(b) != `{"comand": "x"}` || unix.Stat(dst, &st) != nil || st.Mode&0o777 != 0o600 {
		t.Errorf("rejected/q.start.1 = %q, %v, mode %04o; want the copy, 0600", b, err, st.Mode&0o777)
	}
	if e, _ := os.ReadFile(dst + ".error"); string(e) != "q.start: unknown field\n" {
		t.Errorf("rejected/q.start.1.error = %q", e)
	}
	if b, err := os.ReadFile(p); err != nil || string(b) != `{"comand": "x"}` {
		t.Errorf("spool/q.start = %q, %v; want it left there", b, err)
	}
	if os.Geteuid() == 0 { // root's copy is marked a request, never taken for a reason
		f, err := os.Open(dst)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if !CarriesMark(int(f.Fd())) {
			t.Errorf("rejected/q.start.1, root's, carries no mark: fsck could take it for a reason")
		}
	}
}

// RemoveCopy removes a copy and then its reason; a file of another
// user's that took the name since (the copy expired) is left, as is a
// path outside rejected/.
func TestRemoveCopy(t *testing.T) {
	d := newDir(t)
	dst, err := d.RejectCopy("q.start", []byte("bad"), os.Geteuid(), "bad")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.RemoveCopy(dst, os.Geteuid()); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dst, dst + ".error"} {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s after RemoveCopy: %v; want it gone", p, err)
		}
	}
	if err := d.RemoveCopy(dst, os.Geteuid()); err != nil {
		t.Errorf("RemoveCopy of a copy gone: %v", err)
	}
	if err := d.RemoveCopy(filepath.Join(d.Spool(), "q.start"), os.Geteuid()); err == nil {
		t.Errorf("RemoveCopy outside rejected/: no error")
	}
	if os.Geteuid() != 0 {
		return
	}
	other, err := d.RejectCopy("q.start", []byte("bad"), 4242, "bad")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.RemoveCopy(other, os.Geteuid()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(other); err != nil {
		t.Errorf("another user's file in rejected/ under the copy's name: %v; want it left", err)
	}
}

// A name as long as a file name may be cannot carry ".error": the
// rejected copy is shortened, and its reason still names it whole.
func TestRejectShortensLongNames(t *testing.T) {
	d := newDir(t)
	long := strings.Repeat("0", nameMax-len(".start")) + ".start"
	for i := 0; i < 2; i++ {
		os.WriteFile(filepath.Join(d.Spool(), long), []byte("true"), 0o600)
		dst, err := d.Reject(long, "bad id")
		if err != nil {
			t.Fatal(err)
		}
		if len(filepath.Base(dst+".error")) > nameMax-durable.TempDigits {
			t.Fatalf("rejected as %q: too long to write its .error beside it", filepath.Base(dst))
		}
		e, err := os.ReadFile(dst + ".error")
		if string(e) != long+": bad id\n" {
			t.Fatalf("%s.error = %q, %v", dst, e, err)
		}
	}
	if ents, _ := os.ReadDir(d.Rejected()); len(ents) != 4 {
		t.Fatalf("rejected/ holds %d entries, want 2 requests and their reasons", len(ents))
	}
}

// A reject that fails leaves the request where it was, and no reason
// without a request behind it.
func TestRejectFailsWhole(t *testing.T) {
	t.Run("reason cannot be written", func(t *testing.T) {
		d := newDir(t)
		os.WriteFile(filepath.Join(d.Spool(), "x.start"), []byte("true"), 0o600)
		os.Remove(d.Rejected())
		os.WriteFile(d.Rejected(), nil, 0o600) // not a directory
		if _, err := d.Reject("x.start", "bad"); err == nil {
			t.Fatal("Reject succeeded")
		}
		if _, err := os.Lstat(filepath.Join(d.Spool(), "x.start")); err != nil {
			t.Fatalf("the request left the spool: %v", err)
		}
	})
	t.Run("request cannot be moved", func(t *testing.T) {
		d := newDir(t)
		_, err := d.Reject("x.start", "bad") // removed by its writer meanwhile
		if !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("Reject = %v, want ErrNotExist", err)
		}
		if ents, _ := os.ReadDir(d.Rejected()); len(ents) > 0 {
			t.Fatalf("rejected/ holds %s without its request", ents[0].Name())
		}
	})
}

// rejected/ and outcomes/ removed by an operator are made again by the
// next reject and answer.
func TestRejectAndAnswerAfterTheirDirsAreRemoved(t *testing.T) {
	d := newDir(t)
	os.RemoveAll(d.Rejected())
	os.RemoveAll(d.Outcomes())
	os.WriteFile(filepath.Join(d.Spool(), "x.start"), []byte("7"), 0o600)
	if _, err := d.Reject("x.start", "bad"); err != nil {
		t.Fatalf("Reject: %v", err)
	}
	if _, err := os.Stat(filepath.Join(d.Rejected(), "x.start")); err != nil {
		t.Fatal(err)
	}
	n := Name{ID: "x", Verb: VerbStart}
	if err := d.WriteOutcome(n, Rejected, "bad"); err != nil {
		t.Fatalf("WriteOutcome: %v", err)
	}
	if o, _, err := d.ReadOutcome(n); o != Rejected || err != nil {
		t.Fatalf("ReadOutcome = %q, %v", o, err)
	}
}

func TestSubmitAndOutcome(t *testing.T) {
	d := newDir(t)
	n := Name{ID: "a", Verb: VerbStart}
	if err := d.Submit(n, []byte("true"), false); err != nil {
		t.Fatal(err)
	}
	if err := d.Submit(n, []byte("true"), false); err == nil || !strings.Contains(err.Error(), "already waiting") {
		t.Fatalf("second Submit = %v, want already waiting", err)
	}
	ents, _ := os.ReadDir(d.Spool())
	if len(ents) != 1 {
		t.Fatalf("spool holds %d entries, want 1 (no temp file left)", len(ents))
	}
	if err := d.WriteOutcome(n, Rejected, "run a already\nexists"); err != nil {
		t.Fatal(err)
	}
	o, detail, err := d.ReadOutcome(n)
	if o != Rejected || detail != "run a already exists" || err != nil {
		t.Fatalf("ReadOutcome = %q, %q, %v", o, detail, err)
	}
}

// TestReadOutcomeFileNamesTheAnswerRead: each answer to a name is a new
// file, and the inode ReadOutcomeFile returns is of the one it read, so
// that a client told the next one apart from it (another's accepted,
// then its own rejected) is never told its own is the one it read.
func TestReadOutcomeFileNamesTheAnswerRead(t *testing.T) {
	d := newDir(t)
	n := Name{ID: "r", Verb: VerbStart}
	if err := d.WriteOutcome(n, Accepted, ""); err != nil {
		t.Fatal(err)
	}
	o1, _, ino1, err := d.ReadOutcomeFile(n)
	if err != nil || o1 != Accepted {
		t.Fatalf("ReadOutcomeFile = %q, %v", o1, err)
	}
	if err := d.WriteOutcome(n, Rejected, "run r already exists"); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(d.OutcomePath(n), &st); err != nil {
		t.Fatal(err)
	}
	if st.Ino == ino1 {
		t.Fatalf("the second answer has the first's inode %d: a client could not tell them apart", ino1)
	}
	o2, _, ino2, err := d.ReadOutcomeFile(n)
	if err != nil || o2 != Rejected || ino2 != st.Ino {
		t.Fatalf("ReadOutcomeFile = %q, ino %d, %v; want rejected, ino %d", o2, ino2, err, st.Ino)
	}
}

func TestParseServiceFields(t *testing.T) {
	tests := []struct {
		body, wantErr string
		check         func(Start) bool
	}{
		{`{"command": "x", "restart": "always"}`, "", func(s Start) bool {
			return s.Restart.Policy == RestartAlways && s.Restart.Limit == 5 && s.Restart.Delay.D() == time.Second
		}},
		{`{"command": "x", "restart": "never"}`, "", func(s Start) bool { return s.Restart == nil }},
		{`{"command": "x", "restart": {"policy": "on-failure", "limit": 2, "window": "10s", "delay": "100ms", "max_delay": "1s"}}`, "", func(s Start) bool {
			return s.Restart.Limit == 2 && s.Restart.MaxDelay.D() == time.Second
		}},
		{`{"command": "x", "restart": "sometimes"}`, `policy "sometimes"`, nil},
		{`{"command": "x", "restart": {"policy": "always", "delay": "2s", "max_delay": "1s"}}`, "delay <= max_delay", nil},
		{`{"command": "x", "health": {"tcp": "127.0.0.1:80"}}`, "", func(s Start) bool {
			return s.Health.Retries == 3 && s.Health.StartPeriod.D() == 30*time.Second
		}},
		{`{"command": "x", "health": {"tcp": "nohost"}}`, `"tcp"`, nil},
		{`{"command": "x", "health": {"http": "ftp://x/"}}`, "not an http(s) URL", nil},
		{`{"command": "x", "health": {"tcp": "a:1", "exec": "true"}}`, "exactly one", nil},
		{`{"command": "x", "health": {}}`, "exactly one", nil},
		{`{"command": "x", "health": {"tcp": "a:1", "interval": 1e-9}}`, "want interval >= 100ms", nil},
		{`{"command": "x", "health": {"tcp": "a:1", "interval": "99ms"}}`, "want interval >= 100ms", nil},
		{`{"command": "x", "health": {"tcp": "a:1", "interval": "100ms"}}`, "", func(s Start) bool { return s.Health.Interval.D() == 100*time.Millisecond }},
		{`{"command": "x", "limits": {"nofile": 10, "cpu": "2s"}}`, "", func(s Start) bool {
			l := s.Limits.List()
			return len(l) == 2 && l[0].Resource == unix.RLIMIT_NOFILE && l[0].Cur == 10 && l[0].Max == 10 &&
				l[1].Name == "cpu" && l[1].Cur == 2 && l[1].Max == 3
		}},
		{`{"command": "x", "limits": {"nofile": -1}}`, "negative", nil},
		{`{"command": "x", "limits": {"cpu": "10ms"}}`, "under one second", nil},
		{`{"command": "x", "limits": {"memory": 1}}`, `unknown field "memory"`, nil},
	}
	for _, tt := range tests {
		s, err := ParseStart([]byte(tt.body))
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseStart(%s) = %v, want %q", tt.body, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !tt.check(s) {
			t.Errorf("ParseStart(%s) = %+v, %v", tt.body, s, err)
			continue
		}
		// What the CLI marshals parses back the same.
		b, _ := s.MarshalJSON()
		if back, err := ParseStart(b); err != nil || !tt.check(back) {
			t.Errorf("round trip of %s: %s: %v", tt.body, b, err)
		}
	}
}

func TestParseSignal(t *testing.T) {
	tests := []struct {
		body string
		want syscall.Signal
		err  string
	}{
		{"HUP", syscall.SIGHUP, ""}, {"sigusr1\n", syscall.SIGUSR1, ""}, {"15", syscall.SIGTERM, ""},
		{`{"signal": "INT", "session": "s"}`, syscall.SIGINT, ""},
		{"\ufeffHUP\r\n", syscall.SIGHUP, ""}, {"\ufeff{\"signal\": \"INT\"}", syscall.SIGINT, ""},
		{"", 0, "no signal"}, {"NOPE", 0, `unknown signal "NOPE"`}, {"99", 0, "unknown signal"},
		{"SIGTERM", syscall.SIGTERM, ""}, {"term", syscall.SIGTERM, ""}, {"9", syscall.SIGKILL, ""},
		{"64", 64, ""}, {"1", syscall.SIGHUP, ""}, {`{"signal": "15"}`, syscall.SIGTERM, ""},
		// One rule, whoever sends it: a name or a number, nothing else.
		{"-9", 0, `unknown signal "-9": want a name such as TERM or SIGTERM, or a number from 1 to 64 such as 15, without a sign`},
		{"+9", 0, `unknown signal "+9": want a name`}, {`{"signal": "+9"}`, 0, `unknown signal "+9"`},
		{"09", 0, `unknown signal "09"`}, {"0", 0, `unknown signal "0"`}, {"65", 0, `unknown signal "65"`},
		{"-KILL", 0, `unknown signal "-KILL"`}, {"SIG", 0, `unknown signal "SIG"`},
		{"SIGSIGTERM", 0, `unknown signal "SIGSIGTERM"`},
		{"ſıgterm", 0, `unknown signal "ſıgterm"`}, {"ınt", 0, `unknown signal "ınt"`},
		{"TERM\x00", 0, `unknown signal "TERM\x00"`}, {`{"signal": " 9"}`, 0, `unknown signal " 9"`},
		{"99999999999999999999", 0, `unknown signal "99999999999999999999"`},
		// A stop or a continue the watcher would not know of: pause and
		// resume do it, recorded.
		{"STOP", 0, "SIGSTOP is not sent as a signal: it would stop the run while tend records it running, its timeout counting; pause the run instead"},
		{"19", 0, "SIGSTOP is not sent as a signal"}, {"sigtstp", 0, "SIGTSTP is not sent as a signal"},
		{"TTIN", 0, "SIGTTIN is not sent"}, {`{"signal": "TTOU"}`, 0, "SIGTTOU is not sent"},
		{"CONT", 0, "SIGCONT is not sent as a signal: a paused run would go on while tend records it paused, its timeout suspended; resume the run instead"},
		{"18", 0, "SIGCONT is not sent"},
	}
	for _, tt := range tests {
		s, err := ParseSignal([]byte(tt.body))
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParseSignal(%q) = %v, want %q", tt.body, err, tt.err)
			}
		} else if err != nil || s.Signal != tt.want {
			t.Errorf("ParseSignal(%q) = %v, %v; want %v", tt.body, s.Signal, err, tt.want)
		}
	}
}

// TestStartSchemaMatchesParser keeps docs/schema/start.schema.json in step
// with the parser: the same top-level fields, and the nested objects' too.
func TestStartSchemaMatchesParser(t *testing.T) {
	b, err := os.ReadFile("../docs/schema/start.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties map[string]struct {
			Properties map[string]any `json:"properties"`
			OneOf      []struct {
				Properties map[string]any `json:"properties"`
			} `json:"oneOf"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatalf("the schema is not JSON: %v", err)
	}
	fields := func(v any) []string {
		var out []string
		typ := reflect.TypeOf(v)
		for i := range typ.NumField() {
			if name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
				out = append(out, name)
			}
		}
		slices.Sort(out)
		return out
	}
	keys := func(m map[string]any) []string { return slices.Sorted(maps.Keys(m)) }
	top := slices.Sorted(maps.Keys(schema.Properties))
	if want := fields(startJSON{}); !slices.Equal(top, want) {
		t.Errorf("schema fields %v, parser fields %v", top, want)
	}
	if got, want := keys(schema.Properties["health"].Properties), fields(Health{}); !slices.Equal(got, want) {
		t.Errorf("schema health fields %v, parser %v", got, want)
	}
	if got, want := keys(schema.Properties["limits"].Properties), fields(Rlimits{}); !slices.Equal(got, want) {
		t.Errorf("schema limits fields %v, parser %v", got, want)
	}
	if got, want := keys(schema.Properties["restart"].OneOf[1].Properties), fields(Restart{}); !slices.Equal(got, want) {
		t.Errorf("schema restart fields %v, parser %v", got, want)
	}
}

// Keep syncs a queued request only if it is still the file read: one
// replaced, removed, grown past MaxBody or turned into a link is left
// alone (an edit, examined as one), and none is an error but a link's.
func TestKeep(t *testing.T) {
	tests := []struct {
		name     string
		change   func(t *testing.T, path string)
		wantKept bool
		wantErr  bool
	}{
		{"unchanged", func(*testing.T, string) {}, true, false},
		{"removed", func(t *testing.T, path string) { os.Remove(path) }, false, false},
		{"replaced", func(t *testing.T, path string) {
			os.WriteFile(path+".new", []byte("echo other"), 0o644)
			os.Rename(path+".new", path)
		}, false, false},
		{"grown", func(t *testing.T, path string) { os.Truncate(path, MaxBody+1) }, false, false},
		{"a link", func(t *testing.T, path string) {
			os.Remove(path)
			os.Symlink("/etc/passwd", path)
		}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDir(t)
			path := filepath.Join(d.Spool(), "q.start")
			if err := os.WriteFile(path, []byte("echo hi"), 0o644); err != nil {
				t.Fatal(err)
			}
			f, err := d.Read("q.start")
			if err != nil {
				t.Fatal(err)
			}
			tt.change(t, path)
			kept, err := d.Keep(f)
			if kept != tt.wantKept || (err != nil) != tt.wantErr {
				t.Fatalf("Keep: %v, %v; want kept %v, an error %v", kept, err, tt.wantKept, tt.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), "q.start") {
				t.Errorf("the error %q does not name the request", err)
			}
		})
	}
}

// marshalV1 is how Start.MarshalJSON wrote a request before it wrote one
// by hand: encoding/json's bytes for startJSON, which it must keep.
func marshalV1(s Start) []byte {
	j := startJSON{Cwd: s.Cwd, Env: s.Env, Session: s.Session, Labels: s.Labels}
	if s.Argv != nil {
		j.Command, _ = json.Marshal(s.Argv)
	} else {
		j.Command, _ = json.Marshal(s.Shell)
	}
	if s.Timeout != 0 {
		j.Timeout, _ = json.Marshal(time.Duration(s.Timeout).String())
	}
	if s.Grace != nil {
		j.Grace, _ = json.Marshal(time.Duration(*s.Grace).String())
	}
	j.ReadyFile, j.OutputLimit = s.ReadyFile, s.OutputLimit
	if s.After != nil {
		names := make([]string, len(s.After))
		for i, d := range s.After {
			names[i] = d.String()
		}
		j.After, _ = json.Marshal(names)
	}
	if s.NotBefore != nil {
		j.NotBefore, _ = s.NotBefore.MarshalJSON()
	}
	if s.Local {
		j.Slurm = json.RawMessage("false")
	}
	for _, f := range []struct {
		v   any
		dst *json.RawMessage
	}{{s.Restart, &j.Restart}, {s.Health, &j.Health}, {s.Limits, &j.Limits}, {s.Slurm, &j.Slurm}} {
		if b, _ := json.Marshal(f.v); string(b) != "null" {
			*f.dst = b
		}
	}
	b, _ := json.Marshal(j)
	return b
}

func TestStartMarshalIsV1s(t *testing.T) {
	for _, s := range startCorpus() {
		got, err := s.MarshalJSON()
		if s.checkUTF8() != nil {
			// encoding/json would write U+FFFD in their place.
			if err == nil || !strings.Contains(err.Error(), "not valid UTF-8") {
				t.Fatalf("%+v: MarshalJSON = %s, %v; want an error", s, got, err)
			}
			continue
		}
		if want := marshalV1(s); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%+v:\n got %s (%v)\nwant %s", s, got, err, want)
		}
	}
}

// startCorpus returns requests with every field, odd strings, and 2,000
// random ones.
func startCorpus() []Start {
	g, zero, n := Duration(3*time.Second), Duration(0), int64(64)
	odd := []string{"", "plain", `q"uote`, `back\slash`, "<tag>&amp;", "tab\there\nnew\r\b\f\x01\x1f\x7f",
		"naïve ☃", "\xff\xfe bad utf-8", "\u2028\u2029", "emoji 🙂", "a=b;c:d/e?f#g%h"}
	tests := []Start{
		{Shell: "true"},
		{Shell: ""},
		{Argv: []string{}},
		{Argv: odd},
		{Shell: "make test", Cwd: "/x", Env: map[string]string{"K": "v", "A": "1", "Z": ""}, Session: "s1",
			Timeout: Duration(time.Minute), Grace: &g, Labels: map[string]string{"k": "v"}},
		{Shell: "x", Grace: &zero, Env: map[string]string{}, Labels: map[string]string{}},
		{Shell: "x", Restart: &DefaultRestart, Health: &Health{TCP: "a:1", Retries: 2}, ReadyFile: true,
			Limits: &Rlimits{NoFile: &n, CPU: &g}, OutputLimit: 1 << 20},
		{Shell: "x", After: []Dep{{ID: "a"}, {ID: "b", When: Ready}}, NotBefore: &NotBefore{In: time.Hour}},
		{Shell: "x", After: []Dep{}, NotBefore: &NotBefore{At: time.Date(2026, 11, 27, 1, 2, 3, 4, time.UTC)}},
		{Shell: "x", Local: true},
		{Shell: "x", Slurm: &Slurm{Partition: "p", Args: []string{"--x=<y>"}}},
		{Shell: "x", Slurm: &Slurm{}, Local: true},
	}
	for _, k := range odd {
		tests = append(tests, Start{Shell: k, Cwd: k, Session: k, Env: map[string]string{k: k, k + "2": "v"}, Labels: map[string]string{k: k}})
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		b := make([]byte, rnd.IntN(12))
		for i := range b {
			b[i] = byte(rnd.IntN(256))
			if rnd.IntN(2) == 0 {
				b[i] = byte(0x20 + rnd.IntN(0x60))
			}
		}
		tests = append(tests, Start{Argv: []string{string(b)}, Env: map[string]string{string(b): string(b)}})
	}
	return tests
}

func TestStartMarshalRefusesNotUTF8(t *testing.T) {
	for _, tt := range []struct {
		s    Start
		want string
	}{
		{Start{Shell: "caf\xe9"}, `the command "caf\xe9" is not valid UTF-8`},
		{Start{Argv: []string{"cat", "caf\xe9.txt"}}, `argument 2 "caf\xe9.txt" is not valid UTF-8`},
		{Start{Shell: "x", Cwd: "/tmp/\xff"}, `"cwd" "/tmp/\xff" is not valid`},
		{Start{Shell: "x", Env: map[string]string{"A\xff": "1"}}, `the environment variable "A\xff" is not valid`},
		{Start{Shell: "x", Env: map[string]string{"A": "\xfe"}}, `the environment variable A's value "\xfe" is not valid`},
		{Start{Shell: "x", Labels: map[string]string{"k": "\xfe"}}, `the label k's value`},
		{Start{Shell: "x", Health: &Health{Exec: "test -e \xff"}}, `the health check's "exec"`},
		{Start{Shell: "naïve ☃ \ufffd"}, ""},
	} {
		_, err := tt.s.MarshalJSON()
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%+v: MarshalJSON error %v, want %q", tt.s, err, tt.want)
		}
	}
	// And a JSON body with such bytes is rejected, not read with U+FFFD.
	if _, err := ParseStart([]byte("{\"command\": [\"cat\", \"caf\xe9.txt\"]}")); err == nil || !strings.Contains(err.Error(), "not valid UTF-8 (at byte 24)") {
		t.Errorf("ParseStart of a body that is not UTF-8: %v", err)
	}
}

// A request its owner mounted another file system over (a FUSE mount,
// whose fsync it answers) is not synced as the spool's: a failure there
// is not the disk's.
func TestKeepOtherFileSystem(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a bind mount needs root")
	}
	d := newDir(t)
	path := filepath.Join(d.Spool(), "q.start")
	if err := os.WriteFile(path, []byte("echo hi"), 0o644); err != nil {
		t.Fatal(err)
	}
	other, err := os.CreateTemp("/dev/shm", "tend-keep-")
	if err != nil {
		t.Skip("no /dev/shm:", err)
	}
	other.WriteString("echo over")
	other.Close()
	defer os.Remove(other.Name())
	if err := unix.Mount(other.Name(), path, "", unix.MS_BIND, ""); err != nil {
		t.Skip("bind mount:", err)
	}
	defer unix.Unmount(path, unix.MNT_DETACH)
	f, err := d.Read("q.start")
	if err != nil {
		t.Fatal(err)
	}
	if kept, err := d.Keep(f); kept || err != nil {
		t.Errorf("Keep of a file mounted over the request: %v, %v; want false, nil", kept, err)
	}
}

// TestOneLine: a reason or a detail is one line of text, whatever the
// request held: no control character reaches a terminal that cats it.
func TestOneLine(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain reason", "plain reason"},
		{"two\nlines\r\n\tand tabs", "two lines and tabs"},
		{"\x1b]0;PWNED\x07\x1b[2K\rFAKE LINE\n", `\x1b]0;PWNED\x07\x1b[2K FAKE LINE`},
		{"del\x7f and c1\u0085next \u009b", `del\x7f and c1 next \x9b`},
		{"not utf-8 \xff", "not utf-8 ?"},
	}
	for _, tt := range tests {
		if got := oneLine(tt.in); got != tt.want {
			t.Errorf("oneLine(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	_, err := ParseStart([]byte(`{"command": "x", "health": {"tcp": "\u001b]0;T\u0007"}}`))
	if err == nil || strings.ContainsFunc(err.Error(), unicode.IsControl) {
		t.Errorf("a bad health.tcp address: %q, want it quoted", err)
	}
}

// A body saved as UTF-16 (PowerShell's >, Notepad's "Unicode") is
// refused by every verb's parser with that reason, not a NUL byte's or an
// unknown signal's; little- and big-endian alike.
func TestParseRefusesUTF16(t *testing.T) {
	utf16 := func(bom []byte, text string, le bool) []byte {
		b := append([]byte{}, bom...)
		for _, c := range []byte(text) {
			if le {
				b = append(b, c, 0)
			} else {
				b = append(b, 0, c)
			}
		}
		return b
	}
	parsers := map[string]func([]byte) error{
		"start":  func(b []byte) error { _, err := ParseStart(b); return err },
		"cancel": func(b []byte) error { _, err := ParseCancel(b); return err },
		"delete": func(b []byte) error { _, err := ParseDelete(b); return err },
		"label":  func(b []byte) error { _, err := ParseLabel(b); return err },
		"note":   func(b []byte) error { _, err := ParseNote(b); return err },
		"signal": func(b []byte) error { _, err := ParseSignal(b); return err },
		"select": func(b []byte) error { _, err := ParseSelect(VerbCancel, b); return err },
	}
	bodies := map[string]string{
		"start": "echo hi\r\n", "cancel": "{}", "delete": "{}", "label": "k=v\r\n",
		"note": "hello\r\n", "signal": "HUP\r\n", "select": `{"all": true}`,
	}
	for verb, parse := range parsers {
		for _, enc := range []struct {
			name string
			bom  []byte
			le   bool
		}{{"le", []byte{0xff, 0xfe}, true}, {"be", []byte{0xfe, 0xff}, false}} {
			t.Run(verb+"/"+enc.name, func(t *testing.T) {
				err := parse(utf16(enc.bom, bodies[verb], enc.le))
				if err == nil || !strings.Contains(err.Error(), "UTF-16") {
					t.Errorf("%s: %v, want an error saying it is UTF-16", verb, err)
				}
				if err := parse([]byte(bodies[verb])); err != nil {
					t.Errorf("%s: the same body in UTF-8: %v", verb, err)
				}
			})
		}
	}
}

// A hard link a member made to a request of root's while it waited in
// the spool (where fs.protected_hardlinks=0 lets them link what is not
// theirs) is, once the request's last name of its own is gone, no
// request of root's: a single-named marked file of root's moved back
// into the spool would run root's command as root again, whenever the
// member chose. The mark is spent there (its run's directory removed,
// removed as done, rejected, replaced by root's own newer version), and
// never at the claim, which a power loss may undo after the mark's
// change is durable (the regression of 42d7c85: an accepted request
// refused as not root's).
func TestLinkedRootRequestSpent(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the mark is root's to set and read")
	}
	d := newDir(t)
	elsewhere := t.TempDir()
	probe := filepath.Join(elsewhere, "probe")
	os.WriteFile(probe, nil, 0o600)
	if unix.Setxattr(probe, markAttr, []byte("request"), 0) != nil {
		t.Skip("no trusted attributes on this file system")
	}
	n := Name{ID: "r", Verb: VerbCancel}
	spooled := filepath.Join(d.Spool(), n.String())
	link := filepath.Join(elsewhere, "link")
	submit := func() File {
		t.Helper()
		os.Remove(link)
		if err := d.Submit(n, []byte(`{"command": "id"}`), true); err != nil {
			t.Fatal(err)
		}
		f, err := d.Read(n.String())
		if err != nil || !f.Marked {
			t.Fatalf("Read of root's request: marked %v, %v", f.Marked, err)
		}
		// The member's link, made after the watcher read it.
		if err := os.Link(spooled, link); err != nil {
			t.Fatal(err)
		}
		return f
	}
	mark := func(path string) string {
		buf := make([]byte, 16)
		n, err := unix.Getxattr(path, markAttr, buf)
		if err != nil {
			return err.Error()
		}
		return string(buf[:n])
	}
	replayed := func(how string) {
		t.Helper()
		back := filepath.Join(d.Spool(), "evil.start")
		if err := os.Rename(link, back); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(back)
		f, err := d.Read("evil.start")
		if err != nil {
			t.Fatal(err)
		}
		if f.Links != 1 || f.Marked {
			t.Errorf("%s: the member's link back in the spool has %d links, marked %v: want it unmarked", how, f.Links, f.Marked)
		}
	}

	// Claimed into its run's directory: not spent (a power loss may
	// bring it back into the spool), and the link makes two names.
	f := submit()
	run := t.TempDir()
	dst := filepath.Join(run, "request")
	if _, err := d.Claim(f, dst); err != nil {
		t.Fatal(err)
	}
	if got := mark(dst); got != "request" {
		t.Errorf("claimed: mark %q, want request: a power loss may bring it back into the spool", got)
	}
	// Its run deleted: spent as its directory is removed.
	dir, err := unix.Open(run, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	SpendAt(dir, "request")
	unix.Close(dir)
	os.Remove(dst)
	replayed("its run directory removed")

	submit()
	if err := RemoveRequest(spooled); err != nil {
		t.Fatal(err)
	}
	replayed("removed as done")

	// A claim in claims/ removed once carried out; its name in the
	// spool, as a power loss may bring it back, is its own.
	submit()
	claim := filepath.Join(t.TempDir(), "0:"+n.String())
	os.Link(spooled, claim)
	os.Remove(link)
	if err := RemoveRequest(claim, spooled); err != nil {
		t.Fatal(err)
	}
	if got := mark(spooled); got != "request" {
		t.Errorf("a claim removed, the request's own name in the spool left: mark %q, want request", got)
	}
	os.Remove(spooled)

	// Removed without another name: the mark is left as it is.
	submit()
	os.Remove(link)
	fd, err := unix.Open(spooled, unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	RemoveRequest(spooled)
	if !marked(fd) {
		t.Errorf("removed with no other name: spent")
	}
	unix.Close(fd)

	submit()
	if _, err := d.Reject(n.String(), "bad"); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(d.Rejected())
	replayed("rejected")

	submit()
	if err := d.Submit(n, []byte(`{"command": "true"}`), true); err != nil {
		t.Fatal(err)
	}
	if f, err := d.Read(n.String()); err != nil || !f.Marked || string(f.Body) != `{"command": "true"}` {
		t.Errorf("the newer version: %q, marked %v, %v; want it marked", f.Body, f.Marked, err)
	}
	if ents, _ := os.ReadDir(d.Spool()); len(ents) != 1 {
		t.Errorf("after a replace the spool holds %d files, want 1", len(ents))
	}
	replayed("replaced")
	os.Remove(spooled)
}
