package engine_test

// Hostile guests: many instances growing memory against the engine's budget
// for all of them, a guest that traps, one that writes huge values. (A guest
// that loops is in node/hostile_test.go, where the node's timer delivers its
// alarm.)

import (
	"context"
	"encoding/binary"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/hostmod"
	"github.com/wasmkeep/alarms/internal/testguest"
)

const page = 65536

// grow asks a grow_pages actor to grow by n pages; it returns the pages it
// then has.
func grow(ctx context.Context, a *engine.Actor, n uint32) (uint32, error) {
	r, err := a.Request(ctx, binary.LittleEndian.AppendUint32(nil, n))
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(r.Response), nil
}

// withinBudget checks the engine's own counters: what instances hold never
// passed the budget.
func withinBudget(t *testing.T, e *env) engine.MemoryStats {
	t.Helper()
	m := e.eng.Memory()
	if m.Peak > m.Budget || m.InUse > m.Budget {
		t.Fatalf("instance memory %d bytes, peak %d, past the budget of %d", m.InUse, m.Peak, m.Budget)
	}
	return m
}

// Growing more instances than the budget holds closes the idle ones, least
// recently used first; every growth succeeds and the count stays within the
// budget.
func TestTheMemoryBudgetClosesIdleInstances(t *testing.T) {
	e := newEnv(t, engine.WithMaxTotalMemory(1<<20))
	c := e.class("grow", testguest.Fixture(t, "grow_pages"))
	actors := e.openN(c, 8)
	for i, a := range actors {
		if got, err := grow(e.ctx, a, 3); err != nil || got != 4 {
			t.Fatalf("actor %d: grew to %d pages, %v; want 4", i, got, err)
		}
		withinBudget(t, e)
	}
	m := withinBudget(t, e)
	// 8 instances of 256 KiB are 2 MiB: at least 4 were closed.
	if m.Closed < 4 || m.Refused != 0 {
		t.Fatalf("counters %+v: want at least 4 instances closed for memory and no refusal", m)
	}
	if m.InUse < 4*4*page {
		t.Fatalf("%d bytes in use: the four newest instances of 256 KiB should be live", m.InUse)
	}
	// The first actor's instance was closed: its next event starts a fresh one.
	if got, err := grow(e.ctx, actors[0], 0); err != nil || got != 1 {
		t.Fatalf("the first actor after its instance closed: %d pages, %v; want a fresh 1-page instance", got, err)
	}
	withinBudget(t, e)
}

// When every other instance is busy, the instance that would pass the budget
// gets an error naming its actor and the budget; the others keep their
// memory, and once they are idle the same growth succeeds.
func TestTheInstanceThatPassesTheMemoryBudgetGetsTheError(t *testing.T) {
	e := newEnv(t, engine.WithMaxTotalMemory(1<<20))
	c := e.class("grow", testguest.Fixture(t, "grow_pages"))
	busy := e.openN(c, 3)
	for _, a := range busy {
		if _, err := grow(e.ctx, a, 3); err != nil {
			t.Fatal(err)
		}
	}
	// Hold the three (768 KiB) as an event would: none can be closed.
	release := make(chan struct{})
	var held sync.WaitGroup
	for _, a := range busy {
		held.Add(1)
		go a.Lock(func(*engine.Store) error { held.Done(); <-release; return nil })
	}
	held.Wait()
	greedy := e.open(c, "greedy")
	_, err := grow(e.ctx, greedy, 8) // 9 pages: 576 KiB more
	var mb *engine.MemoryBudgetError
	if !errors.Is(err, engine.ErrMemoryBudget) || !errors.As(err, &mb) {
		close(release)
		t.Fatalf("growing past the budget: %v, want a *MemoryBudgetError", err)
	}
	if mb.Actor != greedy.ID() || mb.Budget != 1<<20 || mb.Want != 9*page {
		t.Errorf("error %+v: want actor %s, budget 1 MiB, 9 pages wanted", mb, greedy.ID())
	}
	if msg := err.Error(); !strings.Contains(msg, greedy.ID().String()) || !strings.Contains(msg, "budget of 1 MiB") {
		t.Errorf("the error does not name the actor and the budget: %s", msg)
	}
	if m := withinBudget(t, e); m.Refused != 1 {
		t.Errorf("%d refusals counted, want 1", m.Refused)
	}
	// A new instance that does not fit is refused too, with the same error.
	_, err = e.open(c, "late").Request(e.ctx, binary.LittleEndian.AppendUint32(nil, 13))
	if !errors.As(err, &mb) || mb.Actor.Name != "late" {
		close(release)
		t.Fatalf("a request whose growth cannot fit: %v", err)
	}
	close(release)
	// The busy ones kept their memory: each still has its 4 pages.
	for i, a := range busy {
		if got, err := grow(e.ctx, a, 0); err != nil || got != 4 {
			t.Errorf("busy actor %d after the refusal: %d pages, %v; want its 4", i, got, err)
		}
	}
	// Now that they are idle, the same growth closes them and succeeds.
	if got, err := grow(e.ctx, greedy, 8); err != nil || got != 9 {
		t.Fatalf("growing again once the others are idle: %d pages, %v", got, err)
	}
	withinBudget(t, e)
}

// Many actors of one tenant growing at once cannot take the engine past its
// budget: each growth succeeds or fails with the error naming its own
// actor, and the engine keeps serving.
func TestManyInstancesGrowingAtOnceStayWithinTheBudget(t *testing.T) {
	e := newEnv(t, engine.WithMaxTotalMemory(2<<20))
	c := e.class("grow", testguest.Fixture(t, "grow_pages"))
	actors := e.openN(c, 24)
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, refused := 0, 0
	for _, a := range actors {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 3 {
				_, err := grow(e.ctx, a, 7) // 512 KiB, then again from a fresh instance
				var mb *engine.MemoryBudgetError
				mu.Lock()
				switch {
				case err == nil:
					ok++
				case errors.As(err, &mb) && mb.Actor == a.ID():
					refused++
				default:
					t.Errorf("actor %s: %v, want success or its own memory budget error", a.ID(), err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	m := withinBudget(t, e)
	t.Logf("%d growths succeeded, %d refused; counters %+v", ok, refused, m)
	if ok == 0 || uint64(refused) != m.Refused {
		t.Fatalf("%d growths succeeded, %d refused, %d refusals counted", ok, refused, m.Refused)
	}
	// Afterwards every actor is served again.
	for _, a := range actors {
		if _, err := grow(e.ctx, a, 0); err != nil {
			t.Fatalf("actor %s after the storm: %v", a.ID(), err)
		}
	}
	other := e.open(e.class("oneshot", testguest.Fixture(t, "oneshot_alarm")), "other")
	if r, err := other.Request(e.ctx, reqAt(t0+1000)); err != nil || r.Alarm == nil {
		t.Fatalf("another class's actor: %+v %v", r, err)
	}
	withinBudget(t, e)
}

func kv(t *testing.T, a *engine.Actor, key string) ([]byte, bool) {
	t.Helper()
	var v []byte
	var ok bool
	if err := a.Lock(func(s *engine.Store) (err error) { v, ok, err = s.KVGet([]byte(key)); return err }); err != nil {
		t.Fatal(err)
	}
	return v, ok
}

func hostileReq(op byte, arg uint64) []byte {
	return binary.LittleEndian.AppendUint64([]byte{op}, arg)
}

// A guest that traps fails its own event: its writes and its alarm roll
// back, its next event runs on a fresh instance, other actors are untouched.
func TestAGuestThatTrapsAffectsOnlyItself(t *testing.T) {
	e := newEnv(t)
	c := e.class("hostile", testguest.Fixture(t, "hostile"))
	a, other := e.open(c, "a"), e.open(c, "other")
	for _, x := range []*engine.Actor{a, other} {
		if got := errnos([]byte(e.req(x, string(hostileReq('a', t0+5000))))); !eq(got, []uint32{0}) {
			t.Fatalf("set-alarm: %v", got)
		}
	}
	_, err := a.Request(e.ctx, []byte("w"))
	var ge *hostmod.GuestError
	if !errors.As(err, &ge) || ge.Cause == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("a trapping event: %v, want a guest error with the trap", err)
	}
	if s := e.state(a); s.Alarm == nil || *s.Alarm != t0+5000 || s.Failures != 0 {
		t.Errorf("after the trap: %+v, want the alarm at +5000 as before", s)
	}
	if _, ok := kv(t, a, "k"); ok {
		t.Error("the trapped event's kv-put committed")
	}
	// A fresh instance serves the next event (its data segments anew).
	if got := errnos([]byte(e.req(a, string(hostileReq('p', 7))))); !eq(got, []uint32{0}) {
		t.Fatalf("after the trap, kv-put: %v", got)
	}
	if s := e.state(other); s.Alarm == nil || *s.Alarm != t0+5000 {
		t.Errorf("the other actor: %+v", s)
	}
	if _, ok := kv(t, other, "big"); ok {
		t.Error("the other actor's table changed")
	}
}

// A value one byte over abi.MaxValueLen gets E2BIG and writes nothing;
// values at the limit, in many actors, are stored and stay within the
// engine's memory budget.
func TestHugeValues(t *testing.T) {
	e := newEnv(t, engine.WithMaxTotalMemory(8<<20))
	c := e.class("hostile", testguest.Fixture(t, "hostile"))
	a := e.open(c, "a")
	if got := errnos([]byte(e.req(a, string(hostileReq('p', abi.MaxValueLen+1))))); !eq(got, []uint32{abi.E2BIG}) {
		t.Fatalf("a value over the limit: errno %v, want E2BIG", got)
	}
	if _, ok := kv(t, a, "big"); ok {
		t.Fatal("a value over the limit was stored")
	}
	if got := errnos([]byte(e.req(a, string(hostileReq('p', 1<<32|5))))); !eq(got, []uint32{0}) {
		t.Fatalf("the length is a u32: %v", got) // the high half of the i64 is not the length
	}
	actors := append([]*engine.Actor{a}, e.openN(c, 15)...)
	for i, x := range actors {
		if got := errnos([]byte(e.req(x, string(hostileReq('p', abi.MaxValueLen))))); !eq(got, []uint32{0}) {
			t.Fatalf("actor %d: a value at the limit: errno %v", i, got)
		}
		withinBudget(t, e)
	}
	for i, x := range actors {
		if v, ok := kv(t, x, "big"); !ok || len(v) != abi.MaxValueLen {
			t.Fatalf("actor %d: stored %d bytes, want %d", i, len(v), abi.MaxValueLen)
		}
	}
	// 16 instances of 17 pages are 17 MiB: the budget of 8 closed some.
	if m := withinBudget(t, e); m.Closed == 0 || m.Refused != 0 {
		t.Fatalf("counters %+v: want instances closed for memory, none refused", m)
	}
}

// The budget is checked at start.
func TestAMemoryBudgetUnderAPageIsRefused(t *testing.T) {
	_, err := engine.NewEngine(context.Background(), engine.WithMaxTotalMemory(1000))
	if err == nil || !strings.Contains(err.Error(), "memory budget") {
		t.Fatalf("NewEngine with a budget of 1000 bytes: %v", err)
	}
}

// The default budget for all instances holds the default residency budget
// of instances of a Go guest, so a node with the defaults closes instances
// for their count before it refuses memory.
func TestTheDefaultMemoryBudgetHoldsTheDefaultInstances(t *testing.T) {
	e := newEnv(t)
	a := e.open(e.scripted(), "go")
	before := e.eng.Memory().InUse
	e.req(a, "get")
	per := e.eng.Memory().InUse - before
	t.Logf("an instance of a Go guest holds %.1f MiB after its first event", float64(per)/(1<<20))
	if per == 0 || per*engine.DefaultMaxInstances > engine.DefaultMaxTotalMemory {
		t.Fatalf("%d bytes an instance: %d instances need %d bytes, the default budget is %d",
			per, engine.DefaultMaxInstances, per*engine.DefaultMaxInstances, engine.DefaultMaxTotalMemory)
	}
}

// In an embedder's runtime the memory budget is not applied: the runtime,
// its features and its memory allocator are the embedder's.
func TestTheMemoryBudgetLeavesAnEmbeddersRuntimeAlone(t *testing.T) {
	ctx := context.Background()
	eng, err := engine.NewEngine(ctx, engine.WithRuntime(embedderRuntime(t, ctx, false)), engine.WithMaxTotalMemory(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close(ctx)
	c, err := eng.Compile(ctx, "grow", testguest.Fixture(t, "grow_pages"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := eng.Open(ctx, abi.ActorID{Tenant: "t", Class: "grow", Name: "a"}, c, filepath.Join(t.TempDir(), "a.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	if got, err := grow(ctx, a, 31); err != nil || got != 32 {
		t.Fatalf("growing to 2 MiB in the embedder's runtime: %d pages, %v", got, err)
	}
	if m := eng.Memory(); m.InUse != 0 || m.Refused != 0 {
		t.Fatalf("counters %+v: nothing is counted in an embedder's runtime", m)
	}
}

// Closing the engine while a guest runs (a host shutting down under a
// looping request) ends the call without harm to the process: the guest
// writes its memory on every turn, and that memory (17 pages, in an
// address range of its own) stays until the call has returned.
func TestClosingTheEngineUnderARunningGuestEndsTheCall(t *testing.T) {
	e := newEnv(t, engine.WithEventDeadline(time.Hour))
	a := e.open(e.class("hostile", testguest.Fixture(t, "hostile")), "loop")
	e.req(a, "") // the instance is up
	done := make(chan error, 1)
	go func() {
		_, err := a.Request(context.Background(), []byte("l"))
		done <- err
	}()
	time.Sleep(100 * time.Millisecond) // the guest is looping
	if err := e.eng.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a looping request ended without an error when the engine closed")
		}
	case <-time.After(stopWait):
		t.Fatalf("the looping request still runs %v after the engine closed", stopWait)
	}
	if m := e.eng.Memory(); m.InUse != 0 {
		t.Fatalf("%d bytes still counted after the engine closed", m.InUse)
	}
}
