//go:build linux

package node_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket/s3"
	"github.com/wasmkeep/alarms/internal/s3test"
	"github.com/wasmkeep/alarms/internal/testguest"
	"github.com/wasmkeep/alarms/node"
)

// BenchmarkMetricsCost measures what the metrics cost on the firing path:
// the same always-due .wat actors (bench_alarm) fire for a fixed time with
// no registerer (off) and with one for the node, its engine, its plugin
// and, in cluster mode, its S3 client (on), one after the other in one run.
// warm: 200 open actors on a node running alone; replicated: 8 actors on a
// node of a cluster on versitygw (each firing PUTs an index entry and a
// snapshot, and the replaced ones leave in batched deletes). Compare
// cpu-us/firing (the process's CPU time per firing, versitygw's not
// included) of off and on within a run; -count 3 repeats each.
//
//	go test ./node -run '^$' -bench MetricsCost -benchtime 1x -count 3
func BenchmarkMetricsCost(b *testing.B) {
	classes := map[string][]byte{"bench": testguest.Fixture(b, "bench_alarm")}
	srv := s3test.Start(b)
	for _, mode := range []string{"warm", "replicated"} {
		for _, on := range []bool{false, true} {
			name := mode + "/off"
			if on {
				name = mode + "/on"
			}
			b.Run(name, func(b *testing.B) {
				var reg prometheus.Registerer
				if on {
					reg = prometheus.NewRegistry()
				}
				cfg := node.Config{Registerer: reg,
					Logger: hclog.New(&hclog.LoggerOptions{Name: "bench", Level: hclog.Error, Output: testWriter{b}})}
				actors := 200
				if mode == "replicated" {
					actors = 8
					var opts []s3.Option
					if on {
						opts = append(opts, s3.WithRegisterer(reg))
					}
					cfg.Cluster = &node.ClusterConfig{
						Bucket: srv.NewClient(b, opts...), NodeID: "bench", Addr: "bench.invalid:1",
						IdleTimeout: time.Hour, SweepPeriod: time.Hour,
					}
				}
				firingsFor(b, cfg, classes, actors, 3*time.Second)
			})
		}
	}
}

// firingsFor starts a node with cfg, creates that many always-due
// bench_alarm actors, and counts their firings for d after a warm-up.
func firingsFor(b *testing.B, cfg node.Config, classes map[string][]byte, actors int, d time.Duration) {
	ctx := context.Background()
	var fired, failed atomic.Int64
	cfg.OnDelivery = func(ev node.DeliveryEvent) {
		switch {
		case ev.Err != nil || ev.Event.Err != nil:
			failed.Add(1)
		case ev.Event.Ran:
			fired.Add(1)
		}
	}
	n := newNode(b, b.TempDir(), classes, cfg)
	defer n.Close(ctx)
	ids := make([]abi.ActorID, actors)
	for i := range ids {
		ids[i] = abi.ActorID{Tenant: "t", Class: "bench", Name: fmt.Sprintf("m%05d", i)}
	}
	createActors(b, n, ids, func(int) []byte { return atReq(time.Now().Add(-time.Second).UnixMilli()) })
	b.ResetTimer()
	n.Start(ctx)
	time.Sleep(d / 3) // warm-up
	base, start, cpu := fired.Load(), time.Now(), cpuTime(b)
	time.Sleep(d)
	got := fired.Load() - base
	took, used := time.Since(start), cpuTime(b)-cpu
	b.StopTimer()
	if f := failed.Load(); f > 0 {
		b.Fatalf("%d deliveries failed", f)
	}
	b.ReportMetric(float64(got)/took.Seconds(), "firings/s")
	b.ReportMetric(float64(used.Microseconds())/float64(max(got, 1)), "cpu-us/firing")
	b.ReportMetric(0, "ns/op")
}
