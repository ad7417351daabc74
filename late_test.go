package tend

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestFullText: a client tells why an answer is late when the root's
// file system is full as tend status counts it (under 1 MiB free, or
// under 100 inodes), and says nothing otherwise.
func TestFullText(t *testing.T) {
	tests := []struct {
		name string
		fs   unix.Statfs_t
		want string
	}{
		{"no space", unix.Statfs_t{Bavail: 0, Bsize: 4096, Files: 1000, Ffree: 500}, "full (0 bytes free)"},
		{"under 1 MiB", unix.Statfs_t{Bavail: 255, Bsize: 4096, Files: 1000, Ffree: 500}, "full (1044480 bytes free)"},
		{"1 MiB", unix.Statfs_t{Bavail: 256, Bsize: 4096, Files: 1000, Ffree: 500}, ""},
		{"no inodes", unix.Statfs_t{Bavail: 1 << 20, Bsize: 4096, Files: 1000, Ffree: 3}, "out of inodes (3 free)"},
		{"no inode count", unix.Statfs_t{Bavail: 1 << 20, Bsize: 4096}, ""},
	}
	for _, tt := range tests {
		if got := fullText(tt.fs); got != tt.want {
			t.Errorf("%s: fullText = %q, want %q", tt.name, got, tt.want)
		}
	}
}
