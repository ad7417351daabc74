package top

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/fsnotify/fsnotify"
	"github.com/tendhq/tend"
	"github.com/tendhq/tend/cmd/internal/runtext"
	"github.com/tendhq/tend/procfs"
	"github.com/tendhq/tend/spool"
	"github.com/tendhq/tend/tracker"
	"github.com/tendhq/tend/tracker/layout"
	"github.com/tendhq/tend/watcher/config"
)

// What the feeds tell the view, each as one message.
type (
	// topLoadedMsg is every run, as one listing found them: the view
	// replaces what it had.
	topLoadedMsg struct {
		runs []tend.Listed
		bad  []string // records that could not be read
	}
	// topChangedMsg is what changed since the last message: the runs
	// read again, those that are gone, and the history's new events.
	topChangedMsg struct {
		runs   []tend.Listed
		gone   []string
		events []tend.Event
		bad    []string
	}
	// topHistoryMsg says whether the history is followed (err is nil), or
	// why not.
	topHistoryMsg struct{ err error }
	// topFeedErrMsg is a failure that stops the feed: the view shows what
	// it has, and says why it no longer changes.
	topFeedErrMsg struct{ err error }
	// topRootMsg says a file the header reads changed: watcher.json,
	// config.json, the history's pending changes.
	topRootMsg struct{}
)

// topHeaderFiles are the files of the root the header reads.
var topHeaderFiles = func() map[string]bool {
	var r layout.Root // names alone, as they are in the root
	return map[string]bool{r.WatcherInfo(): true, r.WatcherPID(): true, r.KeeperPID(): true, r.Config(): true, r.PendingHistory(): true}
}()

// topBatchEvery is the least time between two batches of changes: a burst
// of changes (500 runs starting) is a few redraws, not hundreds.
const topBatchEvery = 100 * time.Millisecond

// topFeed follows what changes in the root and tells the view: one listing
// at first (from the list cache, as tend ls), then, from inotify, each
// event the history gets and each run directory that comes or goes in
// runs/, after which only the runs concerned are read again. Nothing is
// read on a timer: an idle root costs nothing.
type topFeed struct {
	client *tend.Client
	send   func(tea.Msg)
	wake   chan struct{}

	mu     sync.Mutex
	events []tend.Event    // from the history, not yet applied
	dirty  map[string]bool // runs to read again
	reload bool            // list every run again
	follow bool            // the history is followed
	// Owned by run.
	recs     map[string]*tend.Record
	bad      map[string]string
	loadedAt time.Time
	// want is the revision the history has of a run whose record was
	// read before it had it: the watcher appends an event, then writes
	// the record. Such a run is read again a moment later (tries counts
	// how often), until its record has caught up.
	want  map[string]int64
	tries map[string]int
}

func newTopFeed(client *tend.Client, send func(tea.Msg)) *topFeed {
	return &topFeed{client: client, send: send, wake: make(chan struct{}, 1), dirty: map[string]bool{}, bad: map[string]string{},
		want: map[string]int64{}, tries: map[string]int{}}
}

// poke wakes run, if it sleeps.
func (f *topFeed) poke() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// markDirty has runs ids read again: the view asks for it for the live
// runs it shows while the history cannot be followed.
func (f *topFeed) markDirty(ids ...string) {
	f.mu.Lock()
	for _, id := range ids {
		f.dirty[id] = true
	}
	f.mu.Unlock()
	f.poke()
}

// run feeds the view until ctx ends: from the root once it exists, and
// again from the start if it is removed and made anew.
func (f *topFeed) run(ctx context.Context) {
	for waitForDir(ctx, f.client.Root()) && f.follow1(ctx) {
		f.send(topLoadedMsg{}) // gone with the root
	}
}

// follow1 feeds the view from the root until ctx ends (false) or the root
// is removed (true).
func (f *topFeed) follow1(ctx context.Context) bool {
	root := f.client.Root()
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		f.send(topFeedErrMsg{procfs.InotifyError(err)})
		return false
	}
	defer fsw.Close()
	ctx, stop := context.WithCancel(ctx) // the history's follower's too
	defer stop()
	// The root's own entries say when runs/ is made and the history is
	// written; runs/'s when a run comes or goes. Watches first, then the
	// listing: no change falls between.
	if err := fsw.Add(root); err != nil {
		f.send(topFeedErrMsg{procfs.InotifyError(err)})
		return false
	}
	runs := layout.Root(root).Runs()
	fsw.Add(runs) // made with the first run; added then
	f.load(ctx)
	f.startFollow(ctx)
	last := time.Time{}
	var again <-chan time.Time // a record behind its history, to read again
	for {
		select {
		case <-ctx.Done():
			return false
		case ev := <-fsw.Events:
			if ev.Name == root && ev.Has(fsnotify.Remove|fsnotify.Rename) {
				return true
			}
			f.noteFS(ctx, fsw, ev)
			continue
		case err := <-fsw.Errors:
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				f.mu.Lock()
				f.reload = true
				f.mu.Unlock()
			}
		case <-f.wake:
		case <-again:
		}
		// Whatever else comes meanwhile joins this batch.
		hold := time.NewTimer(max(0, topBatchEvery-time.Since(last)))
	gather:
		for {
			select {
			case <-ctx.Done():
				hold.Stop()
				return false
			case ev := <-fsw.Events:
				f.noteFS(ctx, fsw, ev)
			case <-f.wake:
			case <-hold.C:
				break gather
			}
		}
		again = nil
		if behind := f.apply(ctx); behind > 0 {
			again = time.After(behind)
		}
		last = time.Now()
	}
}

// waitForDir waits until dir exists, or ctx ends: a view opened on a
// root not made yet shows it once tend up makes it.
func waitForDir(ctx context.Context, dir string) bool {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}

// noteFS notes what an inotify event on the root or runs/ means.
func (f *topFeed) noteFS(ctx context.Context, fsw *fsnotify.Watcher, ev fsnotify.Event) {
	root := f.client.Root()
	dir, name := filepath.Dir(ev.Name), filepath.Base(ev.Name)
	switch {
	case ev.Name == layout.Root(root).Runs():
		if ev.Has(fsnotify.Create) {
			fsw.Add(ev.Name)
		}
		f.mu.Lock()
		f.reload = true // made, or removed with every record in it
		f.mu.Unlock()
	case ev.Name == layout.Root(root).History():
		f.startFollow(ctx) // if it had stopped: mended or rotated, try again
		return
	case dir == layout.Root(root).Runs() && spool.ValidID(name) == nil:
		f.markDirty(name)
		return
	case dir == root && topHeaderFiles[name]:
		f.send(topRootMsg{})
		return
	default:
		return
	}
	f.poke()
}

// startFollow follows the history in a goroutine of its own, from its
// start: events the listing has already seen are passed over in apply.
func (f *topFeed) startFollow(ctx context.Context) {
	f.mu.Lock()
	if f.follow {
		f.mu.Unlock()
		return
	}
	f.follow = true
	f.mu.Unlock()
	f.send(topHistoryMsg{})
	go func() {
		err := f.client.Events(ctx, tend.EventFilter{}, true, func(ev tend.Event) error {
			f.mu.Lock()
			f.events = append(f.events, ev)
			f.mu.Unlock()
			f.poke()
			return nil
		})
		f.mu.Lock()
		f.follow = false
		f.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("stopped following it")
		}
		f.send(topHistoryMsg{err})
	}()
}

// load lists every run, and sends them.
func (f *topFeed) load(ctx context.Context) {
	f.loadedAt = time.Now()
	runs, err := f.client.List(ctx, tend.Filter{All: true, Brief: true})
	var bad tend.RecordErrors
	if err != nil && !errors.As(err, &bad) {
		f.send(topFeedErrMsg{err})
		return
	}
	f.recs = make(map[string]*tend.Record, len(runs))
	for _, r := range runs {
		f.recs[r.ID] = r.Record
	}
	clear(f.bad)
	for _, err := range bad {
		f.bad[badKey(err)] = err.Error()
	}
	f.send(topLoadedMsg{runs: runs, bad: f.badList()})
}

// badKey is what identifies a record that could not be read: its error's
// text (which names its file).
func badKey(err error) string { return err.Error() }

func (f *topFeed) badList() []string {
	out := make([]string, 0, len(f.bad))
	for _, b := range f.bad {
		out = append(out, b)
	}
	return out
}

// staleAfter is how long before a listing an event may have been written
// without the listing having seen its record yet: the watcher appends an
// event, then writes the record. An event older than that, of a run whose
// record the listing had brief (no revision), is already in the listing.
const staleAfter = 5 * time.Second

// apply reads again the runs that changed, and sends them with the
// events that came. It returns how soon to read again the records that
// were behind their history, if any were.
func (f *topFeed) apply(ctx context.Context) (again time.Duration) {
	f.mu.Lock()
	events, dirty, reload := f.events, f.dirty, f.reload
	f.events, f.dirty, f.reload = nil, map[string]bool{}, false
	f.mu.Unlock()
	if reload {
		f.load(ctx)
		f.send(topChangedMsg{events: events, bad: f.badList()})
		return 0
	}
	cutoff := f.loadedAt.Add(-staleAfter)
	for _, ev := range events {
		switch {
		case ev.State == tracker.Deleted:
			delete(f.want, ev.ID)
		case ev.Rev > f.want[ev.ID]:
			f.want[ev.ID] = ev.Rev
		}
		rec, ok := f.recs[ev.ID]
		switch {
		case ok && rec.Rev > 0 && ev.State != tracker.Deleted:
			if ev.Rev > rec.Rev {
				dirty[ev.ID] = true
			}
		case !ev.Time.Before(cutoff):
			dirty[ev.ID] = true
		case !ok && ev.State != tracker.Deleted:
			// An event of a run the listing did not have: one deleted
			// since, whose deletion comes later; or one being made.
			dirty[ev.ID] = true
		}
	}
	if len(dirty) == 0 && len(events) == 0 {
		return 0
	}
	var changed []*tend.Record
	var gone []string
	queueMoved := false
	for id := range dirty {
		if old, ok := f.recs[id]; ok && old.State == tracker.Queued {
			queueMoved = true
		}
		rec, err := f.client.Show(ctx, id)
		switch {
		case errors.Is(err, tend.ErrNotFound):
			if _, ok := f.recs[id]; ok {
				gone = append(gone, id)
				delete(f.recs, id)
			}
			if f.want[id] > 0 { // in the history, its first record not written yet
				again = soonest(again, f.readAgain(id))
			}
			continue
		case err != nil:
			f.bad[id] = err.Error()
			continue
		}
		delete(f.bad, id)
		if rec.Rev < f.want[id] {
			again = soonest(again, f.readAgain(id))
		} else {
			delete(f.want, id)
			delete(f.tries, id)
		}
		f.recs[id] = rec
		changed = append(changed, rec)
		if rec.State == tracker.Queued {
			queueMoved = true
		}
	}
	if queueMoved {
		// The others' places in the queue moved with it.
		for id, rec := range f.recs {
			if rec.State == tracker.Queued && !dirty[id] {
				changed = append(changed, rec)
			}
		}
	}
	var listed []tend.Listed
	if len(changed) > 0 {
		listed = f.client.Describe(changed...)
	}
	f.send(topChangedMsg{runs: listed, gone: gone, events: events, bad: f.badList()})
	return again
}

// soonest returns the shorter of two waits, 0 being none.
func soonest(a, b time.Duration) time.Duration {
	if a == 0 || b > 0 && b < a {
		return b
	}
	return a
}

// readAgain has run id, whose record was behind its history (or not
// written yet), read again, and returns how soon: 10 ms, doubling, for at
// most 10 tries; a watcher that died between its two writes leaves a
// record behind for tend fsck to mend. It returns 0 once tries are out.
func (f *topFeed) readAgain(id string) time.Duration {
	if f.tries[id] >= 10 {
		delete(f.want, id)
		delete(f.tries, id)
		return 0
	}
	f.tries[id]++
	f.mu.Lock()
	f.dirty[id] = true
	f.mu.Unlock()
	return 10 * time.Millisecond << (f.tries[id] - 1)
}

// topProbeMsg is what the header says of the root: whether it exists,
// whether a watcher runs and what it says of itself, its limits, and the
// history's health.
type topProbeMsg struct {
	noRoot   bool
	running  bool
	info     tracker.WatcherInfo
	infoOK   bool
	config   string // a bad config.json, as tend status says it
	history  string // a torn history, or changes waiting beside it
	problems []string
}

// probeRoot looks at the root's files for the header: a lock, a few small
// files, the history's last bytes. It reads no record.
func probeRoot(client *tend.Client) topProbeMsg {
	root := client.Root()
	if fi, err := os.Stat(root); err != nil || !fi.IsDir() {
		return topProbeMsg{noRoot: true}
	}
	var p topProbeMsg
	p.running, _ = client.Watching()
	if p.running {
		p.info, p.infoOK = client.LiveInfo()
	}
	if p.infoOK && p.info.ConfigProblem != "" {
		p.config = p.info.ConfigProblem // the watcher alone resolves the users and groups named
	} else if _, err := config.LoadAsOwner(root, config.Default, config.Names{}); err != nil {
		p.config = err.Error()
	}
	if err := tracker.CheckHistoryEnd(root); err != nil {
		p.history = err.Error()
	} else if msg := tracker.PendingProblem(root); msg != "" {
		p.history = msg
	}
	if msg := runtext.DiskProblem(root); msg != "" {
		p.problems = append(p.problems, msg)
	}
	if msg := tracker.SyncFailureProblem(root); msg != "" {
		p.problems = append(p.problems, msg)
	}
	return p
}

// topSampleMsg is what the live runs on screen use, sampled at once,
// by run ID.
type topSampleMsg struct {
	at    time.Time
	usage map[string]*tend.Usage
}

// topRescanEvery is how often the sampler looks through all of /proc for
// the processes of the groups it samples; in between it reads only those
// it found. A pass over /proc reads every process's stat (600 processes:
// 11 ms here), a second of it would be most of what an idle view costs.
const topRescanEvery = 10 * time.Second

// topSampler samples the process groups of live runs as tend ls does
// (procfs.GroupUsage: CPU and resident memory of every live member), but
// reads all of /proc only every topRescanEvery, or when asked for a group
// it has not seen: a process that joins a group shows within that time,
// one that leaves it at once.
type topSampler struct {
	mu      sync.Mutex    // a sample that outlasts a second meets the next
	members map[int][]int // by process group: the PIDs found in it
	scanned time.Time
}

// sample returns what the live runs among recs use now.
func (s *topSampler) sample(recs []*tend.Record, now time.Time) topSampleMsg {
	s.mu.Lock()
	defer s.mu.Unlock()
	groups := make(map[int]bool)
	for _, r := range recs {
		if tend.Live(r) {
			groups[r.PGID] = true
		}
	}
	rescan := now.Sub(s.scanned) >= topRescanEvery
	for g := range groups {
		if _, ok := s.members[g]; !ok {
			rescan = true
		}
	}
	var stats []procfs.Stat
	if rescan {
		all, _ := procfs.All()
		s.members, s.scanned = make(map[int][]int, len(groups)), now
		for g := range groups {
			s.members[g] = nil // none found is known too
		}
		for _, st := range all {
			if groups[st.PGID] && st.State != 'Z' {
				s.members[st.PGID] = append(s.members[st.PGID], st.PID)
				stats = append(stats, st)
			}
		}
	} else {
		for g := range groups {
			for _, pid := range s.members[g] {
				// A PID another process has now is in another group, or
				// joined this one: either way, what it says is right.
				if st, err := procfs.ReadStat(pid); err == nil && st.PGID == g && st.State != 'Z' {
					stats = append(stats, st)
				}
			}
		}
	}
	use := make(map[int]*tend.Usage)
	page := int64(os.Getpagesize())
	for _, st := range stats {
		u := use[st.PGID]
		if u == nil {
			u = &tend.Usage{}
			use[st.PGID] = u
		}
		u.CPUSeconds += float64(st.CPU+st.CPUChildren) / procfs.TicksPerSecond
		u.RSSBytes += st.RSSPages * page
		u.Procs++
	}
	out := topSampleMsg{at: now, usage: make(map[string]*tend.Usage)}
	for _, r := range recs {
		if u, ok := use[r.PGID]; ok && tend.Live(r) {
			out.usage[r.ID] = u
		}
	}
	return out
}

// topLogMsg is output of the run the detail pane shows: new bytes of one
// stream, or (reset) its last lines to start from.
type topLogMsg struct {
	id     string
	gen    int
	reset  bool
	lines  []tend.LogLine // with reset: the last lines, in the order written
	chunks []topChunk     // new output
	err    error
}

// topChunk is bytes a run wrote to one stream.
type topChunk struct {
	stream string
	data   string
}

// topDetailMsg is the record of the run the detail pane shows, read whole
// (a listing's may be brief).
type topDetailMsg struct {
	id  string
	rec *tend.Record
	err error
}

// topLogs follows the output of one run at a time, the one the detail
// pane shows: its last lines, then both streams as they grow, read by
// absolute offset as tend logs -f reads them.
type topLogs struct {
	client *tend.Client
	send   func(tea.Msg)

	mu     sync.Mutex
	id     string
	gen    int
	cancel context.CancelFunc
}

// show follows run id's output (and record), unless it already does.
func (l *topLogs) show(ctx context.Context, id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if id == l.id && l.cancel != nil {
		return
	}
	if l.cancel != nil {
		l.cancel()
	}
	l.id, l.cancel = id, nil
	if id == "" {
		return
	}
	l.gen++
	ctx, l.cancel = context.WithCancel(ctx)
	go l.follow(ctx, id, l.gen)
}

// stop stops following.
func (l *topLogs) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cancel != nil {
		l.cancel()
	}
	l.id, l.cancel = "", nil
}

// follow sends run id's record and last lines, then what both streams
// get, in batches, until the run has ended and all is sent, or ctx ends.
func (l *topLogs) follow(ctx context.Context, id string, gen int) {
	rec, err := l.client.Show(ctx, id)
	l.send(topDetailMsg{id: id, rec: rec, err: err})
	if err != nil {
		return
	}
	lines, place, err := l.client.TailLines(ctx, rec, topLogTail, true)
	if err != nil {
		l.send(topLogMsg{id: id, gen: gen, err: err})
		return
	}
	next := map[string]int64{tend.Stdout: place.Stdout, tend.Stderr: place.Stderr}
	l.send(topLogMsg{id: id, gen: gen, reset: true, lines: lines})
	b := &topBatcher{send: l.send, id: id, gen: gen, wake: make(chan struct{}, 1)}
	var wg sync.WaitGroup
	for _, stream := range []string{tend.Stdout, tend.Stderr} {
		wg.Go(func() {
			var rev int64
			_, err := l.client.FollowLog(ctx, id, stream, next[stream], func(cur *tend.Record, sl tend.LogSlice) error {
				if stream == tend.Stdout && cur.Rev != rev {
					rev = cur.Rev
					l.send(topDetailMsg{id: id, rec: cur})
				}
				if sl.Data != "" {
					b.add(topChunk{stream: stream, data: sl.Data})
				}
				return nil
			})
			if err != nil && ctx.Err() == nil {
				b.fail(err)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	b.run(ctx, done)
}

// topLogTail is how many of a run's last lines the view reads when it
// starts to follow it: a screen's worth and more, from no more of the
// streams than they take.
const topLogTail = 200

// topLogKeep is how many lines of output the view keeps of a run.
const topLogKeep = 2000

// topBatcher sends a run's output in batches, at most one each
// topBatchEvery: a run that writes fast costs a few redraws a second.
type topBatcher struct {
	send   func(tea.Msg)
	id     string
	gen    int
	wake   chan struct{}
	mu     sync.Mutex
	chunks []topChunk
	err    error
}

func (b *topBatcher) add(c topChunk) {
	b.mu.Lock()
	b.chunks = append(b.chunks, c)
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

func (b *topBatcher) fail(err error) {
	b.mu.Lock()
	b.err = err
	b.mu.Unlock()
	b.add(topChunk{})
}

// run sends what was added until done is closed (then once more) or ctx
// ends.
func (b *topBatcher) run(ctx context.Context, done <-chan struct{}) {
	flush := func() {
		b.mu.Lock()
		chunks, err := b.chunks, b.err
		b.chunks, b.err = nil, nil
		b.mu.Unlock()
		if len(chunks) > 0 || err != nil {
			b.send(topLogMsg{id: b.id, gen: b.gen, chunks: chunks, err: err})
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-done:
			flush()
			return
		case <-b.wake:
		}
		flush()
		t := time.NewTimer(topBatchEvery)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// generation numbers the runs followed, one after the other: output sent
// for an earlier one is stale.
func (l *topLogs) generation() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.gen
}
