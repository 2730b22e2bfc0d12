package node_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/internal/clusterproc"
)

// swDefaults are the design's timings: lease 10 s (margin 1 s), grace 2 s,
// alarm_sweep 10 s.
var swDefaults = swTimings{ttl: 10 * time.Second, margin: time.Second, grace: 2 * time.Second, sweep: 10 * time.Second}

// BenchmarkFailover measures how orphaned alarms are recovered after a
// SIGKILL: three keepnode processes on versitygw, node0 holds idle oneshot
// actors whose alarms come due after it is killed, the two survivors'
// sweeps deliver them. Each iteration is a whole run on a fresh bucket.
//
//   - lateness: 100 alarms due over one sweep period, starting a lease
//     period after the kill. Metrics: late-p50-s, late-p99-s, late-max-s
//     (fired minus due; the design expects about lease + grace + up to one
//     sweep: 12 s to 22 s with the defaults, about 25 s).
//   - drain: 2,000 alarms all due at one instant, a lease period after the
//     kill (1,000 per survivor, four sweeps' worth with the defaults'
//     cap of 256). Metrics: drain-alarms/s/node, the alarms each survivor
//     fired divided by the time from when they became readable (due + lease
//   - grace) to its last firing, averaged over the survivors (the design
//     expects about 25 with the defaults: 256 per 10 s sweep); and the
//     lateness percentiles.
//
// Each at the design's defaults (lease 10 s, margin 1 s, grace 2 s, sweep
// 10 s) and scaled down by five (2 s, 400 ms, 1 s, 1 s: the process tests'
// timings) and by ten (1 s, 200 ms, 500 ms, 500 ms). Scaled down, the
// machine rather than the cap of 256 per sweep sets the drain rate. lost counts alarms that never
// fired (an error if not 0); dups counts duplicate firings. A run at the
// defaults takes one to two minutes:
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
			benchFailover(b, tc.timings, 2000, 0)
		})
	}
}

func benchFailover(b *testing.B, timings swTimings, actors int, spread time.Duration) {
	var lateness []time.Duration
	var rates []float64
	lost, dups := 0, 0
	for range b.N {
		out, rate := failoverRun(b, timings, actors, spread)
		lateness = append(lateness, out.lateness...)
		rates = append(rates, rate)
		lost += len(out.lost)
		dups += out.dups
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
	}
	b.ReportMetric(float64(lost), "lost")
	b.ReportMetric(float64(dups), "dups")
	if lost > 0 {
		b.Errorf("%d alarms lost", lost)
	}
}

// failoverRun runs one failover and returns its outcome and the drain rate
// per survivor.
func failoverRun(b *testing.B, timings swTimings, actors int, spread time.Duration) (swOutcome, float64) {
	b.StopTimer()
	ctx := context.Background()
	rec := &swFirings{}
	cfg, _ := swProcCluster(b, ctx, rec, timings)
	nodes, err := clusterproc.StartNodes(ctx, cfg, 3)
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
	b.StartTimer()
	out := swCollect(rec, victim.Name, due, base.Add(spread+timings.bound()+time.Duration(actors)*time.Second/5))
	b.StopTimer()
	b.Logf("%+v: %v", timings, out)

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
	return out, rate
}
