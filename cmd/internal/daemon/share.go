package daemon

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"

	"github.com/tendhq/tend/cmd/internal/watchargs"
	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
	"github.com/tendhq/tend/watcher/config"
	"golang.org/x/sys/unix"
)

// shareCmd sets a root up to be shared with the members of a group (tend
// up --shared): here, because the group is found through the system's
// name services, as the watcher will find it.
type shareCmd struct {
	Group string `arg:"" help:"The group whose members may submit requests."`
}

// Run sets e's root up for c.Group, and says which directory above it
// the members could not pass through.
func (c *shareCmd) Run(e *env) error {
	if os.Geteuid() != 0 {
		return exitf(watchargs.ExitUsage, "--shared: only root may share a root: requests run as their writers")
	}
	g, err := user.LookupGroup(c.Group)
	if err != nil {
		return exitf(watchargs.ExitUsage, "--shared: %v", err)
	}
	gid, _ := strconv.Atoi(g.Gid)
	if err := tracker.CheckSafe(e.root, 0); err != nil {
		return exitf(watchargs.ExitRefused, "%v", err)
	}
	if err := (spool.Dir{Root: e.root}).Make(); err != nil {
		return err
	}
	if err := tracker.NewStore(e.root).Make(); err != nil {
		return err
	}
	if err := tracker.Share(e.root, gid); err != nil {
		return err
	}
	if err := config.AllowGroup(e.root, c.Group); err != nil {
		return err
	}
	for dir := filepath.Dir(e.root); ; dir = filepath.Dir(dir) {
		var st unix.Stat_t
		if unix.Stat(dir, &st) == nil && st.Mode&0o001 == 0 && (int(st.Gid) != gid || st.Mode&0o010 == 0) {
			fmt.Fprintf(e.stderr, "tend: %s is not searchable by group %s: its members cannot reach the root\n", dir, c.Group)
		}
		if dir == filepath.Dir(dir) {
			return nil
		}
	}
}
