package engine_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/internal/testguest"
)

// BenchmarkDurableCommits measures events per second, and their latency,
// with concurrently busy actors, each running request events that set its
// alarm one after the other: with commits acknowledged once written (off,
// the default) and durable (WithDurableCommits: a sync of the WAL per
// commit). The databases are on the test's temporary directory: run it on
// a real disk, not a tmpfs, for the figures to mean anything.
//
//	go test ./engine -run '^$' -bench DurableCommits -benchtime 2000x
func BenchmarkDurableCommits(b *testing.B) {
	modes := []struct {
		name string
		opts []engine.Option
	}{
		{"off", nil},
		{"durable", []engine.Option{engine.WithDurableCommits(true)}},
		{"journal", nil}, // WithJournal(the run's directory)
	}
	for _, actors := range []int{1, 8, 64, 1000} {
		for _, m := range modes {
			b.Run(fmt.Sprintf("actors=%d/%s", actors, m.name), func(b *testing.B) {
				benchDurable(b, actors, m.name == "journal", m.opts)
			})
		}
	}
}

func benchDurable(b *testing.B, actors int, journal bool, opts []engine.Option) {
	ctx := context.Background()
	dir := b.TempDir()
	if journal {
		opts = append(opts, engine.WithJournal(dir))
	}
	eng, err := engine.NewEngine(ctx, append(opts, engine.WithMaxOpenDatabases(actors+8), engine.WithMaxInstances(actors+8))...)
	if err != nil {
		b.Fatal(err)
	}
	defer eng.Close(ctx)
	cl, err := eng.Compile(ctx, "bench", testguest.Fixture(b, "bench_alarm"))
	if err != nil {
		b.Fatal(err)
	}
	as := make([]*engine.Actor, actors)
	for i := range as {
		as[i] = openBench(b, eng, cl, dir, fmt.Sprintf("a%04d", i))
		if _, err := as[i].Request(ctx, timeReq(1000)); err != nil {
			b.Fatal(err)
		}
	}
	lat := make([][]time.Duration, actors)
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for i := range as {
		n := b.N / actors
		if i < b.N%actors {
			n++
		}
		wg.Add(1)
		go func(i, n int) {
			defer wg.Done()
			for j := 0; j < n; j++ {
				t := time.Now()
				if _, err := as[i].Request(ctx, timeReq(int64(2000+j))); err != nil {
					b.Error(err)
					return
				}
				lat[i] = append(lat[i], time.Since(t))
			}
		}(i, n)
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	all := slices.Concat(lat...)
	slices.Sort(all)
	if len(all) == 0 {
		return
	}
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
	if st := eng.Journal(); st.Syncs > 0 {
		b.ReportMetric(float64(st.Waits)/float64(st.Syncs), "commits/sync")
		b.ReportMetric(float64(st.Bytes)/float64(st.Waits), "bytes/commit")
		b.ReportMetric(float64(st.Retired), "retired")
	}
}
