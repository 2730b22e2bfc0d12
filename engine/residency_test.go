package engine_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/hostmod"
	"github.com/wasmkeep/alarms/internal/testguest"
)

func reqAt(ms int64) []byte { return timeReq(ms) }

// openN opens n actors of the oneshot fixture.
func (e *env) openN(c *engine.Class, n int) []*engine.Actor {
	e.t.Helper()
	actors := make([]*engine.Actor, n)
	for i := range actors {
		id := abi.ActorID{Tenant: "t", Class: c.Name, Name: fmt.Sprintf("a%03d", i)}
		a, err := e.eng.Open(e.ctx, id, c, filepath.Join(e.dir, id.Name+".db"))
		if err != nil {
			e.t.Fatal(err)
		}
		e.t.Cleanup(func() { a.Close(e.ctx) })
		actors[i] = a
	}
	return actors
}

// Ten actors under a budget of three databases and two instances: every
// event commits, the counters never pass the budget, the least recently
// used actors sleep, and a sleeping actor wakes with its committed state.
func TestResidencyBudget(t *testing.T) {
	e := newEnv(t, engine.WithMaxOpenDatabases(3), engine.WithMaxInstances(2))
	c := e.class("oneshot", testguest.Fixture(t, "oneshot_alarm"))
	actors := e.openN(c, 10)
	for round := 0; round < 3; round++ {
		for i, a := range actors {
			at := t0 + int64(1000*round+i)
			res, err := a.Request(e.ctx, reqAt(at))
			if err != nil {
				t.Fatalf("round %d actor %d: %v", round, i, err)
			}
			if res.Alarm == nil || *res.Alarm != at {
				t.Fatalf("round %d actor %d: committed %+v, want alarm %d", round, i, res, at)
			}
			st := e.eng.Residency()
			if st.OpenDatabases > 3 || st.LiveInstances > 2 {
				t.Fatalf("round %d actor %d: %d databases open and %d instances live, budget 3 and 2", round, i, st.OpenDatabases, st.LiveInstances)
			}
		}
	}
	st := e.eng.Residency()
	if st.PeakOpenDatabases != 3 || st.PeakLiveInstances != 2 {
		t.Fatalf("peaks %d databases, %d instances; want exactly the budgets 3 and 2", st.PeakOpenDatabases, st.PeakLiveInstances)
	}
	if st.Slept == 0 || st.InstancesClosed == 0 {
		t.Fatalf("no actor was put to sleep under the budget: %+v", st)
	}
	// The least recently used are asleep; the last three are open.
	for i, a := range actors {
		if want := i < 7; a.Asleep() != want {
			t.Fatalf("actor %d: asleep %v, want %v", i, a.Asleep(), want)
		}
	}
	// A sleeping actor wakes with what it committed, and its alarm fires.
	e.clock.Set(t0 + 5000)
	d, err := actors[0].DeliverAlarm(e.ctx)
	if err != nil || !d.Ran || d.Scheduled != t0+2000 {
		t.Fatalf("delivery to a sleeping actor: %+v, %v; want on-alarm at %d", d, err, t0+2000)
	}
	if actors[0].Asleep() {
		t.Fatal("the delivered actor is still asleep")
	}
	// Closing frees the slots.
	for _, a := range actors {
		a.Close(e.ctx)
	}
	if st := e.eng.Residency(); st.OpenDatabases != 0 || st.LiveInstances != 0 {
		t.Fatalf("after closing every actor: %d databases, %d instances counted", st.OpenDatabases, st.LiveInstances)
	}
}

// The actor put to sleep for room is the one whose last call ended longest
// ago: a call moves its actor to the front, so an actor opened early but
// used since stays open and one opened later but idle since goes.
func TestResidencyEvictsTheLeastRecentlyUsed(t *testing.T) {
	e := newEnv(t, engine.WithMaxOpenDatabases(2))
	c := e.class("oneshot", testguest.Fixture(t, "oneshot_alarm"))
	actors := e.openN(c, 2) // a000, then a001
	if _, err := actors[0].Request(e.ctx, reqAt(t0+1)); err != nil {
		t.Fatal(err)
	}
	if _, err := actors[1].State(e.ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := actors[0].State(e.ctx); err != nil { // a000 used last
		t.Fatal(err)
	}
	id := abi.ActorID{Tenant: "t", Class: c.Name, Name: "late"}
	late, err := e.eng.Open(e.ctx, id, c, filepath.Join(e.dir, "late.db")) // needs room
	if err != nil {
		t.Fatal(err)
	}
	defer late.Close(e.ctx)
	if !actors[1].Asleep() || actors[0].Asleep() || late.Asleep() {
		t.Fatalf("asleep: a000 %v, a001 %v, late %v; want only a001, the least recently used",
			actors[0].Asleep(), actors[1].Asleep(), late.Asleep())
	}
	// The sleeper wakes with its state, and a000 (used before late) goes.
	if st, err := actors[1].State(e.ctx); err != nil || st.Alarm != nil {
		t.Fatalf("woken a001: %+v, %v", st, err)
	}
	if !actors[0].Asleep() || late.Asleep() {
		t.Fatalf("asleep: a000 %v, late %v; want a000", actors[0].Asleep(), late.Asleep())
	}
}

// When every open actor is busy, an actor that needs a database waits for
// one to become idle, and past the residency wait gets a clear error that
// names it, never a failed open inside SQLite.
func TestResidencyWaitsThenRefuses(t *testing.T) {
	e := newEnv(t, engine.WithMaxOpenDatabases(1), engine.WithResidencyWait(300*time.Millisecond))
	c := e.class("oneshot", testguest.Fixture(t, "oneshot_alarm"))
	busy := e.openN(c, 1)[0]
	hold := make(chan struct{})
	held := make(chan struct{})
	go busy.Lock(func(*engine.Store) error { close(held); <-hold; return nil })
	<-held

	id := abi.ActorID{Tenant: "t", Class: "oneshot", Name: "late"}
	_, err := e.eng.Open(e.ctx, id, c, filepath.Join(e.dir, "late.db"))
	if !errors.Is(err, engine.ErrNoRoom) {
		t.Fatalf("open with the budget spent by a busy actor: %v, want ErrNoRoom", err)
	}
	if want := "actor " + id.String() + ": "; len(err.Error()) < len(want) || err.Error()[:len(want)] != want {
		t.Fatalf("error %q does not name the actor", err)
	}
	if st := e.eng.Residency(); st.Refused != 1 || st.OpenDatabases != 1 {
		t.Fatalf("after the refusal: %+v", st)
	}

	// The busy actor's event ends while another waits: the waiter gets
	// the slot (the wait is far longer than the event).
	e2 := newEnv(t, engine.WithMaxOpenDatabases(1), engine.WithResidencyWait(time.Minute))
	c2 := e2.class("oneshot", testguest.Fixture(t, "oneshot_alarm"))
	busy2 := e2.openN(c2, 1)[0]
	hold2 := make(chan struct{})
	held2 := make(chan struct{})
	go busy2.Lock(func(*engine.Store) error { close(held2); <-hold2; return nil })
	<-held2
	done := make(chan error, 1)
	go func() {
		a, err := e2.eng.Open(e2.ctx, id, c2, filepath.Join(e2.dir, "late.db"))
		if err == nil {
			_, err = a.Request(e2.ctx, reqAt(t0))
			a.Close(e2.ctx)
		}
		done <- err
	}()
	for e2.eng.Residency().Waits == 0 {
		time.Sleep(time.Millisecond)
	}
	close(hold2)
	if err := <-done; err != nil {
		t.Fatalf("the waiting actor: %v", err)
	}
	if !busy2.Asleep() {
		t.Fatal("the actor whose event ended was not put to sleep for the waiter")
	}
	close(hold)
}

// Many goroutines run events on more actors than the budget: every event
// commits and the counters never pass the budget.
func TestResidencyConcurrent(t *testing.T) {
	e := newEnv(t, engine.WithMaxOpenDatabases(5), engine.WithMaxInstances(3))
	c := e.class("oneshot", testguest.Fixture(t, "oneshot_alarm"))
	actors := e.openN(c, 40)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 60; i++ {
				a := actors[(g*7+i*3)%len(actors)]
				at := t0 + int64(g*1000+i)
				res, err := a.Request(context.Background(), reqAt(at))
				if err == nil && (res.Alarm == nil || *res.Alarm != at) {
					err = fmt.Errorf("committed %+v, want the alarm %d", res, at)
				}
				if err != nil {
					errs <- fmt.Errorf("goroutine %d event %d: %w", g, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st := e.eng.Residency()
	if st.PeakOpenDatabases > 5 || st.PeakLiveInstances > 3 {
		t.Fatalf("peaks %d databases and %d instances, budget 5 and 3", st.PeakOpenDatabases, st.PeakLiveInstances)
	}
}

// SleepIdle closes the actors no call reached since the cutoff and leaves
// the others (and busy ones) open.
func TestSleepIdle(t *testing.T) {
	e := newEnv(t)
	c := e.class("oneshot", testguest.Fixture(t, "oneshot_alarm"))
	actors := e.openN(c, 3)
	for _, a := range actors[:2] {
		if _, err := a.Request(e.ctx, reqAt(t0+1)); err != nil {
			t.Fatal(err)
		}
	}
	e.clock.Set(t0 + 60_000)
	if _, err := actors[2].Request(e.ctx, reqAt(t0+1)); err != nil {
		t.Fatal(err)
	}
	if n := e.eng.SleepIdle(time.UnixMilli(t0 + 30_000)); n != 2 {
		t.Fatalf("SleepIdle put %d actors to sleep, want the 2 idle ones", n)
	}
	if !actors[0].Asleep() || !actors[1].Asleep() || actors[2].Asleep() {
		t.Fatal("the wrong actors sleep")
	}
	if st := e.eng.Residency(); st.OpenDatabases != 1 || st.LiveInstances != 1 {
		t.Fatalf("after SleepIdle: %+v", st)
	}
	st, err := actors[0].State(e.ctx)
	if err != nil || st.Alarm == nil || *st.Alarm != t0+1 || !st.Inited {
		t.Fatalf("woken actor's state: %+v, %v", st, err)
	}
}

// State answers from what the actor keeps after each commit, and must
// still say what the database holds: the alarm, the recorded on-init and
// the alarm_indexed row, after an event, after a write through Lock (an
// index updater's), and after the actor slept and woke.
func TestStateFollowsTheDatabase(t *testing.T) {
	e := newEnv(t, engine.WithMaxOpenDatabases(1))
	c := e.class("oneshot", testguest.Fixture(t, "oneshot_alarm"))
	actors := e.openN(c, 2)
	a := actors[0]
	check := func(when string, alarm int64, init bool, indexed string) {
		t.Helper()
		st, err := a.State(e.ctx)
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if (st.Alarm != nil) != (alarm != 0) || (st.Alarm != nil && *st.Alarm != alarm) || st.InitRecorded != init || st.Indexed != indexed {
			t.Fatalf("%s: state %+v; want alarm %d, on-init recorded %v, indexed %q", when, st, alarm, init, indexed)
		}
	}
	check("new actor", 0, false, "")
	if _, err := a.Request(e.ctx, reqAt(t0+100)); err != nil {
		t.Fatal(err)
	}
	check("after the first event", t0+100, true, "")
	if err := a.Lock(func(s *engine.Store) error {
		if err := s.Begin(); err != nil {
			return err
		}
		if err := s.SetMeta(hostmod.MetaAlarmIndexed, "x/1"); err != nil {
			return err
		}
		if err := s.SetAlarm(t0 + 200); err != nil {
			return err
		}
		return s.Commit()
	}); err != nil {
		t.Fatal(err)
	}
	check("after a write through Lock", t0+200, true, "x/1")
	if _, err := a.Request(e.ctx, reqAt(t0+300)); err != nil {
		t.Fatal(err)
	}
	check("after another event", t0+300, true, "x/1")
	if _, err := actors[1].Request(e.ctx, reqAt(t0+400)); err != nil { // the budget of one puts a to sleep
		t.Fatal(err)
	}
	if !a.Asleep() {
		t.Fatal("the actor did not sleep under a budget of one database")
	}
	check("after sleeping", t0+300, true, "x/1")
}

// An index updater records the entry it listed with SetMeta between an
// event and its upload. State must then say the new entry without reading
// the database back (a warm firing in a cluster reads nothing back), and
// the row must be committed: the actor that slept and woke reads it from
// the file.
func TestSetMetaKeepsTheStateKnown(t *testing.T) {
	e := newEnv(t, engine.WithMaxOpenDatabases(1))
	c := e.class("oneshot", testguest.Fixture(t, "oneshot_alarm"))
	actors := e.openN(c, 2)
	a := actors[0]
	if _, err := a.Request(e.ctx, reqAt(t0+100)); err != nil {
		t.Fatal(err)
	}
	reads := a.StateReads()
	if err := a.SetMeta(e.ctx, hostmod.MetaAlarmIndexed, "1800000000100/1-ab"); err != nil {
		t.Fatal(err)
	}
	st, err := a.State(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Indexed != "1800000000100/1-ab" || st.Alarm == nil || *st.Alarm != t0+100 || !st.InitRecorded {
		t.Fatalf("state after SetMeta: %+v", st)
	}
	if got := a.StateReads() - reads; got != 0 {
		t.Fatalf("SetMeta and State read the committed state back %d times, want 0", got)
	}
	if _, err := actors[1].Request(e.ctx, reqAt(t0+400)); err != nil { // the budget of one puts a to sleep
		t.Fatal(err)
	}
	if !a.Asleep() {
		t.Fatal("the actor did not sleep under a budget of one database")
	}
	if st, err := a.State(e.ctx); err != nil || st.Indexed != "1800000000100/1-ab" || (st.Alarm == nil || *st.Alarm != t0+100) {
		t.Fatalf("state after sleeping: %+v, %v", st, err)
	}
	if got := a.StateReads() - reads; got != 1 {
		t.Fatalf("waking read the committed state %d times, want 1", got)
	}
}

// An instance never sees the memory of one closed before it: two actors of
// a guest that answers with its memory as it finds it and then writes its
// request there take turns under a budget of one instance (each start
// closes the other's instance, whose memory may serve the new one), and
// each always finds it zero.
func TestANewInstanceNeverSeesAnEarlierOnesMemory(t *testing.T) {
	e := newEnv(t, engine.WithMaxInstances(1))
	c := e.class("peek", testguest.Fixture(t, "memory_peek"))
	actors := e.openN(c, 2)
	zero := make([]byte, 64)
	for round := 0; round < 3; round++ {
		for i, a := range actors {
			res, err := a.Request(e.ctx, []byte(fmt.Sprintf("the secret of actor %d in round %d", i, round)))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(res.Response, zero) {
				t.Fatalf("round %d: actor %d's new instance found %q in its memory", round, i, res.Response)
			}
		}
	}
	if st := e.eng.Residency(); st.InstancesClosed < 5 {
		t.Fatalf("%d instances closed for room; want each start to close the other's", st.InstancesClosed)
	}
}
