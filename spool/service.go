package spool

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Restart policies.
const (
	RestartNever     = "never"
	RestartOnFailure = "on-failure"
	RestartAlways    = "always"
)

// Restart is a run's restart policy: whether its process is started again
// when it ends, at most Limit times within Window, after a delay that
// starts at Delay and doubles (with jitter) up to MaxDelay.
type Restart struct {
	Policy   string   `json:"policy"`
	Limit    int      `json:"limit"`
	Window   Duration `json:"window"`
	Delay    Duration `json:"delay"`
	MaxDelay Duration `json:"max_delay"`
}

// DefaultRestart holds the defaults of every field but Policy.
var DefaultRestart = Restart{Limit: 5, Window: Duration(time.Minute), Delay: Duration(time.Second), MaxDelay: Duration(30 * time.Second)}

// Health is a run's health check: exactly one of TCP (host:port accepts a
// connection), HTTP (a GET answers 2xx) and Exec (a shell command exits
// 0), every Interval (default 1s), each given Timeout (1s); Retries (3)
// failures in a row make the run unhealthy, except during StartPeriod
// (30s) after each start, while it may still be starting up.
type Health struct {
	TCP         string   `json:"tcp,omitempty"`
	HTTP        string   `json:"http,omitempty"`
	Exec        string   `json:"exec,omitempty"`
	Interval    Duration `json:"interval"`
	Timeout     Duration `json:"timeout"`
	Retries     int      `json:"retries"`
	StartPeriod Duration `json:"start_period"`
}

// Rlimits are resource limits set in a run's process before its command
// runs. Unset fields keep the watcher's.
type Rlimits struct {
	NoFile *int64    `json:"nofile,omitempty"` // open files
	NProc  *int64    `json:"nproc,omitempty"`  // processes of the user
	CPU    *Duration `json:"cpu,omitempty"`    // CPU time (whole seconds)
	Core   *int64    `json:"core,omitempty"`   // core file size, bytes
	AS     *int64    `json:"as,omitempty"`     // address space, bytes
}

// parseRestart parses "restart": a policy name, or an object.
func parseRestart(raw json.RawMessage) (*Restart, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	r := DefaultRestart
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &r.Policy); err != nil {
			return nil, fmt.Errorf(`"restart": %v`, err)
		}
	} else if err := decodeStrict(raw, &r); err != nil {
		return nil, fmt.Errorf(`"restart": %v`, err)
	}
	switch {
	case r.Policy != RestartNever && r.Policy != RestartOnFailure && r.Policy != RestartAlways:
		return nil, fmt.Errorf(`"restart": policy %q: want never, on-failure or always`, r.Policy)
	case r.Limit < 0:
		return nil, errors.New(`"restart": "limit" is negative`)
	case r.Window <= 0 || r.Delay < 0 || r.MaxDelay < r.Delay:
		return nil, errors.New(`"restart": want window > 0 and 0 <= delay <= max_delay`)
	}
	if r.Policy == RestartNever {
		return nil, nil
	}
	return &r, nil
}

// parseHealth parses "health".
func parseHealth(raw json.RawMessage) (*Health, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	h := Health{Interval: Duration(time.Second), Timeout: Duration(time.Second), Retries: 3, StartPeriod: Duration(30 * time.Second)}
	if err := decodeStrict(raw, &h); err != nil {
		return nil, fmt.Errorf(`"health": %v`, err)
	}
	kinds := 0
	for _, k := range []string{h.TCP, h.HTTP, h.Exec} {
		if k != "" {
			kinds++
		}
	}
	if kinds != 1 {
		return nil, errors.New(`"health": give exactly one of "tcp", "http" and "exec"`)
	}
	if h.TCP != "" {
		if _, _, err := net.SplitHostPort(h.TCP); err != nil {
			var ae *net.AddrError
			if errors.As(err, &ae) {
				err = errors.New(ae.Err) // without the address, quoted below
			}
			return nil, fmt.Errorf(`"health": "tcp": %q: %v`, h.TCP, err)
		}
	}
	if h.HTTP != "" {
		if u, err := url.Parse(h.HTTP); err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
			return nil, errors.New(`"health": "http": not an http(s) URL with a host`) // not quoted: it may hold a password
		}
	}
	if h.Interval < Duration(MinHealthInterval) || h.Timeout <= 0 || h.Retries < 1 || h.StartPeriod < 0 {
		return nil, fmt.Errorf(`"health": want interval >= %v, timeout > 0, retries >= 1`, MinHealthInterval)
	}
	return &h, nil
}

// MinHealthInterval is the shortest interval between health checks: each
// is the watcher's work (a connection, a request, or a process of the
// run's user), which a shorter one would let any user turn into a busy
// loop of the watcher's.
const MinHealthInterval = 100 * time.Millisecond

// parseRlimits parses "limits".
func parseRlimits(raw json.RawMessage) (*Rlimits, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var l Rlimits
	if err := decodeStrict(raw, &l); err != nil {
		return nil, fmt.Errorf(`"limits": %v`, err)
	}
	for name, v := range map[string]*int64{"nofile": l.NoFile, "nproc": l.NProc, "core": l.Core, "as": l.AS} {
		if v != nil && *v < 0 {
			return nil, fmt.Errorf(`"limits": %q is negative`, name)
		}
	}
	if l.CPU != nil && l.CPU.D() < time.Second {
		return nil, errors.New(`"limits": "cpu" is under one second`)
	}
	return &l, nil
}

// An Rlimit is one resource limit of Rlimits, as setrlimit(2) takes it.
type Rlimit struct {
	Name     string // the field of "limits" it comes from
	Resource int    // RLIMIT_...
	unix.Rlimit
}

// List returns the limits l sets, in the order of its fields. Each sets
// the soft and the hard limit, as a shell's ulimit does, except the CPU
// time: its soft limit is a second below the hard one, so the run gets
// SIGXCPU (which says why it ended) before SIGKILL.
func (l *Rlimits) List() []Rlimit {
	if l == nil {
		return nil
	}
	var list []Rlimit
	set := func(name string, res int, soft, hard int64) {
		list = append(list, Rlimit{name, res, unix.Rlimit{Cur: uint64(soft), Max: uint64(hard)}})
	}
	if l.NoFile != nil {
		set("nofile", unix.RLIMIT_NOFILE, *l.NoFile, *l.NoFile)
	}
	if l.NProc != nil {
		set("nproc", unix.RLIMIT_NPROC, *l.NProc, *l.NProc)
	}
	if l.CPU != nil {
		secs := int64(l.CPU.D() / time.Second)
		set("cpu", unix.RLIMIT_CPU, secs, secs+1)
	}
	if l.Core != nil {
		set("core", unix.RLIMIT_CORE, *l.Core, *l.Core)
	}
	if l.AS != nil {
		set("as", unix.RLIMIT_AS, *l.AS, *l.AS)
	}
	return list
}

// Signal is a parsed signal request.
type Signal struct {
	Signal  syscall.Signal
	Session string
	IfRev   *int64
}

// ParseSignal parses a signal request body: a signal's name (HUP, SIGHUP,
// USR1, ...) or number, or a JSON object {"signal": "HUP", "session": ...,
// "if_rev": N}.
func ParseSignal(body []byte) (Signal, error) {
	var s Signal
	if err := CheckEncoding(body); err != nil {
		return Signal{}, err
	}
	body = TrimBOM(body)
	name := strings.TrimSpace(string(body))
	if isJSON(body) {
		var j struct {
			Signal  string `json:"signal"`
			Session string `json:"session"`
			IfRev   *int64 `json:"if_rev"`
		}
		if err := decodeStrict(body, &j); err != nil {
			return s, err
		}
		name, s.Session, s.IfRev = j.Signal, j.Session, j.IfRev
	}
	sig, err := SignalNamed(name)
	if err != nil {
		return s, err
	}
	s.Signal = sig
	return s, checkControl(s.Session, s.IfRev)
}

// SignalNamed returns the signal name names, as tend signal, the signal
// tool and a signal request take it: a name, with or without SIG, in any
// case (TERM, SIGTERM, term), or a number from 1 to 64 in decimal digits
// (15). Nothing else is read as a signal, so that no two readers differ:
// not "-9" (kill's option, not a signal), "+9" or "09" (010 is octal to
// some), nor a name whose letters are not ASCII ("ſıgterm" upper-cases to
// SIGTERM). The signals that stop or continue a process (STOP, TSTP,
// TTIN, TTOU, CONT) are refused, saying to pause or resume the run
// (see jobControl).
func SignalNamed(name string) (syscall.Signal, error) {
	sig, err := signalNum(name)
	if err != nil {
		return 0, err
	}
	return sig, jobControl(sig)
}

// IsSignal reports whether name names a signal, in a form SignalNamed
// reads, whether or not a run may be sent it: for a command line that
// puts it where a run's ID goes.
func IsSignal(name string) bool {
	_, err := signalNum(name)
	return err == nil
}

// signalNum is SignalNamed without its refusal of job control.
func signalNum(name string) (syscall.Signal, error) {
	if name == "" {
		return 0, errors.New("no signal: write its name, such as HUP or USR1")
	}
	if n, err := strconv.Atoi(name); err == nil && name[0] != '+' && name[0] != '-' && name[0] != '0' && n <= 64 {
		return syscall.Signal(n), nil
	}
	if asciiAlnum(name) {
		up := strings.ToUpper(name)
		if sig := unix.SignalNum("SIG" + strings.TrimPrefix(up, "SIG")); sig != 0 {
			return sig, nil
		}
	}
	return 0, fmt.Errorf("unknown signal %q: want a name such as TERM or SIGTERM, or a number from 1 to 64 such as 15, without a sign", name)
}

// jobControl refuses the signals that stop a process (STOP, and TSTP,
// TTIN and TTOU, which stop one that does not catch them) or continue it
// (CONT). Sent as a signal, the watcher would not know: a stopped run
// would still be running to it and to its clients, its timeout counting
// while it cannot work; a paused run continued would be paused to them,
// its timeout suspended while it runs, free to outlive it. A pause (or
// resume) request does the same and records it.
func jobControl(sig syscall.Signal) error {
	switch sig {
	case unix.SIGSTOP, unix.SIGTSTP, unix.SIGTTIN, unix.SIGTTOU:
		return fmt.Errorf("%s is not sent as a signal: it would stop the run while tend records it running, its timeout counting; pause the run instead (tend pause ID, the pause tool, an <id>.pause request), which records it paused and suspends its timeout until it is resumed", unix.SignalName(sig))
	case unix.SIGCONT:
		return fmt.Errorf("%s is not sent as a signal: a paused run would go on while tend records it paused, its timeout suspended; resume the run instead (tend resume ID, the resume tool, an <id>.resume request)", unix.SignalName(sig))
	}
	return nil
}

// asciiAlnum reports whether s has only ASCII letters and digits.
func asciiAlnum(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}
