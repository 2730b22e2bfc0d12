package node_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
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
			if ev.Delivery.Ran {
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

// testWriter sends log lines to the test log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p))
	return len(p), nil
}
