package main

import (
	"os/exec"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/wasmkeep/alarms/node"
)

func TestVersionLine(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/wasmkeep/alarms", Version: "v0.4.0"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.time", Value: "2026-11-30T12:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	for _, tc := range []struct {
		bi   *debug.BuildInfo
		ok   bool
		want string
	}{
		{bi, true, "keepnode v0.4.0 commit 0123456789ab+dirty (2026-11-30T12:00:00Z) go1.26.0"},
		{&debug.BuildInfo{GoVersion: "go1.26.0"}, true, "keepnode (devel) go1.26.0"},
		{nil, false, "keepnode (unknown version: no build information)"},
	} {
		if got := versionLine(tc.bi, tc.ok); got != tc.want {
			t.Errorf("versionLine = %q, want %q", got, tc.want)
		}
	}
}

// keepnode -version prints one line and exits 0, needing no other flag.
func TestVersionFlag(t *testing.T) {
	bin := keepnodeBinary(t)
	out, err := exec.Command(bin, "-version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "keepnode ") || strings.Count(string(out), "\n") != 1 || !strings.Contains(string(out), " go1.") {
		t.Fatalf("keepnode -version: %q, %v", out, err)
	}
	t.Logf("%s", strings.TrimSpace(string(out)))
}

// A build that recorded no version or revision (-buildvcs=false, a tree
// without .git, as in the image) names those -ldflags -X stamped into
// node.Version and node.Revision; what the build recorded wins over them.
func TestVersionLineFallsBackToTheStamp(t *testing.T) {
	defer func(v, r string) { node.Version, node.Revision = v, r }(node.Version, node.Revision)
	node.Version, node.Revision = "v0.5.0-3-gabcdef0", "abcdef0123456789abcdef0123456789abcdef01"
	unstamped := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/wasmkeep/alarms", Version: "(devel)"}}
	if got, want := versionLine(unstamped, true), "keepnode v0.5.0-3-gabcdef0 commit abcdef012345 go1.26.0"; got != want {
		t.Errorf("versionLine of a build with no VCS information = %q, want %q", got, want)
	}
	recorded := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/wasmkeep/alarms", Version: "v0.4.0"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}}}
	if got, want := versionLine(recorded, true), "keepnode v0.4.0 commit 0123456789ab go1.26.0"; got != want {
		t.Errorf("versionLine of a build that recorded its own = %q, want %q", got, want)
	}
}
