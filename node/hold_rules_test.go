package node_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmkeep/alarms"
	"github.com/wasmkeep/alarms/alarmindex"
	"github.com/wasmkeep/alarms/bucket"
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
	a := ixNode(t, spy, "a", t.TempDir(), ixConfig{class: oneshotClass, steady: true, log: log})
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
