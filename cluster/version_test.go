package cluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/cluster"
	"github.com/wasmkeep/alarms/format"
	"github.com/wasmkeep/alarms/internal/fakeclock"
)

// A node's lease names the cluster version its build supports
// (cluster_version, format.ClusterVersion) with the lease format still 1,
// and ReadLease gives it; a lease of a build from before cluster versions
// names none and reads as 0.
func TestALeaseNamesTheClusterVersionItsBuildSupports(t *testing.T) {
	onBoth(t, func(t *testing.T, b bucket.Bucket) {
		ctx := context.Background()
		a := startManual(t, b, fakeclock.New(t0), "a")
		defer a.Close(ctx)
		body, _, err := b.Get(ctx, "cluster/nodes/a")
		if err != nil {
			t.Fatal(err)
		}
		var rec map[string]any
		if err := json.Unmarshal(body, &rec); err != nil || rec["cluster_version"] != float64(format.ClusterVersion) || rec["format"] != float64(1) {
			t.Fatalf("the lease %s (%v); want cluster_version %d and format 1", body, err, format.ClusterVersion)
		}
		if info, ok, err := cluster.ReadLease(ctx, b, "", "a"); err != nil || !ok || info.ClusterVersion != format.ClusterVersion {
			t.Fatalf("ReadLease(a) = %+v, %v, %v; want cluster version %d", info, ok, err, format.ClusterVersion)
		}
		if _, err := b.Put(ctx, "cluster/nodes/old", []byte(`{"node_id":"old","addr":"old.example:7000","ttl_ms":10000,"renewed_ms":1,"seq":1,"instance":"i1","classes":null}`), bucket.Cond{}); err != nil {
			t.Fatal(err)
		}
		if info, ok, err := cluster.ReadLease(ctx, b, "", "old"); err != nil || !ok || info.ClusterVersion != 0 {
			t.Fatalf("ReadLease(old), a lease of an earlier build: %+v, %v, %v; want cluster version 0", info, ok, err)
		}
	})
}

// The finalized cluster version: none reads as 0; it is written only over
// the record read (If-Match its ETag, or If-None-Match when there was
// none), so of two writers that read the same record one loses; a record
// of a later format is refused, and one that is no record is an error.
func TestTheFinalizedClusterVersionIsWrittenOverWhatWasRead(t *testing.T) {
	onBoth(t, func(t *testing.T, b bucket.Bucket) {
		ctx := context.Background()
		f, etag, err := cluster.ReadFinalized(ctx, b, "")
		if err != nil || f.ClusterVersion != 0 || etag != "" {
			t.Fatalf("no record: %+v, %q, %v; want version 0", f, etag, err)
		}
		first, err := cluster.WriteFinalized(ctx, b, "", cluster.Finalized{ClusterVersion: 1, FinalizedMs: 5, By: "test"}, "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cluster.WriteFinalized(ctx, b, "", cluster.Finalized{ClusterVersion: 2}, ""); !errors.Is(err, bucket.ErrPrecondition) {
			t.Fatalf("a second write that read no record: %v; want a failed precondition", err)
		}
		f, etag, err = cluster.ReadFinalized(ctx, b, "cluster/")
		if err != nil || f != (cluster.Finalized{Format: 1, ClusterVersion: 1, FinalizedMs: 5, By: "test"}) || etag != first {
			t.Fatalf("the record: %+v, %q, %v", f, etag, err)
		}
		if body, _, _ := b.Get(ctx, "cluster/cluster/version"); string(body) != `{"format":1,"cluster_version":1,"finalized_ms":5,"by":"test"}` {
			t.Fatalf("the object: %s", body)
		}
		second, err := cluster.WriteFinalized(ctx, b, "", cluster.Finalized{ClusterVersion: 2}, etag)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cluster.WriteFinalized(ctx, b, "", cluster.Finalized{ClusterVersion: 3}, first); !errors.Is(err, bucket.ErrPrecondition) {
			t.Fatalf("a write over a record no longer there: %v; want a failed precondition", err)
		}
		if f, etag, err := cluster.ReadFinalized(ctx, b, ""); err != nil || f.ClusterVersion != 2 || etag != second {
			t.Fatalf("after the second write: %+v, %q, %v", f, etag, err)
		}

		for body, want := range map[string]string{
			`{"format":2,"cluster_version":"two"}`: "cluster_version format version 2",
			`not json`:                             "not a cluster version record",
			`{"format":1,"cluster_version":-1}`:    "not a cluster version record",
		} {
			if _, err := b.Put(ctx, "cluster/cluster/version", []byte(body), bucket.Cond{}); err != nil {
				t.Fatal(err)
			}
			_, _, err := cluster.ReadFinalized(ctx, b, "")
			if err == nil || !strings.Contains(err.Error(), want) || errors.Is(err, format.ErrNewer) != strings.Contains(want, "format version") {
				t.Errorf("the record %s: %v; want an error saying %q", body, err, want)
			}
		}
	})
}
