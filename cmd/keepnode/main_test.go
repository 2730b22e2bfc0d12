package main

import (
	"os/exec"
	"runtime/debug"
	"strings"
	"testing"
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
