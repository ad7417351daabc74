package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/tendhq/tend/spool"
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
		exec.Command("umount", mnt).Run()
		os.Remove(image)
		os.Remove(mnt)
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
		check(spool.Replace(path, []byte(`{"state": "running"}`+"\n"), spool.Perm{}))
		took = append(took, time.Since(start))
	}
	os.Remove(path)
	return percentiles(took).p50
}
