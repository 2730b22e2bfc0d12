package engine_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/engine"
)

// fixedClock is a clock an example can set.
type fixedClock struct{ t time.Time }

func (c *fixedClock) Now() time.Time { return c.t }

// After is a clock.Clock's; the engine waits on no clock.
func (c *fixedClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// An engine runs actors: compile a class once, open each actor on its own
// database, run events, and deliver alarms when they are due.
func Example() {
	ctx := context.Background()
	clock := &fixedClock{t: time.UnixMilli(1_000_000)}
	eng, err := engine.NewEngine(ctx, engine.WithClock(clock), engine.WithBackoff(time.Second, 5*time.Minute))
	if err != nil {
		panic(err)
	}
	defer eng.Close(ctx)

	// oneshot_alarm sets the alarm to the time in its request; its
	// on-alarm returns 0.
	wasm, err := os.ReadFile("../testdata/wasm/oneshot_alarm.wasm")
	if err != nil {
		panic(err)
	}
	class, err := eng.Compile(ctx, "oneshot", wasm)
	if err != nil {
		panic(err)
	}
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	id := abi.ActorID{Tenant: "t", Class: "oneshot", Name: "a"}
	actor, err := eng.Open(ctx, id, class, filepath.Join(dir, "a.db"))
	if err != nil {
		panic(err)
	}
	defer actor.Close(ctx)

	var req [8]byte
	binary.LittleEndian.PutUint64(req[:], 1_005_000)
	res, err := actor.Request(ctx, req[:])
	if err != nil {
		panic(err)
	}
	fmt.Println("committed alarm:", *res.Alarm)

	d, _ := actor.DeliverAlarm(ctx)
	fmt.Println("ran before it was due:", d.Ran)

	clock.t = time.UnixMilli(1_005_000)
	d, _ = actor.DeliverAlarm(ctx)
	fmt.Println("ran when due:", d.Ran, "scheduled:", d.Scheduled, "alarm left:", d.Alarm != nil)
	// Output:
	// committed alarm: 1005000
	// ran before it was due: false
	// ran when due: true scheduled: 1005000 alarm left: false
}

// An embedder that owns its wazero runtime (its own WASI set-up, host
// modules of its own) runs actors in it: the guest here imports the
// embedder's "example:host" module and wasmkeep:alarm side by side.
func ExampleWithRuntime() {
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCloseOnContextDone(true))
	defer r.Close(ctx)
	wasi_snapshot_preview1.MustInstantiate(ctx, r)
	_, err := r.NewHostModuleBuilder("example:host").
		NewFunctionBuilder().WithFunc(func() int64 { return 1_000_000 }).Export("offset").
		Instantiate(ctx)
	if err != nil {
		panic(err)
	}

	eng, err := engine.NewEngine(ctx,
		engine.WithClock(&fixedClock{t: time.UnixMilli(1_000_000)}),
		engine.WithRuntime(r),
		engine.WithModuleConfig(func(id abi.ActorID) wazero.ModuleConfig {
			return wazero.NewModuleConfig().WithEnv("ACTOR", id.Name) // per-actor WASI environment
		}))
	if err != nil {
		panic(err)
	}
	defer eng.Close(ctx)
	// embedder_imports sets its alarm to offset() + 1000 per environment
	// variable.
	wasm, err := os.ReadFile("../testdata/wasm/embedder_imports.wasm")
	if err != nil {
		panic(err)
	}
	class, err := eng.Compile(ctx, "emb", wasm)
	if err != nil {
		panic(err)
	}
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	actor, err := eng.Open(ctx, abi.ActorID{Tenant: "t", Class: "emb", Name: "a"}, class, filepath.Join(dir, "a.db"))
	if err != nil {
		panic(err)
	}
	defer actor.Close(ctx)
	res, err := actor.Request(ctx, nil)
	if err != nil {
		panic(err)
	}
	fmt.Println("committed alarm:", *res.Alarm)
	// Output:
	// committed alarm: 1001000
}

// An engine records its metrics in the registry it is given (and nowhere
// else); the binary serves the registry, with promhttp.HandlerFor.
func ExampleWithRegisterer() {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	eng, err := engine.NewEngine(ctx, engine.WithRegisterer(reg), engine.WithMaxOpenDatabases(64))
	if err != nil {
		panic(err)
	}
	defer eng.Close(ctx)

	families, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	for _, mf := range families {
		if mf.GetName() == "wasmkeep_actor_databases_max" {
			fmt.Println(mf.GetName(), mf.GetMetric()[0].GetGauge().GetValue())
		}
	}
	// Output: wasmkeep_actor_databases_max 64
}
