package node_test

import (
	"context"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/internal/iohook"
	"github.com/wasmkeep/alarms/internal/s3test"
	"github.com/wasmkeep/alarms/internal/testguest"
	"github.com/wasmkeep/alarms/node"
)

// In cluster mode a delivery's upload does not wait for its commit to be
// durable on the node (the journal's sync held): the bucket holds it once
// the upload returns, and the actor's next call does not wait either. The
// sidecar, which has a restore keep the local
// file in place of the bucket's state, is written on release only once
// the local file is durable too: written before, a power cut could leave
// a sidecar naming the upload beside a database that lost the delivery,
// and the next take would keep that older file. The database file is
// synced before it too.
func TestAnUploadGoesOutBeforeTheLocalSyncButTheSidecarWaitsForIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := s3test.Start(t).Bucket
	dir := t.TempDir()
	id := abi.ActorID{Tenant: "t", Class: "oneshot", Name: "g"}
	db := node.Path(dir, id)
	side := db + ".sync"
	var holding, dbSynced, sidecarFirst atomic.Bool
	release := make(chan struct{})
	let := sync.OnceFunc(func() { holding.Store(false); close(release) })
	defer let()
	// Only this test's files: the node tests run in parallel.
	t.Cleanup(iohook.Set(func(op, name string, _, _ int64) {
		switch {
		case op != "sync" || !strings.HasPrefix(name, dir):
		case holding.Load() && strings.Contains(name, "journal-"):
			<-release
		case name == db:
			dbSynced.Store(true)
			if _, err := os.Stat(side); err == nil {
				sidecarFirst.Store(true)
			}
		}
	}))
	delivered := make(chan node.DeliveryEvent, 4)
	n, err := node.New(ctx, node.Config{
		DataDir: dir, Classes: map[string][]byte{"oneshot": testguest.Fixture(t, "oneshot_alarm")},
		Logger:        hclog.New(&hclog.LoggerOptions{Name: "g", Level: hclog.Warn, Output: testWriter{t}}),
		EngineOptions: []engine.Option{engine.WithJournal(dir)},
		OnDelivery:    func(ev node.DeliveryEvent) { delivered <- ev },
		Cluster: &node.ClusterConfig{
			Bucket: b, NodeID: "g1", Addr: "g1.invalid:1",
			IdleTimeout: time.Hour, SweepPeriod: time.Hour,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	n.Start(ctx)
	closed := make(chan error, 1)
	defer func() {
		let()
		select {
		case <-closed:
		default:
			n.Close(ctx)
		}
	}()
	if _, err := n.Exec(ctx, id, alarmAt(time.Now().Add(300*time.Millisecond).UnixMilli()), node.ExecDurable); err != nil {
		t.Fatal(err)
	}
	before := latest(t, b, id)
	holding.Store(true)

	select {
	case ev := <-delivered:
		if ev.Err != nil || !ev.Event.Ran || ev.Event.Err != nil {
			t.Fatalf("the delivery: %+v", ev)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the delivery and its upload waited for the journal's sync")
	}
	if after := latest(t, b, id); after == before {
		t.Fatalf("the bucket's state is still %+v: the delivery was not uploaded", before)
	}
	// The bucket holds the delivery, under the node's hold: the actor's
	// next call does not wait for the local sync (engine.Actor.Replicated).
	read := make(chan error, 1)
	go func() { _, err := n.State(ctx, id); read <- err }()
	select {
	case err := <-read:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a read of the delivered actor waited for the local sync, though its upload was in the bucket")
	}

	go func() { closed <- n.Close(ctx) }()
	deadline := time.Now().Add(500 * time.Millisecond)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(side); err == nil {
			t.Fatal("the release wrote the sidecar while the delivery's commit was not durable on the node")
		}
		time.Sleep(10 * time.Millisecond)
	}
	let()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the node did not close")
	}
	got, err := os.ReadFile(side)
	if err != nil {
		t.Fatalf("no sidecar once the local file was durable: %v", err)
	}
	if want := latest(t, b, id); !strings.Contains(string(got), want.ETag) {
		t.Fatalf("the sidecar %q does not name the bucket's state %+v", got, want)
	}
	// The database itself is synced before the sidecar vouches for it:
	// without the journal its WAL's commits are not, and a restore writes
	// the file without a sync.
	if !dbSynced.Load() || sidecarFirst.Load() {
		t.Fatalf("the database was synced: %v; the sidecar written before that sync: %v", dbSynced.Load(), sidecarFirst.Load())
	}
}
