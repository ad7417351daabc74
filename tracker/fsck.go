package tracker

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/tendhq/tend/procfs"
	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker/durable"
	"github.com/tendhq/tend/tracker/layout"
	"golang.org/x/sys/unix"
)

// Problem is one thing fsck found wrong, with the path it concerns.
type Problem struct {
	Path string
	What string
}

func (p Problem) String() string { return p.Path + ": " + p.What }

// Liveness says whether the process a record names still runs; fsck
// takes it from its caller, which reads /proc.
type Liveness func(pid int, start uint64) bool

// Identify returns the start time of process pid if it runs, as run id
// (it carries TEND_RUN_ID=id); repair uses it to keep a live run's record.
type Identify func(pid int, id string) (start uint64, ok bool)

// IdentifyRun is the Identify of tend fsck and of the watcher's recovery:
// pid's start time if it is alive and is run id's process (its
// environment says TEND_RUN_ID=id).
func IdentifyRun(pid int, id string) (uint64, bool) {
	st, err := procfs.ReadStat(pid)
	if err != nil || st.State == 'Z' {
		return 0, false
	}
	if v, ok := procfs.Getenv(pid, "TEND_RUN_ID"); !ok || v != id {
		return 0, false
	}
	return st.StartTime, true
}

// Check examines a whole root and returns every problem it finds: what
// breaks the access rules for a watcher running as the root's owner (see
// CheckAccess), bad history lines (each with its file and line), state
// files that do not parse, were edited by hand, or have no event in the
// history, records whose process is gone, leftover temporary files,
// orphaned outcome files and run directories, a failed sync that the
// unsynced file records (SyncFailure), and the requests the watcher took:
// a claimed start request a run that has not ended cannot start again
// from, a control request in claims/ that does not parse (or, while no
// watcher runs, one not yet carried out), and a request in rejected/
// without its reason or a reason without its request. It changes nothing.
func Check(root string, alive Liveness) []Problem {
	var problems []Problem
	var st unix.Stat_t
	if unix.Stat(root, &st) == nil {
		problems = CheckAccess(root, int(st.Uid))
	}
	events, bad, clear := scanHistory(root)
	for _, b := range bad {
		problems = append(problems, Problem{b.file + ":" + fmt.Sprint(b.line), b.what})
	}
	for _, path := range historyAndPending(root) {
		if n := clear[path]; n > 0 {
			problems = append(problems, Problem{path, clearWhat(n)})
		}
	}
	if n := PendingChanges(root); n > 0 {
		problems = append(problems, Problem{layout.Root(root).PendingHistory(), pendingWhat(n)})
	}
	problems = append(problems, startLogProblems(root)...)
	if p, ok := syncFailureProblem(root); ok {
		problems = append(problems, p)
	}
	problems = append(problems, checkRuns(root, events, alive)...)
	problems = append(problems, leftovers(root)...)
	problems = append(problems, orphanOutcomes(root)...)
	watching, _, _ := ProbeWatcher(root)
	for _, f := range append(checkClaims(root, watching), checkRejected(root)...) {
		problems = append(problems, f.Problem) // the runs' requests: checkRun
	}
	return problems
}

// fsckStore returns root's store, with the root's key if this user may
// read it: the watcher's user checks the seals too.
func fsckStore(root string) *Store {
	s := NewStore(root)
	if key, _, err := LoadKey(root, false); err == nil {
		s.SetKey(key)
	}
	return s
}

// Persisting returns the problems of later that earlier found too, in
// later's order. A root a watcher is writing shows, for a moment, what
// only a crash would leave for longer: a temporary file, a claimed request
// before its first record, a reason in rejected/ before its request joins
// it, a selector's runs as its answered claim is removed, a record
// replaced after its history was read, an ended run not yet recorded. Two checks a moment apart tell a write in
// flight from one that was cut short.
func Persisting(earlier, later []Problem) []Problem {
	seen := make(map[Problem]bool, len(earlier))
	for _, p := range earlier {
		seen[p] = true
	}
	var kept []Problem
	for _, p := range later {
		if seen[p] {
			kept = append(kept, p)
		}
	}
	return kept
}

// badLine is a history line that is not an event.
type badLine struct {
	file string
	line int
	what string
	raw  []byte
}

// clearWhat is the problem of a history file with n lines that carry
// labels or a note in clear.
func clearWhat(n int) string {
	return fmt.Sprintf("%d lines carry labels or a note in clear, readable by whoever may read the history (a shared root's group): written by a tend before 2026-11-29; tend fsck --repair seals them", n)
}

// inClear reports whether e carries what a label or note request changed
// in clear, as a tend before 2026-11-29 wrote it (see Event.Sealed).
func inClear(e Event) bool { return e.Labels != nil || e.Note != "" }

// scanHistory reads every history file to its end, a line at a time,
// keeping every bad line (a reader stops at the first; fsck wants them
// all), how many lines of each file carry labels or a note in clear, and
// the events of the runs that have a directory in runs/, the only ones it
// checks a record against: a root's history is never deleted, and held
// whole it outgrows the machine's memory.
func scanHistory(root string) (map[string][]Event, []badLine, map[string]int) {
	keep := runDirNames(root)
	events := make(map[string][]Event)
	clear := make(map[string]int)
	var bad []badLine
	for _, path := range historyAndPending(root) {
		err := eachLine(path, func(n int, raw []byte) error {
			what := ""
			if raw[len(raw)-1] != '\n' {
				what = "torn line: no newline at the end of the file"
			} else if e, err := parseEvent(raw); err != nil {
				what = err.Error()
			} else {
				if inClear(e) {
					clear[path]++
				}
				if keep[e.ID] {
					events[e.ID] = append(events[e.ID], e)
				}
			}
			if what != "" {
				bad = append(bad, badLine{file: path, line: n, what: what, raw: bytes.Clone(raw)})
			}
			return nil
		})
		if err != nil {
			bad = append(bad, badLine{file: path, what: err.Error()})
		}
	}
	return events, bad, clear
}

// runDirNames returns the names in root's runs/ directory.
func runDirNames(root string) map[string]bool {
	names := make(map[string]bool)
	ents, _ := os.ReadDir(fsckStore(root).Dir())
	for _, e := range ents {
		names[e.Name()] = true
	}
	return names
}

// eachLine passes each line of the file at path to each, numbered from 1,
// with its newline (the last one without, if it is torn); the slice is
// valid only during the call. A missing file has none. An error of each
// stops it, and is returned.
func eachLine(path string, each func(n int, raw []byte) error) error {
	f, err := openIfThere(path)
	if f == nil {
		return err
	}
	defer f.Close()
	return eachLineOf(f, each)
}

// eachLineOf is eachLine, of what f reads from where it is.
func eachLineOf(f io.Reader, each func(n int, raw []byte) error) error {
	r := bufio.NewReaderSize(f, 64<<10)
	for n := 1; ; n++ {
		b, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			long := bytes.Clone(b) // longer than the buffer: gathered
			for errors.Is(err, bufio.ErrBufferFull) {
				b, err = r.ReadSlice('\n')
				long = append(long, b...)
			}
			b = long
		}
		if len(b) > 0 {
			if err := each(n, b); err != nil {
				return err
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// readLines returns a file's lines, each with its newline (the last one
// without, if it is torn), and what the open file's fstat says of it. A
// missing file has none. A link is not followed.
func readLines(path string) ([][]byte, unix.Stat_t, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	var st unix.Stat_t
	if errors.Is(err, unix.ENOENT) {
		return nil, st, nil
	}
	if err != nil {
		return nil, st, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, st, &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, st, fmt.Errorf("%s: not a regular file", path)
	}
	var lines [][]byte
	r := bufio.NewReader(f)
	for {
		b, err := r.ReadBytes('\n')
		if len(b) > 0 {
			lines = append(lines, b)
		}
		if err == io.EOF {
			return lines, st, nil
		}
		if err != nil {
			return lines, st, err
		}
	}
}

func checkRuns(root string, events map[string][]Event, alive Liveness) []Problem {
	s := fsckStore(root)
	ents, err := os.ReadDir(s.Dir())
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return []Problem{{s.Dir(), err.Error()}}
	}
	var problems []Problem
	for _, e := range ents {
		if !e.IsDir() || spool.ValidID(e.Name()) != nil {
			continue // hidden trash is a leftover (below)
		}
		problems = append(problems, checkRun(s, e.Name(), events[e.Name()], alive)...)
	}
	return problems
}

func checkRun(s *Store, id string, events []Event, alive Liveness) []Problem {
	run := s.Run(id)
	dir, path := string(run), run.State()
	b, _, err := durable.ReadRegular(path, maxRecord)
	if errors.Is(err, os.ErrNotExist) {
		if _, err := os.Stat(run.Request()); err == nil {
			return []Problem{{dir, "a claimed request without state.json (a watcher starts it once)"}}
		}
		return []Problem{{dir, "an orphaned run directory: no state.json and no request"}}
	}
	if err != nil {
		return []Problem{{path, err.Error()}}
	}
	st, err := s.parseSealed(path, b)
	if err != nil {
		return []Problem{{path, strings.TrimPrefix(err.Error(), path+": ")}}
	}
	var problems []Problem
	if st.ID != id {
		problems = append(problems, Problem{path, fmt.Sprintf("its id is %q, not %q as its directory says", st.ID, id)})
	}
	found := false
	for _, e := range events {
		found = found || e.Rev == st.Rev && e.State == st.State
	}
	if !found {
		problems = append(problems, Problem{path, fmt.Sprintf("rev %d (%s) has no event in the history", st.Rev, st.State)})
	}
	if changes := CoveredAfter(st, events); len(changes) > 0 && !Final(st.State) {
		var said []string
		for _, ev := range changes {
			said = append(said, fmt.Sprintf("%s, rev %d", ev.State, ev.Rev))
		}
		problems = append(problems, Problem{path, fmt.Sprintf("its record lacks the changes after rev %d that the history has (%s): a power loss took back a record written without a flush; a watcher records them when it starts", st.Rev, strings.Join(said, "; "))})
	} else if (st.State == Running || st.State == Stopping) && st.PID > 0 && alive != nil && (!alive(st.PID, st.ProcStart) || ofEarlierBoot(st)) {
		problems = append(problems, Problem{path, fmt.Sprintf("recorded %s, but its process (pid %d) is gone; a watcher records its end when it starts", st.State, st.PID)})
	}
	if _, err := os.Stat(path + ".edited"); err == nil {
		problems = append(problems, Problem{path + ".edited", "a hand-edited state file the watcher kept aside; it is not used"})
	}
	for _, f := range checkRequest(s, st) {
		problems = append(problems, f.Problem)
	}
	return problems
}

// ofEarlierBoot reports whether run st's process was started in a boot
// before this one: a process alive now with its PID and start time is
// another's.
func ofEarlierBoot(st *State) bool {
	if st.Boot == "" {
		return false
	}
	boot, err := procfs.BootID()
	return err == nil && boot != st.Boot
}

// leftovers finds temporary files and directories that only a crash
// leaves behind.
func leftovers(root string) []Problem {
	var problems []Problem
	add := func(pattern, what string, filter func(string) bool) {
		paths, _ := filepath.Glob(filepath.Join(root, pattern))
		sort.Strings(paths)
		for _, p := range paths {
			if filter == nil || filter(filepath.Base(p)) {
				problems = append(problems, Problem{p, what})
			}
		}
	}
	isTemp := durable.Leftover
	add("*", "a temporary file left by an interrupted write", isTemp)
	add("runs/*/*", "a temporary file left by an interrupted write", isTemp)
	add("outcomes/*", "a temporary file left by an interrupted write", isTemp)
	add("outcomes/*/*", "a temporary file left by an interrupted write", isTemp) // users' answers (spool.Dir.OutcomesOf)
	add("claims/*", tempFile, requestTemp.MatchString)                           // a selector's runs (rejected/'s are told apart in checkRejected)
	add("exits/.record-*", "a temporary file left by an interrupted write", nil)
	add("runs/.*.deleted-*", "a deletion cut short (the next watcher finishes it)", nil)
	return problems
}

// orphanOutcomes finds answers to start requests whose run is gone.
func orphanOutcomes(root string) []Problem {
	d := spool.Dir{Root: root}
	paths, _ := filepath.Glob(filepath.Join(d.Outcomes(), "*."+spool.VerbStart))
	users, _ := filepath.Glob(filepath.Join(d.Outcomes(), "*", "*."+spool.VerbStart)) // spool.Dir.OutcomesOf
	paths = append(paths, users...)
	var problems []Problem
	for _, p := range paths {
		n, err := spool.ParseName(filepath.Base(p))
		if err != nil {
			continue
		}
		b, _ := os.ReadFile(p)
		if !bytes.HasPrefix(b, []byte(spool.Accepted)) {
			continue // a rejection needs no run
		}
		if _, err := os.Stat(NewStore(root).RunDir(n.ID)); errors.Is(err, os.ErrNotExist) {
			problems = append(problems, Problem{p, "an orphaned outcome: its run is gone"})
		}
	}
	return problems
}

// Repair fixes what it can of what Check finds, and returns what it did,
// one line each, and what it found among the requests the watcher took
// and left, each with why. Nothing is deleted but partial writes (and
// what a crash left of requests answered: a deleted run's accepted
// answer, a selector's runs, a reason whose request was never moved
// beside it): bad history lines are moved to <file>.bad, and a bad state
// file is kept as state.json.bad, then rebuilt from the run's request and
// history (a live process, if alive says so, is kept; a record that says
// running and whose process is gone ends failed). A request whose bytes
// were lost stays as it is. The caller makes sure no watcher runs.
func Repair(root string, identify Identify) (done []string, left []Problem, err error) {
	// First, as a watcher starts: the rest is repaired from what it puts
	// back. (Its history appends take the history's lock themselves.)
	if done, err = repairStartLog(root); err != nil {
		return done, nil, err
	}
	lockFD := -1
	if err := lockHistory(root, &lockFD, unix.LOCK_EX); err != nil {
		return nil, nil, err
	}
	defer closeLock(&lockFD)
	// Rebuilt records are sealed, for the watcher to trust them, and
	// clear history lines sealed. A root with no key yet has its records
	// sealed by its next watcher (and its lines by the repair after).
	key, _, keyErr := LoadKey(root, false)
	if keyErr != nil && !errors.Is(keyErr, os.ErrNotExist) {
		key = nil
	}
	moved, err := repairHistory(root, key)
	if err != nil {
		return done, nil, err
	}
	done = append(done, moved...)
	if n, err := appendPendingLocked(root); err != nil {
		return done, nil, err
	} else if n > 0 {
		done = append(done, fmt.Sprintf("%s: appended the %d changes that waited in %s", layout.Root(root).History(), n, layout.Root(root).PendingHistory()))
	}
	events, _, _ := scanHistory(root)
	s := NewStore(root)
	if keyErr != nil && !errors.Is(keyErr, os.ErrNotExist) {
		return done, nil, fmt.Errorf("repairing needs the root's key, which only the watcher's user may read: %w", keyErr)
	}
	s.SetKey(key)
	ents, _ := os.ReadDir(s.Dir())
	for _, e := range ents {
		if !e.IsDir() || spool.ValidID(e.Name()) != nil {
			continue
		}
		what, err := repairRun(s, root, e.Name(), events[e.Name()], identify)
		if err != nil {
			return done, nil, err
		}
		done = append(done, what...)
	}
	// Removed, not synced: a power loss may bring one back, for the
	// next repair to remove again; nothing needs it meanwhile.
	for _, p := range leftovers(root) {
		if strings.Contains(p.What, "temporary file") {
			if err := os.Remove(p.Path); err == nil {
				done = append(done, p.Path+": removed (a partial write)")
			}
		}
	}
	for _, p := range orphanOutcomes(root) {
		// The answer to a start whose run was deleted: the deletion
		// removes it, but a power loss may bring it back.
		if err := os.Remove(p.Path); err == nil {
			done = append(done, p.Path+": removed (its run was deleted)")
		}
	}
	fixed, left := repairRequests(s, root)
	done = append(done, fixed...)
	// What was appended to the history is as durable as the records
	// rebuilt with it. (Its name, if the repair made the file, is made
	// durable by the next watcher, which syncs the root as it starts;
	// until then a power loss only undoes the repair, to be done again.)
	if err := OpenHistory(root).syncData(durable.FlushRepair); err != nil {
		return done, nil, err
	}
	return done, left, nil
}

// repairHistory moves the bad lines of every history file to <file>.bad,
// keeping the good ones in order, and seals with key (if not nil) the
// labels and notes that lines of a tend before 2026-11-29 carry in clear.
// The caller holds the history lock.
func repairHistory(root string, key []byte) ([]string, error) {
	var done []string
	for _, path := range historyAndPending(root) {
		lines, from, err := readLines(path)
		if err != nil {
			return done, err
		}
		var good, bad bytes.Buffer
		nbad, nsealed := 0, 0
		for _, raw := range lines {
			e, err := parseEvent(raw)
			if err != nil || raw[len(raw)-1] != '\n' {
				bad.Write(raw)
				if raw[len(raw)-1] != '\n' {
					bad.WriteByte('\n')
				}
				nbad++
				continue
			}
			if inClear(e) && key != nil {
				if b, err := sealLine(key, e); err == nil {
					good.Write(b)
					nsealed++
					continue
				}
			}
			good.Write(raw)
		}
		if nbad == 0 && nsealed == 0 {
			continue
		}
		if err := moveBad(path, &from, bad.Bytes(), good.Bytes()); err != nil {
			return done, fmt.Errorf("%s: %w", path, err)
		}
		if nbad > 0 {
			done = append(done, fmt.Sprintf("%s: moved %d bad lines to %s", path, nbad, path+".bad"))
		}
		if nsealed > 0 {
			done = append(done, fmt.Sprintf("%s: sealed the labels and notes that %d lines carried in clear", path, nsealed))
		}
	}
	return done, nil
}

// moveBad appends bad (if any) to path's .bad file, and replaces path
// with good; from is path's fstat: both keep its mode (see openBad).
func moveBad(path string, from *unix.Stat_t, bad, good []byte) error {
	if len(bad) > 0 {
		side, err := openBad(path+".bad", from)
		if err != nil {
			return err
		}
		err = durable.WriteAll(side, bad)
		if cerr := unix.Close(side); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("%s.bad: %w", path, err)
		}
	}
	return replaceFile(path, from.Mode, good)
}

// openBad opens the file at path, where the bad lines of the history file
// from (its fstat) are kept, for appending: made if missing, exclusively,
// no more readable than that file (a bad line may be anything, and the
// history may have been closed to the group by hand; a group other than
// its own reads nothing), and tightened to match if it is there already. A link is never followed, and a file
// that is not a regular one of this user's alone, with one name, is not
// written to: whoever put it there may read what it would get.
func openBad(path string, from *unix.Stat_t) (int, error) {
	mode := from.Mode & 0o644
	const flags = unix.O_WRONLY | unix.O_APPEND | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC
	fd, err := unix.Open(path, flags|unix.O_CREAT|unix.O_EXCL, mode)
	if errors.Is(err, unix.EEXIST) {
		fd, err = unix.Open(path, flags, 0)
	}
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	if st.Gid != from.Gid {
		mode &^= 0o040
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 || int(st.Uid) != os.Geteuid():
		unix.Close(fd)
		return -1, fmt.Errorf("%s: not a regular file of uid %d's with one name: bad lines are not moved there", path, os.Geteuid())
	case st.Mode&0o7777&^mode != 0:
		if err := unix.Fchmod(fd, st.Mode&mode); err != nil {
			unix.Close(fd)
			return -1, &os.PathError{Op: "chmod", Path: path, Err: err}
		}
	}
	return fd, nil
}

// sealLine returns the history line of e with its labels and note sealed
// with key (see SealChange), as the watcher writes it.
func sealLine(key []byte, e Event) ([]byte, error) {
	if err := SealChange(key, &e); err != nil {
		return nil, err
	}
	b, err := json.Marshal(e)
	return append(b, '\n'), err
}

// replaceFile replaces path with b atomically, its data durable before
// it has its name, with mode (path's own: a history closed to the group
// by hand stays closed). Its temporary file is made anew, exclusively,
// never through a link.
func replaceFile(path string, mode uint32, b []byte) error {
	tmp := path + ".fsck.tmp"
	os.Remove(tmp) // what an interrupted repair left
	fd, err := unix.Open(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return &os.PathError{Op: "open", Path: tmp, Err: err}
	}
	err = unix.Fchmod(fd, mode&0o777) // whatever the umask: as it was
	if err == nil {
		err = durable.WriteAll(fd, b)
	}
	if err == nil {
		err = durable.FlushRepair.Fsync(fd)
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	// Not its directory: a power loss that takes back the rename leaves
	// the file as it was, for the next repair to rewrite, and the next
	// watcher syncs the root as it starts.
	return err
}

// repairRun rebuilds run id's state file if it is broken or edited.
func repairRun(s *Store, root, id string, events []Event, identify Identify) ([]string, error) {
	path := s.Run(id).State()
	b, _, err := durable.ReadRegular(path, maxRecord)
	if err != nil {
		return nil, nil // missing: nothing to rebuild from that a watcher would not do better
	}
	st, err := s.parseSealed(path, b)
	switch {
	case err == nil:
		return addMissingEvent(root, st, events)
	case errors.Is(err, ErrTorn) && !s.MayHaveStarted(id) && !BeyondStart(events):
		// What a crash can leave of a run's first record before anything
		// acted on it (durable.RenameNew): the watcher starts the run.
		return []string{path + ": not rebuilt: cut short by a crash before its run started; the next watcher starts it"}, nil
	}
	if len(events) == 0 || events[len(events)-1].State == Deleted {
		return []string{path + ": not rebuilt: the history has no event of this run"}, nil
	}
	if err := os.Rename(path, path+".bad"); err != nil {
		return nil, err
	}
	st = Rebuild(s, id, events, identify)
	ev := EventOf(st, time.Now())
	ev.Output = st.Output // its bases, for a record rebuilt again from here
	if err := OpenHistory(root).appendLocked(ev); err != nil {
		return nil, err
	}
	if err := s.Write(st); err != nil {
		return nil, err
	}
	return []string{fmt.Sprintf("%s: kept as state.json.bad; rebuilt from the history and request: %s, rev %d%s%s", path, st.State, st.Rev, unopenedNote(s, events), UnknownBasesNote(s, st, events))}, nil
}

// unopenedNote says, for a report of a record rebuilt from events, how
// many of its label and note changes were lost as their sealed values do
// not open with the root's key: "" if none.
func unopenedNote(s *Store, events []Event) string {
	if n := UnopenedChanges(s, events); n > 0 {
		return fmt.Sprintf(" (%d label or note changes lost: sealed with a key this root no longer has)", n)
	}
	return ""
}

// Rebuild makes a record of run id from its history (events, oldest
// first, not empty) and its request, opening its sealed label and note
// changes with s's key: an ended run as it ended, a live one
// (identify finds its process) running, one gone as lost. Only the
// events of the last run with its ID count, less the changes a rev
// written again after a crash replaced (replayed); its attempts are
// counted as the watcher counts them (replayAttempts), and what the
// history does not say is left out (docs/protocol.md, "Rebuilt records"). Its output's
// bases and dropped bytes are those of the last event that recorded them
// (Event.Output), so that absolute offsets read before the rebuild name
// the same bytes after it. Its rev is the last event's plus one.
func Rebuild(s *Store, id string, events []Event, identify Identify) *State {
	events = replayed(events)
	last := events[len(events)-1]
	st := &State{ID: id, State: last.State, Rev: last.Rev + 1, Session: last.Session, PID: last.PID, PGID: last.PID,
		ExitCode: last.ExitCode, Signal: last.Signal, Reason: last.Reason, CreatedAt: events[0].Time, Grace: spool.Duration(10 * time.Second)}
	replayAttempts(st, events)
	for _, e := range events {
		if e.CreatedAt != nil { // an end's or a stop's: the record's own
			st.CreatedAt = *e.CreatedAt
		}
	}
	// Whose the run is: a run directory handed over to its owner says (its
	// owner may have put anything in it, a file of root's too); one that
	// is still this user's holds the request as it was claimed.
	var dir, req unix.Stat_t
	if unix.Lstat(s.RunDir(id), &dir) == nil {
		st.OwnerUID = int(dir.Uid)
		if int(dir.Uid) == os.Geteuid() && unix.Lstat(s.Run(id).Request(), &req) == nil {
			st.OwnerUID = int(req.Uid)
		}
	}
	// Taken only from a file of the owner's with no other name: the owner
	// may have put there one they may not read, for the record to show it.
	if b, fi, err := durable.ReadRegular(s.Run(id).Request(), spool.MaxBody); err == nil && CheckRunFile(&fi, st.OwnerUID) == nil {
		if req, err := spool.ParseStart(b); err == nil {
			st.Command, st.Labels, st.Timeout, st.Cwd = req.Args(), req.Labels, req.Timeout, req.Cwd
			if !filepath.IsAbs(st.Cwd) { // as the watcher resolves it: from the project
				st.Cwd = filepath.Join(filepath.Dir(filepath.Dir(s.Dir())), st.Cwd)
			}
			if req.Grace != nil {
				st.Grace = *req.Grace
			}
			// What a service is restarted, checked and limited by.
			st.Restart, st.Health, st.ReadyFile, st.Limits = req.Restart, req.Health, req.ReadyFile, req.Limits
			if req.OutputLimit > 0 {
				st.Output = &Output{Limit: req.OutputLimit} // its cap, until a cut says more
			}
			if st.Job != nil && req.Slurm != nil {
				sl := *req.Slurm
				st.Slurm = &sl
			}
		}
	}
	if st.Job != nil && st.Slurm == nil {
		// On a cluster by config.json's defaults, or by a request not
		// read: the cluster's own defaults. Those config.json added when
		// the request was taken are no event's.
		st.Slurm = &spool.Slurm{}
	}
	if keep := KeptAttempts(st.Restart); len(st.Attempts) > keep {
		st.Attempts = st.Attempts[len(st.Attempts)-keep:]
	}
	basesRecorded := false
	for _, e := range events { // the labels and notes set since, and the cuts
		// A sealed change that does not open (the root's key was made
		// anew) is lost, as a record sealed with that key is: see
		// UnopenedChanges.
		if opened, err := OpenChange(s.key, e); err == nil {
			ApplyChange(st, opened)
		}
		if e.Output != nil {
			// Where its output's offsets stand. A cut not yet recorded
			// when the record was lost is in the run's cut file and
			// the file's hole, which readers (Layout) and the next
			// watcher (which finishes it) apply to these bases.
			o := *e.Output
			st.Output, basesRecorded = &o, true
		}
	}
	if !basesRecorded {
		s.basesFromCuts(st)
	}
	switch st.State {
	case Completed, Failed, Canceled, TimedOut:
		t := last.Time
		st.EndedAt = &t
		if last.EndedAt != nil { // the end's own record of it
			ApplyCovered(st, last)
			st.Rev = last.Rev + 1
		}
		return st
	case Queued, Starting:
		st.PID, st.PGID = 0, 0 // it never passed its gate: a watcher decides
		return st
	case Backoff:
		// Its process ended, as its record said: its next attempt is
		// due when the backoff said, and the next watcher starts it.
		st.NextStartAt = nextStart(events)
		if n := len(st.Attempts); n > 0 {
			t := st.Attempts[n-1].EndedAt // when the attempt ended, as its record kept until the next
			st.EndedAt = &t
		}
		return st
	}
	if st.Job != nil {
		// Its job runs on its cluster, not here: the next watcher
		// follows it there, by its ID (or its tag, if the history has
		// none), and records how it ends.
		st.Reason = "record rebuilt from the history; its job is followed again"
		return st
	}
	if start, ok := identify(st.PID, id); ok && st.PID > 0 {
		st.ProcStart = start
		st.Boot, _ = procfs.BootID() // alive, so of this boot ("" if unknown)
		st.Reason = "record rebuilt from the history; its process still runs"
		return st
	}
	now := time.Now()
	st.State, st.EndedAt = Failed, &now
	st.Reason = "lost: its record was broken and rebuilt from the history, and its process is gone; exit status unknown"
	return st
}

// addMissingEvent appends the history event of valid record st if the
// history lacks it (the watcher could not append while the history's end
// was torn): the history gets back every state a record shows.
func addMissingEvent(root string, st *State, events []Event) ([]string, error) {
	for _, e := range events {
		if e.Rev == st.Rev && e.State == st.State {
			return nil, nil
		}
	}
	at := time.Now()
	if st.EndedAt != nil {
		at = *st.EndedAt
	}
	ev := EventOf(st, at)
	ev.Output = st.Output // the last word on its output's bases, for a rebuild
	if err := OpenHistory(root).appendLocked(ev); err != nil {
		return nil, err
	}
	return []string{fmt.Sprintf("%s: its rev %d (%s) was missing from the history: appended", layout.Root(root).History(), st.Rev, st.State)}, nil
}

// pendingWhat says what n changes waiting to be appended mean.
func pendingWhat(n int) string {
	return fmt.Sprintf("%d change%s could not be appended to the history, whose last line is torn: they wait here, in order, and tend fsck --repair appends them", n, map[bool]string{true: "s", false: ""}[n != 1])
}

// PendingProblem says how many changes wait to be appended to root's
// history, or "" if none do: for tend status.
func PendingProblem(root string) string {
	if n := PendingChanges(root); n > 0 {
		return layout.Root(root).PendingHistory() + ": " + pendingWhat(n)
	}
	return ""
}

// startLogProblems says that root's start log holds changes not applied
// (a power loss, or a watcher's crash, cut them short), that they do not
// verify with the root's key, or that it cannot be read; and names each
// log set aside as unverified (SetAsideUnverified).
func startLogProblems(root string) []Problem {
	path := layout.Root(root).StartLog()
	var problems []Problem
	entries, err := pendingEntries(root)
	_, bad := unverified(fsckStore(root), entries) // none without the key
	n := len(entries)
	them := map[bool]string{true: "them", false: "it"}[n != 1]
	switch {
	case err != nil:
		problems = append(problems, Problem{path, fmt.Sprintf("cannot be read: %v: the launches it holds may not be put back", err)})
	case bad:
		problems = append(problems, Problem{path, fmt.Sprintf("holds %d change%s whose records do not verify with %s (the key was lost and made anew, or replaced): the next watcher, as tend fsck --repair does, moves it to %s and puts none back", n, plural(n), layout.Root(root).RecordKey(), path+UnverifiedSuffix)})
	case n > 0:
		problems = append(problems, Problem{path, fmt.Sprintf("holds %d change%s of runs not yet all in their files (a power loss or a crash cut %s short): the next watcher puts %s back, as tend fsck --repair does", n, plural(n), them, them)})
	}
	aside, _ := filepath.Glob(path + UnverifiedSuffix + "*")
	sort.Strings(aside)
	for _, p := range aside {
		if !setAsideName.MatchString(filepath.Base(p)) {
			continue // its reason, or a temporary file of one
		}
		why, _, err := durable.ReadRegular(p+".error", 64<<10)
		if err != nil {
			why = []byte(fmt.Sprintf("its reason cannot be read: %v", err))
		}
		problems = append(problems, Problem{p, fmt.Sprintf("a start log set aside, unverified: %s (remove it and its .error once read)", strings.TrimSpace(string(why)))})
	}
	return problems
}

// setAsideName matches the names a start log is set aside under
// (StartLog.setAside).
var setAsideName = regexp.MustCompile(`^startlog\.unverified(\.[0-9]+)?$`)

// plural is "s" for a count other than one.
func plural(n int) string { return map[bool]string{true: "s", false: ""}[n != 1] }

// repairStartLog puts back what root's start log holds of launches not
// applied, as a watcher does as it starts (ReplayStartLog).
func repairStartLog(root string) ([]string, error) {
	if n, err := PendingLaunches(root); err != nil || n == 0 {
		return nil, err
	}
	l, pending, err := OpenStartLog(root)
	if err != nil {
		return nil, err
	}
	key, _, err := LoadKey(root, false)
	if err != nil {
		return nil, fmt.Errorf("putting back the start log's launches needs the root's key, which only the watcher's user may read: %w", err)
	}
	s := NewStore(root)
	s.SetKey(key)
	aside, why, err := SetAsideUnverified(s, l, pending)
	if aside != "" {
		return []string{fmt.Sprintf("%s: moved to %s, and made anew: %s", l.path, aside, why)}, err
	}
	if err != nil {
		return nil, err
	}
	d := spool.Dir{Root: root}
	done, err := ReplayStartLog(s, OpenHistory(root), d, l, pending)
	if err != nil {
		return done, err
	}
	// The claims' removals, then the mark. (A watcher that was killed
	// with claims of its own not flushed, in this boot, left their new
	// names unsynced: its next watcher, which syncs them first, is the
	// place for that, not a repair.)
	if err := durable.FlushClaim.SyncDir(d.Spool()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return done, fmt.Errorf("start log: %w", err)
	}
	return done, l.Applied(pending[len(pending)-1].Seq)
}
