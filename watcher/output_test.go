package watcher

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
)

// The mark finishAfterOutput waits for is a Chmod event of the watched
// directory itself, queued behind the writes made before it, and it
// leaves the directory's mode as it was.
func TestMarkDirComesBehindTheWrites(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, os.ModeSetgid|0o750); err != nil {
		t.Fatal(err)
	}
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer fsw.Close()
	if err := fsw.Add(dir); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "stdout")
	if err := os.WriteFile(out, []byte("a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := markDir(dir); err != nil {
		t.Fatal(err)
	}
	var wrote bool
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev := <-fsw.Events:
			switch {
			case ev.Name == out && ev.Has(fsnotify.Write):
				wrote = true
			case ev.Name == dir && ev.Has(fsnotify.Chmod):
				if !wrote {
					t.Fatal("the mark came before the write made ahead of it")
				}
				fi, err := os.Stat(dir)
				if err != nil {
					t.Fatal(err)
				}
				if got := fi.Mode() & (os.ModePerm | os.ModeSetgid); got != 0o750|os.ModeSetgid {
					t.Errorf("mode after the mark = %v, want it unchanged (drwxr-s---)", fi.Mode())
				}
				return
			}
		case err := <-fsw.Errors:
			t.Fatal(err)
		case <-timeout:
			t.Fatalf("no mark event (write seen: %v)", wrote)
		}
	}
}

// A link in the run directory's place is not followed.
func TestMarkDirFollowsNoLink(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(t.TempDir(), "run")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	if err := markDir(link); err == nil {
		t.Fatal("markDir followed a link")
	}
}
