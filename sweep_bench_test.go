package alarms_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/wasmkeep/alarms"
	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/bucket/s3"
	"github.com/wasmkeep/alarms/internal/s3test"
	"github.com/wasmkeep/alarms/sweeper"
)

// BenchmarkSweep10kTenantsS3 is one sweep over 10,000 tenants, each with
// one entry not yet due, on versitygw behind the fault proxy adding 20 ms
// to every GET (a LIST is a GET): the delimited LIST that finds the
// tenants, then one LIST per tenant, 32 (the default) or 64 at a time.
// s/sweep is what to compare with the 10 s sweep period. Planting the
// entries takes a few seconds, once:
//
//	go test -run '^$' -bench Sweep10kTenantsS3 -benchtime 2x .
func BenchmarkSweep10kTenantsS3(b *testing.B) {
	const tenants = 10_000
	srv := s3test.Start(b)
	keys := make([]string, tenants)
	for i := range keys {
		keys[i] = swKey(abi.ActorID{Tenant: fmt.Sprintf("t%05d", i), Class: "c", Name: "a"}, swStart.Add(time.Hour).UnixMilli())
	}
	plantN(b, srv.Bucket, keys, 32)
	p := s3test.NewProxy(b, srv.Endpoint)
	p.SetDelay("GET", 20*time.Millisecond)
	for _, conc := range []int{sweeper.DefaultConcurrency, 64} {
		b.Run(fmt.Sprintf("concurrency=%d", conc), func(b *testing.B) {
			cb := bucket.NewCounting(srv.NewClient(b, s3.WithEndpoint(p.URL)))
			h := &sweepHost{now: swStart, self: "node-a", live: []string{"node-a"}}
			pl, err := alarms.Register(alarms.Config{Bucket: cb, Host: h, Timer: sweeper.NewTimer(swRetryMax), Margin: swMargin,
				RetryMax: swRetryMax, SweepConcurrency: conc})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			start := time.Now()
			for b.Loop() {
				pl.Sweep(ctx)
				if _, err := pl.LastSweep(); err != nil {
					b.Fatal(err)
				}
			}
			sweeps := float64(pl.SweepStats().Sweeps) / tenants
			b.ReportMetric(time.Since(start).Seconds()/sweeps, "s/sweep")
			b.ReportMetric(float64(cb.Counts().ListPages)/sweeps, "lists/sweep")
		})
	}
}
