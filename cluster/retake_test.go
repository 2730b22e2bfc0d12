package cluster_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/cluster"
	"github.com/wasmkeep/alarms/internal/fakeclock"
)

// lapseAndRecover makes a's lease lapse (its renewals fail past the last
// confirmed window) and then valid again in a new epoch.
func lapseAndRecover(t *testing.T, a testNode, clk *fakeclock.Clock, fail *bool, mu *sync.Mutex) {
	t.Helper()
	mu.Lock()
	*fail = true
	mu.Unlock()
	clk.Advance(9 * time.Second)
	_ = a.RenewNow(context.Background())
	if a.Valid() {
		t.Fatal("the lease is still valid after its window ended")
	}
	mu.Lock()
	*fail = false
	mu.Unlock()
	if err := a.RenewNow(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !a.Valid() {
		t.Fatal("the lease is not valid again after a renewal")
	}
}

// After a lapse, a hold nobody took meanwhile is taken again with one
// conditional PUT of its record (and a HEAD of its own snapshot's key when
// it recorded no upload), under the next generation, noting the state it
// knew: not a release, a GET and a PUT.
func TestRetakeAfterALapseIsOneConditionalWrite(t *testing.T) {
	for _, tc := range []struct {
		name               string
		uploaded, recorded bool
	}{
		{"the hold had uploaded", true, true},
		{"the hold had not uploaded", false, false},
		{"the hold's upload landed but its reply was lost", true, false},
	} {
		uploaded := tc.uploaded
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			clk := fakeclock.New(t0)
			var mu sync.Mutex
			fail := false
			m := faultyLeaseBucket("cluster/nodes/a", &fail, &mu)
			b := bucket.NewCounting(m)
			a := startNode(t, b, clk, "a")
			h1 := acquire(t, a, actorX)
			r := cluster.NewReplica(b, cluster.DefaultPrefix)
			want := cluster.Snapshot{}
			if uploaded {
				key := r.Key(actorX, h1.Generation, 0)
				etag, err := b.Put(ctx, key, []byte("db"), bucket.Cond{})
				if err != nil {
					t.Fatal(err)
				}
				want = cluster.Snapshot{Key: key, Generation: h1.Generation, ETag: etag}
				if tc.recorded {
					h1 = a.holds.Uploaded(h1, want)
				}
			}
			lapseAndRecover(t, a, clk, &fail, &mu)
			if a.holds.Valid(h1) {
				t.Fatal("the hold of the earlier epoch is valid")
			}
			b.Reset()
			h2, err := a.holds.Retake(ctx, h1)
			if err != nil {
				t.Fatalf("Retake: %v", err)
			}
			wantCounts := bucket.Counts{Put: 1}
			if !tc.recorded {
				wantCounts.Head = 1
			}
			if c := b.Counts(); c.Put != wantCounts.Put || c.Get != 0 || c.Head+c.Get != wantCounts.Head || c.List != 0 {
				t.Fatalf("Retake sent %+v, want one conditional PUT of the record (and %d HEAD)", c, wantCounts.Head)
			}
			if h2.Generation != h1.Generation+1 || !a.holds.Valid(h2) || h2.State.Key != want.Key {
				t.Fatalf("retaken hold %+v (valid %v), want generation %d noting %q", h2, a.holds.Valid(h2), h1.Generation+1, want.Key)
			}
			rec, ok, err := cluster.ReadOwnership(ctx, m, "", actorX)
			if err != nil || !ok || rec.NodeID != "a" || rec.Generation != h2.Generation {
				t.Fatalf("the record after Retake: %+v (%v, %v), want node a, generation %d", rec, ok, err, h2.Generation)
			}
			// What the next holder reads as the state is the one the hold knew.
			if st, _, err := cluster.ReadState(ctx, m, "", actorX); err != nil || st.Key != want.Key {
				t.Fatalf("the state the records name: %q (%v), want %q", st.Key, err, want.Key)
			}
		})
	}
}

// A hold another node took over during the lapse is not taken back: the
// conditional write fails, the record stays the other node's, and the
// error names the holder.
func TestRetakeOfAHoldTakenOverFails(t *testing.T) {
	ctx := context.Background()
	clk := fakeclock.New(t0)
	var mu sync.Mutex
	fail := false
	m := faultyLeaseBucket("cluster/nodes/a", &fail, &mu)
	a := startNode(t, m, clk, "a")
	o := startNode(t, m, clk, "o")
	h1 := acquire(t, a, actorX)
	mu.Lock()
	fail = true
	mu.Unlock()
	// o watches a's lease stand unchanged for its TTL and grace.
	if _, err := o.holds.Acquire(ctx, actorX); err == nil {
		t.Fatal("o took the actor while a's lease was live")
	}
	for waited := time.Duration(0); waited < cluster.DefaultTTL+cluster.DefaultGrace; waited += cluster.DefaultTTL / 3 {
		clk.Advance(cluster.DefaultTTL / 3)
		if err := o.RenewNow(ctx); err != nil {
			t.Fatal(err)
		}
	}
	ho := acquire(t, o, actorX)
	mu.Lock()
	fail = false
	mu.Unlock()
	if err := a.RenewNow(ctx); err != nil {
		t.Fatal(err)
	}
	_, err := a.holds.Retake(ctx, h1)
	var held *cluster.HeldElsewhereError
	if !errors.As(err, &held) || held.NodeID != "o" {
		t.Fatalf("Retake of a hold o took over: %v, want it held by o", err)
	}
	rec, _, _ := cluster.ReadOwnership(ctx, m, "", actorX)
	if rec.NodeID != "o" || rec.Generation != ho.Generation {
		t.Fatalf("the record after the failed Retake: %+v, want o's generation %d", rec, ho.Generation)
	}
	// A hold this node released is not taken back either.
	h3 := acquire(t, o, actorX)
	if err := o.holds.Release(ctx, h3); err != nil {
		t.Fatal(err)
	}
	if _, err := o.holds.Retake(ctx, h3); !errors.Is(err, bucket.ErrPrecondition) {
		t.Fatalf("Retake of a released hold: %v, want ErrPrecondition", err)
	}
}

// A take refused because a live node holds the actor is remembered for a
// lease TTL: Refused answers without a request, until the holder's lease
// is seen removed, the TTL has passed, Doubt drops it, or this node takes
// the actor.
func TestARefusedTakeIsRememberedForALeaseTTL(t *testing.T) {
	ctx := context.Background()
	clk := fakeclock.New(t0)
	m := bucket.NewMem()
	b := bucket.NewCounting(m)
	a := startNode(t, b, clk, "a")
	o := startNode(t, b, clk, "o")
	acquire(t, a, actorX)
	if held := o.holds.Refused(actorX); held != nil {
		t.Fatalf("Refused before any take: %v", held)
	}
	if _, err := o.holds.Acquire(ctx, actorX); err == nil {
		t.Fatal("o took an actor a holds")
	}
	b.Reset()
	held := o.holds.Refused(actorX)
	if held == nil || held.NodeID != "a" || held.Addr != "a.example:7000" {
		t.Fatalf("Refused after a refusal: %v, want held by a at a.example:7000", held)
	}
	if c := b.Counts(); c != (bucket.Counts{}) {
		t.Fatalf("Refused sent requests: %+v", c)
	}
	if got := o.holds.Stats().RefusedFromMemory; got != 1 {
		t.Errorf("RefusedFromMemory %d, want 1", got)
	}
	o.holds.Doubt(actorX)
	if held := o.holds.Refused(actorX); held != nil {
		t.Fatalf("Refused after Doubt: %v", held)
	}
	if _, err := o.holds.Acquire(ctx, actorX); err == nil {
		t.Fatal("o took an actor a holds")
	}
	clk.Advance(cluster.DefaultTTL)
	if err := o.RenewNow(ctx); err != nil {
		t.Fatal(err)
	}
	if held := o.holds.Refused(actorX); held != nil {
		t.Fatalf("Refused a lease TTL after the refusal: %v", held)
	}
	if _, err := o.holds.Acquire(ctx, actorX); err == nil {
		t.Fatal("o took an actor a holds")
	}
	// a shuts down cleanly: once o sees its lease removed, o takes the
	// actor at once.
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := o.RefreshNow(ctx); err != nil {
		t.Fatal(err)
	}
	if held := o.holds.Refused(actorX); held != nil {
		t.Fatalf("Refused after the holder's lease was seen removed: %v", held)
	}
	acquire(t, o, actorX)
	if held := o.holds.Refused(actorX); held != nil {
		t.Fatalf("Refused of an actor this node holds: %v", held)
	}
}
