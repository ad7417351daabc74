package tend

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/tendhq/tend/procfs"
	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
	"golang.org/x/sys/unix"
)

// Outcome is the watcher's answer to one request (docs/protocol.md,
// "Outcomes"; docs/schema/outcome.schema.json).
type Outcome struct {
	ID      string `json:"id"`
	Verb    string `json:"verb"`
	Outcome string `json:"outcome"`
	Detail  string `json:"detail,omitempty"`
}

// String returns the outcome as its file holds it: "outcome[: detail]".
func (o Outcome) String() string {
	if o.Detail == "" {
		return o.Outcome
	}
	return o.Outcome + ": " + o.Detail
}

// Err returns nil if the outcome says the request did what it asked (or,
// for start, that the run exists), else an *OutcomeError.
func (o Outcome) Err() error {
	switch o.Outcome {
	case spool.Accepted, spool.Updated, spool.Canceled, spool.Deleted, spool.Signaled, spool.Restarted, spool.Paused, spool.Resumed:
		return nil
	}
	return &OutcomeError{o}
}

// An OutcomeError is an outcome that is not a success. It matches
// ErrNotFound (not_found), ErrFinished (already_finished), ErrConflict
// (conflict) or ErrRefused (every other).
type OutcomeError struct {
	Outcome Outcome
}

func (e *OutcomeError) Error() string {
	return fmt.Sprintf("%s %s: %s", e.Outcome.Verb, e.Outcome.ID, e.Outcome)
}

// Unwrap returns the kind of the outcome: ErrNotFound, ErrFinished,
// ErrConflict or ErrRefused.
func (e *OutcomeError) Unwrap() error {
	switch e.Outcome.Outcome {
	case spool.NotFound:
		return ErrNotFound
	case spool.AlreadyFinished:
		return ErrFinished
	case spool.Conflict:
		return ErrConflict
	}
	return ErrRefused
}

// request is a request to submit.
type request struct {
	name spool.Name
	body []byte
	ino  uint64 // of the file written, once it is
}

// submit writes every request into the spool, then waits for all of their
// outcomes, so that requests that each take a while (cancels wait for
// their run to end) are carried out side by side. Control requests get a
// tag of their own (see docs/protocol.md, "Request names"), so clients
// acting on one run at once neither replace each other's requests nor
// read each other's answers; their outcome files are removed once read. A
// start request replaces nothing: one of the same name already in the
// spool fails the call.
func (c *Client) submit(ctx context.Context, reqs []request) ([]Outcome, error) {
	if err := c.dir.Make(); err != nil {
		return nil, err
	}
	if err := c.autoStart(ctx); err != nil {
		return nil, err
	}
	owner := c.answeredAs() // once: where every answer is looked for
	for i := range reqs {
		if reqs[i].name.Verb != spool.VerbStart {
			reqs[i].name.Tag = newTag()
		}
		reqs[i].name.Owner = owner
	}
	// An outcome from an earlier request of the same name must not be
	// taken for this one's: it is removed, or where this user may not (a
	// shared root's outcomes/ is the watcher's), known by its inode: an
	// answer replaces it atomically, so a new one is a new inode.
	stale := make(map[spool.Name]uint64)
	for i, r := range reqs {
		if err := os.Remove(c.dir.OutcomePath(r.name)); errors.Is(err, os.ErrPermission) {
			var st unix.Stat_t
			if unix.Stat(c.dir.OutcomePath(r.name), &st) == nil {
				stale[r.name] = st.Ino
			}
		} else if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("cannot submit %s: %w", r.name, err)
		}
		ino, err := c.dir.SubmitFile(r.name, r.body, r.name.Verb != spool.VerbStart)
		if err != nil {
			return nil, fmt.Errorf("cannot submit %s: %w", r.name, err)
		}
		reqs[i].ino = ino
	}
	outcomes := make([]Outcome, len(reqs))
	done := 0
	watcher := c.checkWatcher()
	late := lateCheck{due: time.Now().Add(lateAfter)}
	err := c.watchAnswers(ctx, owner, func() (bool, error) {
		for done < len(reqs) {
			n := reqs[done].name
			if reason, ok := c.movedAside(n, reqs[done].ino); ok {
				outcomes[done] = Outcome{ID: n.ID, Verb: n.Verb, Outcome: spool.Rejected, Detail: reason}
				done++
				continue
			}
			if ino, ok := stale[n]; ok {
				var st unix.Stat_t
				if unix.Stat(c.dir.OutcomePath(n), &st) != nil || st.Ino == ino {
					break
				}
			}
			outcome, detail, read, err := c.dir.ReadOutcomeFile(n)
			if err != nil {
				break
			}
			if n.Verb == spool.VerbStart {
				var mine bool
				if outcome, detail, mine = c.startAnswer(n, reqs[done].ino, outcome, detail); !mine {
					// Another's: wait for the next answer. The one read, not
					// the name's now, which may be this client's already:
					// taken for another's, it was waited past for ever.
					stale[n] = read
					break
				}
			}
			outcomes[done] = Outcome{ID: n.ID, Verb: n.Verb, Outcome: outcome, Detail: detail}
			if n.Tag != "" {
				os.Remove(c.dir.OutcomePath(n)) // read: nobody else needs it
			}
			done++
		}
		if done == len(reqs) {
			return true, nil
		}
		if watcher.gone() {
			return false, errorf(ErrNoWatcher, "no watcher is running on %s: the request waits in %s until one starts (run: tend up)",
				c.root, c.spoolPath(reqs[done].name))
		}
		late.check(c, reqs[done].name)
		return false, nil
	})
	return outcomes, err
}

// lateAfter is how long a client waits for an answer before it looks for
// a reason, one it can tell its user, why the answer is late. A start is
// answered in milliseconds; a cancel, once its run has ended.
const lateAfter = 5 * time.Second

// A lateCheck tells a client's Late why an answer is late, once.
type lateCheck struct {
	due  time.Time // when to look next
	said bool
}

// check tells c's Late, once, that the answer to n is late because the
// watcher is stopped (SIGSTOP, or Ctrl-Z where it runs in a terminal:
// alive, it is not found gone, and answers nothing until continued),
// because the watcher's disk failed a flush in this boot (a watcher
// answers only what is on disk, and waits as long as it cannot write
// there), or because the root's file system is full (a watcher that
// cannot append to the history holds its answers). It looks once a
// second from lateAfter on.
func (l *lateCheck) check(c *Client, n spool.Name) {
	now := time.Now()
	if c.late == nil || l.said || now.Before(l.due) {
		return
	}
	l.due = now.Add(time.Second)
	if pid := stoppedWatcher(c.root); pid != 0 {
		l.said = true
		c.late(fmt.Sprintf("no answer to %s.%s yet: the watcher (pid %d) is stopped (SIGSTOP, or Ctrl-Z where it runs in a terminal), and answers nothing until it is continued (kill -CONT %d)",
			n.ID, n.Verb, pid, pid))
		return
	}
	boot, err := procfs.BootID()
	if err != nil {
		return
	}
	if failure, thisBoot := tracker.RecordedSyncFailure(c.root, boot); thisBoot {
		l.said = true
		c.late(fmt.Sprintf("no answer to %s.%s yet: the watcher's disk failed a flush (%s); the watcher answers once what it writes is on disk, and this waits for it (see tend status)",
			n.ID, n.Verb, failure))
		return
	}
	var fs unix.Statfs_t
	if unix.Statfs(c.root, &fs) == nil {
		if full := fullText(fs); full != "" {
			l.said = true
			c.late(fmt.Sprintf("no answer to %s.%s yet: the root's file system is %s; while the watcher cannot append to the history it holds every answer, and this waits for it (see tend status)",
				n.ID, n.Verb, full))
		}
	}
}

// stoppedWatcher returns the PID of the watcher of root if it runs but
// is stopped (job control or a tracer), else 0.
func stoppedWatcher(root string) int {
	running, pid, err := tracker.ProbeWatcher(root)
	if err != nil || !running || pid <= 0 {
		return 0
	}
	if st, err := procfs.ReadStat(pid); err == nil && (st.State == 'T' || st.State == 't') {
		return pid
	}
	return 0
}

// fullText says how a file system, as statfs(2) found it, is full (out
// of space, as tend status counts it: under 1 MiB free; or of inodes), or
// returns "". A watcher that cannot append a change to the history holds
// every answer, and a client that waited in silence looked hung.
func fullText(fs unix.Statfs_t) string {
	switch free := int64(fs.Bavail) * fs.Bsize; {
	case free < 1<<20:
		return fmt.Sprintf("full (%d bytes free)", free)
	case fs.Files > 0 && fs.Ffree < 100:
		return fmt.Sprintf("out of inodes (%d free)", fs.Ffree)
	}
	return ""
}

// startAnswer tells whether outcome (with detail), read for start request
// n, answers this client's own request, whose file had inode ino, and
// what it means for it. Clients of one user share the answer to a name:
// two that start the same ID at once (two sessions of an agent) each
// remove the answer there and wait for the next, and either may read the
// other's. Where its own file went decides, since the watcher moves a
// request, never copies it: into the run's directory, the run is its
// own, accepted, whatever the answer says (another's request of the same
// name was rejected after it); where another's request made the run,
// only a rejection answers it, once it has left the spool; still in the
// spool, with no run of another's request, only accepted (a queued run)
// answers it; elsewhere, it was moved aside, and the answer is its own
// (submit looks in rejected/ first: see movedAside).
// A client that cannot look (another user's run directory) takes the
// answer as it is.
func (c *Client) startAnswer(n spool.Name, ino uint64, outcome, detail string) (string, string, bool) {
	var taken, waiting unix.Stat_t
	inRun := unix.Lstat(c.store.Run(n.ID).Request(), &taken) == nil
	inSpool := unix.Lstat(c.spoolPath(n), &waiting) == nil
	switch {
	case ino == 0:
		return outcome, detail, true
	case inRun && taken.Ino == ino:
		if outcome != spool.Accepted {
			return spool.Accepted, "", true
		}
		return outcome, detail, true
	case inRun: // made from another's request
		return outcome, detail, outcome != spool.Accepted && !(inSpool && waiting.Ino == ino)
	case inSpool && waiting.Ino == ino:
		return outcome, detail, outcome == spool.Accepted
	}
	return outcome, detail, true
}

// movedAside returns the reason start request n, whose file had inode
// ino, was rejected with, once the watcher has moved that file into
// rejected/. Its answer may never come: the watcher leaves the answer
// to a second start's name as it is when its writer could have removed
// it and did not (docs/protocol.md, "When a request is taken"), and
// another client of this user that started the same ID at once may have
// been answered there after this one removed it. The request's own file
// says what became of it, whatever the answer there says.
func (c *Client) movedAside(n spool.Name, ino uint64) (string, bool) {
	if n.Verb != spool.VerbStart || ino == 0 {
		return "", false
	}
	var waiting, taken unix.Stat_t
	if unix.Lstat(c.spoolPath(n), &waiting) == nil && waiting.Ino == ino ||
		unix.Lstat(c.store.Run(n.ID).Request(), &taken) == nil && taken.Ino == ino {
		return "", false // waiting, or taken: not aside
	}
	return c.dir.RejectedReason(n.String(), ino)
}

// answeredAs returns whose requests the watcher answers this client's as
// (spool.Name.Owner): its own, its user's; or, while a watcher of tend
// before 2026-11-28 runs (a package upgraded under a running watcher),
// which answered every request in outcomes/, root's, whose answers are
// there.
func (c *Client) answeredAs() int {
	uid := os.Geteuid()
	if c.dir.OutcomesOf(uid) == c.dir.Outcomes() {
		return uid
	}
	if info, alive := c.LiveInfo(); alive && !info.AnswersByOwner {
		return 0
	}
	return uid
}

// watchAnswers calls check as watchUntil does, on changes in the
// directory of uid's answers (spool.Dir.OutcomesOf), and in outcomes/
// until that is there.
func (c *Client) watchAnswers(ctx context.Context, uid int, check func() (bool, error)) error {
	dir := c.dir.OutcomesOf(uid)
	if dir == c.dir.Outcomes() {
		return c.watchUntil(ctx, dir, answerEvery, check)
	}
	return c.watchUntilIn(ctx, c.dir.Outcomes(), dir, answerEvery, check)
}

// submitOne submits one request and returns its outcome, and the outcome's
// error if it is not a success.
func (c *Client) submitOne(ctx context.Context, n spool.Name, body []byte) (Outcome, error) {
	outcomes, err := c.submit(ctx, []request{{name: n, body: body}})
	if err != nil {
		return Outcome{ID: n.ID, Verb: n.Verb}, err
	}
	return outcomes[0], outcomes[0].Err()
}

// newTag returns a random request tag.
func newTag() string {
	var b [6]byte
	rand.Read(b[:])
	return "c" + hex.EncodeToString(b[:])
}
