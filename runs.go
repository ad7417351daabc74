package tend

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/tendhq/tend/procfs"
	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
	"github.com/tendhq/tend/tracker/durable"
	"github.com/tendhq/tend/tracker/layout"
	"golang.org/x/sys/unix"
)

// Start submits a request to start run id ("" for an ID made from the
// command, see MakeID) and returns the run's record once the watcher has
// taken it: running, queued, or failed if it could not start. The run
// belongs to the client's session: a request that names another one is
// invalid. The request is checked by the watcher's own parser before it
// is written. A rejected request is an error wrapping ErrRefused; with no
// watcher running (and none started), the request waits in the spool and
// the error wraps ErrNoWatcher.
func (c *Client) Start(ctx context.Context, id string, req Request) (*Record, error) {
	id, o, err := c.start(ctx, id, req)
	if err != nil {
		return nil, err
	}
	st, err := c.store.Read(id)
	if err != nil {
		return nil, fmt.Errorf("start %s: %s, but its record cannot be read: %w", id, o, err)
	}
	return st, nil
}

// StartHead is Start for a caller that needs only the Head of the run's
// record, such as whether it failed to start: in a process that has read
// no record, it costs a tenth of reading one whole (tracker.ReadHead).
func (c *Client) StartHead(ctx context.Context, id string, req Request) (Head, error) {
	id, o, err := c.start(ctx, id, req)
	if err != nil {
		return Head{}, err
	}
	h, err := c.store.ReadHead(id)
	if err != nil {
		return Head{}, fmt.Errorf("start %s: %s, but its record cannot be read: %w", id, o, err)
	}
	return h, nil
}

// start submits a start request for Start and StartHead, and returns the
// run's ID and the request's outcome.
func (c *Client) start(ctx context.Context, id string, req Request) (string, Outcome, error) {
	if id == "" {
		id = MakeID(req.Args())
	} else if err := CheckID(id); err != nil {
		return id, Outcome{}, err
	}
	switch {
	case req.Session == "":
		req.Session = c.session
	case c.session != "" && req.Session != c.session:
		return id, Outcome{}, invalidf("start %s: the request names session %s, but the client acts as session %s", id, req.Session, c.session)
	}
	body, err := Body(req)
	if err != nil {
		return id, Outcome{}, err
	}
	o, err := c.submitOne(ctx, spool.Name{ID: id, Verb: spool.VerbStart}, body)
	return id, o, err
}

// Body returns the body of a start request for req, after checking it
// with the parser the watcher uses: an error wrapping ErrInvalid says what
// is wrong with it (a field, an environment name, a label, a duration).
func Body(req Request) ([]byte, error) {
	if req.Shell == "" && len(req.Argv) == 0 {
		return nil, invalidf("the command is empty")
	}
	body, err := req.MarshalJSON()
	if err == nil && len(body) > spool.MaxBody {
		return nil, checkSize(spool.VerbStart, body)
	}
	if err == nil {
		var s spool.Start
		if s, err = spool.ParseStart(body); err == nil {
			err = s.CheckNew()
		}
	}
	if err != nil {
		return nil, invalidf("%v", err)
	}
	return body, nil
}

// MakeID makes a readable, unique run ID from a command's first word,
// such as make-3f9a1c.
func MakeID(argv []string) string {
	first := "run"
	switch {
	case len(argv) == 3 && argv[0] == "/bin/sh" && argv[1] == "-c":
		if f := strings.Fields(argv[2]); len(f) > 0 {
			first = f[0] // a shell command line: its first word
		}
	case len(argv) > 0:
		first = argv[0]
	}
	word := filepath.Base(first)
	var b strings.Builder
	for i := 0; i < len(word) && b.Len() < 20; i++ {
		if c := word[i]; 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' {
			b.WriteByte(c)
		}
	}
	if b.Len() == 0 || b.String()[0] == '-' {
		b.Reset()
		b.WriteString("run")
	}
	var r [3]byte
	rand.Read(r[:])
	return b.String() + "-" + hex.EncodeToString(r[:])
}

// Show returns run id's record. A run with none is an error wrapping
// ErrNotFound, which says if its start request waits in the spool; one
// of another user's, in a shared root, an error wrapping ErrRefused. Its
// seal is not checked: see Verify.
func (c *Client) Show(ctx context.Context, id string) (*Record, error) {
	if err := CheckID(id); err != nil {
		return nil, err
	}
	st, err := c.read(id)
	if errors.Is(err, tracker.ErrNotFound) {
		return nil, c.notFound(id)
	}
	return st, err
}

// read reads run id's record. One this client's user may not read, in a
// run directory of another user's (a shared root), is an error wrapping
// ErrRefused that says so, as a control request about it is answered
// not_permitted: "permission denied" alone read as a fault of the root.
// It names the owner's uid, as that answer does, which anyone who may
// list runs/ sees, and nothing of the run.
func (c *Client) read(id string) (*Record, error) {
	st, err := c.store.Read(id)
	if err == nil || !errors.Is(err, os.ErrPermission) {
		return st, err
	}
	var fi unix.Stat_t
	if unix.Lstat(c.store.RunDir(id), &fi) != nil || int(fi.Uid) == os.Geteuid() {
		return nil, err
	}
	return nil, errorf(ErrRefused, "run %s is another user's (not_permitted): it belongs to uid %d, not to uid %d, and only its owner and root may read its record and output", id, fi.Uid, os.Geteuid())
}

// Verify returns an error wrapping tracker.ErrUnsealed if record st is
// not one this root's watcher wrote, as its seal says, where this
// client's user may read the root's key (the watcher's user: root, in a
// shared root). So a record a run's owner wrote in its directory is not
// taken for the watcher's by those who act on what the watcher says.
// Other users cannot tell: for them it returns nil, as for a root whose
// key is not made yet.
func (c *Client) Verify(st *Record) error {
	key, _, err := tracker.LoadKey(c.root, false)
	if err != nil {
		return nil
	}
	return st.CheckSeal(key)
}

// Filter selects runs for List. The zero Filter selects the active runs
// and those that ended in the last 24 hours.
type Filter struct {
	// All selects every run, however long ago it ended.
	All bool
	// States, if any, are the states to list (see tracker.States).
	States []string
	// Session selects one session's runs. A client that acts as a session
	// lists only that session's runs whatever this says: another session
	// here is invalid.
	Session string
	// Labels selects the runs that carry every one of these labels.
	Labels map[string]string
	// Since selects the runs created within this long.
	Since time.Duration
	// Brief reads only what tend ls's table shows of each finished run
	// (its state, times, exit, command, labels, progress), from the
	// root's list cache where the record is unchanged: much faster for
	// long lists. Brief records have no reason, notes or service details.
	Brief bool
}

// Listed is a run as List returns it (docs/schema/ls.schema.json): its
// record, its position if it is queued, and what it does now if it is
// live.
type Listed struct {
	*Record
	// Position is its place in the queue, from 1, if it is queued.
	Position int `json:"position,omitempty"`
	// Usage is what its process group uses now, if it is live.
	Usage *Usage `json:"usage,omitempty"`
	// QuietFor is how long its output has not grown, in seconds, and
	// LastLine its last line of output, for a live run: liveness signals
	// where it reports no progress.
	QuietFor *float64 `json:"quiet_seconds,omitempty"`
	LastLine string   `json:"last_line,omitempty"`
}

// Usage is a live run's process group's use of the machine, read from
// /proc when asked.
type Usage struct {
	CPUSeconds float64 `json:"cpu_seconds"`
	RSSBytes   int64   `json:"rss_bytes"`
	Procs      int     `json:"procs"`
}

// RecordErrors are the records List could not read (each error names its
// file): the runs it returns are the others.
type RecordErrors []error

func (e RecordErrors) Error() string {
	return fmt.Sprintf("%d run record%s could not be read: %v", len(e), plural(len(e)), errors.Join(e...))
}

// Unwrap returns the errors, for errors.Is and errors.As.
func (e RecordErrors) Unwrap() []error { return e }

// List returns the runs f selects, oldest first, described (see
// Describe). Records that cannot be read are left out and reported in an
// error of type RecordErrors, beside the runs that could be read.
func (c *Client) List(ctx context.Context, f Filter) ([]Listed, error) {
	if err := c.checkFilter(&f); err != nil {
		return nil, err
	}
	list := c.store.List
	if f.Brief {
		list = c.store.ListBrief
	}
	runs, errs := list()
	now := time.Now()
	var shown []*Record
	for _, st := range runs {
		if f.match(st, now) {
			shown = append(shown, st)
		}
	}
	out := c.Describe(shown...)
	if len(errs) > 0 {
		return out, RecordErrors(errs)
	}
	return out, nil
}

// checkFilter checks f's states, session and labels, and scopes it to the
// client's session.
func (c *Client) checkFilter(f *Filter) error {
	for _, s := range f.States {
		if err := CheckState(s); err != nil {
			return err
		}
	}
	if f.Session != "" {
		if err := spool.ValidID(f.Session); err != nil {
			return invalidf("%s", strings.Replace(err.Error(), "id", "session", 1))
		}
	}
	switch {
	case c.session == "":
	case f.Session == "":
		f.Session = c.session
	case f.Session != c.session:
		return invalidf("this client acts as session %s: it lists no other session's runs", c.session)
	}
	for k := range f.Labels {
		if k == "" {
			return invalidf("a label's key is empty")
		}
	}
	if f.Since < 0 {
		return invalidf("since: %v is negative", f.Since)
	}
	return nil
}

// match reports whether st passes the filter.
func (f *Filter) match(st *Record, now time.Time) bool {
	if !f.All && tracker.Final(st.State) && st.EndedAt != nil && now.Sub(*st.EndedAt) > 24*time.Hour {
		return false
	}
	if len(f.States) > 0 && !slices.Contains(f.States, string(st.State)) {
		return false
	}
	if f.Session != "" && st.Session != f.Session {
		return false
	}
	if f.Since > 0 && now.Sub(st.CreatedAt) > f.Since {
		return false
	}
	for k, v := range f.Labels {
		if got, ok := st.Labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Describe returns each record with its position in the queue, and, for
// a live run, what its process group uses (from one pass over /proc), how
// long its output has been quiet and its last line of output.
func (c *Client) Describe(runs ...*Record) []Listed {
	positions := c.queuePositions()
	use := liveUsage(runs)
	now := time.Now()
	out := make([]Listed, 0, len(runs))
	for _, st := range runs {
		out = append(out, Listed{Record: st, Position: positions[st.ID], Usage: use[st.ID], QuietFor: c.quietFor(st, now), LastLine: c.lastLine(st)})
	}
	return out
}

// queuePositions reads ROOT/queue: the queued runs' positions, from 1.
// Only a regular file, not through a link, and no larger than a queue of
// every run could be: anything else put there (a FIFO would hang the
// read) leaves positions out.
func (c *Client) queuePositions() map[string]int {
	b, _, _ := durable.ReadRegular(layout.Root(c.root).Queue(), maxQueueFile)
	pos := make(map[string]int)
	for i, id := range strings.Fields(string(b)) {
		pos[id] = i + 1
	}
	return pos
}

// maxQueueFile is the largest ROOT/queue read: a million queued IDs of
// the longest kind.
const maxQueueFile = 256 << 20

// Live reports whether the run r records has a live process group.
func Live(r *Record) bool {
	return r.PGID > 0 && (r.State == tracker.Running || r.State == tracker.Starting || r.State == tracker.Stopping || r.State == tracker.Paused)
}

// liveUsage returns the usage of every live run among runs, from one pass
// over /proc.
func liveUsage(runs []*Record) map[string]*Usage {
	groups := make(map[int]bool)
	for _, st := range runs {
		if Live(st) {
			groups[st.PGID] = true
		}
	}
	out := make(map[string]*Usage)
	if len(groups) == 0 {
		return out
	}
	got, _ := procfs.GroupUsage(groups)
	for _, st := range runs {
		if u, ok := got[st.PGID]; ok && Live(st) {
			out[st.ID] = &Usage{CPUSeconds: u.CPUSeconds, RSSBytes: u.RSSBytes, Procs: u.Procs}
		}
	}
	return out
}

// quietFor returns how long a live run's output has not grown.
func (c *Client) quietFor(st *Record, now time.Time) *float64 {
	if !Live(st) || st.StartedAt == nil {
		return nil
	}
	latest := *st.StartedAt
	for _, name := range []string{"stdout", "stderr"} {
		if fi, err := os.Stat(c.store.Run(st.ID).Stream(name)); err == nil && fi.ModTime().After(latest) {
			latest = fi.ModTime()
		}
	}
	q := now.Sub(latest).Seconds()
	return &q
}

// lastLine returns the last non-empty line of a live run's stdout (or
// stderr, if stdout has none), from its last 4 KiB.
func (c *Client) lastLine(st *Record) string {
	if !Live(st) {
		return ""
	}
	for _, name := range []string{"stdout", "stderr"} {
		size := c.store.OutputSize(st, name)
		sl, err := c.store.ReadOutput(st, name, max(0, size-4096), 4096)
		if err != nil {
			continue
		}
		if line := strings.TrimSpace(string(LastLines(sl.Data, 1))); line != "" {
			return strings.ToValidUTF8(line, "?")
		}
	}
	return ""
}

// LastLines returns the last n lines of data.
func LastLines(data []byte, n int) []byte {
	end := len(data)
	if end > 0 && data[end-1] == '\n' {
		end--
	}
	for i := end - 1; i >= 0; i-- {
		if data[i] == '\n' {
			n--
			if n == 0 {
				return data[i+1:]
			}
		}
	}
	return data
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
