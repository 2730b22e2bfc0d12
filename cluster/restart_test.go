package cluster_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/cluster"
	"github.com/wasmkeep/alarms/internal/fakeclock"
)

type started struct {
	l   *cluster.Leases
	err error
	at  time.Time // the fake time StartLeases returned at
}

// startDriven starts a lease for id in the background and drives the fake
// clock 100 ms at a time until StartLeases returns or a minute of fake time
// has passed; each step calls every() first (a live node renewing).
func startDriven(t *testing.T, b bucket.Bucket, clk *fakeclock.Clock, id string, every func()) started {
	t.Helper()
	done := make(chan started, 1)
	go func() {
		l, err := cluster.StartLeases(context.Background(), cluster.LeaseConfig{
			Bucket: b, NodeID: id, Addr: id + ".example:7000", Clock: clk, Manual: true})
		done <- started{l: l, err: err, at: clk.Now()}
	}()
	limit := clk.Now().Add(time.Minute)
	for {
		select {
		case s := <-done:
			return s
		case <-time.After(time.Millisecond):
		}
		if clk.Now().After(limit) {
			t.Fatalf("StartLeases(%s) still waiting after a minute of fake time", id)
		}
		if every != nil {
			every()
		}
		clk.Advance(100 * time.Millisecond)
	}
}

// A node restarted under its name after a crash takes the name back, but
// only once its old lease has expired by the rule every node uses (the
// same version watched for TTL + Grace): never while the old process could
// still act. Its old holds are void for everyone: another node takes one
// at once, with a higher generation, and so does the restarted node.
func TestRestartTakesTheNameBackOnceTheOldLeaseExpired(t *testing.T) {
	onBoth(t, func(t *testing.T, b bucket.Bucket) {
		ctx := context.Background()
		clk := fakeclock.New(t0)
		a1 := startNode(t, b, clk, "a")
		o := startNode(t, b, clk, "o")
		actorY := abi.ActorID{Tenant: "t1", Class: "counter", Name: "y"}
		hx := acquire(t, a1, actorX)
		hy := acquire(t, a1, actorY)
		a1.Kill()
		killed := clk.Now()

		last := clk.Now()
		s := startDriven(t, b, clk, "a", func() { // o stays alive
			if clk.Now().Sub(last) >= 3*time.Second {
				if err := o.RenewNow(ctx); err != nil {
					t.Errorf("node o's renewal: %v", err)
				}
				last = clk.Now()
			}
		})
		if s.err != nil {
			t.Fatalf("restart of node a after its lease expired: %v", s.err)
		}
		if waited := s.at.Sub(killed); waited < cluster.DefaultTTL+cluster.DefaultGrace {
			t.Fatalf("the restarted node took its name back %v after the crash, before TTL + Grace (%v)", waited, cluster.DefaultTTL+cluster.DefaultGrace)
		}
		if a1.Valid() || a1.holds.Valid(hx) {
			t.Fatal("the crashed process is still valid when its name is taken back")
		}
		a2 := testNode{Leases: s.l, holds: cluster.NewHolds(b, "", s.l, nil)}
		if !a2.Valid() {
			t.Fatal("the restarted node's lease is not valid")
		}

		if err := o.RefreshNow(ctx); err != nil {
			t.Fatal(err)
		}
		if !containsNode(o.Live(), "a") || o.Expired("a") {
			t.Fatalf("other node: Live %v, Expired(a) %v; want a live again", o.Live(), o.Expired("a"))
		}
		wantLookup(t, o, actorX, "")
		if h := acquire(t, o, actorX); h.Generation != hx.Generation+1 {
			t.Fatalf("the other node took the old hold at generation %d, want %d", h.Generation, hx.Generation+1)
		}
		if h := acquire(t, a2, actorY); h.Generation != hy.Generation+1 {
			t.Fatalf("the restarted node took its old hold at generation %d, want %d", h.Generation, hy.Generation+1)
		}
		// The new process's holds are held: nobody takes them.
		_, err := o.holds.Acquire(ctx, actorY)
		wantHeldBy(t, err, "a")
		wantLookup(t, o, actorY, "a")
	})
}

// TestNodeIDInUse: a second process cannot take a node ID whose process is
// alive: it watches the lease, sees it renewed, and gives up; the live
// process keeps its lease.
func TestNodeIDInUse(t *testing.T) {
	onBoth(t, func(t *testing.T, b bucket.Bucket) {
		ctx := context.Background()
		clk := fakeclock.New(t0)
		a := startManual(t, b, clk, "a")
		last := clk.Now()
		s := startDriven(t, b, clk, "a", func() {
			if clk.Now().Sub(last) >= 3*time.Second {
				if err := a.RenewNow(ctx); err != nil {
					t.Errorf("the live process's renewal: %v", err)
				}
				last = clk.Now()
			}
		})
		if s.err == nil || !strings.Contains(s.err.Error(), "in use by a live process") {
			t.Fatalf("second start of node a: err = %v, want in use by a live process", s.err)
		}
		if err := a.RenewNow(ctx); err != nil || !a.Valid() {
			t.Fatalf("the live process after the refused start: renewal %v, valid %v", err, a.Valid())
		}
	})
}

// A node that shut down cleanly (its lease deleted) and starts again under
// its name is a live node to the others again, not one they saw go for
// good: its new holds are its own.
func TestACleanlyStoppedNodeComesBackUnderItsName(t *testing.T) {
	onBoth(t, func(t *testing.T, b bucket.Bucket) {
		ctx := context.Background()
		clk := fakeclock.New(t0)
		a1 := startNode(t, b, clk, "a")
		o := startNode(t, b, clk, "o")
		if err := o.RefreshNow(ctx); err != nil {
			t.Fatal(err)
		}
		if err := a1.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if err := o.RefreshNow(ctx); err != nil {
			t.Fatal(err)
		}
		if !o.Expired("a") {
			t.Fatal("a closed node is not expired")
		}
		a2 := startNode(t, b, clk, "a") // no wait: the lease is gone
		h := acquire(t, a2, actorX)
		if err := o.RefreshNow(ctx); err != nil {
			t.Fatal(err)
		}
		if o.Expired("a") || !containsNode(o.Live(), "a") {
			t.Fatalf("after a's restart: Expired(a) %v, Live %v; want a live", o.Expired("a"), o.Live())
		}
		_, err := o.holds.Acquire(ctx, actorX)
		wantHeldBy(t, err, "a")
		if !a2.holds.Valid(h) {
			t.Fatal("the restarted node's hold was lost")
		}
	})
}
