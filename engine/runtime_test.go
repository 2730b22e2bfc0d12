package engine_test

import (
	"context"
	"encoding/binary"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/hostmod"
	"github.com/wasmkeep/alarms/internal/testguest"
)

// embedderRuntime is a runtime as an embedder sets it up: its own WASI and
// a host module of its own ("example:host", whose offset() the guest adds
// to its alarm).
func embedderRuntime(t *testing.T, ctx context.Context, withAlarmModules bool) wazero.Runtime {
	t.Helper()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCloseOnContextDone(true))
	t.Cleanup(func() { r.Close(ctx) })
	wasi_snapshot_preview1.MustInstantiate(ctx, r)
	if _, err := r.NewHostModuleBuilder("example:host").
		NewFunctionBuilder().WithFunc(func() int64 { return t0 + 40_000 }).Export("offset").
		Instantiate(ctx); err != nil {
		t.Fatal(err)
	}
	if withAlarmModules {
		engine.MustInstantiate(ctx, r)
	}
	return r
}

// An embedder runs actors in a wazero runtime it owns: the guest imports
// the embedder's WASI (with the environment the embedder configures per
// actor), the embedder's own host module and wasmkeep:alarm side by side,
// and the engine's events, alarms and deliveries work as in a runtime of
// its own.
func TestAnEmbeddersOwnRuntime(t *testing.T) {
	for _, pre := range []bool{false, true} {
		name := "engine instantiates wasmkeep modules"
		if pre {
			name = "embedder instantiated them"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			r := embedderRuntime(t, ctx, pre)
			c := &clock{now: time.UnixMilli(t0)}
			eng, err := engine.NewEngine(ctx, engine.WithClock(c), engine.WithRuntime(r),
				engine.WithModuleConfig(func(id abi.ActorID) wazero.ModuleConfig {
					return wazero.NewModuleConfig().WithEnv("TENANT", id.Tenant).WithEnv("ACTOR", id.Name)
				}))
			if err != nil {
				t.Fatal(err)
			}
			class, err := eng.Compile(ctx, "emb", testguest.Fixture(t, "embedder_imports"))
			if err != nil {
				t.Fatal(err)
			}
			id := abi.ActorID{Tenant: "t", Class: "emb", Name: "a1"}
			a, err := eng.Open(ctx, id, class, filepath.Join(t.TempDir(), "a1.db"))
			if err != nil {
				t.Fatal(err)
			}
			res, err := a.Request(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if n := binary.LittleEndian.Uint32(res.Response); n != 2 {
				t.Errorf("the guest saw %d environment variables, want the 2 the embedder configured", n)
			}
			if want := int64(t0 + 40_000 + 2*1000); res.Alarm == nil || *res.Alarm != want {
				t.Fatalf("result %+v, want the alarm %d: offset() from the embedder's module plus the environment", res, want)
			}
			c.Set(*res.Alarm)
			d, err := a.DeliverAlarm(ctx)
			if err != nil || !d.Ran || d.Err != nil || d.Alarm != nil {
				t.Fatalf("DeliverAlarm: %+v, %v; want on-alarm run and the alarm gone", d, err)
			}
			if err := a.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if err := eng.Close(ctx); err != nil {
				t.Fatal(err)
			}
			// The embedder's runtime and its modules outlive the engine.
			if r.Module("example:host") == nil || r.Module(abi.AlarmModule) == nil {
				t.Error("closing the engine closed modules of the embedder's runtime")
			}
			if _, err := r.CompileModule(ctx, testguest.Fixture(t, "oneshot_alarm")); err != nil {
				t.Errorf("the embedder's runtime is unusable after the engine closed: %v", err)
			}
		})
	}
}

// The engine refuses a runtime that cannot stop a guest at its deadline,
// and a runtime with modules under its names that it did not make; a
// runtime whose alarm modules came from the package's own builders, with
// functions of the host's added, is accepted.
func TestWithRuntimeRefusesTheTwoHazards(t *testing.T) {
	ctx := context.Background()
	r := wazero.NewRuntime(ctx)
	defer r.Close(ctx)
	if err := hostmod.CheckRuntime(ctx, r); !errors.Is(err, hostmod.ErrRuntimeNeverStopsGuests) {
		t.Fatalf("CheckRuntime on a runtime without WithCloseOnContextDone: %v", err)
	}
	if _, err := engine.NewEngine(ctx, engine.WithRuntime(r)); !errors.Is(err, hostmod.ErrRuntimeNeverStopsGuests) ||
		!strings.Contains(err.Error(), "WithCloseOnContextDone(true)") {
		t.Fatalf("NewEngine with that runtime: %v", err)
	}

	cfg := wazero.NewRuntimeConfig().WithCloseOnContextDone(true)
	foreign := wazero.NewRuntimeWithConfig(ctx, cfg)
	defer foreign.Close(ctx)
	if _, err := foreign.NewHostModuleBuilder(abi.AlarmModule).NewFunctionBuilder().
		WithFunc(func(int64) int32 { return 0 }).Export(abi.FuncSetAlarm).Instantiate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := engine.NewEngine(ctx, engine.WithRuntime(foreign)); !errors.Is(err, engine.ErrForeignModule) ||
		!strings.Contains(err.Error(), abi.AlarmModule) {
		t.Fatalf("NewEngine with a foreign %s module: %v", abi.AlarmModule, err)
	}

	own := wazero.NewRuntimeWithConfig(ctx, cfg)
	defer own.Close(ctx)
	alarm, actor := engine.NewModuleBuilders(own)
	alarm.NewFunctionBuilder().WithFunc(func() int32 { return 7 }).Export("host-extra")
	if _, err := alarm.Instantiate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := actor.Instantiate(ctx); err != nil {
		t.Fatal(err)
	}
	eng, err := engine.NewEngine(ctx, engine.WithRuntime(own))
	if err != nil {
		t.Fatalf("NewEngine with the package's own modules and a function of the host's: %v", err)
	}
	eng.Close(ctx)
}

// A module the embedder instantiates itself in a runtime the engine's
// imports live in (WithRuntime), outside the engine, whose _initialize
// calls them with no actor or event in its context, and the imports
// called from Go with such a context: each answers EPERM, as outside an
// event, and none traps (ABI.md). The actor's own events are unaffected.
func TestImportsCalledWithNoEventAnswerEPERM(t *testing.T) {
	ctx := context.Background()
	r := embedderRuntime(t, ctx, false)
	eng, err := engine.NewEngine(ctx, engine.WithRuntime(r))
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close(ctx)
	cfg := wazero.NewModuleConfig().WithName("").WithStartFunctions(abi.ExportInitialize)
	m, err := r.InstantiateWithConfig(ctx, testguest.Fixture(t, "init_calls"), cfg)
	if err != nil {
		t.Fatalf("the alarm functions called from _initialize with no event in the context: %v", err)
	}
	for i, name := range []string{abi.FuncSetAlarm, abi.FuncGetAlarm, abi.FuncClearAlarm} {
		if e, ok := m.Memory().ReadUint32Le(16 + 4*uint32(i)); !ok || e != uint32(abi.EPERM) {
			t.Errorf("%s answered %d, want EPERM", name, e)
		}
	}
	// actor-id, of wasmkeep:actor, the same (the fixture keeps its errno at 20).
	m, err = r.InstantiateWithConfig(ctx, testguest.Fixture(t, "actor_id"), cfg)
	if err != nil {
		t.Fatalf("actor-id called from _initialize with no actor in the context: %v", err)
	}
	if e, ok := m.Memory().ReadUint32Le(20); !ok || e != uint32(abi.EPERM) {
		t.Errorf("actor-id answered %d, want EPERM", e)
	}
	// Each wasmkeep:actor function, called from Go with a context that
	// carries nothing, as by a host that forgot it.
	defs := r.Module(abi.ActorModule).ExportedFunctionDefinitions()
	for _, f := range engine.Functions() {
		if f.Module != abi.ActorModule {
			continue
		}
		fn, ok := defs[f.Name].GoFunction().(api.GoModuleFunc)
		if !ok {
			t.Fatalf("%s is no Go function", f.Name)
		}
		stack := make([]uint64, max(len(f.Params), 1))
		func() {
			defer func() {
				if p := recover(); p != nil {
					stack[0] = 0
					t.Errorf("%s with nothing in its context panicked: %v", f.Name, p)
				}
			}()
			fn(ctx, m, stack)
		}()
		if abi.Errno(stack[0]) != abi.EPERM {
			t.Errorf("%s with nothing in its context: errno %d; want EPERM", f.Name, stack[0])
		}
	}
	// The engine's own actors are unaffected.
	class, err := eng.Compile(ctx, "init", testguest.Fixture(t, "init_calls"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := eng.Open(ctx, abi.ActorID{Tenant: "t", Class: "init", Name: "a"}, class, filepath.Join(t.TempDir(), "a.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	res, err := a.Request(ctx, nil)
	if err != nil || len(res.Response) != 12 || binary.LittleEndian.Uint32(res.Response) != uint32(abi.EPERM) || res.Alarm != nil {
		t.Fatalf("the engine's own actor: %+v, %v", res, err)
	}
}
