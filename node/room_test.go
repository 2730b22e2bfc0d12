package node_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/internal/metricstest"
	"github.com/wasmkeep/alarms/internal/testguest"
	"github.com/wasmkeep/alarms/node"
)

// A tenant whose alarm handlers spin holds one guest slot, and its other
// due alarms wait their turn without their actors (engine.Room): a clear
// of those actors' alarms goes through while the first handler still
// spins. Before, each delivery took its actor and then waited for the
// slot, so a clear (or a request, or a delete) of any of them waited for
// every hang ahead of it: with 70 such actors and a 5 s deadline, more
// than the two minutes the noisy-neighbour run gave a delete.
func TestADeliveryWaitingForItsTenantsTurnLeavesItsActorFree(t *testing.T) {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	var ended atomic.Int64
	n := newNode(t, t.TempDir(), map[string][]byte{"h": testguest.Fixture(t, "hostile")}, node.Config{
		EngineOptions: []engine.Option{engine.WithGuestSlots(2), engine.WithTenantGuestSlots(1), engine.WithAlarmDeadline(4 * time.Second)},
		Registerer:    reg,
		OnDelivery:    func(node.DeliveryEvent) { ended.Add(1) },
	})
	defer n.Close(ctx)
	n.Start(ctx)
	const actors = 5
	var ids []abi.ActorID
	for i := range actors {
		id := abi.ActorID{Tenant: "b", Class: "h", Name: fmt.Sprintf("x%d", i)}
		ids = append(ids, id)
		if _, err := n.Request(ctx, id, []byte("x")); err != nil { // creates it
			t.Fatal(err)
		}
	}
	// Their alarms due at once, set from outside (a request of tenant b's
	// would wait for its one slot behind the first spinning handler).
	due := time.Now().UnixMilli()
	for _, id := range ids {
		if _, err := n.SetAlarm(ctx, id, due); err != nil {
			t.Fatal(err)
		}
	}
	// Tenant b's line fills: one handler spins in its one slot, one more
	// delivery waits for it; and every delivery has started (on a worker
	// of its own: the workers grow while none is taken), so that a
	// delivery that would hold its actor while it waits holds it before
	// the clears.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		m := metricstest.Gather(reg)
		if m.Value("wasmkeep_guest_slots_busy") >= 1 && m.Value("wasmkeep_guest_slots_waiting") >= 1 && m.Value("wasmkeep_deliveries_running") >= actors {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("tenant b's handlers did not fill its line in 20 s: busy %v waiting %v, %v deliveries running, %d ended", m.Value("wasmkeep_guest_slots_busy"), m.Value("wasmkeep_guest_slots_waiting"), m.Value("wasmkeep_deliveries_running"), ended.Load())
		}
	}
	cleared := make(chan abi.ActorID, actors)
	for _, id := range ids {
		go func() {
			if _, err := n.ClearAlarm(ctx, id); err != nil {
				t.Errorf("clear %s: %v", id, err)
			}
			cleared <- id
		}()
	}
	// The three deliveries not in the line wait without their actors: their
	// clears end before any handler has.
	for range actors - 2 {
		<-cleared
	}
	if got := ended.Load(); got != 0 {
		t.Fatalf("%d deliveries ended before three of the five actors' alarms could be cleared: the clears waited behind the spinning handlers", got)
	}
}
