package buildinfo

import (
	"runtime/debug"
	"testing"
)

// The version comes from -ldflags, else from what the Go toolchain
// recorded: a module version, else the commit.
func TestOf(t *testing.T) {
	vcs := func(rev, modified string) *debug.BuildInfo {
		return &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}}
	}
	tests := []struct {
		linked string
		bi     *debug.BuildInfo
		want   string
	}{
		{"v1.2.0-3-gabc", vcs("0123456789abcdef", "false"), "v1.2.0-3-gabc"},
		{"dev", &debug.BuildInfo{Main: debug.Module{Version: "v1.3.0"}}, "v1.3.0"},
		{"dev", vcs("0123456789abcdef", "false"), "0123456789ab"},
		{"dev", vcs("0123456789abcdef", "true"), "0123456789ab-dirty"},
		{"dev", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "(devel)"},
		{"dev", nil, "(devel)"},
	}
	for _, tt := range tests {
		if got := Of(tt.linked, tt.bi); got != tt.want {
			t.Errorf("Of(%q, %+v) = %q, want %q", tt.linked, tt.bi, got, tt.want)
		}
	}
}
