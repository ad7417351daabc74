//go:build tendmutants

package durable

import (
	"os"

	"golang.org/x/sys/unix"
)

// removed reports whether flush f is left out: in a build with the
// tendmutants tag, which only make powerloss-mutants makes, the flush
// named by $TEND_MUTANT_NOFLUSH is, in every tend process started with it.
func (f Flush) removed() bool { return string(f) == os.Getenv("TEND_MUTANT_NOFLUSH") }

// markXattr is crashfs.MarkXattr: looked up on the file or directory a
// left-out flush was for, it tells the power-loss trial's file system
// where that flush would have been (this package cannot import it).
const markXattr = "user.crashfs.skipped"

// markFD marks the place of a flush of fd left out.
func markFD(fd int) { unix.Fgetxattr(fd, markXattr, nil) }

// markPath marks the place of a flush of the directory at path left out.
func markPath(path string) { unix.Getxattr(path, markXattr, nil) }
