package tend_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/tendhq/tend"
)

// Start a command, wait for it to end, and read what it wrote.
func Example() {
	root, cleanup := scratchRoot() // a new, empty root; cleanup stops its watcher
	defer cleanup()

	client, err := tend.Open(root, tend.Options{
		Watcher: &tend.WatcherOptions{Executable: "tend"}, // start one when none runs
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if _, err := client.Start(ctx, "hello", tend.Request{Shell: "echo hello from tend"}); err != nil {
		log.Fatal(err)
	}
	run, err := client.Wait(ctx, "hello")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(run.State, *run.ExitCode)
	out, err := client.ReadLog(ctx, "hello", tend.Stdout, 0, 0)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(out.Data)
	// Output:
	// completed 0
	// hello from tend
}

// A client that acts as a session starts its runs in it and lists only
// them; the watcher lets it cancel or delete no other run.
func ExampleOpen_session() {
	root, cleanup := scratchRoot()
	defer cleanup()
	ctx := context.Background()
	watch := &tend.WatcherOptions{Executable: "tend"}
	agent, _ := tend.Open(root, tend.Options{Session: "agent-7", Watcher: watch})
	other, _ := tend.Open(root, tend.Options{Session: "agent-8", Watcher: watch})

	if _, err := other.Start(ctx, "theirs", tend.Request{Shell: "sleep 60"}); err != nil {
		log.Fatal(err)
	}
	if _, err := agent.Start(ctx, "mine", tend.Request{Argv: []string{"true"}}); err != nil {
		log.Fatal(err)
	}
	runs, _ := agent.List(ctx, tend.Filter{})
	for _, r := range runs {
		fmt.Println("listed:", r.ID, r.Session)
	}
	_, err := agent.Cancel(ctx, "theirs", tend.Control{})
	fmt.Println(errors.Is(err, tend.ErrRefused), err)
	o, err := other.Cancel(ctx, "theirs", tend.Control{Grace: time.Second})
	fmt.Println(o.Outcome, err)
	// Output:
	// listed: mine agent-7
	// true cancel theirs: not_permitted: run theirs belongs to session agent-8, not to session agent-7
	// canceled <nil>
}

// Read a run's output as it grows, by absolute offset: each read starts
// where the last one ended, so no byte is read twice or skipped.
func ExampleClient_ReadLog() {
	root, cleanup := scratchRoot()
	defer cleanup()
	ctx := context.Background()
	client, _ := tend.Open(root, tend.Options{Watcher: &tend.WatcherOptions{Executable: "tend"}})
	client.Start(ctx, "count", tend.Request{Shell: "for i in 1 2 3; do echo line $i; done"})
	client.Wait(ctx, "count")

	var offset int64
	for {
		sl, err := client.ReadLog(ctx, "count", tend.Stdout, offset, 7) // 7 bytes a read
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%d-%d: %q\n", sl.Offset, sl.Next, sl.Data)
		offset = sl.Next
		if sl.EOF && sl.Final {
			break
		}
	}
	// Output:
	// 0-7: "line 1\n"
	// 7-14: "line 2\n"
	// 14-21: "line 3\n"
}

// Wait at most a while: the context's deadline ends the wait, not the
// run, and the record as last read says where it is.
func ExampleClient_WaitFor() {
	root, cleanup := scratchRoot()
	defer cleanup()
	client, _ := tend.Open(root, tend.Options{Watcher: &tend.WatcherOptions{Executable: "tend"}})
	client.Start(context.Background(), "svc", tend.Request{Shell: `touch "$TEND_READY"; exec sleep 60`, ReadyFile: true})

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run, err := client.WaitFor(ctx, "svc", tend.Ready)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(run.State, tend.Ready(run))

	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	run, err = client.Wait(short, "svc")
	fmt.Println(run.State, errors.Is(err, context.DeadlineExceeded))
	// Output:
	// running true
	// running true
}

// List runs with filters: here, the failed ones labeled kind=test.
func ExampleClient_List() {
	root, cleanup := scratchRoot()
	defer cleanup()
	ctx := context.Background()
	client, _ := tend.Open(root, tend.Options{Watcher: &tend.WatcherOptions{Executable: "tend"}})
	test := map[string]string{"kind": "test"}
	client.Start(ctx, "unit", tend.Request{Shell: "exit 0", Labels: test})
	client.Start(ctx, "lint", tend.Request{Shell: "exit 1", Labels: test})
	client.Start(ctx, "build", tend.Request{Shell: "exit 2"})
	for _, id := range []string{"unit", "lint", "build"} {
		client.Wait(ctx, id)
	}
	runs, err := client.List(ctx, tend.Filter{States: []string{"failed"}, Labels: test})
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range runs {
		fmt.Println(r.ID, r.State, *r.ExitCode)
	}
	_, err = client.List(ctx, tend.Filter{States: []string{"runing"}})
	fmt.Println(err)
	// Output:
	// lint failed 1
	// no state "runing" (did you mean "running"?): states are queued, starting, running, paused, backoff, stopping, completed, failed, canceled, timed_out
}

// Signal a run's process group, then delete the run once it has ended.
func ExampleClient_Signal() {
	root, cleanup := scratchRoot()
	defer cleanup()
	ctx := context.Background()
	client, _ := tend.Open(root, tend.Options{Watcher: &tend.WatcherOptions{Executable: "tend"}})
	client.Start(ctx, "web", tend.Request{Shell: "exec sleep 60"})

	o, err := client.Signal(ctx, "web", "TERM", tend.Control{})
	fmt.Println(o, err)
	run, _ := client.Wait(ctx, "web")
	fmt.Println(run.State, run.Signal)
	outcomes, _ := client.Delete(ctx, tend.Control{}, "web", "nosuch")
	for _, o := range outcomes {
		fmt.Println(o.ID, o.Outcome)
	}
	// Output:
	// signaled: SIGTERM <nil>
	// failed SIGTERM
	// web deleted
	// nosuch not_found
}

// Every ID, session, label and duration is checked as the spool checks it
// before anything is written: no argument can name a path or an option.
func ExampleCheckID() {
	for _, id := range []string{"build-7", "--all", "../etc", "a/b"} {
		fmt.Println(id, tend.CheckID(id))
	}
	// Output:
	// build-7 <nil>
	// --all id "--all" starts with "-"
	// ../etc id "../etc" starts with "."
	// a/b id "a/b" has "/" at byte 1: ids use only ASCII letters, digits, '.', '_' and '-'
}

// scratchRoot returns a new root in a temporary directory, and a function
// that stops its watcher (tend down) and removes it.
func scratchRoot() (string, func()) {
	dir, err := os.MkdirTemp("", "tend-example-")
	if err != nil {
		log.Fatal(err)
	}
	root := filepath.Join(dir, ".tend")
	return root, func() {
		exec.Command("tend", "--root", root, "down").Run()
		os.RemoveAll(dir)
	}
}
