package tracker

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestOpenRunFileChecksBeforeItOpens: what a run's owner put in place of
// a run's file (a FIFO another holds open for reading, a device, a link,
// a file of another's, one with a second name) is never opened for
// writing, not even to be refused after: the open itself acts on a
// device, and a writer opened on a FIFO feeds whoever reads it. inotify
// tells each open for writing by its close (IN_CLOSE_WRITE); nothing may
// block either.
func TestOpenRunFileChecksBeforeItOpens(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a device node, and files given to another owner")
	}
	const owner = 4242
	tests := []struct {
		name    string
		make    func(t *testing.T, path string) (watched string)
		refused bool
	}{
		{"missing", func(t *testing.T, path string) string { return "" }, false},
		{"the owner's file", func(t *testing.T, path string) string {
			mustFile(t, path, owner)
			return path
		}, false},
		{"a FIFO read by another", func(t *testing.T, path string) string {
			if err := unix.Mkfifo(path, 0o666); err != nil {
				t.Fatal(err)
			}
			unix.Chown(path, owner, -1)
			// A reader: without one an open for writing fails (ENXIO)
			// and shows nothing; with one it succeeds.
			r, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { unix.Close(r) })
			return path
		}, true},
		{"a device", func(t *testing.T, path string) string {
			if err := unix.Mknod(path, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil { // /dev/null's
				t.Skipf("mknod: %v", err)
			}
			unix.Chown(path, owner, -1)
			return path
		}, true},
		{"a link to the owner's file", func(t *testing.T, path string) string {
			target := path + ".target"
			mustFile(t, target, owner)
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
			return target
		}, true},
		{"the owner's file with another name", func(t *testing.T, path string) string {
			other := path + ".other"
			mustFile(t, other, owner)
			if err := os.Link(other, path); err != nil {
				t.Fatal(err)
			}
			return other
		}, true},
		{"another's file", func(t *testing.T, path string) string {
			mustFile(t, path, 0)
			return path
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "stdout")
			watched := tt.make(t, path)
			in, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(in)
			if watched != "" {
				if _, err := unix.InotifyAddWatch(in, watched, unix.IN_CLOSE_WRITE|unix.IN_DONT_FOLLOW); err != nil {
					t.Fatal(err)
				}
			}
			done := make(chan error, 1)
			go func() {
				fd, err := OpenRunFile(path, unix.O_WRONLY|unix.O_APPEND, owner)
				if err == nil {
					unix.Close(fd)
				}
				done <- err
			}()
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("OpenRunFile blocked")
			}
			if refused := err != nil; refused != tt.refused {
				t.Fatalf("OpenRunFile: %v; want refused %v", err, tt.refused)
			}
			buf := make([]byte, 4096)
			n, _ := unix.Read(in, buf)
			if opened := n > 0; tt.refused && opened {
				t.Errorf("refused (%v), but opened for writing first", err)
			} else if !tt.refused && watched != "" && !opened {
				t.Errorf("not refused, but inotify saw no open for writing: the test sees nothing")
			}
		})
	}
}

func mustFile(t *testing.T, path string, uid int) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(path, uid, -1); err != nil {
		t.Fatal(err)
	}
}
