package cluster_test

// The objects a node reads back from the bucket (lease and hold records,
// snapshot keys) can hold anything: a node never panics on them, and what it
// does with them keeps its rules.

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/clock"
	"github.com/wasmkeep/alarms/cluster"
	"github.com/wasmkeep/alarms/internal/fakeclock"
)

func fuzzLeases(tb testing.TB, b bucket.Bucket, clk clock.Clock, id string) *cluster.Leases {
	tb.Helper()
	l, err := cluster.StartLeases(context.Background(), cluster.LeaseConfig{Bucket: b, NodeID: id, Addr: id + ".example:7000", Clock: clk, Manual: true})
	if err != nil {
		tb.Fatal(err)
	}
	return l
}

// FuzzHoldRecord: whatever the ownership record holds, Acquire takes the
// hold with a generation above the record's, reports the holder, or fails
// with an error naming the actor.
func FuzzHoldRecord(f *testing.F) {
	f.Add([]byte(`{"node_id":"other","generation":3,"addr":"h:1"}`), false)
	f.Add([]byte(`{"node_id":"other","generation":3,"addr":"h:1"}`), true)
	f.Add([]byte(`{"node_id":"","generation":7}`), false)
	f.Add([]byte(`{"node_id":"me","generation":18446744073709551615}`), false)
	f.Add([]byte(`{"node_id":"other","generation":0}`), false)
	f.Add([]byte(`{"node_id":"a/b","generation":1}`), true)
	f.Add([]byte(`null`), false)
	f.Add([]byte(`{"generation":-1}`), false)
	f.Fuzz(func(t *testing.T, body []byte, otherLive bool) {
		ctx := context.Background()
		b := bucket.NewMem()
		clk := fakeclock.New(time.Unix(1_700_000_000, 0))
		if otherLive {
			fuzzLeases(t, b, clk, "other")
		}
		me := fuzzLeases(t, b, clk, "me")
		holds := cluster.NewHolds(b, "", me, nil)
		id := abi.ActorID{Tenant: "t", Class: "c", Name: "x"}
		if _, err := b.Put(ctx, holds.Key(id), body, bucket.Cond{}); err != nil {
			t.Fatal(err)
		}
		var rec struct {
			NodeID     string `json:"node_id"`
			Generation uint64 `json:"generation"`
		}
		parsed := json.Unmarshal(body, &rec) == nil
		h, err := holds.Acquire(ctx, id)
		var held *cluster.HeldElsewhereError
		var ae *abi.ActorError
		switch {
		case err == nil:
			if !parsed || h.Generation <= rec.Generation || h.Generation == 0 || !holds.Valid(h) {
				t.Fatalf("took the hold at generation %d over the record %q (parsed %v, generation %d)", h.Generation, body, parsed, rec.Generation)
			}
		case errors.As(err, &held):
			if held.NodeID == "" || held.NodeID == "me" || held.NodeID != rec.NodeID {
				t.Fatalf("held elsewhere by %q after reading %q", held.NodeID, body)
			}
		case errors.As(err, &ae):
			if ae.ID != id {
				t.Fatalf("error about actor %v, want %v: %v", ae.ID, id, err)
			}
		default:
			t.Fatalf("record %q: %v, want an error naming the actor", body, err)
		}
	})
}

// FuzzLeaseRecord: another node's lease object holding anything is read
// without a panic; the node it names is live or expired, never both.
func FuzzLeaseRecord(f *testing.F) {
	f.Add([]byte(`{"node_id":"other","addr":"h:1","ttl_ms":10000,"renewed_ms":1,"seq":1,"instance":"i"}`))
	f.Add([]byte(`{"ttl_ms":9223372036854775807}`))
	f.Add([]byte(`{"ttl_ms":-5,"seq":18446744073709551615}`))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, body []byte) {
		ctx := context.Background()
		b := bucket.NewMem()
		clk := fakeclock.New(time.Unix(1_700_000_000, 0))
		// me renews once an hour: a TTL that outlasts the hour between
		// its readings keeps it valid in one epoch, so that the hours
		// count (a lapse of its own would restart its watch).
		me, err := cluster.StartLeases(ctx, cluster.LeaseConfig{Bucket: b, NodeID: "me", Addr: "me.example:7000", Clock: clk, Manual: true, TTL: 70 * time.Minute, Margin: 5 * time.Minute, Grace: 5 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Put(ctx, "cluster/nodes/other", body, bucket.Cond{}); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			if err := me.RefreshNow(ctx); err != nil {
				t.Fatal(err)
			}
			live := false
			for _, n := range me.Live() {
				live = live || n.ID == "other"
			}
			if live && me.Expired("other") {
				t.Fatalf("after reading %q: other is live and expired at once", body)
			}
			clk.Advance(time.Hour)
			if err := me.RenewNow(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if !me.Expired("other") {
			// Three hours without a change: a lease that stays valid
			// that long says a TTL of hours, which is refused.
			var rec struct {
				TTL int64 `json:"ttl_ms"`
			}
			if json.Unmarshal(body, &rec) != nil || rec.TTL < int64(time.Hour/time.Millisecond) {
				t.Fatalf("a lease object %q unchanged for 3 hours still counts", body)
			}
		}
	})
}

// FuzzSnapshotKey: a key under an actor's state folder is parsed only
// when it is the one Key would have written.
func FuzzSnapshotKey(f *testing.F) {
	r := cluster.NewReplica(bucket.NewMem(), "cluster/")
	id := abi.ActorID{Tenant: "t", Class: "c", Name: "x"}
	f.Add(r.Key(id, 1, 2))
	f.Add(r.Key(id, math.MaxUint64, 0))
	f.Add(r.ActorPrefix(id) + "00000000000000000001-0000000000000000000x")
	f.Add(r.ActorPrefix(id) + "+0000000000000000001-00000000000000000001")
	f.Add("cluster/state/t/c/78/../")
	f.Fuzz(func(t *testing.T, key string) {
		s, err := r.Parse(id, key)
		if err != nil {
			var ae *abi.ActorError
			if !errors.As(err, &ae) || ae.ID != id || !strings.Contains(err.Error(), "malformed snapshot key") {
				t.Fatalf("Parse(%q): %v, want an error naming the actor", key, err)
			}
			return
		}
		if s.Key != key || r.Key(id, s.Generation, s.Seq) != key {
			t.Fatalf("Parse(%q) = %+v, which Key writes as %q", key, s, r.Key(id, s.Generation, s.Seq))
		}
	})
}
