package alarms_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmkeep/alarms"
	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/cluster"
	"github.com/wasmkeep/alarms/internal/fakeclock"
	"github.com/wasmkeep/alarms/internal/s3test"
	"github.com/wasmkeep/alarms/sweeper"
)

// idleHost is a node of an idle cluster as the plugin sees it: the shared
// fake clock, and the live nodes of its lease view.
type idleHost struct {
	clk *fakeclock.Clock
	l   *cluster.Leases
	takes
}

func (h idleHost) Now() time.Time                         { return h.clk.Now() }
func (h idleHost) After(d time.Duration) <-chan time.Time { return h.clk.After(d) }
func (h idleHost) Self() string                           { return h.l.NodeID() }
func (h idleHost) LiveNodes(context.Context) ([]string, error) {
	var ids []string
	for _, n := range h.l.Live() {
		ids = append(ids, n.ID)
	}
	return ids, nil
}

// Members is the live nodes with the classes their leases name, as the
// reference host reports them (alarms.MembersHost).
func (h idleHost) Members(context.Context) (sweeper.View, error) {
	v := sweeper.View{Epoch: h.l.MembersEpoch()}
	v.Members = append(v.Members, sweeper.Member{Addr: h.l.NodeID(), All: true})
	for _, n := range h.l.Live() {
		if n.ID != h.l.NodeID() {
			v.Members = append(v.Members, sweeper.Member{Addr: n.ID, Classes: n.Classes, All: n.AllClasses})
		}
	}
	return v, nil
}

// tempGets counts the GETs of versitygw's temporary files: a PUT in
// progress shows in a listing as .<name>.sgwtmp.<n> next to the object, and
// a node reading the leases GETs it as a node it has not seen (it is gone
// by then). S3 itself lists no such key.
type tempGets struct {
	bucket.Bucket
	n *atomic.Int64
}

func (b tempGets) Get(ctx context.Context, key string) ([]byte, string, error) {
	if strings.Contains(key, ".sgwtmp.") {
		b.n.Add(1)
	}
	return b.Bucket.Get(ctx, key)
}

func (b tempGets) ListInfo(ctx context.Context, prefix, startAfter string, limit int) ([]bucket.ObjectInfo, error) {
	return bucket.ListInfo(ctx, b.Bucket, prefix, startAfter, limit)
}

// keysOnly hides a bucket's listing with ETags (bucket.InfoLister), as a
// store whose listings carried none would.
type keysOnly struct{ bucket.Bucket }

// TestIdleClusterRequestsPerSweep pins what an idle cluster costs the
// bucket: 3 nodes, 2 tenants each with an alarm due tomorrow, the design's
// defaults (lease 10 s renewed and read every TTL/3, sweep 10 s, 2
// walkers per tenant, safety period 1 h), every loop running on one
// fake clock, over one safety period (360 sweep periods). Per node and
// sweep period, exactly:
//
//   - 3 lease renewals (PUT) and 3 readings of the leases: one LIST of
//     nodes/ each, whose ETags show the others renewed, and no GET;
//   - no sweep LIST: nothing in either tenant can be overdue before
//     tomorrow, and the live nodes do not change.
//
// and once per safety period, in the whole cluster: a delimited LIST per
// node that finds the tenants again, and one LIST of each tenant by each
// of its 2 walkers. So 3 PUTs and 3 LISTs per node and period, plus 3 + 4
// LISTs per hour; on a bucket whose listings carry no ETags the
// leases are read with a GET of each other node per reading: 6 GETs more
// per period; with the leases read every 5 s (ObservePeriod), 2 readings
// a period instead of 3. On memory and on the S3 server.
func TestIdleClusterRequestsPerSweep(t *testing.T) {
	mem := func(*testing.T) bucket.Bucket { return bucket.NewMem() }
	same := func(b bucket.Bucket) bucket.Bucket { return b }
	for _, tc := range []struct {
		name    string
		store   func(*testing.T) bucket.Bucket
		wrap    func(bucket.Bucket) bucket.Bucket
		observe time.Duration
		want    bucket.Counts // per node and sweep period
	}{
		{"listing ETags", mem, same, 0, bucket.Counts{Put: 3, List: 3, ListPages: 3}},
		{"keys only", mem, func(b bucket.Bucket) bucket.Bucket { return keysOnly{b} }, 0, bucket.Counts{Put: 3, List: 3, ListPages: 3, Get: 6}},
		{"s3", func(t *testing.T) bucket.Bucket { return s3test.Start(t).Bucket }, same, 0, bucket.Counts{Put: 3, List: 3, ListPages: 3}},
		{"leases read every 5 s", mem, same, 5 * time.Second, bucket.Counts{Put: 3, List: 2, ListPages: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const nodes, tenants, walkers = 3, 2, 2
			const sweeps = int64(sweeper.DefaultSafetyPeriod / sweeper.DefaultPeriod)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			t0 := time.Date(2026, 11, 7, 12, 0, 0, 0, time.UTC)
			clk := fakeclock.New(t0)
			store := tc.store(t)
			for _, tenant := range []string{"t1", "t2"} {
				id := abi.ActorID{Tenant: tenant, Class: "c", Name: "a"}
				if _, err := store.Put(ctx, swKey(id, t0.Add(24*time.Hour).UnixMilli()), nil, bucket.Cond{}); err != nil {
					t.Fatal(err)
				}
			}
			var counters []*bucket.Counting
			var temps []*atomic.Int64
			var leases []*cluster.Leases
			done := make(chan struct{})
			for i := range nodes {
				temp := new(atomic.Int64)
				temps = append(temps, temp)
				cb := bucket.NewCounting(tempGets{tc.wrap(store), temp})
				id := fmt.Sprintf("node-%d", i)
				l, err := cluster.StartLeases(ctx, cluster.LeaseConfig{Bucket: cb, NodeID: id, Addr: id, Clock: clk, ObservePeriod: tc.observe})
				if err != nil {
					t.Fatal(err)
				}
				leases = append(leases, l)
				p, err := alarms.Register(alarms.Config{Bucket: cb, Host: idleHost{clk: clk, l: l}, Timer: sweeper.NewTimer(swRetryMax),
					Margin: cluster.DefaultTTL + cluster.DefaultGrace, RetryMax: swRetryMax})
				if err != nil {
					t.Fatal(err)
				}
				go func() { p.RunSweeps(ctx); done <- struct{}{} }()
				counters = append(counters, cb)
			}
			defer func() {
				cancel()
				for range nodes {
					<-done
				}
				for _, l := range leases {
					l.Kill()
				}
			}()
			// Every node renews, reads the leases and sweeps, each on a loop
			// of its own that waits on the clock: idle when all 3n wait.
			idle := func() time.Time {
				deadline := time.Now().Add(10 * time.Second)
				for {
					n, next := clk.Waiting()
					if n == 3*nodes {
						return next
					}
					if time.Now().After(deadline) {
						t.Fatalf("%d of %d loops wait on the clock", n, 3*nodes)
					}
					time.Sleep(time.Millisecond)
				}
			}
			runUntil := func(end time.Time) {
				for next := idle(); !next.After(end); next = idle() {
					clk.Advance(next.Sub(clk.Now()))
				}
			}
			// Warm up: every node has seen every other (a GET each), and
			// the lease periods (TTL/3) run on from t0.
			from := t0.Add(2 * sweeper.DefaultPeriod)
			runUntil(from)
			for i, c := range counters {
				c.Reset()
				temps[i].Store(0)
			}
			// Sweeps at 30 s ... 3,620 s, the safety period's relisting
			// at 3,600 s; renewals and readings at 7P..1,086P (P = TTL/3).
			runUntil(from.Add(time.Duration(sweeps) * sweeper.DefaultPeriod))
			var sweepLists int64
			for i, c := range counters {
				got := c.Counts()
				if n := temps[i].Load(); n > 0 {
					t.Logf("node-%d: %d GETs of the store's temporary files left out", i, n)
					got.Get -= n
				}
				// The sweep's LISTs are what is left over the leases'.
				extra := got.List - tc.want.List*sweeps
				sweepLists += extra
				got.List -= extra
				got.ListPages -= extra
				per := bucket.Counts{Get: got.Get / sweeps, Put: got.Put / sweeps, Delete: got.Delete / sweeps, List: got.List / sweeps,
					ListPages: got.ListPages / sweeps, DeleteBatch: got.DeleteBatch / sweeps, BatchKeys: got.BatchKeys / sweeps}
				if per != tc.want || got.Get%sweeps+got.Put%sweeps+got.List%sweeps != 0 {
					t.Errorf("node-%d over %d sweep periods, less its %d sweep LISTs: %+v; per period %+v, want %+v", i, sweeps, extra, got, per, tc.want)
				}
				if extra < 1 || extra > 1+tenants {
					t.Errorf("node-%d: %d sweep LISTs in a safety period, want its delimited LIST and one per tenant it walks", i, extra)
				}
			}
			if want := int64(nodes + walkers*tenants); sweepLists != want {
				t.Errorf("the cluster's sweeps sent %d LISTs in a safety period, want %d (one delimited LIST per node, each tenant by its %d walkers)",
					sweepLists, want, walkers)
			}
			for _, l := range leases {
				if live := l.Live(); len(live) != nodes {
					t.Errorf("%s sees %d live nodes, want %d", l.NodeID(), len(live), nodes)
				}
			}
		})
	}
}

// TestConcurrentSweepOfManyTenants: with tenants listed 8 at a time, one
// sweep over 40 tenants offers every overdue entry of every tenant, once,
// for one delimited LIST and one LIST per tenant; on memory and on the S3
// server.
func TestConcurrentSweepOfManyTenants(t *testing.T) {
	swBuckets(t, func(t *testing.T, b bucket.Bucket) {
		ctx := context.Background()
		now := swStart
		const tenants = 40
		var keys []string
		want := map[abi.ActorID]bool{}
		for i := range tenants {
			tn := fmt.Sprintf("t%02d", i)
			for j := range 2 {
				id := abi.ActorID{Tenant: tn, Class: "c", Name: fmt.Sprint(j)}
				want[id] = true
				keys = append(keys, swKey(id, now.Add(-swMargin-time.Second).UnixMilli()+int64(j)))
			}
			keys = append(keys, swKey(abi.ActorID{Tenant: tn, Class: "c", Name: "later"}, now.Add(time.Hour).UnixMilli()))
		}
		plant(t, b, keys)
		cb := bucket.NewCounting(b)
		h := &sweepHost{now: now, self: "node-a", live: []string{"node-a"}}
		tm := sweeper.NewTimer(swRetryMax)
		p, err := alarms.Register(alarms.Config{Bucket: cb, Host: h, Timer: tm, Margin: swMargin, RetryMax: swRetryMax, SweepConcurrency: 8})
		if err != nil {
			t.Fatal(err)
		}
		n := &swNode{host: h, timer: tm, plugin: p}
		p.Sweep(ctx)
		got := map[abi.ActorID]bool{}
		for _, id := range n.popDue(t) {
			if got[id] {
				t.Errorf("%s offered twice", id)
			}
			got[id] = true
		}
		if len(got) != len(want) {
			t.Errorf("offered %d actors, want %d", len(got), len(want))
		}
		if c := cb.Counts(); c != (bucket.Counts{List: 1 + tenants, ListPages: 1 + tenants}) {
			t.Errorf("one sweep of %d tenants sent %+v, want one delimited LIST and one LIST per tenant", tenants, c)
		}
		if err := p.SweepStats().LastErr; err != nil {
			t.Errorf("last sweep: %v", err)
		}
	})
}

// S3 Standard request prices, dollars per 1,000 requests.
const (
	pricePutList = 0.005
	priceGet     = 0.0004
)

// costFigures is what a cluster cost the bucket over a window: requests
// per minute by kind (LIST pages, as S3 bills them) and a month at S3
// Standard prices (30 days).
type costFigures struct {
	put, list, get, del, total float64 // per minute
	dollars                    float64 // a month
}

func figures(c bucket.Counts, window time.Duration) costFigures {
	per := func(n int64) float64 { return float64(n) / window.Minutes() }
	f := costFigures{put: per(c.Put), list: per(c.ListPages), get: per(c.Get), del: per(c.Delete + c.DeleteBatch)}
	f.total = f.put + f.list + f.get + f.del
	month := 30 * 24 * 60.0
	f.dollars = month * ((f.put+f.list+f.del)*pricePutList + f.get*priceGet) / 1000
	return f
}

// runCostCluster runs n nodes sharing one counting bucket (their leases,
// lease readings and sweep loops on one fake clock, with prof's lease TTL
// and safety period, the other timings the design's defaults) over t
// tenants, each with one actor whose alarm is an entry in the index, and
// returns what the cluster's own requests (leases and sweeps) cost over
// one safety period, after a warm-up. Idle (loaded false): every
// alarm is due tomorrow. Lightly loaded: every alarm fires once a minute,
// the tenants' due times spread over the minute; a live holder fires each
// when due and writes the next entry, a minute on, then deletes the one
// it replaced (those writes are counted apart, in load).
func runCostCluster(tb testing.TB, n, t int, loaded bool, prof costProfile) (nodes, load bucket.Counts) {
	window := prof.safety
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	t0 := time.Date(2026, 11, 7, 12, 0, 0, 0, time.UTC)
	clk := fakeclock.New(t0)
	mem := bucket.NewMem()
	due := make([]int64, t)
	ids := make([]abi.ActorID, t)
	for i := range t {
		ids[i] = abi.ActorID{Tenant: fmt.Sprintf("t%05d", i), Class: "c", Name: "a"}
		due[i] = t0.Add(24 * time.Hour).UnixMilli()
		if loaded {
			due[i] = t0.Add(time.Duration(i) * time.Minute / time.Duration(t)).UnixMilli()
		}
		if _, err := mem.Put(ctx, swKey(ids[i], due[i]), nil, bucket.Cond{}); err != nil {
			tb.Fatal(err)
		}
	}
	cb := bucket.NewCounting(mem)
	var leases []*cluster.Leases
	for i := range n {
		id := fmt.Sprintf("node-%03d", i)
		l, err := cluster.StartLeases(ctx, cluster.LeaseConfig{Bucket: cb, NodeID: id, Addr: id, Clock: clk, TTL: prof.ttl, ObservePeriod: prof.observe})
		if err != nil {
			tb.Fatal(err)
		}
		leases = append(leases, l)
	}
	defer func() {
		for _, l := range leases {
			l.Kill()
		}
	}()
	waiters := 2 * n
	idle := func() time.Time {
		deadline := time.Now().Add(time.Minute)
		for {
			got, next := clk.Waiting()
			if got == waiters {
				return next
			}
			if time.Now().After(deadline) {
				tb.Fatalf("%d of %d loops wait on the clock", got, waiters)
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	runUntil := func(end time.Time) {
		for next := idle(); !next.After(end); next = idle() {
			clk.Advance(next.Sub(clk.Now()))
		}
		clk.Advance(end.Sub(clk.Now()))
	}
	// Every node sees every other before the sweeps start.
	runUntil(t0.Add(prof.ttl))
	for _, l := range leases {
		if live := len(l.Live()); live != n {
			tb.Fatalf("%s sees %d live nodes of %d", l.NodeID(), live, n)
		}
	}
	done := make(chan struct{}, n+1)
	for _, l := range leases {
		p, err := alarms.Register(alarms.Config{Bucket: cb, Host: idleHost{clk: clk, l: l}, Timer: sweeper.NewTimer(swRetryMax),
			Margin: prof.ttl + cluster.DefaultGrace, RetryMax: swRetryMax, SweepSafetyPeriod: prof.safety})
		if err != nil {
			tb.Fatal(err)
		}
		go func() { p.RunSweeps(ctx); done <- struct{}{} }()
	}
	waiters += n
	lb := bucket.NewCounting(mem)
	if loaded {
		// The holders: every second, each alarm due is fired and its next
		// entry written a minute on (PUT, then DELETE of the fired one).
		waiters++
		go func() {
			defer func() { done <- struct{}{} }()
			for {
				now := clk.Now().UnixMilli()
				for i := range ids {
					if due[i] <= now {
						next := due[i] + time.Minute.Milliseconds()
						_, _ = lb.Put(ctx, swKey(ids[i], next), nil, bucket.Cond{})
						_ = lb.Delete(ctx, swKey(ids[i], due[i]))
						due[i] = next
					}
				}
				select {
				case <-ctx.Done():
					return
				case <-clk.After(time.Second):
				}
			}
		}()
	}
	defer func() {
		cancel()
		for range waiters - 2*n {
			<-done
		}
	}()
	from := clk.Now().Add(2 * sweeper.DefaultPeriod)
	runUntil(from)
	cb.Reset()
	lb.Reset()
	runUntil(from.Add(window))
	return cb.Counts(), lb.Counts()
}

// costProfile is a cluster's lease TTL (renewed every TTL/3, grace 2 s,
// margin 1 s), how often each node reads the leases (0: every TTL/3), and
// its sweep's safety period.
type costProfile struct {
	ttl, observe, safety time.Duration
}

var (
	// costDefaults: the defaults: lease 10 s renewed every TTL/3 and read
	// every TTL/3 below cluster.LargeCluster live nodes, every 8 s from
	// then on; safety period 1 h.
	costDefaults = costProfile{ttl: cluster.DefaultTTL, safety: sweeper.DefaultSafetyPeriod}
	// costBefore: the defaults before the reading period followed the
	// cluster's size and the safety period was an hour (issue 39): the
	// leases read every TTL/3 whatever the size, safety period 10 min.
	costBefore = costProfile{ttl: cluster.DefaultTTL, observe: cluster.DefaultTTL / 3, safety: 10 * time.Minute}
)

// BenchmarkClusterCost prints what a cluster costs the bucket, idle and
// lightly loaded (every tenant's one alarm firing once a minute): requests
// per minute by kind (LIST pages, as S3 bills them), and a 30-day month at
// S3 Standard prices (PUT and LIST $0.005, GET $0.0004 per 1,000). Each
// run simulates one safety period on a fake clock over the counting
// bucket, so it includes the safety period's relisting; the load's own
// index writes are in load-put/min and load-delete/min, outside the bill.
// The sizes run at the defaults (profile=defaults: an hour simulated, so
// give it a longer timeout than go test's 10 min), and 100 nodes also at
// the defaults of before (profile=before). docs/cost.md has the table:
//
//	go test -run '^$' -bench ClusterCost -benchtime 1x -timeout 30m .
func BenchmarkClusterCost(b *testing.B) {
	for _, size := range []struct {
		nodes, tenants int
		profile        string
		prof           costProfile
	}{
		{1, 1, "defaults", costDefaults},
		{3, 20, "defaults", costDefaults},
		{10, 100, "defaults", costDefaults},
		{100, 10_000, "defaults", costDefaults},
		{100, 10_000, "before", costBefore},
	} {
		for _, loaded := range []bool{false, true} {
			load := "idle"
			if loaded {
				load = "light"
			}
			b.Run(fmt.Sprintf("nodes=%d/tenants=%d/profile=%s/%s", size.nodes, size.tenants, size.profile, load), func(b *testing.B) {
				var c, l bucket.Counts
				for b.Loop() {
					c, l = runCostCluster(b, size.nodes, size.tenants, loaded, size.prof)
				}
				f := figures(c, size.prof.safety)
				b.ReportMetric(f.put, "put/min")
				b.ReportMetric(f.list, "list/min")
				b.ReportMetric(f.get, "get/min")
				b.ReportMetric(f.total, "req/min")
				b.ReportMetric(f.total/60, "req/s")
				b.ReportMetric(f.dollars, "usd/month")
				if loaded {
					lf := figures(l, size.prof.safety)
					b.ReportMetric(lf.put, "load-put/min")
					b.ReportMetric(lf.del, "load-delete/min")
				}
			})
		}
	}
}
