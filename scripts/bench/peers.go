package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// peers measures task-spooler and nq on W1 and W2 in the same run as tend,
// each on the disk like tend's "root on disk" rows, and each submitting
// through its own client, as its users do.
func (b *bench) peers() {
	if !onPath("tsp") || !onPath("nq") {
		fmt.Fprintln(os.Stderr, "bench: installing task-spooler and nq (apt-get)")
		for _, args := range [][]string{{"update"}, {"install", "-y", "task-spooler", "nq"}} {
			cmd := exec.Command("apt-get", args...)
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
			check(cmd.Run())
		}
	}
	check(syncFS(b.disk.path))
	b.taskSpooler()
	check(syncFS(b.disk.path))
	b.nq()
}

func onPath(name string) bool {
	_, err := exec.LookPath(name)
	return err == nil
}

// peer is a scratch directory and environment for one peer.
type peer struct {
	dir string
	env []string
}

func (b *bench) newPeer(env func(dir string) []string) *peer {
	dir := b.tempDir(b.disk.path, "tend-bench-peer-")
	return &peer{dir: dir, env: append(os.Environ(), env(dir)...)}
}

func (p *peer) run(name string, args ...string) string {
	cmd := exec.Command(name, args...)
	cmd.Env = p.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		panic(fmt.Sprintf("%s %v: %v\n%s", name, args, err, out))
	}
	return string(out)
}

// taskSpooler: a server with 2 slots, jobs submitted with tsp.
func (b *bench) taskSpooler() {
	p := b.newPeer(func(dir string) []string {
		return []string{"TS_SOCKET=" + filepath.Join(dir, "socket"), "TMPDIR=" + dir, "TS_MAXFINISHED=5000", "TS_SAVELIST="}
	})
	defer p.run("tsp", "-K")
	p.run("tsp", "-S", "2")
	const n = 1000
	floor := floorRate(n, 2)
	start := time.Now()
	for range n {
		p.run("tsp", "true")
	}
	for strings.Contains(p.run("tsp", "-l"), "running") || strings.Contains(p.run("tsp", "-l"), "queued") {
		time.Sleep(5 * time.Millisecond)
	}
	rate := n / time.Since(start).Seconds()
	b.row("W1 burst: 1,000 `tsp true` (task-spooler, 2 slots)", fmt.Sprintf("%.0f jobs/s", rate), fmt.Sprintf("%.0f jobs/s", floor), true, "")
	got := peerLatency(p, "tsp")
	b.row("W2 latency: tsp to first instruction", got.client.String(), got.floor.String(), true, "")
}

// nq: one queue directory, jobs submitted with nq, run one at a time.
func (b *bench) nq() {
	p := b.newPeer(func(dir string) []string { return []string{"NQDIR=" + dir} })
	const n = 1000
	floor := floorRate(n, 2)
	start := time.Now()
	for range n {
		p.run("nq", "-q", "true")
	}
	p.run("nq", "-w")
	rate := n / time.Since(start).Seconds()
	b.row("W1 burst: 1,000 `nq true` (nq)", fmt.Sprintf("%.0f jobs/s", rate), fmt.Sprintf("%.0f jobs/s", floor), true, "")
	got := peerLatency(p, "nq", "-q")
	b.row("W2 latency: nq to first instruction", got.client.String(), got.floor.String(), true, "")
}

// peerLatency submits 100 stamp jobs with the peer's client, one after the
// other, each after the floor's spawn of the same job (sampleLatency).
func peerLatency(p *peer, client ...string) sampled {
	return sampleLatency(p.dir, func(_ int, job string) {
		p.run(client[0], append(client[1:], "sh", "-c", job)...)
	})
}
