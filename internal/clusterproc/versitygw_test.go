package clusterproc_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasmkeep/alarms/internal/clusterproc"
)

// TestFindVersitygwWhereGoInstallPutsIt: on a machine whose PATH holds Go's
// own bin directory and the system's, but not where `go install` writes,
// versitygw is found in $(go env GOPATH)/bin when GOBIN is unset, in GOBIN
// when it is set, and a binary in neither is reported with how to install
// it.
func TestFindVersitygwWhereGoInstallPutsIt(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	fakeBinary := func(t *testing.T, dir string) string {
		t.Helper()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, "versitygw")
		if err := os.WriteFile(p, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	freshMachine := func(t *testing.T) (gopath string) {
		t.Helper()
		root := t.TempDir()
		gopath = filepath.Join(root, "gopath")
		t.Setenv("PATH", filepath.Dir(goBin)+string(os.PathListSeparator)+"/usr/bin"+string(os.PathListSeparator)+"/bin")
		t.Setenv("GOPATH", gopath)
		t.Setenv("GOBIN", "")
		// No go env file of the user's, which could set GOBIN.
		t.Setenv("GOENV", "off")
		return gopath
	}

	t.Run("GOBIN unset", func(t *testing.T) {
		gopath := freshMachine(t)
		want := fakeBinary(t, filepath.Join(gopath, "bin"))
		got, err := clusterproc.FindVersitygw()
		if err != nil || got != want {
			t.Fatalf("FindVersitygw() = %q, %v; want %q", got, err, want)
		}
	})
	t.Run("GOBIN set", func(t *testing.T) {
		gopath := freshMachine(t)
		fakeBinary(t, filepath.Join(gopath, "bin")) // go install would not put it here; GOBIN comes first
		gobin := filepath.Join(t.TempDir(), "gobin")
		t.Setenv("GOBIN", gobin)
		want := fakeBinary(t, gobin)
		got, err := clusterproc.FindVersitygw()
		if err != nil || got != want {
			t.Fatalf("FindVersitygw() = %q, %v; want %q", got, err, want)
		}
	})
	t.Run("GOPATH with two entries", func(t *testing.T) {
		gopath := freshMachine(t)
		second := filepath.Join(t.TempDir(), "second")
		t.Setenv("GOPATH", gopath+string(os.PathListSeparator)+second)
		want := fakeBinary(t, filepath.Join(second, "bin"))
		got, err := clusterproc.FindVersitygw()
		if err != nil || got != want {
			t.Fatalf("FindVersitygw() = %q, %v; want %q", got, err, want)
		}
	})
	t.Run("not installed", func(t *testing.T) {
		freshMachine(t)
		got, err := clusterproc.FindVersitygw()
		if err == nil {
			t.Fatalf("FindVersitygw() = %q with nothing installed", got)
		}
		if !strings.Contains(err.Error(), "go install github.com/versity/versitygw/cmd/versitygw@"+clusterproc.VersitygwVersion) {
			t.Fatalf("error %q does not say how to install versitygw", err)
		}
	})
}

// A revision the repository does not hold is ErrNoRevision, so a test of a
// rolling upgrade can tell "no history here" from a build that failed.
func TestBuildRevisionOfAnUnknownCommit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	_, _, err := clusterproc.BuildRevision(context.Background(), "0000000000000000000000000000000000000001", t.TempDir())
	if !errors.Is(err, clusterproc.ErrNoRevision) {
		t.Fatalf("BuildRevision of a commit not in the repository: %v, want ErrNoRevision", err)
	}
}
