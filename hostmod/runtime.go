package hostmod

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"

	"github.com/wasmkeep/alarms/abi"
)

// ErrRuntimeNeverStopsGuests is wrapped by the error of CheckRuntime (and
// of NewEngine with WithRuntime) for a runtime that does not close a module
// when the context of its call is done: in it, no deadline can stop a guest
// that loops, and such a guest holds its actor, and the garbage collector,
// for ever.
var ErrRuntimeNeverStopsGuests = errors.New("the runtime does not close modules when their context is done: create it with wazero.NewRuntimeConfig().WithCloseOnContextDone(true)")

// ErrForeignModule is wrapped by the error of NewEngine with WithRuntime
// when the runtime already has a module named wasmkeep:alarm or
// wasmkeep:actor that this package did not instantiate: its functions
// would answer the guests instead of the engine's.
var ErrForeignModule = errors.New("a module of that name, not instantiated by this package, is already in the runtime")

// probeWasm is a module that exports one function, "f", which does nothing.
var probeWasm = []byte{
	0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version
	0x01, 0x04, 0x01, 0x60, 0x00, 0x00, // type section: () -> ()
	0x03, 0x02, 0x01, 0x00, // function section: one function of type 0
	0x07, 0x05, 0x01, 0x01, 'f', 0x00, 0x00, // export section: "f" is function 0
	0x0a, 0x04, 0x01, 0x02, 0x00, 0x0b, // code section: an empty body
}

// CheckRuntime reports whether r can stop a guest at a deadline: it calls
// a function of a module of its own with a context already done, which a
// runtime created with wazero.RuntimeConfig.WithCloseOnContextDone(true)
// refuses, and any other runs. An error wraps ErrRuntimeNeverStopsGuests,
// or says why the probe could not run. A host that runs guests in its own
// runtime (Table.DeliverAlarm, or NewEngine with WithRuntime) calls it
// once, after creating the runtime.
func CheckRuntime(ctx context.Context, r wazero.Runtime) error {
	c, err := r.CompileModule(ctx, probeWasm)
	if err != nil {
		return fmt.Errorf("hostmod: check the runtime: compile a probe: %w", err)
	}
	defer c.Close(ctx)
	m, err := r.InstantiateModule(ctx, c, wazero.NewModuleConfig().WithName("").WithStartFunctions())
	if err != nil {
		return fmt.Errorf("hostmod: check the runtime: instantiate a probe: %w", err)
	}
	defer m.Close(ctx)
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := m.ExportedFunction("f").Call(done); err == nil {
		return fmt.Errorf("hostmod: %w", ErrRuntimeNeverStopsGuests)
	}
	return nil
}

// ourCode is the code of every Go function of the plugin's host modules
// (goFunc's closure): a module under the plugin's name whose ABI functions
// have other code was made by someone else.
var ourCode = reflect.ValueOf(goFunc(nil)).Pointer()

// isOurs reports whether every function of the ABI that m, named after one
// of the plugin's modules, exports is the plugin's own (a host may add
// functions of its own to the builders, NewModuleBuilders).
func isOurs(m api.Module) bool {
	defs := m.ExportedFunctionDefinitions()
	for _, f := range hostFuncs {
		if f.module != m.Name() {
			continue
		}
		d := defs[f.name]
		if d == nil {
			return false
		}
		fn, ok := d.GoFunction().(api.GoModuleFunc)
		if !ok || reflect.ValueOf(fn).Pointer() != ourCode {
			return false
		}
	}
	return true
}

// checkForeign fails if r has a module under one of the plugin's names
// that this package did not instantiate.
func checkForeign(r wazero.Runtime) error {
	for _, name := range []string{abi.AlarmModule, abi.ActorModule} {
		if m := r.Module(name); m != nil && !isOurs(m) {
			return fmt.Errorf("hostmod: module %q: %w; leave the name to NewEngine, or register the alarm functions in a module of your own (AlarmFunctions) and run your own instances (Table)", name, ErrForeignModule)
		}
	}
	return nil
}

// GuestConfig returns the configuration of a guest instance as the
// engine makes it, for a host that instantiates guests itself: base (nil:
// a new one with crypto/rand as its random source and the system's
// monotonic clock) with no name, so that many instances of one class can
// live in a runtime, _initialize as its start function, and its wall clock
// read from clock (nil: the system clock) at millisecond resolution.
// Without a wall clock wazero gives guests a fixed time in 2022, and a
// guest that sets its alarm from time.Now would set it in the past. The
// guest's standard streams, environment and files are base's.
func GuestConfig(base wazero.ModuleConfig, clock Clock) wazero.ModuleConfig {
	if base == nil {
		base = defaultModuleConfig()
	}
	if clock == nil {
		clock = SystemClock{}
	}
	return base.
		WithName("").
		WithStartFunctions(abi.ExportInitialize).
		WithWalltime(func() (int64, int32) {
			t := clock.Now()
			return t.Unix(), int32(t.Nanosecond())
		}, sys.ClockResolution(time.Millisecond))
}

// defaultModuleConfig is an instance's configuration without
// WithModuleConfig (stdout and stderr aside): crypto/rand and the system's
// monotonic clock.
func defaultModuleConfig() wazero.ModuleConfig {
	return wazero.NewModuleConfig().WithRandSource(rand.Reader).WithSysNanotime()
}
