package engine_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/internal/testguest"
)

// openAs opens an actor of tenant.
func (e *env) openAs(c *engine.Class, tenant, name string) *engine.Actor {
	e.t.Helper()
	id := abi.ActorID{Tenant: tenant, Class: c.Name, Name: name}
	a, err := e.eng.Open(e.ctx, id, c, filepath.Join(e.dir, tenant+"-"+name+".db"))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { a.Close(e.ctx) })
	return a
}

// spin starts a request that loops until the event deadline stops it, on
// each actor; it returns a channel closed when the first of them returns.
func spin(e *env, actors []*engine.Actor) (firstBack <-chan struct{}, wait func()) {
	first := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	for _, a := range actors {
		wg.Go(func() {
			if _, err := a.Request(e.ctx, []byte("l")); err == nil {
				e.t.Errorf("actor %s: a request that loops forever succeeded", a.ID())
			}
			once.Do(func() { close(first) })
		})
	}
	return first, wg.Wait
}

// waitBusy waits until n guest calls hold slots.
func waitBusy(t *testing.T, eng *engine.Engine, n int) engine.GuestSlotStats {
	t.Helper()
	for range 2000 {
		if s := eng.GuestSlots(); s.Busy >= n {
			return s
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("guest slots %+v: want %d busy", eng.GuestSlots(), n)
	return engine.GuestSlotStats{}
}

// With a guest spinning in every guest slot, the node's own work still
// runs: the engine keeps the guests below the runtime's processors. A
// spinning guest returns to Go at every loop turn (the deadline's check),
// so Go's scheduler does preempt it; but with spinners waiting in every
// processor's run queue, a goroutine the network wakes waits in the global
// queue, which a busy processor reads once in 61 turns of 10 ms: each
// HTTP round trip then took hundreds of milliseconds (64 spinners on 2
// processors: 0.8 s on average, 4 s at worst, docs/benchmarks.md), enough
// for a lease renewal to miss its window. Here, once the calls have run
// long, GOMAXPROCS is above them, and 50 HTTP round trips on loopback end
// while the guests still spin.
func TestSpinningGuestsLeaveTheRuntimeAProcessor(t *testing.T) {
	slots := max(4, runtime.GOMAXPROCS(0)) // as many as the processors: the engine must raise GOMAXPROCS
	e := newEnv(t, engine.WithGuestSlots(slots), engine.WithEventDeadline(3*time.Second), engine.WithLongGuestCall(50*time.Millisecond))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer srv.Close()
	c := e.class("hostile", testguest.Fixture(t, "hostile"))
	var actors []*engine.Actor
	for i := range slots {
		// One tenant each: together they hold every slot.
		actors = append(actors, e.openAs(c, fmt.Sprintf("t%d", i), "spinner"))
	}
	firstBack, wait := spin(e, actors)
	defer wait()
	waitBusy(t, e.eng, slots)
	for deadline := time.Now().Add(time.Second); runtime.GOMAXPROCS(0) <= slots; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("GOMAXPROCS %d a second after %d guests began to spin: they leave the runtime no processor", runtime.GOMAXPROCS(0), slots)
		}
	}
	served := make(chan error, 1)
	go func() {
		for range 50 {
			resp, err := http.Get(srv.URL)
			if err != nil {
				served <- err
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		served <- nil
	}()
	select {
	case err := <-served:
		if err != nil {
			t.Fatal(err)
		}
	case <-firstBack:
		t.Fatal("50 HTTP round trips on loopback did not end while guests spun in every guest slot")
	}
}

// One tenant's spinning guests hold at most its share of the guest slots
// (WithTenantGuestSlots): another tenant's request runs at once beside
// them, and the rest of the first tenant's calls wait.
func TestOneTenantLeavesGuestSlotsToTheOthers(t *testing.T) {
	e := newEnv(t, engine.WithGuestSlots(4), engine.WithTenantGuestSlots(3), engine.WithEventDeadline(2*time.Second))
	c := e.class("hostile", testguest.Fixture(t, "hostile"))
	var spinners []*engine.Actor
	for i := range 6 {
		spinners = append(spinners, e.openAs(c, "b", fmt.Sprintf("s%d", i)))
	}
	firstBack, wait := spin(e, spinners)
	defer wait()
	waitBusy(t, e.eng, 3)
	// Every spinner has come to its slot (on a loaded machine the last
	// may take a while to be scheduled), then room for a fourth to start,
	// if one could.
	for deadline := time.Now().Add(time.Second); e.eng.GuestSlots().Waiting < 3 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	if s := e.eng.GuestSlots(); s.Busy != 3 || s.Cap != 3 || s.Waiting != 3 {
		t.Fatalf("guest slots %+v: want tenant b's 6 spinners to hold 3 (its cap) and 3 to wait", s)
	}
	other := e.openAs(c, "a", "quick")
	done := make(chan error, 1)
	go func() { _, err := other.Request(e.ctx, []byte("x")); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("tenant a's request beside tenant b's spinners: %v", err)
		}
	case <-firstBack:
		t.Fatal("tenant a's request waited for one of tenant b's spinners to reach its deadline")
	}
	if s := e.eng.GuestSlots(); s.Peak > 4 {
		t.Fatalf("guest slots %+v: more calls ran at once than the slots", s)
	}
}

// A tenant whose calls run long (WithLongGuestCall) holds at most
// WithTenantGuestSlots once they have: its first spinners take every slot
// but one, and after them one runs at a time while the rest wait.
func TestATenantWhoseCallsRunLongIsHeldToItsShare(t *testing.T) {
	e := newEnv(t, engine.WithGuestSlots(4), engine.WithTenantGuestSlots(1),
		engine.WithLongGuestCall(50*time.Millisecond), engine.WithEventDeadline(400*time.Millisecond))
	c := e.class("hostile", testguest.Fixture(t, "hostile"))
	var spinners []*engine.Actor
	for i := range 6 {
		spinners = append(spinners, e.openAs(c, "b", fmt.Sprintf("s%d", i)))
	}
	_, wait := spin(e, spinners)
	defer wait()
	if s := waitBusy(t, e.eng, 3); s.Busy != 3 || s.Cap != 3 {
		t.Fatalf("guest slots %+v: want tenant b's first spinners to hold 3 (every slot but one)", s)
	}
	// The first three reach their deadline at about 400 ms; from then on
	// tenant b runs one call at a time.
	time.Sleep(600 * time.Millisecond)
	for range 5 {
		if s := e.eng.GuestSlots(); s.Busy != 1 {
			t.Fatalf("guest slots %+v: want one of tenant b's spinners running once its calls ran long", s)
		}
		time.Sleep(20 * time.Millisecond)
	}
	other := e.openAs(c, "a", "quick")
	if _, err := other.Request(e.ctx, []byte("x")); err != nil {
		t.Fatalf("tenant a's request beside tenant b's spinners: %v", err)
	}
}

// Rooms in a tenant's line (engine.Room): as many as the slots it may
// hold, and as many more as it could start now, given in the order asked;
// a cancelled wait gives up its place, and a room comes back once
// released, once.
func TestRoomsInATenantsLineComeInOrderAndComeBack(t *testing.T) {
	e := newEnv(t, engine.WithGuestSlots(2), engine.WithTenantGuestSlots(1))
	r1 := e.eng.TryRoom("b")
	if r1 == nil {
		t.Fatal("no room in an empty line")
	}
	r0 := e.eng.TryRoom("b")
	if r0 == nil {
		t.Fatal("no second room: tenant b runs nothing, so one call may start and one wait")
	}
	if e.eng.TryRoom("b") != nil {
		t.Fatal("a third room while two are held: tenant b may hold one slot, and wait for it once")
	}
	if e.eng.TryRoom("a") == nil {
		t.Fatal("tenant a found no room: the lines are each tenant's own")
	}
	cancelled, cancel := context.WithCancel(e.ctx)
	gaveUp := make(chan error, 1)
	go func() { _, err := e.eng.AwaitRoom(cancelled, "b"); gaveUp <- err }()
	got := make(chan *engine.Room, 1)
	time.Sleep(20 * time.Millisecond) // the first waits first
	go func() {
		r, err := e.eng.AwaitRoom(e.ctx, "b")
		if err != nil {
			t.Error(err)
		}
		got <- r
	}()
	time.Sleep(20 * time.Millisecond)
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled wait for room: %v", err)
	}
	r1.Release()
	r2 := <-got
	r1.Release() // again: nothing more comes back
	if e.eng.TryRoom("b") != nil {
		t.Fatal("a room while the second is held: the first came back twice")
	}
	r2.Release()
	r0.Release()
	if e.eng.TryRoom("b") == nil {
		t.Fatal("no room once every room was released")
	}
}
