package node_test

import (
	"context"
	"slices"
	"testing"
	"time"
)

// Tenant discovery end to end: two keepnode processes started with no
// tenant configured; actors of tenant "t", which only the first node ever
// saw (every request went to it), set alarms there; the first node is
// killed with SIGKILL. The survivor, which never heard of "t", finds the
// tenant in the index by its delimited LIST and fires every alarm within
// lease + grace + two sweeps of its due time; none is lost, and the index
// is empty afterwards.
//
// Timings: lease 2 s, margin 400 ms, grace 1 s, sweep 2 s, a bound of 7 s.
// A sweep reads an entry once it is lease + grace (3 s) overdue, so an
// alarm fires 3 s to 5 s late plus its takeover (0.1 s to 0.8 s on a busy
// two-core machine): 2 s to spare. One survivor drains about 85 alarms a
// second; they come due at 10 a second.
func TestASurvivorFindsTheTenantsItNeverSaw(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rec := &swFirings{}
	timings := swTimings{ttl: 2 * time.Second, margin: 400 * time.Millisecond, grace: time.Second, sweep: 2 * time.Second}
	cfg, srv := swProcCluster(t, ctx, rec, timings)
	i := slices.Index(cfg.Flags, "-tenants")
	if i < 0 {
		t.Fatal("the cluster's flags name no tenants to leave out")
	}
	cfg.Flags = slices.Delete(slices.Clone(cfg.Flags), i, i+2)
	nodes := startProcNodes(t, ctx, cfg, 2)
	victim := nodes[0]

	const actors = 100
	const spread = 10 * time.Second
	due, base := swArmAndKill(t, ctx, victim, actors, spread, timings.ttl)

	out := swCollect(rec, victim.Name, due, base.Add(spread+timings.bound()+20*time.Second))
	t.Logf("%v", out)
	out.check(t, timings.bound(), "lease + grace + two sweeps")
	if out.perNode[nodes[1].Name] != actors {
		t.Errorf("%d alarms fired on the survivor %s, want all %d", out.perNode[nodes[1].Name], nodes[1].Name, actors)
	}
	if left := swIndexSettled(t, srv.Bucket, 0); len(left) > 0 {
		t.Errorf("%d index entries left after every alarm fired, such as %v", len(left), left[:min(3, len(left))])
	}
}
