package node_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/wasmkeep/alarms/alarmindex"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/node"
)

// Two clusters in one bucket under different prefixes, each one node with
// the same name, no tenant configured: every object each writes, its alarm
// index included, lives under its prefix, and neither sees the other's
// entries. The same actor in both fires once in each cluster, on that
// cluster's node; an overdue entry planted in one cluster's index is met
// and delivered by that cluster's sweeps only.
func TestClustersUnderTwoPrefixesDoNotSeeEachOther(t *testing.T) {
	ixBuckets(t, func(t *testing.T, b bucket.Bucket) {
		ctx := context.Background()
		start := func(prefix string, log *ixDeliveries) *node.Node {
			n, err := node.New(ctx, node.Config{
				DataDir: t.TempDir(), Classes: ixClasses(t, oneshotClass), OnDelivery: log.add,
				Logger: hclog.New(&hclog.LoggerOptions{Name: prefix, Level: hclog.Warn, Output: testWriter{t}}),
				Cluster: &node.ClusterConfig{
					Bucket: b, Prefix: prefix, NodeID: "n1", Addr: "n1.invalid:1",
					LeaseTTL: 3 * time.Second, LeaseMargin: time.Second, LeaseGrace: time.Second,
					SweepPeriod: 100 * time.Millisecond, IdleTimeout: time.Hour,
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { n.Close(ctx) })
			return n
		}
		logA, logB := &ixDeliveries{}, &ixDeliveries{}
		a, bb := start("one/", logA), start("two/", logB)

		// Long overdue, of an actor nobody ever ran: a sweep of cluster
		// one delivers it (and keeps it: the bucket never had the actor).
		ghost := ixOneshot("ghost")
		planted := "one/" + alarmindex.Key{Actor: ghost, DueMs: time.Now().Add(-time.Hour).UnixMilli(),
			Tag: alarmindex.Tag{Generation: 1, Nonce: "0a"}}.String()
		if _, err := b.Put(ctx, planted, nil, bucket.Cond{IfNoneMatch: true}); err != nil {
			t.Fatal(err)
		}
		id := ixOneshot("x")
		due := time.Now().Add(time.Second).UnixMilli()
		for _, n := range []*node.Node{a, bb} {
			if _, err := n.Exec(ctx, id, setBody(due), node.ExecDurable); err != nil {
				t.Fatal(err)
			}
		}
		a.Start(ctx)
		bb.Start(ctx)
		fired := func(ev node.DeliveryEvent) bool { return ev.Event.Ran && ev.Event.Err == nil }
		logA.wait(t, id, "the alarm fired in cluster one", fired)
		logB.wait(t, id, "the alarm fired in cluster two", fired)
		logA.wait(t, ghost, "cluster one's sweep delivered the planted entry", func(node.DeliveryEvent) bool { return true })
		for _, n := range []*node.Node{a, bb} { // more sweeps, to be sure
			n.Plugin().Sweep(ctx)
		}

		if got := logB.of(ghost); len(got) != 0 {
			t.Errorf("cluster two delivered the entry of cluster one's index: %+v", got)
		}
		if st := bb.Plugin().SweepStats(); st.Entries != 0 {
			t.Errorf("cluster two's sweeps met %d entries; its index never had an overdue one", st.Entries)
		}
		if st := a.Plugin().SweepStats(); st.Entries == 0 {
			t.Error("cluster one's sweeps never met the entry planted in its index: the test shows nothing")
		}
		for name, log := range map[string]*ixDeliveries{"one": logA, "two": logB} {
			n := 0
			for _, ev := range log.of(id) {
				if fired(ev) {
					n++
				}
			}
			if n != 1 {
				t.Errorf("cluster %s fired the alarm of %s %d times, want once", name, id, n)
			}
		}
		keys, err := b.List(ctx, "", "", 100_000)
		if err != nil {
			t.Fatal(err)
		}
		var index int
		for _, k := range keys {
			if !strings.HasPrefix(k, "one/") && !strings.HasPrefix(k, "two/") {
				t.Errorf("object %q is under neither cluster's prefix", k)
			}
			if strings.Contains(k, "/"+alarmindex.Root) {
				index++
			}
		}
		t.Logf("%d objects in the bucket, %d of them index entries", len(keys), index)
	})
}
