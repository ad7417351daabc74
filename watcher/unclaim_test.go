package watcher

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tendhq/tend/spool"
)

// A control request of root's carried out leaves claims/ with its mark
// spent if a hard link keeps it in the spool under its own name: while
// the watcher runs, that name is no power loss's (the claim, a rename,
// took it from the spool), but a member's link, made between the claim
// and its removal where fs.protected_hardlinks=0, from a link of their
// own made while it waited. Counted as the request's own, it was left
// marked, and taken after the claim (a request of its name and owner
// waits for it): root's request carried out again, as root.
func TestUnclaimSpendsALinkInTheSpool(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the mark is root's to set and read")
	}
	w := batchWatcher(t)
	if err := w.spool.Make(); err != nil {
		t.Fatal(err)
	}
	if err := w.spool.MakeClaims(); err != nil {
		t.Fatal(err)
	}
	n := spool.Name{ID: "r", Tag: "t", Verb: spool.VerbRestart}
	taken := takenPath(w.spool, n)
	if err := os.WriteFile(taken, []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(taken, unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	spool.Mark(fd)
	unix.Close(fd)
	if v, err := getMark(taken); err != nil || v != "request" {
		t.Skipf("no trusted attributes on this file system (%q, %v)", v, err)
	}
	link := filepath.Join(w.spool.Spool(), n.String())
	if err := os.Link(taken, link); err != nil {
		t.Fatal(err)
	}
	w.claims[taken] = nil
	w.unclaim(taken)
	if _, err := os.Lstat(taken); err == nil {
		t.Fatalf("%s is still there", taken)
	}
	if v, _ := getMark(link); v == "request" {
		t.Errorf("the member's link in the spool is still marked %q: root's request would be carried out again", v)
	}
}

// getMark returns the value of tend's mark on the file at path.
func getMark(path string) (string, error) {
	buf := make([]byte, 16)
	n, err := unix.Getxattr(path, "trusted.tend", buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}
