package node_test

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wasmkeep/alarms"
	"github.com/wasmkeep/alarms/alarmindex"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/cluster"
	"github.com/wasmkeep/alarms/internal/metricstest"
	"github.com/wasmkeep/alarms/node"
)

// A hold taken anew in the same process has uploaded nothing, whatever the
// hold before it did: the node's first removal of a stale entry under it
// uploads the fence first (docs/design.md#fence). Here the node uploaded
// the actor, then gave it up when an upload failed (an extra entry left
// unnamed), and takes it again to deliver that entry: the snapshot it
// restores names another time, so the entry is stale, and it may be
// removed only once this hold's own upload made that snapshot the newest
// state.
func TestAHoldTakenAgainInTheSameProcessFencesBeforeItRemoves(t *testing.T) {
	t.Parallel()
	m, faults := memWithFaults()
	spy := newIxSpy(t, m)
	id := ixOneshot("retaken")
	log := &ixDeliveries{}
	// The timer loop starts only once the actor was given up: the entry
	// due at once would otherwise be delivered before the test looks.
	a := ixNode(t, spy, "a", t.TempDir(), ixConfig{class: oneshotClass, steady: true, log: log, noStart: true})
	t1 := time.Now().Add(time.Hour).UnixMilli()
	ixSet(t, nil, a, id, node.ExecDurable, t1)
	before, e1 := ixNamed(t, m, id)

	// The next upload fails: the node gives the actor up, leaving the
	// entry it listed for t0 unnamed.
	var once atomic.Bool
	faults.set(func(op bucket.Op) bucket.Fault {
		if isStatePut(op) && once.CompareAndSwap(false, true) {
			return bucket.Fault{Err: errInjected}
		}
		return bucket.Fault{}
	})
	t0 := time.Now().Add(-time.Second).UnixMilli()
	if _, err := a.Exec(context.Background(), id, setBody(t0), node.ExecDurable); err == nil {
		t.Fatal("the event succeeded though its upload failed")
	}
	faults.set(nil)
	ixGivenUp(t, m, id, before, e1)
	var unnamed alarmindex.Key
	for _, e := range ixEntries(t, m, id) {
		if e != e1 {
			unnamed = e
		}
	}
	if unnamed.DueMs != t0 {
		t.Fatalf("index entries %v; want the named %s and an unnamed one at %d", ixEntries(t, m, id), e1, t0)
	}
	mark := len(spy.mutations())

	// The timer delivers t0: the node takes the actor again.
	a.Timer().Set(alarms.TimerKey(id), t0)
	a.Start(context.Background())
	ev := log.wait(t, id, "the unnamed entry delivered", func(ev node.DeliveryEvent) bool { return ev.TimerAt == t0 && ev.Err == nil })
	if ev.Event.Ran || ev.Outcome != alarmindex.OutcomeStale {
		t.Fatalf("the delivery of t0: ran %v, %+v; want the entry removed as stale", ev.Event.Ran, ev)
	}
	after := spy.mutations()[mark:]
	del := "DELETE " + ixPrefix + unnamed.String()
	fence := -1
	for i, m := range after {
		if strings.HasPrefix(m, "PUT cluster/state/") && fence < 0 {
			fence = i
		}
		if m == del {
			if fence < 0 || fence > i {
				t.Fatalf("the stale entry was deleted with no upload before it under the new hold (the fence): %v", after)
			}
			return
		}
	}
	t.Fatalf("the stale entry %s was not deleted: %v", unnamed, after)
}

// An upload that returns after the hold lapsed deletes nothing: the node
// asks the hold's validity again once the upload is back, and a lapsed
// hold's snapshot may not be the newest state (another node may have
// taken the actor meanwhile, its state naming the entry this upload
// replaced: R3). Here the snapshot PUT is held for 1.5 s while the node's
// lease renewals fail, so the lease (600 ms) lapses under it.
func TestAnUploadThatReturnsAfterTheLeaseLapsedDeletesNoEntry(t *testing.T) {
	t.Parallel()
	m, faults := memWithFaults()
	spy := newIxSpy(t, m)
	id := ixOneshot("lapsed")
	a := ixNode(t, spy, "a", t.TempDir(), ixConfig{class: oneshotClass})
	t1 := time.Now().Add(time.Hour).UnixMilli()
	ixSet(t, nil, a, id, node.ExecDurable, t1)
	_, e1 := ixNamed(t, m, id)

	var slow, renewing atomic.Bool
	renewing.Store(true)
	faults.set(func(op bucket.Op) bucket.Fault {
		switch {
		case op.Kind == bucket.OpPut && op.Key == "cluster/nodes/a" && !renewing.Load():
			return bucket.Fault{Err: errInjected}
		case isStatePut(op) && slow.CompareAndSwap(false, true):
			renewing.Store(false)
			return bucket.Fault{Delay: 1500 * time.Millisecond}
		}
		return bucket.Fault{}
	})
	_, err := a.Exec(context.Background(), id, setBody(t1+60_000), node.ExecDurable)
	renewing.Store(true)
	faults.set(nil)
	if !slow.Load() {
		t.Fatal("the event uploaded nothing")
	}
	t.Logf("the event whose upload outlived the lease: %v", err)
	a.FlushDeletes(context.Background())
	if !ixExists(t, m, e1.String()) {
		t.Fatalf("the entry %s was deleted by an upload that returned after the node's lease lapsed", e1)
	}
}

// A node that takes an actor over arms its timer with the committed alarm
// it restored, so the alarm fires there at its time, not a margin late when
// a sweep finds it: here node a set it two hours ahead (beyond any walk's
// reach) and stopped cleanly, and b took the actor with a read.
func TestANewHolderArmsItsTimerWithTheRestoredAlarm(t *testing.T) {
	t.Parallel()
	m := bucket.NewMem()
	id := ixOneshot("armed")
	a := ixNode(t, m, "a", t.TempDir(), ixConfig{class: oneshotClass, steady: true})
	t1 := time.Now().Add(2 * time.Hour).UnixMilli()
	ixSet(t, nil, a, id, node.ExecDurable, t1)
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	b := ixNode(t, m, "b", t.TempDir(), ixConfig{class: oneshotClass, steady: true})
	if at, ok := b.Timer().Get(alarms.TimerKey(id)); ok {
		t.Fatalf("b's timer holds %d before b took the actor", at)
	}
	if _, err := b.State(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if at, ok := b.Timer().Get(alarms.TimerKey(id)); !ok || at != t1 {
		t.Fatalf("b's timer holds %d (%v) after b took the actor, want its alarm %d", at, ok, t1)
	}
}

// After a lapse of its lease, a node takes an actor it held again with one
// request: a conditional PUT of its ownership record on the record it
// wrote, keeping the open actor (no release, no GET of the record, no
// download, no listing); the next event runs under the next generation
// and uploads under it. An event during the lapse is refused and gives
// nothing up.
func TestAnActorIsTakenAgainAfterALapseWithOneRequest(t *testing.T) {
	t.Parallel()
	m, faults := memWithFaults()
	id := ixOneshot("retake")
	reg := prometheus.NewRegistry()
	a := ixNode(t, m, "a", t.TempDir(), ixConfig{class: oneshotClass, registerer: reg})
	t1 := time.Now().Add(time.Hour).UnixMilli()
	ixSet(t, nil, a, id, node.ExecDurable, t1)
	before, _ := ixNamed(t, m, id)

	var cut atomic.Bool
	var mu sync.Mutex
	var ops []string
	faults.set(func(op bucket.Op) bucket.Fault {
		if strings.HasPrefix(op.Key, "cluster/nodes/") {
			if cut.Load() && op.Kind == bucket.OpPut {
				return bucket.Fault{Err: errInjected}
			}
			return bucket.Fault{}
		}
		if !strings.HasPrefix(op.Key, "cluster/holds/") && !strings.HasPrefix(op.Key, "cluster/state/") {
			return bucket.Fault{} // the sweeps' listings of the index
		}
		mu.Lock()
		ops = append(ops, fmt.Sprintf("%v %s", op.Kind, op.Key))
		mu.Unlock()
		return bucket.Fault{}
	})
	cut.Store(true)
	waitFor(t, "a's lease to lapse", func() bool { return !a.Leases().Valid() })
	// An event while the lease is not valid is refused, and the actor is
	// kept open with its hold (not released), to be taken again after.
	if _, err := a.State(context.Background(), id); !errors.Is(err, cluster.ErrLeaseNotValid) {
		t.Fatalf("an event while a's lease lapsed: %v, want the lease not valid", err)
	}
	cut.Store(false)
	waitFor(t, "a's lease valid again, in a new epoch", a.Leases().Valid)
	mu.Lock()
	ops = nil
	mu.Unlock()

	st, err := a.State(context.Background(), id)
	if err != nil || st.Alarm == nil || *st.Alarm != t1 {
		t.Fatalf("the state after the lapse: %+v (%v), want the alarm %d", st, err, t1)
	}
	mu.Lock()
	got := append([]string(nil), ops...)
	mu.Unlock()
	want := []string{fmt.Sprintf("%v %s", bucket.OpPut, "cluster/holds/t/oneshot/"+hex.EncodeToString([]byte(id.Name)))}
	if !slices.Equal(got, want) {
		t.Fatalf("taking the actor again after the lapse sent %v, want %v", got, want)
	}
	if v := metricstest.Gather(reg).Value("wasmkeep_hold_retakes_total"); v != 1 {
		t.Errorf("wasmkeep_hold_retakes_total %v, want 1", v)
	}
	// The next event runs under the next generation and uploads under it.
	ixSet(t, nil, a, id, node.ExecDurable, t1+1000)
	after, e := ixNamed(t, m, id)
	if after.Generation != before.Generation+1 || e.DueMs != t1+1000 {
		t.Fatalf("after the next event the state is %s naming %s; want generation %d naming %d", after.Key, e, before.Generation+1, t1+1000)
	}
}

// A hold taken again after a lapse has uploaded nothing: an upload of the
// old hold may still land late, so its first removal of a stale entry
// uploads the fence first, as any new hold's does. Here a leftover entry
// of the actor at a past time (of its first generation) is delivered once
// the node took the actor again.
func TestARetakenHoldFencesBeforeItRemoves(t *testing.T) {
	t.Parallel()
	m, faults := memWithFaults()
	spy := newIxSpy(t, m)
	id := ixOneshot("refenced")
	log := &ixDeliveries{}
	a := ixNode(t, spy, "a", t.TempDir(), ixConfig{class: oneshotClass, log: log, noStart: true})
	t1 := time.Now().Add(time.Hour).UnixMilli()
	ixSet(t, nil, a, id, node.ExecDurable, t1)
	t0 := time.Now().Add(-time.Minute).UnixMilli()
	stale := alarmindex.Key{Actor: id, DueMs: t0, Tag: alarmindex.Tag{Generation: 1, Nonce: "0f"}}
	if _, err := m.Put(context.Background(), ixPrefix+stale.String(), nil, bucket.Cond{}); err != nil {
		t.Fatal(err)
	}

	var cut atomic.Bool
	faults.set(func(op bucket.Op) bucket.Fault {
		if cut.Load() && op.Kind == bucket.OpPut && op.Key == "cluster/nodes/a" {
			return bucket.Fault{Err: errInjected}
		}
		return bucket.Fault{}
	})
	cut.Store(true)
	waitFor(t, "a's lease to lapse", func() bool { return !a.Leases().Valid() })
	cut.Store(false)
	waitFor(t, "a's lease valid again, in a new epoch", a.Leases().Valid)
	mark := len(spy.mutations())

	a.Timer().Set(alarms.TimerKey(id), t0)
	a.Start(context.Background())
	ev := log.wait(t, id, "the leftover entry delivered", func(ev node.DeliveryEvent) bool { return ev.TimerAt == t0 && ev.Err == nil })
	if ev.Event.Ran || ev.Outcome != alarmindex.OutcomeStale {
		t.Fatalf("the delivery of t0: ran %v, %+v; want the entry removed as stale", ev.Event.Ran, ev)
	}
	after := spy.mutations()[mark:]
	if len(after) == 0 || !strings.HasPrefix(after[0], "PUT cluster/holds/") {
		t.Fatalf("the node did not take the actor again with a write of its record first: %v", after)
	}
	del := "DELETE " + ixPrefix + stale.String()
	fence := -1
	for i, m := range after {
		if strings.HasPrefix(m, "PUT cluster/state/") && fence < 0 {
			fence = i
		}
		if m == del {
			if fence < 0 || fence > i {
				t.Fatalf("the stale entry was deleted with no upload before it under the retaken hold (the fence): %v", after)
			}
			return
		}
	}
	t.Fatalf("the stale entry %s was not deleted: %v", stale, after)
}

// A client's request for an actor another live node holds reads its
// ownership record once a lease TTL (and the holder's lease only if this
// node's readings of the leases did not show it renewed within a TTL),
// takes refused counted by how the lease was known: later requests
// within it are forwarded to the holder without a request to the bucket.
// When the holder has left (a clean shutdown), the forward fails, the
// refusal is forgotten, and the next try takes the actor.
func TestRequestsForAnActorHeldElsewhereReadTheBucketOncePerLease(t *testing.T) {
	t.Parallel()
	m, faults := memWithFaults()
	reg := prometheus.NewRegistry()
	classes := counter(t)
	a := serveHost(t, m, "a", classes, hostConfig{})
	b := serveHost(t, m, "b", classes, hostConfig{registerer: reg})
	actor := "/v1/actors/t/counter/elsewhere?kind=exec-durable"
	if status, out := call(t, "POST", a.URL+actor, []byte("get")); status != 200 {
		t.Fatalf("request to a (which takes the actor): %d %s", status, out)
	}
	var mu sync.Mutex
	var reads []string
	faults.set(func(op bucket.Op) bucket.Fault {
		if op.Kind == bucket.OpGet && (strings.HasPrefix(op.Key, "cluster/holds/") || op.Key == "cluster/nodes/a") {
			mu.Lock()
			reads = append(reads, op.Key)
			mu.Unlock()
		}
		return bucket.Fault{}
	})
	for i := range 3 {
		if status, out := call(t, "POST", b.URL+actor, []byte("get")); status != 200 {
			t.Fatalf("request %d to b: %d %s", i, status, out)
		}
	}
	mu.Lock()
	got := append([]string(nil), reads...)
	mu.Unlock()
	// The record once; a's lease not at all, unless b's own readings of
	// the leases had not shown it renewed within a TTL (a stalled
	// machine): then once.
	if len(got) == 0 || len(got) > 2 || !strings.HasPrefix(got[0], "cluster/holds/") || (len(got) == 2 && got[1] != "cluster/nodes/a") {
		t.Fatalf("three requests through b read %v; want the record once (and a's lease at most once)", got)
	}
	refused := metricstest.Gather(reg).Value("wasmkeep_hold_takes_refused_total", "lease", "read") + metricstest.Gather(reg).Value("wasmkeep_hold_takes_refused_total", "lease", "watched")
	if refused != 1 || float64(len(got)) != 1+metricstest.Gather(reg).Value("wasmkeep_hold_takes_refused_total", "lease", "read") {
		t.Errorf("takes refused %v (read %v), reads %v; want one refusal, on a read of the lease only if the lease was read", refused, metricstest.Gather(reg).Value("wasmkeep_hold_takes_refused_total", "lease", "read"), got)
	}
	if v := metricstest.Gather(reg).Value("wasmkeep_hold_refusals_remembered_total"); v != 2 {
		t.Errorf("wasmkeep_hold_refusals_remembered_total %v, want 2", v)
	}
	// a stops cleanly: b's next request forwards to a node that is gone
	// (answered 503 with Retry-After when the forward was sent on a
	// connection a closed), forgets the refusal, and the client's next try
	// takes the actor.
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	a.srv.Close()
	status, out := call(t, "POST", b.URL+actor, []byte("get"))
	if status == 503 {
		status, out = call(t, "POST", b.URL+actor, []byte("get"))
	}
	if status != 200 {
		t.Fatalf("request to b once a stopped: %d %s", status, out)
	}
}
