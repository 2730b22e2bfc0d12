package alarms_test

// Forwarded entries (docs/design.md#stale-forward): a delivery of an entry
// this node's sweep listed that finds the actor held by another node hands
// the entry to the host's Forwarder; the holder's plugin takes it with
// OfferEntry. The node-level test with real nodes is in package node
// (TestAStaleEntryOfAnActorHeldByANodeThatIsNoWalkerIsForwardedAndRemoved).

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/alarms"
	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/alarmindex"
	"github.com/wasmkeep/alarms/bucket"
)

// forwardingTaker finds every actor held by another node, and records
// what it is asked to forward.
type forwardingTaker struct {
	mu       sync.Mutex
	forwards []alarmindex.Key
	takes    int
	// block, if set, holds each Forward until it is closed.
	block chan struct{}
}

var errHeldElsewhere = errors.New("held by node h")

func (f *forwardingTaker) Take(context.Context, abi.ActorID) (alarms.Actor, func(error), error) {
	f.mu.Lock()
	f.takes++
	f.mu.Unlock()
	return nil, nil, alarms.NotHere(errHeldElsewhere)
}

func (f *forwardingTaker) taken() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.takes
}

// forwardingHost is a sweepHost that is an alarms.Forwarder: f forwards.
type forwardingHost struct {
	*sweepHost
	f *forwardingTaker
}

func (h forwardingHost) Forward(ctx context.Context, entry alarmindex.Key, notHere error) error {
	return h.f.Forward(ctx, entry, notHere)
}

func (f *forwardingTaker) Forward(_ context.Context, entry alarmindex.Key, notHere error) error {
	if !errors.Is(notHere, errHeldElsewhere) {
		return errors.New("Forward was not given Take's error")
	}
	if f.block != nil {
		<-f.block
	}
	f.mu.Lock()
	f.forwards = append(f.forwards, entry)
	f.mu.Unlock()
	return nil
}

func (f *forwardingTaker) got() []alarmindex.Key {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.forwards)
}

// overdueHeldElsewhere starts a node whose host finds every actor held
// elsewhere (f) with one entry of xid in the index, due a second after the
// start; arrange (if set) is called with the entry's time before the clock
// moves two seconds and a margin on and the timer loop starts.
func overdueHeldElsewhere(t *testing.T, f *forwardingTaker, arrange func(n *staleNode, tA int64)) (*staleNode, int64) {
	t.Helper()
	b := bucket.NewMem()
	n := newStaleNodeOf(t, b, func(h *sweepHost) alarms.Host { return forwardingHost{sweepHost: h, f: f} })
	tA := swStart.Add(time.Second).UnixMilli()
	e1 := alarmindex.Key{Actor: xid, DueMs: tA, Tag: alarmindex.Tag{Generation: 2, Nonce: "1"}}
	if _, err := b.Put(context.Background(), e1.String(), nil, bucket.Cond{}); err != nil {
		t.Fatal(err)
	}
	if arrange != nil {
		arrange(n, tA)
	}
	n.host.advance(time.Second + swMargin + time.Second)
	n.runTimer(t, f)
	return n, tA
}

// A walker's sweep lists an overdue entry; its delivery finds the actor
// held by another node: the alarm is dropped, as before, and the entry (the
// actor, its time) is forwarded, once. An alarm the timer had from
// anywhere else is dropped without a forward: the holder's timer has it.
func TestADeliveryThatFindsTheActorHeldElsewhereForwardsTheEntryItsSweepListed(t *testing.T) {
	ctx := context.Background()
	f := &forwardingTaker{}
	other := abi.ActorID{Tenant: "t", Class: "c", Name: "y"}
	n, tA := overdueHeldElsewhere(t, f, func(n *staleNode, tA int64) {
		n.timer.Set(alarms.TimerKey(other), tA) // not listed by a sweep
	})
	n.p.Sweep(ctx)
	waitUntil(t, "the listed entry forwarded", func() bool { return len(f.got()) > 0 })
	time.Sleep(50 * time.Millisecond)
	want := alarmindex.Key{Actor: xid, DueMs: tA}
	if got := f.got(); len(got) != 1 || got[0] != want {
		t.Fatalf("forwarded %v; want %v once", got, want)
	}
	for _, id := range []abi.ActorID{xid, other} {
		if _, ok := n.timer.Get(alarms.TimerKey(id)); ok {
			t.Errorf("the timer still holds %s: want it dropped", id)
		}
	}
	var forwarded int
	for _, d := range n.deliveries() {
		if !errors.Is(d.Err, alarms.ErrNotHere) {
			t.Errorf("delivery %+v: want ErrNotHere", d)
		}
		if d.Forwarded {
			forwarded++
			if d.Actor != xid {
				t.Errorf("forwarded the delivery of %s", d.Actor)
			}
		}
	}
	if forwarded != 1 {
		t.Errorf("%d deliveries say they forwarded; want 1", forwarded)
	}
}

// Once a delivery found the actor held elsewhere and forwarded its entry,
// the sweeps of the next RetryAfterError (a lease period) leave the actor
// out: taking it again would only read its ownership record and its
// holder's lease to be refused once more (after a bucket outage, every
// overdue actor of every other node, every sweep). After that wait the
// sweep hands it to the timer again, so a holder that died meanwhile is
// taken over.
func TestAnActorFoundHeldElsewhereIsLeftOutOfSweepsForALeasePeriod(t *testing.T) {
	ctx := context.Background()
	f := &forwardingTaker{}
	n, _ := overdueHeldElsewhere(t, f, nil)
	n.p.Sweep(ctx)
	waitUntil(t, "the listed entry forwarded", func() bool { return len(f.got()) > 0 })
	time.Sleep(50 * time.Millisecond)
	if got := f.taken(); got != 1 {
		t.Fatalf("%d takes after the first sweep; want 1", got)
	}
	// RetryAfterError is the margin here.
	for range 3 {
		n.host.advance(swMargin / 4)
		n.p.Sweep(ctx)
	}
	time.Sleep(50 * time.Millisecond)
	if got := f.taken(); got != 1 {
		t.Fatalf("%d takes after three more sweeps within a lease period of the forward; want the actor left out (1 take)", got)
	}
	n.host.advance(swMargin / 4)
	n.p.Sweep(ctx)
	waitUntil(t, "the actor taken again after the wait", func() bool { return f.taken() == 2 })
}

// A forward waits for the holder; the delivery that found the actor held
// there does not: it ends, and frees its worker for the node's own alarms,
// while the forward is still in flight.
func TestADeliveryDoesNotWaitForItsForward(t *testing.T) {
	ctx := context.Background()
	f := &forwardingTaker{block: make(chan struct{})}
	n, _ := overdueHeldElsewhere(t, f, nil)
	defer close(f.block)
	n.p.Sweep(ctx)
	waitUntil(t, "the delivery ended while its forward waits for the holder", func() bool { return len(n.deliveries()) == 1 })
	if d := n.deliveries()[0]; !errors.Is(d.Err, alarms.ErrNotHere) || !d.Forwarded {
		t.Fatalf("delivery %+v: want ErrNotHere, forwarded", d)
	}
	if got := f.got(); len(got) != 0 {
		t.Fatalf("forwards done %v while the holder blocks them", got)
	}
}

// The holder's side: an offered entry at a time the committed state does
// not name is removed through the delivery rules (R2, R3: a newer
// generation's entry stays), whether or not the timer holds the actor,
// without running on-alarm; an offer of the time the timer holds, or of
// the time the latest upload named, is skipped; an actor another node
// holds now is an error wrapping ErrNotHere.
func TestOfferEntryRemovesAForwardedStaleEntry(t *testing.T) {
	swBuckets(t, func(t *testing.T, b bucket.Bucket) {
		ctx := context.Background()
		n := newStaleNode(t, b)
		a := &fakeActor{p: n.p, j: n.j, id: xid, gen: 3, holdValid: true, uploaded: true, bucketHad: true,
			meta: map[string]string{}, initRecorded: true}
		tA := swStart.Add(time.Second).UnixMilli()
		tB := tA + time.Hour.Milliseconds()
		n.event(t, a, tB)
		named, _ := alarmindex.ParseRecorded(xid, a.meta[alarmindex.MetaAlarmIndexed])
		stale := alarmindex.Key{Actor: xid, DueMs: tA, Tag: alarmindex.Tag{Generation: 2, Nonce: "1"}}
		newer := alarmindex.Key{Actor: xid, DueMs: tA, Tag: alarmindex.Tag{Generation: 4, Nonce: "77"}}
		for _, k := range []alarmindex.Key{stale, newer} {
			if _, err := b.Put(ctx, k.String(), nil, bucket.Cond{}); err != nil {
				t.Fatal(err)
			}
		}
		n.host.advance(time.Second + swMargin + time.Second)
		tk := &taker{a: a}
		n.host.tk = tk
		n.j.take()

		for _, skip := range []int64{tB, tB + 1} {
			if out, err := n.p.OfferEntry(ctx, alarmindex.Key{Actor: xid, DueMs: skip}); err != nil || out != alarms.OfferSkipped {
				t.Errorf("an offer at or after the time the timer holds: %q, %v; want skipped", out, err)
			}
		}
		out, err := n.p.OfferEntry(ctx, alarmindex.Key{Actor: xid, DueMs: tA})
		if err != nil || out != alarms.OfferRemoved {
			t.Fatalf("OfferEntry: %q, %v; want removed", out, err)
		}
		if exists(t, b, stale) || !exists(t, b, newer) || !exists(t, b, *named) {
			t.Errorf("after the removal: stale there %v, newer generation's there %v, named there %v; want only the stale one gone",
				exists(t, b, stale), exists(t, b, newer), exists(t, b, *named))
		}
		log := n.j.take()
		if slices.Contains(log, "RUN-ALARM") || slices.Contains(log, "UPLOAD") {
			t.Errorf("the removal ran on-alarm or uploaded: %q", log)
		}
		if at, ok := n.timer.Get(alarms.TimerKey(xid)); !ok || at != tB {
			t.Errorf("the timer holds %d %v; want tB untouched", at, ok)
		}

		// The timer does not hold the actor (its alarm is elsewhere, or
		// none): the offer is still taken.
		n.timer.Remove(alarms.TimerKey(xid))
		stale2 := alarmindex.Key{Actor: xid, DueMs: tA + 5, Tag: alarmindex.Tag{Generation: 2, Nonce: "2"}}
		if _, err := b.Put(ctx, stale2.String(), nil, bucket.Cond{}); err != nil {
			t.Fatal(err)
		}
		if out, err := n.p.OfferEntry(ctx, alarmindex.Key{Actor: xid, DueMs: tA + 5}); err != nil || out != alarms.OfferRemoved || exists(t, b, stale2) {
			t.Errorf("an offer while the timer holds nothing: %q, %v, entry there %v; want it removed", out, err, exists(t, b, stale2))
		}
		if out, err := n.p.OfferEntry(ctx, alarmindex.Key{Actor: xid, DueMs: named.DueMs}); err != nil || out != alarms.OfferSkipped {
			t.Errorf("an offer of the time the latest upload named: %q, %v; want skipped", out, err)
		}

		tk.takeErr = alarms.NotHere(errHeldElsewhere)
		if _, err := n.p.OfferEntry(ctx, alarmindex.Key{Actor: xid, DueMs: tA + 7}); !errors.Is(err, alarms.ErrNotHere) {
			t.Errorf("an offer for an actor held elsewhere: %v; want ErrNotHere", err)
		}
	})
}

// waitUntil polls cond for up to 10 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10 s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
