package procfs

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// OrdersNewData reports whether the file system that holds dir commits a
// new file's data no later than a rename that names it, once its blocks
// are allocated (its write-back started): ext4 (or ext3, by the ext4
// driver) with a journal, in data=ordered mode (the default) or
// data=journal. There the journal writes the blocks' data before it
// commits the transaction that allocated them, and so before any later
// one that renames the file, as ext4's own auto_da_alloc relies on. Anything else (another file
// system, ext4 without a journal or with data=writeback, a mount it
// cannot find in /proc/self/mountinfo) is false.
func OrdersNewData(dir string) bool {
	var fs unix.Statfs_t
	if unix.Statfs(dir, &fs) != nil || fs.Type != unix.EXT4_SUPER_MAGIC {
		return false
	}
	var st unix.Stat_t
	if unix.Stat(dir, &st) != nil {
		return false
	}
	dev := fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	opts, ok := superOptions(dev)
	if !ok || strings.Contains(","+opts+",", ",data=writeback,") {
		return false
	}
	// The ext4 driver names each file system it mounts by its block
	// device, and says there which thread runs its journal, if it has one.
	link, err := os.Readlink("/sys/dev/block/" + dev)
	if err != nil {
		return false
	}
	task, err := os.ReadFile(filepath.Join("/sys/fs/ext4", filepath.Base(link), "journal_task"))
	if err != nil {
		return false
	}
	_, err = strconv.Atoi(strings.TrimSpace(string(task))) // "<none>" without a journal
	return err == nil
}

// superOptions returns the super block options of the ext4 file system
// mounted from device dev (major:minor), as /proc/self/mountinfo has them.
func superOptions(dev string) (string, bool) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// 42 27 7:0 / /mnt rw,relatime - ext4 /dev/loop0 rw,data=writeback
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 || fields[2] != dev {
			continue
		}
		for i, f := range fields {
			if f == "-" && i+3 < len(fields) && fields[i+1] == "ext4" {
				return fields[i+3], true
			}
		}
	}
	return "", false
}
