package alarms_test

// A stale index entry of an actor the node timer keeps at a later time
// (docs/design.md#sweep): a sweep leaves such an actor out of its plan, so
// before the plugin removed these entries on its own, one whose DELETE
// failed on every attempt, or whose node died before its batch left,
// stayed for as long as the actor kept re-arming within the retry horizon.
// Over an in-memory bucket and over versitygw.

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmkeep/alarms"
	"github.com/wasmkeep/alarms/alarmindex"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/sweeper"
)

// failingDeletes fails every DELETE while on is set, as a bucket that
// answers them with errors for longer than the Deleter's retries.
type failingDeletes struct {
	bucket.Bucket
	on *atomic.Bool
}

var errInjected = errors.New("injected: 503 Slow Down")

func (b failingDeletes) Delete(ctx context.Context, key string) error {
	if b.on.Load() {
		return errInjected
	}
	return b.Bucket.Delete(ctx, key)
}

func (b failingDeletes) DeleteBatch(ctx context.Context, keys []string) ([]string, error) {
	if b.on.Load() {
		return nil, errInjected
	}
	return b.Bucket.DeleteBatch(ctx, keys)
}

// staleNode is a plugin on b whose replaced entries go through a Deleter
// that sends only when flushed and tries each key four times in all.
type staleNode struct {
	host  *sweepHost
	timer *sweeper.Timer
	p     *alarms.Plugin
	del   *bucket.Deleter
	j     *journal
	fault *atomic.Bool

	mu  sync.Mutex
	got []alarms.Delivery // the timer's deliveries
}

func (n *staleNode) deliveries() []alarms.Delivery {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.got)
}

func newStaleNode(t *testing.T, b bucket.Bucket) *staleNode {
	return newStaleNodeOf(t, b, func(h *sweepHost) alarms.Host { return h })
}

// newStaleNodeOf is newStaleNode with the Host host makes of the node's
// sweepHost.
func newStaleNodeOf(t *testing.T, b bucket.Bucket, host func(*sweepHost) alarms.Host) *staleNode {
	t.Helper()
	n := &staleNode{host: &sweepHost{now: swStart, self: "n1", live: []string{"n1"}},
		timer: sweeper.NewTimer(swRetryMax), j: &journal{}, fault: &atomic.Bool{}}
	jb := journaled{Bucket: failingDeletes{Bucket: b, on: n.fault}, j: n.j}
	n.del = bucket.NewDeleter(jb, time.Hour, nil)
	n.del.SetRetries(bucket.DefaultDeleteRetries, time.Hour) // retries go out on Flush
	p, err := alarms.Register(alarms.Config{
		Bucket: jb, Host: host(n.host), Timer: n.timer, Margin: swMargin, SweepPeriod: 10 * time.Second,
		RetryMax: swRetryMax, Nonces: &counterNonces{}, Deletes: n.del,
		OnDelivery: func(d alarms.Delivery) { n.mu.Lock(); n.got = append(n.got, d); n.mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	n.p = p
	return n
}

// event commits alarm as the actor's alarm and replicates it, as a host
// does after an event, then arms the timer.
func (n *staleNode) event(t *testing.T, a *fakeActor, alarm int64) {
	t.Helper()
	a.alarm = ptr(alarm)
	if err := n.p.Replicate(context.Background(), a, alarms.AfterEvent); err != nil {
		t.Fatal(err)
	}
	n.p.Arm(a.id, a.alarm)
}

// runTimer runs the plugin's timer loop with tk until the test ends. The
// host's After never fires, so the timer delivers only what is due when
// the loop starts or is armed (nothing here: the alarms are later).
func (n *staleNode) runTimer(t *testing.T, tk taking) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	n.host.tk = tk
	go func() { n.p.RunTimer(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func exists(t *testing.T, b bucket.Bucket, k alarmindex.Key) bool {
	t.Helper()
	keys, err := b.List(context.Background(), k.String(), "", 2)
	if err != nil {
		t.Fatal(err)
	}
	return slices.Contains(keys, k.String())
}

// sweepUntil sweeps (a sweep starts the removal in the background) until
// cond holds, or fails after 30 s.
func (n *staleNode) sweepUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30 s of sweeps", what)
		}
		n.p.Sweep(context.Background())
		time.Sleep(10 * time.Millisecond)
	}
}

// The replaced entry's DELETE fails on every attempt (a fault longer than
// the Deleter's retries); the actor's next alarm is within the retry
// horizon, so the timer keeps it against any sweep's offer. Once the
// replaced entry is overdue, a sweep has the plugin take the actor and
// remove it as stale, without running on-alarm and without touching the
// timer's time; the entry the state names, and one of a newer generation
// (R3), stay.
func TestAStaleEntryOfAnActorTheTimerKeepsIsRemoved(t *testing.T) {
	swBuckets(t, func(t *testing.T, b bucket.Bucket) {
		ctx := context.Background()
		n := newStaleNode(t, b)
		a := &fakeActor{p: n.p, j: n.j, id: xid, gen: 3, holdValid: true, uploaded: true, bucketHad: true,
			meta: map[string]string{}, initRecorded: true}
		tA := swStart.Add(time.Second).UnixMilli()
		tB := tA + time.Minute.Milliseconds()
		n.event(t, a, tA)
		e1, _ := alarmindex.ParseRecorded(xid, a.meta[alarmindex.MetaAlarmIndexed])
		// A newer owner's entry at the same time (its hold came after this
		// one's): never this hold's to delete.
		newer := alarmindex.Key{Actor: xid, DueMs: tA, Tag: alarmindex.Tag{Generation: 4, Nonce: "77"}}
		if _, err := b.Put(ctx, newer.String(), nil, bucket.Cond{}); err != nil {
			t.Fatal(err)
		}

		// The alarm at tA fires and re-arms a minute later; the DELETE of
		// the replaced entry fails on its first attempt and on each retry.
		n.fault.Store(true)
		n.j.take()
		n.event(t, a, tB)
		e2, _ := alarmindex.ParseRecorded(xid, a.meta[alarmindex.MetaAlarmIndexed])
		for range bucket.DefaultDeleteRetries + 1 {
			n.p.FlushDeletes(ctx)
		}
		n.fault.Store(false)
		tries := 0
		for _, l := range n.j.take() {
			if l == "DELETE-BATCH "+e1.String() {
				tries++
			}
		}
		if tries != bucket.DefaultDeleteRetries+1 || n.del.Pending() != 0 || !exists(t, b, *e1) {
			t.Fatalf("%d attempts, %d pending, replaced entry there: %v; want the DELETE of %s given up after %d attempts",
				tries, n.del.Pending(), exists(t, b, *e1), e1, bucket.DefaultDeleteRetries+1)
		}

		// The replaced entry is overdue; the timer holds the next alarm.
		n.host.advance(time.Second + swMargin + time.Second)
		if !n.timer.Keeps(alarms.TimerKey(xid), n.host.Now().UnixMilli()) {
			t.Fatal("the timer does not keep the actor: the test shows nothing")
		}
		tk := &taker{a: a}
		n.runTimer(t, tk)
		n.j.take()
		n.sweepUntil(t, "the replaced entry removed", func() bool { return !exists(t, b, *e1) })

		if !exists(t, b, *e2) || !exists(t, b, newer) {
			t.Errorf("the named entry there: %v, the newer owner's: %v; want both kept", exists(t, b, *e2), exists(t, b, newer))
		}
		if got := n.deliveries(); len(got) != 0 {
			t.Errorf("the timer delivered %+v, want nothing before the next alarm", got)
		}
		if at, ok := n.timer.Get(alarms.TimerKey(xid)); !ok || at != tB {
			t.Errorf("timer holds %d (%v), want the next alarm %d untouched", at, ok, tB)
		}
		log := n.j.take()
		if slices.Contains(log, "RUN-ALARM") || slices.Contains(log, "UPLOAD") {
			t.Errorf("the removal ran on-alarm or uploaded: %q", log)
		}
		if !slices.Contains(log, "LIST "+alarmindex.TaggedPrefix(xid, tA)) || !slices.Contains(log, "DELETE "+e1.String()) {
			t.Errorf("requests %q: want a LIST of the entries at %d and a DELETE of %s", log, tA, e1)
		}
		tk.mu.Lock()
		defer tk.mu.Unlock()
		if len(tk.dones) == 0 || slices.ContainsFunc(tk.dones, func(err error) bool { return err != nil }) {
			t.Errorf("Done calls %v, want each without an error", tk.dones)
		}
	})
}

// The node died before its batch left: the replaced entry was never sent.
// The restarted node holds the actor again but has uploaded nothing since
// (docs/design.md#stale-forward): a sweep removes the entry all the same,
// after the fence (an upload of owner_fence), and without running
// on-alarm.
func TestAStaleEntryLeftByADeadNodeIsRemovedByTheRestartedHolderBehindTheFence(t *testing.T) {
	swBuckets(t, func(t *testing.T, b bucket.Bucket) {
		tA := swStart.Add(time.Second).UnixMilli()
		tB := tA + time.Minute.Milliseconds()
		e1 := alarmindex.Key{Actor: xid, DueMs: tA, Tag: alarmindex.Tag{Generation: 2, Nonce: "1"}}
		e2 := alarmindex.Key{Actor: xid, DueMs: tB, Tag: alarmindex.Tag{Generation: 2, Nonce: "2"}}
		for _, k := range []alarmindex.Key{e1, e2} {
			if _, err := b.Put(context.Background(), k.String(), nil, bucket.Cond{}); err != nil {
				t.Fatal(err)
			}
		}
		n := newStaleNode(t, b)
		n.host.advance(time.Second + swMargin + time.Second)
		// The restarted node holds the actor (generation 3), whose state
		// names e2; its timer has the alarm from a scan.
		a := &fakeActor{p: n.p, j: n.j, id: xid, gen: 3, holdValid: true, uploaded: false, bucketHad: true,
			meta: map[string]string{}, initRecorded: true, alarm: ptr(tB)}
		record(a, &e2)
		n.timer.Set(alarms.TimerKey(xid), tB)
		tk := &taker{a: a}
		n.runTimer(t, tk)

		n.sweepUntil(t, "the entry the dead node left removed", func() bool { return !exists(t, b, e1) })
		if !exists(t, b, e2) {
			t.Error("the entry the state names was removed")
		}
		var fenced, deleted bool
		for _, l := range n.j.take() {
			switch {
			case l == "RUN-ALARM":
				t.Error("on-alarm ran")
			case strings.HasPrefix(l, "META owner_fence"):
				fenced = true
			case l == "UPLOAD" && !fenced:
				t.Error("an upload before the fence was written")
			case strings.HasPrefix(l, "DELETE"):
				if !strings.Contains(l, e1.String()) {
					t.Errorf("%s: want only %s deleted", l, e1)
				}
				if !fenced {
					t.Errorf("%s before the fence", l)
				}
				deleted = true
			}
		}
		if !fenced || !deleted {
			t.Errorf("fenced %v, deleted %v; want the fence, then the DELETE", fenced, deleted)
		}
		if at, ok := n.timer.Get(alarms.TimerKey(xid)); !ok || at != tB {
			t.Errorf("the timer holds %d %v; want tB as it was", at, ok)
		}
	})
}

// The removal never runs on-alarm itself: when the committed alarm turns
// out to be the listed time after all (the timer fell behind the state),
// the timer is armed with it, and its own delivery runs it, once.
func TestARemovalOfStaleEntriesArmsACommittedAlarmRatherThanRunningIt(t *testing.T) {
	b := bucket.NewMem()
	n := newStaleNode(t, b)
	a := &fakeActor{p: n.p, j: n.j, id: xid, gen: 3, holdValid: true, uploaded: true, bucketHad: true,
		meta: map[string]string{}, initRecorded: true}
	tA := swStart.Add(time.Second).UnixMilli()
	tB := tA + time.Minute.Milliseconds()
	n.event(t, a, tB)
	// The state now says tA, listed, while the timer still holds tB.
	eA := alarmindex.Key{Actor: xid, DueMs: tA, Tag: alarmindex.Tag{Generation: 3, Nonce: "aa"}}
	if _, err := b.Put(context.Background(), eA.String(), nil, bucket.Cond{}); err != nil {
		t.Fatal(err)
	}
	a.alarm = ptr(tA)
	record(a, &eA)
	n.host.advance(time.Second + swMargin + time.Second)
	n.runTimer(t, &taker{a: a})
	n.j.take()
	n.sweepUntil(t, "the committed alarm delivered by the timer", func() bool { return len(n.deliveries()) > 0 })
	d := n.deliveries()[0]
	if d.TimerAt != tA || !d.Event.Ran {
		t.Errorf("the timer delivered %d (ran %v), want the committed alarm %d run", d.TimerAt, d.Event.Ran, tA)
	}
	runs := 0
	for _, l := range n.j.take() {
		if l == "RUN-ALARM" {
			runs++
		}
	}
	if runs != 1 {
		t.Errorf("on-alarm ran %d times, want once, by the timer's delivery", runs)
	}
}

// An overdue entry the delivery rules keep (here one of a newer
// generation than the hold's, R3) is not taken again on every sweep: once
// a removal removed nothing, that entry time waits RetryMax.
func TestAnEntryTheRulesKeepIsTriedOncePerRetryMax(t *testing.T) {
	swBuckets(t, func(t *testing.T, b bucket.Bucket) {
		ctx := context.Background()
		n := newStaleNode(t, b)
		a := &fakeActor{p: n.p, j: n.j, id: xid, gen: 3, holdValid: true, uploaded: true, bucketHad: true,
			meta: map[string]string{}, initRecorded: true}
		tA := swStart.Add(time.Second).UnixMilli()
		tB := tA + time.Minute.Milliseconds()
		n.event(t, a, tB)
		newer := alarmindex.Key{Actor: xid, DueMs: tA, Tag: alarmindex.Tag{Generation: 4, Nonce: "77"}}
		if _, err := b.Put(ctx, newer.String(), nil, bucket.Cond{}); err != nil {
			t.Fatal(err)
		}
		n.host.advance(time.Second + swMargin + time.Second)
		tk := &taker{a: a}
		n.runTimer(t, tk)
		dones := func() int {
			tk.mu.Lock()
			defer tk.mu.Unlock()
			return len(tk.dones)
		}
		n.sweepUntil(t, "a removal that removes nothing", func() bool { return dones() == 1 })
		for range 5 {
			n.p.Sweep(ctx)
		}
		time.Sleep(50 * time.Millisecond)
		if got := dones(); got != 1 || !exists(t, b, newer) {
			t.Fatalf("%d removals over six sweeps (entry there: %v), want 1 and the entry kept", got, exists(t, b, newer))
		}
		n.host.advance(swRetryMax)
		n.sweepUntil(t, "the entry tried again after RetryMax", func() bool { return dones() == 2 })
	})
}
