package engine_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/internal/testguest"
)

// While more guest calls wait for a slot than commits wait for the
// journal's sync, the sync hands its processor to them for the disk's
// flush (a sync that kept it would leave the guests of a two-processor
// node one processor for most of it); with no call waiting it keeps it,
// so that the commits it holds go on the moment the disk returns. Either
// way the request returns once its commit is synced.
func TestTheJournalSyncHandsItsProcessorOffWhileGuestCallsWait(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	eng, err := engine.NewEngine(ctx, engine.WithJournal(dir), engine.WithGuestSlots(4), engine.WithTenantGuestSlots(3),
		engine.WithEventDeadline(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close(ctx)
	compile := func(name, fixture string) *engine.Class {
		c, err := eng.Compile(ctx, name, testguest.Fixture(t, fixture))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	hostile, bench := compile("hostile", "hostile"), compile("bench", "bench_alarm")
	open := func(c *engine.Class, tenant, name string) *engine.Actor {
		a, err := eng.Open(ctx, abi.ActorID{Tenant: tenant, Class: c.Name, Name: name}, c, filepath.Join(dir, tenant+"-"+name+".db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close(ctx) })
		return a
	}
	setter := open(bench, "a", "setter")
	n := int64(0)
	// set runs a request that sets the alarm (a commit the journal's sync
	// stands in for) and returns the syncs and handoffs it took.
	set := func() (syncs, handoffs int64) {
		t.Helper()
		before := eng.Journal()
		n++
		if _, err := setter.Request(ctx, timeReq(1000+n)); err != nil {
			t.Fatal(err)
		}
		after := eng.Journal()
		if after.Waits == before.Waits || after.Syncs == before.Syncs {
			t.Fatalf("journal %+v after %+v: the request's commit did not wait for a sync", after, before)
		}
		return after.Syncs - before.Syncs, after.Handoffs - before.Handoffs
	}
	set() // the database's first commits
	if _, h := set(); h != 0 {
		t.Fatalf("%d syncs handed their processor off with no guest call waiting for a slot", h)
	}

	// Tenant b's six spinners: three hold its share of the slots, three
	// wait for one until the first reach their deadline.
	var spinners []*engine.Actor
	for i := range 6 {
		spinners = append(spinners, open(hostile, "b", fmt.Sprintf("s%d", i)))
	}
	_, wait := spin(&env{t: t, ctx: ctx}, spinners)
	for deadline := time.Now().Add(time.Second); eng.GuestSlots().Waiting < 3; {
		if time.Now().After(deadline) {
			t.Fatalf("guest slots %+v: three of the spinners do not wait", eng.GuestSlots())
		}
		time.Sleep(time.Millisecond)
	}
	syncs, h := set()
	if s := eng.GuestSlots(); s.Waiting < 3 {
		t.Fatalf("guest slots %+v: the spinners stopped waiting before the request was done", s)
	}
	if h == 0 {
		t.Fatalf("none of %d syncs handed its processor off while three guest calls waited for a slot and one commit for the sync", syncs)
	}
	wait()

	if _, h := set(); h != 0 {
		t.Fatalf("%d syncs handed their processor off once no guest call waited", h)
	}
}
