package alarms_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wasmkeep/alarms"
	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/alarmindex"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/hostmod"
	"github.com/wasmkeep/alarms/sweeper"
)

// exampleActor is an actor run by package engine (which gives its ID,
// State and SetMeta), as the plugin sees it (alarms.Actor), on a host of
// one node that holds it (alarms.Host): the host's only jobs are the
// upload and the alarm event.
type exampleActor struct {
	alarms.OneNode
	*engine.Actor
	p        *alarms.Plugin
	b        bucket.Bucket
	uploaded bool
}

func (x *exampleActor) Take(context.Context, abi.ActorID) (alarms.Actor, func(error), error) {
	return x, func(error) {}, nil
}
func (x *exampleActor) Hold() alarms.Hold {
	return alarms.Hold{Generation: 1, Valid: true, Uploaded: x.uploaded, BucketHad: x.uploaded}
}
func (x *exampleActor) Upload(ctx context.Context) error {
	data, err := x.Snapshot(ctx)
	if err == nil {
		_, err = x.b.Put(ctx, "state/"+alarms.TimerKey(x.ID()), data, bucket.Cond{})
	}
	x.uploaded = x.uploaded || err == nil
	return err
}
func (x *exampleActor) RunAlarm(ctx context.Context) (hostmod.Delivery, error) {
	// The event and its replication: the entry for the alarm it leaves is
	// PUT before it commits and recorded in its own transaction.
	return engine.RunAlarm(ctx, x.p, x, x.Actor, alarms.AfterEvent)
}
func (x *exampleActor) Release(context.Context) {}

// A host registers the plugin, replicates each event through it (which
// lists the alarm in the bucket's index around the upload), and hands the
// timer's alarms to Deliver.
func Example() {
	ctx := context.Background()
	mem := bucket.NewMem()
	actor := &exampleActor{OneNode: alarms.OneNode{Name: "n1"}, b: mem}
	p, err := alarms.Register(alarms.Config{
		Bucket: mem, Host: actor, Timer: sweeper.NewTimer(5 * time.Minute), Margin: 12 * time.Second,
	})
	if err != nil {
		panic(err)
	}
	eng, err := engine.NewEngine(ctx)
	if err != nil {
		panic(err)
	}
	defer eng.Close(ctx)
	wasm, err := os.ReadFile("testdata/wasm/oneshot_alarm.wasm") // on-request sets the alarm to its body's i64
	if err != nil {
		panic(err)
	}
	class, err := eng.Compile(ctx, "oneshot", wasm)
	if err != nil {
		panic(err)
	}
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	a, err := eng.Open(ctx, abi.ActorID{Tenant: "t", Class: "oneshot", Name: "a"}, class, filepath.Join(dir, "a.db"))
	if err != nil {
		panic(err)
	}
	defer a.Close(ctx)
	actor.Actor, actor.p = a, p

	now := time.Now().UnixMilli()
	var req [8]byte
	binary.LittleEndian.PutUint64(req[:], uint64(now))
	if _, err := a.Request(ctx, req[:]); err != nil {
		panic(err)
	}
	if err := p.Replicate(ctx, actor, alarms.AfterEvent); err != nil { // PUT, record, upload, hold check, DELETE
		panic(err)
	}
	keys, _ := mem.List(ctx, alarmindex.TenantPrefix("t"), "", 10)
	k, _ := alarmindex.ParseKey(keys[0])
	fmt.Println("index entries:", len(keys), "due now:", k.DueMs == now, "generation:", k.Tag.Generation)

	d, err := p.Deliver(ctx, actor, now)
	if err != nil {
		panic(err)
	}
	p.FlushDeletes(ctx) // the replaced entry's DELETE waits for its batch
	keys, _ = mem.List(ctx, alarmindex.TenantPrefix("t"), "", 10)
	fmt.Println("delivered:", d.Outcome, "ran:", d.Event.Ran, "entries left:", len(keys))
	// Output:
	// index entries: 1 due now: true generation: 1
	// delivered: run ran: true entries left: 0
}

// The plugin registers its metrics in the registry the host passes
// (Config.Registerer), never in Prometheus's default one; the host serves
// the registry (promhttp.HandlerFor). Here a node timer with two alarms.
func ExampleRegister_metrics() {
	reg := prometheus.NewRegistry()
	timer := sweeper.NewTimer(5 * time.Minute)
	_, err := alarms.Register(alarms.Config{
		Bucket: bucket.NewMem(), Host: &exampleActor{OneNode: alarms.OneNode{Name: "n1"}}, Timer: timer,
		Margin: 12 * time.Second, Registerer: reg,
	})
	if err != nil {
		panic(err)
	}
	timer.Set(alarms.TimerKey(abi.ActorID{Tenant: "t", Class: "c", Name: "a"}), 1_800_000_060_000)
	timer.Set(alarms.TimerKey(abi.ActorID{Tenant: "t", Class: "c", Name: "b"}), 1_800_000_120_000)

	families, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	for _, mf := range families {
		if mf.GetName() == "wasmkeep_alarms_pending" {
			fmt.Println(mf.GetName(), mf.GetMetric()[0].GetGauge().GetValue())
		}
	}
	// Output: wasmkeep_alarms_pending 2
}
