package spool

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// MaxBody is the largest request body tend reads. A larger file is rejected
// without being read whole.
const MaxBody = 1 << 20

// MaxArg is the longest argument, shell command line or environment
// entry (K=V) a new start request may hold: Linux takes at most 128 KiB
// in one (MAX_ARG_STRLEN, with its NUL), and a shell command line shares
// its argument with tend's start gate. A longer one would be accepted,
// then fail at exec ("argument list too long").
const MaxArg = 127 << 10

// MaxGrace bounds the time between SIGTERM and SIGKILL that a request may ask for.
const MaxGrace = Duration(24 * time.Hour)

// ErrIncomplete marks a body that could become valid if its writer added to
// it: JSON cut off before its end. The watcher waits for more before it
// rejects such a body.
var ErrIncomplete = errors.New("incomplete")

// Start is a start request: what to run and how.
type Start struct {
	// Command is the shell text run with /bin/sh -c, or the argv that is
	// executed directly. Exactly one is set.
	Shell string
	Argv  []string

	Cwd     string            `json:"cwd,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Session string            `json:"session,omitempty"`
	Timeout Duration          `json:"timeout,omitempty"`
	Grace   *Duration         `json:"grace,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`

	// A service's settings (see service.go); all optional.
	Restart   *Restart `json:"restart,omitempty"`
	Health    *Health  `json:"health,omitempty"`
	ReadyFile bool     `json:"ready_file,omitempty"` // ready once $TEND_READY exists
	Limits    *Rlimits `json:"limits,omitempty"`
	// OutputLimit caps each output file: past it, the oldest bytes are
	// dropped (0: DefaultOutputLimit).
	OutputLimit int64 `json:"output_limit,omitempty"`

	// After are the runs it waits for (see wait.go), and NotBefore when it
	// may start at the earliest: until then it is queued.
	After     []Dep
	NotBefore *NotBefore

	// Slurm, if set, submits the run to a Slurm cluster with these
	// settings (see slurm.go); Local runs it on this host even where
	// config.json makes Slurm the default. Both unset: as config.json
	// says, and on this host if it says nothing.
	Slurm *Slurm
	Local bool
}

// DefaultOutputLimit is the output cap of a run that sets none: 64 MiB per
// stream.
const DefaultOutputLimit = 64 << 20

// startJSON is the JSON shape of a start request; Command is decoded by hand
// because it is a string or an array.
type startJSON struct {
	Command json.RawMessage   `json:"command"`
	Cwd     string            `json:"cwd,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Session string            `json:"session,omitempty"`
	Timeout json.RawMessage   `json:"timeout,omitempty"`
	Grace   json.RawMessage   `json:"grace,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`

	Restart     json.RawMessage `json:"restart,omitempty"`
	Health      json.RawMessage `json:"health,omitempty"`
	ReadyFile   bool            `json:"ready_file,omitempty"`
	Limits      json.RawMessage `json:"limits,omitempty"`
	OutputLimit int64           `json:"output_limit,omitempty"`
	After       json.RawMessage `json:"after,omitempty"`
	NotBefore   json.RawMessage `json:"not_before,omitempty"`
	Slurm       json.RawMessage `json:"slurm,omitempty"`
}

// MarshalJSON writes s in the request format that ParseStart reads: the
// bytes encoding/json writes for startJSON (TestStartMarshalIsV1s). It
// writes the fields a request usually has itself: a type's first marshal
// with encoding/json, in a client that marshals one request, cost more
// than the rest of what tend start does besides waiting (0.3 ms).
func (s Start) MarshalJSON() ([]byte, error) {
	if err := s.checkUTF8(); err != nil {
		return nil, err
	}
	b := make([]byte, 0, 512)
	b = append(b, `{"command":`...)
	if s.Argv != nil {
		b = appendJSONStrings(b, s.Argv)
	} else {
		b = appendJSONString(b, s.Shell)
	}
	b = appendStringField(b, "cwd", s.Cwd)
	b = appendMapField(b, "env", s.Env)
	b = appendStringField(b, "session", s.Session)
	if s.Timeout != 0 {
		b = append(b, `,"timeout":`...)
		b = appendJSONString(b, time.Duration(s.Timeout).String())
	}
	if s.Grace != nil {
		b = append(b, `,"grace":`...)
		b = appendJSONString(b, time.Duration(*s.Grace).String())
	}
	b = appendMapField(b, "labels", s.Labels)
	var err error
	if b, err = appendSetting(b, "restart", s.Restart != nil, s.Restart); err != nil {
		return nil, err
	}
	if b, err = appendSetting(b, "health", s.Health != nil, s.Health); err != nil {
		return nil, err
	}
	if s.ReadyFile {
		b = append(b, `,"ready_file":true`...)
	}
	if b, err = appendSetting(b, "limits", s.Limits != nil, s.Limits); err != nil {
		return nil, err
	}
	if s.OutputLimit != 0 {
		b = strconv.AppendInt(append(b, `,"output_limit":`...), s.OutputLimit, 10)
	}
	if s.After != nil {
		names := make([]string, len(s.After))
		for i, d := range s.After {
			names[i] = d.String()
		}
		b = appendJSONStrings(append(b, `,"after":`...), names)
	}
	if s.NotBefore != nil {
		nb, _ := s.NotBefore.MarshalJSON()
		b = append(append(b, `,"not_before":`...), nb...)
	}
	if s.Slurm == nil && s.Local {
		b = append(b, `,"slurm":false`...)
	} else if b, err = appendSetting(b, "slurm", s.Slurm != nil, s.Slurm); err != nil {
		return nil, err
	}
	return append(b, '}'), nil
}

// checkUTF8 returns an error naming the first of s's strings that is not
// valid UTF-8: JSON would carry U+FFFD in its place, and the run would
// not be what was asked for (another file, another variable).
func (s Start) checkUTF8() error {
	var bad string
	check := func(field, v string) {
		if bad == "" && !utf8.ValidString(v) {
			bad = fmt.Sprintf("%s %q", field, v)
		}
	}
	check("the command", s.Shell)
	// A field's name is made only for a string that is not UTF-8: every
	// tend start marshals an argv and an environment.
	for i, a := range s.Argv {
		if !utf8.ValidString(a) {
			check(fmt.Sprintf("argument %d", i+1), a)
		}
	}
	check(`"cwd"`, s.Cwd)
	check(`"session"`, s.Session)
	for _, m := range []struct {
		name string
		m    map[string]string
	}{{"the environment variable", s.Env}, {"the label", s.Labels}} {
		for k, v := range m.m {
			check(m.name, k)
			if !utf8.ValidString(v) {
				check(m.name+" "+k+"'s value", v)
			}
		}
	}
	if h := s.Health; h != nil {
		check(`the health check's "tcp"`, h.TCP)
		check(`the health check's "http"`, h.HTTP)
		check(`the health check's "exec"`, h.Exec)
	}
	if sl := s.Slurm; sl != nil {
		for _, v := range append([]string{sl.Partition, sl.Memory, sl.GPUs, sl.Account, sl.QOS, sl.Constraint}, sl.Args...) {
			check(`a "slurm" setting`, v)
		}
	}
	if bad != "" {
		return fmt.Errorf("%s is not valid UTF-8: a request is JSON text, which carries only UTF-8", bad)
	}
	return nil
}

// appendSetting appends `,"name":` and v marshaled, if set.
func appendSetting(b []byte, name string, set bool, v any) ([]byte, error) {
	if !set {
		return b, nil
	}
	j, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(append(append(append(b, `,"`...), name...), `":`...), j...), nil
}

// appendStringField appends `,"name":` and v, unless v is empty.
func appendStringField(b []byte, name, v string) []byte {
	if v == "" {
		return b
	}
	return appendJSONString(append(append(append(b, `,"`...), name...), `":`...), v)
}

// appendMapField appends `,"name":` and m with its keys sorted, unless m
// is empty.
func appendMapField(b []byte, name string, m map[string]string) []byte {
	if len(m) == 0 {
		return b
	}
	b = append(append(append(b, `,"`...), name...), `":{`...)
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(appendJSONString(b, k), ':')
		b = appendJSONString(b, m[k])
	}
	return append(b, '}')
}

// appendJSONStrings appends a JSON array of ss.
func appendJSONStrings(b []byte, ss []string) []byte {
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, s)
	}
	return append(b, ']')
}

// appendJSONString appends s as encoding/json writes it. Printable ASCII
// but for the characters it escapes is written as it is; anything else
// goes through encoding/json.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			j, _ := json.Marshal(s)
			return append(b, j...)
		}
	}
	return append(append(append(b, '"'), s...), '"')
}

// Args returns the argv to execute: the argv itself, or /bin/sh -c Shell.
func (s *Start) Args() []string {
	if s.Argv != nil {
		return s.Argv
	}
	return []string{"/bin/sh", "-c", s.Shell}
}

// BodySum names a version of a request body: the hex of the first 16
// bytes of its SHA-256. Two bodies with the same sum are taken as the
// same version (an owner who made them collide would only hide an edit
// of their own request from their own watcher).
func BodySum(body []byte) string {
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:16])
}

// ParseStart parses a start request body: plain text is a shell command,
// and a JSON object (a body whose first non-blank byte is '{' followed by
// '"' or '}') is a full request. A shell command may itself start with '{'
// (a brace group): "{ make; make test; }" is shell text.
func ParseStart(body []byte) (Start, error) {
	if err := CheckEncoding(body); err != nil {
		return Start{}, err
	}
	body = TrimBOM(body)
	if !isJSON(body) {
		return parseShellText(body)
	}
	var j startJSON
	if !fastStartJSON(body, &j) {
		j = startJSON{}
		if err := decodeStrict(body, &j); err != nil {
			return Start{}, err
		}
	}
	s := Start{Cwd: j.Cwd, Env: j.Env, Session: j.Session, Labels: j.Labels}
	if err := s.setCommand(j.Command); err != nil {
		return Start{}, err
	}
	timeout, err := durationField("timeout", j.Timeout, maxDuration)
	if err != nil {
		return Start{}, err
	}
	if timeout != nil {
		s.Timeout = *timeout
	}
	if s.Grace, err = durationField("grace", j.Grace, MaxGrace.D()); err != nil {
		return Start{}, err
	}
	s.ReadyFile, s.OutputLimit = j.ReadyFile, j.OutputLimit
	if s.OutputLimit < 0 || s.OutputLimit > 0 && s.OutputLimit < 64<<10 {
		return Start{}, fmt.Errorf(`"output_limit": %d bytes: want 0 (the default, %d) or at least 65536`, s.OutputLimit, DefaultOutputLimit)
	}
	if s.Restart, err = parseRestart(j.Restart); err != nil {
		return Start{}, err
	}
	if s.Health, err = parseHealth(j.Health); err != nil {
		return Start{}, err
	}
	if s.Limits, err = parseRlimits(j.Limits); err != nil {
		return Start{}, err
	}
	if s.After, err = parseAfter(j.After); err != nil {
		return Start{}, err
	}
	if s.NotBefore, err = parseNotBefore(j.NotBefore); err != nil {
		return Start{}, err
	}
	if s.Slurm, s.Local, err = parseSlurm(j.Slurm); err != nil {
		return Start{}, err
	}
	return s, s.validate()
}

// invalidUTF8 returns the offset of the first byte of b that is not
// part of valid UTF-8, or -1.
func invalidUTF8(b []byte) int {
	if utf8.Valid(b) {
		return -1
	}
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return -1
}

func parseShellText(body []byte) (Start, error) {
	// A script saved with Windows line ends would otherwise hand the shell
	// a \r at the end of every line ("cd src\r": no such directory).
	text := strings.TrimSpace(strings.ReplaceAll(string(body), "\r\n", "\n"))
	switch {
	case text == "":
		return Start{}, errors.New("empty command: write the shell command to run, or a JSON object with \"command\"")
	case strings.IndexByte(text, 0) >= 0:
		return Start{}, errors.New("command contains a NUL byte")
	case !utf8.ValidString(text):
		// Records are JSON, which would change the bytes: what is recorded
		// would not be what ran.
		return Start{}, errors.New("command is not valid UTF-8")
	}
	return Start{Shell: text}, nil
}

func (s *Start) setCommand(raw json.RawMessage) error {
	if len(raw) == 0 || string(raw) == "null" {
		return errors.New(`missing "command": a string for /bin/sh -c or an array to execute`)
	}
	shell, argv, fast := fastCommand(raw)
	switch {
	case fast:
		s.Shell, s.Argv = shell, argv
	case raw[0] == '"':
		if err := json.Unmarshal(raw, &s.Shell); err != nil {
			return fmt.Errorf(`"command": %w`, err)
		}
	default:
		if err := json.Unmarshal(raw, &s.Argv); err != nil || s.Argv == nil {
			// Not quoted: reasons are readable by more users than requests.
			return errors.New(`"command" must be a string or an array of strings`)
		}
	}
	if raw[0] == '"' {
		if strings.TrimSpace(s.Shell) == "" {
			return errors.New(`"command" is empty`)
		}
		return nil
	}
	if len(s.Argv) == 0 || s.Argv[0] == "" {
		return errors.New(`"command" array is empty or its first element is empty`)
	}
	return nil
}

func (s *Start) validate() error {
	for _, a := range append([]string{s.Shell, s.Cwd}, s.Argv...) {
		if strings.IndexByte(a, 0) >= 0 {
			return errors.New("command or cwd contains a NUL byte")
		}
	}
	for _, k := range sortedKeys(s.Env) {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return fmt.Errorf(`"env": bad variable %q: names are non-empty and have no '=' or NUL`, k)
		}
		if strings.IndexByte(s.Env[k], 0) >= 0 {
			return fmt.Errorf(`"env": variable %q: its value has a NUL byte, which no environment can hold`, k)
		}
	}
	for _, k := range sortedKeys(s.Labels) {
		if k == "" || !utf8.ValidString(k) || !utf8.ValidString(s.Labels[k]) {
			return errors.New(`"labels": a key is empty or not UTF-8: keys are non-empty UTF-8`)
		}
	}
	if s.Session != "" {
		if err := ValidID(s.Session); err != nil {
			return fmt.Errorf(`"session": %v`, strings.Replace(err.Error(), "id", "session", 1))
		}
	}
	if s.Slurm != nil {
		if err := s.CheckSlurm(); err != nil {
			return err
		}
	}
	return nil
}

// CheckSlurm reports why s cannot run on Slurm, if it cannot: its Slurm
// settings are bad, or it asks for what only a run on this host has.
func (s *Start) CheckSlurm() error {
	if s.Slurm != nil {
		if err := s.Slurm.Check(`"slurm": `); err != nil {
			return err
		}
	}
	if s.Health != nil || s.ReadyFile || s.Limits != nil {
		return errSlurmService
	}
	return nil
}

// durationField decodes an optional duration field, naming it in errors.
func durationField(name string, raw json.RawMessage, max time.Duration) (*Duration, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var d Duration
	if err := d.UnmarshalJSON(raw); err != nil {
		return nil, fmt.Errorf("%q: %v", name, err)
	}
	if d.D() > max {
		return nil, fmt.Errorf("%q: %s is longer than the limit of %s", name, d.D(), max)
	}
	return &d, nil
}

// Cancel is a cancel request. Both fields are optional.
type Cancel struct {
	Grace   *Duration `json:"grace,omitempty"`
	Session string    `json:"session,omitempty"`
	// IfRev, if set, is the revision the client saw: a run whose record
	// has moved on is left alone, and the answer is conflict.
	IfRev *int64 `json:"if_rev,omitempty"`
}

type cancelJSON struct {
	Grace   json.RawMessage `json:"grace"`
	Session string          `json:"session"`
	IfRev   *int64          `json:"if_rev"`
}

// ParseCancel parses a cancel request body: empty, or a JSON object.
func ParseCancel(body []byte) (Cancel, error) {
	var c Cancel
	if err := CheckEncoding(body); err != nil {
		return Cancel{}, err
	}
	body = TrimBOM(body)
	if len(bytes.TrimSpace(body)) == 0 {
		return c, nil
	}
	if !isJSON(body) {
		return c, errors.New(`a cancel body is empty or a JSON object such as {"grace": "5s"}`)
	}
	var j cancelJSON
	if err := decodeStrict(body, &j); err != nil {
		return c, err
	}
	c.Session, c.IfRev = j.Session, j.IfRev
	var err error
	if c.Grace, err = durationField("grace", j.Grace, MaxGrace.D()); err != nil {
		return c, err
	}
	return c, checkControl(c.Session, c.IfRev)
}

// checkControl checks the fields every control request may carry.
func checkControl(session string, ifRev *int64) error {
	if session != "" {
		if err := ValidID(session); err != nil {
			return fmt.Errorf(`"session": %v`, err)
		}
	}
	if ifRev != nil && *ifRev < 1 {
		return fmt.Errorf(`"if_rev": %d is not a revision (they start at 1)`, *ifRev)
	}
	return nil
}

// Delete is a parsed delete request.
type Delete struct {
	Session string `json:"session,omitempty"`
	IfRev   *int64 `json:"if_rev,omitempty"`
}

// ParseDelete parses a delete request body: empty, or a JSON object with
// "session".
func ParseDelete(body []byte) (Delete, error) {
	var d Delete
	if err := CheckEncoding(body); err != nil {
		return Delete{}, err
	}
	body = TrimBOM(body)
	if len(bytes.TrimSpace(body)) == 0 {
		return d, nil
	}
	if !isJSON(body) {
		return d, errors.New(`a delete body is empty or a JSON object such as {"session": "s1"}`)
	}
	if err := decodeStrict(body, &d); err != nil {
		return d, err
	}
	return d, checkControl(d.Session, d.IfRev)
}

// Label is a parsed label request: labels to set, and to remove (a null
// value in JSON, "K=" in text).
type Label struct {
	Set     map[string]string
	Remove  []string
	Session string
	IfRev   *int64
}

type labelJSON struct {
	Labels  map[string]*string `json:"labels"`
	Session string             `json:"session"`
	IfRev   *int64             `json:"if_rev"`
}

// ParseLabel parses a label request body: lines of K=V (K= removes K), or
// a JSON object {"labels": {"k": "v", "gone": null}, "session": ...,
// "if_rev": N}.
func ParseLabel(body []byte) (Label, error) {
	l := Label{Set: map[string]string{}}
	if err := CheckEncoding(body); err != nil {
		return Label{}, err
	}
	body = TrimBOM(body)
	if isJSON(body) {
		var j labelJSON
		if err := decodeStrict(body, &j); err != nil {
			return l, err
		}
		for k, v := range j.Labels {
			if v == nil {
				l.Remove = append(l.Remove, k)
			} else {
				l.Set[k] = *v
			}
		}
		l.Session, l.IfRev = j.Session, j.IfRev
	} else {
		for i, line := range strings.Split(string(body), "\n") {
			line = strings.TrimSpace(line)
			if line == "" {
				continue
			}
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				return l, fmt.Errorf("line %d: want K=V (K= removes K)", i+1) // not quoted, as any label
			}
			if v == "" {
				l.Remove = append(l.Remove, k)
			} else {
				l.Set[k] = v
			}
		}
	}
	if len(l.Set)+len(l.Remove) == 0 {
		return l, errors.New("no labels: a label body is lines of K=V, or {\"labels\": {...}}")
	}
	for _, k := range sortedKeys(l.Set) {
		if err := CheckLabelKey(k); err != nil {
			return l, err // a key set; any may be removed, as one set before keys were checked
		}
	}
	return l, checkControl(l.Session, l.IfRev)
}

// CheckNew returns why s may not be taken as a new request, beyond what
// ParseStart checks of every request, or nil: a label key is checked by
// CheckLabelKey. A request taken before (queued, claimed, a service's,
// read again at each restart) is not checked so: what a watcher took
// stays taken, whatever a later version refuses.
func (s Start) CheckNew() error {
	for _, k := range sortedKeys(s.Labels) {
		if err := CheckLabelKey(k); err != nil {
			return fmt.Errorf(`"labels": %v`, err)
		}
	}
	return s.checkArgSizes()
}

// checkArgSizes returns why s's command or environment would not fit
// exec's limit on one argument (MaxArg), or nil.
func (s Start) checkArgSizes() error {
	if len(s.Shell) > MaxArg {
		return fmt.Errorf("the command line is %d bytes: Linux runs at most %d in one (128 KiB, less tend's start gate); put it in a script and run that", len(s.Shell), MaxArg)
	}
	for i, a := range s.Argv {
		if len(a) > MaxArg {
			return fmt.Errorf(`"command": argument %d is %d bytes: Linux takes at most %d in one (128 KiB); pass it in a file`, i, len(a), MaxArg)
		}
	}
	for _, k := range sortedKeys(s.Env) {
		if n := len(k) + 1 + len(s.Env[k]); n > MaxArg {
			return fmt.Errorf(`"env": %s is %d bytes with its value: Linux takes at most %d in one variable (128 KiB); pass it in a file`, k, n, MaxArg)
		}
	}
	return nil
}

// CheckLabelKey returns why k cannot be a label's key, or nil. A key is
// non-empty UTF-8 with no '=', which would make it another key in K=V
// (a label request's lines, tend start -l, tend ls -l), and no control
// character (C0, DEL or C1): none can be typed in those either, and on a
// terminal it would hide or fake what a key is. A value is free text.
func CheckLabelKey(k string) error {
	if k == "" {
		return errors.New("a key is empty: keys are non-empty UTF-8")
	}
	if !utf8.ValidString(k) {
		return fmt.Errorf("key %q is not UTF-8", k)
	}
	if i := strings.IndexFunc(k, func(r rune) bool { return r == '=' || unicode.IsControl(r) }); i >= 0 {
		return fmt.Errorf("key %q has %q at byte %d: keys have no '=' and no control characters", k, badChar(k[i:]), i)
	}
	return nil
}

// Note is a parsed note request: a line of text kept with the run.
type Note struct {
	Text    string `json:"text"`
	Session string `json:"session,omitempty"`
	IfRev   *int64 `json:"if_rev,omitempty"`
}

// MaxNote bounds a note's text.
const MaxNote = 4096

// ParseNote parses a note request body: the note as plain text, or a JSON
// object {"text": ..., "session": ..., "if_rev": N}.
func ParseNote(body []byte) (Note, error) {
	var n Note
	if err := CheckEncoding(body); err != nil {
		return Note{}, err
	}
	body = TrimBOM(body)
	if isJSON(body) {
		if err := decodeStrict(body, &n); err != nil {
			return n, err
		}
	} else {
		n.Text = strings.ReplaceAll(string(body), "\r\n", "\n")
	}
	n.Text = strings.TrimSpace(n.Text)
	switch {
	case n.Text == "":
		return n, errors.New("an empty note")
	case len(n.Text) > MaxNote:
		return n, fmt.Errorf("a note of %d bytes: at most %d", len(n.Text), MaxNote)
	case !utf8.ValidString(n.Text) || strings.ContainsRune(n.Text, 0):
		return n, errors.New("a note must be UTF-8 text without NUL bytes")
	}
	return n, checkControl(n.Session, n.IfRev)
}

// byteOrderMark is what some editors (Notepad, "UTF-8 with BOM") write
// before a file's text.
const byteOrderMark = "\ufeff"

// CheckEncoding returns an error if b begins with a UTF-16 byte order
// mark, as PowerShell's > and Notepad's "Unicode" save text: every other
// byte of ASCII text is then NUL, and the error a parser would give ("a
// NUL byte", "not valid UTF-8", an unknown signal) would not say why.
func CheckEncoding(b []byte) error {
	if bytes.HasPrefix(b, []byte{0xff, 0xfe}) || bytes.HasPrefix(b, []byte{0xfe, 0xff}) {
		return errors.New("the file is UTF-16 (it begins with a UTF-16 byte order mark, as PowerShell's > and Notepad's \"Unicode\" write): save it as UTF-8")
	}
	return nil
}

// TrimBOM returns b without a leading UTF-8 byte order mark: it is never
// part of a request body (every parser here takes it off) or of a file
// people edit by hand, such as config.json.
func TrimBOM(b []byte) []byte {
	return bytes.TrimPrefix(b, []byte(byteOrderMark))
}

// isJSON reports whether body is meant as a JSON object: '{' then '"' or
// '}' (or nothing yet), ignoring blanks.
func isJSON(body []byte) bool {
	rest := bytes.TrimLeft(body, " \t\r\n")
	if len(rest) == 0 || rest[0] != '{' {
		return false
	}
	rest = bytes.TrimLeft(rest[1:], " \t\r\n")
	return len(rest) == 0 || rest[0] == '"' || rest[0] == '}'
}

// decodeStrict decodes one JSON object into v, refusing unknown fields and
// trailing data, and words errors for people.
func decodeStrict(body []byte, v any) error {
	if i := invalidUTF8(body); i >= 0 {
		// encoding/json would read U+FFFD in their place: what is
		// recorded and done would not be what the request says.
		return fmt.Errorf("not valid UTF-8 (at byte %d): JSON text carries only UTF-8", i)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return ExplainJSON(err, body, v)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("unexpected data after the JSON object")
	}
	return nil
}

// ExplainJSON words err, from decoding body into v with a decoder that
// refuses unknown fields, for people: the field whose value has the
// wrong type, the key of an object of strings whose value is not one
// ("env": "A": ...), and the field an unknown one may be a misspelling
// of.
func ExplainJSON(err error, body []byte, v any) error {
	var typ *json.UnmarshalTypeError
	if errors.As(err, &typ) && typ.Type.Kind() == reflect.String && typ.Field != "" && !strings.Contains(typ.Field, ".") {
		var top map[string]json.RawMessage
		var members map[string]json.RawMessage
		if json.Unmarshal(body, &top) == nil && json.Unmarshal(top[typ.Field], &members) == nil {
			keys := make([]string, 0, len(members))
			for k := range members {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				if raw := bytes.TrimSpace(members[k]); len(raw) > 0 && raw[0] != '"' {
					return fmt.Errorf("%q: %q: want %s, not a JSON %s", typ.Field, k, typ.Type, typ.Value)
				}
			}
		}
	}
	if name, ok := UnknownField(err); ok {
		if s := Suggest(name, jsonFields(reflect.TypeOf(v))); s != "" {
			return fmt.Errorf("unknown field %q (did you mean %q?)", name, s)
		}
	}
	return jsonError(err)
}

// jsonFields returns the JSON names of the fields of struct type t (or
// what it points to) and of the structs in them.
func jsonFields(t reflect.Type) []string {
	for t != nil && (t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map) {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	var names []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "" && name != "-" {
			names = append(names, name)
		}
		names = append(names, jsonFields(f.Type)...)
	}
	return names
}

func jsonError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		return fmt.Errorf("%w JSON: the object is cut off before its end", ErrIncomplete)
	case errors.As(err, &syn):
		return fmt.Errorf("invalid JSON at byte %d: %s", syn.Offset, syn.Error())
	case errors.As(err, &typ):
		return fmt.Errorf("%q: want %s, not a JSON %s", typ.Field, typ.Type, typ.Value)
	}
	if name, ok := UnknownField(err); ok {
		return fmt.Errorf("unknown field %q", name)
	}
	return fmt.Errorf("invalid request: %s", strings.TrimPrefix(err.Error(), "json: "))
}

// UnknownField returns the name of the field an error of a decoder with
// DisallowUnknownFields refused, if that is what err is. encoding/json
// has no type for it, only its words, so they are read here and nowhere
// else; encoding/json/v2's SemanticError would say it by type, but v2
// also matches names case-sensitively, which would refuse requests v1
// takes.
func UnknownField(err error) (string, bool) {
	rest, ok := strings.CutPrefix(err.Error(), "json: unknown field ")
	if !ok {
		return "", false
	}
	name, uerr := strconv.Unquote(rest)
	if uerr != nil {
		return rest, true
	}
	return name, true
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// ParseControl parses the body of control request n (any verb but start,
// or a selector request) as the watcher takes it, and returns why it does
// not parse, or nil.
func ParseControl(n Name, body []byte) error {
	var err error
	switch {
	case n.ID == SelectID:
		_, err = ParseSelect(n.Verb, body)
	case n.Verb == VerbStart:
		err = fmt.Errorf("%s is a start request, not a control request", n)
	case n.Verb == VerbDelete:
		_, err = ParseDelete(body)
	case n.Verb == VerbLabel:
		_, err = ParseLabel(body)
	case n.Verb == VerbNote:
		_, err = ParseNote(body)
	case n.Verb == VerbSignal:
		_, err = ParseSignal(body)
	default: // cancel, restart, pause and resume share one body
		_, err = ParseCancel(body)
	}
	return err
}
