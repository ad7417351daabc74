package tracker

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A gate file says its run may have passed its gate unless it holds
// nothing or "closed": recovery starts again only a run that surely never
// ran.
func TestGateSays(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name    string
		make    func(path string) error
		started bool
	}{
		{"missing", func(string) error { return nil }, false},
		{"empty", func(p string) error { return os.WriteFile(p, nil, 0o644) }, false},
		{"closed", func(p string) error { return os.WriteFile(p, []byte(GateClosed), 0o644) }, false},
		{"passed over closed", func(p string) error { return os.WriteFile(p, []byte(GatePassed), 0o644) }, true},
		{"a line appended to an empty file", func(p string) error { return os.WriteFile(p, []byte("passed\n"), 0o644) }, true},
		{"closed, then more", func(p string) error { return os.WriteFile(p, []byte(GateClosed+"x"), 0o644) }, true},
		{"something else", func(p string) error { return os.WriteFile(p, []byte("x"), 0o644) }, true},
		{"a directory", func(p string) error { return os.Mkdir(p, 0o755) }, true},
		{"a symlink to a closed gate", func(p string) error {
			os.WriteFile(p+".real", []byte(GateClosed), 0o644)
			return os.Symlink(p+".real", p)
		}, true},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
		if err := tc.make(path); err != nil {
			t.Fatal(err)
		}
		if got := GateSays(path); got != tc.started {
			t.Errorf("%s: GateSays = %v, want %v", tc.name, got, tc.started)
		}
	}
}
