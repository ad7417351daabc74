package tracker

import (
	"errors"
	"os"

	"github.com/tendhq/tend/tracker/durable"
	"golang.org/x/sys/unix"
)

// A run's gate file holds GateClosed from its launch until its process,
// past its gate, writes GatePassed over it (the same length, so that the
// write changes no size), then makes its started file (docs/protocol.md,
// "Runs").
const (
	GateClosed = "closed\n"
	GateWord   = "passed"
	GatePassed = GateWord + "\n"
)

// GateSays reports whether the gate file at path says its run may have
// passed its gate: anything there but GateClosed or an empty file (an
// earlier tend made it empty, and its process appended its line), or a
// file that cannot be read, so that a run that may have run is never
// taken for one that did not.
func GateSays(path string) bool {
	fd, _, err := durable.OpenRegular(path)
	if err != nil {
		return !errors.Is(err, unix.ENOENT)
	}
	defer unix.Close(fd)
	b, err := durable.ReadUpTo(fd, int64(len(GateClosed)), int64(len(GateClosed))+1)
	return err != nil || (len(b) > 0 && string(b) != GateClosed)
}

// MayHaveStarted reports whether run id's process may have passed its
// gate: its started file is there, or its gate says so (GateSays). A run
// with neither never had a process past a gate, in the boot that wrote
// them; a power loss may have taken back the line of a run whose record
// names a boot (State.Boot), which was not synced.
func (s *Store) MayHaveStarted(id string) bool {
	if _, err := os.Lstat(s.Run(id).Started()); err == nil {
		return true
	}
	return GateSays(s.Run(id).Gate())
}
