package tend_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/tendhq/tend"
)

// A run's output is its owner's once it has ended, who may make it a
// sparse file of a terabyte: every read returns a bounded part, and says
// where to go on.
func TestReadsOfHugeOutputAreBounded(t *testing.T) {
	root := filepath.Join(t.TempDir(), ".tend")
	t.Cleanup(func() { exec.Command("tend", "--root", root, "down").Run() })
	c, err := tend.Open(root, tend.Options{Watcher: &tend.WatcherOptions{Executable: "tend"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.Start(ctx, "big", tend.Request{Shell: "echo hello"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(ctx, "big"); err != nil {
		t.Fatal(err)
	}
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

	lines, _, more, err := c.ReadLines(ctx, "big", 0, 0)
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

func trim(s string) string {
	if len(s) > 40 {
		return s[:20] + "..." + s[len(s)-20:]
	}
	return s
}
