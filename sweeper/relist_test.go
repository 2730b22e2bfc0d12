package sweeper

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

// members is a MemberLister a test changes.
type members struct {
	mu sync.Mutex
	v  View
}

func (m *members) Members(context.Context) (View, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return View{Members: slices.Clone(m.v.Members), Epoch: m.v.Epoch}, nil
}

func (m *members) set(v View) {
	m.mu.Lock()
	m.v = v
	m.mu.Unlock()
}

func all(addrs ...string) View {
	var v View
	for _, a := range addrs {
		v.Members = append(v.Members, Member{Addr: a, All: true})
	}
	return v
}

// tick advances the harness's clock by d and runs one scheduled sweep;
// it returns the LISTs that sweep sent.
func (h *harness) tick(t *testing.T, d time.Duration) int {
	t.Helper()
	h.clock.Advance(d)
	before := h.lists()
	if err := h.loop.Tick(context.Background()); err != nil {
		t.Fatalf("tick: %v", err)
	}
	return h.lists() - before
}

func (h *harness) lists() int {
	h.bucket.mu.Lock()
	defer h.bucket.mu.Unlock()
	return h.bucket.lists
}

// A tenant whose earliest entry is an hour away is listed once, then not
// until that entry is a margin overdue, when it is delivered: an idle
// tenant costs nothing per period.
func TestTickListsATenantWhenItsEarliestEntryComesDue(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Period, c.SafetyPeriod = 10*time.Second, 2*time.Hour })
	due := testNow.Add(time.Hour).UnixMilli()
	h.bucket.put(keysFrom("t", "a", due, 1)...)
	if n := h.tick(t, 0); n != 1 {
		t.Fatalf("first sweep sent %d LISTs, want 1", n)
	}
	for i := range 363 { // 10 s periods up to the due time plus the margin
		n := h.tick(t, 10*time.Second)
		now := h.clock.Now()
		listable := !now.Before(time.UnixMilli(due).Add(testMargin))
		switch {
		case !listable && n != 0:
			t.Fatalf("sweep %d at %v (entry due at %v): %d LISTs, want none", i, now, time.UnixMilli(due), n)
		case listable && n != 1:
			t.Fatalf("sweep %d at %v, a margin after the entry's due time: %d LISTs, want 1", i, now, n)
		case listable:
			if got := h.sink.take(); len(got) != 1 || got[0].DueMs != due {
				t.Fatalf("at the due time plus the margin: offered %+v, want the entry", got)
			}
			return
		}
	}
	t.Fatal("the entry never came due")
}

// An entry written into a tenant after its walk, earlier than the earliest
// the walk saw (by a node that then died), is found when the live nodes
// change; a tenant with nothing in it is listed again only after the
// safety period.
func TestTickRelistsOnMembershipChangeAndSafetyPeriod(t *testing.T) {
	m := &members{}
	m.set(all(self, "node-b"))
	h := newHarness(t, func(c *Config) {
		c.Period = 10 * time.Second
		c.Members = m
		c.Tenants = StaticTenants{"t", "empty"}
		c.Walkers = 2
		c.SafetyPeriod = 10 * time.Minute
	})
	h.bucket.put(keysFrom("t", "late", testNow.Add(24*time.Hour).UnixMilli(), 1)...)
	if n := h.tick(t, 0); n != 2 {
		t.Fatalf("first sweep: %d LISTs, want one per tenant (2)", n)
	}
	// node-b writes an entry due now, then dies.
	orphan := keysFrom("t", "orphan", testNow.UnixMilli(), 1)
	h.bucket.put(orphan...)
	for range 3 {
		if n := h.tick(t, 10*time.Second); n != 0 {
			t.Fatalf("idle sweep: %d LISTs", n)
		}
	}
	m.set(all(self))
	h.clock.Advance(testMargin)
	if n := h.tick(t, 0); n != 2 {
		t.Fatalf("after node-b left: %d LISTs, want every tenant (2)", n)
	}
	if got := h.sink.take(); len(got) != 1 || got[0].Keys[0] != orphan[0] {
		t.Fatalf("after node-b left: offered %+v, want its orphan", got)
	}
	// The orphan stays (the sink did nothing): listed every period; and
	// the walk of "empty" the change asked for is read once more.
	if n := h.tick(t, 10*time.Second); n != 2 {
		t.Fatalf("with an overdue entry, and the change's second reading of the empty tenant: %d LISTs, want 2", n)
	}
	h.bucket.remove(orphan...)
	h.tick(t, 10*time.Second)
	quiet := 0
	for h.clock.Now().Before(testNow.Add(30 * time.Minute)) {
		quiet += h.tick(t, 10*time.Second)
	}
	// From about 1 min to 30 min: "empty" and "t" (next due tomorrow)
	// each listed at each safety period, about three times.
	if quiet < 4 || quiet > 6 {
		t.Errorf("29 quiet minutes: %d LISTs, want 2 tenants x about 3 safety periods", quiet)
	}
}

// An orphan's entry that the walk a change of the live nodes asked for
// did not see (an erasure-coded store's listing may leave a key out) is
// found by the second reading of that walk, a sweep period later, not a
// safety period later.
func TestTickReadsAChangesWalkTwice(t *testing.T) {
	m := &members{}
	m.set(all(self, "node-b"))
	h := newHarness(t, func(c *Config) {
		c.Period = 10 * time.Second
		c.Members = m
		c.Walkers = 2
		c.SafetyPeriod = time.Hour
	})
	if n := h.tick(t, 0); n != 1 {
		t.Fatalf("first sweep: %d LISTs, want 1", n)
	}
	orphan := keysFrom("t", "orphan", testNow.UnixMilli(), 1)
	h.bucket.put(orphan...)
	m.set(all(self))
	h.clock.Advance(testMargin)
	first := 0
	h.bucket.mu.Lock()
	h.bucket.omit = func(call int, key string) bool {
		if first == 0 {
			first = call
		}
		return call == first && key == orphan[0]
	}
	h.bucket.mu.Unlock()
	if n := h.tick(t, 0); n != 1 {
		t.Fatalf("after node-b left: %d LISTs, want 1", n)
	}
	if got := h.sink.take(); len(got) != 0 {
		t.Fatalf("the listing left the orphan out, yet %+v was offered", got)
	}
	if n := h.tick(t, 10*time.Second); n != 1 {
		t.Fatalf("a sweep period after the change's walk: %d LISTs, want its second reading", n)
	}
	if got := h.sink.take(); len(got) != 1 || got[0].Keys[0] != orphan[0] {
		t.Fatalf("the second reading offered %+v, want the orphan", got)
	}
}

// A node that is not a tenant's walker does not list it, unless a hint
// (it let go of one of the tenant's actors) makes it walk the tenant,
// until a walk finds the tenant empty.
func TestTickWalkersAndHints(t *testing.T) {
	// Find a tenant that self does not walk among 3 nodes, r = 1.
	v := all(self, "node-b", "node-c")
	tenant := ""
	for i := 0; tenant == ""; i++ {
		tn := fmt.Sprintf("t%d", i)
		if !NewWalkers(v, 1).Walks(Member{Addr: self, All: true}, tn) {
			tenant = tn
		}
	}
	m := &members{}
	m.set(v)
	h := newHarness(t, func(c *Config) {
		c.Members = m
		c.Tenants = StaticTenants{tenant}
		c.Walkers = 1
	})
	keys := keysFrom(tenant, "a", ago(time.Hour), 1)
	h.bucket.put(keys...)
	if n := h.tick(t, 0); n != 0 {
		t.Fatalf("a node that does not walk %s sent %d LISTs", tenant, n)
	}
	h.loop.Hint(tenant)
	if n := h.tick(t, time.Second); n != 1 {
		t.Fatalf("after a hint: %d LISTs, want 1", n)
	}
	h.bucket.remove(keys...)
	if n := h.tick(t, 10*time.Second); n != 1 {
		t.Fatalf("hinted, overdue entry met last time: %d LISTs, want 1", n)
	}
	if n := h.tick(t, time.Hour); n != 0 {
		t.Fatalf("a walk found the tenant empty, yet a non-walker listed it again: %d", n)
	}
}

// The walkers of a tenant: r nodes per class among those serving it, so a
// class served by a node that ranks low is still walked; a node that sees
// fewer live nodes walks at least what it walks in the full view (the
// rendezvous property the design's argument rests on); and with every
// node's view the same, every class a node serves has min(r, servers)
// walkers.
func TestWalkers(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	classes := []string{"a", "b", "c"}
	for round := range 200 {
		var v View
		n := 1 + rng.IntN(8)
		for i := range n {
			m := Member{Addr: fmt.Sprintf("node-%d", i)}
			if rng.IntN(3) == 0 {
				m.All = true
			} else {
				for _, c := range classes {
					if rng.IntN(2) == 0 {
						m.Classes = append(m.Classes, c)
					}
				}
			}
			v.Members = append(v.Members, m)
		}
		r := 1 + rng.IntN(3)
		w := NewWalkers(v, r)
		tenant := fmt.Sprintf("tenant-%d", round)
		for _, c := range append(classes, "unnamed") {
			servers := 0
			for _, m := range v.Members {
				if m.All || (slices.Contains(m.Classes, c)) {
					servers++
				}
			}
			got := w.Of(tenant, c)
			if len(got) != min(r, servers) {
				t.Fatalf("round %d: class %s has %d walkers of %d servers, want min(r=%d, servers)", round, c, len(got), servers, r)
			}
			for _, addr := range got {
				i := slices.IndexFunc(v.Members, func(m Member) bool { return m.Addr == addr })
				if !v.Members[i].serves(c) && !v.Members[i].All {
					t.Fatalf("round %d: %s walks class %s it does not serve", round, addr, c)
				}
				if !w.Walks(v.Members[i], tenant) {
					t.Fatalf("round %d: %s is a walker of %s but Walks says no", round, addr, c)
				}
			}
		}
		// Walks agrees with Of: a node walks the tenant exactly when it is
		// among the walkers of a class it serves (any class, for one that
		// serves all).
		for _, m := range v.Members {
			want := false
			for _, c := range append(classes, "unnamed") {
				if (m.All || slices.Contains(m.Classes, c)) && slices.Contains(w.Of(tenant, c), m.Addr) {
					want = true
				}
			}
			if got := w.Walks(m, tenant); got != want {
				t.Fatalf("round %d: Walks(%s) = %t, Of says %t", round, m.Addr, got, want)
			}
		}
		// A view missing some nodes: whoever walks in the full view and
		// is in the smaller one walks there too.
		sub := View{}
		for _, m := range v.Members {
			if rng.IntN(2) == 0 {
				sub.Members = append(sub.Members, m)
			}
		}
		ws := NewWalkers(sub, r)
		for _, m := range sub.Members {
			if w.Walks(m, tenant) && !ws.Walks(m, tenant) {
				t.Fatalf("round %d: %s walks %s among %d nodes but not among %d of them", round, m.Addr, tenant, n, len(sub.Members))
			}
		}
	}
}

// slowLister moves the clock on by d at every LIST, as a slow store does.
type slowLister struct {
	*memBucket
	clock *sweepClock
	d     time.Duration
}

func (s slowLister) List(ctx context.Context, prefix, startAfter string, limit int) ([]string, error) {
	s.clock.Advance(s.d)
	return s.memBucket.List(ctx, prefix, startAfter, limit)
}

// A tenant with overdue entries is listed at every sweep, even when its
// LIST takes time: the schedule counts a period from the sweep's start,
// not from the walk's, which would skip every other sweep.
func TestTickWithOverdueEntriesListsEverySweepOfASlowStore(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.Period, c.Concurrency = 10*time.Second, 1
		c.Tenants = StaticTenants{"t1", "t2"}
	})
	slow := slowLister{h.bucket, h.clock, 300 * time.Millisecond}
	h.loop.cfg.Lister = slow
	h.bucket.put(keysFrom("t1", "a", ago(time.Hour), 1)...)
	h.bucket.put(keysFrom("t2", "a", ago(time.Hour), 1)...)
	for i := range 5 {
		start := h.clock.Now()
		if n := h.tick(t, 0); n != 2 {
			t.Fatalf("sweep %d: %d LISTs, want 2 (an overdue entry remains in each tenant)", i, n)
		}
		// The next sweep comes a little early by the clock (the loop's
		// timer fires a period after its start, the walks began later).
		h.clock.Advance(10*time.Second - h.clock.Now().Sub(start) - 100*time.Millisecond)
	}
}
