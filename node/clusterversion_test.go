package node_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/cluster"
	"github.com/wasmkeep/alarms/format"
	"github.com/wasmkeep/alarms/internal/metricstest"
	"github.com/wasmkeep/alarms/node"
)

// A node reads the finalized cluster version as it starts (in-memory
// bucket): finalized above what its build supports, it refuses to start,
// naming both versions and what to run, before it writes its lease; at
// its build's version, or never finalized (0), it starts, says which
// (FinalizedClusterVersion, ClusterAtLeast, wasmkeep_cluster_version) and
// its lease names the version its build supports. A node running alone
// is at its own build's version.
func TestANodeRefusesToStartOnAClusterFinalizedAboveItsBuild(t *testing.T) {
	ctx := context.Background()
	start := func(b bucket.Bucket, reg prometheus.Registerer) (*node.Node, error) {
		return node.New(ctx, node.Config{
			DataDir: t.TempDir(), Registerer: reg,
			Logger:  hclog.New(&hclog.LoggerOptions{Name: "a", Level: hclog.Warn, Output: testWriter{t}}),
			Cluster: &node.ClusterConfig{Bucket: b, NodeID: "a", Addr: "a.invalid:1", IdleTimeout: time.Hour, SweepPeriod: time.Hour},
		})
	}
	finalize := func(b bucket.Bucket, v int) {
		t.Helper()
		_, etag, err := cluster.ReadFinalized(ctx, b, "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cluster.WriteFinalized(ctx, b, "", cluster.Finalized{ClusterVersion: v, By: "test"}, etag); err != nil {
			t.Fatal(err)
		}
	}

	b := bucket.NewMem()
	later := format.ClusterVersion + 1
	finalize(b, later)
	n, err := start(b, nil)
	if err == nil {
		n.Close(ctx)
		t.Fatalf("a node of cluster version %d started on a cluster finalized at %d", format.ClusterVersion, later)
	}
	v, m := strconv.Itoa(later), strconv.Itoa(format.ClusterVersion)
	if want := "the cluster was finalized at cluster version " + v + " (cluster/cluster/version); this build supports up to " + m + ": run a build of cluster version " + v + " or later"; !strings.Contains(err.Error(), want) {
		t.Fatalf("the refusal: %v; want it to say %q", err, want)
	}
	if _, _, err := b.Get(ctx, "cluster/nodes/a"); !errors.Is(err, bucket.ErrNotFound) {
		t.Fatalf("the refused node's lease: %v; want none written", err)
	}

	for _, fin := range []int{0, format.ClusterVersion} {
		b := bucket.NewMem()
		if fin > 0 {
			finalize(b, fin)
		}
		reg := prometheus.NewRegistry()
		n, err := start(b, reg)
		if err != nil {
			t.Fatalf("finalized at %d: %v", fin, err)
		}
		if got := n.FinalizedClusterVersion(); got != fin || !n.ClusterAtLeast(fin) || n.ClusterAtLeast(fin+1) {
			t.Errorf("finalized at %d: the node read %d, ClusterAtLeast(%d) %v, ClusterAtLeast(%d) %v", fin, got, fin, n.ClusterAtLeast(fin), fin+1, n.ClusterAtLeast(fin+1))
		}
		m := metricstest.Gather(reg)
		if got, sup := m.Value("wasmkeep_cluster_version", "state", "finalized"), m.Value("wasmkeep_cluster_version", "state", "supported"); got != float64(fin) || sup != float64(format.ClusterVersion) {
			t.Errorf("finalized at %d: wasmkeep_cluster_version finalized %v, supported %v", fin, got, sup)
		}
		if info, ok, err := cluster.ReadLease(ctx, b, "", "a"); err != nil || !ok || info.ClusterVersion != format.ClusterVersion {
			t.Errorf("finalized at %d: the node's lease %+v, %v, %v; want cluster version %d", fin, info, ok, err, format.ClusterVersion)
		}
		n.Close(ctx)
	}

	alone, err := node.New(ctx, node.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer alone.Close(ctx)
	if got := alone.FinalizedClusterVersion(); got != format.ClusterVersion || !alone.ClusterAtLeast(format.ClusterVersion) {
		t.Errorf("a node running alone: finalized %d; want its build's %d", got, format.ClusterVersion)
	}
}
