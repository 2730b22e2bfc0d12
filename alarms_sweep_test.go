package alarms_test

// The sweep at plugin level: Register's sweeps offering overdue index
// entries to node timers, over an in-memory bucket and over versitygw.

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/alarms"
	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/alarmindex"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/internal/s3test"
	"github.com/wasmkeep/alarms/sweeper"
)

// TestMain stops the shared S3 server (versitygw) when the tests end.
func TestMain(m *testing.M) { os.Exit(s3test.Run(m)) }

// sweepHost is a Host on a clock that moves only when told, with a fixed
// view of the live nodes. Sweeps are driven with Plugin.Sweep, so After
// never fires.
type sweepHost struct {
	takes
	mu   sync.Mutex
	now  time.Time
	self string
	live []string
}

func (h *sweepHost) Now() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.now
}

func (h *sweepHost) advance(d time.Duration) {
	h.mu.Lock()
	h.now = h.now.Add(d)
	h.mu.Unlock()
}

func (h *sweepHost) After(time.Duration) <-chan time.Time { return nil }
func (h *sweepHost) Self() string                         { return h.self }
func (h *sweepHost) LiveNodes(context.Context) ([]string, error) {
	return slices.Clone(h.live), nil
}

const (
	swMargin   = 15 * time.Second // lease period plus grace
	swRetryMax = 5 * time.Minute
)

var swStart = time.UnixMilli(1_800_000_000_000)

// swNode is one node of a plugin-level test: its host, timer and plugin.
type swNode struct {
	host   *sweepHost
	timer  *sweeper.Timer
	plugin *alarms.Plugin
}

func newSwNode(t *testing.T, b bucket.Bucket, self string, live []string, now *time.Time) *swNode {
	t.Helper()
	return newSwNodeServing(t, b, self, live, now, nil)
}

// newSwNodeServing is newSwNode with Config.Serves.
func newSwNodeServing(t *testing.T, b bucket.Bucket, self string, live []string, now *time.Time, serves func(string) bool) *swNode {
	t.Helper()
	h := &sweepHost{now: *now, self: self, live: live}
	tm := sweeper.NewTimer(swRetryMax)
	p, err := alarms.Register(alarms.Config{
		Bucket: b, Host: h, Timer: tm, Margin: swMargin, SweepPeriod: 10 * time.Second, RetryMax: swRetryMax,
		Serves: serves,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &swNode{host: h, timer: tm, plugin: p}
}

// popDue takes every due actor out of the node's timer, as its timer loop
// would when it starts their deliveries.
func (n *swNode) popDue(t *testing.T) []abi.ActorID {
	t.Helper()
	var out []abi.ActorID
	for {
		key, _, ok := n.timer.PopDue(n.host.Now().UnixMilli())
		if !ok {
			return out
		}
		id, err := alarms.ParseTimerKey(key)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, id)
	}
}

// swBuckets runs f on an in-memory bucket and on a fresh versitygw bucket.
func swBuckets(t *testing.T, f func(t *testing.T, b bucket.Bucket)) {
	t.Run("mem", func(t *testing.T) { f(t, bucket.NewMem()) })
	t.Run("s3", func(t *testing.T) { f(t, s3test.Start(t).Bucket) })
}

func swActor(i int) abi.ActorID {
	return abi.ActorID{Tenant: "t", Class: "c", Name: fmt.Sprintf("a/%04d", i)}
}

func swKey(id abi.ActorID, dueMs int64) string {
	return alarmindex.Key{Actor: id, DueMs: dueMs, Tag: alarmindex.Tag{Generation: 1, Nonce: "0a"}}.String()
}

// plant PUTs the empty index entries, eight at a time.
func plant(t testing.TB, b bucket.Bucket, keys []string) {
	t.Helper()
	plantN(t, b, keys, 8)
}

// plantN PUTs the empty index entries, conc at a time.
func plantN(t testing.TB, b bucket.Bucket, keys []string, conc int) {
	t.Helper()
	ctx := context.Background()
	work := make(chan string)
	errs := make(chan error, len(keys))
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range work {
				if _, err := b.Put(ctx, k, nil, bucket.Cond{}); err != nil {
					errs <- err
				}
			}
		}()
	}
	for _, k := range keys {
		work <- k
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func deleteAll(t *testing.T, b bucket.Bucket, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if err := b.Delete(context.Background(), k); err != nil {
			t.Fatal(err)
		}
	}
}

// Resuming after the delivery cap (docs/design.md#sweep; untested in the original design record): two
// nodes share 1,200 overdue entries, about 600 each. Every sweep a node
// offers its timer exactly min(256, what is left of its shard); the timer
// delivers them (the entries go); the next sweep takes the next ones, until
// every actor was offered exactly once, by its shard's node. Each sweep
// costs one LIST page per 1,000 overdue entries, plus the one that ends it,
// plus the delimited LIST of the index root that finds the tenant.
func TestResumingAfterTheDeliveryCap(t *testing.T) {
	swBuckets(t, func(t *testing.T, b bucket.Bucket) {
		ctx := context.Background()
		cb := bucket.NewCounting(b)
		names := []string{"node-a", "node-b"}
		now := swStart
		nodes := map[string]*swNode{}
		for _, n := range names {
			nodes[n] = newSwNode(t, cb, n, names, &now)
		}
		// Overdue by more than a margin, less than three: nobody's entries
		// are anyone's, so each node delivers its shard only.
		const total = 1200
		keyOf := map[abi.ActorID]string{}
		left := map[string]int{}
		var keys []string
		for i := range total {
			id := swActor(i)
			k := swKey(id, now.Add(-swMargin-2*time.Second).UnixMilli()+int64(i))
			keyOf[id] = k
			keys = append(keys, k)
			left[sweeper.Shard(id, names)]++
		}
		// Entries not yet due stay where they are.
		for i := range 5 {
			keys = append(keys, swKey(swActor(total+i), now.Add(time.Hour).UnixMilli()))
		}
		plant(t, b, keys)
		if left[names[0]] <= 2*sweeper.DefaultMaxDeliveries || left[names[1]] <= 2*sweeper.DefaultMaxDeliveries {
			t.Fatalf("shards %v: the test needs more than the cap on each node", left)
		}

		offered := map[abi.ActorID]string{}
		for round := 1; len(offered) < total; round++ {
			if round > 10 {
				t.Fatalf("after %d rounds %d of %d actors offered", round-1, len(offered), total)
			}
			for _, name := range names {
				n := nodes[name]
				cb.Reset()
				n.plugin.Sweep(ctx)
				// The tenants, then pages of 1,000 keys up to the first
				// entry not yet due.
				if c, want := cb.Counts(), 1+int64(total-len(offered))/1000+1; c.ListPages != want {
					t.Errorf("%s sweep %d: %d LIST pages, want %d", name, round, c.ListPages, want)
				}
				got := n.popDue(t)
				if want := min(sweeper.DefaultMaxDeliveries, left[name]); len(got) != want {
					t.Fatalf("%s sweep %d: %d offered, want %d (%d of its shard left)", name, round, len(got), want, left[name])
				}
				left[name] -= len(got)
				for _, id := range got {
					if by, ok := offered[id]; ok {
						t.Fatalf("%s offered %s again (first by %s)", name, id, by)
					}
					offered[id] = name
					if s := sweeper.Shard(id, names); s != name {
						t.Fatalf("%s offered %s of %s's shard", name, id, s)
					}
					deleteAll(t, b, keyOf[id]) // delivered: the entry goes
				}
			}
		}
		for _, name := range names {
			nodes[name].plugin.Sweep(ctx)
			if got := nodes[name].popDue(t); len(got) != 0 {
				t.Fatalf("%s offered %d after the backlog drained", name, len(got))
			}
		}
	})
}

// Entries the node already has retrying do not count against the cap: a
// node whose first 256 deliveries failed (the host retries them later, as
// after an unreachable bucket) offers the next 256 on the next sweep
// instead of offering the same ones again for nothing, and keeps their
// retry times.
func TestRetryingEntriesDoNotCountAgainstTheCap(t *testing.T) {
	swBuckets(t, func(t *testing.T, b bucket.Bucket) {
		ctx := context.Background()
		now := swStart
		n := newSwNode(t, b, "node-a", []string{"node-a"}, &now)
		var keys []string
		for i := range 600 {
			keys = append(keys, swKey(swActor(i), now.Add(-swMargin-time.Second).UnixMilli()+int64(i)))
		}
		plant(t, b, keys)

		n.plugin.Sweep(ctx)
		first := n.popDue(t)
		if len(first) != sweeper.DefaultMaxDeliveries {
			t.Fatalf("first sweep offered %d, want %d", len(first), sweeper.DefaultMaxDeliveries)
		}
		// Each delivery fails; the host retries after a lease period.
		retryAt := now.Add(10 * time.Second).UnixMilli()
		for _, id := range first {
			n.timer.Set(alarms.TimerKey(id), retryAt)
		}
		n.host.advance(time.Second)
		n.plugin.Sweep(ctx)
		second := n.popDue(t)
		if len(second) != sweeper.DefaultMaxDeliveries {
			t.Fatalf("second sweep offered %d new entries, want %d (the %d retrying ones must not count)",
				len(second), sweeper.DefaultMaxDeliveries, len(first))
		}
		for _, id := range second {
			if slices.Contains(first, id) {
				t.Fatalf("second sweep offered %s, which is retrying", id)
			}
		}
		for _, id := range first {
			if at, ok := n.timer.Get(alarms.TimerKey(id)); !ok || at != retryAt {
				t.Fatalf("%s: timer holds %d (%v), want the retry at %d", id, at, ok, retryAt)
			}
		}
	})
}

// Entries of a class the node does not serve are neither offered nor
// counted against the cap: 600 of them sort before 100 of a class it
// serves, and the first sweep offers exactly those 100 (counted, the 600
// would have taken the whole cap of 256 every sweep). A node that serves
// every class offers the first 256 in due order.
func TestEntriesOfClassesNotServedDoNotCountAgainstTheCap(t *testing.T) {
	swBuckets(t, func(t *testing.T, b bucket.Bucket) {
		ctx := context.Background()
		now := swStart
		var keys []string
		due := now.Add(-swMargin - 2*time.Second).UnixMilli()
		for i := range 600 {
			id := abi.ActorID{Tenant: "t", Class: "unserved", Name: fmt.Sprint(i)}
			keys = append(keys, swKey(id, due+int64(i)))
		}
		for i := range 100 {
			keys = append(keys, swKey(swActor(i), due+1000+int64(i)))
		}
		plant(t, b, keys)

		n := newSwNodeServing(t, b, "node-a", []string{"node-a"}, &now, func(class string) bool { return class == "c" })
		n.plugin.Sweep(ctx)
		got := n.popDue(t)
		if len(got) != 100 {
			t.Fatalf("offered %d, want the 100 of the class served", len(got))
		}
		for _, id := range got {
			if id.Class != "c" {
				t.Fatalf("offered %s, of a class the node does not serve", id)
			}
		}

		all := newSwNode(t, b, "node-a", []string{"node-a"}, &now)
		all.plugin.Sweep(ctx)
		got = all.popDue(t)
		if len(got) != sweeper.DefaultMaxDeliveries {
			t.Fatalf("a node serving every class offered %d, want %d", len(got), sweeper.DefaultMaxDeliveries)
		}
		for _, id := range got {
			if id.Class != "unserved" {
				t.Fatalf("a node serving every class offered %s before the earlier entries", id)
			}
		}
	})
}

// Sharding when nodes disagree (docs/design.md#sweep; untested in the original design record):
// node a still sees the heartbeat of a dead "ghost" node, node b does not.
// Entries a gives to the ghost and b gives to a are nobody's until they are
// three margins overdue; then they are delivered. Every other entry is
// delivered by the first sweep after it is a margin overdue, and every
// entry is offered to some timer within three margins.
func TestShardingWhenNodesDisagree(t *testing.T) {
	swBuckets(t, func(t *testing.T, b bucket.Bucket) {
		ctx := context.Background()
		const ghost = "node-ghost"
		viewA := []string{"node-a", "node-b", ghost}
		viewB := []string{"node-a", "node-b"}
		due := swStart
		now := due.Add(swMargin)
		a := newSwNode(t, b, "node-a", viewA, &now)
		bn := newSwNode(t, b, "node-b", viewB, &now)

		const total = 300
		keyOf := map[abi.ActorID]string{}
		waits := map[abi.ActorID]bool{} // nobody's shard in its own view
		var keys []string
		for i := range total {
			id := swActor(i)
			keyOf[id] = swKey(id, due.UnixMilli())
			keys = append(keys, keyOf[id])
			x := id
			if sweeper.Shard(x, viewA) != "node-a" && sweeper.Shard(x, viewB) != "node-b" {
				waits[id] = true
				if s := sweeper.Shard(x, viewA); s != ghost {
					t.Fatalf("%s waits but its shard in a's view is %s, not the ghost", id, s)
				}
			}
		}
		if len(waits) == 0 || len(waits) == total {
			t.Fatalf("%d of %d actors wait: the views do not disagree usefully", len(waits), total)
		}
		plant(t, b, keys)

		step := swMargin / 5
		first := map[abi.ActorID]time.Duration{} // how overdue when first offered
		for overdue := swMargin; overdue <= 3*swMargin+step; overdue += step {
			for _, n := range []*swNode{a, bn} {
				n.plugin.Sweep(ctx)
			}
			for _, n := range []*swNode{a, bn} {
				for _, id := range n.popDue(t) {
					if _, ok := first[id]; !ok {
						first[id] = overdue
						deleteAll(t, b, keyOf[id]) // delivered
					}
				}
			}
			a.host.advance(step)
			bn.host.advance(step)
		}
		for i := range total {
			id := swActor(i)
			got, ok := first[id]
			switch {
			case !ok:
				t.Errorf("%s was never offered", id)
			case got > 3*swMargin:
				t.Errorf("%s first offered %v overdue, past three margins", id, got)
			case waits[id] && got < 3*swMargin:
				t.Errorf("%s (the ghost's shard) offered %v overdue, before three margins", id, got)
			case !waits[id] && got != swMargin:
				t.Errorf("%s offered %v overdue, want the first sweep after a margin (%v)", id, got, swMargin)
			}
		}
		t.Logf("%d of %d actors waited for three margins (the ghost's shard that a's view gives away)", len(waits), total)
	})
}

// sweepBench is the versitygw bucket of BenchmarkSweepNoneOverdue, with
// each tenant's entries planted once per process.
var sweepBench struct {
	mu      sync.Mutex
	srv     *s3test.Server
	planted map[int]bool
}

// BenchmarkSweepNoneOverdue measures one sweep of a tenant's index on
// versitygw when no entry is overdue, with 1,000 and with 100,000 future
// entries: the walk stops at the first entry, so a sweep costs exactly one
// LIST request whatever the index holds (lists/sweep; anything but 1 is an
// error) and ns/op is the sweep's time, that LIST included. Planting
// 100,000 entries takes about a minute, once per process:
//
//	go test -run '^$' -bench BenchmarkSweepNoneOverdue -benchtime 200x .
func BenchmarkSweepNoneOverdue(b *testing.B) {
	for _, n := range []int{1_000, 100_000} {
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			tenant := fmt.Sprintf("future%d", n)
			sweepBench.mu.Lock()
			if sweepBench.srv == nil {
				sweepBench.srv = s3test.Start(b)
				sweepBench.planted = map[int]bool{}
			}
			srv := sweepBench.srv
			if !sweepBench.planted[n] {
				keys := make([]string, n)
				for i := range keys {
					id := abi.ActorID{Tenant: tenant, Class: "c", Name: fmt.Sprintf("a/%06d", i)}
					keys[i] = swKey(id, swStart.Add(time.Hour).UnixMilli()+int64(i))
				}
				start := time.Now()
				plantN(b, srv.Bucket, keys, 32)
				b.Logf("planted %d entries in %v", n, time.Since(start).Round(time.Millisecond))
				sweepBench.planted[n] = true
			}
			sweepBench.mu.Unlock()

			cb := bucket.NewCounting(srv.NewClient(b))
			h := &sweepHost{now: swStart, self: "node-a", live: []string{"node-a"}}
			tm := sweeper.NewTimer(swRetryMax)
			p, err := alarms.Register(alarms.Config{Bucket: cb, Host: h, Timer: tm, Margin: swMargin, RetryMax: swRetryMax, Tenants: []string{tenant}})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ResetTimer()
			for range b.N {
				p.Sweep(ctx)
			}
			b.StopTimer()
			c := cb.Counts()
			b.ReportMetric(float64(c.ListPages)/float64(b.N), "lists/sweep")
			if c.ListPages != int64(b.N) || c.Get+c.Put+c.Delete != 0 {
				b.Errorf("%d sweeps sent %d LIST requests (want one each), %d other requests (want none)",
					b.N, c.ListPages, c.Get+c.Put+c.Delete)
			}
			if st := p.SweepStats(); st.Entries != 0 || tm.Len() != 0 || st.Errors != 0 {
				b.Errorf("a sweep with nothing overdue met %d entries, offered %d, failed %d times", st.Entries, tm.Len(), st.Errors)
			}
		})
	}
}

// Tenant discovery: a node configured with no tenant sweeps every tenant
// that has entries in the index, found with one delimited LIST of the
// index root per sweep (then one LIST per tenant's walk). Configured
// tenants are a filter: only their index is swept, and nothing is
// listed to find them.
func TestSweepsFindEveryTenantOfTheIndex(t *testing.T) {
	swBuckets(t, func(t *testing.T, b bucket.Bucket) {
		ctx := context.Background()
		now := swStart
		tenants := []string{"a", "b-2", "zz"}
		var keys []string
		want := map[abi.ActorID]bool{}
		for _, tn := range tenants {
			for i := range 3 {
				id := abi.ActorID{Tenant: tn, Class: "c", Name: fmt.Sprint(i)}
				want[id] = true
				keys = append(keys, swKey(id, now.Add(-swMargin-time.Second).UnixMilli()+int64(i)))
			}
			// Not yet due: ends the tenant's walk.
			keys = append(keys, swKey(abi.ActorID{Tenant: tn, Class: "c", Name: "later"}, now.Add(time.Hour).UnixMilli()))
		}
		plant(t, b, keys)

		cb := bucket.NewCounting(b)
		n := newSwNode(t, cb, "node-a", []string{"node-a"}, &now)
		n.plugin.Sweep(ctx)
		got := map[abi.ActorID]bool{}
		for _, id := range n.popDue(t) {
			got[id] = true
		}
		if !maps.Equal(got, want) {
			t.Errorf("a node with no tenant configured offered %v, want every overdue entry of every tenant %v", got, want)
		}
		if c := cb.Counts(); c != (bucket.Counts{List: 4, ListPages: 4}) {
			t.Errorf("one sweep of three tenants sent %+v, want one delimited LIST and one LIST per tenant", c)
		}
		if st := n.plugin.SweepStats(); st.Sweeps != 3 || st.Errors != 0 {
			t.Errorf("stats %+v: want 3 tenant sweeps, no errors", st)
		}

		// A filter: only tenant "b-2".
		cb.Reset()
		h := &sweepHost{now: now, self: "node-a", live: []string{"node-a"}}
		tm := sweeper.NewTimer(swRetryMax)
		p, err := alarms.Register(alarms.Config{Bucket: cb, Host: h, Timer: tm, Margin: swMargin, RetryMax: swRetryMax, Tenants: []string{"b-2"}})
		if err != nil {
			t.Fatal(err)
		}
		p.Sweep(ctx)
		f := &swNode{host: h, timer: tm, plugin: p}
		got = map[abi.ActorID]bool{}
		for _, id := range f.popDue(t) {
			if id.Tenant != "b-2" {
				t.Errorf("the filter names b-2 only; %s was offered", id)
			}
			got[id] = true
		}
		if len(got) != 3 {
			t.Errorf("with the filter b-2, %d actors offered, want its 3", len(got))
		}
		if c := cb.Counts(); c != (bucket.Counts{List: 1, ListPages: 1}) {
			t.Errorf("one filtered sweep sent %+v, want the one LIST of its tenant", c)
		}
	})
}

// discoverBench holds BenchmarkDiscoverTenants's buckets, planted once per
// process, by number of tenants.
var discoverBench struct {
	mu  sync.Mutex
	srv map[int]*s3test.Server
}

// BenchmarkDiscoverTenants measures how a sweep finds the index's tenants
// on versitygw: one delimited LIST of the index root (lists/op; anything
// but 1 is an error), with 1,000 tenants of one entry each, and with 10
// tenants of 2,000 entries each (the store rolls their keys up into one
// folder each). Planting takes about a minute:
//
//	go test -run '^$' -bench DiscoverTenants -benchtime 200x .
func BenchmarkDiscoverTenants(b *testing.B) {
	for _, c := range []struct{ tenants, each int }{{1000, 1}, {10, 2000}} {
		b.Run(fmt.Sprintf("tenants=%d/entries=%d", c.tenants, c.each), func(b *testing.B) {
			discoverBench.mu.Lock()
			if discoverBench.srv == nil {
				discoverBench.srv = map[int]*s3test.Server{}
			}
			srv := discoverBench.srv[c.tenants]
			if srv == nil {
				srv = s3test.Start(b)
				discoverBench.srv[c.tenants] = srv
				var keys []string
				for tn := range c.tenants {
					for i := range c.each {
						id := abi.ActorID{Tenant: fmt.Sprintf("t%04d", tn), Class: "c", Name: fmt.Sprintf("a/%06d", i)}
						keys = append(keys, swKey(id, swStart.Add(time.Hour).UnixMilli()+int64(i)))
					}
				}
				start := time.Now()
				plantN(b, srv.Bucket, keys, 32)
				b.Logf("planted %d entries in %v", len(keys), time.Since(start).Round(time.Millisecond))
			}
			discoverBench.mu.Unlock()
			cb := bucket.NewCounting(srv.NewClient(b))
			d := sweeper.IndexTenants{Lister: cb}
			ctx := context.Background()
			b.ResetTimer()
			for range b.N {
				got, err := d.Tenants(ctx)
				if err != nil || len(got) != c.tenants {
					b.Fatalf("found %d tenants (%v), want %d", len(got), err, c.tenants)
				}
			}
			b.StopTimer()
			n := cb.Counts()
			b.ReportMetric(float64(n.ListPages)/float64(b.N), "lists/op")
			if n.ListPages != int64(b.N) || n.Get+n.Put+n.Delete != 0 {
				b.Errorf("%d discoveries sent %d LIST requests (want one each), %d other requests (want none)",
					b.N, n.ListPages, n.Get+n.Put+n.Delete)
			}
		})
	}
}

// A delivery that failed on the host's side (the bucket down) counts as
// pending until it is tried again, so a sweep the cap cut short is not
// followed at once by another while the node's deliveries fail: the drain
// backs off with them (sweeper.Config.Pending).
func TestADrainWaitsForRetriesOfFailedDeliveries(t *testing.T) {
	f := newFixture(t)
	if n := f.p.Pending(); n != 0 {
		t.Fatalf("pending before any delivery: %d", n)
	}
	key := alarms.TimerKey(xid)
	d := f.deliverDue(nil, key, 1_800_000_000_000) // every Take fails
	if d.Err == nil {
		t.Fatal("a delivery whose take failed reported no error")
	}
	if n := f.p.Pending(); n != 1 {
		t.Fatalf("pending after a delivery failed: %d, want 1 (its retry)", n)
	}
	f.p.Arm(xid, nil) // an event cleared the alarm: nothing to retry
	if n := f.p.Pending(); n != 0 {
		t.Fatalf("pending after the alarm was cleared: %d, want 0", n)
	}
}
