package node_test

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/abi"

	"github.com/wasmkeep/alarms/internal/clusterproc"
)

// swDefaults are the design's timings: lease 10 s (margin 1 s), grace 2 s,
// alarm_sweep 10 s.
var swDefaults = swTimings{ttl: 10 * time.Second, margin: time.Second, grace: 2 * time.Second, sweep: 10 * time.Second}

// BenchmarkFailover measures how orphaned alarms are recovered after a
// SIGKILL: three keepnode processes on versitygw (-failover.survivors
// sets how many outlive node0), node0 holds idle oneshot
// actors whose alarms come due after it is killed, the survivors'
// sweeps deliver them. Each iteration is a whole run on a fresh bucket.
//
//   - lateness: 100 alarms due over one sweep period, starting a lease
//     period after the kill. Metrics: late-p50-s, late-p99-s, late-max-s
//     (fired minus due; the design expects about lease + grace + up to one
//     sweep: 12 s to 22 s with the defaults, about 25 s).
//   - drain: -failover.drain alarms (2,000 by default) all due at one
//     instant, a lease period after the kill (1,000 per survivor, four
//     caps' worth of 256). Metrics: drain-alarms/s/node, the alarms each
//     survivor fired divided by the time from when they became readable
//     (due + lease + grace) to its last firing, averaged over the
//     survivors; the lateness percentiles; and, from the survivors'
//     metrics over the drain, s3-requests/alarm and sweep-lists/alarm
//     (their background traffic included) and relists, the walks of a
//     capped tenant begun before the sweep period was up
//     (docs/design.md#drain: the cap no longer sets the rate). Then each
//     survivor fires 256 actors of its own, due at one instant:
//     ceiling-firings/s/node, replicated firings of open actors on the
//     same nodes in the same run, and drain/ceiling.
//
// Each at the design's defaults (lease 10 s, margin 1 s, grace 2 s, sweep
// 10 s) and scaled down by five (2 s, 400 ms, 1 s, 1 s: the process tests'
// timings) and by ten (1 s, 200 ms, 500 ms, 500 ms). lost counts alarms
// that never fired (an error if not 0); dups counts duplicate firings. A
// run at the defaults takes one to two minutes, five with 10,000 alarms:
//
//	go test -run '^$' -bench BenchmarkFailover -benchtime 1x -timeout 30m ./node/
func BenchmarkFailover(b *testing.B) {
	for _, tc := range []struct {
		name    string
		timings swTimings
	}{
		{"scaled-10x", swTimings{ttl: time.Second, margin: 200 * time.Millisecond, grace: 500 * time.Millisecond, sweep: 500 * time.Millisecond}},
		{"scaled-5x", swScaled},
		{"defaults", swDefaults},
	} {
		b.Run(tc.name+"/lateness", func(b *testing.B) {
			benchFailover(b, tc.timings, 100, tc.timings.sweep)
		})
		b.Run(tc.name+"/drain", func(b *testing.B) {
			benchFailover(b, tc.timings, *failoverDrain, 0)
		})
	}
}

var failoverDrain = flag.Int("failover.drain", 2000, "BenchmarkFailover's drain: how many alarms are due at once on the killed node")

var failoverSurvivors = flag.Int("failover.survivors", 2, "BenchmarkFailover: how many nodes survive the one killed")

func benchFailover(b *testing.B, timings swTimings, actors int, spread time.Duration) {
	var lateness []time.Duration
	var rates []float64
	lost, dups := 0, 0
	var cost drainCost
	for range b.N {
		out, rate, c := failoverRun(b, timings, actors, spread)
		lateness = append(lateness, out.lateness...)
		rates = append(rates, rate)
		lost += len(out.lost)
		dups += out.dups
		cost.add(c)
	}
	slices.Sort(lateness)
	b.ReportMetric(pct(lateness, 50).Seconds(), "late-p50-s")
	b.ReportMetric(pct(lateness, 99).Seconds(), "late-p99-s")
	b.ReportMetric(pct(lateness, 100).Seconds(), "late-max-s")
	if spread == 0 {
		sum := 0.0
		for _, r := range rates {
			sum += r
		}
		b.ReportMetric(sum/float64(len(rates)), "drain-alarms/s/node")
		if cost.ceiling > 0 {
			b.ReportMetric(cost.ceiling/float64(b.N), "ceiling-firings/s/node")
			b.ReportMetric(sum/cost.ceiling, "drain/ceiling")
		}
		b.ReportMetric(cost.requests/max(cost.fired, 1), "s3-requests/alarm")
		b.ReportMetric(cost.lists/max(cost.fired, 1), "sweep-lists/alarm")
		b.ReportMetric(cost.relists/float64(b.N), "relists")
		b.ReportMetric(cost.stale/max(cost.fired, 1), "stale-deliveries/alarm")
	}
	b.ReportMetric(float64(lost), "lost")
	b.ReportMetric(float64(dups), "dups")
	if lost > 0 {
		b.Errorf("%d alarms lost", lost)
	}
}

// drainCost is what the survivors spent on a failover, from their
// metrics: S3 requests of every kind, the sweeps' LISTs of the index, and
// the sweeps they began early (a capped plan delivered), for the alarms
// fired.
//
// ceiling is the survivors' rate of replicated firings in the same run,
// after the drain: ceilingActors actors of their own each, armed through
// them and due at one instant, each firing an actor open on its node and
// its upload (firings per second per survivor, from the due time to its
// last firing).
type drainCost struct{ requests, lists, relists, stale, fired, ceiling float64 }

// ceilingActors is how many actors of its own each survivor fires for
// drainCost.ceiling: within the default residency budget.
const ceilingActors = 256

func (c *drainCost) add(o drainCost) {
	c.ceiling += o.ceiling
	c.requests += o.requests
	c.lists += o.lists
	c.relists += o.relists
	c.stale += o.stale
	c.fired += o.fired
}

// survivorCounts sums the survivors' counters that drainCost reads.
func survivorCounts(tb testing.TB, nodes []*clusterproc.Node) drainCost {
	var c drainCost
	for _, n := range nodes {
		m := scrapeMetrics(tb, n.MetricsURL)
		c.requests += m.Value("wasmkeep_s3_requests_total")
		c.lists += m.Value("wasmkeep_sweep_lists_total")
		c.relists += m.Value("wasmkeep_sweep_relists_total")
		c.stale += m.Value("wasmkeep_alarm_firings_total", "outcome", "stale")
	}
	return c
}

// failoverRun runs one failover and returns its outcome, the drain rate
// per survivor, and what the survivors spent.
func failoverRun(b *testing.B, timings swTimings, actors int, spread time.Duration) (swOutcome, float64, drainCost) {
	b.StopTimer()
	ctx := context.Background()
	rec := &swFirings{}
	cfg, _ := swProcCluster(b, ctx, rec, timings)
	cfg.Flags = append(cfg.Flags, "-metrics-addr", "127.0.0.1:0")
	if *failoverSurvivors < 1 {
		b.Fatalf("-failover.survivors %d: at least one node must survive", *failoverSurvivors)
	}
	nodes, err := clusterproc.StartNodes(ctx, cfg, 1+*failoverSurvivors)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		for _, n := range nodes {
			_ = n.Kill()
		}
	}()
	victim := nodes[0]
	// The first alarm is due a lease period after the kill at the earliest.
	due, base := swArmAndKill(b, ctx, victim, actors, spread, timings.ttl)
	before := survivorCounts(b, nodes[1:])
	b.StartTimer()
	out := swCollect(rec, victim.Name, due, base.Add(spread+timings.bound()+time.Duration(actors)*time.Second/5))
	b.StopTimer()
	after := survivorCounts(b, nodes[1:])
	cost := drainCost{requests: after.requests - before.requests, lists: after.lists - before.lists,
		relists: after.relists - before.relists, stale: after.stale - before.stale, fired: float64(len(out.first))}
	if spread == 0 {
		cost.ceiling = ceilingRate(b, ctx, rec, nodes[1:])
	}
	b.Logf("%+v: %v; survivors made %.0f S3 requests (%.0f sweep LISTs), %.0f early sweeps, %.0f deliveries of a time already delivered; then fired their own actors at %.1f/s each", timings, out, cost.requests, cost.lists, cost.relists, cost.stale, cost.ceiling)

	readable := base.Add(timings.ttl + timings.grace).UnixMilli()
	last := map[string]int64{}
	for _, f := range out.first {
		last[f.node] = max(last[f.node], f.fired)
	}
	rate := 0.0
	for n, c := range out.perNode {
		if span := last[n] - readable; span > 0 {
			rate += float64(c) / (float64(span) / 1000)
		}
	}
	if len(out.perNode) > 0 {
		rate /= float64(len(nodes) - 1)
	}
	return out, rate, cost
}

// ceilingRate arms ceilingActors actors of a tenant of their own through
// each survivor, all due at one instant, and returns the survivors' mean
// rate of firing them (drainCost.ceiling).
func ceilingRate(b *testing.B, ctx context.Context, rec *swFirings, survivors []*clusterproc.Node) float64 {
	base := swArmBy(b, ctx, survivors[0].URL, ceilingActors*len(survivors))
	due := map[abi.ActorID]int64{}
	for _, s := range survivors {
		mine := map[abi.ActorID]int64{}
		for i := range ceilingActors {
			mine[abi.ActorID{Tenant: "ceiling", Class: swClass, Name: fmt.Sprintf("%s/%04d", s.Name, i)}] = base.UnixMilli()
		}
		swArm(b, ctx, s.URL, mine)
		maps.Copy(due, mine)
	}
	out := swCollect(rec, "", due, base.Add(2*time.Minute))
	if len(out.lost) > 0 {
		b.Errorf("%d of the survivors' own alarms never fired", len(out.lost))
	}
	last := map[string]int64{}
	for _, f := range out.first {
		last[f.node] = max(last[f.node], f.fired)
	}
	rate := 0.0
	for n, c := range out.perNode {
		if span := last[n] - base.UnixMilli(); span > 0 {
			rate += float64(c) / (float64(span) / 1000)
		}
	}
	return rate / float64(len(survivors))
}
