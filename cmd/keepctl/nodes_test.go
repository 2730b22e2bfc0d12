package main

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/bucket"
)

// keepctl nodes shows each node's build as its lease names it: the
// version and the commit (shortened to 12 characters; in full in -o json),
// and "-" for a lease that names none (a node of an earlier build). On an
// in-memory bucket with a lease of each kind.
func TestKeepctlNodesShowsEachNodesBuild(t *testing.T) {
	ctx := context.Background()
	mem := bucket.NewMem()
	renewed := time.Now().UnixMilli()
	for key, body := range map[string]string{
		"cluster/nodes/new": `{"format":1,"node_id":"new","addr":"10.0.0.1:7601","ttl_ms":600000,"renewed_ms":` + itoa(renewed) + `,"seq":7,"instance":"i1","classes":null,` +
			`"version":"v0.5.0-3-gabcdef0","revision":"abcdef0123456789abcdef0123456789abcdef01"}`,
		"cluster/nodes/old": `{"node_id":"old","addr":"10.0.0.2:7601","ttl_ms":600000,"renewed_ms":` + itoa(renewed) + `,"seq":3,"instance":"i2","classes":["oneshot"]}`,
	} {
		if _, err := mem.Put(ctx, key, []byte(body), bucket.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	open := func(context.Context, string) (bucket.Bucket, error) { return mem, nil }
	keepctl := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if status := run(ctx, append([]string{"-bucket", "wasmkeep"}, args...), &out, &errOut, open); status != 0 {
			t.Fatalf("keepctl %v: exit %d\nstdout:\n%s\nstderr:\n%s", args, status, out.String(), errOut.String())
		}
		return out.String()
	}

	out := keepctl("nodes")
	t.Logf("keepctl nodes:\n%s", out)
	lines := strings.Split(out, "\n")
	if len(lines) < 3 || !regexp.MustCompile(`^NODE +ADDRESS +VERSION +COMMIT +STATE +RENEWED +TTL +CLASSES$`).MatchString(lines[0]) {
		t.Fatalf("nodes: the header is not NODE ADDRESS VERSION COMMIT STATE ...:\n%s", out)
	}
	row := func(node string) []string {
		for _, l := range lines {
			if f := strings.Fields(l); len(f) > 0 && f[0] == node {
				return f
			}
		}
		t.Fatalf("nodes: no row for %s:\n%s", node, out)
		return nil
	}
	if f := row("new"); f[2] != "v0.5.0-3-gabcdef0" || f[3] != "abcdef012345" || f[4] != "live" {
		t.Errorf("nodes: the row of a lease naming its build is %q; want its version, its commit's first 12 characters and live", f)
	}
	if f := row("old"); f[2] != "-" || f[3] != "-" || f[4] != "live" {
		t.Errorf("nodes: the row of a lease naming no build is %q; want - for its version and commit", f)
	}

	var leases []nodeLease
	if err := json.Unmarshal([]byte(keepctl("nodes", "-o", "json")), &leases); err != nil || len(leases) != 2 {
		t.Fatalf("nodes -o json: %v, %d leases", err, len(leases))
	}
	for _, l := range leases {
		if l.NodeID == "new" && (l.Version != "v0.5.0-3-gabcdef0" || l.Revision != "abcdef0123456789abcdef0123456789abcdef01") ||
			l.NodeID == "old" && (l.Version != "" || l.Revision != "") {
			t.Errorf("nodes -o json: %+v", l)
		}
	}
	// The JSON names both fields, empty where the lease names no build.
	if out := keepctl("nodes", "-o", "json"); strings.Count(out, `"version"`) != 2 || strings.Count(out, `"revision"`) != 2 {
		t.Errorf("nodes -o json does not name version and revision for every lease:\n%s", out)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
