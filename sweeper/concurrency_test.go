package sweeper

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/bucket"
)

// gatedLister holds every LIST until n are in flight at once, then, after
// a moment in which any further LIST would arrive and be counted, lets all
// through; it records the most ever in flight. If n are never in flight at
// once within 10 s, every LIST fails.
type gatedLister struct {
	inner   *memBucket
	n       int
	timeout <-chan struct{}

	mu       sync.Mutex
	inflight int
	most     int
	open     chan struct{}
	opened   bool
}

func newGatedLister(t *testing.T, n int) *gatedLister {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return &gatedLister{inner: &memBucket{}, n: n, timeout: ctx.Done(), open: make(chan struct{})}
}

func (g *gatedLister) List(ctx context.Context, prefix, startAfter string, limit int) ([]string, error) {
	g.mu.Lock()
	g.inflight++
	g.most = max(g.most, g.inflight)
	if g.inflight == g.n && !g.opened {
		g.opened = true
		time.AfterFunc(50*time.Millisecond, func() { close(g.open) })
	}
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.inflight--
		g.mu.Unlock()
	}()
	select {
	case <-g.open:
	case <-g.timeout:
		return nil, errors.New("fewer LISTs than the concurrency were ever in flight at once")
	}
	return g.inner.List(ctx, prefix, startAfter, limit)
}

// A sweep lists its tenants' indexes Concurrency at a time: exactly that
// many are in flight at once, never more, each tenant is listed once, and
// every tenant's overdue entry is offered.
func TestSweepListsTenantsConcurrently(t *testing.T) {
	const conc, tenants = 4, 40
	g := newGatedLister(t, conc)
	var names StaticTenants
	for i := range tenants {
		name := fmt.Sprintf("t%02d", i)
		names = append(names, name)
		g.inner.put(keysFrom(name, "a", ago(time.Hour), 1)...)
		g.inner.put(keysFrom(name, "f", testNow.UnixMilli(), 1)...)
	}
	h := newHarness(t, func(c *Config) {
		c.Lister, c.Tenants, c.Concurrency = g, names, conc
	})
	if err := h.loop.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if g.most != conc {
		t.Fatalf("at most %d LISTs in flight at once, want exactly %d", g.most, conc)
	}
	if st := h.loop.Stats(); st.Sweeps != tenants || st.Lists != tenants || g.inner.lists != tenants {
		t.Fatalf("stats %+v, bucket saw %d LISTs; want %d of each", st, g.inner.lists, tenants)
	}
	got := map[string]bool{}
	for _, d := range h.sink.take() {
		got[d.Actor.Tenant] = true
	}
	if len(got) != tenants {
		t.Fatalf("offered the entries of %d tenants, want %d", len(got), tenants)
	}
}

// BenchmarkSweep10kTenants20ms is one sweep over 10,000 tenants, each with
// one entry not yet due, on the in-memory bucket with 20 ms added to every
// LIST (the tenants' own and the delimited listing that finds them), at
// several concurrencies; s/sweep is what to compare with the 10 s period:
//
//	go test ./sweeper -run '^$' -bench Sweep10kTenants20ms -benchtime 3x
func BenchmarkSweep10kTenants20ms(b *testing.B) {
	const tenants = 10_000
	m := bucket.NewMem()
	ctx := context.Background()
	for i := range tenants {
		for _, k := range keysFrom(fmt.Sprintf("t%05d", i), "f", testNow.UnixMilli()+int64(time.Hour/time.Millisecond), 1) {
			if _, err := m.Put(ctx, k, nil, bucket.Cond{IfNoneMatch: true}); err != nil {
				b.Fatal(err)
			}
		}
	}
	m.Faults = func(op bucket.Op) bucket.Fault {
		if op.Kind == bucket.OpList {
			return bucket.Fault{Delay: 20 * time.Millisecond}
		}
		return bucket.Fault{}
	}
	for _, conc := range []int{16, DefaultConcurrency, 64} {
		b.Run(fmt.Sprintf("concurrency=%d", conc), func(b *testing.B) {
			l, err := New(Config{Self: self, Margin: testMargin, Lister: m, Clock: newFakeClock(testNow),
				Sink: SinkFunc(func(Overdue) {}), Live: staticLive{self}, Tenants: IndexTenants{Lister: m},
				Rand: rand.New(rand.NewPCG(1, 1)), Concurrency: conc})
			if err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			for b.Loop() {
				if err := l.Sweep(ctx); err != nil {
					b.Fatal(err)
				}
			}
			sweeps := l.Stats().Sweeps / tenants
			b.ReportMetric(time.Since(start).Seconds()/float64(sweeps), "s/sweep")
			b.ReportMetric(float64(l.Stats().Lists)/float64(sweeps), "lists/sweep")
		})
	}
}
