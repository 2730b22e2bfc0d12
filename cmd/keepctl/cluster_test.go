package main

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/cluster"
	"github.com/wasmkeep/alarms/format"
)

// keepctl cluster finalize writes the finalized cluster version only when
// every live node's lease names it or later (in-memory bucket): refused,
// exit 1, naming each node behind and its version, while a live lease
// names none (a build from before cluster versions) or a lower one, or a
// lease cannot be read; a lapsed lease does not count; accepted once all
// name it, the record written (by keepctl, with when); already there,
// nothing written; a lower version than the cluster's is refused. keepctl
// cluster version shows the finalized version and each live node's.
func TestKeepctlClusterFinalizeWaitsForEveryLiveNode(t *testing.T) {
	ctx := context.Background()
	mem := bucket.NewMem()
	now := time.Now().UnixMilli()
	lease := func(id string, renewed int64, cv string) {
		t.Helper()
		body := `{"format":1,"node_id":"` + id + `","addr":"` + id + `.example:7601","ttl_ms":600000,"renewed_ms":` + itoa(renewed) + `,"seq":1,"instance":"i","classes":null,"version":"v0.5.0"` + cv + `}`
		if _, err := mem.Put(ctx, "cluster/nodes/"+id, []byte(body), bucket.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	open := func(context.Context, string) (bucket.Bucket, error) { return mem, nil }
	keepctl := func(want int, args ...string) (string, string) {
		t.Helper()
		var out, errOut bytes.Buffer
		if got := run(ctx, append([]string{"-bucket", "wasmkeep"}, args...), &out, &errOut, open); got != want {
			t.Fatalf("keepctl %v: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", args, got, want, out.String(), errOut.String())
		}
		return out.String(), errOut.String()
	}
	record := func() (cluster.Finalized, string) {
		t.Helper()
		f, etag, err := cluster.ReadFinalized(ctx, mem, "cluster/")
		if err != nil {
			t.Fatal(err)
		}
		return f, etag
	}

	lease("new", now, `,"cluster_version":1`)
	lease("old", now, "")                           // a build from before cluster versions
	lease("gone", now-time.Hour.Milliseconds(), "") // lapsed: not counted
	_, errOut := keepctl(1, "cluster", "finalize")
	if !strings.Contains(errOut, "node old (v0.5.0) names no cluster version") || strings.Contains(errOut, "node new") || strings.Contains(errOut, "gone") {
		t.Fatalf("finalize with a live node of a build from before cluster versions: stderr %q; want it to name that node alone", errOut)
	}
	if _, etag := record(); etag != "" {
		t.Fatal("a refused finalize wrote the cluster version")
	}
	_, errOut = keepctl(1, "cluster", "finalize", "-to", "2")
	if !strings.Contains(errOut, "node new (v0.5.0) names cluster version 1") || !strings.Contains(errOut, "node old") {
		t.Fatalf("finalize -to 2 with nodes at 1 and 0: stderr %q; want both named with their versions", errOut)
	}

	lease("old", now, `,"cluster_version":1`)
	out, _ := keepctl(0, "cluster", "finalize")
	if !strings.Contains(out, "finalized the cluster at cluster version 1 (was 0): 2 live nodes support it") {
		t.Fatalf("finalize once every live node names 1: %q", out)
	}
	f, etag := record()
	if f.ClusterVersion != format.ClusterVersion || f.By != "keepctl" || f.FinalizedMs < now || etag == "" {
		t.Fatalf("the record after finalize: %+v", f)
	}
	if out, _ := keepctl(0, "cluster", "finalize", "-to", "1"); !strings.Contains(out, "already finalized at cluster version 1") {
		t.Fatalf("finalize again: %q", out)
	}
	if _, again := record(); again != etag {
		t.Fatal("finalizing at the version already there wrote the record again")
	}

	// A lease that cannot be read: its node's version is unknown.
	if _, err := mem.Put(ctx, "cluster/nodes/later", []byte(`{"format":2,"node_id":"later"}`), bucket.Cond{}); err != nil {
		t.Fatal(err)
	}
	if _, errOut := keepctl(1, "cluster", "finalize", "-to", "2"); !strings.Contains(errOut, "cluster/nodes/later: unreadable") {
		t.Fatalf("finalize with an unreadable lease: stderr %q", errOut)
	}
	if err := mem.Delete(ctx, "cluster/nodes/later"); err != nil {
		t.Fatal(err)
	}
	lease("new", now, `,"cluster_version":2`)
	lease("old", now, `,"cluster_version":3`)
	if out, _ := keepctl(0, "cluster", "finalize", "-to", "2"); !strings.Contains(out, "at cluster version 2 (was 1)") {
		t.Fatalf("finalize -to 2 with nodes at 2 and 3: %q", out)
	}
	_, etag = record()
	if _, errOut := keepctl(1, "cluster", "finalize", "-to", "1"); !strings.Contains(errOut, "finalized at cluster version 2: it does not go back to 1") {
		t.Fatalf("finalize at a lower version: stderr %q", errOut)
	}
	if f, again := record(); again != etag || f.ClusterVersion != 2 {
		t.Fatalf("a refused lower finalize changed the record: %+v", f)
	}
	keepctl(2, "cluster", "finalize", "-to", "0")

	out, _ = keepctl(0, "cluster", "version")
	t.Logf("keepctl cluster version:\n%s", out)
	if !strings.Contains(out, "finalized: 2 (at ") || !strings.Contains(out, ", by keepctl)") || strings.Contains(out, "gone") {
		t.Fatalf("cluster version: %q; want the finalized version and the live nodes alone", out)
	}
	for _, row := range []string{`(?m)^new +2 +v0\.5\.0 `, `(?m)^old +3 +v0\.5\.0 `} {
		if !regexp.MustCompile(row).MatchString(out) {
			t.Errorf("cluster version: no row %s:\n%s", row, out)
		}
	}
	var v clusterVersions
	out, _ = keepctl(0, "cluster", "version", "-o", "json")
	if err := json.Unmarshal([]byte(out), &v); err != nil || v.Finalized != 2 || v.Supported != format.ClusterVersion || len(v.Nodes) != 2 {
		t.Fatalf("cluster version -o json: %+v, %v\n%s", v, err, out)
	}
}

// lateJoiner is a bucket on which a node of a build from before cluster
// versions writes its lease just before the finalized version lands: it
// read no finalized version, and started.
type lateJoiner struct {
	bucket.Bucket
}

func (b lateJoiner) Put(ctx context.Context, key string, body []byte, cond bucket.Cond) (string, error) {
	if key == "cluster/cluster/version" {
		late := `{"format":1,"node_id":"late","addr":"late.example:7601","ttl_ms":600000,"renewed_ms":` + itoa(time.Now().UnixMilli()) + `,"seq":1,"instance":"i","classes":null}`
		if _, err := b.Bucket.Put(ctx, "cluster/nodes/late", []byte(late), bucket.Cond{}); err != nil {
			return "", err
		}
	}
	return b.Bucket.Put(ctx, key, body, cond)
}

// A node that started between finalize's reading of the leases and its
// write read no finalized version and joined: finalize reads the leases
// again after the write, and exits 1 naming it.
func TestKeepctlClusterFinalizeNamesANodeThatJoinedMeanwhile(t *testing.T) {
	ctx := context.Background()
	mem := bucket.NewMem()
	body := `{"format":1,"node_id":"new","addr":"new.example:7601","ttl_ms":600000,"renewed_ms":` + itoa(time.Now().UnixMilli()) + `,"seq":1,"instance":"i","classes":null,"cluster_version":1}`
	if _, err := mem.Put(ctx, "cluster/nodes/new", []byte(body), bucket.Cond{}); err != nil {
		t.Fatal(err)
	}
	open := func(context.Context, string) (bucket.Bucket, error) { return lateJoiner{mem}, nil }
	var out, errOut bytes.Buffer
	if got := run(ctx, []string{"-bucket", "wasmkeep", "cluster", "finalize"}, &out, &errOut, open); got != 1 ||
		!strings.Contains(out.String(), "finalized the cluster at cluster version 1") || !strings.Contains(errOut.String(), "node late (-) names no cluster version") {
		t.Fatalf("finalize as a node joined: exit %d\nstdout:\n%s\nstderr:\n%s", got, out.String(), errOut.String())
	}
}
