package crashfs

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A Group holds the processes that use a mount, and whatever they start,
// so that a power cut stops them all at once: a cgroup (v2), which
// processes are started into (SysProcAttr) and cannot leave. Freezing it
// stops every one of them where it is, as the power going out would;
// killing it then kills each, including any forked meanwhile.
type Group struct {
	base string // the cgroup's path without its generation
	// mu guards the rest: a Kill makes a new cgroup while processes are
	// being started in the old one.
	mu  sync.Mutex
	gen int
	dir string
	fd  int
}

// NewGroup makes an empty group, below this process's own cgroup.
func NewGroup(name string) (*Group, error) {
	mnt, err := cgroup2Mount()
	if err != nil {
		return nil, err
	}
	own, err := ownCgroup()
	if err != nil {
		return nil, err
	}
	g := &Group{base: filepath.Join(mnt, own, fmt.Sprintf("crashfs-%s-%d", name, os.Getpid())), fd: -1}
	return g, g.make()
}

// make makes g's next cgroup.
func (g *Group) make() error {
	g.gen++
	g.dir = fmt.Sprintf("%s-%d", g.base, g.gen)
	if err := os.Mkdir(g.dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("crashfs: making cgroup %s: %w", g.dir, err)
	}
	fd, err := unix.Open(g.dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		os.Remove(g.dir)
		return &os.PathError{Op: "open", Path: g.dir, Err: err}
	}
	g.fd = fd
	return nil
}

// remove removes g's cgroup, which must be empty.
func (g *Group) remove() error {
	unix.Close(g.fd)
	g.fd = -1
	return os.Remove(g.dir)
}

// SysProcAttr returns what starts a process in g.
func (g *Group) SysProcAttr() *syscall.SysProcAttr {
	g.mu.Lock()
	defer g.mu.Unlock()
	return &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: g.fd}
}

// Start starts cmd in g.
func (g *Group) Start(cmd *exec.Cmd) error {
	cmd.SysProcAttr = g.SysProcAttr()
	return cmd.Start()
}

// Freeze stops every process of g, each where it is, and returns once all
// are stopped (or after a while: a process in an uninterruptible wait
// stops once it leaves it).
func (g *Group) Freeze() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.write("cgroup.freeze", "1"); err != nil {
		return err
	}
	if err := g.await("frozen 1", 10*time.Second); err != nil {
		return fmt.Errorf("%w; its processes: %s", err, g.describe())
	}
	return nil
}

// describe says what each process of g is doing, for an error.
func (g *Group) describe() string {
	b, _ := os.ReadFile(filepath.Join(g.dir, "cgroup.procs"))
	var out []string
	for _, pid := range strings.Fields(string(b)) {
		stat, _ := os.ReadFile("/proc/" + pid + "/stat")
		wchan, _ := os.ReadFile("/proc/" + pid + "/wchan")
		out = append(out, fmt.Sprintf("%s [%s] in %s", pid, strings.TrimSpace(string(stat)), wchan))
	}
	return strings.Join(out, "; ")
}

// Kill kills every process of g and returns once none is left. The next
// processes go to a new cgroup: Linux kills a process cloned into a
// cgroup that was killed (6.18 does).
func (g *Group) Kill() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.kill(); err != nil {
		return err
	}
	if err := g.remove(); err != nil {
		return err
	}
	return g.make()
}

func (g *Group) kill() error {
	procs, _ := os.ReadFile(filepath.Join(g.dir, "cgroup.procs"))
	if err := g.write("cgroup.kill", "1"); err != nil {
		return err
	}
	if err := g.await("populated 0", time.Minute); err != nil {
		return err
	}
	// Gone, not only dead: a zombie not yet reaped still answers to its
	// PID and start time, and a watcher started at once would take it
	// for a run still alive. After a real power loss there are none.
	end := time.Now().Add(10 * time.Second)
	for _, pid := range strings.Fields(string(procs)) {
		for time.Now().Before(end) {
			if _, err := os.Stat("/proc/" + pid); err != nil {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	return nil
}

// Close kills what is left in g and removes it.
func (g *Group) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	err := g.kill()
	if rerr := g.remove(); err == nil {
		err = rerr
	}
	return err
}

func (g *Group) write(name, value string) error {
	return os.WriteFile(filepath.Join(g.dir, name), []byte(value), 0)
}

// await waits until cgroup.events has line want.
func (g *Group) await(want string, limit time.Duration) error {
	end := time.Now().Add(limit)
	for {
		b, err := os.ReadFile(filepath.Join(g.dir, "cgroup.events"))
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(b), "\n") {
			if line == want {
				return nil
			}
		}
		if time.Now().After(end) {
			return fmt.Errorf("crashfs: %s: no %q after %v", g.dir, want, limit)
		}
		time.Sleep(time.Millisecond)
	}
}

// cgroup2Mount returns where the cgroup v2 hierarchy is mounted, mounting
// it if it is not (a machine on cgroup v1 alone).
func cgroup2Mount() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPER
		fields := strings.Fields(sc.Text())
		for i, fld := range fields {
			if fld == "-" && i+1 < len(fields) && fields[i+1] == "cgroup2" && len(fields) > 4 {
				return fields[4], nil
			}
		}
	}
	dir := "/run/crashfs-cgroup2"
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if err := unix.Mount("none", dir, "cgroup2", 0, ""); err != nil {
		return "", fmt.Errorf("crashfs: no cgroup v2 hierarchy, and mounting one on %s: %w", dir, err)
	}
	return dir, nil
}

// ownCgroup returns this process's cgroup in the v2 hierarchy.
func ownCgroup() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return p, nil
		}
	}
	return "/", nil
}

// Prepare makes FUSE available to this process if it can: it must be
// root (Mount uses mount(2) itself, with no fusermount), and /dev/fuse is
// made if the kernel has FUSE but the device node is missing. The error
// says, in one line, why FUSE cannot be had.
func Prepare() error {
	if os.Geteuid() != 0 {
		return errors.New("crashfs: mounting needs root")
	}
	if _, err := os.Stat("/dev/fuse"); err == nil {
		return nil
	}
	exec.Command("modprobe", "fuse").Run() // built in, or a module: either is fine
	b, _ := os.ReadFile("/proc/filesystems")
	if !strings.Contains(string(b), "\tfuse\n") {
		return errors.New("crashfs: the kernel has no FUSE (no fuse in /proc/filesystems)")
	}
	if err := unix.Mknod("/dev/fuse", unix.S_IFCHR|0o666, int(unix.Mkdev(10, 229))); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("crashfs: no /dev/fuse, and making it: %w", err)
	}
	return nil
}
