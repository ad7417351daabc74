package tracker

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker/durable"
	"golang.org/x/sys/unix"
)

// What fsck reads of the requests the watcher took: each run's claimed
// start request, the control requests in claims/, and the requests in
// rejected/ beside their reasons. A loss there shows nowhere else until
// it costs: a run that cannot start again, a request carried out from
// nothing, a refusal whose reason is gone.

// A finding is a problem with what tend fsck --repair does about it: it
// removes the file, saying removed (a partial write, or what a request
// answered left behind), or leaves it, saying left.
type finding struct {
	Problem
	removed string
	left    string
	// reasonFor, if set, is the file name of a rejected request whose
	// reason (Path) is lost: --repair writes one that says so, for
	// rejected/ to hold every request with its reason again.
	reasonFor string
}

// The findings --repair removes. Each is what a crash leaves of a write
// or a removal the watcher does again or finishes: nothing needs it.
const (
	chosenOrphan = "the runs a selector request selected, which was answered since (a crash cut short their removal): nothing reads them; the next watcher removes them"
	reasonOrphan = "a reason without its request (a rejection cut short: its request stayed where it was, and is rejected again under another name; or the removal of both by the retention, which removes the request first): nothing reads it"
	tempFile     = "a temporary file left by an interrupted write"
)

// What a loss of a claimed request costs, and what --repair says of it.
const (
	lostBytes    = "what it lost is nowhere else to take back"
	retakenClaim = "the next watcher puts it back in the spool, where it is rejected with the reason: send it again"
)

// runRequests checks the claimed start request of every run whose record
// s reads (see checkRequest).
func runRequests(s *Store) []finding {
	ents, err := os.ReadDir(s.Dir())
	if err != nil {
		return nil // checkRuns says why
	}
	var found []finding
	for _, e := range ents {
		if !e.IsDir() || spool.ValidID(e.Name()) != nil {
			continue
		}
		if st, err := s.Read(e.Name()); err == nil {
			found = append(found, checkRequest(s, st)...)
		}
	}
	return found
}

// checkRequest checks runs/<id>/request, the start request run st was
// claimed from, if the run may still be started from it: while it has not
// ended, and is not queued by tend (whose request is still in the spool,
// its writer's to edit). An ended run needs it no more, and one that ended
// while queued may never have had one.
func checkRequest(s *Store, st *State) []finding {
	if Final(st.State) || st.State == Queued && st.Job == nil {
		return nil
	}
	path := s.Run(st.ID).Request()
	b, fi, err := durable.ReadRegular(path, spool.MaxBody)
	what := ""
	switch {
	case errors.Is(err, os.ErrNotExist):
		what = "missing"
	case errors.Is(err, durable.ErrNotRegular):
		// tend claims regular files only: the run's owner, whose
		// directory it is, put this there.
		return []finding{{Problem: Problem{path, errorWhat(path, err) + ": not the request the run was claimed from (tend claims regular files; the run's owner put this there): " + requestCost(st)}, left: "not tend's: its owner's to remove"}}
	case err != nil:
		what = errorWhat(path, err)
	case CheckRunFile(&fi, st.OwnerUID) != nil:
		// Its owner's directory may hold a file they may not read
		// themselves, linked there: what it says is not told. (A second
		// name a power loss left in the spool, as a claim's rename was
		// cut, is mended by the next watcher, which removes that name.)
		return []finding{{Problem: Problem{path, CheckRunFile(&fi, st.OwnerUID).Error() + ": not read (a file of another's, or linked elsewhere, by the run's owner; or a claim a power loss cut, which the next watcher mends)"}, left: "not tend's, or the next watcher's to mend"}}
	case len(b) == 0:
		what = "empty (a power loss took back what was not synced, or a hand emptied it)"
	default:
		if _, err := spool.ParseStart(b); err != nil {
			what = "it does not parse (" + err.Error() + ")"
		} else {
			return nil
		}
	}
	return []finding{{Problem: Problem{path, what + ": " + requestCost(st)}, left: lostBytes}}
}

// requestCost says what run st loses with its claimed start request.
func requestCost(st *State) string {
	switch {
	case st.State == Starting || st.State == Queued:
		return "if the run has not started yet, it cannot be (the next watcher records it failed), nor restarted"
	case st.State == Backoff:
		return "its next attempt cannot start: the run ends failed"
	case st.Restart != nil && st.Restart.Policy != spool.RestartNever:
		return "the service cannot be restarted: its next restart ends it failed"
	}
	return "the run cannot be restarted: a restart request ends it failed"
}

// errorWhat says what err, from reading path, found, without the path.
func errorWhat(path string, err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) && pe.Path == path {
		return pe.Err.Error()
	}
	return strings.TrimPrefix(err.Error(), path+": ")
}

// checkClaims checks claims/: every claimed control request parses as
// its verb's (an empty one is a loss where its verb takes no empty body),
// every selector's chosen runs parse and have their request (claimed, or
// put back in the spool), and nothing else is there. A claimed request
// that parses is a problem only while no watcher runs (watching false):
// a crash, or a watcher stopped as it carried it out, left it, and the
// next watcher takes it again; a watcher may keep one for as long as a
// run takes to stop.
func checkClaims(root string, watching bool) []finding {
	d := spool.Dir{Root: root}
	ents, err := os.ReadDir(d.Claims())
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrPermission) {
		return nil // none made yet; or the watcher's user's alone
	}
	if err != nil {
		return []finding{{Problem: Problem{d.Claims(), err.Error()}, left: "it cannot be read"}}
	}
	names := make(map[string]bool, len(ents))
	for _, e := range ents {
		names[e.Name()] = true
	}
	var found []finding
	for _, e := range ents {
		if requestTemp.MatchString(e.Name()) {
			continue // a leftover (see leftovers)
		}
		if f, ok := checkClaim(d, e.Name(), names, watching); ok {
			found = append(found, f)
		}
	}
	return found
}

// checkClaim checks file name in claims/, which holds names.
func checkClaim(d spool.Dir, name string, names map[string]bool, watching bool) (finding, bool) {
	path := filepath.Join(d.Claims(), name)
	claim, chosen := strings.CutSuffix(name, ".chosen")
	n, ok := claimedRequest(claim)
	if !ok || chosen && n.ID != spool.SelectID {
		return finding{Problem: Problem{path, "not a claimed request (the watcher claims to <uid>:<request name>, and a selector's runs beside it as .chosen): nothing reads it"},
			left: "not tend's: remove it by hand"}, true
	}
	if chosen {
		if !names[claim] && !exists(filepath.Join(d.Spool(), n.String())) {
			return finding{Problem: Problem{path, chosenOrphan}, removed: "removed (its selector request was answered)"}, true
		}
		b, _, err := durable.ReadRegular(path, spool.MaxBody)
		if err == nil {
			_, _, err = spool.ParseChosen(b)
		}
		if err == nil {
			return finding{}, false
		}
		return finding{Problem: Problem{path, errorWhat(path, err) + ": the runs its selector request selected are lost; taken again, it acts on those it selects then"},
			left: "the next watcher selects its runs again"}, true
	}
	b, _, err := durable.ReadRegular(path, spool.MaxBody)
	switch {
	case errors.Is(err, durable.ErrNotRegular):
		return finding{Problem: Problem{path, errorWhat(path, err) + ": no watcher takes it, and a request of this name is rejected while it is in the way"},
			left: "not tend's: remove it by hand"}, true
	case err != nil:
		return finding{Problem: Problem{path, errorWhat(path, err)}, left: "it cannot be read"}, true
	}
	if err := spool.ParseControl(n, b); err != nil {
		what := "it does not parse (" + err.Error() + ")"
		if len(b) == 0 {
			what = "empty (a power loss took back what was not synced, or a hand emptied it)"
		}
		return finding{Problem: Problem{path, what + ": " + retakenClaim}, left: lostBytes}, true
	}
	if watching {
		return finding{}, false // under way
	}
	return finding{Problem: Problem{path, fmt.Sprintf("a claimed %s request not yet carried out (a watcher takes it again when it starts)", n.Verb)},
		left: "the next watcher carries it out"}, true
}

// claimedRequest returns the control request claims/ file name is the
// claim of (spool.ClaimedName), and whether it is one.
func claimedRequest(file string) (spool.Name, bool) {
	name, ok := spool.ParseClaimedName(file)
	if !ok {
		return spool.Name{}, false
	}
	if n, ok := spool.ParseSelectorName(name); ok {
		return n, true
	}
	n, err := spool.ParseName(name)
	return n, err == nil && n.Verb != spool.VerbStart
}

// requestTemp matches the temporary names a reason (rejected/) and a
// selector's runs (claims/) are written under before they have their
// names (durable's createTemp: the name and up to TempDigits digits).
var requestTemp = regexp.MustCompile(`\.(error|chosen)[0-9]{1,10}$`)

// checkRejected checks rejected/: every request there has its reason,
// <name>.error, which is not empty, and every reason its request. A
// reason is written before its request joins it (spool.Dir.Reject), so
// one alone is a rejection under way, or one a crash cut short.
func checkRejected(root string) []finding {
	dir := spool.Dir{Root: root}.Rejected()
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil // cleared: made again with the next rejection
	}
	if err != nil {
		return []finding{{Problem: Problem{dir, err.Error()}, left: "it cannot be read"}}
	}
	names := make(map[string]bool, len(ents))
	for _, e := range ents {
		names[e.Name()] = true
	}
	var st unix.Stat_t
	if err := unix.Stat(root, &st); err != nil {
		return []finding{{Problem: Problem{root, err.Error()}, left: "it cannot be read"}}
	}
	r := rejectedDir{dir: dir, names: names, watcher: st.Uid}
	paired := r.pair()
	var found []finding
	for _, e := range ents {
		name := e.Name()
		path := filepath.Join(dir, name)
		if strings.HasPrefix(name, ".") {
			continue // no request is hidden: not tend's
		}
		if paired[name] {
			if req, ok := strings.CutSuffix(name, ".error"); ok && paired[req] {
				found = append(found, checkReason(path)...)
			}
			continue
		}
		found = append(found, r.unpaired(name))
	}
	return found
}

// rejectedDir is rejected/ as fsck reads it: dir, the names it holds,
// and the watcher's user (the root's owner). A reason is a file the
// watcher wrote, so one of that user's (or root's): every other file
// there is a member's request, moved there as it was, with their owner
// and what they wrote in it (which may read as any reason: "x.start:
// refused ..."). In a private root both are its user's, who has no one
// to fool.
type rejectedDir struct {
	dir     string
	names   map[string]bool
	watcher uint32
}

// reason reads file name in r, if it may be a reason: a regular file of
// the watcher's user's or root's, no larger than a request may be, and
// without tend's mark, which only requests of root's carry (see
// spool.CarriesMark: a watcher running as root marks those it moves here
// unmarked; root's unmarked files rejected by a tend before 2026-11-29
// cannot be told from reasons). A member's file is not read at all (it
// may be a request as large as they made it). All is checked on the
// descriptor it reads.
func (r rejectedDir) reason(name string) ([]byte, bool) {
	path := filepath.Join(r.dir, name)
	var pre unix.Stat_t
	if unix.Lstat(path, &pre) != nil || !r.watchers(pre.Uid) {
		return nil, false
	}
	fd, st, err := durable.OpenRegular(path)
	if err != nil {
		return nil, false
	}
	defer unix.Close(fd)
	if !r.watchers(st.Uid) || st.Size > spool.MaxBody || spool.CarriesMark(fd) {
		return nil, false
	}
	b, err := durable.ReadUpTo(fd, st.Size, spool.MaxBody+1)
	if err != nil || len(b) > spool.MaxBody {
		return nil, false
	}
	return b, true
}

// watchers reports whether a file of uid's in r may be the watcher's.
func (r rejectedDir) watchers(uid uint32) bool {
	return uid == r.watcher || uid == 0
}

// pair returns which of r's names are a request and its reason, x and
// x.error, each paired with its partner. A request may itself be named
// x.error (an unknown verb), its reason x.error.error; and once x's
// reason is lost, such a request may be rejected into its name (Reject
// never puts one where a reason is). So a file of the watcher's that
// holds what Reject writes for its request is that one's reason first,
// whatever it may be said to be by its name; then, the shortest names
// first, x takes the x.error of the watcher's left (its reason emptied,
// or edited by a hand). Pairing by names alone, x would take x.error the
// request, and leave the reason of that one for --repair to remove; by
// content alone, a member's request written as x's reason would be taken
// for it.
func (r rejectedDir) pair() map[string]bool {
	paired := make(map[string]bool)
	for req, reason := range r.pairs() {
		paired[req], paired[reason] = true, true
	}
	return paired
}

// pairs returns r's requests that have their reason, each with it, as
// pair says.
func (r rejectedDir) pairs() map[string]string {
	byLength := make([]string, 0, len(r.names))
	for name := range r.names {
		byLength = append(byLength, name)
	}
	sort.Slice(byLength, func(i, j int) bool {
		a, b := byLength[i], byLength[j]
		return len(a) < len(b) || len(a) == len(b) && a < b
	})
	paired := make(map[string]bool)
	pairs := make(map[string]string)
	pair := func(whose func(req string, b []byte) bool) {
		for _, req := range byLength {
			reason := req + ".error"
			if paired[req] || !r.names[reason] || paired[reason] {
				continue
			}
			if b, ok := r.reason(reason); ok && whose(req, b) {
				paired[req], paired[reason] = true, true
				pairs[req] = reason
			}
		}
	}
	pair(spool.IsReason)
	pair(func(string, []byte) bool { return true })
	return pairs
}

// checkReason checks the reason at path, which has its request.
func checkReason(path string) []finding {
	b, _, err := durable.ReadRegular(path, spool.MaxBody)
	switch {
	case err != nil:
		return []finding{{Problem: Problem{path, errorWhat(path, err) + ": why its request was refused cannot be read"}, left: "not tend's: remove it by hand"}}
	case len(b) == 0:
		return []finding{{Problem: Problem{path, "an empty reason (a power loss took back what was written, or a hand emptied it): why its request was refused is lost, but for its answer in outcomes/"},
			reasonFor: strings.TrimSuffix(filepath.Base(path), ".error")}}
	}
	return nil
}

// unpaired says what file name in r, which has no partner, is: a reason
// without its request, what an interrupted write of a reason left, or a
// request without its reason. Only a file of the watcher's that holds
// what Reject writes for its name (or nothing, as an interrupted write
// leaves it) is taken for a reason: anything else may be a request, and
// is never removed. A request whose reason's name is another request's
// has its lost reason said, not written over that one.
func (r rejectedDir) unpaired(name string) finding {
	path := filepath.Join(r.dir, name)
	b, watchers := r.reason(name)
	if loc := requestTemp.FindStringIndex(name); watchers && loc != nil && strings.HasPrefix(name[loc[0]:], ".error") {
		// Empty, or zeros, as a power loss leaves a file whose data it
		// took back; or whole.
		if len(bytes.Trim(b, "\x00")) == 0 || spool.IsReason(name[:loc[0]], b) {
			return finding{Problem: Problem{path, tempFile}, removed: "removed (a partial write)"}
		}
	}
	if req, ok := strings.CutSuffix(name, ".error"); ok && watchers && spool.IsReason(req, b) {
		return finding{Problem: Problem{path, reasonOrphan}, removed: "removed (a partial write of a rejection)"}
	}
	if r.names[name+".error"] {
		return finding{Problem: Problem{path, "a rejected request without its reason (" + name + ".error is another rejected request: a power loss or a hand took its own): why it was refused is lost, but for its answer in outcomes/"},
			left: "its reason's name is another request's: nothing can be written there"}
	}
	return finding{Problem: Problem{path, "a rejected request without its reason (" + name + ".error is gone: a power loss or a hand took it): why it was refused is lost, but for its answer in outcomes/"},
		reasonFor: name}
}

// exists reports whether path names anything, a link not followed.
func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// requestFindings returns what runRequests, checkClaims and checkRejected
// find in root, in that order.
func requestFindings(s *Store, root string, watching bool) []finding {
	found := runRequests(s)
	found = append(found, checkClaims(root, watching)...)
	return append(found, checkRejected(root)...)
}

// repairRequests removes what requestFindings finds that --repair may
// remove, if it is still a regular file, and returns what it did and
// what it left, with why. The caller keeps every watcher off.
func repairRequests(s *Store, root string) (done []string, left []Problem) {
	for _, f := range requestFindings(s, root, false) {
		if f.reasonFor != "" {
			line, err := writeLostReason(filepath.Dir(f.Path), f.reasonFor)
			if err != nil {
				left = append(left, Problem{f.Path, err.Error()})
			} else {
				done = append(done, line)
			}
			continue
		}
		if f.removed == "" {
			left = append(left, Problem{f.Path, f.left})
			continue
		}
		if fi, err := os.Lstat(f.Path); err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if err := os.Remove(f.Path); err == nil {
			done = append(done, f.Path+": "+f.removed)
		}
	}
	return done, left
}

// LostReason is the reason --repair writes for a rejected request whose
// own was lost: after its request's name and ": ", on a line of its own.
const LostReason = "the reason it was refused for was lost (a power loss or a hand took it), and tend fsck --repair wrote this line; its answer in outcomes/, if it had one, says why"

// writeLostReason writes, in rejected/ dir, the reason of request file
// (as spool.Reject writes one, for readers to take it as one) saying that
// its own was lost, and returns what it did. Once it returns, the reason
// survives a power loss (the repair flush: its data before its name, dir
// after): --repair says it wrote it, and the next check must find it.
func writeLostReason(dir, file string) (string, error) {
	path := filepath.Join(dir, file+".error")
	line := spool.Printable(file) + ": " + LostReason + "\n"
	if err := durable.Replace(path, []byte(line), durable.Perm{Mode: 0o644}, durable.Durable{File: durable.FlushRepair, Dir: durable.FlushRepair}); err != nil {
		return "", err
	}
	return path + ": written (saying its request's reason was lost)", nil
}
