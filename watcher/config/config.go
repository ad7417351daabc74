// Package config reads and writes ROOT/config.json, the watcher's settings
// that may change while it runs. It resolves no user or group name by
// itself, so that a client reading the file (tend status, tend gc) need
// not link the system's name services: the watcher passes its own
// lookups (Names).
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
	"github.com/tendhq/tend/tracker/durable"
	"github.com/tendhq/tend/tracker/layout"
	"golang.org/x/sys/unix"
)

// Settings are the watcher's settings that ROOT/config.json may change
// while it runs.
type Settings struct {
	// MaxRunning is how many runs may be live at once (0: no limit); the
	// others wait, queued, in arrival order.
	MaxRunning int
	// MaxPerSession is how many of those one session may hold (0: no limit).
	MaxPerSession int
	// KeepFinishedFor and KeepFinished bound the finished records kept:
	// older ones, and those beyond the newest KeepFinished, are deleted
	// (0: no bound).
	KeepFinishedFor time.Duration
	KeepFinished    int
	// Durability is what every run record survives once written, and so
	// once anyone may have seen it or acted on it.
	Durability tracker.Durability
	// QueueEditWindow is how long a queued run's request may be missing
	// from the spool before its removal cancels the run: editors and tools
	// that save by removing and re-creating a file (vim with a backup,
	// install(1), mv from another file system) leave such a moment.
	QueueEditWindow time.Duration
	// Users and Groups are who else may submit requests to a watcher
	// running as root: the uids named, and the members of the gids named.
	// Their requests run as their writers.
	Users, Groups []int
	// Slurm says which runs go to a Slurm cluster unless their requests
	// say otherwise, and how often the watcher asks it about them.
	Slurm SlurmSettings
}

// SlurmSettings are config.json's "slurm".
type SlurmSettings struct {
	// Default, if set, sends every run to Slurm with these settings
	// (under its request's); Sessions does for the runs of a session.
	Default  *spool.Slurm
	Sessions map[string]*spool.Slurm
	// Poll is how often squeue is run while any run is on Slurm (one
	// call for all of them).
	Poll time.Duration
}

// DefaultSlurmPoll is the default of SlurmSettings.Poll.
const DefaultSlurmPoll = 2 * time.Second

// slurmConfig is config.json's "slurm" object.
type slurmConfig struct {
	Default      json.RawMessage            `json:"default"`
	Sessions     map[string]json.RawMessage `json:"sessions"`
	PollInterval json.RawMessage            `json:"poll_interval"`
}

// parseSlurmConfig reads config.json's "slurm" over base.
func parseSlurmConfig(raw json.RawMessage, base SlurmSettings) (SlurmSettings, error) {
	var c slurmConfig
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return base, fmt.Errorf("%q: %v (its fields are default, sessions and poll_interval)", "slurm", strings.TrimPrefix(err.Error(), "json: "))
	}
	s := base
	var err error
	if len(c.Default) > 0 && string(c.Default) != "null" {
		if s.Default, err = spool.ParseSlurmDefaults("slurm.default", c.Default); err != nil {
			return base, err
		}
	}
	if c.Sessions != nil {
		s.Sessions = make(map[string]*spool.Slurm, len(c.Sessions))
		for name, raw := range c.Sessions {
			if err := spool.ValidID(name); err != nil {
				return base, fmt.Errorf("%q: session %q: %v", "slurm.sessions", name, err)
			}
			if s.Sessions[name], err = spool.ParseSlurmDefaults("slurm.sessions."+name, raw); err != nil {
				return base, err
			}
		}
	}
	if len(c.PollInterval) > 0 && string(c.PollInterval) != "null" {
		var d spool.Duration
		if err := d.UnmarshalJSON(c.PollInterval); err != nil {
			return base, fmt.Errorf("%q: %v", "slurm.poll_interval", err)
		}
		if d.D() < 100*time.Millisecond || d.D() > time.Hour {
			return base, fmt.Errorf("%q: %s: want 100ms to 1h", "slurm.poll_interval", d.D())
		}
		s.Poll = d.D()
	}
	return s, nil
}

// Equal reports whether s and o are the same settings.
func (s Settings) Equal(o Settings) bool {
	return s.MaxRunning == o.MaxRunning && s.MaxPerSession == o.MaxPerSession &&
		s.KeepFinishedFor == o.KeepFinishedFor && s.KeepFinished == o.KeepFinished &&
		s.Durability == o.Durability && s.QueueEditWindow == o.QueueEditWindow &&
		slices.Equal(s.Users, o.Users) && slices.Equal(s.Groups, o.Groups) &&
		reflect.DeepEqual(s.Slurm, o.Slurm)
}

// Default are the settings when neither flags nor config.json say
// otherwise: no cap on runs, finished records kept for a week, at most
// 1,000 of them, every record durable against a power loss, and a second
// for a queued request's writer to put it back.
var Default = Settings{KeepFinishedFor: 7 * 24 * time.Hour, KeepFinished: 1000, Durability: tracker.PowerLoss, QueueEditWindow: time.Second,
	Slurm: SlurmSettings{Poll: DefaultSlurmPoll}}

// configFile is config.json; a field left out keeps the watcher's value.
type configFile struct {
	MaxRunning           *int            `json:"max_running"`
	MaxRunningPerSession *int            `json:"max_running_per_session"`
	KeepFinishedFor      json.RawMessage `json:"keep_finished_for"`
	KeepFinished         *int            `json:"keep_finished"`
	Durability           *string         `json:"durability"`
	QueueEditWindow      json.RawMessage `json:"queue_edit_window"`
	Users                *[]string       `json:"users"`
	Groups               *[]string       `json:"groups"`
	Slurm                json.RawMessage `json:"slurm"`
}

// configKeys returns the fields config.json may have.
func configKeys() []string {
	var keys []string
	t := reflect.TypeFor[configFile]()
	for i := range t.NumField() {
		keys = append(keys, t.Field(i).Tag.Get("json"))
	}
	return keys
}

// maxConfig bounds config.json: it is a few lines, and a file that is not
// (a link to /dev/zero, a huge file) must not take the watcher's memory.
const maxConfig = 64 << 10

// Names resolves the user and group names (or decimal ids) config.json
// lists to ids; an error says which one does not exist. A nil function
// leaves its list unresolved: Load then checks everything else, and
// Settings.Users or Groups stays as base has it.
type Names struct {
	User, Group func(name string) (int, error)
}

// Load returns base with what root's config.json sets on top. A
// missing file changes nothing; a bad one is an error naming the file and
// the field, and changes nothing either. It is read only as a regular file
// of at most 64 KiB, owned by this process's user or root and writable by
// no one else, never through a link and never blocking: anything else is
// a bad config.
func Load(root string, base Settings, names Names) (Settings, error) {
	return LoadAs(root, base, names, os.Geteuid())
}

// LoadAsOwner is Load as the root's watcher judges config.json: one that
// runs as the owner of the root directory, whoever calls it (a member of a
// shared root reads root's config.json, which lists users and groups only
// a watcher running as root may take). A root it cannot look at is judged
// as this process's user would be.
func LoadAsOwner(root string, base Settings, names Names) (Settings, error) {
	uid := os.Geteuid()
	var st unix.Stat_t
	if unix.Stat(root, &st) == nil {
		uid = int(st.Uid)
	}
	return LoadAs(root, base, names, uid)
}

// LoadAs is Load as a watcher running as uid would judge config.json.
func LoadAs(root string, base Settings, names Names, uid int) (Settings, error) {
	path := layout.Root(root).Config()
	b, fi, err := durable.ReadRegular(path, maxConfig)
	if errors.Is(err, os.ErrNotExist) {
		return base, nil
	}
	if err != nil {
		return base, fmt.Errorf("%s: %w", path, err)
	}
	if owner := int(fi.Uid); owner != uid && owner != 0 {
		return base, fmt.Errorf("%s: owned by uid %d: only this user (uid %d) or root may configure tend here", path, owner, uid)
	}
	if fi.Mode&0o022 != 0 {
		return base, fmt.Errorf("%s: writable by others (mode %04o): not trusted", path, fi.Mode&0o7777)
	}
	if err := spool.CheckEncoding(b); err != nil {
		return base, fmt.Errorf("%s: %w", path, err)
	}
	if len(bytes.TrimSpace(spool.TrimBOM(b))) == 0 {
		// Not taken for the defaults: a power loss leaves a file empty
		// that tend up --shared wrote, and its groups would be lost.
		return base, fmt.Errorf("%s: empty: write {} for the defaults, or remove it", path)
	}
	var c configFile
	dec := json.NewDecoder(bytes.NewReader(spool.TrimBOM(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		if field, ok := spool.UnknownField(err); ok {
			msg := fmt.Sprintf("unknown field %q", field)
			if s := spool.Suggest(field, configKeys()); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			return base, fmt.Errorf("%s: %s: fields are %s", layout.Root(root).Config(), msg, strings.Join(configKeys(), ", "))
		}
		return base, fmt.Errorf("%s: %w", layout.Root(root).Config(), spool.ExplainJSON(err, spool.TrimBOM(b), &c))
	}
	l := base
	for _, f := range []struct {
		name string
		v    *int
		dst  *int
	}{
		{"max_running", c.MaxRunning, &l.MaxRunning},
		{"max_running_per_session", c.MaxRunningPerSession, &l.MaxPerSession},
		{"keep_finished", c.KeepFinished, &l.KeepFinished},
	} {
		if f.v == nil {
			continue
		}
		if *f.v < 0 {
			return base, fmt.Errorf("%s: %q: %d is negative", layout.Root(root).Config(), f.name, *f.v)
		}
		*f.dst = *f.v
	}
	for _, f := range []struct {
		name string
		raw  json.RawMessage
		dst  *time.Duration
	}{
		{"keep_finished_for", c.KeepFinishedFor, &l.KeepFinishedFor},
		{"queue_edit_window", c.QueueEditWindow, &l.QueueEditWindow},
	} {
		if f.raw == nil || string(f.raw) == "null" {
			continue
		}
		var d spool.Duration
		if err := d.UnmarshalJSON(f.raw); err != nil {
			return base, fmt.Errorf("%s: %q: %v", layout.Root(root).Config(), f.name, err)
		}
		*f.dst = d.D()
	}
	if c.Durability != nil {
		d, err := tracker.ParseDurability(*c.Durability)
		if err != nil {
			return base, fmt.Errorf("%s: %q: %w", layout.Root(root).Config(), "durability", err)
		}
		l.Durability = d
	}
	if c.Users != nil && names.User != nil {
		if l.Users, err = resolveAll(*c.Users, names.User); err != nil {
			return base, fmt.Errorf("%s: %q: %w", layout.Root(root).Config(), "users", err)
		}
	}
	if c.Groups != nil && names.Group != nil {
		if l.Groups, err = resolveAll(*c.Groups, names.Group); err != nil {
			return base, fmt.Errorf("%s: %q: %w", layout.Root(root).Config(), "groups", err)
		}
	}
	if len(c.Slurm) > 0 && string(c.Slurm) != "null" {
		if l.Slurm, err = parseSlurmConfig(c.Slurm, l.Slurm); err != nil {
			return base, fmt.Errorf("%s: %w", layout.Root(root).Config(), err)
		}
	}
	if l.Slurm.Poll == 0 {
		l.Slurm.Poll = DefaultSlurmPoll
	}
	listed := c.Users != nil && len(*c.Users) > 0 || c.Groups != nil && len(*c.Groups) > 0
	if (listed || len(l.Users)+len(l.Groups) > 0) && uid != 0 {
		return base, fmt.Errorf("%s: %q and %q need a watcher running as root, to run requests as their writers (this is uid %d)",
			layout.Root(root).Config(), "users", "groups", uid)
	}
	return l, nil
}

// resolveAll returns the ids of names (each a name or a number), sorted,
// as lookup finds them.
func resolveAll(names []string, lookup func(string) (int, error)) ([]int, error) {
	ids := make([]int, 0, len(names))
	for _, name := range names {
		id, err := lookup(name)
		if err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
}

// Expired returns the IDs of the finished runs among runs that limits do
// not keep: those that ended longer than KeepFinishedFor before now, and
// those beyond the newest KeepFinished. Active runs are never among them.
func Expired(runs []*tracker.State, limits Settings, now time.Time) []string {
	var done []*tracker.State
	for _, st := range runs {
		if tracker.Final(st.State) && st.EndedAt != nil {
			done = append(done, st)
		}
	}
	slices.SortFunc(done, func(a, b *tracker.State) int { return b.EndedAt.Compare(*a.EndedAt) }) // newest first
	var ids []string
	for i, st := range done {
		old := limits.KeepFinishedFor > 0 && now.Sub(*st.EndedAt) > limits.KeepFinishedFor
		over := limits.KeepFinished > 0 && i >= limits.KeepFinished
		if old || over {
			ids = append(ids, st.ID)
		}
	}
	return ids
}

// AllowGroup adds group, which the caller found exists, to the groups
// root's config.json allows to submit requests (see Settings.Groups),
// keeping what else it says; a running watcher takes the change at once.
// config.json is replaced atomically, readable by everyone, writable by
// its owner alone.
func AllowGroup(root, group string) error {
	path := layout.Root(root).Config()
	fields := map[string]json.RawMessage{}
	b, _, err := durable.ReadRegular(path, maxConfig)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return fmt.Errorf("%s: %w", path, err)
	default:
		if err := json.Unmarshal(spool.TrimBOM(b), &fields); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	var groups []string
	if raw, ok := fields["groups"]; ok {
		if err := json.Unmarshal(raw, &groups); err != nil {
			return fmt.Errorf("%s: %q: %w", path, "groups", err)
		}
	}
	if slices.Contains(groups, group) {
		return nil
	}
	fields["groups"], _ = json.Marshal(append(groups, group))
	out, err := json.MarshalIndent(fields, "", "  ")
	if err != nil {
		return err
	}
	return durable.Replace(path, append(out, '\n'), durable.Perm{Mode: 0o644}, durable.Durable{File: durable.FlushConfig, Dir: durable.FlushConfigDir})
}
