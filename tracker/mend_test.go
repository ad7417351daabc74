package tracker

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestLastLineStart: where a file's torn last line starts, found from the
// end, across the blocks it is read in; -1 past the limit.
func TestLastLineStart(t *testing.T) {
	long := strings.Repeat("x", 150<<10) // more than two blocks
	for _, tc := range []struct {
		name, data string
		limit      int64
		want       int
	}{
		{"whole", "a\nb\n", maxTorn, 4},
		{"torn", "a\nb\n{\"time", maxTorn, 4},
		{"torn across blocks", "a\n" + long, maxTorn, 2},
		{"no newline at all", long, maxTorn, 0},
		{"a newline block-aligned", strings.Repeat("y", 64<<10-1) + "\n" + long, maxTorn, 64 << 10},
		{"longer than the limit", "a\n" + long, 100 << 10, -1},
		{"as long as the limit allows", "a\n" + long, 150 << 10, 2},
	} {
		path := filepath.Join(t.TempDir(), "h")
		if err := os.WriteFile(path, []byte(tc.data), 0o600); err != nil {
			t.Fatal(err)
		}
		fd, err := unix.Open(path, unix.O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		got, err := lastLineStart(fd, int64(len(tc.data)), tc.limit)
		unix.Close(fd)
		if err != nil || got != int64(tc.want) {
			t.Errorf("%s: lastLineStart = %d, %v; want %d", tc.name, got, err, tc.want)
		}
	}
}
