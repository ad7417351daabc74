package procfs

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// InotifyError says which limit an inotify error hit, and how to raise
// it: the kernel's own words ("too many open files", "no space left on
// device") name neither.
func InotifyError(err error) error {
	switch {
	case errors.Is(err, unix.EMFILE):
		return fmt.Errorf("%w: the limit on inotify instances per user (sysctl fs.inotify.max_user_instances = %s) or on this process's open files is reached",
			err, sysctl("fs/inotify/max_user_instances"))
	case errors.Is(err, unix.ENOSPC):
		return fmt.Errorf("%w: the limit on inotify watches per user is reached (sysctl fs.inotify.max_user_watches = %s)",
			err, sysctl("fs/inotify/max_user_watches"))
	}
	return err
}

func sysctl(name string) string {
	b, err := os.ReadFile("/proc/sys/" + name)
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}
