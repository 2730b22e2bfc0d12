package main

import (
	"bytes"
	"context"
	"runtime"
	"strings"
	"testing"

	"github.com/wasmkeep/alarms/bucket"
)

// noBucket is an opener for the tests that must not reach a bucket.
func noBucket(t *testing.T) opener {
	return func(context.Context, string) (bucket.Bucket, error) {
		t.Fatal("keepctl opened a bucket")
		return nil, nil
	}
}

// -version prints the version and exits 0; -help prints the usage, with
// every command, on stdout and exits 0; each command's -help prints its
// own usage and exits 0, without a bucket or a node; each command takes
// -o json; a flag a command does not know is bad usage (exit 2), with the
// command's usage on stderr.
func TestKeepctlHelpVersionAndOutputFlags(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	keepctl := func(want int, args ...string) (string, string) {
		t.Helper()
		var out, errOut bytes.Buffer
		if got := run(ctx, args, &out, &errOut, noBucket(t)); got != want {
			t.Fatalf("keepctl %v: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", args, got, want, out.String(), errOut.String())
		}
		return out.String(), errOut.String()
	}
	if out, _ := keepctl(0, "-version"); !strings.HasPrefix(out, "keepctl ") || !strings.Contains(out, runtime.Version()) {
		t.Errorf("-version: %q", out)
	}
	for _, help := range []string{"-help", "-h", "--help"} {
		out, errOut := keepctl(0, help)
		if errOut != "" || !strings.Contains(out, "Usage: keepctl") || !strings.Contains(out, "-version") {
			t.Errorf("%s: stdout %q, stderr %q", help, out, errOut)
		}
		for _, c := range commands {
			if !strings.Contains(out, "  "+c.name+" ") {
				t.Errorf("%s does not list %q", help, c.name)
			}
		}
	}
	for _, c := range commands {
		words := strings.Fields(c.name)
		out, errOut := keepctl(0, append(words, "-help")...)
		if errOut != "" || !strings.Contains(out, "Usage: keepctl ") || !strings.Contains(out, " "+c.name+" "+c.args) || !strings.Contains(out, "Flags:") || strings.Contains(out, "bad usage") {
			t.Errorf("%s -help: stdout %q, stderr %q; want its own usage", c.name, out, errOut)
		}
		// -o json is a flag of every command (parsed before -help).
		keepctl(0, append(words, "-o", "json", "-help")...)
		_, errOut = keepctl(2, append(words, "-o", "yaml", "-help")...)
		if !strings.Contains(errOut, `"yaml"`) {
			t.Errorf("%s -o yaml: stderr %q, want it refused by name", c.name, errOut)
		}
	}
	_, errOut := keepctl(2, "-node", "http://127.0.0.1:1", "alarm", "clear", "-bogus", "t/c/n")
	if !strings.Contains(errOut, "flag provided but not defined: -bogus") || !strings.Contains(errOut, "Usage: keepctl -node URL") {
		t.Errorf("an unknown flag: stderr %q", errOut)
	}
	if _, errOut := keepctl(2, "frobnicate"); !strings.Contains(errOut, `unknown command "frobnicate"`) {
		t.Errorf("an unknown command: stderr %q", errOut)
	}
	if _, errOut := keepctl(2); !strings.Contains(errOut, "Usage: keepctl") {
		t.Errorf("no command: stderr %q", errOut)
	}
}
