// Package mcpserver serves tend's control surface to agents as Model
// Context Protocol tools over stdin and stdout: start, ls, show, logs (by
// offset), cancel, cancel_all, restart, wait, signal, pause, resume, delete, delete_all, each answering typed
// JSON with an output schema. The tools are a client of the spool like any
// other (package tend), in the session of the server's TEND_SESSION.
//
// It is the tend-mcp program's, which `tend mcp` runs: the MCP SDK and the
// net/http it brings cost every process that links them about 5 ms of
// start-up, which tend start, tend ls and every other call should not pay.
package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/tendhq/tend"
	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
	"golang.org/x/sys/unix"
)

// Main is the tend-mcp program: it serves the tools on the root its flags
// or environment name (as tend does), and returns its exit code.
//
//	tend-mcp [--root DIR] [--tend PATH] [--no-start]
//
// --tend is the tend program that starts a watcher when a request finds
// none (default: tend beside tend-mcp, else on the PATH); --no-start, or
// TEND_NO_START=1, starts none. The session is TEND_SESSION's.
func Main(version string, args []string, stdin io.Reader, stderr io.Writer) int {
	fs := flag.NewFlagSet("tend-mcp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	root := fs.String("root", os.Getenv("TEND_ROOT"), "the tend root (default: $TEND_ROOT, else the nearest .tend at or above the current directory)")
	tendPath := fs.String("tend", "", "the tend program that starts a watcher (default: tend beside tend-mcp, else on the PATH)")
	noStart := fs.Bool("no-start", envTrue(os.Getenv("TEND_NO_START")), "do not start a watcher when none runs")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "tend mcp: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *root == "" {
		var err error
		if *root, err = tend.FindRoot("."); err != nil {
			fmt.Fprintln(stderr, "tend mcp:", err)
			return 1
		}
	}
	opts := tend.Options{Session: os.Getenv("TEND_SESSION")}
	if !*noStart {
		opts.Watcher = &tend.WatcherOptions{Executable: cmpOr(*tendPath, besideOrOnPath("tend"))}
	}
	client, err := tend.Open(*root, opts)
	if err != nil {
		fmt.Fprintf(stderr, "tend mcp: TEND_SESSION: %v\n", err)
		return 2
	}
	if f, ok := stdin.(*os.File); ok {
		if _, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS); err == nil {
			fmt.Fprintln(stderr, `tend mcp: serving MCP on stdin and stdout, for an agent to run as a command: {"command": "tend", "args": ["mcp"], "env": {"TEND_SESSION": "agent-1"}} (Ctrl-D ends it)`)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT) // (see tend's env.context)
	defer stop()
	if err := Serve(ctx, client, version); err != nil {
		fmt.Fprintln(stderr, "tend mcp:", err)
		return 1
	}
	return 0
}

// Serve serves the tools on client over stdin and stdout until the input
// ends, once every request read is answered, or until ctx ends: then
// the calls under way (a wait) end too, and are answered so. It ends as
// well once the input has ended and the output is gone (the client
// died), as no answer can reach anyone.
func Serve(ctx context.Context, client *tend.Client, version string) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	s := mcp.NewServer(&mcp.Implementation{Name: "tend", Version: version}, nil)
	schemas := addTools(s, &tools{client: client})
	s.AddReceivingMiddleware(checkArgs(schemas), exactNumbers(toolNames), endWith(ctx))
	err := s.Run(ctx, &drainingStdio{out: os.Stdout, gone: stop, end: ctx.Done()})
	if err == nil || errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// endWith ends every call's context when ctx ends. The SDK's handlers
// have contexts of their own, which the server's end does not reach: it
// waits for the calls under way to return, and a wait of an hour held
// tend-mcp up for an hour after SIGTERM (as an agent's client sends to
// stop it) or after its client died.
func endWith(ctx context.Context) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(hctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			hctx, cancel := context.WithCancel(hctx)
			defer cancel()
			defer context.AfterFunc(ctx, cancel)()
			return next(hctx, method, req)
		}
	}
}

// besideOrOnPath returns the program name beside the running one if there
// is one, else name itself, to be looked up on the PATH.
func besideOrOnPath(name string) string {
	self, err := os.Executable()
	if err != nil {
		return name
	}
	p := filepath.Join(filepath.Dir(self), name)
	if _, err := exec.LookPath(p); err == nil {
		return p
	}
	return name
}

// envTrue reports whether an environment variable's value turns a switch
// on, as tend reads it: anything but empty, "0", "false" or "no".
func envTrue(v string) bool {
	switch strings.ToLower(v) {
	case "", "0", "false", "no":
		return false
	}
	return true
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// tools are the MCP tools: each checks its arguments and calls the client.
type tools struct {
	client *tend.Client
}

type startIn struct {
	Command string            `json:"command" jsonschema:"the shell command to run (run by /bin/sh -c)"`
	ID      string            `json:"id,omitempty" jsonschema:"the run's ID: 1 to 64 letters, digits, '.', '_' and '-', not starting with '.' or '-' (default: made from the command)"`
	Cwd     string            `json:"cwd,omitempty" jsonschema:"working directory (default: the server's)"`
	Timeout duration          `json:"timeout,omitempty" jsonschema:"stop the run if it runs longer than this: a Go duration such as \"10m\", or a number of seconds such as 600 (not \"600\": a string has a unit)"`
	Grace   duration          `json:"grace,omitempty" jsonschema:"time between SIGTERM and SIGKILL when the run is stopped: a Go duration such as \"30s\", or a number of seconds (default 10s)"`
	Env     map[string]string `json:"env,omitempty" jsonschema:"variables to set in the run's environment, on top of the server's"`
	Labels  map[string]string `json:"labels,omitempty" jsonschema:"labels to attach"`
	After   []string          `json:"after,omitempty" jsonschema:"runs to wait for, each ID or ID:condition: completed (the default), ended (however it ended) or ready (it runs and is ready); the run is queued until every one holds, and canceled if one no longer can"`
	// NotBefore is a string: an RFC 3339 time or a duration.
	NotBefore string    `json:"not_before,omitempty" jsonschema:"start no earlier than this: an RFC 3339 time, or a duration from now such as 10m"`
	Health    *healthIn `json:"health,omitempty" jsonschema:"a health check, for a server: the run is starting until a check passes, then running and ready (wait with until ready); give exactly one of tcp, http and exec"`
	ReadyFile bool      `json:"ready_file,omitempty" jsonschema:"the run is starting until its command creates the file named in $TEND_READY, then running and ready (wait with until ready)"`
	Restart   string    `json:"restart,omitempty" jsonschema:"restart policy: never (the default), on-failure, or always (up to 5 restarts a minute); with a health check, a run that fails 'retries' checks in a row is restarted"`
	Slurm     *slurmIn  `json:"slurm,omitempty" jsonschema:"run it on the Slurm cluster, with these settings (an empty object: the cluster's defaults, or the root's)"`
	Local     bool      `json:"local,omitempty" jsonschema:"run it on this host even where the root sends runs to Slurm by default"`
}

// healthIn is spool.Health as the start tool takes it: its durations
// strings or numbers of seconds, its defaults those of the spool.
type healthIn struct {
	TCP         string   `json:"tcp,omitempty" jsonschema:"host:port that accepts a connection, such as localhost:8000"`
	HTTP        string   `json:"http,omitempty" jsonschema:"an http or https URL whose GET answers 2xx"`
	Exec        string   `json:"exec,omitempty" jsonschema:"a shell command that exits 0, run as the run is"`
	Interval    duration `json:"interval,omitempty" jsonschema:"time between checks: a Go duration such as \"2s\", or a number of seconds (default 1s, at least 100ms)"`
	Timeout     duration `json:"timeout,omitempty" jsonschema:"each check's time limit (default 1s)"`
	Retries     int      `json:"retries,omitempty" jsonschema:"failed checks in a row that make the run unhealthy (default 3)"`
	StartPeriod duration `json:"start_period,omitempty" jsonschema:"failed checks within this time of each start do not count (default 30s)"`
}

// slurmIn is spool.Slurm as the start tool takes it: its time a string.
type slurmIn struct {
	Partition  string   `json:"partition,omitempty" jsonschema:"the partition (sbatch --partition)"`
	CPUs       int      `json:"cpus,omitempty" jsonschema:"CPUs for the job (sbatch --cpus-per-task)"`
	Memory     string   `json:"memory,omitempty" jsonschema:"memory per node, such as 8G (sbatch --mem)"`
	GPUs       string   `json:"gpus,omitempty" jsonschema:"GPUs: a number, or TYPE:NUMBER (sbatch --gpus)"`
	Nodes      int      `json:"nodes,omitempty" jsonschema:"nodes (sbatch --nodes)"`
	Time       duration `json:"time,omitempty" jsonschema:"Slurm's time limit, a Go duration such as \"2h\", or a number of seconds: past it the run ends timed_out"`
	Account    string   `json:"account,omitempty" jsonschema:"the account to charge (sbatch --account)"`
	QOS        string   `json:"qos,omitempty" jsonschema:"the quality of service (sbatch --qos)"`
	Constraint string   `json:"constraint,omitempty" jsonschema:"node features (sbatch --constraint)"`
	Args       []string `json:"args,omitempty" jsonschema:"further sbatch options, each --name or --name=value"`
}

type lsIn struct {
	All   bool     `json:"all,omitempty" jsonschema:"include runs that ended more than a day ago"`
	State []string `json:"state,omitempty" jsonschema:"only runs in these states: queued, starting, running, paused, backoff, stopping, completed, failed, canceled, timed_out"`
	Label []string `json:"label,omitempty" jsonschema:"only runs with every one of these K=V labels"`
	Full  bool     `json:"full,omitempty" jsonschema:"each run's whole record (seal, sum, process identity, service settings, ...), not its view"`
	// Limit is a pointer: 0 is refused, not taken for the default (see
	// logsIn.MaxBytes).
	Limit *int `json:"limit,omitempty" jsonschema:"at most this many runs, the newest: 1 to 10000 (left out: 50)"`
}

// lsLimit is how many runs ls answers when its call sets no limit, and
// maxLsLimit the most it answers: every run of a root that keeps
// thousands, each with its labels, would fill an agent's context.
const (
	lsLimit    = 50
	maxLsLimit = 10000
)

type lsOut struct {
	Runs []shownRun `json:"runs" jsonschema:"the runs, oldest first: the newest limit of those that match"`
	// Total and Truncated tell an agent that it sees part of the runs,
	// and how to see the rest.
	Total     int  `json:"total" jsonschema:"how many runs match"`
	Truncated bool `json:"truncated,omitempty" jsonschema:"more runs match than limit: only the newest are in runs; narrow with state or label, or raise limit"`
	// Unreadable says what ls leaves out: a run whose record cannot be
	// read is not in runs, and an agent that is not told takes it for
	// gone, though it may run on.
	Unreadable []string `json:"unreadable,omitempty" jsonschema:"the run records that could not be read, each error naming its file: those runs (of any session: an unread record names none) are not in runs; at most 20 (see unreadable_total)"`
	// UnreadableTotal and UnreadableTruncated say how many records could
	// not be read, when Unreadable lists some only: a root whose file
	// system broke may have thousands, each error a line.
	UnreadableTotal     int  `json:"unreadable_total,omitempty" jsonschema:"how many run records could not be read"`
	UnreadableTruncated bool `json:"unreadable_truncated,omitempty" jsonschema:"more records could not be read than unreadable lists (the first 20 by run ID): tend ls, or tend fsck, says them all"`
}

// maxUnreadable is the most errors ls's unreadable lists.
const maxUnreadable = 20

type showIn struct {
	ID   string `json:"id" jsonschema:"the run's ID"`
	Full bool   `json:"full,omitempty" jsonschema:"the whole record (seal, sum, process identity, service settings, ...), not its view"`
}

type idIn struct {
	ID string `json:"id" jsonschema:"the run's ID"`
}

type logsIn struct {
	ID     string `json:"id" jsonschema:"the run's ID"`
	Stream string `json:"stream,omitempty" jsonschema:"stdout (default), stderr, or both (lines in the order written)"`
	Offset int64  `json:"offset,omitempty" jsonschema:"absolute byte offset to read from: the next of the last read (both: stdout's, and stderr's too unless stderr_offset is given)"`
	// MaxBytes is a pointer: 0 is refused, not taken for the default,
	// as a timeout_seconds of 0 is not (an agent that sends 0 means
	// something by it, and reading nothing is not it).
	MaxBytes *int64 `json:"max_bytes,omitempty" jsonschema:"read at most this many bytes: 1 to 4194304 (left out: 65536; 0 is refused, as it would read nothing); not with both"`
	// StderrOffset lets a read of both go on where the last one stopped,
	// which is in general not at the same offset of the two streams.
	StderrOffset *int64 `json:"stderr_offset,omitempty" jsonschema:"with stream both: stderr's offset to read from (the next_stderr of the last read)"`
}

// logsOut is a slice of one stream, or with stream both, the lines of
// both from offset (stdout's) and stderr_offset, each with its own
// offsets; next and next_stderr say where to go on from. Size, PastEnd
// and InvalidUTF8 say what data alone cannot: that the offset asked for
// is past the end (nothing was read, and nothing new may be there yet
// either), and that the output had bytes JSON cannot carry.
type logsOut struct {
	tend.LogSlice
	StderrOffset *int64         `json:"stderr_offset,omitempty" jsonschema:"with stream both: stderr's offset read from (offset and next are stdout's)"`
	NextStderr   *int64         `json:"next_stderr,omitempty" jsonschema:"with stream both: stderr's offset to read on from (pass it as stderr_offset, and next as offset)"`
	Lines        []tend.LogLine `json:"lines,omitzero" jsonschema:"with stream both: the lines, in the order written"`
	StreamSize   int64          `json:"size" jsonschema:"the stream's size as read: the offset just past the last byte written (with stream both: stdout's)"`
	StderrSize   *int64         `json:"stderr_size,omitempty" jsonschema:"with stream both: stderr's size as read"`
	PastEnd      bool           `json:"past_end" jsonschema:"the offset asked for (with stream both: offset or stderr_offset) is past the end of what its stream holds (size): nothing was read from there"`
	InvalidUTF8  int64          `json:"invalid_utf8" jsonschema:"how many bytes of data (with stream both: of the lines' data) are not UTF-8: JSON carries only UTF-8 text, so each is U+FFFD in data, which is then not the bytes written (offsets and next still count those)"`
}

// maxLogBytes bounds what one logs call returns, of one stream or of
// both's lines: the output is as large as its run's owner makes it.
const maxLogBytes = 4 << 20

type cancelIn struct {
	ID    string   `json:"id,omitempty" jsonschema:"the run's ID; or give ids"`
	IDs   []string `json:"ids,omitempty" jsonschema:"the runs' IDs, canceled with one request, each answered with its outcome; or give id"`
	Grace duration `json:"grace,omitempty" jsonschema:"time between SIGTERM and SIGKILL: a Go duration such as \"30s\", or a number of seconds (default: the run's own; 0: SIGKILL at once)"`
}

type cancelAllIn struct {
	All    bool              `json:"all,omitempty" jsonschema:"every active run of this session (refused if the server has none); or give labels"`
	Labels map[string]string `json:"labels,omitempty" jsonschema:"only the runs with every one of these labels"`
	Grace  duration          `json:"grace,omitempty" jsonschema:"time between SIGTERM and SIGKILL: a Go duration such as \"30s\", or a number of seconds (default: each run's own; 0: SIGKILL at once)"`
}

type deleteAllIn struct {
	All    bool              `json:"all,omitempty" jsonschema:"every ended run of this session (refused if the server has none); or give labels"`
	Labels map[string]string `json:"labels,omitempty" jsonschema:"only the ended runs with every one of these labels"`
}

// cancelOut is a cancel's result: with id, the run's outcome; with ids,
// each run's, in runs.
type cancelOut struct {
	ID      string         `json:"id,omitempty" jsonschema:"with id: the run's ID"`
	Verb    string         `json:"verb,omitempty"`
	Outcome string         `json:"outcome,omitempty"`
	Detail  string         `json:"detail,omitempty"`
	Runs    []tend.Outcome `json:"runs,omitzero" jsonschema:"with ids: each run's outcome, by ID"`
}

type outcomesOut struct {
	Runs []tend.Outcome `json:"runs" jsonschema:"each run's outcome, by ID"`
}

type waitIn struct {
	ID      string   `json:"id" jsonschema:"the run's ID"`
	Timeout *float64 `json:"timeout_seconds,omitempty" jsonschema:"give up waiting after this many seconds (default 30; 0: do not wait, look once); the run goes on"`
	Until   string   `json:"until,omitempty" jsonschema:"ended (the default): until the run has ended; ready: until it is running and ready (its health check passed, or it created its ready file; without either, once it runs), or has ended"`
}

// waitOut is the run's view with ended (ready is the view's): show
// answers its whole record.
type waitOut struct {
	Ended bool `json:"ended" jsonschema:"whether the run has ended; if not (and not ready, with until ready), the wait timed out and the run goes on"`
	runView
}

type restartIn struct {
	ID    string   `json:"id" jsonschema:"the run's ID"`
	Grace duration `json:"grace,omitempty" jsonschema:"time between SIGTERM and SIGKILL: a Go duration such as \"30s\", or a number of seconds (default: the run's own; 0: SIGKILL at once)"`
}

type signalIn struct {
	ID     string `json:"id" jsonschema:"the run's ID"`
	Signal string `json:"signal" jsonschema:"a name, with or without SIG, in any case (HUP, INT, TERM, SIGUSR1, ...), or a number from 1 to 64 in digits (15; no sign: not -9); not STOP, TSTP, TTIN, TTOU or CONT: use the pause and resume tools"`
}

// toolNames are the names addTools gives its tools.
var toolNames = []string{"start", "ls", "show", "cancel_all", "logs", "cancel", "restart", "wait", "signal", "pause", "resume", "delete", "delete_all"}

// addTools adds t's tools to s, each with the output schema of its result,
// and returns their input schemas, by name.
func addTools(s *mcp.Server, t *tools) map[string]*jsonschema.Schema {
	schemas := map[string]*jsonschema.Schema{}
	add(s, schemas, t, "start", "Start a shell command in the background as a run of this session, on this host or on the Slurm cluster (slurm); returns its view (an error, with the view, if it could not start). An ID is used once: to run it again, delete the ended run first, or give another id.", (*tools).start)
	add(s, schemas, t, "ls", "List this session's runs (every run if the server has no session): active ones and those that ended in the last day, with their position if queued and their usage if live: each run's view (what an agent acts on: state, exit code, reason, times, labels, notes, readiness; its labels and notes capped, saying so), or with full its whole record. At most limit runs, the newest (50 unless set); total and truncated say how many match.", (*tools).ls)
	add(s, schemas, t, "show", "One run, of any session (a session scopes writes, not reads): its view (state, exit code, reason, times, labels, notes, readiness, position, usage), or with full its whole record.", (*tools).show)
	add(s, schemas, t, "cancel_all", "Cancel, with one request, every active run of this session (all: true; refused if the server has no session), or those with the given labels; returns once each has ended, with its outcome.", (*tools).cancelAll)
	add(s, schemas, t, "logs", "Read a run's output from an absolute offset; read again from the returned next, so no byte is read twice. With stream both, at most 4 MiB of lines: read on from next (as offset) and next_stderr (as stderr_offset). size is how much the stream holds: an offset past it reads nothing (past_end). Output is bytes, data is text: invalid_utf8 counts the bytes that were not UTF-8, each U+FFFD in data.", (*tools).logs)
	add(s, schemas, t, "cancel", "Cancel a run of this session (id), or several with one request (ids): SIGTERM to each one's process group, SIGKILL after the grace; returns once each has ended, with its outcome (with ids: in runs, one a run; an error, naming each, if one was neither canceled nor ended already: it may run on).", (*tools).cancel)
	add(s, schemas, t, "restart", "Restart a live run of this session under the same ID (a dev server after a change): SIGTERM to its process group, SIGKILL after the grace, then its command again; returns the outcome (restarted: attempt N) once the new attempt has started. An ended run is not restarted (not_running): start a new one.", (*tools).restart)
	add(s, schemas, t, "wait", "Wait for a run to end (or with until ready, to be ready: a server whose health check passed), at most timeout_seconds; returns its view either way, with ended and ready.", (*tools).wait)
	add(s, schemas, t, "signal", "Send a signal to the process group of a run of this session. STOP, TSTP, TTIN, TTOU and CONT are refused: pause and resume a run with the pause and resume tools, which record it paused and suspend its timeout.", (*tools).signal)
	add(s, schemas, t, "pause", "Pause a live run of this session: SIGSTOP to its process group; its timeout stops counting until it is resumed.", (*tools).pause)
	add(s, schemas, t, "resume", "Resume a paused run of this session: SIGCONT to its process group.", (*tools).resume)
	add(s, schemas, t, "delete", "Delete a finished run of this session: its record, output and outcomes.", (*tools).delete)
	add(s, schemas, t, "delete_all", "Delete, to clean up, every ended run of this session (all: true; refused if the server has no session), or the ended ones with the given labels: their records, output and outcomes. Runs still active are left alone (cancel_all them first); returns each deleted run's outcome.", (*tools).deleteAll)
	return schemas
}

// add adds a tool whose handler never takes the server down: a panic is a
// tool error like any other; its input schema goes in schemas. Its results are structured content of type
// Out, described by an output schema; a tool error carries one only if the
// handler gives one (a refused request's outcome). Each call has tools of
// its own (forCall): an answer late for a reason the client sees ends it,
// with that reason as its error.
func add[In, Out any](s *mcp.Server, schemas map[string]*jsonschema.Schema, t *tools, name, desc string, h func(*tools, context.Context, In) (*mcp.CallToolResult, *Out, error)) {
	tool := &mcp.Tool{Name: name, Description: desc, InputSchema: schemaOf[In](), OutputSchema: describeResult(schemaOf[Out]())}
	schemas[name] = tool.InputSchema.(*jsonschema.Schema)
	mcp.AddTool(s, tool, func(ctx context.Context, _ *mcp.CallToolRequest, in In) (res *mcp.CallToolResult, out structured, err error) {
		defer func() {
			if p := recover(); p != nil {
				res, out, err = toolError(fmt.Sprintf("%s: internal error: %v", name, p)), nil, nil
			}
		}()
		ctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		res, o, err := h(t.forCall(cancel), ctx, in)
		var late lateAnswer
		if errors.As(context.Cause(ctx), &late) {
			return toolError(fmt.Sprintf("%s: %s; the request is not withdrawn: it is carried out once the watcher answers (look with show or wait)", name, string(late))), nil, nil
		}
		if o == nil {
			return res, nil, err
		}
		return res, o, err
	})
}

// lateAnswer is why a call's answer is late (tend.Options.Late's notice).
type lateAnswer string

func (l lateAnswer) Error() string { return string(l) }

// forCall returns t for one call, which end ends once its client tells
// why an answer is late. An agent's call that waited on in silence for a
// watcher that answers nothing (stopped, its disk full) was a hang: the
// agent sees a tool's error, not the server's stderr.
func (t *tools) forCall(end context.CancelCauseFunc) *tools {
	if t.client == nil {
		return t
	}
	return &tools{client: t.client.WithLate(func(notice string) { end(lateAnswer(notice)) })}
}

// resultDocs describe the members of the tools' results that the
// client's types (tend.LogSlice, tend.Outcome, tend.Record) leave
// undescribed, for an agent that reads the output schema and nothing
// else: what to do next with a read, what an outcome means.
var resultDocs = map[string]string{
	"stream":        "the stream read: stdout, stderr or both",
	"offset":        "where data starts: the offset asked for, or the first byte still kept if that was dropped",
	"next":          "the offset to read from next time (pass it as offset): no byte is read twice",
	"dropped":       "how many of the bytes asked for were gone (the output is capped): data starts after them",
	"eof":           "data reaches the end of what the stream holds now (if not, more is there: read on from next at once); more may come while the run lives (read again from next later)",
	"final":         "the run has ended and data reaches the end: nothing more will come",
	"data":          "the output read, as text (see invalid_utf8)",
	"verb":          "the request: cancel, signal, restart, delete, ...",
	"outcome":       "what was done: canceled, signaled, restarted, deleted; or why not: already_finished (the run had ended), not_running, not_found, not_permitted (another session's or user's run: nothing changed), still_active (delete of a live run), rejected",
	"detail":        "more on the outcome: the state of an ended run, the signal sent, the attempt started, the reason for a refusal",
	"state":         "queued, starting (waits to be ready), running, paused, backoff (waits to restart), stopping; or, ended: completed, failed, canceled, timed_out",
	"exit_code":     "the exit code, once the run has ended by exiting",
	"reason":        "why the run ended as it did (or could not start), in words",
	"last_line":     "a live run's last line of output",
	"quiet_seconds": "how long a live run's output has not grown",
	"position":      "a queued run's place in the queue, from 1",
}

// describeResult returns s, a tool result's schema, with its members
// (and those of the items of its runs) described by resultDocs where
// their type gives no description.
func describeResult(s *jsonschema.Schema) *jsonschema.Schema {
	objs := []*jsonschema.Schema{s}
	if runs := s.Properties["runs"]; runs != nil && runs.Items != nil {
		objs = append(objs, runs.Items)
	}
	for _, o := range objs {
		for name, p := range o.Properties {
			if p.Description == "" {
				p.Description = resultDocs[name]
			}
		}
	}
	return s
}

// structured is a tool's result. Its type is not any, so the SDK puts it
// in the structured content, checked against the tool's output schema;
// unlike a concrete type, it may be nil: an error's result has none.
type structured interface{}

// schemaOf is the JSON Schema of a tool's arguments or result of type T,
// as it is unmarshaled or marshaled: a result's durations are strings; an
// argument's (duration) a string or a number of seconds.
func schemaOf[T any]() *jsonschema.Schema {
	rt := reflect.TypeFor[T]()
	if rt.Kind() == reflect.Pointer {
		rt = rt.Elem()
	}
	opts := &jsonschema.ForOptions{TypeSchemas: map[reflect.Type]*jsonschema.Schema{
		reflect.TypeFor[spool.Duration](): {Type: "string", Description: "a Go duration, such as 1m30s"},
		reflect.TypeFor[duration]():       {Types: []string{"string", "number"}},
	}}
	opts.TypeSchemas[reflect.TypeFor[shownRun]()] = viewSchema(opts)
	s, err := jsonschema.ForType(rt, opts)
	if err != nil {
		panic(fmt.Sprintf("schema of %v: %v", rt, err))
	}
	return s
}

func (t *tools) start(ctx context.Context, in startIn) (*mcp.CallToolResult, *runView, error) {
	req := tend.Request{Shell: in.Command, Labels: in.Labels}
	var err error
	if req.Timeout, err = in.Timeout.read("timeout"); err != nil {
		return toolError("start: " + err.Error()), nil, nil
	}
	if in.Grace.sent() {
		g, err := in.Grace.read("grace")
		if err != nil {
			return toolError("start: " + err.Error()), nil, nil
		}
		req.Grace = &g
	}
	// Named here: the spool's error says "command or cwd".
	for _, a := range []struct{ name, v, what string }{{"command", in.Command, "command line"}, {"cwd", in.Cwd, "path"}} {
		if i := strings.IndexByte(a.v, 0); i >= 0 {
			return toolError(fmt.Sprintf("start: %s has a NUL byte at byte %d, which no %s can hold", a.name, i, a.what)), nil, nil
		}
	}
	if req.Cwd, err = filepath.Abs(in.Cwd); err != nil { // "" is the server's
		return toolError("start: cwd: " + err.Error()), nil, nil
	}
	req.Env = map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			req.Env[k] = v
		}
	}
	for k, v := range in.Env {
		req.Env[k] = v
	}
	for _, name := range in.After {
		d, err := spool.ParseDep(name)
		if err != nil {
			return toolError("start: after: " + err.Error()), nil, nil
		}
		req.After = append(req.After, d)
	}
	if in.NotBefore != "" {
		if at, err := time.Parse(time.RFC3339, in.NotBefore); err == nil {
			req.NotBefore = &spool.NotBefore{At: at}
		} else if d, err := durationArg("not_before", in.NotBefore); err == nil {
			req.NotBefore = &spool.NotBefore{In: d.D()}
		} else if _, perr := time.ParseDuration(in.NotBefore); perr == nil {
			return toolError("start: " + err.Error()), nil, nil // a duration, but negative or too long
		} else {
			return toolError(fmt.Sprintf("start: not_before: %q: want an RFC 3339 time such as 2026-01-02T15:04:05Z, or a duration from now such as 10m", shorten(in.NotBefore))), nil, nil
		}
	}
	if in.Health != nil {
		if req.Health, err = in.Health.read(); err != nil {
			return toolError("start: " + err.Error()), nil, nil
		}
	}
	req.ReadyFile = in.ReadyFile
	if in.Restart != "" {
		r := spool.DefaultRestart
		r.Policy = in.Restart // the spool's parser checks it
		req.Restart = &r
	}
	if s := in.Slurm; s != nil {
		if in.Local {
			return toolError("start: local runs it on this host: slurm does not go with it"), nil, nil
		}
		req.Slurm = &spool.Slurm{Partition: s.Partition, CPUs: s.CPUs, Memory: s.Memory, GPUs: s.GPUs, Nodes: s.Nodes,
			Account: s.Account, QOS: s.QOS, Constraint: s.Constraint, Args: s.Args}
		if s.Time != nil {
			if req.Slurm.Time, err = s.Time.read("slurm.time"); err != nil {
				return toolError("start: " + err.Error()), nil, nil
			}
		}
	}
	req.Local = in.Local
	st, err := t.client.Start(ctx, in.ID, req)
	if err != nil {
		return errorResult("start", err), nil, nil
	}
	if st.State == tracker.Failed && st.PID == 0 {
		// It never ran (a working directory that is not there): an error,
		// as for tend start, not a record an agent takes for a run.
		v := viewOf(tend.Listed{Record: st}, t.client.OutputSize(st))
		return toolError(fmt.Sprintf("start: run %s could not start: %s", st.ID, st.Reason)), &v, nil
	}
	v := viewOf(tend.Listed{Record: st}, t.client.OutputSize(st))
	return nil, &v, nil
}

// read returns h as the spool takes it, with the spool's defaults.
func (h *healthIn) read() (*spool.Health, error) {
	sh := &spool.Health{TCP: h.TCP, HTTP: h.HTTP, Exec: h.Exec, Interval: spool.Duration(time.Second),
		Timeout: spool.Duration(time.Second), Retries: 3, StartPeriod: spool.Duration(30 * time.Second)}
	for _, d := range []struct {
		name string
		in   duration
		to   *spool.Duration
	}{{"health.interval", h.Interval, &sh.Interval}, {"health.timeout", h.Timeout, &sh.Timeout}, {"health.start_period", h.StartPeriod, &sh.StartPeriod}} {
		if d.in.sent() {
			v, err := d.in.read(d.name)
			if err != nil {
				return nil, err
			}
			*d.to = v
		}
	}
	if h.Retries != 0 {
		sh.Retries = h.Retries
	}
	// The spool's check says what it wants of all three, not which one
	// was given wrong: an agent fixes the one named.
	switch {
	case sh.Interval.D() < spool.MinHealthInterval:
		return nil, fmt.Errorf("health.interval: %v: want at least %v (left out: 1s)", sh.Interval.D(), spool.MinHealthInterval)
	case sh.Timeout <= 0:
		return nil, fmt.Errorf("health.timeout: %v: want more than 0 (left out: 1s)", sh.Timeout.D())
	case sh.Retries < 1:
		return nil, fmt.Errorf("health.retries: %d: want at least 1 (left out: 3)", sh.Retries)
	}
	return sh, nil
}

func (t *tools) ls(ctx context.Context, in lsIn) (*mcp.CallToolResult, *lsOut, error) {
	f := tend.Filter{All: in.All, States: in.State}
	for _, l := range in.Label {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return toolError(fmt.Sprintf("ls: label %q: want K=V", l)), nil, nil
		}
		if f.Labels == nil {
			f.Labels = map[string]string{}
		}
		f.Labels[k] = v
	}
	limit := lsLimit
	if in.Limit != nil {
		if limit = *in.Limit; limit < 1 || limit > maxLsLimit {
			return toolError(fmt.Sprintf("ls: limit %d: want 1 to %d (leave it out for %d)", limit, maxLsLimit, lsLimit)), nil, nil
		}
	}
	runs, err := t.client.List(ctx, f)
	var bad tend.RecordErrors
	if err != nil && !errors.As(err, &bad) {
		return errorResult("ls", err), nil, nil
	}
	out := &lsOut{Total: len(runs)}
	if len(runs) > limit {
		runs, out.Truncated = runs[len(runs)-limit:], true // oldest first: the newest are last
	}
	out.Runs = make([]shownRun, 0, len(runs))
	for _, err := range bad {
		out.Unreadable = append(out.Unreadable, err.Error())
	}
	slices.Sort(out.Unreadable) // each names its record's file: by run ID
	if out.UnreadableTotal = len(bad); len(bad) > maxUnreadable {
		out.Unreadable, out.UnreadableTruncated = out.Unreadable[:maxUnreadable], true
	}
	for _, l := range runs {
		r, err := shown(l, t.client.OutputSize(l.Record), in.Full)
		if err != nil {
			return errorResult("ls", fmt.Errorf("run %s: %w", l.ID, err)), nil, nil
		}
		out.Runs = append(out.Runs, r)
	}
	return nil, out, nil
}

func (t *tools) show(ctx context.Context, in showIn) (*mcp.CallToolResult, *shownRun, error) {
	st, err := t.client.Show(ctx, in.ID)
	if err == nil {
		err = t.client.Verify(st) // an agent acts on what it is shown
	}
	if err != nil {
		return errorResult("show", err), nil, nil
	}
	// As ls shows it: position if queued, usage if live.
	r, err := shown(t.client.Describe(st)[0], t.client.OutputSize(st), in.Full)
	if err != nil {
		return errorResult("show", fmt.Errorf("run %s: %w", st.ID, err)), nil, nil
	}
	return nil, &r, nil
}

func (t *tools) logs(ctx context.Context, in logsIn) (*mcp.CallToolResult, *logsOut, error) {
	// Named here: the client's error says "offsets", not which argument.
	if in.Offset < 0 {
		return toolError(fmt.Sprintf("logs: offset %d is negative: offsets count bytes from 0 (the next of the last read)", in.Offset)), nil, nil
	}
	if in.StderrOffset != nil && *in.StderrOffset < 0 {
		return toolError(fmt.Sprintf("logs: stderr_offset %d is negative: offsets count bytes from 0 (the next_stderr of the last read)", *in.StderrOffset)), nil, nil
	}
	max := int64(65536)
	if in.MaxBytes != nil {
		if max = *in.MaxBytes; max < 1 || max > maxLogBytes {
			return toolError(fmt.Sprintf("logs: max_bytes %d: want 1 to %d (leave it out for 65536)", max, maxLogBytes)), nil, nil
		}
	}
	switch in.Stream {
	case "", tend.Stdout, tend.Stderr:
		if in.StderrOffset != nil {
			return toolError("logs: stderr_offset is for stream both: to read stderr alone, give its offset as offset"), nil, nil
		}
		stream := cmp(in.Stream, tend.Stdout)
		sl, err := t.client.ReadLog(ctx, in.ID, stream, in.Offset, max)
		if err != nil {
			return errorResult("logs", err), nil, nil
		}
		if cut := partialRune(sl.Data); cut > 0 && cut < len(sl.Data) {
			// JSON would make the character's bytes read so far U+FFFD,
			// and the next read's rest another: they are read next time.
			sl.Data, sl.Next, sl.EOF = sl.Data[:len(sl.Data)-cut], sl.Next-int64(cut), false
		}
		return nil, &logsOut{LogSlice: sl, StreamSize: sl.Size, PastEnd: sl.Offset > sl.Size, InvalidUTF8: invalidUTF8(sl.Data)}, nil
	case "both":
		return t.logsBoth(ctx, in)
	}
	return toolError(fmt.Sprintf("logs: stream %q: want stdout, stderr or both", in.Stream)), nil, nil
}

// partialRune returns how many bytes at the end of s are the start of a
// UTF-8 character whose rest is not in s, or 0.
func partialRune(s string) int {
	for i := len(s) - 1; i >= 0 && i >= len(s)-utf8.UTFMax+1; i-- {
		if utf8.RuneStart(s[i]) {
			if utf8.FullRuneInString(s[i:]) {
				return 0
			}
			return len(s) - i
		}
	}
	return 0
}

// logsBoth reads both streams' lines from offset and stderr_offset.
func (t *tools) logsBoth(ctx context.Context, in logsIn) (*mcp.CallToolResult, *logsOut, error) {
	if in.MaxBytes != nil {
		return toolError("logs: max_bytes reads one stream: read stdout and stderr each, or leave it out"), nil, nil
	}
	from := tend.PlaceAt(in.Offset)
	if in.StderrOffset != nil {
		from.Stderr = *in.StderrOffset
	}
	read, err := t.client.ReadLines(ctx, in.ID, from, maxLogBytes)
	if err != nil {
		return errorResult("logs", err), nil, nil
	}
	if read.Lines == nil {
		read.Lines = []tend.LogLine{}
	}
	var bad int64
	for _, l := range read.Lines {
		bad += invalidUTF8(l.Data)
	}
	return nil, &logsOut{
		LogSlice:     tend.LogSlice{Stream: "both", Offset: from.Stdout, Next: read.Next.Stdout, Dropped: read.Dropped, EOF: read.EOF, Final: read.Final},
		StderrOffset: &from.Stderr, NextStderr: &read.Next.Stderr, Lines: read.Lines,
		StreamSize: read.Size.Stdout, StderrSize: &read.Size.Stderr,
		PastEnd:     from.Stdout > read.Size.Stdout || from.Stderr > read.Size.Stderr,
		InvalidUTF8: bad,
	}, nil
}

// invalidUTF8 returns how many bytes of s are not UTF-8: those that JSON
// carries as U+FFFD, each.
func invalidUTF8(s string) int64 {
	if utf8.ValidString(s) {
		return 0
	}
	var n int64
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			n++
		}
		i += size
	}
	return n
}

func (t *tools) cancel(ctx context.Context, in cancelIn) (*mcp.CallToolResult, *cancelOut, error) {
	grace, err := in.Grace.stopGrace()
	if err != nil {
		return toolError("cancel: " + err.Error()), nil, nil
	}
	ids, err := cancelIDs(in)
	if err != nil {
		return toolError("cancel: " + err.Error()), nil, nil
	}
	if ids == nil {
		res, o, err := outcomeResult("cancel")(t.client.Cancel(ctx, in.ID, tend.Control{Grace: grace}))
		if o == nil {
			return res, nil, err
		}
		return res, &cancelOut{ID: o.ID, Verb: o.Verb, Outcome: o.Outcome, Detail: o.Detail}, err
	}
	// One selector request: the watcher answers every run in one file,
	// and an agent's list costs one request, not one a run.
	runs, err := t.client.CancelSelected(ctx, spool.Select{IDs: ids}, tend.Control{Grace: grace})
	if err != nil {
		return errorResult("cancel", err), nil, nil
	}
	return cancelIDsResult(ids, runs)
}

// cancelIDsResult makes a cancel of ids' outcomes the tool's result, each
// run's outcome in runs either way. As for tend cancel A B C, it is a
// success if none of the runs named runs on (each was canceled, or had
// ended already), and else a tool error whose text names each run that
// was not canceled and why: an ID that names no run (a typo) or another
// session's run is the agent's to fix, and the run it meant runs on,
// which an agent that reads only isError must not take for done.
// The runs are in the order of ids, as the agent named them.
func cancelIDsResult(ids []string, runs []tend.Outcome) (*mcp.CallToolResult, *cancelOut, error) {
	if runs == nil {
		runs = []tend.Outcome{}
	}
	slices.SortStableFunc(runs, func(a, b tend.Outcome) int {
		return slices.Index(ids, a.ID) - slices.Index(ids, b.ID)
	})
	var refused []string
	for _, o := range runs {
		if o.Outcome != spool.Canceled && o.Outcome != spool.AlreadyFinished {
			refused = append(refused, o.ID+": "+o.String())
		}
	}
	out := &cancelOut{Runs: runs}
	if len(refused) == 0 {
		return nil, out, nil
	}
	msg := fmt.Sprintf("cancel: %d of %d runs were not canceled (every run's outcome is in runs): %s",
		len(refused), len(runs), strings.Join(refused, "; "))
	return toolError(msg), out, nil
}

// cancelIDs returns the IDs of a cancel of ids, each checked and once, or
// nil for a cancel of id; exactly one of the two must be given.
func cancelIDs(in cancelIn) ([]string, error) {
	switch {
	case in.ID != "" && in.IDs != nil:
		return nil, errors.New("give id or ids, not both")
	case in.ID != "":
		return nil, nil
	case in.IDs == nil:
		return nil, errors.New("name the runs: id, or ids")
	case len(in.IDs) == 0:
		return nil, errors.New("ids is empty: name at least one run")
	}
	var ids []string
	for i, id := range in.IDs {
		if err := tend.CheckID(id); err != nil {
			return nil, fmt.Errorf("ids[%d]: %v", i, err)
		}
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

func (t *tools) cancelAll(ctx context.Context, in cancelAllIn) (*mcp.CallToolResult, *outcomesOut, error) {
	grace, err := in.Grace.stopGrace()
	if err != nil {
		return toolError("cancel_all: " + err.Error()), nil, nil
	}
	if !in.All && len(in.Labels) == 0 {
		return toolError(`cancel_all: name the runs: "all": true, or "labels"`), nil, nil
	}
	if in.All {
		if msg := t.allUnscoped("cancel_all"); msg != "" {
			return toolError(msg), nil, nil
		}
	}
	for _, k := range slices.Sorted(maps.Keys(in.Labels)) {
		// No run has such a label (start refuses it): selecting by it
		// would cancel nothing, and say nothing of the mistake.
		if err := spool.CheckLabelKey(k); err != nil {
			return toolError("cancel_all: labels: " + err.Error()), nil, nil
		}
	}
	sel := spool.Select{All: in.All, Labels: in.Labels}
	runs, err := t.client.CancelSelected(ctx, sel, tend.Control{Grace: grace})
	if err != nil {
		return errorResult("cancel_all", err), nil, nil
	}
	if runs == nil {
		runs = []tend.Outcome{}
	}
	return nil, &outcomesOut{Runs: runs}, nil
}

// allUnscoped says why tool may not take "all": true, or "" if it may.
// A server with no session would act on every run of its user: the
// runs a person started by hand, and other agents', where an agent asks
// to be rid of its own.
func (t *tools) allUnscoped(tool string) string {
	if t.client.Session() != "" {
		return ""
	}
	return tool + `: the server has no session, so "all" would be every run of this user, not only this agent's: ` +
		`set TEND_SESSION in the server's environment (tend's README, "For agents"), or name the runs by "labels"`
}

// wait waits like tend wait, but at most its timeout: an agent's call must
// come back, and the run goes on regardless.
func (t *tools) wait(ctx context.Context, in waitIn) (*mcp.CallToolResult, *waitOut, error) {
	secs := 30.0
	if in.Timeout != nil {
		secs = *in.Timeout // 0 too: an agent that polls must not wait 30 s
	}
	raw, _ := json.Marshal(secs)
	d, err := durationJSON("timeout_seconds", raw)
	if err != nil {
		return toolError("wait: " + err.Error()), nil, nil
	}
	until := tend.Ended
	switch in.Until {
	case "", "ended":
	case "ready":
		until = func(st *tend.Record) bool { return tend.Ended(st) || tend.Ready(st) }
	default:
		return toolError(fmt.Sprintf("wait: until %q: want ended or ready", in.Until)), nil, nil
	}
	wctx, cancel := context.WithTimeout(ctx, d.D())
	defer cancel()
	st, err := t.client.WaitFor(wctx, in.ID, until)
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		if st == nil {
			return toolError(fmt.Sprintf("wait: run %s has no record yet after %gs", in.ID, secs)), nil, nil
		}
		err = nil // the record as it is: "ended" says the run goes on
	}
	if err != nil {
		return errorResult("wait", err), nil, nil
	}
	return nil, &waitOut{Ended: tend.Ended(st), runView: viewOf(tend.Listed{Record: st}, t.client.OutputSize(st))}, nil
}

func (t *tools) restart(ctx context.Context, in restartIn) (*mcp.CallToolResult, *tend.Outcome, error) {
	grace, err := in.Grace.stopGrace()
	if err != nil {
		return toolError("restart: " + err.Error()), nil, nil
	}
	return outcomeResult("restart")(t.client.Restart(ctx, in.ID, tend.Control{Grace: grace}))
}

func (t *tools) signal(ctx context.Context, in signalIn) (*mcp.CallToolResult, *tend.Outcome, error) {
	return outcomeResult("signal")(t.client.Signal(ctx, in.ID, in.Signal, tend.Control{}))
}

func (t *tools) pause(ctx context.Context, in idIn) (*mcp.CallToolResult, *tend.Outcome, error) {
	return outcomeResult("pause")(t.client.Pause(ctx, in.ID, tend.Control{}))
}

func (t *tools) resume(ctx context.Context, in idIn) (*mcp.CallToolResult, *tend.Outcome, error) {
	return outcomeResult("resume")(t.client.Resume(ctx, in.ID, tend.Control{}))
}

func (t *tools) delete(ctx context.Context, in idIn) (*mcp.CallToolResult, *tend.Outcome, error) {
	if err := tend.CheckID(in.ID); err != nil {
		return errorResult("delete", err), nil, nil
	}
	outcomes, err := t.client.Delete(ctx, tend.Control{}, in.ID)
	if err != nil {
		return errorResult("delete", err), nil, nil
	}
	return outcomeResult("delete")(outcomes[0], outcomes[0].Err())
}

func (t *tools) deleteAll(ctx context.Context, in deleteAllIn) (*mcp.CallToolResult, *outcomesOut, error) {
	if !in.All && len(in.Labels) == 0 {
		return toolError(`delete_all: name the runs: "all": true, or "labels"`), nil, nil
	}
	if in.All {
		if msg := t.allUnscoped("delete_all"); msg != "" {
			return toolError(msg), nil, nil
		}
	}
	for _, k := range slices.Sorted(maps.Keys(in.Labels)) {
		if err := spool.CheckLabelKey(k); err != nil {
			return toolError("delete_all: labels: " + err.Error()), nil, nil
		}
	}
	// Only ended runs are listed, and an ended run never becomes active
	// again: none is refused still_active. The client lists only its
	// session's, and the watcher deletes only its session's.
	var ended []string
	for _, st := range tracker.States {
		if tracker.Final(st) {
			ended = append(ended, string(st))
		}
	}
	runs, err := t.client.List(ctx, tend.Filter{All: true, States: ended, Labels: in.Labels, Brief: true})
	var bad tend.RecordErrors
	if err != nil && !errors.As(err, &bad) {
		return errorResult("delete_all", err), nil, nil
	}
	ids := make([]string, 0, len(runs))
	for _, r := range runs {
		ids = append(ids, r.ID)
	}
	out := &outcomesOut{Runs: []tend.Outcome{}}
	if len(ids) == 0 {
		return nil, out, nil
	}
	outcomes, err := t.client.Delete(ctx, tend.Control{}, ids...)
	if err != nil {
		return errorResult("delete_all", err), nil, nil
	}
	out.Runs = outcomes
	return nil, out, nil
}

// outcomeResult makes a control request's outcome the tool's result: a
// refusal is a tool error, with the outcome as its structured content and
// as a sentence in its text ("cancel x: not_permitted: run x belongs to
// session a, not to session b"): a client that shows the model only the
// text of an error shows it why, not a JSON object to decode.
func outcomeResult(verb string) func(tend.Outcome, error) (*mcp.CallToolResult, *tend.Outcome, error) {
	return func(o tend.Outcome, err error) (*mcp.CallToolResult, *tend.Outcome, error) {
		var oe *tend.OutcomeError
		switch {
		case err == nil:
			return nil, &o, nil
		case errors.As(err, &oe):
			return errorResult(verb, err), &o, nil
		}
		return errorResult(verb, err), nil, nil
	}
}

// durationArg reads a duration argument given as a string as the spool
// reads one (a Go duration, not negative, at most a year); "" is none.
func durationArg(name, s string) (spool.Duration, error) {
	var d spool.Duration
	if s == "" {
		return d, nil
	}
	raw, _ := json.Marshal(s)
	return durationJSON(name, raw)
}

// duration is a duration argument as it was sent: a Go duration string
// or a number of seconds, as a request takes one, read when the tool
// knows its name (read). It is nil if it was not sent.
type duration json.RawMessage

// UnmarshalJSON keeps b, to be read by read.
func (d *duration) UnmarshalJSON(b []byte) error {
	*d = append(duration(nil), b...)
	return nil
}

// sent reports whether d was sent with a value: "" and null, which
// agents send for an optional argument they leave empty, are none, as
// they were when the argument was a string.
func (d duration) sent() bool {
	v := string(bytes.TrimSpace(d))
	return v != "" && v != `""` && v != "null"
}

// read reads d as the spool reads a duration (not negative, at most a
// year); the error names the argument, name. None is 0.
func (d duration) read(name string) (spool.Duration, error) {
	if !d.sent() {
		return 0, nil
	}
	return durationJSON(name, d)
}

// stopGrace reads d as a cancel's or a restart's grace, as the client
// takes it: none is 0, the run's own grace. A grace given as 0 means
// SIGKILL at once, as a start's grace of 0 does, not the run's own (the
// client's 0): the client's NoGrace.
func (d duration) stopGrace() (time.Duration, error) {
	g, err := d.read("grace")
	if err != nil || !d.sent() || g != 0 {
		return g.D(), err
	}
	return tend.NoGrace, nil
}

// durationJSON reads a duration given as JSON (a string or a number of
// seconds) as the spool reads one.
func durationJSON(name string, raw []byte) (spool.Duration, error) {
	var d spool.Duration
	if err := d.UnmarshalJSON(raw); err != nil {
		return d, fmt.Errorf("%s: %v", name, err)
	}
	return d, nil
}

// errorResult is the tool error for err, prefixed with the tool's name
// unless err's message starts with it already: the client's errors often
// name their verb, which is the tool's ("start serve: rejected: ..."),
// and "start: start: ..." reads as a stutter.
func errorResult(tool string, err error) *mcp.CallToolResult {
	return toolError(errorText(tool, err))
}

func errorText(tool string, err error) string {
	msg := err.Error()
	if strings.HasPrefix(msg, tool+": ") || strings.HasPrefix(msg, tool+" ") {
		return msg
	}
	return tool + ": " + msg
}

func toolError(msg string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}}
}

func cmp[T int64 | string](v, def T) T {
	var zero T
	if v != zero {
		return v
	}
	return def
}

// drainingStdio is the stdio transport, except that a line that is no
// JSON-RPC message is answered with an error, not the end of the session
// (filterLines), and at the end of its input it answers every request it
// read before it reports the end: a client that pipes its requests in and
// closes stdin gets every answer.
// If out is gone while it drains, it stops draining and calls gone; it
// stops too once end is closed: the server ends, and answers no more.
type drainingStdio struct {
	out  *os.File
	gone func()
	end  <-chan struct{}
}

func (d *drainingStdio) Connect(ctx context.Context) (mcp.Connection, error) {
	out := &lockedWriter{w: d.out}
	conn, err := (&mcp.IOTransport{Reader: filterLines(os.Stdin, out), Writer: out}).Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &drainingConn{Connection: conn, out: d.out, gone: d.gone, end: d.end, pending: map[jsonrpc.ID]bool{}, answered: make(chan struct{}, 1)}, nil
}

// drainingConn counts the requests read and not yet answered.
type drainingConn struct {
	mcp.Connection
	out      *os.File // where the answers go
	gone     func()   // called once out is found gone
	end      <-chan struct{}
	mu       sync.Mutex
	pending  map[jsonrpc.ID]bool
	answered chan struct{} // a token whenever a request is answered
}

func (c *drainingConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if err == nil {
		if req, ok := msg.(*jsonrpc.Request); ok && req.IsCall() {
			c.mu.Lock()
			c.pending[req.ID] = true
			c.mu.Unlock()
		}
		return msg, nil
	}
	if errors.Is(err, io.EOF) {
		c.drain(ctx)
	}
	return nil, err
}

func (c *drainingConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	err := c.Connection.Write(ctx, msg)
	if resp, ok := msg.(*jsonrpc.Response); ok {
		c.mu.Lock()
		delete(c.pending, resp.ID)
		c.mu.Unlock()
		select {
		case c.answered <- struct{}{}:
		default:
		}
	}
	return err
}

// drain waits until every request read has been answered, or ctx ends,
// or the server ends (its answers are no longer written), or the output
// is gone: then it calls gone, which ends the calls under way, whose
// answers nobody would read.
func (c *drainingConn) drain(ctx context.Context) {
	tick := time.NewTicker(drainCheck)
	defer tick.Stop()
	for {
		c.mu.Lock()
		n := len(c.pending)
		c.mu.Unlock()
		if n == 0 {
			return
		}
		select {
		case <-c.answered:
		case <-ctx.Done():
			return
		case <-c.end:
			return
		case <-tick.C:
			if outputGone(c.out) {
				c.gone()
				return
			}
		}
	}
}

// drainCheck is how often a draining server looks whether its output is
// still read.
const drainCheck = 200 * time.Millisecond

// outputGone reports whether nobody can read f any more: the read end of
// its pipe is closed (POLLERR), or its socket's peer or its terminal
// hung up (POLLHUP). A regular file is never gone.
func outputGone(f *os.File) bool {
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	gone := false
	rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd)}}
		if n, err := unix.Poll(fds, 0); err == nil && n > 0 {
			gone = fds[0].Revents&(unix.POLLERR|unix.POLLHUP) != 0
		}
	})
	return gone
}
