package durable

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// A flush that fails in the sync itself returns a FlushError (a pipe
// cannot be synced: EINVAL), one that cannot open what it is to sync
// does not: the watcher records only the first kind.
func TestFlushError(t *testing.T) {
	var p [2]int
	if err := unix.Pipe(p[:]); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		err       error
		flushFail bool
	}{
		{"fsync", FlushRecord.Fsync(p[0]), true},
		{"fdatasync", FlushClaimed.Fdatasync(p[0]), true},
		{"a directory that is a file", FlushClaim.SyncDir(file), false},
		{"a directory that is gone", FlushClaim.SyncDir(file + ".gone"), false},
	}
	for _, tt := range tests {
		var fe *FlushError
		if tt.err == nil || errors.As(tt.err, &fe) != tt.flushFail {
			t.Errorf("%s: %v, a FlushError: %v, want %v", tt.name, tt.err, errors.As(tt.err, &fe), tt.flushFail)
		}
		if tt.flushFail && !errors.Is(tt.err, unix.EINVAL) {
			t.Errorf("%s: %v does not wrap EINVAL", tt.name, tt.err)
		}
	}
}
