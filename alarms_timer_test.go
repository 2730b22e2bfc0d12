package alarms_test

// The ordering the plugin owns: Replicate and BeforeUpload re-check the
// hold after the upload, and the timer loop (DeliverDue, RunTimer) takes
// the actor, delivers, gives up and retries the same entry time after a
// failure, drops an alarm that is not this node's, and re-arms the timer
// from the committed state.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmkeep/alarms"
	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/alarmindex"
	"github.com/wasmkeep/alarms/hostmod"
	"github.com/wasmkeep/alarms/internal/variant"
	"github.com/wasmkeep/alarms/sweeper"
)

func TestReplicateRunsTheWholeOrderAroundTheHostsUpload(t *testing.T) {
	f := newFixture(t)
	a := f.actor(3)
	e1 := tagged(t1, 3, "9")
	f.put(t, e1)
	record(a, &e1)
	a.alarm = ptr(t2)
	if err := f.p.Replicate(context.Background(), a, alarms.AfterEvent); err != nil {
		t.Fatal(err)
	}
	f.p.FlushDeletes(context.Background()) // the DELETE waits for its batch
	e2 := tagged(t2, 3, "1")
	wantJournal(t, f.j.take(),
		"PUT-IF-NONE-MATCH "+e2.String(),
		"META alarm_indexed="+alarmindex.FormatRecorded(&e2),
		"UPLOAD",
		"DELETE-BATCH "+e1.String())
}

// An upload that returned after the hold lapsed does not count: the entry
// it replaced may be named by a newer holder's state, so it stays, and the
// host is told to give the actor up. (Found by the simulator; the plugin,
// not each host, does this check.)
func TestAnUploadThatReturnsAfterTheHoldLapsedDeletesNothing(t *testing.T) {
	for _, via := range []string{"Replicate", "BeforeUpload"} {
		t.Run(via, func(t *testing.T) {
			f := newFixture(t)
			a := f.actor(3)
			e1 := tagged(t1, 3, "9")
			f.put(t, e1)
			record(a, &e1)
			a.alarm = ptr(t2)
			a.lapseOnUpload = true
			var err error
			if via == "Replicate" {
				err = f.p.Replicate(context.Background(), a, alarms.AfterEvent)
			} else {
				after, berr := f.p.BeforeUpload(context.Background(), a, alarms.AfterEvent)
				if berr != nil {
					t.Fatal(berr)
				}
				if err = a.Upload(context.Background()); err == nil {
					err = after(context.Background())
				}
			}
			if !errors.Is(err, alarmindex.ErrGiveUp) || !strings.Contains(err.Error(), "lapsed") || !strings.Contains(err.Error(), a.id.String()) {
				t.Fatalf("%s: %v; want a give-up naming the actor and the lapsed hold", via, err)
			}
			f.p.FlushDeletes(context.Background())
			for _, l := range f.j.take() {
				if strings.HasPrefix(l, "DELETE") {
					t.Fatalf("%s deleted %s after an upload the hold did not outlive", via, l)
				}
			}
			if _, _, ok := f.mem.Object(e1.String()); !ok {
				t.Fatal("the replaced entry is gone")
			}
		})
	}
	// The unsafe executor (a host that trusts a late upload) deletes it:
	// the check above is what stops it.
	f := newFixture(t)
	p, err := alarms.Register(alarms.WithVariants(alarms.Config{
		Bucket: f.mem, Host: f.host, Timer: f.timer, Margin: time.Second, Nonces: &counterNonces{},
	}, variant.Set{TrustLateUploads: true}))
	if err != nil {
		t.Fatal(err)
	}
	a := f.actor(3)
	e1 := tagged(t1, 3, "9")
	f.put(t, e1)
	record(a, &e1)
	a.alarm, a.lapseOnUpload = ptr(t2), true
	if err := p.Replicate(context.Background(), a, alarms.AfterEvent); err != nil {
		t.Fatal(err)
	}
	p.FlushDeletes(context.Background())
	if _, _, ok := f.mem.Object(e1.String()); ok {
		t.Fatal("TrustLateUploads kept the replaced entry: the mutation no longer reaches the executor")
	}
}

// R3 on the after-event path: an upload under an older generation (an
// exec-durable replica's) that clears the alarm never deletes the entry a
// newer owner wrote, though the database names it.
func TestAnUploadNeverDeletesANewerOwnersEntry(t *testing.T) {
	f := newFixture(t)
	a := f.actor(2)
	newer := tagged(t1, 5, "7")
	f.put(t, newer)
	record(a, &newer)
	a.alarm = nil
	for _, kind := range []alarms.UploadKind{alarms.AfterEvent, alarms.MidEvent} {
		if err := f.p.Replicate(context.Background(), a, kind); err != nil {
			t.Fatal(err)
		}
		for _, l := range f.j.take() {
			if strings.HasPrefix(l, "DELETE") {
				t.Fatalf("%v: deleted an entry of generation 5 under generation 2: %s", kind, l)
			}
		}
		if _, _, ok := f.mem.Object(newer.String()); !ok {
			t.Fatalf("%v: the newer owner's entry is gone", kind)
		}
		record(a, &newer)
	}
	// Moving the alarm elsewhere does not delete it either.
	a.alarm = ptr(t2)
	if err := f.p.Replicate(context.Background(), a, alarms.AfterEvent); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := f.mem.Object(newer.String()); !ok {
		t.Fatal("moving the alarm deleted the newer owner's entry")
	}
}

// taker is a host for the timer loop: Take hands out the fixture's actor,
// or fails with takeErr.
type taker struct {
	mu      sync.Mutex
	a       *fakeActor
	takeErr error
	runErr  error
	takes   []abi.ActorID
	dones   []error
}

type takenActor struct {
	*fakeActor
	t *taker
}

func (ta takenActor) RunAlarm(ctx context.Context) (hostmod.Delivery, error) {
	d, _ := ta.fakeActor.RunAlarm(ctx)
	if ta.t.runErr != nil {
		return hostmod.Delivery{}, ta.t.runErr
	}
	// The handler set its next alarm.
	ta.alarm = ptr(t2)
	return d, nil
}

func (tk *taker) Take(_ context.Context, id abi.ActorID) (alarms.Actor, func(error), error) {
	tk.mu.Lock()
	defer tk.mu.Unlock()
	tk.takes = append(tk.takes, id)
	if tk.takeErr != nil {
		return nil, nil, tk.takeErr
	}
	return takenActor{fakeActor: tk.a, t: tk}, func(err error) {
		tk.mu.Lock()
		tk.dones = append(tk.dones, err)
		tk.mu.Unlock()
	}, nil
}

func TestDeliverDueRunsAndReArmsFromTheCommittedAlarm(t *testing.T) {
	f := newFixture(t)
	a := f.actor(3)
	a.alarm = ptr(t1)
	tk := &taker{a: a}
	key := alarms.TimerKey(a.id)
	d := f.deliverDue(tk, key, t1)
	if d.Err != nil || d.Outcome != alarmindex.OutcomeRun || !d.Event.Ran {
		t.Fatalf("DeliverDue: %+v; want the alarm run", d)
	}
	if at, ok := f.timer.Get(key); !ok || at != t2 {
		t.Errorf("timer holds %d (%v), want the alarm the handler committed, %d", at, ok, t2)
	}
	if len(tk.dones) != 1 || tk.dones[0] != nil {
		t.Errorf("Done calls %v, want one with no error", tk.dones)
	}
}

// A delivery that fails on the way gives the actor up, and its retry, a
// lease period later, delivers the same entry time (not the retry's).
func TestDeliverDueRetriesTheSameEntryTimeAfterAFailure(t *testing.T) {
	f := newFixture(t)
	a := f.actor(3)
	a.alarm = ptr(t1)
	f.host.now = time.UnixMilli(t1).Add(time.Second)
	tk := &taker{a: a, runErr: errors.New("disk I/O error")}
	key := alarms.TimerKey(a.id)
	d := f.deliverDue(tk, key, t1)
	if d.Err == nil || len(tk.dones) != 1 || tk.dones[0] == nil {
		t.Fatalf("DeliverDue: err %v, Done calls %v; want the failure reported and the actor given up", d.Err, tk.dones)
	}
	want := f.host.now.Add(15 * time.Second).UnixMilli() // RetryAfterError defaults to Margin
	if at, ok := f.timer.Get(key); !ok || at != want || d.RetryAt != want {
		t.Fatalf("timer holds %d (%v), RetryAt %d; want the retry at %d", at, ok, d.RetryAt, want)
	}
	// The bucket is unreachable for the retry too: still the same entry.
	// (The timer pops what it delivers.)
	f.timer.Remove(key)
	tk.runErr, tk.takeErr = nil, errors.New("bucket unreachable")
	d = f.deliverDue(tk, key, want)
	if d.TimerAt != t1 || d.Err == nil {
		t.Fatalf("the retry delivered %d (err %v), want the entry time %d", d.TimerAt, d.Err, t1)
	}
	tk.takeErr = nil
	f.timer.Remove(key)
	d = f.deliverDue(tk, key, f.host.now.Add(30*time.Second).UnixMilli())
	if d.TimerAt != t1 || d.Err != nil || d.Outcome != alarmindex.OutcomeRun {
		t.Fatalf("the second retry: %+v; want the entry time %d run", d, t1)
	}
	// An event that moves the alarm drops the pending retry's time.
	f.deliverDue(&taker{a: a, takeErr: errors.New("x")}, key, t2)
	f.p.Arm(a.id, ptr(t2))
	if d := f.deliverDue(tk, key, t2); d.TimerAt != t2 {
		t.Errorf("after Arm the delivery was for %d, want %d", d.TimerAt, t2)
	}
}

func TestDeliverDueDropsAnAlarmThatIsNotThisNodes(t *testing.T) {
	f := newFixture(t)
	a := f.actor(3)
	key := alarms.TimerKey(a.id)
	f.timer.Set(key, t1)
	tk := &taker{a: a, takeErr: alarms.NotHere(errors.New("held by n2"))}
	d := f.deliverDue(tk, key, t1)
	if !errors.Is(d.Err, alarms.ErrNotHere) {
		t.Fatalf("err %v, want ErrNotHere", d.Err)
	}
	if _, ok := f.timer.Get(key); ok {
		t.Error("the timer still holds the alarm of an actor another node holds")
	}
}

// RunTimer delivers what the timer pops, one delivery per actor at a time,
// and returns once its deliveries ended.
func TestRunTimerDeliversDueAlarms(t *testing.T) {
	clock := &tickingHost{fakeHost: fakeHost{now: time.UnixMilli(t1)}}
	timer := sweeper.NewTimer(retryMax)
	got := make(chan alarms.Delivery, 4)
	p, err := alarms.Register(alarms.Config{
		Bucket: newFixture(t).mem, Host: clock, Timer: timer, Margin: time.Second,
		OnDelivery: func(d alarms.Delivery) { got <- d },
	})
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t)
	a := f.actor(3)
	a.p = p
	a.alarm = ptr(t1)
	timer.Set(alarms.TimerKey(a.id), t1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	clock.tk = &taker{a: a}
	go func() { p.RunTimer(ctx); close(done) }()
	select {
	case d := <-got:
		if d.Err != nil || !d.Event.Ran || d.Actor != a.id {
			t.Fatalf("delivery %+v", d)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no delivery in 30 s")
	}
	cancel()
	<-done
}

// tickingHost's After fires at once, so the timer loop does not wait.
type tickingHost struct{ fakeHost }

func (h *tickingHost) After(time.Duration) <-chan time.Time {
	c := make(chan time.Time, 1)
	c <- h.now
	return c
}

// gatedTaker lets a test hold deliveries in Take and counts how many are
// in flight at once.
type gatedTaker struct {
	gate chan struct{}
	mu   sync.Mutex
	in   int
	peak int
	took map[abi.ActorID]int
}

func (g *gatedTaker) Take(_ context.Context, id abi.ActorID) (alarms.Actor, func(error), error) {
	g.mu.Lock()
	g.in++
	g.peak = max(g.peak, g.in)
	g.took[id]++
	g.mu.Unlock()
	<-g.gate
	return &fakeActor{id: id, j: &journal{}, meta: map[string]string{}}, func(error) {
		g.mu.Lock()
		g.in--
		g.mu.Unlock()
	}, nil
}

// RunTimer runs at most MaxConcurrentDeliveries deliveries at once, on at
// most that many workers whatever the number of alarms, delivers each due
// alarm once, and its workers are gone when it returns.
func TestRunTimerBoundsDeliveriesAndWorkers(t *testing.T) {
	const slots, actors = 3, 60
	host := &tickingHost{fakeHost: fakeHost{now: time.UnixMilli(t1)}}
	timer := sweeper.NewTimer(retryMax)
	var delivered sync.WaitGroup
	delivered.Add(actors)
	var peakWorkers atomic.Int64
	var p *alarms.Plugin
	p, err := alarms.Register(alarms.Config{
		SingleNode: true, Host: host, Timer: timer, MaxConcurrentDeliveries: slots,
		OnDelivery: func(d alarms.Delivery) {
			if d.Err != nil || !d.Event.Ran {
				t.Errorf("delivery %+v", d)
			}
			for {
				w := peakWorkers.Load()
				if n := int64(p.Workers()); n <= w || peakWorkers.CompareAndSwap(w, n) {
					break
				}
			}
			delivered.Done()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	g := &gatedTaker{gate: make(chan struct{}), took: map[abi.ActorID]int{}}
	for i := range actors {
		timer.Set(alarms.TimerKey(abi.ActorID{Tenant: "t", Class: "c", Name: fmt.Sprintf("a%02d", i)}), t1)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	host.tk = g
	go func() { p.RunTimer(ctx); close(done) }()
	// The slots fill: as many deliveries as slots reach Take.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		g.mu.Lock()
		in := g.in
		g.mu.Unlock()
		if in >= slots {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d deliveries reached Take in 30 s, want the %d slots", in, slots)
		}
	}
	// Let them through one at a time; the slots stay full.
	for range actors {
		select {
		case g.gate <- struct{}{}:
		case <-time.After(30 * time.Second):
			t.Fatal("no delivery reached Take in 30 s")
		}
	}
	delivered.Wait()
	if g.peak > slots {
		t.Errorf("%d deliveries in flight at once, more than the %d slots", g.peak, slots)
	}
	if w := peakWorkers.Load(); w < 1 || w > slots {
		t.Errorf("%d delivery workers at most, want 1 to %d", w, slots)
	}
	for id, n := range g.took {
		if n != 1 {
			t.Errorf("%v taken %d times, want once", id, n)
		}
	}
	if len(g.took) != actors {
		t.Errorf("%d actors taken, want %d", len(g.took), actors)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("RunTimer did not return in 30 s after its context ended")
	}
	if w := p.Workers(); w != 0 {
		t.Errorf("%d delivery workers left after RunTimer returned", w)
	}
}

// realTimeHost's After is the real clock's, for a test of a deadline.
type realTimeHost struct{ fakeHost }

func (h *realTimeHost) After(d time.Duration) <-chan time.Time { return time.After(d) }

// drainRun starts a plugin with one alarm due whose take waits for gate
// (or for its context to end), calls stop once the take has begun, and
// returns the delivery and whether stop returned before gate was opened.
func drainRun(t *testing.T, drain time.Duration, gate chan struct{}) (alarms.Delivery, bool) {
	t.Helper()
	host := &realTimeHost{fakeHost: fakeHost{now: time.UnixMilli(t1)}}
	timer := sweeper.NewTimer(retryMax)
	got := make(chan alarms.Delivery, 1)
	p, err := alarms.Register(alarms.Config{
		Bucket: newFixture(t).mem, Host: host, Timer: timer, Margin: time.Second, DrainTimeout: drain,
		OnDelivery: func(d alarms.Delivery) { got <- d },
	})
	if err != nil {
		t.Fatal(err)
	}
	a := newFixture(t).actor(3)
	a.p = p
	a.alarm = ptr(t1)
	inner := &taker{a: a}
	began := make(chan struct{})
	host.tk = takerFunc(func(ctx context.Context, id abi.ActorID) (alarms.Actor, func(error), error) {
		close(began)
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
		return inner.Take(ctx, id)
	})
	timer.Set(alarms.TimerKey(a.id), t1)
	stop := p.Start(context.Background())
	<-began
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	early := false
	select {
	case <-stopped:
		early = true
	case <-time.After(200 * time.Millisecond):
	}
	close(gate)
	<-stopped
	return <-got, early
}

// A stop lets a delivery under way finish with its context live: it runs
// on-alarm, replicates and re-arms, and stop waits for it. Without that a
// SIGTERM cut the delivery's index PUT, gave the actor up, and on-alarm ran
// again for the same time where the actor was taken next.
func TestStopLetsADeliveryInFlightFinish(t *testing.T) {
	d, early := drainRun(t, time.Minute, make(chan struct{}))
	if early {
		t.Error("stop returned while a delivery was under way")
	}
	if d.Err != nil || !d.Event.Ran {
		t.Fatalf("the delivery under way at the stop: %+v, want it run without error", d)
	}
}

// A delivery still running at the drain deadline is cut: its context is
// cancelled and stop returns.
func TestStopCutsADeliveryAtTheDrainDeadline(t *testing.T) {
	d, early := drainRun(t, 20*time.Millisecond, make(chan struct{}))
	if !early {
		t.Error("stop waited past the drain deadline")
	}
	if !errors.Is(d.Err, context.Canceled) || d.Event.Ran {
		t.Fatalf("the delivery at the drain deadline: %+v, want it cut (context canceled)", d)
	}
}
