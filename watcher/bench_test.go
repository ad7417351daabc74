package watcher

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// BenchmarkBurst is the event loop's cost per request, end to end: b.N
// `true` requests renamed into the spool of a watcher running in this
// process, until every one is recorded completed. Profile it with
// go test -bench Burst -cpuprofile cpu.out ./watcher.
func BenchmarkBurst(b *testing.B) {
	root := filepath.Join(b.TempDir(), ".tend")
	stop := make(chan os.Signal, 1)
	readyR, readyW, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- Run(Config{Root: root, Stop: stop, Ready: readyW}) }()
	if _, err := bufio.NewReader(readyR).ReadString('\n'); err != nil {
		b.Fatal("watcher not ready:", err, <-done)
	}
	spool := filepath.Join(root, "spool")
	b.ResetTimer()
	for i := range b.N {
		tmp := filepath.Join(spool, fmt.Sprintf(".b%d", i))
		if err := os.WriteFile(tmp, []byte("true"), 0o644); err != nil {
			b.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(spool, fmt.Sprintf("b%d.start", i))); err != nil {
			b.Fatal(err)
		}
	}
	for completed(root) < b.N {
		time.Sleep(10 * time.Millisecond)
	}
	b.StopTimer()
	stop <- syscall.SIGTERM
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

// completed counts the runs the history records completed.
func completed(root string) int {
	h, _ := os.ReadFile(filepath.Join(root, "history.jsonl"))
	return bytes.Count(h, []byte(`"state":"completed"`))
}
