package tracker

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestLastLineStart: where a file's torn last line starts, found from the
// end, across the blocks it is read in.
func TestLastLineStart(t *testing.T) {
	long := strings.Repeat("x", 150<<10) // more than two blocks
	for _, tc := range []struct {
		name, data string
		want       int
	}{
		{"whole", "a\nb\n", 4},
		{"torn", "a\nb\n{\"time", 4},
		{"torn across blocks", "a\n" + long, 2},
		{"no newline at all", long, 0},
		{"a newline block-aligned", strings.Repeat("y", 64<<10-1) + "\n" + long, 64 << 10},
	} {
		path := filepath.Join(t.TempDir(), "h")
		if err := os.WriteFile(path, []byte(tc.data), 0o600); err != nil {
			t.Fatal(err)
		}
		fd, err := unix.Open(path, unix.O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		got, err := lastLineStart(fd, int64(len(tc.data)))
		unix.Close(fd)
		if err != nil || got != int64(tc.want) {
			t.Errorf("%s: lastLineStart = %d, %v; want %d", tc.name, got, err, tc.want)
		}
	}
}
