//go:build !tendmutants

package durable

// removed reports whether flush f is left out: never, but in a test build
// (see flush_mutants.go).
func (f Flush) removed() bool { return false }

func markFD(fd int)       {}
func markPath(dir string) {}
