package watcher

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
	"github.com/tendhq/tend/tracker/durable"
)

// A selection is a selector request (*@<tag>.cancel, *@<tag>.signal) under
// way: carried out as one part per run it selects, each a request of that
// run's own (<id>@<tag>.<verb>) that is never a file, and answered with
// one outcome once every part is answered. A part's answer is taken by
// the selection instead of written (see outcome), so a part of a cancel is
// answered when its run has ended, as any cancel is.
type selection struct {
	n       spool.Name // the selector request
	taken   string     // its claimed file, removed once it is answered
	chosen  string     // the runs it selected, kept until it is answered
	answers []spool.RunOutcome
	left    int // parts not yet answered
}

// takeSelect carries out selector request n, read from f: it claims it,
// selects the runs, and takes each one's part as a cancel or signal
// request of that run's own.
func (w *watcher) takeSelect(n spool.Name, f spool.File, req spool.Select) {
	taken, claimed := w.claimControl(n, f)
	if !claimed {
		return
	}
	sel := &selection{n: n, taken: taken, chosen: chosenPath(w.spool, n)}
	ids, ok := readChosen(sel.chosen, f.Ino)
	if !ok {
		ids = w.selected(f.UID, req)
		if err := writeChosen(sel.chosen, f.Ino, ids); err != nil {
			w.log.Printf("%s: keeping the runs it selects: %v", n, err)
		}
	}
	if len(ids) == 0 {
		// Once its content is synced (see keepClaimed), as any answer
		// follows what it answers for.
		w.follow(effectAnswer, "", func() { w.answerSelection(sel) })
		return
	}
	parts := make([]spool.Name, len(ids))
	for i, id := range ids {
		parts[i] = spool.Name{ID: id, Tag: n.Tag, Verb: n.Verb, Owner: n.Owner}
		w.selections[parts[i]] = sel
	}
	sel.left = len(parts)
	w.log.Printf("%s: %s %d runs (%s)", n, n.Verb, len(parts), describeSelect(req))
	w.batched(func() {
		for _, part := range parts {
			switch n.Verb {
			case spool.VerbCancel:
				w.takeCancel(part, f, spool.Cancel{Grace: req.Grace, Session: req.Session})
			case spool.VerbSignal:
				w.takeSignal(part, f, spool.Signal{Signal: req.Signal, Session: req.Session})
			}
		}
	})
}

// selected returns the IDs of the runs selector request req, owned by
// uid, acts on: those it names, every one of them (found or not, as each
// is answered); else those with its labels that it may act on (its
// user's, root's on any, of its session if it names one) and that have not
// ended, or are queued, in backoff, or live.
func (w *watcher) selected(uid int, req spool.Select) []string {
	if req.IDs != nil && req.Labels == nil {
		return req.IDs
	}
	var ids []string
	consider := func(st *tracker.State) {
		if ok, _ := permitted(uid, req.Session, st); ok && req.Matches(st.ID, st.Labels) && !slices.Contains(ids, st.ID) {
			ids = append(ids, st.ID)
		}
	}
	for _, r := range w.runs {
		consider(r.st)
	}
	for _, j := range w.jobs.byID { // runs on a cluster
		consider(j.st)
	}
	for _, q := range w.queue {
		consider(q.st)
	}
	for _, b := range w.waiting {
		consider(b.st)
	}
	slices.Sort(ids)
	return ids
}

// selectionAnswer takes the answer to part n of a selection, if n is one,
// and reports whether it did; once every part is answered, the selection
// is. It runs where an answer would be written: after the record it
// reports.
func (w *watcher) selectionAnswer(n spool.Name, outcome, detail string) bool {
	sel := w.selections[n]
	if sel == nil {
		return false
	}
	delete(w.selections, n)
	sel.answers = append(sel.answers, spool.RunOutcome{ID: n.ID, Outcome: outcome, Detail: detail})
	if sel.left--; sel.left == 0 {
		w.answerSelection(sel)
	}
	return true
}

// answerSelection writes selection sel's outcome, and removes its claimed
// file: it is carried out.
func (w *watcher) answerSelection(sel *selection) {
	if err := w.spool.WriteSelectOutcome(sel.n, spool.SelectOutcome(sel.answers)); err != nil {
		w.log.Printf("%s: writing its outcome: %v", sel.n, err)
	}
	w.unclaim(sel.taken)
	os.Remove(sel.chosen)
	w.log.Printf("%s: answered for %d runs", sel.n, len(sel.answers))
}

// selectRequest parses selector request n's body, and returns what takes
// it (see request).
func (w *watcher) selectRequest(n spool.Name, f spool.File) (func(), error) {
	req, err := spool.ParseSelect(n.Verb, f.Body)
	if err != nil {
		return nil, err
	}
	return func() { w.takeSelect(n, f, req) }, nil
}

// describeSelect is for the log.
func describeSelect(req spool.Select) string {
	switch {
	case req.All:
		return "every run"
	case req.IDs != nil:
		return fmt.Sprintf("%d runs by ID", len(req.IDs))
	}
	return fmt.Sprintf("the runs labeled %v", req.Labels)
}

// chosenPath is where selector request n's runs are kept while it is under
// way: a watcher that dies before it is answered leaves the request to be
// taken again, and the next one must act on, and answer for, the same runs,
// though those it canceled have ended and no longer match "all" or its
// labels. The name is hidden, so never taken for a request.
func chosenPath(d spool.Dir, n spool.Name) string {
	return filepath.Join(d.Claims(), spool.ClaimedName(n)+".chosen")
}

// writeChosen keeps ids, the runs selected by the request file with inode
// ino, at path: its first line the inode, then an ID a line.
func writeChosen(path string, ino uint64, ids []string) error {
	b := []byte(strconv.FormatUint(ino, 10) + "\n")
	for _, id := range ids {
		b = append(b, id+"\n"...)
	}
	// Unsynced, as the selector request itself is (its client's rename):
	// a power loss may take back both, or this alone, and the request is
	// then answered for the runs it selects at the next start.
	return durable.ReplaceUnsynced(path, b, durable.Perm{Mode: 0o600})
}

// readChosen returns the runs kept at path for the request file with inode
// ino, if they are kept for that file and by this watcher's user (in a
// shared spool, anyone may make a file of that name).
func readChosen(path string, ino uint64) ([]string, bool) {
	b, st, err := durable.ReadRegular(path, 1<<20)
	if err != nil || int(st.Uid) != os.Geteuid() {
		return nil, false
	}
	kept, ids, err := spool.ParseChosen(b)
	if err != nil || kept != ino {
		return nil, false
	}
	return ids, true
}
