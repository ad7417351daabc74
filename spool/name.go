// Package spool is tend's request-file protocol: the names of request files,
// the formats of their bodies, and the safe ways to read, claim and reject
// them, to submit them, and to answer them with outcome files.
//
// A request is a file spool/<id>.<verb>. Nothing in a request's name or
// body can make tend read or write outside its root: IDs are restricted to
// a safe alphabet and files are opened without following links.
package spool

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The verbs a request name may end in.
const (
	VerbStart   = "start"
	VerbCancel  = "cancel"
	VerbDelete  = "delete"
	VerbLabel   = "label"
	VerbNote    = "note"
	VerbSignal  = "signal"
	VerbRestart = "restart"
	VerbPause   = "pause"
	VerbResume  = "resume"
)

// Verbs lists every verb tend takes, in the order the docs give them.
var Verbs = []string{VerbStart, VerbCancel, VerbDelete, VerbLabel, VerbNote, VerbSignal, VerbRestart, VerbPause, VerbResume}

// MaxIDLen bounds an ID, so that every file tend derives from it
// (<id>.<verb>, <id>.<verb>.error) stays far below NAME_MAX.
const MaxIDLen = 64

// Name is a request file's name, split into ID, tag and verb. A control
// request (any verb but start) may carry a tag, <id>@<tag>.<verb>, so that
// clients acting on the same run at once write different files and read
// their own outcomes; '@' is not in the ID alphabet, so the split is
// unambiguous.
//
// Owner is not part of the name: it is the uid of the request's owner,
// where it is known (0, root's, where not), and decides where its answer
// goes (Dir.OutcomePath). Two requests of the same name and different
// owners are different requests: in a shared root a member can name a
// request as another's, and must never be taken for, or answer as, it.
type Name struct {
	ID    string
	Tag   string
	Verb  string
	Owner int
}

// Key returns how a record names request n among the answers still due
// (a stop's requests) or the requests carried out (done): its name, after
// "<uid>/" for another owner than root's. The slash is in no name.
func (n Name) Key() string {
	if n.Owner != 0 {
		return strconv.Itoa(n.Owner) + "/" + n.String()
	}
	return n.String()
}

// ParseKey parses what Key returns.
func ParseKey(key string) (Name, error) {
	owner := 0
	if uid, name, ok := strings.Cut(key, "/"); ok {
		u, err := strconv.Atoi(uid)
		if err != nil || u < 0 || strconv.Itoa(u) != uid {
			return Name{}, fmt.Errorf("%q: not a request's key (<uid>/<name>)", key)
		}
		owner, key = u, name
	}
	n, err := ParseName(key)
	if sn, ok := ParseSelectorName(key); ok {
		n, err = sn, nil
	}
	n.Owner = owner
	return n, err
}

func (n Name) String() string {
	if n.Tag != "" {
		return n.ID + "@" + n.Tag + "." + n.Verb
	}
	return n.ID + "." + n.Verb
}

// ValidID reports why id is not a safe run ID, or nil if it is. IDs are 1 to
// MaxIDLen bytes of ASCII letters, digits, '.', '_' and '-', and do not
// start with '.' or '-'. So an ID is never a path, never hidden, never an
// option, and never "." or "..".
func ValidID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("empty id")
	case len(id) > MaxIDLen:
		return fmt.Errorf("id is %d bytes long, the limit is %d", len(id), MaxIDLen)
	case id[0] == '.' || id[0] == '-':
		return fmt.Errorf("id %q starts with %q", id, id[:1])
	}
	for i := 0; i < len(id); i++ {
		if !idByte(id[i]) {
			return fmt.Errorf("id %q has %q at byte %d: ids use only ASCII letters, digits, '.', '_' and '-'", id, badChar(id[i:]), i)
		}
	}
	return nil
}

// badChar returns the character s starts with: a whole UTF-8 character
// ("é", not its first byte "\xc3"), or the byte alone if it begins none.
func badChar(s string) string {
	_, n := utf8.DecodeRuneInString(s)
	return s[:n]
}

func idByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '.' || c == '_' || c == '-'
}

// ParseName splits a request file name into ID and verb. The verb is what
// follows the last dot, so IDs may contain dots. The error says what is
// wrong in words a person can act on.
func ParseName(name string) (Name, error) {
	dot := strings.LastIndexByte(name, '.')
	if dot < 0 {
		return Name{}, fmt.Errorf("no verb: a request is named <id>.<verb>, with verb one of %s", strings.Join(Verbs, ", "))
	}
	n := Name{ID: name[:dot], Verb: name[dot+1:]}
	if at := strings.IndexByte(n.ID, '@'); at >= 0 {
		n.ID, n.Tag = n.ID[:at], n.ID[at+1:]
	}
	if !knownVerb(n.Verb) {
		msg := fmt.Sprintf("unknown verb %q", n.Verb)
		if s := suggestVerb(n.Verb); s != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", s)
		}
		return Name{}, fmt.Errorf("%s: verbs are %s", msg, strings.Join(Verbs, ", "))
	}
	if n.ID == SelectID && (n.Verb == VerbCancel || n.Verb == VerbSignal) {
		// Only a valid selector name gets here (ParseSelectorName comes
		// first): the tag is missing or bad.
		return Name{}, fmt.Errorf("a selector request needs a tag: name it %s@<tag>.%s, the tag named as an ID is (letters, digits, ., _, -)", SelectID, n.Verb)
	}
	if err := ValidID(n.ID); err != nil {
		return Name{}, err
	}
	if n.Tag != "" || strings.Contains(name[:dot], "@") {
		if n.Verb == VerbStart {
			return Name{}, fmt.Errorf("a start request has no tag: it is named <id>.start")
		}
		if err := ValidID(n.Tag); err != nil {
			return Name{}, fmt.Errorf("tag: %v", err)
		}
	}
	return n, nil
}

func knownVerb(v string) bool {
	for _, k := range Verbs {
		if v == k {
			return true
		}
	}
	return false
}

// suggestVerb returns the known verb within two edits of v, if there is one.
func suggestVerb(v string) string { return Suggest(v, Verbs) }

// Suggest returns the word of known nearest to word (ignoring case), if one
// is within two edits of it: what a misspelled verb, field or state most
// likely meant. It returns "" if none is that near.
func Suggest(word string, known []string) string {
	best, bestDist := "", 3
	for _, k := range known {
		if d := editDistance(strings.ToLower(word), k); d < bestDist {
			best, bestDist = k, d
		}
	}
	return best
}

// editDistance is the Damerau-Levenshtein distance (with adjacent swaps),
// so "strat" is one edit from "start".
func editDistance(a, b string) int {
	if len(a) > 32 || len(b) > 32 {
		return 99
	}
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// Ignored reports whether name is one that editors, atomic savers and
// tend's own clients use for files that are not (yet) requests: hidden
// files (vim swap files .x.swp, emacs locks .#x, temp files of atomic
// savers, tend's own .x.start.tmp), names starting with '#' (emacs
// autosaves #x#), backups x~, vim's write probes (4913, or 4913 + 123k
// when one is left over), and names ending in a temp or backup suffix. A request
// written under such a name and renamed to its real name is taken once,
// whole. No valid request name is ignored: IDs never start with '.' and no
// verb is one of these suffixes.
func Ignored(name string) bool {
	switch {
	case name == "" || vimProbe(name):
		return true
	case name[0] == '.' || name[0] == '#' || strings.HasSuffix(name, "~"):
		return true
	}
	for _, suffix := range ignoredSuffixes {
		if strings.HasSuffix(name, suffix) {
			return true
		}
	}
	return false
}

// vimProbe reports whether name is one of the files vim makes and removes
// to learn whether it may write in a directory: 4913, and, where one is
// in the way, 4913 + 123, + 246, ... (bufwrite.c).
func vimProbe(name string) bool {
	n, err := strconv.Atoi(name)
	return err == nil && name[0] != '+' && n >= 4913 && (n-4913)%123 == 0 && strconv.Itoa(n) == name
}

var ignoredSuffixes = []string{
	".swp", ".swo", ".swx", ".swn", // vim
	".tmp", ".temp", ".part", ".partial", // atomic savers and downloads
	".bak", ".orig", ".rej", ".kate-swp", // backups, patch leftovers, kate
	"___jb_tmp___", "___jb_old___", // JetBrains safe write
}
