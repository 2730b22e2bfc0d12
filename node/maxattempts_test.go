package node_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/inspect"
	"github.com/wasmkeep/alarms/internal/s3test"
	"github.com/wasmkeep/alarms/internal/testguest"
	"github.com/wasmkeep/alarms/node"
)

// TestAPoisonAlarmStopsAfterItsLimitAcrossAFailover: on versitygw, with a
// limit of three attempts, a handler that always fails runs twice on one
// node, which then crashes; the node that takes the actor over continues
// the committed count and gives the alarm up on the third run, not the
// first. The alarm is cleared (nothing runs again), the dead letter is in
// the actor's replicated state, where keepctl alarms failed reads it, and
// the survivor's wasmkeep_alarms_dead_lettered_total counts it.
func TestAPoisonAlarmStopsAfterItsLimitAcrossAFailover(t *testing.T) {
	ctx := context.Background()
	srv := s3test.Start(t)
	classes := map[string][]byte{"scripted": testguest.Build(t, "testdata/guests/scripted")}
	var mu sync.Mutex
	runs := map[string][]node.DeliveryEvent{}
	start := func(name string, reg prometheus.Registerer) *node.Node {
		n, err := node.New(ctx, node.Config{
			DataDir: t.TempDir(), Classes: classes, Registerer: reg,
			Logger:        hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Error, Output: testWriter{t}}),
			EngineOptions: []engine.Option{engine.WithBackoff(time.Second, time.Minute), engine.WithMaxAttempts(3)},
			OnDelivery: func(ev node.DeliveryEvent) {
				if ev.Event.Ran {
					mu.Lock()
					runs[name] = append(runs[name], ev)
					mu.Unlock()
				}
			},
			Cluster: &node.ClusterConfig{
				Bucket: srv.Bucket, NodeID: name, Addr: name + ".invalid:1",
				LeaseTTL: 600 * time.Millisecond, LeaseMargin: 150 * time.Millisecond, LeaseGrace: 300 * time.Millisecond,
				SweepPeriod: 200 * time.Millisecond, IdleTimeout: time.Minute, Tenants: []string{"t"},
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		n.Start(ctx)
		return n
	}
	count := func(name string) int {
		mu.Lock()
		defer mu.Unlock()
		return len(runs[name])
	}
	a := start("a", nil)
	reg := prometheus.NewRegistry()
	b := start("b", reg)
	defer b.Close(ctx)

	id := abi.ActorID{Tenant: "t", Class: "scripted", Name: "poison"}
	for _, req := range []string{"mode fail", "set " + strconv.FormatInt(time.Now().UnixMilli(), 10)} {
		if _, err := a.Request(ctx, id, []byte(req)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "two failed runs on a", func() bool { return count("a") >= 2 })
	a.Crash() // its third run was due 2 s after the second
	if n := count("a"); n != 2 {
		t.Fatalf("a ran on-alarm %d times before the crash, want 2", n)
	}
	waitFor(t, "the third run, on b", func() bool { return count("b") >= 1 })
	mu.Lock()
	third := runs["b"][0]
	mu.Unlock()
	if d := third.Event; d.Err == nil || d.RetryCount != 2 || !d.GaveUp || d.Alarm != nil || d.Failures != 0 {
		t.Fatalf("the third run, on b: %+v; want the committed count 2 carried over, the retries given up, no alarm", d)
	}
	time.Sleep(3 * time.Second) // long past when a fourth run would have been due
	if n := count("b"); n != 1 {
		t.Fatalf("b ran on-alarm %d times, want 1: the alarm was given up", n)
	}
	if got := gathered(t, reg, "wasmkeep_alarms_dead_lettered_total"); got != 1 {
		t.Fatalf("wasmkeep_alarms_dead_lettered_total = %v on b, want 1", got)
	}

	// The operator's view, from the bucket: b uploaded the actor at once.
	failed, err := inspect.New(bucket.NewCounting(srv.Bucket), "cluster/").Failed(ctx, inspect.Filter{Tenant: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if len(failed) != 1 || failed[0].Actor != id || failed[0].Attempts != 3 || failed[0].Scheduled != third.Event.Scheduled {
		t.Fatalf("alarms failed: %+v; want %s's dead letter, 3 attempts, scheduled at %d", failed, id, third.Event.Scheduled)
	}
	if r, err := b.Request(ctx, id, []byte("get")); err != nil || string(r.Response) != "none" {
		t.Fatalf("get-alarm after the dead letter: %q, %v; want none", r.Response, err)
	}
}
