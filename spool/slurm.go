package spool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
)

// Slurm is how a run is to be submitted to a Slurm cluster: the resources
// it asks for and the rest of what sbatch takes. Every field is optional;
// a zero Slurm submits with the cluster's defaults. In a start request it
// is the "slurm" object (or true for the defaults), and in config.json
// the defaults of a root or of a session (see docs/protocol.md, "Runs on
// a Slurm cluster").
type Slurm struct {
	Partition  string   `json:"partition,omitempty"`
	CPUs       int      `json:"cpus,omitempty"`   // --cpus-per-task
	Memory     string   `json:"memory,omitempty"` // --mem, as sbatch writes it: 8G, 512M
	GPUs       string   `json:"gpus,omitempty"`   // --gpus: a number, or TYPE:N
	Nodes      int      `json:"nodes,omitempty"`
	Time       Duration `json:"time,omitempty"` // Slurm's time limit; past it the job ends TIMEOUT (timed_out)
	Account    string   `json:"account,omitempty"`
	QOS        string   `json:"qos,omitempty"`
	Constraint string   `json:"constraint,omitempty"`
	// Args are further sbatch options, each one argument of the form
	// --name or --name=value.
	Args []string `json:"args,omitempty"`
}

// The values sbatch takes, kept to what they are made of, so that none
// can carry a newline into a batch script's directives or be taken for
// something else.
// They are compiled the first time a request has "slurm", not at every
// tend command's start-up, and their lengths are checked apart (bounded):
// a counted repetition such as {1,512} compiles to that many copies.
var slurmPatterns = sync.OnceValue(func() *slurmPattern {
	return &slurmPattern{
		name:       bounded{regexp.MustCompile(`^[A-Za-z0-9_.,+-]+$`), 128},
		memory:     bounded{regexp.MustCompile(`^[0-9]{1,12}[KMGT]?$`), 13},
		gpus:       bounded{regexp.MustCompile(`^([A-Za-z0-9_.-]+:)?[0-9]{1,6}$`), 64 + 1 + 6},
		constraint: bounded{regexp.MustCompile(`^[A-Za-z0-9_.,&|*:!\[\]()-]+$`), 512},
		arg:        regexp.MustCompile(`^--[a-z][a-z0-9-]*(=[^\x00-\x1f\x7f]*)?$`),
	}
})

// slurmPattern holds what each field of a request's "slurm" must match.
type slurmPattern struct {
	name, memory, gpus, constraint bounded
	arg                            *regexp.Regexp
}

// bounded is a pattern that matches only strings of at most max bytes.
type bounded struct {
	re  *regexp.Regexp
	max int
}

// MatchString reports whether s is at most b.max bytes and matches b's
// pattern.
func (b bounded) MatchString(s string) bool { return len(s) <= b.max && b.re.MatchString(s) }

// slurmOwnArgs are the sbatch options tend sets itself, or that would
// change what it submits or how it follows the job: a request may not
// give them.
var slurmOwnArgs = []string{
	"array", "chdir", "cluster", "clusters", "comment", "error", "export", "export-file",
	"get-user-env", "gid", "help", "input", "job-name", "open-mode", "output", "parsable",
	"test-only", "uid", "usage", "version", "wait", "wrap",
	// Set by the fields above: one way to say each.
	"partition", "cpus-per-task", "mem", "gpus", "nodes", "time", "account", "qos", "constraint",
}

// MaxSlurmArgs bounds a request's extra sbatch options.
const MaxSlurmArgs = 64

// Check reports what is wrong with s, naming the field (under prefix,
// such as `"slurm": `).
func (s *Slurm) Check(prefix string) error {
	p := slurmPatterns()
	for _, f := range []struct{ name, v string }{{"partition", s.Partition}, {"account", s.Account}, {"qos", s.QOS}} {
		if f.v != "" && !p.name.MatchString(f.v) {
			return fmt.Errorf(`%s%q: %q: want a name of letters, digits and . _ , + -`, prefix, f.name, f.v)
		}
	}
	switch {
	case s.CPUs < 0 || s.CPUs > 1<<20:
		return fmt.Errorf(`%s"cpus": %d: want 1 to %d (or leave it out)`, prefix, s.CPUs, 1<<20)
	case s.Nodes < 0 || s.Nodes > 1<<20:
		return fmt.Errorf(`%s"nodes": %d: want 1 to %d (or leave it out)`, prefix, s.Nodes, 1<<20)
	case s.Memory != "" && !p.memory.MatchString(s.Memory):
		return fmt.Errorf(`%s"memory": %q: want a size as sbatch --mem takes it, such as 8G or 512M`, prefix, s.Memory)
	case s.GPUs != "" && !p.gpus.MatchString(s.GPUs):
		return fmt.Errorf(`%s"gpus": %q: want a number, or TYPE:NUMBER`, prefix, s.GPUs)
	case s.Constraint != "" && !p.constraint.MatchString(s.Constraint):
		return fmt.Errorf(`%s"constraint": %q: want features joined by & | , as sbatch --constraint takes them`, prefix, s.Constraint)
	case len(s.Args) > MaxSlurmArgs:
		return fmt.Errorf(`%s"args": %d of them: at most %d`, prefix, len(s.Args), MaxSlurmArgs)
	}
	if s.Time != 0 && s.Time.D() < time.Second {
		return fmt.Errorf(`%s"time": %s: a time limit is at least a second (Slurm counts it in minutes)`, prefix, s.Time.D())
	}
	// An argument is named by its place, not quoted: it may hold a secret,
	// and reasons are readable by more users than requests.
	for i, a := range s.Args {
		if !p.arg.MatchString(a) {
			return fmt.Errorf(`%s"args": argument %d: each is one sbatch option, --name or --name=value`, prefix, i+1)
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if slices.Contains(slurmOwnArgs, name) {
			return fmt.Errorf(`%s"args": argument %d: tend sets --%s itself, or it has a field of its own`, prefix, i+1, name)
		}
	}
	return nil
}

// Merge returns s with the fields o sets put over its own, and o's Args
// after s's: a request's settings over a root's or a session's defaults.
func (s Slurm) Merge(o *Slurm) Slurm {
	if o == nil {
		return s
	}
	m := s
	for _, f := range []struct{ dst, v *string }{
		{&m.Partition, &o.Partition}, {&m.Memory, &o.Memory}, {&m.GPUs, &o.GPUs},
		{&m.Account, &o.Account}, {&m.QOS, &o.QOS}, {&m.Constraint, &o.Constraint},
	} {
		if *f.v != "" {
			*f.dst = *f.v
		}
	}
	if o.CPUs != 0 {
		m.CPUs = o.CPUs
	}
	if o.Nodes != 0 {
		m.Nodes = o.Nodes
	}
	if o.Time != 0 {
		m.Time = o.Time
	}
	m.Args = slices.Concat(s.Args, o.Args)
	return m
}

// SbatchArgs returns s as sbatch options, each one argument.
func (s *Slurm) SbatchArgs() []string {
	var args []string
	add := func(name, v string) {
		if v != "" {
			args = append(args, "--"+name+"="+v)
		}
	}
	add("partition", s.Partition)
	if s.CPUs > 0 {
		add("cpus-per-task", fmt.Sprint(s.CPUs))
	}
	add("mem", s.Memory)
	add("gpus", s.GPUs)
	if s.Nodes > 0 {
		add("nodes", fmt.Sprint(s.Nodes))
	}
	if s.Time > 0 {
		add("time", slurmTime(s.Time.D()))
	}
	add("account", s.Account)
	add("qos", s.QOS)
	add("constraint", s.Constraint)
	return append(args, s.Args...)
}

// slurmTime writes d as sbatch --time takes it: days-hours:minutes:seconds
// (Slurm rounds it up to whole minutes).
func slurmTime(d time.Duration) string {
	secs := int64((d + time.Second - 1) / time.Second)
	return fmt.Sprintf("%d-%02d:%02d:%02d", secs/86400, secs/3600%24, secs/60%60, secs%60)
}

// parseSlurm parses a start request's "slurm": an object of settings,
// true (the cluster's defaults, or config.json's), or false (run here,
// whatever config.json says). It returns nil and false for a request that
// says nothing.
func parseSlurm(raw json.RawMessage) (s *Slurm, local bool, err error) {
	raw = bytes.TrimSpace(raw)
	switch string(raw) {
	case "", "null":
		return nil, false, nil
	case "true":
		return &Slurm{}, false, nil
	case "false":
		return nil, true, nil
	}
	s = &Slurm{}
	if err := decodeStrict(raw, s); err != nil {
		return nil, false, fmt.Errorf(`"slurm": %v`, err)
	}
	return s, false, s.Check(`"slurm": `)
}

// ParseSlurmDefaults parses the settings config.json gives a root or a
// session, naming field in errors.
func ParseSlurmDefaults(field string, raw json.RawMessage) (*Slurm, error) {
	s := &Slurm{}
	if err := decodeStrict(raw, s); err != nil {
		return nil, fmt.Errorf("%q: %v", field, err)
	}
	if err := s.Check(fmt.Sprintf("%q: ", field)); err != nil {
		return nil, err
	}
	return s, nil
}

// errSlurmService says which service settings a run on Slurm cannot have.
var errSlurmService = errors.New(`"slurm": a run on Slurm cannot have "health", "ready_file" or "limits": Slurm runs it on a node tend does not watch (ask Slurm for limits: "memory", "time", "args")`)
