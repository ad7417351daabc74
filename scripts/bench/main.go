// Command bench measures tend against the machine's own floor, in one run,
// and prints each figure with its ratio to the floor and the target of
// issue #8. It exits 1 if a target is missed.
//
//	go run ./scripts/bench bin/tend     (make bench)
package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tendhq/tend/procfs"
	"github.com/tendhq/tend/tracker"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: bench PATH-TO-TEND")
		os.Exit(2)
	}
	tend, err := filepath.Abs(os.Args[1])
	check(err)
	b := &bench{tend: tend}
	b.w1()
	b.w2()
	b.w3()

	b.w5()
	b.print()
	if b.missed > 0 {
		os.Exit(1)
	}
}

type bench struct {
	tend   string
	rows   [][4]string // workload, tend, floor, ratio and verdict
	missed int
}

func (b *bench) row(name, tend, floor string, ok bool, target string) {
	verdict := "ok"
	if !ok {
		verdict = "MISSED"
		b.missed++
	}
	b.rows = append(b.rows, [4]string{name, tend, floor, fmt.Sprintf("%s (target %s)", verdict, target)})
}

func (b *bench) print() {
	fmt.Printf("%-44s %-28s %-24s %s\n", "workload", "tend", "floor", "verdict")
	for _, r := range b.rows {
		fmt.Printf("%-44s %-28s %-24s %s\n", r[0], r[1], r[2], r[3])
	}
}

// root is a scratch tend root with a watcher up.
type root struct {
	dir, path string
	b         *bench
}

func (b *bench) up() *root {
	dir, err := os.MkdirTemp("", "tend-bench-")
	check(err)
	r := &root{dir: dir, path: filepath.Join(dir, ".tend"), b: b}
	r.tend("up")
	return r
}

func (r *root) tend(args ...string) []byte {
	cmd := exec.Command(r.b.tend, append([]string{"--root", r.path}, args...)...)
	cmd.Env = append(os.Environ(), "TEND_NO_START=1")
	out, err := cmd.CombinedOutput()
	if err != nil && args[0] != "ls" {
		fmt.Fprintf(os.Stderr, "tend %v: %v\n%s", args, err, out)
	}
	return out
}

func (r *root) down() {
	r.tend("down", "--timeout", "30s")
	os.RemoveAll(r.dir)
}

// drop writes request name with body into the spool the safe way.
func (r *root) drop(name, body string) {
	tmp := filepath.Join(r.path, "spool", "."+name+".tmp")
	check(os.WriteFile(tmp, []byte(body), 0o644))
	check(os.Rename(tmp, filepath.Join(r.path, "spool", name)))
}

// waitStates waits until n runs are in state.
func (r *root) waitStates(n int, state string) {
	store := tracker.NewStore(r.path)
	for end := time.Now().Add(10 * time.Minute); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		runs, _ := store.List()
		got := 0
		for _, st := range runs {
			if st.State == state {
				got++
			}
		}
		if got >= n {
			return
		}
	}
	panic(fmt.Sprintf("timed out waiting for %d runs %s", n, state))
}

// w1: 1,000 one-shot `true` jobs, submitted to all finished.
func (b *bench) w1() {
	const n = 1000
	floor := floorRate(n, 2)
	r := b.up()
	defer r.down()
	start := time.Now()
	for i := range n {
		r.drop(fmt.Sprintf("w1-%d.start", i), "true")
	}
	r.waitStates(n, tracker.Completed)
	rate := n / time.Since(start).Seconds()
	b.row("W1 burst: 1,000 `true` as files", fmt.Sprintf("%.0f jobs/s", rate), fmt.Sprintf("%.0f jobs/s (2 workers)", floor),
		rate >= floor/2, fmt.Sprintf(">= 50%% of floor; is %.0f%%", 100*rate/floor))
}

// floorRate runs n fork+exec of /bin/true with workers at once.
func floorRate(n, workers int) float64 {
	start := time.Now()
	var wg sync.WaitGroup
	jobs := make(chan struct{}, n)
	for range n {
		jobs <- struct{}{}
	}
	close(jobs)
	for range workers {
		wg.Go(func() {
			for range jobs {
				check(exec.Command("/bin/true").Run())
			}
		})
	}
	wg.Wait()
	return float64(n) / time.Since(start).Seconds()
}

// w2: from a request renamed into the spool to the job's first instruction.
func (b *bench) w2() {
	const n = 100
	stampDir, err := os.MkdirTemp("", "tend-bench-stamp-")
	check(err)
	defer os.RemoveAll(stampDir)
	var floor []time.Duration
	for i := range n {
		stamp := filepath.Join(stampDir, fmt.Sprintf("f%d", i))
		t0 := time.Now()
		check(exec.Command("/bin/sh", "-c", "date +%s%N > "+stamp).Run())
		floor = append(floor, readStamp(stamp).Sub(t0))
	}
	r := b.up()
	defer r.down()
	var got []time.Duration
	for i := range n {
		stamp := filepath.Join(stampDir, fmt.Sprintf("t%d", i))
		t0 := time.Now()
		r.drop(fmt.Sprintf("w2-%d.start", i), "date +%s%N > "+stamp)
		for !exists(stamp) {
			time.Sleep(200 * time.Microsecond)
		}
		time.Sleep(2 * time.Millisecond) // let date finish writing
		got = append(got, readStamp(stamp).Sub(t0))
	}
	fp50, fp99 := percentiles(floor)
	tp50, tp99 := percentiles(got)
	b.row("W2 latency, rename to first instruction", fmt.Sprintf("p50 %v p99 %v", ms(tp50), ms(tp99)), fmt.Sprintf("p50 %v p99 %v", ms(fp50), ms(fp99)),
		tp50 <= fp50+time.Millisecond && tp99 <= 2*fp99, "p50 <= floor+1ms, p99 <= 2x floor")
}

func readStamp(path string) time.Time {
	b, err := os.ReadFile(path)
	check(err)
	ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	check(err)
	return time.Unix(0, ns)
}

func percentiles(d []time.Duration) (p50, p99 time.Duration) {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2], s[len(s)*99/100]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond)) }

// w3: PSS of keeper and watcher per live run (500 `sleep`), and their CPU
// over 20 s idle with them live.
func (b *bench) w3() {
	const n = 500
	r := b.up()
	defer r.down()
	procs := r.daemons()
	for i := range n / 2 {
		r.drop(fmt.Sprintf("w3a-%d.start", i), "exec sleep 600")
	}
	r.waitStates(n/2, tracker.Running)
	time.Sleep(time.Second)
	half := pss(procs)
	for i := range n / 2 {
		r.drop(fmt.Sprintf("w3b-%d.start", i), "exec sleep 600")
	}
	r.waitStates(n, tracker.Running)
	time.Sleep(time.Second)
	full := pss(procs)
	perRun := float64(full-half) / float64(n/2)
	b.row("W3 memory per live run (PSS, 250 -> 500)", fmt.Sprintf("%.1f KiB", perRun), "-", perRun <= 64, "<= 64 KiB")
	before := cpuTicks(procs)
	time.Sleep(20 * time.Second)
	ticks := cpuTicks(procs) - before
	b.row("W3 idle CPU, 500 live runs, 20 s", fmt.Sprintf("%d ticks", ticks), "-", ticks == 0, "0 ticks")
	r.w4(n)
}

// daemons returns the PIDs of the root's keeper and watcher.
func (r *root) daemons() []int {
	var pids []int
	for _, f := range []string{"keeper.pid", "watcher.pid"} {
		b, err := os.ReadFile(filepath.Join(r.path, f))
		check(err)
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		check(err)
		pids = append(pids, pid)
	}
	return pids
}

func pss(pids []int) int64 {
	var total int64
	for _, pid := range pids {
		f, err := os.Open(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
		check(err)
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "Pss:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
				total += kb
			}
		}
		f.Close()
	}
	return total
}

func cpuTicks(pids []int) uint64 {
	var total uint64
	for _, pid := range pids {
		st, err := procfs.ReadStat(pid)
		check(err)
		total += st.CPU
	}
	return total
}

// w4 cancels the n live runs of w3 at once.
func (r *root) w4(n int) {
	start := time.Now()
	runs, _ := tracker.NewStore(r.path).List()
	for _, st := range runs {
		if st.State == tracker.Running {
			r.drop(st.ID+".cancel", "")
		}
	}
	r.waitStates(n, tracker.Canceled)
	took := time.Since(start)
	floor := floorStorm(n)
	r.b.row("W4 cancel storm, 500 live runs", took.Round(time.Millisecond).String(), floor.Round(time.Millisecond).String(),
		took <= 2*floor, "<= 2x floor")
}

// floorStorm starts n sleeps, then times SIGTERM to all and their reaping.
func floorStorm(n int) time.Duration {
	var cmds []*exec.Cmd
	for range n {
		c := exec.Command("sleep", "600")
		check(c.Start())
		cmds = append(cmds, c)
	}
	start := time.Now()
	for _, c := range cmds {
		c.Process.Signal(syscall.SIGTERM)
	}
	for _, c := range cmds {
		c.Wait()
	}
	return time.Since(start)
}

// w5: tend ls over 10,000 finished runs, against ls -R of the same tree.
func (b *bench) w5() {
	dir, err := os.MkdirTemp("", "tend-bench-ls-")
	check(err)
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, ".tend")
	store := tracker.NewStore(path)
	check(os.MkdirAll(store.Dir(), 0o755))
	now := time.Now()
	for i := range 10000 {
		id := fmt.Sprintf("w5-%d", i)
		check(os.Mkdir(store.RunDir(id), 0o755))
		code := 0
		check(store.Write(&tracker.State{ID: id, State: tracker.Completed, Rev: 3, Command: []string{"/bin/sh", "-c", "true"},
			CreatedAt: now, StartedAt: &now, EndedAt: &now, ExitCode: &code}))
	}
	r := &root{path: path, b: b}
	timeIt := func(f func()) time.Duration {
		best := time.Hour
		for range 3 {
			start := time.Now()
			f()
			best = min(best, time.Since(start))
		}
		return best
	}
	tendLs := timeIt(func() { r.tend("ls", "--all") })
	lsR := timeIt(func() {
		var out bytes.Buffer
		c := exec.Command("ls", "-R", store.Dir())
		c.Stdout = &out
		check(c.Run())
	})
	b.row("W5 tend ls --all, 10,000 finished runs", tendLs.Round(time.Millisecond).String(), "ls -R "+lsR.Round(time.Millisecond).String(),
		tendLs < 100*time.Millisecond, fmt.Sprintf("< 100 ms; %.1fx ls -R", float64(tendLs)/float64(lsR)))
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func check(err error) {
	if err != nil {
		panic(err)
	}
}
