package tracker

import (
	"errors"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tendhq/tend/tracker/durable"
	"golang.org/x/sys/unix"
)

// The list cache, list.cache in the root, keeps what tend ls shows of
// each finished run beside the Stamp of the state.json it was read from.
// A finished record changes only by hand, by a label or note request, or
// by being deleted, and each of these gives its file another Stamp (or
// none): so a run whose file still has the Stamp in the cache is shown
// from the cache, with one stat instead of reading, decoding and checking
// the record. Nothing else reads it, and it is never the truth: a cache
// that is missing, unreadable or of another version is read as empty and
// written again.

// listCacheHeader is the cache's first line: its format's name and
// version.
const listCacheHeader = "tend list cache 1"

// racyWindow is how long after its last change a record is first cached.
// File times come from a coarse clock (a tick of up to 10 ms): a record
// changed in place in the same tick as it was read, to the same size,
// would keep its Stamp, and the cache the older text. One changed at
// least this long before the read is not that close to any later change.
const racyWindow = 100 * time.Millisecond

// listCache is the cache as read, and where it is kept.
type listCache struct {
	path  string
	file  []byte                // as read, until indexed
	lines map[string]cachedLine // by run ID
	since time.Time             // when this listing began to read records
}

// cachedLine is a finished run's line in the cache: the Stamp of the
// state.json its brief record was read from (see stampText), and the
// brief record's fields, parsed only if the Stamp is still the file's.
type cachedLine struct {
	stamp, fields string
}

// ListBrief returns what List returns, except that a finished run may
// come from the list cache, with only the fields of its brief record: ID,
// State, Session, Command, Labels, CreatedAt, StartedAt, EndedAt,
// ExitCode, Signal, Progress and DurationSeconds, its times in UTC. That
// is what tend ls shows and filters on, and what tend status, gc and
// cancel --all look at, read in a fraction of the time. It brings the
// cache up to date, if it can write it.
func (s *Store) ListBrief() ([]*State, []error) {
	return s.list(&listCache{path: s.root.ListCache(), since: time.Now()})
}

// read reads the cache file, and reports whether it has any lines. Only a
// regular file is read: a fifo or a link put in its place (to /dev/zero)
// would never end.
func (c *listCache) read() bool {
	f, err := os.OpenFile(c.path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return false
	}
	c.file = make([]byte, fi.Size())
	n, _ := io.ReadFull(f, c.file)
	c.file = c.file[:n]
	return n > 0
}

// index finds the lines of the file read, by run ID, on a goroutine of
// its own, and closes the channel it returns when it is done. A cache
// with another header is read as empty.
func (c *listCache) index() <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		text := string(c.file) // one copy: every line is a slice of it
		c.file = nil
		header, text, _ := strings.Cut(text, "\n")
		if header != listCacheHeader {
			return
		}
		c.lines = make(map[string]cachedLine, strings.Count(text, "\n"))
		for line := range strings.Lines(text) {
			line, whole := strings.CutSuffix(line, "\n")
			if !whole {
				break // cut short
			}
			id, rest, _ := strings.Cut(line, "\t")
			stamp, fields, ok := strings.Cut(rest, "\t")
			if ok && stamp != "" {
				c.lines[id] = cachedLine{stamp, fields}
			}
		}
	}()
	return done
}

// lookup returns run id's brief record, and its line, if the cache has
// one for the file whose stampText is stamp. A line that does not parse
// is not there.
func (c *listCache) lookup(id, stamp string) (*State, cachedLine, bool) {
	l, ok := c.lines[id]
	if !ok || stamp == "" || l.stamp != stamp {
		return nil, cachedLine{}, false
	}
	st, err := parseBrief(id, l.fields)
	return st, l, err == nil
}

// stampAt returns the stampText of run id's state.json, opened relative
// to dirfd; "" if it cannot be had.
func stampAt(dirfd int, id string) string {
	var st unix.Stat_t
	if unix.Fstatat(dirfd, id+"/state.json", &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
		return ""
	}
	return stampText(stampOf(&st))
}

// stampText writes a Stamp as the cache keeps it, DEV:INO:SIZE:MTIME:CTIME
// (times in nanoseconds since 1970); "" for the zero Stamp. Stamps are
// compared as text, so that the cache's need not be parsed.
func stampText(sp Stamp) string {
	if sp == (Stamp{}) {
		return ""
	}
	b := make([]byte, 0, 80)
	b = strconv.AppendUint(b, sp.dev, 10)
	b = append(b, ':')
	b = strconv.AppendUint(b, sp.ino, 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, sp.size, 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, sp.mtime.Nano(), 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, sp.ctime.Nano(), 10)
	return string(b)
}

// line returns what the cache is to hold of st, read from a file with
// stamp: its line if it may be cached (it is finished, it was read whole
// and trusted, and it had not changed within racyWindow of the read),
// else none (the zero cachedLine).
func (c *listCache) line(st *State, stamp Stamp) cachedLine {
	changed := time.Unix(stamp.ctime.Unix())
	if st == nil || !Final(st.State) || stamp == (Stamp{}) || !changed.Before(c.since.Add(-racyWindow)) {
		return cachedLine{}
	}
	return cachedLine{stampText(stamp), briefFields(st)}
}

// save writes the cache again, holding lines (by run ID; "" stamps are
// none), if it does not hold exactly these already. A cache that cannot
// be written is left as it is, for the next listing to use what it can
// of.
func (c *listCache) save(ids []string, lines []cachedLine) {
	var keep []int // indexes of ids and lines
	size, changed := len(listCacheHeader)+1, false
	for i, l := range lines {
		if l.stamp != "" {
			keep = append(keep, i)
			size += len(ids[i]) + len(l.stamp) + len(l.fields) + 3
			changed = changed || c.lines[ids[i]] != l
		}
	}
	if !changed && len(keep) == len(c.lines) {
		return
	}
	slices.SortFunc(keep, func(i, j int) int { return strings.Compare(ids[i], ids[j]) })
	b := make([]byte, 0, size)
	b = append(b, listCacheHeader+"\n"...)
	for _, i := range keep {
		b = append(append(append(append(append(append(b, ids[i]...), '\t'), lines[i].stamp...), '\t'), lines[i].fields...), '\n')
	}
	durable.ReplaceUnsynced(c.path, b, durable.Perm{}) // the writer's alone: it shows every run it read
}

// briefFields returns the fields of st's brief record as the cache keeps
// them, separated by tabs:
//
//	STATE SESSION CREATED STARTED ENDED EXIT SIGNAL DURATION PROGRESS
//	N ARG... M KEY VALUE...
//
// times in nanoseconds since 1970, "-" for none; SESSION, SIGNAL,
// PROGRESS, each ARG, KEY and VALUE quoted as Go strings, so that none
// holds a tab or a newline.
func briefFields(st *State) string {
	b := make([]byte, 0, 256)
	b = append(b, st.State...)
	b = strconv.AppendQuote(append(b, '\t'), st.Session)
	b = strconv.AppendInt(append(b, '\t'), st.CreatedAt.UnixNano(), 10)
	b = appendTime(append(b, '\t'), st.StartedAt)
	b = appendTime(append(b, '\t'), st.EndedAt)
	b = append(b, '\t')
	if st.ExitCode == nil {
		b = append(b, '-')
	} else {
		b = strconv.AppendInt(b, int64(*st.ExitCode), 10)
	}
	b = strconv.AppendQuote(append(b, '\t'), st.Signal)
	b = strconv.AppendFloat(append(b, '\t'), st.DurationSeconds, 'g', -1, 64)
	b = strconv.AppendQuote(append(b, '\t'), st.Progress)
	b = strconv.AppendInt(append(b, '\t'), int64(len(st.Command)), 10)
	for _, arg := range st.Command {
		b = strconv.AppendQuote(append(b, '\t'), arg)
	}
	b = strconv.AppendInt(append(b, '\t'), int64(len(st.Labels)), 10)
	for _, k := range slices.Sorted(maps.Keys(st.Labels)) {
		b = strconv.AppendQuote(append(b, '\t'), k)
		b = strconv.AppendQuote(append(b, '\t'), st.Labels[k])
	}
	return string(b)
}

func appendTime(b []byte, t *time.Time) []byte {
	if t == nil {
		return append(b, '-')
	}
	return strconv.AppendInt(b, t.UnixNano(), 10)
}

var errCacheLine = errors.New("not a list cache line")

// parseBrief parses run id's brief record from the fields briefFields
// wrote.
func parseBrief(id, fields string) (*State, error) {
	var buf [32]string
	f := splitTabs(buf[:0], fields)
	if len(f) < 11 {
		return nil, errCacheLine
	}
	p := fieldParser{}
	times := new([2]time.Time) // StartedAt and EndedAt: one allocation
	st := &State{ID: id, State: StateName(f[0]), Session: p.quoted(f[1]), CreatedAt: time.Unix(0, p.i64(f[2])).UTC(),
		StartedAt: p.time(f[3], &times[0]), EndedAt: p.time(f[4], &times[1]), ExitCode: p.int(f[5]),
		Signal: p.quoted(f[6]), DurationSeconds: p.float(f[7]), Progress: p.quoted(f[8])}
	rest := f[10:]
	n := p.count(f[9], len(rest))
	if n > 0 {
		st.Command = make([]string, n)
		for i := range n {
			st.Command[i] = p.quoted(rest[i])
		}
	}
	rest = rest[n:]
	if len(rest) == 0 {
		return nil, errCacheLine
	}
	m := p.count(rest[0], (len(rest)-1)/2)
	rest = rest[1:]
	if m > 0 {
		st.Labels = make(map[string]string, m)
		for i := range m {
			st.Labels[p.quoted(rest[2*i])] = p.quoted(rest[2*i+1])
		}
	}
	if p.bad || len(rest) != 2*m || !Final(st.State) {
		return nil, errCacheLine
	}
	return st, nil
}

// splitTabs appends the tab-separated fields of line to fields:
// strings.Split without a slice a line.
func splitTabs(fields []string, line string) []string {
	for {
		f, rest, more := strings.Cut(line, "\t")
		fields = append(fields, f)
		if !more {
			return fields
		}
		line = rest
	}
}

// fieldParser parses a line's fields, noting whether any did not parse.
type fieldParser struct{ bad bool }

func (p *fieldParser) i64(s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	p.keep(err)
	return n
}

func (p *fieldParser) float(s string) float64 {
	f, err := strconv.ParseFloat(s, 64)
	p.keep(err)
	return f
}

// count parses a number of fields to follow, at most max.
func (p *fieldParser) count(s string, max int) int {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > max {
		p.bad = true
		return 0
	}
	return n
}

func (p *fieldParser) quoted(s string) string {
	q, err := strconv.Unquote(s)
	p.keep(err)
	return q
}

// time parses a time into t, and returns t; nil for "-".
func (p *fieldParser) time(s string, t *time.Time) *time.Time {
	if s == "-" {
		return nil
	}
	*t = time.Unix(0, p.i64(s)).UTC()
	return t
}

func (p *fieldParser) int(s string) *int {
	if s == "-" {
		return nil
	}
	n, err := strconv.Atoi(s)
	p.keep(err)
	return &n
}

func (p *fieldParser) keep(err error) { p.bad = p.bad || err != nil }

func stampOf(st *unix.Stat_t) Stamp {
	return Stamp{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}
}
