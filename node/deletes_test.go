package node_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/node"
)

// An event that moves the alarm under a new hold replaces an index entry
// and a snapshot (the last hold's; a hold's own uploads overwrite its one
// key); the DELETEs of both go out in one multi-object request: the node
// and its alarm plugin share the batches, so a window costs one request,
// not one per kind. Counted exactly, on memory and on versitygw.
func TestReplacedEntryAndSnapshotShareOneDeleteRequest(t *testing.T) {
	t.Parallel()
	classes := counter(t)
	ixBuckets(t, func(t *testing.T, b bucket.Bucket) {
		ctx := context.Background()
		c := bucket.NewCounting(b)
		start := func(id string) *node.Node {
			n, err := node.New(ctx, node.Config{
				DataDir: t.TempDir(), Classes: classes,
				Logger: hclog.New(&hclog.LoggerOptions{Name: id, Level: hclog.Warn, Output: testWriter{t}}),
				Cluster: &node.ClusterConfig{
					Bucket: c, NodeID: id, Addr: id + ".invalid:1",
					IdleTimeout: time.Hour, SweepPeriod: time.Hour,
					DeleteWindow: time.Hour, // only FlushDeletes sends
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			n.Start(ctx)
			return n
		}
		id := abi.ActorID{Tenant: "t", Class: "counter", Name: "d1"}
		exec := func(n *node.Node, req string) {
			t.Helper()
			if _, err := n.Exec(ctx, id, []byte(req), node.ExecDurable); err != nil {
				t.Fatalf("%q on actor %s: %v", req, id, err)
			}
		}
		first := start("del1")
		exec(first, "start 3600000")
		if err := first.Close(ctx); err != nil {
			t.Fatal(err)
		}
		n := start("del2")
		defer n.Close(ctx)
		before, _ := c.Unwrap().List(ctx, "cluster/", "", bucket.MaxPage)
		c.Reset()

		exec(n, "start 7200000") // taken anew: a new entry and the new hold's snapshot replace the old ones
		if got := c.Counts(); got.DeleteBatch != 0 || got.Delete != 0 {
			t.Fatalf("the replaced keys were deleted before the window ended: %+v", got)
		}
		n.FlushDeletes(ctx)
		got := c.Counts()
		if got.DeleteBatch != 1 || got.BatchKeys != 2 || got.Delete != 0 {
			t.Fatalf("requests %+v, want one multi-object request of 2 keys and no single DELETE", got)
		}
		after, _ := c.Unwrap().List(ctx, "cluster/", "", bucket.MaxPage)
		gone := map[string]bool{}
		for _, k := range before {
			gone[k] = true
		}
		for _, k := range after {
			delete(gone, k)
		}
		var kinds []string
		for k := range gone {
			switch {
			case strings.HasPrefix(k, "cluster/state/"):
				kinds = append(kinds, "snapshot")
			case strings.HasPrefix(k, "cluster/alarms/"):
				kinds = append(kinds, "entry")
			default:
				kinds = append(kinds, k)
			}
		}
		if len(kinds) != 2 || kinds[0] == kinds[1] {
			t.Fatalf("removed %q (%v), want the replaced snapshot and the replaced entry", kinds, gone)
		}
	})
}
