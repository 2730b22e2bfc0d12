package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/wasmkeep/alarms/bucket"
)

// An operator's mistakes are said as such, with a status that is not
// success: a -prefix (or -bucket) under which nothing is stored is not
// shown as an empty cluster, actor inspect of an actor that does not
// exist says so, and a malformed -tenant or -class is refused as the node
// refuses it. On an in-memory bucket holding one object of a cluster
// under the default prefix.
func TestKeepctlSaysWhatIsNotThere(t *testing.T) {
	ctx := context.Background()
	mem := bucket.NewMem()
	if _, err := mem.Put(ctx, "cluster/nodes/n1", []byte("{}"), bucket.Cond{}); err != nil {
		t.Fatal(err)
	}
	open := func(context.Context, string) (bucket.Bucket, error) { return mem, nil }
	keepctl := func(args ...string) (int, string, string) {
		t.Helper()
		var out, errOut bytes.Buffer
		status := run(ctx, append([]string{"-bucket", "wasmkeep"}, args...), &out, &errOut, open)
		return status, out.String(), errOut.String()
	}
	for _, c := range []struct {
		args   []string
		status int
		says   []string
	}{
		{[]string{"-prefix", "clstr/", "alarms", "list"}, 2, []string{`no cluster under -prefix "clstr/" in bucket "wasmkeep"`}},
		{[]string{"-prefix", "clstr/", "nodes"}, 2, []string{`no cluster under -prefix "clstr/"`, `"wasmkeep"`}},
		{[]string{"-prefix", "clstr/", "verify"}, 2, []string{`no cluster under -prefix "clstr/"`}},
		{[]string{"actor", "inspect", "t/c/nobody"}, 1, []string{"actor t/c/nobody does not exist"}},
		{[]string{"alarms", "list", "-tenant", "Bad_T"}, 2, []string{"-tenant", `"Bad_T"`, "lowercase"}},
		{[]string{"alarms", "list", "-tenant", "t.x"}, 2, []string{"-tenant", `"t.x"`, "allowed are"}},
		{[]string{"alarms", "failed", "-class", "-x"}, 2, []string{"-class", `"-x"`}},
	} {
		status, out, errOut := keepctl(c.args...)
		if status != c.status {
			t.Errorf("keepctl %v: exit %d, want %d\nstdout: %s\nstderr: %s", c.args, status, c.status, out, errOut)
		}
		for _, s := range c.says {
			if !strings.Contains(errOut, s) {
				t.Errorf("keepctl %v: stderr %q does not say %q", c.args, errOut, s)
			}
		}
	}
	// The right prefix, where something is: the listing answers.
	if status, out, errOut := keepctl("alarms", "list"); status != 0 || !strings.Contains(out, "0 entries") {
		t.Errorf("keepctl alarms list on the cluster's prefix: exit %d\n%s%s", status, out, errOut)
	}
}
