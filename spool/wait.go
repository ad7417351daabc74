package spool

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// A Condition is what a run waits for of another (a Dep).
type Condition string

// The conditions of a dependency.
const (
	// Completed, the default: the dependency ended completed.
	Completed Condition = "completed"
	// Ended: the dependency ended, however.
	Ended Condition = "ended"
	// Ready: the dependency is running and ready (its health check passed,
	// or it created its ready file; a run that waits for neither is ready
	// once it runs).
	Ready Condition = "ready"
)

// Conditions lists the conditions, the default first.
var Conditions = []Condition{Completed, Ended, Ready}

// A Dep is a run that a start request waits for, and what of it.
type Dep struct {
	ID   string
	When Condition
}

// String writes d as a request names it: ID, or ID:condition for another
// condition than completed.
func (d Dep) String() string {
	if d.When == Completed {
		return d.ID
	}
	return d.ID + ":" + string(d.When)
}

// ParseDep parses ID or ID:condition. IDs have no ':', so the split is
// unambiguous.
func ParseDep(s string) (Dep, error) {
	id, when, found := strings.Cut(s, ":")
	d := Dep{ID: id, When: Completed}
	if found {
		d.When = Condition(when)
	}
	if err := ValidID(id); err != nil {
		return Dep{}, fmt.Errorf("%q: %v", s, err)
	}
	for _, c := range Conditions {
		if d.When == c {
			return d, nil
		}
	}
	return Dep{}, fmt.Errorf("%q: no condition %q: want completed (the default), ended or ready", s, when)
}

// MaxDeps bounds the runs one request may wait for.
const MaxDeps = 1000

// parseAfter parses a start request's "after": a list of ID or
// ID:condition strings, each naming another run once.
func parseAfter(raw json.RawMessage) ([]Dep, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var names []string
	if err := json.Unmarshal(raw, &names); err != nil {
		return nil, fmt.Errorf(`"after" must be a list of run IDs, each with an optional condition ("build", "lint:ended", "db:ready")`)
	}
	if len(names) > MaxDeps {
		return nil, fmt.Errorf(`"after": %d runs, more than the limit of %d`, len(names), MaxDeps)
	}
	deps := make([]Dep, 0, len(names))
	seen := make(map[string]bool, len(names))
	for _, name := range names {
		d, err := ParseDep(name)
		if err != nil {
			return nil, fmt.Errorf(`"after": %v`, err)
		}
		if seen[d.ID] {
			return nil, fmt.Errorf(`"after": run %s is named twice`, d.ID)
		}
		seen[d.ID] = true
		deps = append(deps, d)
	}
	return deps, nil
}

// NotBefore is when a start request may start at the earliest: at a time,
// or a delay after the request is taken. Exactly one is set.
type NotBefore struct {
	At time.Time
	In time.Duration
}

// From returns the time n says, for a request taken at taken.
func (n NotBefore) From(taken time.Time) time.Time {
	if n.At.IsZero() {
		return taken.Add(n.In)
	}
	return n.At
}

// MarshalJSON writes n as a request has it: an RFC 3339 time, or a
// duration string.
func (n NotBefore) MarshalJSON() ([]byte, error) {
	if n.At.IsZero() {
		return Duration(n.In).MarshalJSON()
	}
	return json.Marshal(n.At.Format(time.RFC3339Nano))
}

// parseNotBefore parses "not_before": an RFC 3339 time, or a duration (a
// Go duration string or a number of seconds) from when it is taken.
func parseNotBefore(raw json.RawMessage) (*NotBefore, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
			return &NotBefore{At: t}, nil
		}
	}
	var d Duration
	if err := d.UnmarshalJSON(raw); err != nil {
		return nil, errors.New(`"not_before": want an RFC 3339 time (such as "2030-01-31T22:00:00+01:00") or a duration from when the request is taken ("10m", 600)`)
	}
	return &NotBefore{In: d.D()}, nil
}
