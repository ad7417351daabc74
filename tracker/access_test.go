package tracker

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// CheckAccess names each entry that breaks the rules, and nothing else.
func TestCheckAccess(t *testing.T) {
	uid := os.Getuid()
	tests := []struct {
		name  string
		setup func(root string)
		want  []string // "PATH-IN-ROOT: words of the problem"; empty: none
	}{
		{"a private root", func(string) {}, nil},
		{"a shared spool, sticky", func(root string) { unix.Chmod(filepath.Join(root, "spool"), 0o1777) }, nil},
		{"a shared spool, not sticky", func(root string) { os.Chmod(filepath.Join(root, "spool"), 0o777) },
			[]string{"spool: writable by others but not sticky"}},
		{"runs/ writable by its group", func(root string) { os.Chmod(filepath.Join(root, "runs"), 0o775) },
			[]string{"runs: writable by others (mode 0775)"}},
		{"runs/ sticky is no excuse", func(root string) { unix.Chmod(filepath.Join(root, "runs"), 0o1777) },
			[]string{"runs: writable by others (mode 1777)"}},
		{"the root itself writable", func(root string) { os.Chmod(root, 0o777) },
			[]string{": writable by others (mode 0777)"}},
		{"a link to elsewhere", func(root string) {
			os.RemoveAll(filepath.Join(root, "rejected"))
			os.Symlink("/etc", filepath.Join(root, "rejected"))
		}, []string{"rejected: a symbolic link"}},
		{"history as a link", func(root string) { os.Symlink("/etc/shadow", filepath.Join(root, "history.jsonl")) },
			[]string{"history.jsonl: a symbolic link"}},
		{"a key others may read", func(root string) { os.WriteFile(filepath.Join(root, "record.key"), make([]byte, 32), 0o644) },
			[]string{"record.key: readable by others"}},
		{"another's file", func(root string) {
			os.WriteFile(filepath.Join(root, "config.json"), nil, 0o644)
			os.Lchown(filepath.Join(root, "config.json"), 4242, 4242)
		}, []string{"config.json: owned by uid 4242"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if uid != 0 && strings.Contains(tt.name, "another's") {
				t.Skip("chown needs root")
			}
			root := filepath.Join(t.TempDir(), ".tend")
			os.Mkdir(root, 0o700)
			for _, d := range []string{"spool", "runs", "rejected", "outcomes"} {
				os.Mkdir(filepath.Join(root, d), 0o755)
			}
			tt.setup(root)
			var got []string
			for _, p := range CheckAccess(root, uid) {
				rel, err := filepath.Rel(root, p.Path)
				if err != nil || strings.HasPrefix(rel, "..") {
					t.Fatalf("a problem above the test's root: %v", p) // the test's own temporary directories
				}
				got = append(got, strings.TrimPrefix(rel, ".")+": "+p.What)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("CheckAccess = %q, want %q", got, tt.want)
			}
			for i := range got {
				if !strings.HasPrefix(got[i], tt.want[i]) {
					t.Errorf("problem %d = %q, want it to start with %q", i, got[i], tt.want[i])
				}
			}
		})
	}
}

// A directory above the root that another user could write without a
// sticky bit could put another root in its place.
func TestCheckAccessAbove(t *testing.T) {
	above := t.TempDir()
	os.Chmod(above, 0o777)
	root := filepath.Join(above, ".tend")
	problems := CheckAccess(root, os.Getuid())
	if len(problems) != 1 || problems[0].Path != above || !strings.Contains(problems[0].What, "not sticky") {
		t.Fatalf("CheckAccess = %v, want one problem about %s", problems, above)
	}
	unix.Chmod(above, 0o1777) // as /tmp
	if problems := CheckAccess(root, os.Getuid()); len(problems) != 0 {
		t.Fatalf("CheckAccess(sticky above) = %v", problems)
	}
}
