package node_test

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/wasmkeep/alarms"
	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/internal/testguest"
	"github.com/wasmkeep/alarms/node"
)

// clusterNode starts a node of a test cluster on b with short timings.
func clusterNode(t testing.TB, b bucket.Bucket, name, dir string, classes map[string][]byte, onDelivery func(node.DeliveryEvent)) *node.Node {
	t.Helper()
	n, err := node.New(context.Background(), node.Config{
		DataDir: dir, Classes: classes, OnDelivery: onDelivery, Logger: hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Warn, Output: testWriter{t}}),
		Cluster: &node.ClusterConfig{
			Bucket: b, NodeID: name, Addr: name + ".invalid:1",
			LeaseTTL: 600 * time.Millisecond, LeaseMargin: 150 * time.Millisecond, LeaseGrace: 300 * time.Millisecond,
			SweepPeriod: 200 * time.Millisecond, IdleTimeout: time.Minute, Tenants: []string{"t"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestAnOrphanedAlarmFiresOnAnotherNode(t *testing.T) {
	ctx := context.Background()
	b := bucket.NewMem()
	classes := counter(t)
	var mu sync.Mutex
	fired := map[string][]node.DeliveryEvent{}
	obs := func(name string) func(node.DeliveryEvent) {
		return func(ev node.DeliveryEvent) {
			mu.Lock()
			fired[name] = append(fired[name], ev)
			mu.Unlock()
		}
	}
	a := clusterNode(t, b, "a", t.TempDir(), classes, obs("a"))
	a.Start(ctx)
	bn := clusterNode(t, b, "b", t.TempDir(), classes, obs("b"))
	bn.Start(ctx)
	defer bn.Close(ctx)
	id := abi.ActorID{Tenant: "t", Class: "counter", Name: "c"}
	if _, err := a.Request(ctx, id, []byte("start 1500")); err != nil {
		t.Fatal(err)
	}
	t.Logf("keys: %v", b.Keys())
	a.Crash()
	waitFor(t, "the alarm firing on b", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, ev := range fired["b"] {
			if ev.Event.Ran {
				return true
			}
		}
		return false
	})
	mu.Lock()
	for _, ev := range fired["b"] {
		t.Logf("b: %+v", ev)
	}
	mu.Unlock()
	t.Logf("keys after: %v", b.Keys())
}

// testWriter sends log lines to the test log. A fuzz test's *testing.F
// may not log once its target runs (the testing package panics), so the
// lines of a node a fuzz test set up are dropped: each input reports its
// own failure through the target's t.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	if _, fuzz := w.t.(*testing.F); fuzz {
		return len(p), nil
	}
	w.t.Helper()
	w.t.Log(string(p))
	return len(p), nil
}

// TestADeliveryRetriesAfterALeasePeriodWhileTheBucketIsUnreachable: the
// timer fires while every bucket request fails; the delivery fails, is tried
// again a lease period later (not at once, not never), and the alarm fires
// once the bucket answers again.
func TestADeliveryRetriesAfterALeasePeriodWhileTheBucketIsUnreachable(t *testing.T) {
	ctx := context.Background()
	b := bucket.NewMem()
	var down atomic.Bool
	b.Faults = func(bucket.Op) bucket.Fault {
		if down.Load() {
			return bucket.Fault{Err: errors.New("bucket unreachable")}
		}
		return bucket.Fault{}
	}
	var mu sync.Mutex
	var events []node.DeliveryEvent
	n := clusterNode(t, b, "a", t.TempDir(), map[string][]byte{"oneshot": testguest.Fixture(t, "oneshot_alarm")}, func(ev node.DeliveryEvent) {
		mu.Lock()
		events = append(events, ev)
		mu.Unlock()
	})
	n.Start(ctx)
	defer n.Close(ctx)
	id := abi.ActorID{Tenant: "t", Class: "oneshot", Name: "x"}
	due := time.Now().Add(300 * time.Millisecond).UnixMilli()
	var req [8]byte
	binary.LittleEndian.PutUint64(req[:], uint64(due))
	if _, err := n.Request(ctx, id, req[:]); err != nil {
		t.Fatal(err)
	}
	down.Store(true)
	waitFor(t, "a failed delivery", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(events) > 0
	})
	mu.Lock()
	failed := events[0]
	mu.Unlock()
	if failed.Err == nil || failed.Event.Ran {
		t.Fatalf("first delivery with the bucket down: %+v, want a host error", failed)
	}
	retryAt, ok := n.Timer().Get(alarms.TimerKey(id))
	if lease := int64(600); !ok || retryAt < failed.At.UnixMilli()+lease-5 || retryAt > failed.At.UnixMilli()+lease+50 {
		t.Fatalf("after the failure the timer holds %d (%v), want about a lease period (600 ms) after %d", retryAt, ok, failed.At.UnixMilli())
	}
	down.Store(false)
	waitFor(t, "the alarm firing once the bucket answers", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, ev := range events {
			if ev.Event.Ran && ev.Event.Scheduled == due {
				return true
			}
		}
		return false
	})
}

// A node that takes over a dead node's actors logs no INFO line per actor
// (a dead node's backlog is thousands of them): its summary counts them.
func TestTakeoversAreCountedInTheSummaryNotLoggedEach(t *testing.T) {
	ctx := context.Background()
	b := bucket.NewMem()
	classes := counter(t)
	a := clusterNode(t, b, "a", t.TempDir(), classes, nil)
	a.Start(ctx)
	logs := &syncBuffer{}
	var ran sync.Map
	bn, err := node.New(ctx, node.Config{
		DataDir: t.TempDir(), Classes: classes,
		Logger:          hclog.New(&hclog.LoggerOptions{Name: "b", Level: hclog.Info, Output: logs, JSONFormat: true}),
		LogSummaryEvery: 100 * time.Millisecond,
		OnDelivery: func(ev node.DeliveryEvent) {
			if ev.Err == nil && ev.Event.Ran {
				ran.Store(ev.Actor, true)
			}
		},
		Cluster: &node.ClusterConfig{
			Bucket: b, NodeID: "b", Addr: "b.invalid:1",
			LeaseTTL: 600 * time.Millisecond, LeaseMargin: 150 * time.Millisecond, LeaseGrace: 300 * time.Millisecond,
			SweepPeriod: 200 * time.Millisecond, IdleTimeout: time.Minute, Tenants: []string{"t"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	bn.Start(ctx)
	defer bn.Close(ctx)
	const actors = 4
	for i := range actors {
		id := abi.ActorID{Tenant: "t", Class: "counter", Name: "c" + string(rune('0'+i))}
		if _, err := a.Request(ctx, id, []byte("start 1500")); err != nil {
			t.Fatal(err)
		}
	}
	a.Crash()
	var summed float64
	waitFor(t, "b taking over every actor, and its summaries counting them", func() bool {
		n := 0
		ran.Range(func(any, any) bool { n++; return true })
		summed = 0
		for _, l := range jsonLines(t, logs) {
			if msg, _ := l["@message"].(string); strings.HasPrefix(msg, "alarms in the last ") {
				f, _ := l["taken_over"].(float64)
				summed += f
			}
		}
		return n == actors && summed == actors
	})
	for _, l := range jsonLines(t, logs) {
		if _, ok := l["actor"]; ok && l["@level"] == "info" {
			t.Errorf("an INFO line names an actor: %v", l)
		}
	}
}
