package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/bucket/s3"
	"github.com/wasmkeep/alarms/clock"
	"github.com/wasmkeep/alarms/cluster"
	"github.com/wasmkeep/alarms/internal/fakeclock"
	"github.com/wasmkeep/alarms/internal/s3test"
)

var actorX = abi.ActorID{Tenant: "t1", Class: "counter", Name: "x"}

type testNode struct {
	*cluster.Leases
	holds *cluster.Holds
}

func startNode(t *testing.T, b bucket.Bucket, clk clock.Clock, id string) testNode {
	t.Helper()
	l := startManual(t, b, clk, id)
	return testNode{Leases: l, holds: cluster.NewHolds(b, "", l, nil)}
}

func acquire(t *testing.T, n testNode, id abi.ActorID) cluster.Hold {
	t.Helper()
	h, err := n.holds.Acquire(context.Background(), id)
	if err != nil {
		t.Fatalf("node %s acquiring %s: %v", n.NodeID(), id, err)
	}
	if h.Actor != id || h.NodeID != n.NodeID() || !n.holds.Valid(h) {
		t.Fatalf("node %s acquiring %s: got %+v, valid %v", n.NodeID(), id, h, n.holds.Valid(h))
	}
	return h
}

func wantHeldBy(t *testing.T, err error, node string) {
	t.Helper()
	var he *cluster.HeldElsewhereError
	if !errors.As(err, &he) || he.NodeID != node || he.Addr != node+".example:7000" {
		t.Fatalf("err = %v, want HeldElsewhereError naming node %s and its address", err, node)
	}
}

func wantLookup(t *testing.T, n testNode, id abi.ActorID, holder string) {
	t.Helper()
	info, held, err := n.holds.Lookup(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if holder == "" {
		if held {
			t.Fatalf("Lookup(%s) on %s = %+v, want not held", id, n.NodeID(), info)
		}
		return
	}
	if !held || info.ID != holder || info.Addr != holder+".example:7000" {
		t.Fatalf("Lookup(%s) on %s = %+v, %v; want held by %s", id, n.NodeID(), info, held, holder)
	}
}

// TestGenerationsGrow: every new hold of an actor, through releases, a clean
// shutdown and a crash, has a higher generation than the one before, and
// asking again for a hold this node has returns it unchanged.
func TestGenerationsGrow(t *testing.T) {
	onBoth(t, func(t *testing.T, b bucket.Bucket) {
		ctx := context.Background()
		clk := fakeclock.New(t0)
		a, o := startNode(t, b, clk, "a"), startNode(t, b, clk, "o")
		wantLookup(t, o, actorX, "")

		h1 := acquire(t, a, actorX)
		if h1.Generation != 1 {
			t.Fatalf("first hold: generation %d, want 1", h1.Generation)
		}
		if again := acquire(t, a, actorX); again != h1 {
			t.Fatalf("acquiring a held actor again gave %+v, want %+v", again, h1)
		}
		wantLookup(t, o, actorX, "a")
		wantLookup(t, a, actorX, "a")
		_, err := o.holds.Acquire(ctx, actorX)
		wantHeldBy(t, err, "a")

		if err := a.holds.Release(ctx, h1); err != nil {
			t.Fatal(err)
		}
		if a.holds.Valid(h1) {
			t.Fatal("a released hold is valid")
		}
		wantLookup(t, o, actorX, "")
		h2 := acquire(t, o, actorX)
		if h2.Generation != 2 {
			t.Fatalf("hold after a release: generation %d, want 2", h2.Generation)
		}
		if err := a.holds.Release(ctx, h1); !errors.Is(err, bucket.ErrPrecondition) {
			t.Fatalf("releasing a hold taken since: err = %v, want ErrPrecondition", err)
		}
		wantLookup(t, a, actorX, "o")

		if err := o.holds.Release(ctx, h2); err != nil {
			t.Fatal(err)
		}
		h3 := acquire(t, a, actorX)
		if h3.Generation != 3 {
			t.Fatalf("generation %d, want 3", h3.Generation)
		}

		// A clean shutdown frees the hold once the others read the leases
		// (before that, a take refuses on a lease it saw renewed within a
		// TTL, as its read of the record would have a moment before).
		if err := a.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if a.holds.Valid(h3) {
			t.Fatal("a closed node's hold is valid")
		}
		if err := o.RefreshNow(ctx); err != nil {
			t.Fatal(err)
		}
		h4 := acquire(t, o, actorX)
		if h4.Generation != 4 {
			t.Fatalf("hold after a clean shutdown: generation %d, want 4", h4.Generation)
		}

		// A crash frees it after TTL + Grace of watching.
		o.Kill()
		n := startNode(t, b, clk, "n")
		_, err = n.holds.Acquire(ctx, actorX)
		wantHeldBy(t, err, "o")
		// n renews every period meanwhile, as its loop would: a lapse of
		// its own lease would restart its watch.
		for waited := time.Duration(0); waited < cluster.DefaultTTL+cluster.DefaultGrace; waited += cluster.DefaultTTL / 3 {
			clk.Advance(cluster.DefaultTTL / 3)
			if err := n.RenewNow(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if h5 := acquire(t, n, actorX); h5.Generation != 5 {
			t.Fatalf("hold after a crash: generation %d, want 5", h5.Generation)
		}

		// Each node counted what it did: asking again for a hold it has is
		// no new hold; taking one from a node whose lease is gone (closed or
		// expired) is a takeover; a take that found the holder live is
		// refused.
		for _, c := range []struct {
			n    testNode
			want cluster.HoldStats
		}{
			{a, cluster.HoldStats{Taken: 2, Released: 1, ReleaseErrors: 1}},
			{o, cluster.HoldStats{Taken: 2, Takeovers: 1, Released: 1, Refused: 1}},
			{n, cluster.HoldStats{Taken: 1, Takeovers: 1, Refused: 1}},
		} {
			if got := c.n.holds.Stats(); got != c.want {
				t.Errorf("node %s: hold stats %+v, want %+v", c.n.NodeID(), got, c.want)
			}
		}
	})
}

// TestKilledHolderKeepsHoldsUntilTTLPlusGrace: a crashed node's holds stay
// with it until the taker has watched its lease unchanged for TTL + Grace,
// and the crashed node's own holds stop being valid strictly before.
func TestKilledHolderKeepsHoldsUntilTTLPlusGrace(t *testing.T) {
	onBoth(t, func(t *testing.T, b bucket.Bucket) {
		ctx := context.Background()
		clk := fakeclock.New(t0)
		a, o := startNode(t, b, clk, "a"), startNode(t, b, clk, "o")
		y := abi.ActorID{Tenant: "t1", Class: "counter", Name: "y\x00\xff"}
		hx, hy := acquire(t, a, actorX), acquire(t, a, y)
		clk.Advance(2 * time.Second)
		if err := a.RenewNow(ctx); err != nil {
			t.Fatal(err)
		}
		a.Kill()
		_, err := o.holds.Acquire(ctx, actorX) // first sight of a's last renewal
		wantHeldBy(t, err, "a")
		firstSight := clk.Now()

		step := 100 * time.Millisecond
		var stopped time.Time
		for {
			clk.Advance(step)
			if err := o.RenewNow(ctx); err != nil {
				t.Fatal(err)
			}
			valid := a.holds.Valid(hx)
			if valid != a.holds.Valid(hy) {
				t.Fatal("the killed node's two holds disagree")
			}
			if !valid && stopped.IsZero() {
				stopped = clk.Now()
			}
			h, err := o.holds.Acquire(ctx, actorX)
			if err != nil {
				wantHeldBy(t, err, "a")
				if clk.Now().Sub(firstSight) >= cluster.DefaultTTL+cluster.DefaultGrace {
					t.Fatalf("still held by the killed node %v after first sight", clk.Now().Sub(firstSight))
				}
				wantLookup(t, o, y, "a")
				continue
			}
			if waited := clk.Now().Sub(firstSight); waited < cluster.DefaultTTL+cluster.DefaultGrace {
				t.Fatalf("taken %v after first sight, before TTL + Grace", waited)
			}
			if valid || stopped.IsZero() || !stopped.Before(clk.Now()) {
				t.Fatalf("taken at %v while the killed node's holds were valid (stopped at %v)", clk.Now(), stopped)
			}
			if h.Generation != hx.Generation+1 {
				t.Fatalf("taken-over hold: generation %d, want %d", h.Generation, hx.Generation+1)
			}
			break
		}
		wantLookup(t, o, y, "") // the holder is known expired now
		if h := acquire(t, o, y); h.Generation != hy.Generation+1 {
			t.Fatalf("second actor: generation %d, want %d", h.Generation, hy.Generation+1)
		}
	})
}

// TestRacingNodesOneWins: two nodes acquiring the same actors at the same
// time: for each actor exactly one wins and the other learns who.
func TestRacingNodesOneWins(t *testing.T) {
	race := func(t *testing.T, nodes [2]testNode, actors []abi.ActorID, wantGen uint64) []cluster.Hold {
		type result struct {
			h   cluster.Hold
			err error
		}
		var results [20][2]result
		var wg sync.WaitGroup
		for i, id := range actors {
			for j, n := range nodes {
				wg.Add(1)
				go func() {
					defer wg.Done()
					h, err := n.holds.Acquire(context.Background(), id)
					results[i][j] = result{h, err}
				}()
			}
		}
		wg.Wait()
		var won []cluster.Hold
		for i, id := range actors {
			r := results[i]
			if (r[0].err == nil) == (r[1].err == nil) {
				t.Fatalf("actor %s: errors %v and %v, want exactly one winner", id, r[0].err, r[1].err)
			}
			w, l := 0, 1
			if r[0].err != nil {
				w, l = 1, 0
			}
			if r[w].h.Generation != wantGen || !nodes[w].holds.Valid(r[w].h) {
				t.Fatalf("actor %s: winner's hold %+v, want a valid one of generation %d", id, r[w].h, wantGen)
			}
			wantHeldBy(t, r[l].err, nodes[w].NodeID())
			won = append(won, r[w].h)
		}
		return won
	}
	run := func(t *testing.T, ba, bo bucket.Bucket) {
		ctx := context.Background()
		// The real clock: leases stay valid for 9 s, far longer than the race.
		nodes := [2]testNode{startNode(t, ba, clock.System{}, "a"), startNode(t, bo, clock.System{}, "o")}
		var actors []abi.ActorID
		for i := range 20 {
			actors = append(actors, abi.ActorID{Tenant: "t1", Class: "counter", Name: fmt.Sprintf("actor-%02d", i)})
		}
		for _, h := range race(t, nodes, actors, 1) {
			n := nodes[0]
			if h.NodeID == nodes[1].NodeID() {
				n = nodes[1]
			}
			if err := n.holds.Release(ctx, h); err != nil {
				t.Fatal(err)
			}
		}
		race(t, nodes, actors, 2)
	}
	t.Run("mem", func(t *testing.T) {
		b := bucket.NewMem()
		run(t, b, b)
	})
	t.Run("s3", func(t *testing.T) {
		srv := s3test.Start(t)
		run(t, srv.Bucket, srv.NewClient(t))
	})
}

// faultyLeaseBucket fails PUTs to one node's lease object on demand.
func faultyLeaseBucket(key string, fail *bool, mu *sync.Mutex) *bucket.Mem {
	m := bucket.NewMem()
	m.Faults = func(op bucket.Op) bucket.Fault {
		mu.Lock()
		defer mu.Unlock()
		if *fail && op.Kind == bucket.OpPut && op.Key == key {
			return bucket.Fault{Err: errors.New("injected: connection reset")}
		}
		return bucket.Fault{}
	}
	return m
}

// TestLapsedLeaseVoidsHolds: renewals that fail until the last confirmed
// window ends make the node's holds invalid; while the lease is not valid
// nothing is acquired (not even a request is sent); once it is valid again,
// the old holds stay void and the actor is taken anew under a higher
// generation.
func TestLapsedLeaseVoidsHolds(t *testing.T) {
	ctx := context.Background()
	clk := fakeclock.New(t0)
	var mu sync.Mutex
	fail := false
	m := faultyLeaseBucket("cluster/nodes/a", &fail, &mu)
	b := bucket.NewCounting(m)
	a := startNode(t, b, clk, "a")
	h1 := acquire(t, a, actorX)

	mu.Lock()
	fail = true
	mu.Unlock()
	clk.Advance(time.Second)
	if err := a.RenewNow(ctx); err == nil {
		t.Fatal("renewal succeeded through a failing store")
	}
	if !a.holds.Valid(h1) {
		t.Fatal("a failed renewal voided a hold within the last confirmed window")
	}
	clk.Advance(8 * time.Second) // t0 + 9 s: the creating PUT's window has ended
	if a.holds.Valid(h1) {
		t.Fatal("a hold is valid after the last confirmed window ended")
	}
	b.Reset()
	_, err := a.holds.Acquire(ctx, actorX)
	if err == nil || !strings.Contains(err.Error(), "not valid") || !strings.Contains(err.Error(), actorX.String()) {
		t.Fatalf("acquiring with a lapsed lease: err = %v, want one naming the actor and the lease", err)
	}
	if c := b.Counts(); c != (bucket.Counts{}) {
		t.Fatalf("acquiring with a lapsed lease sent requests: %+v", c)
	}

	mu.Lock()
	fail = false
	mu.Unlock()
	if err := a.RenewNow(ctx); err != nil {
		t.Fatal(err)
	}
	if !a.Valid() || a.holds.Valid(h1) {
		t.Fatalf("after renewing again: lease valid %v (want true), old hold valid %v (want false)", a.Valid(), a.holds.Valid(h1))
	}
	h2 := acquire(t, a, actorX)
	if h2.Generation != h1.Generation+1 {
		t.Fatalf("re-taken hold: generation %d, want %d", h2.Generation, h1.Generation+1)
	}
	if err := a.holds.Release(ctx, h1); !errors.Is(err, bucket.ErrPrecondition) {
		t.Fatalf("releasing the void hold: err = %v, want ErrPrecondition", err)
	}
	if !a.holds.Valid(h2) {
		t.Fatal("releasing a void hold disturbed the current one")
	}
}

// TestLostLeaseStopsHolds: once the node's lease object was replaced by
// someone else, its holds are void and it acquires nothing more.
func TestLostLeaseStopsHolds(t *testing.T) {
	onBoth(t, func(t *testing.T, b bucket.Bucket) {
		ctx := context.Background()
		clk := fakeclock.New(t0)
		a := startNode(t, b, clk, "a")
		h := acquire(t, a, actorX)
		if _, err := b.Put(ctx, "cluster/nodes/a", []byte(`{"node_id":"someone else","seq":9}`), bucket.Cond{}); err != nil {
			t.Fatal(err)
		}
		if err := a.RenewNow(ctx); !errors.Is(err, cluster.ErrLeaseLost) {
			t.Fatalf("renewal: err = %v, want ErrLeaseLost", err)
		}
		if a.holds.Valid(h) {
			t.Fatal("hold valid after the lease was lost")
		}
		if _, err := a.holds.Acquire(ctx, abi.ActorID{Tenant: "t1", Class: "counter", Name: "z"}); err == nil {
			t.Fatal("acquired after the lease was lost")
		}
	})
}

// TestHoldRequestCounts: what each operation costs, exactly.
func TestHoldRequestCounts(t *testing.T) {
	ctx := context.Background()
	clk := fakeclock.New(t0)
	b := bucket.NewCounting(bucket.NewMem())
	a, o := startNode(t, b, clk, "a"), startNode(t, b, clk, "o")
	step := func(name string, want bucket.Counts, f func()) {
		t.Helper()
		b.Reset()
		f()
		if got := b.Counts(); got != want {
			t.Fatalf("%s: requests %+v, want %+v", name, got, want)
		}
	}
	var h cluster.Hold
	step("acquire a free actor", bucket.Counts{Get: 1, Put: 1}, func() { h = acquire(t, a, actorX) })
	step("acquire a held actor again", bucket.Counts{Get: 1}, func() { acquire(t, a, actorX) })
	step("acquire an actor held by a live node", bucket.Counts{Get: 2}, func() {
		_, err := o.holds.Acquire(ctx, actorX)
		wantHeldBy(t, err, "a")
	})
	step("lookup", bucket.Counts{Get: 1}, func() { wantLookup(t, o, actorX, "a") })
	step("valid", bucket.Counts{}, func() {
		if !a.holds.Valid(h) {
			t.Fatal("not valid")
		}
	})
	step("release", bucket.Counts{Put: 1}, func() {
		if err := a.holds.Release(ctx, h); err != nil {
			t.Fatal(err)
		}
	})
	// A release that uploaded nothing names what it found: the next take
	// reads whether the released hold's snapshot exists after all (one
	// GET, here not found, whose body the restore would have used),
	// rather than trust the release alone.
	step("acquire a released actor", bucket.Counts{Get: 2, Put: 1}, func() { h = acquire(t, o, actorX) })
	r := cluster.NewReplica(b, cluster.DefaultPrefix)
	var snap cluster.Snapshot
	step("upload", bucket.Counts{Put: 1}, func() {
		var err error
		if snap, err = r.Upload(ctx, actorX, h.Generation, "", []byte("db")); err != nil {
			t.Fatal(err)
		}
	})
	step("upload again", bucket.Counts{Put: 1}, func() {
		var err error
		if snap, err = r.Upload(ctx, actorX, h.Generation, snap.ETag, []byte("db2")); err != nil {
			t.Fatal(err)
		}
	})
	h = o.holds.Uploaded(h, snap)
	step("release after an upload", bucket.Counts{Put: 1}, func() {
		if err := o.holds.Release(ctx, h); err != nil {
			t.Fatal(err)
		}
	})
	// The release named the hold's own snapshot: nothing more to read.
	step("acquire an actor released after an upload", bucket.Counts{Get: 1, Put: 1}, func() {
		if got := acquire(t, a, actorX).State; got != snap {
			t.Fatalf("the take names state %+v, want %+v", got, snap)
		}
	})
}

// TestRetriedAcquireThatLanded: on a real server, a take whose reply is lost
// after it was applied is retried by the client and fails its condition; the
// node reads the record back, finds its own write and holds the actor.
func TestRetriedAcquireThatLanded(t *testing.T) {
	srv := s3test.Start(t)
	p := s3test.NewProxy(t, srv.Endpoint)
	b := srv.NewClient(t, s3.WithEndpoint(p.URL))
	clk := fakeclock.New(t0)
	a, o := startNode(t, b, clk, "a"), startNode(t, srv.Bucket, clk, "o")
	p.FailNext("PUT", 1, s3test.DropAfterForward)
	before := p.Count("PUT")
	h := acquire(t, a, actorX)
	if h.Generation != 1 {
		t.Fatalf("generation %d, want 1", h.Generation)
	}
	if n := p.Count("PUT") - before; n != 2 {
		t.Fatalf("PUTs through the proxy = %d, want 2 (the dropped one and its retry)", n)
	}
	_, err := o.holds.Acquire(context.Background(), actorX)
	wantHeldBy(t, err, "a")
}

// TestBadActorID: actor IDs that cannot form a key are refused, naming the
// actor.
func TestBadActorID(t *testing.T) {
	clk := fakeclock.New(t0)
	a := startNode(t, bucket.NewMem(), clk, "a")
	for _, id := range []abi.ActorID{
		{Tenant: "", Class: "c", Name: "n"},
		{Tenant: "t/u", Class: "c", Name: "n"},
		{Tenant: "t", Class: "c/d", Name: "n"},
		{Tenant: "t", Class: "c", Name: ""},
	} {
		if _, err := a.holds.Acquire(context.Background(), id); err == nil || !strings.Contains(err.Error(), "actor") {
			t.Errorf("Acquire(%+v): err = %v, want one naming the actor", id, err)
		}
	}
}

// TestHoldKeyLayout: records live at <prefix>holds/<tenant>/<class>/<hex name>,
// and carry the format version this build writes, first.
func TestHoldKeyLayout(t *testing.T) {
	ctx := context.Background()
	clk := fakeclock.New(t0)
	m := bucket.NewMem()
	l := startManual(t, m, clk, "a", func(c *cluster.LeaseConfig) { c.Prefix = "p/" })
	hs := cluster.NewHolds(m, "p/", l, nil)
	id := abi.ActorID{Tenant: "t1", Class: "counter", Name: "a/b"}
	if _, err := hs.Acquire(ctx, id); err != nil {
		t.Fatal(err)
	}
	want := "p/holds/t1/counter/612f62"
	if got := hs.Key(id); got != want {
		t.Fatalf("Key = %q, want %q", got, want)
	}
	body, _, ok := m.Object(want)
	if !ok || string(body) != `{"format":1,"node_id":"a","generation":1,"addr":"a.example:7000","instance":"`+l.Instance()+`","state":"none","lease_seq":1}` || l.Instance() == "" {
		t.Fatalf("record %q = %s, %v", want, body, ok)
	}
	if _, _, ok := m.Object("p/nodes/a"); !ok {
		t.Fatal("no lease at p/nodes/a")
	}
}

// TestABucketOutageTakesNothingOver: when the bucket fails every request
// for a minute, every node's lease lapses. Back, a node must not judge the
// others' leases expired from the sight it had before the outage: their
// holders could not renew either, and do as soon as the bucket answers.
// It watches them afresh for TTL + Grace from its return (and counts
// them live meanwhile), so holds go back to their
// holders (who have the actors' databases) instead of every node taking
// over every other node's actors at once. A holder that does not come
// back is taken over once that watch has run, as before.
func TestABucketOutageTakesNothingOver(t *testing.T) {
	ctx := context.Background()
	clk := fakeclock.New(t0)
	m := bucket.NewMem()
	down := false
	m.Faults = func(bucket.Op) bucket.Fault {
		if down {
			return bucket.Fault{Err: errors.New("injected: connection refused")}
		}
		return bucket.Fault{}
	}
	a, b := startNode(t, m, clk, "a"), startNode(t, m, clk, "b")
	actorY := abi.ActorID{Tenant: "t1", Class: "counter", Name: "y"}
	acquire(t, a, actorX)
	acquire(t, a, actorY)
	tick := func(nodes ...testNode) {
		clk.Advance(cluster.DefaultTTL / 3)
		for _, n := range nodes {
			_ = n.RenewNow(ctx)
			_ = n.RefreshNow(ctx)
		}
	}
	tick(a, b)
	tick(a, b)
	if !b.ValidAgainSince().IsZero() {
		t.Fatal("ValidAgainSince is set before any lapse")
	}

	down = true
	for range 18 { // a minute
		tick(a, b)
	}
	if a.Valid() || b.Valid() {
		t.Fatal("a lease is valid after a minute of failed renewals")
	}
	down = false
	// b is back first: it renews and reads a's lease, which stood unchanged
	// through the outage, before a renews.
	backAt := clk.Now()
	if err := b.RenewNow(ctx); err != nil || !b.Valid() {
		t.Fatalf("b renewing after the outage: %v, valid %v", err, b.Valid())
	}
	if got := b.ValidAgainSince(); !got.Equal(backAt) {
		t.Fatalf("ValidAgainSince after the outage = %v, want %v (the renewal that began the new epoch)", got, backAt)
	}
	// Before any read: a counts as live again, so b's first sweep does
	// not take every actor as its own shard.
	if !containsNode(b.Live(), "a") {
		t.Fatalf("b's live nodes right after the outage: %v; want a among them until a read shows its lease standing", b.Live())
	}
	if err := b.RefreshNow(ctx); err != nil {
		t.Fatal(err)
	}
	if b.Expired("a") {
		t.Fatal("b judged a's lease expired at its first read after the outage, from its sight before it")
	}
	_, err := b.holds.Acquire(ctx, actorX)
	wantHeldBy(t, err, "a")
	// a renews and takes its actor back in its new epoch.
	if err := a.RenewNow(ctx); err != nil || !a.Valid() {
		t.Fatalf("a renewing after the outage: %v, valid %v", err, a.Valid())
	}
	acquire(t, a, actorX)
	tick(a, b)
	_, err = b.holds.Acquire(ctx, actorX)
	wantHeldBy(t, err, "a")

	// a dies now: b takes its actor over after watching its last version
	// for TTL + Grace, as any taker does.
	a.Kill()
	for waited := time.Duration(0); waited < cluster.DefaultTTL+cluster.DefaultGrace; waited += cluster.DefaultTTL / 3 {
		_, err = b.holds.Acquire(ctx, actorY)
		wantHeldBy(t, err, "a")
		tick(b)
	}
	if !b.Expired("a") {
		t.Fatal("b does not judge a dead node's lease expired after watching it for TTL + Grace")
	}
	acquire(t, b, actorY)
}
