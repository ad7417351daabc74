package crashfs

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// mount mounts a crashfs over a fresh backing directory holding what
// setup makes there (durable), or skips the test where FUSE cannot be
// had.
func mount(t *testing.T, setup func(dir string)) (*FS, string, string) {
	t.Helper()
	if err := Prepare(); err != nil {
		t.Skip(err)
	}
	backing, mnt := filepath.Join(t.TempDir(), "backing"), filepath.Join(t.TempDir(), "mnt")
	for _, d := range []string{backing, mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if setup != nil {
		setup(backing)
	}
	f, err := Mount(backing, mnt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Unmount() })
	return f, backing, mnt
}

// image cuts the power on f and returns the files of what the disk holds
// by model m: each regular file's content by its path, "/" for a
// directory.
func image(t *testing.T, f *FS, m Model, seed uint64) map[string]string {
	t.Helper()
	f.Freeze()
	if err := f.Unmount(); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "image")
	if _, err := f.Image(dst, m, rand.New(rand.NewPCG(seed, seed))); err != nil {
		t.Fatal(err)
	}
	files := make(map[string]string)
	filepath.WalkDir(dst, func(p string, d os.DirEntry, err error) error {
		if err != nil || p == dst {
			return err
		}
		rel, _ := filepath.Rel(dst, p)
		if d.IsDir() {
			files[rel] = "/"
		} else {
			b, _ := os.ReadFile(p)
			files[rel] = string(b)
		}
		return nil
	})
	return files
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// write writes a file in one go, fsynced if sync is set.
func write(t *testing.T, path, data string, sync bool) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	must(t, err)
	_, err = f.WriteString(data)
	must(t, err)
	if sync {
		must(t, f.Sync())
	}
	must(t, f.Close())
}

func syncDir(t *testing.T, dir string) {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	must(t, err)
	defer unix.Close(fd)
	must(t, unix.Fsync(fd))
}

func describe(files map[string]string) string {
	var lines []string
	for k, v := range files {
		lines = append(lines, k+"="+v)
	}
	sort.Strings(lines)
	return strings.Join(lines, " ")
}

// TestStrict checks each rule of what a power cut keeps, with nothing
// kept that was not made durable.
func TestStrict(t *testing.T) {
	old := func(dir string) {
		must(t, os.WriteFile(filepath.Join(dir, "old"), []byte("old"), 0o644))
		must(t, os.Mkdir(filepath.Join(dir, "d"), 0o755))
	}
	for _, tc := range []struct {
		name string
		do   func(t *testing.T, mnt string)
		want string // describe() of the image
	}{
		{"nothing synced", func(t *testing.T, mnt string) {
			write(t, filepath.Join(mnt, "a"), "a", false)
			must(t, os.Mkdir(filepath.Join(mnt, "e"), 0o755))
		}, "d=/ old=old"},
		{"file synced, not its directory", func(t *testing.T, mnt string) {
			write(t, filepath.Join(mnt, "a"), "a", true)
		}, "d=/ old=old"},
		{"directory synced, not the file", func(t *testing.T, mnt string) {
			write(t, filepath.Join(mnt, "a"), "a", false)
			syncDir(t, mnt)
		}, "a= d=/ old=old"},
		{"both synced", func(t *testing.T, mnt string) {
			write(t, filepath.Join(mnt, "a"), "a", true)
			syncDir(t, mnt)
		}, "a=a d=/ old=old"},
		{"appended after the sync", func(t *testing.T, mnt string) {
			f, err := os.OpenFile(filepath.Join(mnt, "old"), os.O_WRONLY|os.O_APPEND, 0)
			must(t, err)
			f.WriteString("-1")
			must(t, f.Sync())
			f.WriteString("-2")
			f.Close()
		}, "d=/ old=old-1"},
		{"replaced, directory not synced", func(t *testing.T, mnt string) {
			write(t, filepath.Join(mnt, "old.tmp"), "new", true)
			must(t, os.Rename(filepath.Join(mnt, "old.tmp"), filepath.Join(mnt, "old")))
		}, "d=/ old=old"},
		{"replaced and synced", func(t *testing.T, mnt string) {
			write(t, filepath.Join(mnt, "old.tmp"), "new", true)
			must(t, os.Rename(filepath.Join(mnt, "old.tmp"), filepath.Join(mnt, "old")))
			syncDir(t, mnt)
		}, "d=/ old=new"},
		{"moved, only its new directory synced", func(t *testing.T, mnt string) {
			must(t, os.Rename(filepath.Join(mnt, "old"), filepath.Join(mnt, "d", "old")))
			syncDir(t, filepath.Join(mnt, "d"))
		}, "d/old=old d=/ old=old"},
		{"moved, only its old directory synced", func(t *testing.T, mnt string) {
			must(t, os.Rename(filepath.Join(mnt, "old"), filepath.Join(mnt, "d", "old")))
			syncDir(t, mnt)
		}, "d=/"},
		{"removed, not synced", func(t *testing.T, mnt string) {
			must(t, os.Remove(filepath.Join(mnt, "old")))
			must(t, os.Remove(filepath.Join(mnt, "d")))
		}, "d=/ old=old"},
		{"removed and synced", func(t *testing.T, mnt string) {
			must(t, os.Remove(filepath.Join(mnt, "old")))
			syncDir(t, mnt)
		}, "d=/"},
		{"a new directory synced, not what it holds", func(t *testing.T, mnt string) {
			must(t, os.Mkdir(filepath.Join(mnt, "e"), 0o755))
			write(t, filepath.Join(mnt, "e", "x"), "x", true)
			syncDir(t, mnt)
		}, "d=/ e=/ old=old"},
		{"linked, synced", func(t *testing.T, mnt string) {
			must(t, os.Link(filepath.Join(mnt, "old"), filepath.Join(mnt, "d", "l")))
			syncDir(t, filepath.Join(mnt, "d"))
		}, "d/l=old d=/ old=old"},
		{"truncated, synced", func(t *testing.T, mnt string) {
			must(t, os.Truncate(filepath.Join(mnt, "old"), 1))
			f, err := os.Open(filepath.Join(mnt, "old"))
			must(t, err)
			must(t, f.Sync())
			f.Close()
		}, "d=/ old=o"},
		{"fdatasync", func(t *testing.T, mnt string) {
			f, err := os.OpenFile(filepath.Join(mnt, "old"), os.O_WRONLY|os.O_APPEND, 0)
			must(t, err)
			f.WriteString("+")
			must(t, unix.Fdatasync(int(f.Fd())))
			f.Close()
		}, "d=/ old=old+"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, _, mnt := mount(t, old)
			tc.do(t, mnt)
			if got := describe(image(t, f, Strict, 1)); got != tc.want {
				t.Errorf("image: %s, want %s", got, tc.want)
			}
		})
	}
}

// TestCutAtFlush cuts before and after a given fsync: before, it fails
// and changes nothing; after, it holds; either way nothing changes after.
func TestCutAtFlush(t *testing.T) {
	for _, after := range []bool{false, true} {
		f, _, mnt := mount(t, nil)
		done := f.CutAtFlush(2, after)
		write(t, filepath.Join(mnt, "a"), "a", true) // flush 1
		fd, err := unix.Open(mnt, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		must(t, err)
		err = unix.Fsync(fd) // flush 2
		unix.Close(fd)
		if after != (err == nil) {
			t.Fatalf("after=%v: fsync at the cut: %v", after, err)
		}
		select {
		case <-done:
		default:
			t.Fatalf("after=%v: no cut at flush 2", after)
		}
		if err := os.WriteFile(filepath.Join(mnt, "b"), nil, 0o644); !errors.Is(err, syscall.EIO) {
			t.Fatalf("after=%v: a change after the cut: %v, want EIO", after, err)
		}
		want := map[bool]string{false: "", true: "a=a"}[after]
		if got := describe(image(t, f, Strict, 1)); got != want {
			t.Errorf("after=%v: image %q, want %q", after, got, want)
		}
		if n := len(f.Flushes()); n != 2 {
			t.Errorf("after=%v: %d flushes, want 2", after, n)
		}
	}
}

// TestOnFlush sees each flush as it starts, in order, until it is set to
// nil.
func TestOnFlush(t *testing.T) {
	f, _, mnt := mount(t, nil)
	var seen []Flush
	f.OnFlush(func(fl Flush) { seen = append(seen, fl) }) // under f's lock
	write(t, filepath.Join(mnt, "a"), "a", true)
	syncDir(t, mnt)
	f.OnFlush(nil)
	write(t, filepath.Join(mnt, "b"), "b", true)
	want := []Flush{{Path: "a"}, {Path: ".", Dir: true}}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Errorf("seen %v, want %v", seen, want)
	}
	if n := len(f.Flushes()); n != 3 {
		t.Errorf("%d flushes, want 3", n)
	}
}

// TestSlowFlushes checks that a slow flush is still under way, and taken
// back by a cut, when one of another file that came after it is done.
func TestSlowFlushes(t *testing.T) {
	f, _, mnt := mount(t, nil)
	write(t, filepath.Join(mnt, "log"), "", true)
	write(t, filepath.Join(mnt, "a"), "", true)
	syncDir(t, mnt)
	f.SetSlowFlushes(func(fl Flush) bool { return fl.Path == "log" }, time.Second)
	slow := make(chan error, 1)
	go func() {
		fd, err := os.OpenFile(filepath.Join(mnt, "log"), os.O_WRONLY, 0)
		if err != nil {
			slow <- err
			return
		}
		defer fd.Close()
		if _, err = fd.WriteString("line"); err == nil {
			err = fd.Sync()
		}
		slow <- err
	}()
	for time.Sleep(10 * time.Millisecond); len(f.Flushes()) < 4; time.Sleep(time.Millisecond) {
	}
	write(t, filepath.Join(mnt, "a"), "a", true)
	if got := describe(image(t, f, Strict, 1)); got != "a=a log=" {
		t.Errorf("image %q, want %q", got, "a=a log=")
	}
	if err := <-slow; err == nil {
		t.Error("the slow flush, cut, succeeded") // EIO, or the connection aborted by the unmount
	}
}

// TestReordered checks that a reordered cut keeps some of what was not
// synced, and nothing that never was.
func TestReordered(t *testing.T) {
	kept, lost := 0, 0
	for seed := range uint64(8) {
		f, _, mnt := mount(t, nil)
		for _, name := range []string{"a", "b", "c", "d", "e", "f"} {
			write(t, filepath.Join(mnt, name), name, false)
		}
		files := image(t, f, Reordered, seed)
		for _, name := range []string{"a", "b", "c", "d", "e", "f"} {
			content, ok := files[name]
			switch {
			case !ok:
				lost++
			case content != "" && content != name:
				t.Fatalf("seed %d: %s holds %q", seed, name, content)
			default:
				kept++
			}
		}
		if len(files) > 6 {
			t.Fatalf("seed %d: %s", seed, describe(files))
		}
	}
	if kept == 0 || lost == 0 {
		t.Errorf("over 8 cuts, %d files kept and %d lost: want some of each", kept, lost)
	}
}

// TestNamesFirst: a file renamed in before its flush, cut at that flush
// (CutAtFlushOf), keeps its name and loses its data; a file synced before
// keeps both.
func TestNamesFirst(t *testing.T) {
	f, _, mnt := mount(t, nil)
	write(t, filepath.Join(mnt, "old"), "old", true)
	cut := f.CutAtFlushOf(func(fl Flush) bool { return fl.Path == "new" })
	write(t, filepath.Join(mnt, "new.tmp"), "new", false)
	must(t, os.Rename(filepath.Join(mnt, "new.tmp"), filepath.Join(mnt, "new")))
	fd, err := unix.Open(filepath.Join(mnt, "new"), unix.O_RDONLY, 0)
	must(t, err)
	err = unix.Fsync(fd)
	unix.Close(fd)
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("the flush of new: %v, want EIO (the cut before it)", err)
	}
	select {
	case <-cut:
	default:
		t.Fatal("no cut at new's flush")
	}
	if got, want := describe(image(t, f, NamesFirst, 1)), "new= old=old"; got != want {
		t.Errorf("image %q, want %q", got, want)
	}
}

// TestReplacesKeepData: with SetReplacesKeepData, a rename that puts a
// file in place of another keeps that file's data, as ext4 in
// data=ordered commits it, in every model, whether the cut keeps the
// rename or its directory's fsync made it durable; a rename to a new
// name does not; and without it, a replace keeps its name alone, as
// POSIX allows.
func TestReplacesKeepData(t *testing.T) {
	for _, tc := range []struct {
		on, synced bool
		want       string
	}{
		{true, false, "fresh= old=new"},
		{false, false, "fresh= old="},
		{true, true, "fresh= old=new"},
		{false, true, "fresh= old="},
	} {
		for _, m := range []Model{Strict, NamesFirst} {
			f, _, mnt := mount(t, nil)
			f.SetReplacesKeepData(tc.on)
			write(t, filepath.Join(mnt, "old"), "old", true)
			syncDir(t, mnt)
			write(t, filepath.Join(mnt, "old.tmp"), "new", false)
			must(t, os.Rename(filepath.Join(mnt, "old.tmp"), filepath.Join(mnt, "old")))
			write(t, filepath.Join(mnt, "fresh.tmp"), "fresh", false)
			must(t, os.Rename(filepath.Join(mnt, "fresh.tmp"), filepath.Join(mnt, "fresh")))
			if tc.synced {
				syncDir(t, mnt)
			} else if m == Strict {
				continue // keeps no rename
			}
			if got := describe(image(t, f, m, 1)); got != tc.want {
				t.Errorf("replaces keep data %v, synced %v, %v: image %q, want %q", tc.on, tc.synced, m, got, tc.want)
			}
		}
	}
}

// TestAfterMark cuts at the first flush after a mark, and keeps what
// came after the mark, not what came before.
func TestAfterMark(t *testing.T) {
	f, _, mnt := mount(t, nil)
	cut := f.CutAfterMark(1)
	write(t, filepath.Join(mnt, "before"), "before", false)
	if _, err := unix.Getxattr(mnt, MarkXattr, nil); !errors.Is(err, unix.ENODATA) {
		t.Fatalf("a mark: %v, want ENODATA", err)
	}
	write(t, filepath.Join(mnt, "after"), "after", false)
	fd, err := unix.Open(mnt, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	must(t, err)
	err = unix.Fsync(fd)
	unix.Close(fd)
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("the flush after the mark: %v, want EIO (the cut before it)", err)
	}
	select {
	case <-cut:
	default:
		t.Fatal("no cut after the mark")
	}
	if n := f.Marks(); n != 1 {
		t.Errorf("%d marks, want 1", n)
	}
	if got := describe(image(t, f, AfterMark, 1)); got != "after=after" {
		t.Errorf("image %q, want %q", got, "after=after")
	}
}

// TestKeepsMark: a request of root's, marked and renamed into a directory
// then synced, keeps its mark across a cut, as a journaled file system
// keeps an inode's attributes; an unmarked one gets none.
func TestKeepsMark(t *testing.T) {
	f, _, mnt := mount(t, nil)
	for _, name := range []string{"marked", "plain"} {
		tmp := filepath.Join(mnt, "."+name)
		write(t, tmp, name, true)
		if name == "marked" {
			if err := unix.Setxattr(tmp, KeptXattr, []byte("request"), 0); err != nil {
				t.Skipf("no trusted attributes here: %v", err)
			}
		}
		must(t, os.Rename(tmp, filepath.Join(mnt, name)))
	}
	syncDir(t, mnt)
	f.Freeze()
	must(t, f.Unmount())
	dst := filepath.Join(t.TempDir(), "image")
	if _, err := f.Image(dst, Strict, rand.New(rand.NewPCG(1, 1))); err != nil {
		t.Fatal(err)
	}
	if got := string(readMark(filepath.Join(dst, "marked"))); got != "request" {
		t.Errorf("marked: mark %q after the cut, want %q", got, "request")
	}
	if got := readMark(filepath.Join(dst, "plain")); got != nil {
		t.Errorf("plain: mark %q after the cut, want none", got)
	}
}
