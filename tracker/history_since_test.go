package tracker

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestScanHistorySince: only the events at or after since are passed,
// and a rotated file last written before since (with the clock's slack)
// is not read at all, however bad its lines; one written since, or the
// current file, is read whatever its time.
func TestScanHistorySince(t *testing.T) {
	root := t.TempDir()
	since := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	write := func(name string, mtime time.Time, body string) {
		t.Helper()
		path := filepath.Join(root, name)
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	line := func(id, at string) string {
		return `{"time":"` + at + `","id":"` + id + `","rev":1,"state":"queued"}` + "\n"
	}
	// Older than since by more than the slack: skipped, its torn line
	// never read (a read would fail closed on it).
	write("history.3.jsonl", since.Add(-time.Hour), line("old3", "2026-11-29T04:00:00Z")+"{torn")
	// Written within the slack: read, its old line filtered out.
	write("history.2.jsonl", since.Add(-30*time.Second), line("old2", "2026-11-29T05:59:00Z")+line("edge", "2026-11-29T06:00:00Z"))
	write("history.1.jsonl", since.Add(time.Hour), line("new1", "2026-11-29T06:30:00Z"))
	// The current file: read, however old it looks.
	write("history.jsonl", since.Add(-24*time.Hour), line("old0", "2026-11-29T05:00:00Z")+line("new0", "2026-11-29T07:00:00Z"))

	var got []string
	err := ScanHistorySince(root, since, func(ev Event) error {
		got = append(got, ev.ID)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"edge", "new1", "new0"}; !slices.Equal(got, want) {
		t.Errorf("ScanHistorySince passed %v, want %v", got, want)
	}
	// With no since, every file is read: the torn line fails it closed.
	if err := ScanHistory(root, func(Event) error { return nil }); err == nil {
		t.Error("ScanHistory read over a torn line: the test's skipped file was not what it seemed")
	}
}
