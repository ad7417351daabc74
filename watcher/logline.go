package watcher

import (
	"bytes"
	"fmt"
	"io"
	"unicode"
	"unicode/utf8"
)

// lineWriter is the writer of the watcher's and the keeper's logs: each
// write (one line of the log package's, with its newline) is written one
// line still, with every other control character as \xNN and bytes that
// are not UTF-8 as '?'. A line may hold what runs and requests wrote (a
// failing health check's output, a selector's labels), which any member
// of a shared root chooses: as it was, its newlines forged the watcher's
// own lines, and its escape sequences reached root's terminal, where the
// log is read with cat or tail -f.
type lineWriter struct{ w io.Writer }

func (l lineWriter) Write(p []byte) (int, error) {
	line, nl := bytes.CutSuffix(p, []byte("\n"))
	if utf8.Valid(line) && !bytes.ContainsFunc(line, unicode.IsControl) {
		return l.w.Write(p)
	}
	var b bytes.Buffer
	for _, r := range string(bytes.ToValidUTF8(line, []byte("?"))) {
		if unicode.IsControl(r) {
			fmt.Fprintf(&b, "\\x%02x", r)
		} else {
			b.WriteRune(r)
		}
	}
	if nl {
		b.WriteByte('\n')
	}
	if _, err := l.w.Write(b.Bytes()); err != nil {
		return 0, err
	}
	return len(p), nil
}
