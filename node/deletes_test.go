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

// An event that moves the alarm replaces an index entry and a snapshot; the
// DELETEs of both go out in one multi-object request: the node and its
// alarm plugin share the batches, so a window costs one request, not one
// per kind. Counted exactly, on memory and on versitygw.
func TestReplacedEntryAndSnapshotShareOneDeleteRequest(t *testing.T) {
	t.Parallel()
	classes := counter(t)
	ixBuckets(t, func(t *testing.T, b bucket.Bucket) {
		ctx := context.Background()
		c := bucket.NewCounting(b)
		n, err := node.New(ctx, node.Config{
			DataDir: t.TempDir(), Classes: classes,
			Logger: hclog.New(&hclog.LoggerOptions{Name: "del", Level: hclog.Warn, Output: testWriter{t}}),
			Cluster: &node.ClusterConfig{
				Bucket: c, NodeID: "del", Addr: "del.invalid:1",
				IdleTimeout: time.Hour, SweepPeriod: time.Hour,
				DeleteWindow: time.Hour, // only FlushDeletes sends
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		defer n.Close(ctx)
		n.Start(ctx)
		id := abi.ActorID{Tenant: "t", Class: "counter", Name: "d1"}
		exec := func(req string) {
			t.Helper()
			if _, err := n.Exec(ctx, id, []byte(req), node.ExecDurable); err != nil {
				t.Fatalf("%q on actor %s: %v", req, id, err)
			}
		}
		exec("start 3600000")
		n.FlushDeletes(ctx)
		before, _ := c.Unwrap().List(ctx, "cluster/", "", bucket.MaxPage)
		c.Reset()

		exec("start 7200000") // a new entry and a new snapshot replace the old ones
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
