package cluster_test

// Format versions of the records the cluster writes (docs/design.md#format-versions):
// this build writes version 1, reads a record without a version as 1, and
// refuses one of a later version with a *format.NewerError naming the kind
// and the version, leaving the record as it is and judging nothing by it.

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/cluster"
	"github.com/wasmkeep/alarms/format"
	"github.com/wasmkeep/alarms/internal/fakeclock"
)

// wantNewer fails unless err wraps a *format.NewerError of kind k and
// version v, and its text names the actor (when actor is not "").
func wantNewer(t *testing.T, what string, err error, k format.Kind, v int, actor string) {
	t.Helper()
	ne, ok := format.As(err)
	if !ok || ne.Kind != k || ne.Version != v || ne.Known != 1 || !errors.Is(err, format.ErrNewer) {
		t.Fatalf("%s: %v, want a *format.NewerError of %s version %d (known 1)", what, err, k, v)
	}
	if actor != "" && !strings.Contains(err.Error(), actor) {
		t.Fatalf("%s: %v does not name actor %s", what, err, actor)
	}
}

// The version this build writes in its records.
func formatOf(t *testing.T, body []byte) any {
	t.Helper()
	var rec map[string]any
	if err := json.Unmarshal(body, &rec); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	return rec["format"]
}

func TestLeasesAndHoldsAreWrittenAtFormat1(t *testing.T) {
	ctx := context.Background()
	m := bucket.NewMem()
	a := startNode(t, m, fakeclock.New(t0), "a")
	if _, err := a.holds.Acquire(ctx, actorX); err != nil {
		t.Fatal(err)
	}
	lease, _, _ := m.Object("cluster/nodes/a")
	hold, _, _ := m.Object(cluster.HoldKey("", actorX))
	if f := formatOf(t, lease); f != float64(format.LeaseVersion) || format.LeaseVersion != 1 {
		t.Errorf("the lease says format %v, want 1: %s", f, lease)
	}
	if f := formatOf(t, hold); f != float64(format.HoldVersion) || format.HoldVersion != 1 {
		t.Errorf("the ownership record says format %v, want 1: %s", f, hold)
	}
	// A release writes the record again, at format 1 too.
	h, _ := a.holds.Acquire(ctx, actorX)
	if err := a.holds.Release(ctx, h); err != nil {
		t.Fatal(err)
	}
	hold, _, _ = m.Object(cluster.HoldKey("", actorX))
	if f := formatOf(t, hold); f != float64(1) {
		t.Errorf("the released record says format %v, want 1: %s", f, hold)
	}
}

// Records written before versions (no "format") are version 1: a node
// reads them as it did.
func TestRecordsWithoutAFormatReadAsVersion1(t *testing.T) {
	ctx := context.Background()
	clk := fakeclock.New(t0)
	m := bucket.NewMem()
	// An older node's lease and its record of actorX, neither with a
	// version.
	if _, err := m.Put(ctx, "cluster/nodes/old", []byte(`{"node_id":"old","addr":"old.example:7000","ttl_ms":10000,"renewed_ms":1,"seq":1,"instance":"i1","classes":null}`), bucket.Cond{}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Put(ctx, cluster.HoldKey("", actorX), []byte(`{"node_id":"old","generation":3,"addr":"old.example:7000","instance":"i1","state":"none"}`), bucket.Cond{}); err != nil {
		t.Fatal(err)
	}
	a := startNode(t, m, clk, "a")
	if err := a.RefreshNow(ctx); err != nil {
		t.Fatal(err)
	}
	if !containsNode(a.Live(), "old") {
		t.Fatalf("a lease without a format is not live: %v", a.Live())
	}
	_, err := a.holds.Acquire(ctx, actorX)
	wantHeldBy(t, err, "old")
	wantLookup(t, a, actorX, "old")
	if own, ok, err := cluster.ReadOwnership(ctx, m, "", actorX); err != nil || !ok || own.NodeID != "old" || own.Generation != 3 || own.Format != 0 {
		t.Fatalf("ReadOwnership of a record without a format: %+v %v %v", own, ok, err)
	}
	// Once the old node's lease has stood TTL + Grace, it is taken over,
	// and the new record says format 1.
	for range 4 { // a's own lease kept valid meanwhile
		clk.Advance((cluster.DefaultTTL + cluster.DefaultGrace) / 4)
		if err := a.RenewNow(ctx); err != nil {
			t.Fatal(err)
		}
	}
	h := acquire(t, a, actorX)
	if h.Generation != 4 {
		t.Fatalf("took generation %d, want 4", h.Generation)
	}
	if a.holds.Stats().NewerFormat != 0 || a.NewerFormatReads() != 0 {
		t.Fatalf("records without a format counted as newer: %+v, %d", a.holds.Stats(), a.NewerFormatReads())
	}
}

// An ownership record of format 2 is refused by every reader, whatever
// else it changed, and left as it is: no take, no takeover, no route.
func TestAnOwnershipRecordOfANewerFormatIsRefused(t *testing.T) {
	ctx := context.Background()
	clk := fakeclock.New(t0)
	m := bucket.NewMem()
	a := startNode(t, m, clk, "a")
	key := cluster.HoldKey("", actorX)
	for _, body := range []string{
		// Released, so a reader of version 1 would take it at once.
		`{"format":2,"node_id":"","generation":7,"state":"none"}`,
		// Another field's type changed: the version is read first.
		`{"format":2,"node_id":{"id":"b"},"generation":"7"}`,
	} {
		if _, err := m.Put(ctx, key, []byte(body), bucket.Cond{}); err != nil {
			t.Fatal(err)
		}
		before := a.holds.Stats().NewerFormat
		_, err := a.holds.Acquire(ctx, actorX)
		wantNewer(t, "Acquire", err, format.Hold, 2, actorX.String())
		_, _, err = a.holds.Lookup(ctx, actorX)
		wantNewer(t, "Lookup", err, format.Hold, 2, actorX.String())
		_, _, err = cluster.ReadOwnership(ctx, m, "", actorX)
		wantNewer(t, "ReadOwnership", err, format.Hold, 2, actorX.String())
		_, _, err = cluster.ReadState(ctx, m, "", actorX)
		wantNewer(t, "ReadState", err, format.Hold, 2, actorX.String())
		if got, _, _ := m.Object(key); string(got) != body {
			t.Fatalf("the record was rewritten: %s, want %s", got, body)
		}
		if n := a.holds.Stats().NewerFormat - before; n != 2 {
			t.Fatalf("%d refusals counted for Acquire and Lookup, want 2", n)
		}
	}
	// A version that is no version is unreadable, not newer.
	if _, err := m.Put(ctx, key, []byte(`{"format":"2","node_id":""}`), bucket.Cond{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.holds.Acquire(ctx, actorX); err == nil || errors.Is(err, format.ErrNewer) {
		t.Fatalf("a record whose format is a string: %v, want an error that is no newer format", err)
	}
}

// A lease of format 2 is watched by its ETag only: the reading does not
// fail, the node is not live and is never judged expired, however long
// its lease stands, so its holds are refused (retryably), never taken
// over. A lease of format 2 under a node's own ID is not taken back.
func TestALeaseOfANewerFormatIsNeitherLiveNorExpired(t *testing.T) {
	ctx := context.Background()
	clk := fakeclock.New(t0)
	m := bucket.NewMem()
	newer := `{"format":2,"node_id":"b","addr":"b.example:7000","ttl_ms":1000,"seq":1,"instance":"i2"}`
	if _, err := m.Put(ctx, "cluster/nodes/b", []byte(newer), bucket.Cond{}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Put(ctx, cluster.HoldKey("", actorX), []byte(`{"format":1,"node_id":"b","generation":2,"addr":"b.example:7000","instance":"i2","state":"none"}`), bucket.Cond{}); err != nil {
		t.Fatal(err)
	}
	a := startNode(t, m, clk, "a")
	for range 10 {
		if err := a.RefreshNow(ctx); err != nil {
			t.Fatalf("a reading that met a lease of a newer format failed: %v", err)
		}
		if containsNode(a.Live(), "b") || a.Expired("b") {
			t.Fatalf("a lease of a newer format: live %v, expired %v; want neither", a.Live(), a.Expired("b"))
		}
		if _, ok := a.Addr("b"); ok {
			t.Fatal("the address in a lease of a newer format was read")
		}
		// 30 s in all: far past the 1 s TTL it names, and the reader's
		// own, a's lease kept valid meanwhile.
		clk.Advance(3 * time.Second)
		if err := a.RenewNow(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if a.NewerFormatReads() == 0 {
		t.Fatal("no read of a lease of a newer format counted")
	}
	_, err := a.holds.Acquire(ctx, actorX)
	wantNewer(t, "Acquire of an actor its holder's lease is newer", err, format.Lease, 2, actorX.String())
	if rec, _, _ := m.Object(cluster.HoldKey("", actorX)); !strings.Contains(string(rec), `"node_id":"b"`) {
		t.Fatalf("the record was taken over: %s", rec)
	}

	// Under the node's own ID: not taken back, with an error naming it
	// (at once: a take back would wait on the fake clock for ever).
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = cluster.StartLeases(sctx, cluster.LeaseConfig{Bucket: m, NodeID: "b", Clock: clk, Manual: true})
	wantNewer(t, "StartLeases under an ID whose lease is newer", err, format.Lease, 2, "")
	if got, _, _ := m.Object("cluster/nodes/b"); string(got) != newer {
		t.Fatalf("the lease of a newer format was replaced: %s", got)
	}
}
