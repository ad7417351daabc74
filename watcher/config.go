package watcher

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
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
}

// DefaultSettings are the settings when neither flags nor config.json say
// otherwise: no cap on runs, finished records kept for a week, at most
// 1,000 of them, every record durable against a power loss, and a second
// for a queued request's writer to put it back.
var DefaultSettings = Settings{KeepFinishedFor: 7 * 24 * time.Hour, KeepFinished: 1000, Durability: tracker.PowerLoss, QueueEditWindow: time.Second}

// ConfigPath returns the path of root's config.json.
func ConfigPath(root string) string { return filepath.Join(root, "config.json") }

// configFile is config.json; a field left out keeps the watcher's value.
type configFile struct {
	MaxRunning           *int            `json:"max_running"`
	MaxRunningPerSession *int            `json:"max_running_per_session"`
	KeepFinishedFor      json.RawMessage `json:"keep_finished_for"`
	KeepFinished         *int            `json:"keep_finished"`
	Durability           *string         `json:"durability"`
	QueueEditWindow      json.RawMessage `json:"queue_edit_window"`
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

// LoadSettings returns base with what root's config.json sets on top. A
// missing file changes nothing; a bad one is an error naming the file and
// the field, and changes nothing either.
func LoadSettings(root string, base Settings) (Settings, error) {
	b, err := os.ReadFile(ConfigPath(root))
	if errors.Is(err, os.ErrNotExist) {
		return base, nil
	}
	if err != nil {
		return base, err
	}
	var c configFile
	dec := json.NewDecoder(bytes.NewReader(spool.TrimBOM(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		if field, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			msg := "unknown field " + field
			if s := spool.Suggest(strings.Trim(field, `"`), configKeys()); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			return base, fmt.Errorf("%s: %s: fields are %s", ConfigPath(root), msg, strings.Join(configKeys(), ", "))
		}
		return base, fmt.Errorf("%s: %w", ConfigPath(root), err)
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
			return base, fmt.Errorf("%s: %q: %d is negative", ConfigPath(root), f.name, *f.v)
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
			return base, fmt.Errorf("%s: %q: %v", ConfigPath(root), f.name, err)
		}
		*f.dst = d.D()
	}
	if c.Durability != nil {
		d, err := tracker.ParseDurability(*c.Durability)
		if err != nil {
			return base, fmt.Errorf("%s: %q: %w", ConfigPath(root), "durability", err)
		}
		l.Durability = d
	}
	return l, nil
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
