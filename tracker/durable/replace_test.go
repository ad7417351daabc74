package durable

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestReplace(t *testing.T) {
	for _, replace := range []struct {
		name string
		f    func(string, []byte) error
	}{{"Replace", func(p string, b []byte) error { return Replace(p, b, Perm{}, testDurable) }}, {"ReplaceUnsynced", func(p string, b []byte) error { return ReplaceUnsynced(p, b, Perm{}) }}} {
		t.Run(replace.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "f")
			if err := replace.f(path, []byte("one\n")); err != nil {
				t.Fatal(err)
			}
			if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
				t.Fatalf("new file: %v, %v; want mode 0600", fi.Mode(), err)
			}
			os.Chmod(path, 0o644) // an operator opened it to others: kept
			if err := replace.f(path, []byte("two\n")); err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(path)
			fi, _ := os.Stat(path)
			if string(b) != "two\n" || fi.Mode().Perm() != 0o644 {
				t.Fatalf("replaced: %q, mode %v; want two, 0644", b, fi.Mode())
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 1 {
				t.Fatalf("left beside it: %v", ents)
			}
		})
	}
}

func TestReplaceFailsNamingTheFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "missing", "f")
	err := Replace(path, []byte("x"), Perm{}, testDurable)
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("Replace into a missing directory: %v", err)
	}
	// A rename that fails (a directory in the way) leaves no temporary file.
	os.Mkdir(filepath.Join(dir, "d"), 0o755)
	os.WriteFile(filepath.Join(dir, "d", "x"), nil, 0o644)
	if err := Replace(filepath.Join(dir, "d"), []byte("x"), Perm{}, testDurable); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "d")) {
		t.Fatalf("Replace over a directory: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("left behind: %v", ents)
	}
}

// ReadUpTo reads a request whole whatever size fstat said (a file that
// grew since reads on), and no more than its limit.
func TestReadUpTo(t *testing.T) {
	body := strings.Repeat("abcdefgh", 1000)
	tests := []struct {
		name        string
		size, limit int64
		want        int
	}{
		{"size as fstat said", 8000, 9000, 8000},
		{"grew since fstat", 10, 9000, 8000},
		{"empty by fstat", 0, 9000, 8000},
		{"shrank since fstat", 20000, 9000, 8000},
		{"over the limit", 8000, 4001, 4001},
		{"at the limit", 8000, 8000, 8000},
	}
	path := filepath.Join(t.TempDir(), "r")
	os.WriteFile(path, []byte(body), 0o600)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			got, err := ReadUpTo(int(f.Fd()), tt.size, tt.limit)
			if err != nil || string(got) != body[:tt.want] {
				t.Fatalf("read %d bytes, %v; want %d", len(got), err, tt.want)
			}
		})
	}
}

// ReplaceAll replaces what exists and makes what does not, in several
// directories, keeps a replaced file's mode, names the file it could not
// write, and leaves no temporary file; with RenameNew as without.
func TestReplaceAll(t *testing.T) {
	renameNew := Durable{File: FlushRecord, Dir: FlushRecordDir, RenameNew: true}
	for _, tc := range []struct {
		d     Durable
		early []bool
	}{
		{testDurable, nil},
		{renameNew, nil},
		{renameNew, []bool{true, true, true, false}}, // b/f replaced early
	} {
		d := tc.d
		dir := t.TempDir()
		for _, d := range []string{"a", "b"} {
			os.Mkdir(filepath.Join(dir, d), 0o755)
		}
		os.WriteFile(filepath.Join(dir, "b", "f"), []byte("old\n"), 0o644)
		paths := []string{
			filepath.Join(dir, "a", "f"),
			filepath.Join(dir, "b", "f"),
			filepath.Join(dir, "missing", "f"),
			filepath.Join(dir, "a", "g"),
		}
		errs := ReplaceAll(paths, [][]byte{[]byte("1\n"), []byte("2\n"), []byte("3\n"), []byte("4\n")}, nil, tc.early, d)
		for i, want := range []string{"1\n", "2\n", "", "4\n"} {
			b, err := os.ReadFile(paths[i])
			if want == "" {
				if errs[i] == nil || !strings.Contains(errs[i].Error(), paths[i]) || err == nil {
					t.Errorf("%+v: %s: error %v, read %v; want an error naming it", d, paths[i], errs[i], err)
				}
				continue
			}
			if errs[i] != nil || string(b) != want {
				t.Errorf("%+v: %s: %q, %v; want %q", d, paths[i], b, errs[i], want)
			}
		}
		if fi, _ := os.Stat(paths[1]); fi.Mode().Perm() != 0o644 {
			t.Errorf("%+v: b/f mode %v, want the replaced file's 0644", d, fi.Mode())
		}
		for _, sub := range []string{"a", "b"} {
			ents, _ := os.ReadDir(filepath.Join(dir, sub))
			if len(ents) != map[string]int{"a": 2, "b": 1}[sub] {
				t.Errorf("%+v: %s holds %v", d, sub, ents)
			}
		}
	}
}

// testDurable is the Durable of the files these tests replace.
var testDurable = Durable{File: FlushRecord, Dir: FlushRecordDir}

// The temporary name CreateTemp gives each file tend replaces, in the
// places tend fsck looks, is a Leftover; the file's own name is not.
func TestLeftoverMatchesCreateTemp(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{
		"state.json", "startlog", "order", "cut", "watcher.json", "watcher.pid", "queue", "list.cache", "config.json",
		"t1.start", "t1.cancel", "t1.delete", "t1.label", "t1.note", "t1.signal", "t1.restart", "t1.pause", "t1.resume",
	} {
		fd, tmp, err := CreateTemp(filepath.Join(dir, name), Perm{})
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(fd)
		os.Remove(tmp)
		if !Leftover(filepath.Base(tmp)) {
			t.Errorf("%s: its temporary name %s is not a Leftover", name, filepath.Base(tmp))
		}
		if Leftover(name) {
			t.Errorf("%s is a Leftover", name)
		}
	}
}

func TestLeftover(t *testing.T) {
	tests := []struct {
		name string
		want bool
	}{
		{"state.json4294967295", true},
		{".t1.start.123.tmp", true}, // the CLI's
		{".record-x", true},
		{"state.json", false},
		{"state.json.edited", false},
		{"stdout", false},
		{"history.jsonl", false},
		{".t1.cancel.taken", false},
		{"t1.start", false},
		{".t1.start1", false}, // hidden: not a request's
	}
	for _, tt := range tests {
		if got := Leftover(tt.name); got != tt.want {
			t.Errorf("Leftover(%q) = %v, want %v", tt.name, got, tt.want)
		}
	}
}
