package node_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/node"
)

// A clean shutdown lets a delivery under way finish: Close waits for it,
// on-alarm's commit is replicated and its re-armed alarm indexed, and the
// node that takes the actor over runs the next time, not that one again.
// Before, Close cancelled the delivery's context: its index PUT failed,
// the actor was given up, and on-alarm ran twice for one scheduled time.
func TestCloseLetsADeliveryInFlightFinish(t *testing.T) {
	ctx := context.Background()
	b := bucket.NewMem()
	classes := counter(t)
	var mu sync.Mutex
	var evs []node.DeliveryEvent
	id := abi.ActorID{Tenant: "t", Class: "counter", Name: "drained"}
	record := func(ev node.DeliveryEvent) {
		if ev.Actor == id {
			mu.Lock()
			evs = append(evs, ev)
			mu.Unlock()
		}
	}
	a := clusterNode(t, b, "a", t.TempDir(), classes, record)
	a.Start(ctx)
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	restore := node.SetTestHook(func(op string, got abi.ActorID) {
		if op == "deliver" && got == id {
			once.Do(func() { close(entered); <-release })
		}
	})
	defer restore()
	if _, err := a.Request(ctx, id, []byte("start 300")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("no delivery began in 20 s")
	}
	closed := make(chan error, 1)
	go func() { closed <- a.Close(ctx) }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a delivery was under way", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	mu.Lock()
	if len(evs) != 1 || evs[0].Err != nil || !evs[0].Event.Ran || evs[0].Event.Err != nil {
		mu.Unlock()
		t.Fatalf("deliveries on a: %+v; want the one under way at Close, run without error", evs)
	}
	first := evs[0].Event.Scheduled
	evs = nil
	mu.Unlock()

	bn := clusterNode(t, b, "b", t.TempDir(), classes, record)
	bn.Start(ctx)
	defer bn.Close(ctx)
	if c := get(t, bn, id); c.Fired != 1 {
		t.Fatalf("the actor on b counts %d firings, want the 1 a ran before it stopped", c.Fired)
	}
	waitFor(t, "a firing on b", func() bool { mu.Lock(); defer mu.Unlock(); return len(evs) > 0 })
	mu.Lock()
	defer mu.Unlock()
	for _, ev := range evs {
		if ev.Event.Ran && ev.Event.Scheduled <= first {
			t.Fatalf("b ran on-alarm for %d, the time a ran before it stopped (%d)", ev.Event.Scheduled, first)
		}
	}
}
