// Package buildinfo says which tend a program is: the version set at link
// time, else what the Go toolchain recorded in the binary. tend and
// tend-mcp report the same one.
package buildinfo

import "runtime/debug"

// String returns the version set at link time (-ldflags "-X
// main.version=..."), if linked is one, else what the toolchain recorded
// (see Of).
func String(linked string) string {
	bi, _ := debug.ReadBuildInfo()
	return Of(linked, bi)
}

// Of returns linked, the version set at link time, if there is one (not
// "" or "dev"), else the module's version (go install ...@v1.2.0), else
// the commit it was built from (as git describe --always --dirty names
// it), else "(devel)".
func Of(linked string, bi *debug.BuildInfo) string {
	if linked != "dev" && linked != "" {
		return linked
	}
	if bi == nil {
		return "(devel)"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch {
		case s.Key == "vcs.revision":
			rev = s.Value[:min(12, len(s.Value))]
		case s.Key == "vcs.modified" && s.Value == "true":
			dirty = "-dirty"
		}
	}
	if rev != "" {
		return rev + dirty
	}
	return "(devel)"
}
