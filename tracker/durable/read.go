package durable

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// ErrNotRegular is the error OpenRegular and ReadRegular give for anything
// but a regular file (wrapped in one that names its kind).
var ErrNotRegular = errors.New("not a regular file")

// OpenRegular opens the regular file at path for reading, without
// following a symbolic link in its last component, without blocking on a
// FIFO and without opening a device at all: the way to open what someone
// else may have put there. It returns the descriptor, to be closed by the
// caller, and the file's stat, taken on that descriptor's inode. Anything
// but a regular file gives an error satisfying errors.Is(err,
// ErrNotRegular) that names its kind; one the caller may not read gives
// EACCES, with the stat.
func OpenRegular(path string) (int, unix.Stat_t, error) {
	// O_PATH opens nothing: no FIFO blocks, no device acts on an open, and
	// a symbolic link is the link itself. Only a regular file is then
	// opened for reading, through the same handle, so it is the same inode.
	var st unix.Stat_t
	pfd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, st, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(pfd)
	if err := unix.Fstat(pfd, &st); err != nil {
		return -1, st, &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return -1, st, fmt.Errorf("%s: %w", fileKind(st.Mode), ErrNotRegular)
	}
	fd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", pfd), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return -1, st, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return fd, st, nil
}

// ReadRegular reads the regular file at path as OpenRegular opens it, and
// at most limit bytes of it: a larger file is an error naming its size,
// and is not read.
func ReadRegular(path string, limit int64) ([]byte, unix.Stat_t, error) {
	fd, st, err := OpenRegular(path)
	if err != nil {
		return nil, st, err
	}
	defer unix.Close(fd)
	if st.Size > limit {
		return nil, st, fmt.Errorf("%s: %d bytes, larger than the limit of %d", path, st.Size, limit)
	}
	b, err := ReadUpTo(fd, st.Size, limit+1)
	if err != nil {
		return nil, st, &os.PathError{Op: "read", Path: path, Err: err}
	}
	if int64(len(b)) > limit {
		return nil, st, fmt.Errorf("%s: larger than the limit of %d bytes", path, limit)
	}
	return b, st, nil
}

// ReadUpTo reads fd to its end or to limit bytes, whichever comes first,
// with raw reads into a buffer sized for the size fstat gave (a request is
// read at every arrival: os.File would register each with the poller).
func ReadUpTo(fd int, size, limit int64) ([]byte, error) {
	buf := make([]byte, 0, min(max(size, 0), limit)+1)
	for int64(len(buf)) < limit {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)] // grown: the file grew
		}
		n, err := unix.Read(fd, buf[len(buf):min(int64(cap(buf)), limit)])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return buf, err
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
	return buf, nil
}

func fileKind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	case unix.S_IFLNK:
		return "a symbolic link"
	}
	return fmt.Sprintf("a file of type %#o", mode&unix.S_IFMT)
}
