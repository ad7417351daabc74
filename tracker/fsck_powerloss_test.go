package tracker

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tendhq/tend/tracker/crashfs"
)

// TestRepairLostReasonSurvivesPowerLoss: the reasons tend fsck --repair
// writes in rejected/ for requests whose own were lost are durable once
// Repair returns (the repair flush: the file before its name, rejected/
// after), and what it removes there first (a reason without its request,
// a reason's partial write) takes nothing they need. Checked on a
// crashfs, which keeps at a cut only what was synced (the strict model),
// each name with its directory: the power is cut as Repair returns, and
// the disk it kept is mounted again. Without the flush (make
// powerloss-mutants' build, TEND_MUTANT_NOFLUSH=repair) the reasons are
// gone, or empty.
func TestRepairLostReasonSurvivesPowerLoss(t *testing.T) {
	if err := crashfs.Prepare(); err != nil {
		if os.Getenv("TEND_REQUIRE_FUSE") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	backing, mnt := filepath.Join(t.TempDir(), "backing"), filepath.Join(t.TempDir(), "mnt")
	files := map[string]string{
		"rejected/x.start":           `{"command": "echo x"}`, // its reason gone
		"rejected/z.start":           `{"command": "echo z"}`,
		"rejected/z.start.error":     "",               // its reason emptied
		"rejected/y.start.error":     "y.start: bad\n", // its request gone
		"rejected/x.start.error4242": "",               // a reason being written
	}
	for _, dir := range []string{"", "spool", "claims", "rejected", "runs", "outcomes"} {
		must(t, os.Mkdir(filepath.Join(backing, dir), 0o700))
	}
	for name, body := range files {
		must(t, os.WriteFile(filepath.Join(backing, name), []byte(body), 0o644))
	}
	must(t, os.Mkdir(mnt, 0o755))
	f, err := crashfs.Mount(backing, mnt)
	must(t, err)
	defer f.Unmount()

	done, left, err := Repair(mnt, IdentifyRun)
	f.Freeze() // the power goes as the repair returns
	must(t, err)
	if len(left) > 0 {
		t.Fatalf("repair left %v (did %q)", left, done)
	}
	must(t, f.Unmount())
	img := filepath.Join(t.TempDir(), "image")
	_, err = f.Image(img, crashfs.Strict, rand.New(rand.NewPCG(1, 1)))
	must(t, err)

	for _, req := range []string{"x.start", "z.start"} {
		if b, err := os.ReadFile(filepath.Join(img, "rejected", req)); err != nil || string(b) != files["rejected/"+req] {
			t.Errorf("after a power loss as the repair returned, rejected/%s holds %q (%v), want its request", req, b, err)
		}
		b, err := os.ReadFile(filepath.Join(img, "rejected", req+".error"))
		if want := req + ": " + LostReason + "\n"; err != nil || string(b) != want {
			t.Errorf("after a power loss as the repair returned, the reason it wrote for rejected/%s holds %q (%v), want %q", req, b, err, want)
		}
	}
	// What it removed may come back (unsynced: the next repair removes
	// it again); a request without its reason may not.
	for _, f := range checkRejected(img) {
		if f.reasonFor != "" {
			t.Errorf("after a power loss as the repair returned: %v", f.Problem)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestExpireRejectedSurvivesPowerLoss: a power loss during the retention
// of rejected/ never leaves a request whose reason is gone (which fsck
// reports as a loss, and --repair keeps another keep_finished_for): the
// requests' removals are made durable (rejected/ synced, the
// rejected-dir flush) before their reasons go. Checked on a crashfs in
// the reordered model, which keeps any of the changes not synced, one
// directory's in any order, as ext4 without a journal may: the power is
// cut as ExpireRejected returns. Without the flush, some image keeps a
// reason's removal and not its request's.
func TestExpireRejectedSurvivesPowerLoss(t *testing.T) {
	if err := crashfs.Prepare(); err != nil {
		if os.Getenv("TEND_REQUIRE_FUSE") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	backing, mnt := filepath.Join(t.TempDir(), "backing"), filepath.Join(t.TempDir(), "mnt")
	for _, dir := range []string{"", "spool", "claims", "rejected", "runs", "outcomes"} {
		must(t, os.Mkdir(filepath.Join(backing, dir), 0o700))
	}
	const pairs = 16
	for i := range pairs {
		name := fmt.Sprintf("r%d.start", i)
		must(t, os.WriteFile(filepath.Join(backing, "rejected", name), []byte("{"), 0o600))
		must(t, os.WriteFile(filepath.Join(backing, "rejected", name+".error"), []byte(name+": bad\n"), 0o644))
	}
	must(t, os.Mkdir(mnt, 0o755))
	f, err := crashfs.Mount(backing, mnt)
	must(t, err)
	defer f.Unmount()

	n, err := ExpireRejected(mnt, time.Now().Add(time.Hour), false)
	f.Freeze() // the power goes as the sweep returns
	if err != nil || n != pairs {
		t.Fatalf("ExpireRejected = %d, %v; want %d, nil", n, err, pairs)
	}
	must(t, f.Unmount())
	for seed := range uint64(8) {
		img := filepath.Join(t.TempDir(), "image")
		_, err = f.Image(img, crashfs.Reordered, rand.New(rand.NewPCG(seed, seed)))
		must(t, err)
		for _, found := range checkRejected(img) {
			if found.reasonFor != "" {
				t.Errorf("after a power loss as the retention returned (image %d): %v", seed, found.Problem)
			}
		}
	}
}
