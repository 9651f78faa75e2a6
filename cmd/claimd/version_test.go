package main

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// TestVersionSpellings: the command and the flag print the same line, the
// version make build stamps, and exit 0; anything after them is a usage
// error.
func TestVersionSpellings(t *testing.T) {
	want := "claimd " + testVersion + " "
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		r := runEnv(t, nil, args...)
		if r.code != 0 || !strings.HasPrefix(r.stdout, want) || strings.Count(r.stdout, "\n") != 1 || r.stderr != "" {
			t.Errorf("claimd %v = exit %d, stdout %q, stderr %q; want exit 0 and one line starting %q", args, r.code, r.stdout, r.stderr, want)
		}
	}
	if r := runEnv(t, nil, "--version", "extra"); r.code != 2 || r.stdout != "" {
		t.Errorf("claimd --version extra = exit %d, stdout %q; want exit 2 (usage)", r.code, r.stdout)
	}
}

func TestDescribeBuild(t *testing.T) {
	rev := debug.BuildSetting{Key: "vcs.revision", Value: "0123456789abcdef0123"}
	tests := []struct {
		desc    string
		stamped string
		bi      *debug.BuildInfo
		want    string
	}{
		{"make build stamps git describe", "v0.3.0-2-gabcdef", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261203-0123456789ab"}, Settings: []debug.BuildSetting{rev}},
			"claimd v0.3.0-2-gabcdef (0123456789ab) " + runtime.Version()},
		{"go install at a tag", "dev", &debug.BuildInfo{Main: debug.Module{Version: "v0.3.0"}},
			"claimd v0.3.0 " + runtime.Version()},
		{"go build in a checkout", "dev", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261203042800-0123456789ab+dirty"}, Settings: []debug.BuildSetting{rev}},
			"claimd v0.0.0-20261203042800-0123456789ab+dirty (0123456789ab) " + runtime.Version()},
		{"no version recorded", "dev", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}},
			"claimd dev " + runtime.Version()},
		{"no build info", "dev", nil, "claimd dev " + runtime.Version()},
	}
	for _, tc := range tests {
		if got := describeBuild(tc.stamped, tc.bi); got != tc.want {
			t.Errorf("%s: describeBuild(%q) = %q, want %q", tc.desc, tc.stamped, got, tc.want)
		}
	}
}
