// Package alarmstest is the conformance kit of the alarms plugin: scenarios
// that any host built on package alarms runs against itself, in a test of
// its own, to show that it wires the plugin as the rules need (see
// docs/design.md): delivery and R1, R2 when an alarm moves or is cleared,
// committed retries, giving up when the index cannot be written, stale
// entries removed without touching a newer owner's (R2, R3, the fence),
// and, for hosts that run several nodes on one bucket, a takeover in which
// a survivor's sweep delivers a dead node's alarm.
//
// A host supplies Host.Start, which starts one node of its own on the
// bucket it is given, with Guest registered as class Class:
//
//	func TestConformance(t *testing.T) {
//		alarmstest.Run(t, alarmstest.Host{Start: startMyNode, MultiNode: true})
//	}
//
// The scenarios assume the plugin's default backoff (1 s, doubling).
package alarmstest

import (
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/alarms"
	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/alarmindex"
	"github.com/wasmkeep/alarms/bucket"
)

// Guest is the kit's guest (kit.wat): a request's body is the alarm time
// (i64 LE, Unix ms; 0 clears it) and, optionally, how many times on-alarm
// fails before it succeeds (u32 LE). Hosts register it as class Class.
//
//go:embed kit.wasm
var Guest []byte

// Class is the class name the host registers Guest under.
const Class = "kit"

// Tenant is the tenant of every actor of the scenarios; nodes must sweep it.
const Tenant = "kit"

// Timings are the cluster timings a node is started with.
type Timings struct {
	LeaseTTL, LeaseGrace, Sweep time.Duration
	// SweepSafety is the longest a node's sweep leaves the tenant
	// unlisted when nothing in it can be overdue
	// (alarms.Config.SweepSafetyPeriod). The scenarios that write index
	// entries behind the nodes' back, as a failed DELETE would leave
	// them, need a sweep to meet them; no event a node sees tells it to,
	// so the safety period is what does.
	SweepSafety time.Duration
}

// NodeConfig is what Host.Start is given.
type NodeConfig struct {
	// Name tells the nodes of one scenario apart (for logs and data
	// directories).
	Name string
	// Bucket is shared by the nodes of a scenario.
	Bucket bucket.Bucket
	Timings
	// OnDelivery must receive every delivery the node's timer loop makes
	// (alarms.Config.OnDelivery).
	OnDelivery func(alarms.Delivery)
}

// Node is one node of the host under test.
type Node interface {
	// Request runs a request event of Guest on the actor; its committed
	// state is in the bucket when it returns without error (exec-durable).
	Request(ctx context.Context, id abi.ActorID, body []byte) error
	// Crash stops the node as a SIGKILL would: no upload, no release.
	Crash()
	// Close shuts the node down cleanly.
	Close(ctx context.Context) error
}

// Host is the host under test.
type Host struct {
	// Start starts a node with Guest registered as class Class, sweeping
	// Tenant, on cfg.Bucket.
	Start func(t testing.TB, cfg NodeConfig) Node
	// MultiNode: the host runs several nodes on one bucket, and a node's
	// Crash lets its lease lapse (the takeover scenario runs).
	MultiNode bool
	// IndexPrefix is where in the bucket the host keeps the alarm index:
	// its entries are under IndexPrefix + "alarms/" ("" for the bucket's
	// root; the reference host's default is "cluster/").
	IndexPrefix string
}

// Fast are the timings the scenarios use: short enough for a test, long
// enough for a busy machine.
var Fast = Timings{LeaseTTL: 1500 * time.Millisecond, LeaseGrace: 500 * time.Millisecond, Sweep: 300 * time.Millisecond,
	SweepSafety: 3 * time.Second}

// Body is a request body for Guest: set the alarm to at (0: clear it) and
// fail on-alarm fails times before it succeeds.
func Body(at int64, fails uint32) []byte {
	b := make([]byte, 12)
	binary.LittleEndian.PutUint64(b, uint64(at))
	binary.LittleEndian.PutUint32(b[8:], fails)
	return b
}

// Run runs every scenario against h.
func Run(t *testing.T, h Host) {
	t.Run("DeliveryListsAFreshTaggedEntryAndRemovesItOnceRun", func(t *testing.T) { delivery(t, h) })
	t.Run("MovingOrClearingTheAlarmRemovesTheReplacedEntry", func(t *testing.T) { moving(t, h) })
	t.Run("CommittedRetriesBackOffAndSucceed", func(t *testing.T) { retries(t, h) })
	t.Run("AnIndexThatCannotBeWrittenFailsTheEvent", func(t *testing.T) { givingUp(t, h) })
	t.Run("StaleEntriesGoButNotANewerOwners", func(t *testing.T) { stale(t, h) })
	t.Run("ASurvivorsSweepDeliversADeadNodesAlarm", func(t *testing.T) {
		if !h.MultiNode {
			t.Skip("the host runs one node")
		}
		takeover(t, h)
	})
}

// rig is one scenario's bucket, nodes and deliveries.
type rig struct {
	t   *testing.T
	h   Host
	mem *bucket.Mem
	// idx is the bucket as seen from the host's IndexPrefix.
	idx bucket.Bucket

	mu sync.Mutex
	// down fails every request to the index while set.
	down bool
	got  []alarms.Delivery
	// node names the node of each delivery in got.
	node []string
}

func newRig(t *testing.T, h Host) *rig {
	r := &rig{t: t, h: h, mem: bucket.NewMem()}
	r.idx = bucket.WithPrefix(r.mem, h.IndexPrefix)
	r.mem.Faults = func(op bucket.Op) bucket.Fault {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.down && strings.HasPrefix(op.Key, h.IndexPrefix+"alarms/") {
			return bucket.Fault{Err: errors.New("alarmstest: the index is unreachable")}
		}
		return bucket.Fault{}
	}
	return r
}

func (r *rig) start(name string) Node {
	r.t.Helper()
	n := r.h.Start(r.t, NodeConfig{Name: name, Bucket: r.mem, Timings: Fast, OnDelivery: func(d alarms.Delivery) {
		r.mu.Lock()
		r.got = append(r.got, d)
		r.node = append(r.node, name)
		r.mu.Unlock()
	}})
	r.t.Cleanup(func() { _ = n.Close(context.Background()) })
	return n
}

func (r *rig) request(n Node, id abi.ActorID, body []byte) {
	r.t.Helper()
	if err := n.Request(context.Background(), id, body); err != nil {
		r.t.Fatalf("request to actor %s: %v", id, err)
	}
}

// entries are the actor's index entries.
func (r *rig) entries(id abi.ActorID) []alarmindex.Key {
	r.t.Helper()
	keys, err := r.idx.List(context.Background(), alarmindex.TenantPrefix(id.Tenant), "", 100_000)
	if err != nil {
		r.t.Fatal(err)
	}
	var out []alarmindex.Key
	for _, k := range keys {
		pk, err := alarmindex.ParseKey(k)
		if err != nil {
			r.t.Fatalf("index key %q does not parse: %v", k, err)
		}
		if pk.Actor == id {
			out = append(out, pk)
		}
	}
	return out
}

// ran returns the deliveries that ran on-alarm for id, in order.
func (r *rig) ran(id abi.ActorID) (out []alarms.Delivery, nodes []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, d := range r.got {
		if d.Actor == id && d.Err == nil && d.Event.Ran {
			out = append(out, d)
			nodes = append(nodes, r.node[i])
		}
	}
	return out, nodes
}

// waitFor polls cond for up to 30 s: a bound for a hung scenario, not a
// speed requirement.
func (r *rig) waitFor(what string, cond func() bool) {
	r.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			r.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func actor(name string) abi.ActorID { return abi.ActorID{Tenant: Tenant, Class: Class, Name: name} }

func describe(keys []alarmindex.Key) string {
	var s []string
	for _, k := range keys {
		s = append(s, k.String())
	}
	return fmt.Sprint(s)
}

// R1: an alarm is listed under a fresh tagged key before its state is
// uploaded; delivered when due; its entry removed after the run.
func delivery(t *testing.T, h Host) {
	r := newRig(t, h)
	n := r.start("a")
	id := actor("delivery")
	due := time.Now().Add(300 * time.Millisecond).UnixMilli()
	r.request(n, id, Body(due, 0))
	e := r.entries(id)
	if ran, _ := r.ran(id); len(ran) == 0 && (len(e) != 1 || e[0].Legacy || e[0].DueMs != due || e[0].Tag.Generation == 0) {
		t.Fatalf("after the event the index holds %s, want one tagged entry at %d with the hold's generation", describe(e), due)
	}
	r.waitFor("the alarm to run", func() bool { d, _ := r.ran(id); return len(d) > 0 })
	if d, _ := r.ran(id); d[0].Event.Scheduled != due || d[0].Event.RetryCount != 0 {
		t.Errorf("on-alarm ran with (%d, %d), want (%d, 0)", d[0].Event.Scheduled, d[0].Event.RetryCount, due)
	}
	r.waitFor("the index to be empty after the run", func() bool { return len(r.entries(id)) == 0 })
}

// R2: the entry an event replaced is deleted once the event is uploaded;
// clearing the alarm leaves no entry.
func moving(t *testing.T, h Host) {
	r := newRig(t, h)
	n := r.start("a")
	id := actor("moving")
	t1 := time.Now().Add(time.Hour).UnixMilli()
	t2 := t1 + time.Hour.Milliseconds()
	r.request(n, id, Body(t1, 0))
	r.request(n, id, Body(t2, 0))
	if e := r.entries(id); len(e) == 0 || e[len(e)-1].DueMs != t2 {
		t.Fatalf("after moving the alarm from %d to %d the index holds %s, want an entry at %d", t1, t2, describe(e), t2)
	}
	// The replaced entry's DELETE may wait a short window for a batch.
	r.waitFor(fmt.Sprintf("only the entry at %d after moving the alarm from %d", t2, t1), func() bool {
		e := r.entries(id)
		return len(e) == 1 && e[0].DueMs == t2
	})
	r.request(n, id, Body(0, 0))
	r.waitFor("no entry after clearing the alarm", func() bool { return len(r.entries(id)) == 0 })
}

// Committed retries: a failing on-alarm is retried after 1 s, then 2 s,
// with the failure count, until it succeeds; then the index is empty.
func retries(t *testing.T, h Host) {
	r := newRig(t, h)
	n := r.start("a")
	id := actor("retries")
	due := time.Now().Add(200 * time.Millisecond).UnixMilli()
	r.request(n, id, Body(due, 2))
	r.waitFor("on-alarm to succeed after two failures", func() bool {
		d, _ := r.ran(id)
		return len(d) > 0 && d[len(d)-1].Event.Err == nil
	})
	d, _ := r.ran(id)
	if len(d) != 3 {
		t.Fatalf("on-alarm ran %d times, want 3 (two failures, then success)", len(d))
	}
	for i, want := range []time.Duration{0, time.Second, 2 * time.Second} {
		ev := d[i].Event
		if ev.RetryCount != i || (i < 2) != (ev.Err != nil) {
			t.Errorf("run %d: retry count %d, error %v; want count %d and a failure: %v", i, ev.RetryCount, ev.Err, i, i < 2)
		}
		// The retry is committed at the failure, which comes after the
		// run before it was scheduled and before its delivery ended.
		if i > 0 {
			prev := d[i-1]
			if ev.Scheduled < prev.Event.Scheduled+want.Milliseconds() || ev.Scheduled > prev.At.UnixMilli()+want.Milliseconds() {
				t.Errorf("run %d was scheduled for %d; the run before it was scheduled for %d and ended at %d: want %v after its failure",
					i, ev.Scheduled, prev.Event.Scheduled, prev.At.UnixMilli(), want)
			}
		}
	}
	r.waitFor("the index to be empty", func() bool { return len(r.entries(id)) == 0 })
}

// An event whose alarm cannot be listed in the index fails (the host gives
// the actor up rather than replicate an alarm no other node could find);
// once the index is back, the next event lists it.
func givingUp(t *testing.T, h Host) {
	r := newRig(t, h)
	n := r.start("a")
	id := actor("giving-up")
	r.request(n, id, Body(time.Now().Add(time.Hour).UnixMilli(), 0))
	r.mu.Lock()
	r.down = true
	r.mu.Unlock()
	t2 := time.Now().Add(2 * time.Hour).UnixMilli()
	err := n.Request(context.Background(), id, Body(t2, 0))
	if err == nil {
		t.Fatal("the event succeeded though its alarm could not be listed in the index")
	}
	if !strings.Contains(err.Error(), id.String()) {
		t.Errorf("the error does not name the actor: %v", err)
	}
	r.mu.Lock()
	r.down = false
	r.mu.Unlock()
	t3 := t2 + 1000
	r.request(n, id, Body(t3, 0))
	found := false
	for _, e := range r.entries(id) {
		found = found || e.DueMs == t3
	}
	if !found {
		t.Fatalf("after the index came back the index holds %s, want an entry at %d", describe(r.entries(id)), t3)
	}
}

// An entry at a time the actor's alarm is not at is stale: when a sweep
// offers it, the holder removes it (after fencing, R2) but never one a
// newer owner wrote (R3), and the alarm stays where it is.
func stale(t *testing.T, h Host) {
	r := newRig(t, h)
	n := r.start("a")
	id := actor("stale")
	future := time.Now().Add(time.Hour).UnixMilli()
	r.request(n, id, Body(future, 0))
	past := time.Now().Add(-time.Hour).UnixMilli()
	old := alarmindex.Key{Actor: id, DueMs: past, Tag: alarmindex.Tag{Generation: 1, Nonce: "0a"}}
	newer := alarmindex.Key{Actor: id, DueMs: past, Tag: alarmindex.Tag{Generation: 1 << 40, Nonce: "0b"}}
	for _, k := range []alarmindex.Key{old, newer} {
		if _, err := r.idx.Put(context.Background(), k.String(), nil, bucket.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	r.waitFor("the stale entry to be removed (the host must pass NodeConfig.SweepSafety to alarms.Config.SweepSafetyPeriod: only the safety period's relisting finds an entry written behind the node's back)", func() bool {
		_, _, ok := r.mem.Object(h.IndexPrefix + old.String())
		return !ok
	})
	if _, _, ok := r.mem.Object(h.IndexPrefix + newer.String()); !ok {
		t.Error("the entry of a newer generation was removed (R3)")
	}
	var atFuture int
	for _, e := range r.entries(id) {
		if e.DueMs == future {
			atFuture++
		}
	}
	if atFuture != 1 {
		t.Errorf("the index holds %s, want the alarm's entry at %d kept", describe(r.entries(id)), future)
	}
	if d, _ := r.ran(id); len(d) != 0 {
		t.Errorf("on-alarm ran for a stale entry: %+v", d)
	}
}

// A node holding an actor dies; once its lease has lapsed, a survivor's
// sweep finds the overdue entry, takes the actor (restoring it from the
// bucket) and runs on-alarm; the index is empty afterwards.
func takeover(t *testing.T, h Host) {
	r := newRig(t, h)
	a := r.start("a")
	r.start("b")
	id := actor("takeover")
	due := time.Now().Add(Fast.LeaseTTL).UnixMilli()
	r.request(a, id, Body(due, 0))
	a.Crash()
	r.waitFor("the alarm to run on the survivor", func() bool { d, _ := r.ran(id); return len(d) > 0 })
	d, nodes := r.ran(id)
	if nodes[0] != "b" || d[0].Event.Scheduled != due {
		t.Errorf("on-alarm ran on %s for %d, want on b for %d", nodes[0], d[0].Event.Scheduled, due)
	}
	r.waitFor("the index to be empty after the run", func() bool { return len(r.entries(id)) == 0 })
}
