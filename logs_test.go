package tend_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tendhq/tend"
)

// A run's output is its owner's once it has ended, who may make it a
// sparse file of a terabyte: every read returns a bounded part, and says
// where to go on.
func TestReadsOfHugeOutputAreBounded(t *testing.T) {
	c, root := endedRun(t, "big", "echo hello")
	ctx := context.Background()
	path := filepath.Join(root, "runs", "big", "stdout")
	if err := os.Truncate(path, 1<<40); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("\nlast1\nlast2\n")
	f.Close()

	sl, err := c.ReadLog(ctx, "big", tend.Stdout, 0, 0)
	if err != nil || len(sl.Data) != tend.MaxLogRead || sl.EOF || sl.Next != tend.MaxLogRead {
		t.Errorf("ReadLog(0, 0): %d bytes, eof %v, next %d, %v; want %d bytes, not eof", len(sl.Data), sl.EOF, sl.Next, err, tend.MaxLogRead)
	}
	sl, err = c.ReadLog(ctx, "big", tend.Stdout, 0, 1<<40)
	if err != nil || len(sl.Data) != tend.MaxLogRead || sl.EOF {
		t.Errorf("ReadLog(0, 1 TiB): %d bytes, eof %v, %v; want %d bytes, not eof", len(sl.Data), sl.EOF, err, tend.MaxLogRead)
	}

	for _, tt := range []struct {
		n          int
		want       string
		wantOffset int64
	}{
		{1, "last2\n", 1<<40 + 7},
		{2, "last1\nlast2\n", 1<<40 + 1},
		// The zeros' line is longer than MaxLogRead: its last bytes.
		{3, "", 1<<40 + 13 - tend.MaxLogRead},
	} {
		sl, err := c.TailLog(ctx, "big", tend.Stdout, tt.n)
		if err != nil || sl.Offset != tt.wantOffset || (tt.want != "" && sl.Data != tt.want) || sl.Next != 1<<40+13 || !sl.EOF {
			t.Errorf("TailLog(%d): offset %d, next %d, eof %v, %q, %v; want offset %d", tt.n, sl.Offset, sl.Next, sl.EOF, trim(sl.Data), err, tt.wantOffset)
		}
	}

	read, err := c.ReadLines(ctx, "big", tend.LogPlace{}, 0)
	lines, more := read.Lines, !read.EOF
	size := 0
	for _, l := range lines {
		if len(l.Data) > tend.MaxLogLine {
			t.Errorf("a line of %d bytes, want at most %d", len(l.Data), tend.MaxLogLine)
		}
		size += len(l.Data)
	}
	if err != nil || !more || size > tend.MaxLogRead || lines[0].Data != "hello\n" {
		t.Errorf("ReadLines: %d lines, %d bytes, more %v, %v; want at most %d bytes, and more", len(lines), size, more, err, tend.MaxLogRead)
	}
}

// endedRun runs shell as run id under a watcher of a new root, and
// returns a client of the root and its path once the run has ended.
func endedRun(t *testing.T, id, shell string) (*tend.Client, string) {
	t.Helper()
	root := filepath.Join(t.TempDir(), ".tend")
	t.Cleanup(func() { exec.Command("tend", "--root", root, "down").Run() })
	c, err := tend.Open(root, tend.Options{Watcher: &tend.WatcherOptions{Executable: "tend"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Start(context.Background(), id, tend.Request{Shell: shell}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	return c, root
}

func trim(s string) string {
	if len(s) > 40 {
		return s[:20] + "..." + s[len(s)-20:]
	}
	return s
}

// A read of both streams cut short by its budget goes on from its Next:
// read a page at a time, the lines are those of one read, in the same
// order, none twice.
func TestReadLinesGoesOnFromNext(t *testing.T) {
	c, root := endedRun(t, "mix", "true")
	ctx := context.Background()
	// The streams and the switches as the watcher records them: each
	// stream writes lines of its own lengths, and they take turns.
	var stdout, stderr, order strings.Builder
	for i := range 100 {
		fmt.Fprintf(&stdout, "o%d\n", i)
		fmt.Fprintf(&order, "stdout %d\n", stdout.Len())
		fmt.Fprintf(&stderr, "e%d\n%s\n", i, strings.Repeat("x", i%7))
		fmt.Fprintf(&order, "stderr %d\n", stderr.Len())
	}
	for name, data := range map[string]string{"stdout": stdout.String(), "stderr": stderr.String(), "order": order.String()} {
		if err := os.WriteFile(filepath.Join(root, "runs", "mix", name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	whole, err := c.ReadLines(ctx, "mix", tend.LogPlace{}, 0)
	if err != nil || !whole.EOF || !whole.Final || len(whole.Lines) != 300 {
		t.Fatalf("ReadLines: %d lines, eof %v, final %v, %v; want 300, eof, final", len(whole.Lines), whole.EOF, whole.Final, err)
	}
	if whole.Next != (tend.LogPlace{Stdout: int64(stdout.Len()), Stderr: int64(stderr.Len())}) {
		t.Errorf("ReadLines: next %+v, want the streams' ends", whole.Next)
	}
	var paged []tend.LogLine
	for at, pages := (tend.LogPlace{}), 0; ; pages++ {
		read, err := c.ReadLines(ctx, "mix", at, 20)
		if err != nil || pages > 300 {
			t.Fatalf("page %d from %+v: %v", pages, at, err)
		}
		paged = append(paged, read.Lines...)
		if read.EOF {
			break
		}
		at = read.Next
	}
	if !slices.Equal(paged, whole.Lines) {
		t.Errorf("paged: %d lines, want the %d of one read, in its order", len(paged), len(whole.Lines))
	}
}

// A read says how large the stream is, so that a reader whose offset is
// past its end can tell that from "nothing new yet".
func TestReadsSayTheSize(t *testing.T) {
	c, _ := endedRun(t, "sized", "printf hello; printf oops >&2")
	ctx := context.Background()
	for _, tt := range []struct {
		offset, max int64
		data        string
		next        int64
	}{
		{0, 0, "hello", 5},
		{1, 2, "el", 3},
		{5, 0, "", 5},
		{6, 0, "", 6},
		{1 << 40, 0, "", 1 << 40},
	} {
		sl, err := c.ReadLog(ctx, "sized", tend.Stdout, tt.offset, tt.max)
		if err != nil || sl.Data != tt.data || sl.Next != tt.next || sl.Size != 5 {
			t.Errorf("ReadLog(%d, %d) = %q, next %d, size %d, %v; want %q, next %d, size 5", tt.offset, tt.max, sl.Data, sl.Next, sl.Size, err, tt.data, tt.next)
		}
	}
	for _, from := range []tend.LogPlace{{}, {Stdout: 5, Stderr: 4}, {Stdout: 9, Stderr: 1 << 40}} {
		read, err := c.ReadLines(ctx, "sized", from, 0)
		if err != nil || read.Size != (tend.LogPlace{Stdout: 5, Stderr: 4}) {
			t.Errorf("ReadLines(%+v): size %+v, %v; want {5 4}", from, read.Size, err)
		}
	}
}
