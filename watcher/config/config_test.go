package config

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tendhq/tend/tracker"
	"github.com/tendhq/tend/tracker/layout"
)

func TestLoad(t *testing.T) {
	with := func(change func(*Settings)) Settings {
		s := Default
		change(&s)
		return s
	}
	tests := []struct {
		config  string
		want    Settings
		wantErr string
	}{
		{"", Default, ""}, // no file
		{`{"max_running": 2, "max_running_per_session": 1}`, with(func(s *Settings) { s.MaxRunning, s.MaxPerSession = 2, 1 }), ""},
		{`{"keep_finished_for": "24h", "keep_finished": 0}`, with(func(s *Settings) { s.KeepFinishedFor, s.KeepFinished = 24*time.Hour, 0 }), ""},
		{`{"keep_finished_for": 60}`, with(func(s *Settings) { s.KeepFinishedFor = time.Minute }), ""},
		{`{"durability": "watcher_crash"}`, with(func(s *Settings) { s.Durability = tracker.WatcherCrash }), ""},
		{`{"durability": "power_loss"}`, Default, ""},
		{"\ufeff{\"durability\": \"power_loss\"}\r\n", Default, ""},        // saved by Notepad
		{"\xff\xfe{\x00}\x00", Default, "config.json: the file is UTF-16"}, // saved by PowerShell's >
		{`{"durability": "none"}`, Default, `config.json: "durability": "none" is neither "power_loss" nor "watcher_crash"`},
		{`{"queue_edit_window": "5s"}`, with(func(s *Settings) { s.QueueEditWindow = 5 * time.Second }), ""},
		{`{"queue_edit_window": 0}`, with(func(s *Settings) { s.QueueEditWindow = 0 }), ""},
		{`{"queue_edit_window": "-1s"}`, Default, `"queue_edit_window"`},
		{`{"max_runing": 2}`, Default, `unknown field "max_runing" (did you mean "max_running"?): fields are max_running, max_running_per_session`},
		{`{"max_running": -1}`, Default, `"max_running": -1 is negative`},
		{`{"max_running": `, Default, "config.json"},
	}
	for _, tt := range tests {
		root := t.TempDir()
		if tt.config != "" {
			os.WriteFile(layout.Root(root).Config(), []byte(tt.config), 0o644)
		}
		got, err := Load(root, Default, Names{})
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Load(%s) err = %v, want %q", tt.config, err, tt.wantErr)
			}
		} else if err != nil || !got.Equal(tt.want) {
			t.Errorf("Load(%s) = %+v, %v; want %+v", tt.config, got, err, tt.want)
		}
	}
}

func TestExpired(t *testing.T) {
	now := time.Now()
	at := func(ago time.Duration) *time.Time { t := now.Add(-ago); return &t }
	runs := []*tracker.State{
		{ID: "new", State: tracker.Completed, EndedAt: at(time.Minute)},
		{ID: "mid", State: tracker.Failed, EndedAt: at(time.Hour)},
		{ID: "old", State: tracker.Canceled, EndedAt: at(48 * time.Hour)},
		{ID: "live", State: tracker.Running},
		{ID: "waiting", State: tracker.Queued},
	}
	tests := []struct {
		limits Settings
		want   string
	}{
		{Settings{KeepFinishedFor: 24 * time.Hour}, "old"},
		{Settings{KeepFinished: 1}, "mid old"},
		{Settings{KeepFinished: 2, KeepFinishedFor: 30 * time.Second}, "new mid old"},
		{Settings{}, ""},
	}
	for _, tt := range tests {
		if got := strings.Join(Expired(runs, tt.limits, now), " "); got != tt.want {
			t.Errorf("Expired(%+v) = %q, want %q", tt.limits, got, tt.want)
		}
	}
}

// TestLoadNames: the lists are resolved by the lookups the caller passes,
// left as they are without them, and a name that does not exist is an
// error naming the list. (As root: a non-root watcher refuses the lists.)
func TestLoadNames(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("users and groups are refused to a watcher not running as root")
	}
	ids := map[string]int{"alice": 1001, "ci": 2000, "7": 7}
	lookup := func(name string) (int, error) {
		if id, ok := ids[name]; ok {
			return id, nil
		}
		return 0, errors.New("no such name")
	}
	tests := []struct {
		config      string
		names       Names
		users, grps []int
		wantErr     string
	}{
		{`{"users": ["alice", "7"], "groups": ["ci"]}`, Names{User: lookup, Group: lookup}, []int{7, 1001}, []int{2000}, ""},
		{`{"users": ["alice", "7"], "groups": ["ci"]}`, Names{}, nil, nil, ""},
		{`{"users": ["bob"]}`, Names{User: lookup, Group: lookup}, nil, nil, `"users": no such name`},
		{`{"users": ["bob"]}`, Names{}, nil, nil, ""},
		{`{"groups": ["nobody-here"]}`, Names{User: lookup, Group: lookup}, nil, nil, `"groups": no such name`},
	}
	for _, tt := range tests {
		root := t.TempDir()
		os.WriteFile(layout.Root(root).Config(), []byte(tt.config), 0o644)
		got, err := Load(root, Default, tt.names)
		switch {
		case tt.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Load(%s) err = %v, want %q", tt.config, err, tt.wantErr)
			}
		case err != nil:
			t.Errorf("Load(%s): %v", tt.config, err)
		case !slices.Equal(got.Users, tt.users) || !slices.Equal(got.Groups, tt.grps):
			t.Errorf("Load(%s) users %v groups %v, want %v %v", tt.config, got.Users, got.Groups, tt.users, tt.grps)
		}
	}
}

// LoadAs judges config.json as a watcher running as the uid given would,
// whoever calls it; LoadAsOwner as one running as the root's owner.
func TestLoadAs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("makes files of other users: needs root")
	}
	tests := []struct {
		config  string
		owner   int // of config.json
		uid     int // of the watcher
		wantErr string
	}{
		{`{"groups": ["ci"]}`, 0, 0, ""},
		{`{"groups": ["ci"]}`, 0, 1001, `"users" and "groups" need a watcher running as root, to run requests as their writers (this is uid 1001)`},
		{`{"max_running": 1}`, 0, 1001, ""},
		{`{"max_running": 1}`, 1001, 1001, ""},
		{`{"max_running": 1}`, 1001, 0, `owned by uid 1001: only this user (uid 0) or root may configure tend here`},
		{`{"max_running": 1}`, 1001, 1002, `owned by uid 1001: only this user (uid 1002) or root may configure tend here`},
	}
	for _, tt := range tests {
		for _, asOwner := range []bool{false, true} {
			root := t.TempDir()
			path := layout.Root(root).Config()
			if err := os.WriteFile(path, []byte(tt.config), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(path, tt.owner, -1); err != nil {
				t.Fatal(err)
			}
			var err error
			if asOwner {
				if err := os.Chown(root, tt.uid, -1); err != nil {
					t.Fatal(err)
				}
				_, err = LoadAsOwner(root, Default, Names{})
			} else {
				_, err = LoadAs(root, Default, Names{}, tt.uid)
			}
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("config %s of uid %d, a watcher of uid %d (as the root's owner: %v): err = %v, want %q", tt.config, tt.owner, tt.uid, asOwner, err, tt.wantErr)
			}
		}
	}
}
