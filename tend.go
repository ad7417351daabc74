// Package tend is the Go client of tend, a process supervisor for Linux
// driven by plain files. A Client starts runs, lists and reads them, waits
// for them and controls them through the files of a tend root, exactly as
// a shell script or the tend command does: it writes requests into the
// root's spool, reads the watcher's outcomes and the runs' state files,
// and never talks to the watcher otherwise (docs/protocol.md is the
// contract).
//
// Every method takes a context first, and returns when it ends. Every ID,
// session, label and duration a method is given is checked by the spool
// package's own validators before anything is written, so that nothing a
// caller passes can name a file outside the root or be taken for an
// option; a bad one is an error wrapping ErrInvalid.
package tend

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
	"golang.org/x/sys/unix"
)

// Record is a run's record, as its state.json holds it.
type Record = tracker.State

// Head is the part of a run's record that says where it stands.
type Head = tracker.Head

// Request is what a start request asks for: the command and how to run it.
type Request = spool.Start

// A Client acts on one tend root, as one session or, with none, as the
// operator of the runs of its Unix user.
//
// A session scopes what a client sees and changes: the runs it starts
// belong to its session, List shows only them, and the watcher lets its
// control requests (cancel, signal, delete, ...) act only on them. It is
// not a permission boundary: any client may name any session, and any
// client may read any run by its ID, as anyone who can read the root's
// files can. The Unix user is the boundary.
type Client struct {
	root    string
	session string
	watch   *WatcherOptions
	late    func(string)
	dir     spool.Dir
	store   *tracker.Store
	// historyOpened, if set (by tests), is called by Events with follow
	// once it has the history's files, before it reads them: where a
	// rotation once made it skip a file's events.
	historyOpened func()
	waiter        // how it waits for files to change
}

// Options configure a Client.
type Options struct {
	// Session is the session the client acts as ("" for none: the
	// operator). It follows the ID rule (spool.ValidID).
	Session string
	// Watcher, if set, says how to start a watcher when a request finds
	// none running, as tend up would. Without it, such a request is left
	// in the spool for the next watcher, and the call fails with
	// ErrNoWatcher.
	Watcher *WatcherOptions
	// Late, if set, is told once a call, with a line for its user, when
	// an answer is late for a reason the client can see: the watcher's
	// disk failed a flush in this boot, and the watcher holds answers
	// until what it writes is on disk; the root's file system is full,
	// and the watcher holds answers until it can append to the history;
	// or the watcher is stopped (SIGSTOP, Ctrl-Z), and answers nothing
	// until it is continued. The call goes on waiting.
	Late func(notice string)
}

// WithLate returns a copy of c whose calls tell late, not c's Late, why
// an answer is late: for a caller that answers for each call (tend mcp
// makes a late answer its tool's error), not on one stderr.
func (c *Client) WithLate(late func(notice string)) *Client {
	d := *c
	d.late = late
	return &d
}

// Open returns a client of the tend root at root (made absolute). The root
// need not exist yet: the first request makes it.
func Open(root string, opts Options) (*Client, error) {
	if root == "" {
		return nil, invalidf("the root is empty")
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	if opts.Session != "" {
		if err := spool.ValidID(opts.Session); err != nil {
			return nil, invalidf("%s", strings.Replace(err.Error(), "id", "session", 1))
		}
	}
	return &Client{root: abs, session: opts.Session, watch: opts.Watcher, late: opts.Late, dir: spool.Dir{Root: abs}, store: tracker.NewStore(abs)}, nil
}

// FindRoot returns the root a client in directory dir uses when none is
// named: the nearest .tend directory at or above dir, else dir/.tend. One
// found there that belongs to another user than this one and root (or a
// link to one, or a link of theirs) is an error: anyone may make a .tend
// in /tmp or a shared directory above someone's work, and take their
// requests (as git refuses a repository that another user owns). Such a
// root is used only when named (--root, TEND_ROOT): a shared root is
// root's.
func FindRoot(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	uid := uint32(os.Geteuid())
	for d := dir; ; d = filepath.Dir(d) {
		path := filepath.Join(d, ".tend")
		var link, st unix.Stat_t
		if unix.Lstat(path, &link) == nil && unix.Stat(path, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			for _, owner := range []uint32{link.Uid, st.Uid} {
				if owner != uid && owner != 0 {
					return "", fmt.Errorf("%s belongs to uid %d, not to you or root: a root found above the working directory is used only if it is yours (name it with --root or TEND_ROOT to use it)", path, owner)
				}
			}
			return path, nil
		}
		if d == filepath.Dir(d) {
			return filepath.Join(dir, ".tend"), nil
		}
	}
}

// Root returns the client's root, an absolute path.
func (c *Client) Root() string { return c.root }

// Session returns the session the client acts as ("" for none).
func (c *Client) Session() string { return c.session }

// Path returns the path of file name (stdout, state.json, ...) in run
// id's directory, or "" if id is not a valid ID (see CheckID).
func (c *Client) Path(id, name string) string {
	if spool.ValidID(id) != nil {
		return ""
	}
	return c.store.Run(id).Stream(name)
}

// Errors that a Client's methods wrap, for errors.Is.
var (
	// ErrInvalid: an argument is not valid (an ID, a session, a label, a
	// duration, a signal, a state); nothing was written.
	ErrInvalid = errors.New("invalid argument")
	// ErrNotFound: no run has the ID (or, for a request, the watcher
	// answered not_found).
	ErrNotFound = errors.New("not found")
	// ErrNoWatcher: no watcher runs on the root and the client starts
	// none; the request waits in the spool until one starts.
	ErrNoWatcher = errors.New("no watcher is running")
	// ErrRefused: the watcher refused the request (rejected,
	// not_permitted, not_cancellable, still_active, not_running).
	ErrRefused = errors.New("refused")
	// ErrFinished: the run had already ended (already_finished).
	ErrFinished = errors.New("already finished")
	// ErrConflict: the record moved on from the revision the request
	// named (conflict).
	ErrConflict = errors.New("conflict")
)

// kindError is an error whose message says all, for people, and which
// matches one of the errors above (its kind) for programs.
type kindError struct {
	msg  string
	kind error
}

func (e *kindError) Error() string { return e.msg }
func (e *kindError) Unwrap() error { return e.kind }

// errorf returns an error of kind with the message format makes.
func errorf(kind error, format string, args ...any) error {
	return &kindError{msg: fmt.Sprintf(format, args...), kind: kind}
}

func invalidf(format string, args ...any) error { return errorf(ErrInvalid, format, args...) }

// CheckID returns an error wrapping ErrInvalid if id is not a valid run
// ID (spool.ValidID), else nil.
func CheckID(id string) error {
	if err := spool.ValidID(id); err != nil {
		return invalidf("%v", err)
	}
	return nil
}

// CheckState returns an error wrapping ErrInvalid if state is not one of
// tracker.States, naming the states (and the one meant, for a near miss).
func CheckState(state string) error {
	if slices.Contains(tracker.States, tracker.StateName(state)) {
		return nil
	}
	states := make([]string, len(tracker.States))
	for i, s := range tracker.States {
		states[i] = string(s)
	}
	msg := fmt.Sprintf("no state %q", state)
	if s := spool.Suggest(state, states); s != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", s)
	}
	return invalidf("%s: states are %s", msg, strings.Join(states, ", "))
}

// Ended reports whether the run r records has ended: it is in a state it
// never leaves (completed, failed, canceled, timed_out).
func Ended(r *Record) bool { return tracker.Final(r.State) }

// Held reports whether the run r records is queued and held by a bad
// version of its request (docs/protocol.md, "Limits and the queue"): it
// keeps its place in the queue, but starts only once its owner writes a
// good version. Its reason says what is wrong.
func Held(r *Record) bool {
	return r.State == tracker.Queued && strings.HasPrefix(r.Reason, heldReason)
}

// heldReason begins the reason of a held run, as the watcher writes it
// (watcher's heldPrefix) and docs/protocol.md says.
const heldReason = "held: its request "

// Ready reports whether the run r records is ready: running (or paused,
// or stopping) and, if it waits for readiness (a health check or a ready
// file), past it.
func Ready(r *Record) bool {
	live := r.State == tracker.Running || r.State == tracker.Paused || r.State == tracker.Stopping
	return live && (r.ReadyAt != nil || r.Health == nil && !r.ReadyFile)
}
