package cluster_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/cluster"
	"github.com/wasmkeep/alarms/internal/fakeclock"
)

// countedPair starts nodes a and o on b, counting their requests, on a
// fake clock.
func countedPair(t *testing.T, b bucket.Bucket) (*fakeclock.Clock, *bucket.Counting, testNode, testNode) {
	clk := fakeclock.New(t0)
	c := bucket.NewCounting(b)
	return clk, c, startNode(t, c, clk, "a"), startNode(t, c, clk, "o")
}

// A takeover of a dead node's actor, once this node has judged that
// node's lease expired, is the record read, the dead hold's snapshot key
// read and the record written: the record notes the holder's lease version,
// so the lease is not read again for each of the actors the dead node
// leaves (a drain of thousands of them saves a GET each).
func TestATakeoverOnAnExpiryAlreadyJudgedReadsNoLease(t *testing.T) {
	onBoth(t, func(t *testing.T, b bucket.Bucket) {
		ctx := context.Background()
		clk, c, a, o := countedPair(t, b)
		ha := acquire(t, a, actorX)
		rec, _, err := cluster.ReadOwnership(ctx, b, "", actorX)
		if err != nil || rec.LeaseSeq == 0 {
			t.Fatalf("the record of a's hold: %+v (%v), want the lease version it knew noted", rec, err)
		}
		a.Kill()
		expire(t, clk, o, "a")

		c.Reset()
		h, err := o.holds.Acquire(ctx, actorX)
		if err != nil {
			t.Fatalf("taking over from a judged expired: %v", err)
		}
		if got := c.Counts(); got.Get != 2 || got.Put != 1 || got.List != 0 || got.Head != 0 {
			t.Fatalf("the takeover sent %+v; want 2 GETs (the record, a's snapshot key) and one PUT, no read of a's lease", got)
		}
		if st := o.holds.Stats(); st.Takeovers != 1 || st.LeaseReadsSkipped != 1 {
			t.Fatalf("stats %+v, want one takeover that read no lease", st)
		}
		if h.Generation != ha.Generation+1 || a.holds.Valid(ha) {
			t.Fatalf("taken over at generation %d (want %d); a's hold valid %v", h.Generation, ha.Generation+1, a.holds.Valid(ha))
		}
	})
}

// The judgement covers only the epochs it ended: a node whose lease lapsed
// (judged expired by another) and came back writes its later holds' records
// with a later lease version, and those are not taken on the old
// judgement, even before the other node has read the new version: the
// take reads the lease and finds it live. Its holds of the old epoch are
// taken at once, without that read.
func TestAHoldOfALaterEpochIsNotTakenOnAnEarlierExpiry(t *testing.T) {
	ctx := context.Background()
	clk := fakeclock.New(t0)
	var mu sync.Mutex
	fail := false
	m := faultyLeaseBucket("cluster/nodes/a", &fail, &mu)
	a := startNode(t, m, clk, "a")
	o := startNode(t, m, clk, "o")
	actorY := abi.ActorID{Tenant: "t1", Class: "counter", Name: "y"}
	hx := acquire(t, a, actorX)
	mu.Lock()
	fail = true
	mu.Unlock()
	expire(t, clk, o, "a")
	// a's renewals work again: a new epoch, whose holds are valid.
	mu.Lock()
	fail = false
	mu.Unlock()
	if err := a.RenewNow(ctx); err != nil {
		t.Fatal(err)
	}
	if a.holds.Valid(hx) || !a.Valid() {
		t.Fatalf("after the lapse: old hold valid %v, lease valid %v; want the hold void and the lease valid", a.holds.Valid(hx), a.Valid())
	}
	hy := acquire(t, a, actorY)
	if !o.Expired("a") {
		t.Fatal("node o read a's new version; the test needs its old judgement")
	}

	// The old epoch's hold is taken on the judgement, without a read.
	h := acquire(t, o, actorX)
	if st := o.holds.Stats(); h.Generation != hx.Generation+1 || st.LeaseReadsSkipped != 1 {
		t.Fatalf("o took the old epoch's hold at generation %d (want %d), stats %+v (want a take that read no lease)", h.Generation, hx.Generation+1, st)
	}
	// The new epoch's is not: the take reads a's lease, a new version.
	_, err := o.holds.Acquire(ctx, actorY)
	wantHeldBy(t, err, "a")
	if st := o.holds.Stats(); st.Refused != 1 {
		t.Fatalf("stats %+v, want the take refused on the lease it read counted", st)
	}
	if !a.holds.Valid(hy) {
		t.Fatal("a's hold of the new epoch is no longer valid")
	}
	if rec, _, _ := cluster.ReadOwnership(ctx, m, "", actorY); rec.NodeID != "a" || rec.Generation != hy.Generation {
		t.Fatalf("the record of a's new hold: %+v, want a's generation %d", rec, hy.Generation)
	}
}

// A later process under the node ID notes its own lease's versions, whose
// sequence numbers start again: a record of it is not taken on the
// judgement of the earlier process's lease, however small the version it
// notes.
func TestALaterProcessesHoldIsNotTakenOnTheEarlierOnesExpiry(t *testing.T) {
	ctx := context.Background()
	clk := fakeclock.New(t0)
	b := bucket.NewMem()
	a1 := startNode(t, b, clk, "a")
	o := startNode(t, b, clk, "o")
	acquire(t, a1, actorX)
	for range 5 { // a1's lease version is a few renewals on
		clk.Advance(cluster.DefaultTTL / 3)
		if err := a1.RenewNow(ctx); err != nil {
			t.Fatal(err)
		}
	}
	a1.Kill()
	expire(t, clk, o, "a")
	last := clk.Now()
	s := startDriven(t, b, clk, "a", func() { // o renews and reads nothing
		if clk.Now().Sub(last) >= cluster.DefaultTTL/3 {
			if err := o.RenewNow(ctx); err != nil {
				t.Errorf("node o's renewal: %v", err)
			}
			last = clk.Now()
		}
	})
	if s.err != nil {
		t.Fatal(s.err)
	}
	a2 := testNode{Leases: s.l, holds: cluster.NewHolds(b, "", s.l, nil)}
	actorY := abi.ActorID{Tenant: "t1", Class: "counter", Name: "y"}
	hy := acquire(t, a2, actorY)
	if rec, _, _ := cluster.ReadOwnership(ctx, b, "", actorY); rec.LeaseSeq == 0 || rec.LeaseSeq > 5 {
		t.Fatalf("the later process's record notes lease version %d; the test needs one the earlier process had passed", rec.LeaseSeq)
	}
	if !o.Expired("a") {
		t.Fatal("node o read the later process's lease; the test needs its old judgement")
	}
	_, err := o.holds.Acquire(ctx, actorY)
	wantHeldBy(t, err, "a")
	if !a2.holds.Valid(hy) {
		t.Fatal("the later process's hold is no longer valid")
	}
}

// A take of an actor whose holder this node's readings of the leases saw
// renew within a TTL is refused on the record alone (one GET): a read of
// the lease could not find it expired. Once the holder's lease has not
// changed for a TTL, the take reads it again, and so takes the actor once
// the lease has stood for TTL + Grace.
func TestARefusalOnALeaseSeenRenewedReadsNoLease(t *testing.T) {
	onBoth(t, func(t *testing.T, b bucket.Bucket) {
		ctx := context.Background()
		clk, c, a, o := countedPair(t, b)
		acquire(t, a, actorX)
		if err := o.RefreshNow(ctx); err != nil {
			t.Fatal(err)
		}
		c.Reset()
		_, err := o.holds.Acquire(ctx, actorX)
		wantHeldBy(t, err, "a")
		if got := c.Counts(); got.Get != 1 || got.Put != 0 || got.List != 0 || got.Head != 0 {
			t.Fatalf("the refused take sent %+v, want the record's GET alone", got)
		}
		if st := o.holds.Stats(); st.RefusedWatched != 1 || st.Refused != 0 {
			t.Fatalf("stats %+v, want one take refused on the watch", st)
		}

		// a stops renewing: a TTL on, the take reads the lease; TTL +
		// Grace on, it takes the actor.
		a.Kill()
		for range 3 {
			clk.Advance(cluster.DefaultTTL / 3)
			if err := o.RenewNow(ctx); err != nil {
				t.Fatal(err)
			}
		}
		clk.Advance(time.Millisecond) // a whole TTL
		o.holds.Doubt(actorX)         // the refusal remembered for client requests
		c.Reset()
		_, err = o.holds.Acquire(ctx, actorX)
		wantHeldBy(t, err, "a")
		if got := c.Counts(); got.Get != 2 {
			t.Fatalf("a take a TTL after the holder's last renewal sent %+v, want the record's and the lease's GETs", got)
		}
		expire(t, clk, o, "a")
		acquire(t, o, actorX)
	})
}
