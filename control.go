package tend

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
	"github.com/tendhq/tend/tracker/durable"
	"golang.org/x/sys/unix"
)

// Control are the options of a control request.
type Control struct {
	// IfRev, if not 0, is the revision of the run's record the caller saw:
	// if the record has moved on, the request changes nothing and its
	// outcome is a conflict (ErrConflict).
	IfRev int64
	// Grace, for Cancel and Restart, replaces the run's own time between
	// SIGTERM and SIGKILL for this stop: 0 keeps the run's own, NoGrace
	// sends SIGKILL right after SIGTERM, and any other negative is
	// refused (a deadline's time left, computed too late, is no grace).
	Grace time.Duration
}

// NoGrace, as a Control's Grace, stops a run with no grace: SIGKILL
// right after SIGTERM (a request's "grace": "0s"), where a Grace of 0
// keeps the run's own. It is -1 exactly: other negatives are errors.
const NoGrace time.Duration = -1

// Cancel cancels run id: SIGTERM to its process group, then SIGKILL after
// the grace. It returns once the run has ended (or the watcher refused),
// with the outcome: canceled, or an error wrapping ErrFinished if it had
// ended already, ErrNotFound, or ErrRefused (another session's run,
// say). A queued run ends at once, without starting.
func (c *Client) Cancel(ctx context.Context, id string, opts Control) (Outcome, error) {
	return c.control(ctx, id, spool.VerbCancel, opts, nil)
}

// CancelAll cancels every active run of the client's session, side by
// side, and returns their outcomes (each one's Err says how it went). A
// client that acts as no session cancels nothing: that is invalid.
func (c *Client) CancelAll(ctx context.Context, opts Control) ([]Outcome, error) {
	if c.session == "" {
		return nil, invalidf("cancel all: the client acts as no session, so it would cancel every run; name a session")
	}
	return c.CancelWhere(ctx, opts, func(session string) bool { return session == c.session })
}

// CancelSelected cancels, with one request (a selector request,
// *@<tag>.cancel), every run sel selects: every run the client may act on
// (sel.All: of its session, if it acts as one), those with sel.Labels, or
// those named in sel.IDs. It returns once every one of them has ended (or
// was refused), with one outcome a run, sorted by ID.
func (c *Client) CancelSelected(ctx context.Context, sel spool.Select, opts Control) ([]Outcome, error) {
	return c.selectRequest(ctx, spool.VerbCancel, sel, opts)
}

// SignalSelected sends signal sig to every run sel selects, with one
// request (see CancelSelected), and returns one outcome a run.
func (c *Client) SignalSelected(ctx context.Context, sel spool.Select, sig syscall.Signal) ([]Outcome, error) {
	sel.Signal = sig
	return c.selectRequest(ctx, spool.VerbSignal, sel, Control{})
}

// selectRequest submits a selector request for verb and waits for its
// outcome.
func (c *Client) selectRequest(ctx context.Context, verb string, sel spool.Select, opts Control) ([]Outcome, error) {
	fields := map[string]any{}
	switch {
	case sel.All:
		fields["all"] = true
	case sel.IDs != nil:
		fields["ids"] = sel.IDs
	}
	if sel.Labels != nil {
		fields["labels"] = sel.Labels
	}
	if sel.Signal != 0 {
		fields["signal"] = unix.SignalName(sel.Signal)
	}
	body, err := c.body(verb, Control{Grace: opts.Grace}, fields)
	if err != nil {
		return nil, err
	}
	if _, err := spool.ParseSelect(verb, body); err != nil {
		return nil, invalidf("%s: %v", verb, err)
	}
	if err := c.dir.Make(); err != nil {
		return nil, err
	}
	if err := c.autoStart(ctx); err != nil {
		return nil, err
	}
	n := spool.Name{ID: spool.SelectID, Tag: newTag(), Verb: verb, Owner: c.answeredAs()}
	if err := c.dir.Submit(n, body, false); err != nil {
		return nil, fmt.Errorf("cannot submit %s: %w", n, err)
	}
	var runs []spool.RunOutcome
	watcher := c.checkWatcher()
	err = c.watchAnswers(ctx, n.Owner, func() (bool, error) {
		b, _, err := durable.ReadRegular(c.dir.OutcomePath(n), 64<<20)
		if err == nil {
			if runs, err = spool.ParseSelectOutcome(b); err != nil {
				return false, err
			}
			os.Remove(c.dir.OutcomePath(n)) // read: nobody else needs it
			return true, nil
		}
		if watcher.gone() {
			return false, errorf(ErrNoWatcher, "no watcher is running on %s: the request waits in %s until one starts (run: tend up)",
				c.root, c.spoolPath(n))
		}
		return false, nil
	})
	outcomes := make([]Outcome, len(runs))
	for i, r := range runs {
		outcomes[i] = Outcome{ID: r.ID, Verb: verb, Outcome: r.Outcome, Detail: r.Detail}
	}
	return outcomes, err
}

// CancelWhere cancels, side by side, every active run whose session
// (none: "") match accepts, and returns their outcomes (each one's Err
// says how it went). Its requests are the client's: those of a client
// that acts as no session are an operator's, which may cancel any run of
// its user (root's: any run); the watcher refuses the others.
func (c *Client) CancelWhere(ctx context.Context, opts Control, match func(session string) bool) ([]Outcome, error) {
	body, err := c.controlBody(spool.VerbCancel, opts, nil)
	if err != nil {
		return nil, err
	}
	runs, _ := c.store.ListBrief() // sessions and states only
	var reqs []request
	for _, st := range runs {
		if match(st.Session) && !tracker.Final(st.State) {
			reqs = append(reqs, request{name: spool.Name{ID: st.ID, Verb: spool.VerbCancel}, body: body})
		}
	}
	if len(reqs) == 0 {
		return nil, nil
	}
	return c.submit(ctx, reqs)
}

// Delete deletes finished runs, side by side: their records, output and
// outcomes (each deletion stays in the history). It returns one outcome a
// run (each one's Err says how it went: a live or queued run is refused,
// still_active, and left alone).
func (c *Client) Delete(ctx context.Context, opts Control, ids ...string) ([]Outcome, error) {
	if opts.IfRev != 0 && len(ids) != 1 {
		return nil, invalidf("delete: a revision (if_rev) is one run's: give one ID with it")
	}
	body, err := c.controlBody(spool.VerbDelete, opts, nil)
	if err != nil {
		return nil, err
	}
	reqs := make([]request, len(ids))
	for i, id := range ids {
		if err := CheckID(id); err != nil {
			return nil, err
		}
		reqs[i] = request{name: spool.Name{ID: id, Verb: spool.VerbDelete}, body: body}
	}
	return c.submit(ctx, reqs)
}

// Signal sends signal sig (HUP, SIGUSR1, 15, ...) to run id's process
// group, after the watcher checked it is still the run's.
func (c *Client) Signal(ctx context.Context, id, sig string, opts Control) (Outcome, error) {
	if _, err := spool.SignalNamed(sig); err != nil {
		return Outcome{ID: id, Verb: spool.VerbSignal}, invalidf("%v", err)
	}
	return c.control(ctx, id, spool.VerbSignal, opts, map[string]any{"signal": sig})
}

// Restart stops run id (SIGTERM, then SIGKILL after the grace) and starts
// it again under the same ID; a run waiting to be restarted starts at once.
func (c *Client) Restart(ctx context.Context, id string, opts Control) (Outcome, error) {
	return c.control(ctx, id, spool.VerbRestart, opts, nil)
}

// Pause stops run id's process group with SIGSTOP; its timeout stops
// counting.
func (c *Client) Pause(ctx context.Context, id string, opts Control) (Outcome, error) {
	return c.control(ctx, id, spool.VerbPause, opts, nil)
}

// Resume continues run id's paused process group with SIGCONT.
func (c *Client) Resume(ctx context.Context, id string, opts Control) (Outcome, error) {
	return c.control(ctx, id, spool.VerbResume, opts, nil)
}

// Label sets run id's labels to the values given, and removes those given
// as nil.
func (c *Client) Label(ctx context.Context, id string, labels map[string]*string, opts Control) (Outcome, error) {
	return c.control(ctx, id, spool.VerbLabel, opts, map[string]any{"labels": labels})
}

// Note attaches a line of text to run id's record.
func (c *Client) Note(ctx context.Context, id, text string, opts Control) (Outcome, error) {
	return c.control(ctx, id, spool.VerbNote, opts, map[string]any{"text": text})
}

// control submits one control request and returns its outcome.
func (c *Client) control(ctx context.Context, id, verb string, opts Control, fields map[string]any) (Outcome, error) {
	o := Outcome{ID: id, Verb: verb}
	if err := CheckID(id); err != nil {
		return o, err
	}
	body, err := c.controlBody(verb, opts, fields)
	if err != nil {
		return o, err
	}
	return c.submitOne(ctx, spool.Name{ID: id, Verb: verb}, body)
}

// controlBody returns the body of a control request of verb with fields,
// the client's session and opts, checked by the watcher's own parser.
func (c *Client) controlBody(verb string, opts Control, fields map[string]any) ([]byte, error) {
	b, err := c.body(verb, opts, fields)
	if err != nil {
		return nil, err
	}
	if err := parseControl(verb, b); err != nil {
		return nil, invalidf("%s: %v", verb, err)
	}
	return b, nil
}

// body returns the JSON body of a request for verb with opts and fields,
// and the client's session.
func (c *Client) body(verb string, opts Control, fields map[string]any) ([]byte, error) {
	body := map[string]any{}
	for k, v := range fields {
		body[k] = v
	}
	if c.session != "" {
		body["session"] = c.session
	}
	if opts.IfRev < 0 {
		return nil, invalidf("%s: if_rev %d is not a revision (they start at 1)", verb, opts.IfRev)
	}
	if opts.IfRev > 0 {
		body["if_rev"] = opts.IfRev
	}
	if opts.Grace != 0 {
		if verb != spool.VerbCancel && verb != spool.VerbRestart {
			return nil, invalidf("%s: a grace is for cancel and restart", verb)
		}
		grace := opts.Grace
		switch {
		case grace == NoGrace:
			grace = 0 // "0s": none
		case grace < 0:
			return nil, invalidf("%s: grace %s is negative (NoGrace stops with none)", verb, grace)
		}
		body["grace"] = spool.Duration(grace)
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, invalidf("%s: %v", verb, err)
	}
	return b, checkSize(verb, b)
}

// checkSize refuses a request body the watcher would reject for its size,
// before it is written: it would only take up room in rejected/.
func checkSize(verb string, body []byte) error {
	if len(body) > spool.MaxBody {
		return invalidf("%s: the request would be %d bytes, over the limit of %d: fewer IDs or labels, a shorter command, or a smaller environment", verb, len(body), spool.MaxBody)
	}
	return nil
}

// parseControl parses a control request's body as the watcher will.
func parseControl(verb string, body []byte) error {
	return spool.ParseControl(spool.Name{Verb: verb}, body)
}
