//go:build tendmutants

package spool

import "os"

// removed reports whether flush f is left out: in a build with the
// tendmutants tag, which only make powerloss-mutants makes, the flush
// named by $TEND_MUTANT_NOFLUSH is, in every tend process started with it.
func (f Flush) removed() bool { return string(f) == os.Getenv("TEND_MUTANT_NOFLUSH") }
