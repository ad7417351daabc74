// Package layout names every file and directory of a tend root, as
// docs/protocol.md's "The root" and "Runs" list them, so that each is
// spelled in one place. It only joins paths: it neither reads nor writes,
// and it imports nothing of tend's, so clients, the watcher and fsck all
// use it without depending on each other.
package layout

import (
	"path/filepath"
	"strconv"
)

// Root is a tend root's directory.
type Root string

// Spool is where clients put requests.
func (r Root) Spool() string { return r.join("spool") }

// Outcomes holds the answers to requests.
func (r Root) Outcomes() string { return r.join("outcomes") }

// Claims holds the control requests the watcher has claimed, and the
// runs its selector requests selected, while they are carried out: only
// the watcher writes there.
func (r Root) Claims() string { return r.join("claims") }

// Rejected holds refused requests, each beside its reason.
func (r Root) Rejected() string { return r.join("rejected") }

// Runs holds a directory per run.
func (r Root) Runs() string { return r.join("runs") }

// Run is run id's directory.
func (r Root) Run(id string) Run { return Run(filepath.Join(string(r), "runs", id)) }

// Exits holds how runs ended while no watcher ran (written by the keeper).
func (r Root) Exits() string { return r.join("exits") }

// History is the current history file, history.jsonl.
func (r Root) History() string { return r.join(HistoryName) }

// RotatedHistory is the n-th rotated history file (n >= 1), older as n
// grows.
func (r Root) RotatedHistory(n int) string { return r.join("history." + strconv.Itoa(n) + ".jsonl") }

// PendingHistory holds the history lines that wait while the history's last
// line is torn.
func (r Root) PendingHistory() string { return r.join("history.pending.jsonl") }

// HistoryLock is the flock that orders appends to the history.
func (r Root) HistoryLock() string { return r.join("history.lock") }

// WatcherLock is held by the one running watcher.
func (r Root) WatcherLock() string { return r.join("watcher.lock") }

// WatcherPID is the running watcher's PID: a hint; the lock decides.
func (r Root) WatcherPID() string { return r.join("watcher.pid") }

// WatcherInfo is watcher.json, written once the watcher takes requests.
func (r Root) WatcherInfo() string { return r.join("watcher.json") }

// Unsynced is there while what a watcher wrote with durability
// watcher_crash may not be on disk yet: made before the first such
// write, removed once syncfs(2) has made it durable. A flush that failed
// is recorded in it, and keeps it until tend fsck --repair.
func (r Root) Unsynced() string { return r.join("unsynced") }

// WatcherLog is the keeper's and watcher's log, when tend up started them.
func (r Root) WatcherLog() string { return r.join("watcher.log") }

// KeeperLock is held by the keeper in charge of the root.
func (r Root) KeeperLock() string { return r.join("keeper.lock") }

// KeeperPID is that keeper's PID.
func (r Root) KeeperPID() string { return r.join("keeper.pid") }

// UpLock makes concurrent tend ups take turns.
func (r Root) UpLock() string { return r.join("up.lock") }

// Config is config.json, written by people.
func (r Root) Config() string { return r.join("config.json") }

// Queue lists the queued runs' IDs in order.
func (r Root) Queue() string { return r.join("queue") }

// ListCache is tend ls's cache of finished runs.
func (r Root) ListCache() string { return r.join("list.cache") }

// StartLog is the watcher's start log (tracker.StartLog): runs' starts
// and ends, flushed before what depends on them, until their files are
// durable where they belong.
func (r Root) StartLog() string { return r.join("startlog") }

// UnverifiedStartLog is where a start log whose records do not verify
// with the root's key is moved aside (a second one is this and ".2",
// and so on), and UnverifiedStartLogReason the file that says why.
func (r Root) UnverifiedStartLog() string { return r.join("startlog.unverified") }

// UnverifiedStartLogReason: see UnverifiedStartLog.
func (r Root) UnverifiedStartLogReason() string { return r.join("startlog.unverified.error") }

// RecordKey is the key of the records' seals.
func (r Root) RecordKey() string { return r.join("record.key") }

func (r Root) join(name string) string { return filepath.Join(string(r), name) }

// HistoryName is the current history file's name, which fsck and the
// history's readers match among its rotated siblings.
const HistoryName = "history.jsonl"

// Run is a run's directory, runs/<id>.
type Run string

// Request is the start request exactly as it was submitted.
func (d Run) Request() string { return d.join("request") }

// State is the run's record, state.json.
func (d Run) State() string { return d.join("state.json") }

// Stream is the run's output stream name, "stdout" or "stderr".
func (d Run) Stream(name string) string { return d.join(name) }

// Progress is what the run writes to $TEND_PROGRESS.
func (d Run) Progress() string { return d.join("progress") }

// Order is where the run's writes switched from one stream to the other.
func (d Run) Order() string { return d.join("order") }

// Cut lists the cuts of the output files under way.
func (d Run) Cut() string { return d.join("cut") }

// Ready is created by the run when it is ready.
func (d Run) Ready() string { return d.join("ready") }

// Started is created by the run's process once it has passed its start
// gate (on a cluster, by its job once its command is about to run).
func (d Run) Started() string { return d.join("started") }

// Gate is made by tend, holding "closed", before the run's process starts;
// the process writes "passed" over it, synced, once it has passed its
// start gate.
func (d Run) Gate() string { return d.join("gate") }

// Exit is how a run on a cluster ended, written there by its job.
func (d Run) Exit() string { return d.join("exit") }

func (d Run) join(name string) string { return filepath.Join(string(d), name) }
