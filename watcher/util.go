package watcher

import (
	"os"
	"syscall"
)

// ownerOf returns the uid that owns the file described by fi, or -1.
func ownerOf(fi os.FileInfo) int {
	if fi == nil {
		return -1
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}
