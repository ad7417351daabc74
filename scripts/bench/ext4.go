package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/tendhq/tend/tracker/durable"
	"golang.org/x/sys/unix"
)

// Users' disks have journals; this project's machine's own disk has none,
// and flatters file creation and fsync. So as root, with no -dir given,
// the bench measures on a journaled ext4: an image of default mkfs.ext4
// options (journal on), loop-mounted for the run and removed at its end.

// ext4Size is the image's size: sparse, so only what is written takes
// space.
const ext4Size = "8G"

// journaled makes and mounts a journaled ext4 image under base, and
// returns its mount point and what unmounts and removes it.
func journaled(base string) (string, func(), error) {
	image := filepath.Join(base, "ext4.img")
	mnt := filepath.Join(base, "ext4")
	run := func(name string, args ...string) error {
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s %v: %v: %s", name, args, err, out)
		}
		return nil
	}
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return "", nil, err
	}
	if err := run("truncate", "-s", ext4Size, image); err != nil {
		return "", nil, err
	}
	if err := run("mkfs.ext4", "-q", "-F", image); err != nil {
		os.Remove(image)
		return "", nil, err
	}
	if err := run("mount", "-o", "loop", image, mnt); err != nil {
		os.Remove(image)
		return "", nil, err
	}
	return mnt, func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			// Still busy (a process of a run left behind): detached all
			// the same, and freed once that process ends.
			fmt.Fprintf(os.Stderr, "bench: umount %s: %v: %s; unmounting it lazily\n", mnt, err, out)
			exec.Command("umount", "-l", mnt).Run()
		}
		os.Remove(image)
		os.RemoveAll(mnt) // unmounted: what a straggler made in its place
	}, nil
}

// replaceFloor times one durable replace on dir's file system (write a
// new file, fsync it, rename it over the old one, fsync the directory):
// what the least durable record costs, p50 of 100.
func replaceFloor(dir string) time.Duration {
	path := filepath.Join(dir, "floor.json")
	var took []time.Duration
	for range 100 {
		start := time.Now()
		check(durable.Replace(path, []byte(`{"state": "running"}`+"\n"), durable.Perm{}, durable.Durable{File: durable.FlushRecord, Dir: durable.FlushRecordDir}))
		took = append(took, time.Since(start))
	}
	os.Remove(path)
	return percentiles(took).p50
}

// overwriteFloor times one durable overwrite on dir's file system: a
// record written over the first bytes of a file whose blocks were
// written and synced beforehand, then fdatasync'd. Its size and blocks
// do not change, so a journaled file system commits nothing: the disk's
// own flush alone, what a record written into a file made ahead would
// cost (performance.md, round 29). p50 of 100.
func overwriteFloor(dir string) time.Duration {
	path := filepath.Join(dir, "floor.pre")
	check(os.WriteFile(path, make([]byte, 4096), 0o600))
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	check(err)
	defer os.Remove(path)
	defer f.Close()
	check(f.Sync())
	var took []time.Duration
	for i := range 100 {
		start := time.Now()
		_, err := f.WriteAt([]byte(fmt.Sprintf(`{"state": "running", "n": %d}`+"\n", i)), 0)
		check(err)
		check(unix.Fdatasync(int(f.Fd())))
		took = append(took, time.Since(start))
	}
	return percentiles(took).p50
}

// flushEvery is how many records a watcher's batch holds before it writes
// them (watcher.flushEvery).
const flushEvery = 32

// groupFloor times a commit of records files in as many directories on
// dir's file system, p50 of 20, two ways: as tend writes a batch
// (durable.ReplaceAll: every file written, then their fsyncs and renames,
// then the directories', several in flight at once), and as one syncfs(2)
// after writing them all unsynced, the alternative #13 asked to measure.
func groupFloor(dir string, records int) (parallel, syncfs time.Duration) {
	var paths []string
	var data [][]byte
	for i := range records {
		d := filepath.Join(dir, fmt.Sprintf("group%d", i))
		check(os.MkdirAll(d, 0o755))
		paths, data = append(paths, filepath.Join(d, "state.json")), append(data, []byte(`{"state": "running"}`+"\n"))
	}
	defer func() {
		for i := range records {
			os.RemoveAll(filepath.Join(dir, fmt.Sprintf("group%d", i)))
		}
	}()
	perms := make([]durable.Perm, records)
	record := durable.Durable{File: durable.FlushRecord, Dir: durable.FlushRecordDir}
	var par, fs []time.Duration
	for range 20 {
		start := time.Now()
		for _, err := range durable.ReplaceAll(paths, data, perms, nil, record) {
			check(err)
		}
		par = append(par, time.Since(start))
		start = time.Now()
		for i := range paths {
			check(durable.ReplaceUnsynced(paths[i], data[i], perms[i]))
		}
		check(syncFS(dir))
		fs = append(fs, time.Since(start))
	}
	return percentiles(par).p50, percentiles(fs).p50
}

// syncFS is syncfs(2) on dir's file system.
func syncFS(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Syncfs(fd)
}
