package alarms_test

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/alarms"
	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/bucket/s3"
	"github.com/wasmkeep/alarms/internal/clusterproc"
	"github.com/wasmkeep/alarms/internal/s3test"
	"github.com/wasmkeep/alarms/internal/testguest"
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
				if err := pl.SweepStats().LastErr; err != nil {
					b.Fatal(err)
				}
			}
			sweeps := float64(pl.SweepStats().Sweeps) / tenants
			b.ReportMetric(time.Since(start).Seconds()/sweeps, "s/sweep")
			b.ReportMetric(float64(cb.Counts().ListPages)/sweeps, "lists/sweep")
		})
	}
}

var costWindow = flag.Duration("cost.window", sweeper.DefaultSafetyPeriod+time.Minute,
	"BenchmarkIdleClusterVersitygw: how long to scrape the idle cluster")

// BenchmarkIdleClusterVersitygw measures what an idle cluster of 3
// keepnode processes costs versitygw, through the nodes' own metrics
// (wasmkeep_s3_requests_total, scraped from each node's -metrics-addr at
// the start and the end of a window): 20 tenants, each with one alarm due
// tomorrow, planted before the nodes start; the design's defaults (lease
// 10 s, grace 2 s, sweep 10 s, 2 walkers, safety period 1 h). The
// window (-cost.window, 61 min by default) takes in one safety period. It
// reports requests per minute by operation, over the whole cluster:
//
//	go test -run '^$' -bench IdleClusterVersitygw -benchtime 1x .
func BenchmarkIdleClusterVersitygw(b *testing.B) {
	ctx := context.Background()
	srv := s3test.Start(b)
	dir := b.TempDir()
	bin, err := clusterproc.Build(ctx, dir)
	if err != nil {
		b.Fatal(err)
	}
	wasm := filepath.Join(dir, "oneshot.wasm")
	if err := os.WriteFile(wasm, testguest.Fixture(b, "oneshot_alarm"), 0o644); err != nil {
		b.Fatal(err)
	}
	cb := bucket.WithPrefix(srv.Bucket, "cluster/")
	for i := range 20 {
		id := abi.ActorID{Tenant: fmt.Sprintf("t%02d", i), Class: "oneshot", Name: "a"}
		if _, err := cb.Put(ctx, swKey(id, time.Now().Add(24*time.Hour).UnixMilli()), nil, bucket.Cond{}); err != nil {
			b.Fatal(err)
		}
	}
	cfg := clusterproc.Config{
		Binary:  bin,
		S3:      clusterproc.S3{Endpoint: srv.Endpoint, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, Bucket: srv.Name},
		Classes: map[string]string{"oneshot": wasm},
		Flags:   []string{"-metrics-addr", "127.0.0.1:0"},
		Dir:     dir,
	}
	for b.Loop() {
		nodes, err := clusterproc.StartNodes(ctx, cfg, 3)
		if err != nil {
			b.Fatal(err)
		}
		time.Sleep(30 * time.Second) // every node has seen the others and swept once
		before := scrapeRequests(b, nodes)
		time.Sleep(*costWindow)
		after := scrapeRequests(b, nodes)
		for _, n := range nodes {
			_ = n.Stop()
		}
		total := 0.0
		for op, v := range after {
			per := (v - before[op]) / costWindow.Minutes()
			b.ReportMetric(per, op+"/min")
			total += per
		}
		b.ReportMetric(total, "req/min")
	}
}

// scrapeRequests sums wasmkeep_s3_requests_total by operation over nodes.
func scrapeRequests(tb testing.TB, nodes []*clusterproc.Node) map[string]float64 {
	tb.Helper()
	out := map[string]float64{}
	for _, n := range nodes {
		resp, err := http.Get(n.MetricsURL)
		if err != nil {
			tb.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			tb.Fatal(err)
		}
		for _, line := range strings.Split(string(body), "\n") {
			rest, ok := strings.CutPrefix(line, "wasmkeep_s3_requests_total{")
			if !ok {
				continue
			}
			labels, value, _ := strings.Cut(rest, "} ")
			op := ""
			for _, l := range strings.Split(labels, ",") {
				if v, ok := strings.CutPrefix(l, `operation="`); ok {
					op = strings.TrimSuffix(v, `"`)
				}
			}
			f, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
			if err != nil {
				tb.Fatalf("%s: %q: %v", n.MetricsURL, line, err)
			}
			out[op] += f
		}
	}
	return out
}
