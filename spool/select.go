package spool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// A selector request acts on many runs with one file: *@<tag>.cancel or
// *@<tag>.signal, its body naming the runs (every one the writer may act
// on, those with some labels, or a list of IDs), answered by one outcome
// file that lists each run's. '*' is not in the ID alphabet, so no run's
// request has such a name; the tag is required, so that two clients'
// selections never share an answer.

// SelectID is the ID part of a selector request's name.
const SelectID = "*"

// ParseSelectorName reports whether name is a selector request's, and
// returns it split as ParseName would, with ID SelectID.
func ParseSelectorName(name string) (Name, bool) {
	rest, ok := strings.CutPrefix(name, SelectID+"@")
	if !ok {
		return Name{}, false
	}
	dot := strings.LastIndexByte(rest, '.')
	if dot < 0 {
		return Name{}, false
	}
	n := Name{ID: SelectID, Tag: rest[:dot], Verb: rest[dot+1:]}
	if n.Verb != VerbCancel && n.Verb != VerbSignal || ValidID(n.Tag) != nil {
		return Name{}, false
	}
	return n, true
}

// Select is a selector request: which runs, and what to do to each.
type Select struct {
	// IDs, Labels and All select the runs: those named; those with every
	// label (K=V) given; every run the writer may act on (of its session,
	// if it names one). IDs may not come with All.
	IDs    []string
	Labels map[string]string
	All    bool
	// Session scopes the request as any control request's does.
	Session string
	// Grace, for cancel, replaces each run's own for this stop.
	Grace *Duration
	// Signal, for signal, is the signal sent to each run's group.
	Signal syscall.Signal
}

type selectJSON struct {
	IDs     []string          `json:"ids"`
	Labels  map[string]string `json:"labels"`
	All     bool              `json:"all"`
	Session string            `json:"session"`
	Grace   json.RawMessage   `json:"grace"`
	Signal  string            `json:"signal"`
}

// ParseSelect parses the body of a selector request for verb: a JSON
// object that names its runs explicitly, so that no empty file (a shell's
// unmatched glob, touch) acts on every run.
func ParseSelect(verb string, body []byte) (Select, error) {
	if err := CheckEncoding(body); err != nil {
		return Select{}, err
	}
	body = TrimBOM(body)
	if !isJSON(body) {
		return Select{}, errors.New(`a selector request is a JSON object naming its runs: {"all": true}, {"labels": {"k": "v"}} or {"ids": ["a", "b"]}`)
	}
	var j selectJSON
	if err := decodeStrict(body, &j); err != nil {
		return Select{}, err
	}
	s := Select{IDs: j.IDs, Labels: j.Labels, All: j.All, Session: j.Session}
	switch {
	case !s.All && s.IDs == nil && len(s.Labels) == 0:
		return s, errors.New(`it names no runs: give "all": true, "labels" (at least one) or "ids"`)
	case s.All && s.IDs != nil:
		return s, errors.New(`"all" and "ids" together: give one`)
	case len(s.IDs) > 10000:
		return s, fmt.Errorf(`"ids": %d runs, more than the limit of 10000`, len(s.IDs))
	}
	for _, id := range s.IDs {
		if err := ValidID(id); err != nil {
			return s, fmt.Errorf(`"ids": %v`, err)
		}
	}
	slices.Sort(s.IDs)
	s.IDs = slices.Compact(s.IDs)
	for k := range s.Labels {
		if k == "" {
			return s, errors.New(`"labels": an empty key`)
		}
	}
	var err error
	switch verb {
	case VerbCancel:
		if j.Signal != "" {
			return s, errors.New(`"signal" is for *@tag.signal`)
		}
		s.Grace, err = durationField("grace", j.Grace, MaxGrace.D())
	case VerbSignal:
		if j.Grace != nil {
			return s, errors.New(`"grace" is for *@tag.cancel`)
		}
		if j.Signal == "" {
			return s, errors.New(`missing "signal"`)
		}
		s.Signal, err = SignalNamed(j.Signal)
	default:
		err = fmt.Errorf("verb %q has no selector request", verb)
	}
	if err == nil {
		err = checkControl(s.Session, nil)
	}
	return s, err
}

// Matches reports whether run id, of session and with labels, is one s
// selects (its session scope aside, which the watcher checks).
func (s Select) Matches(id string, labels map[string]string) bool {
	if s.IDs != nil && !slices.Contains(s.IDs, id) {
		return false
	}
	for k, v := range s.Labels {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// A RunOutcome is one run's line in a selector request's outcome.
type RunOutcome struct {
	ID, Outcome, Detail string
}

// SelectOutcome is the outcome file of a selector request: a first line
// "selected: N", then a line per run, sorted by ID: "ID: outcome" and, for
// some outcomes, ": detail". It is written once every run's is known.
func SelectOutcome(runs []RunOutcome) []byte {
	slices.SortFunc(runs, func(a, b RunOutcome) int { return strings.Compare(a.ID, b.ID) })
	var b bytes.Buffer
	fmt.Fprintf(&b, "selected: %d\n", len(runs))
	for _, r := range runs {
		line := r.ID + ": " + r.Outcome
		if r.Detail != "" {
			line += ": " + oneLine(r.Detail)
		}
		b.WriteString(line + "\n")
	}
	return b.Bytes()
}

// ParseSelectOutcome reads a selector request's outcome file.
func ParseSelectOutcome(b []byte) ([]RunOutcome, error) {
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	var n int
	if _, err := fmt.Sscanf(lines[0], "selected: %d", &n); err != nil || n != len(lines)-1 && !(n == 0 && len(lines) == 1) {
		return nil, fmt.Errorf("not a selector outcome: %q", lines[0])
	}
	var runs []RunOutcome
	for _, line := range lines[1:] {
		id, rest, ok := strings.Cut(line, ": ")
		if !ok {
			return nil, fmt.Errorf("not a run's outcome: %q", line)
		}
		outcome, detail, _ := strings.Cut(rest, ": ")
		runs = append(runs, RunOutcome{ID: id, Outcome: outcome, Detail: detail})
	}
	return runs, nil
}

// ParseChosen parses the runs the watcher keeps beside a claimed selector
// request, as claims/<uid>:<name>.chosen: the inode of the request file
// they were selected for, then their IDs, each on a line.
func ParseChosen(b []byte) (ino uint64, ids []string, err error) {
	if len(b) == 0 {
		return 0, nil, errors.New("empty")
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if ino, err = strconv.ParseUint(lines[0], 10, 64); err != nil {
		return 0, nil, fmt.Errorf("its first line is not the inode of a request: %q", lines[0])
	}
	for _, id := range lines[1:] {
		if err := ValidID(id); err != nil {
			return 0, nil, fmt.Errorf("a run that is no ID: %q", id)
		}
	}
	return ino, lines[1:], nil
}
