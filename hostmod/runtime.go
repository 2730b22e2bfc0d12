package hostmod

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	clocks "github.com/wasmkeep/alarms/clock"
	"reflect"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"

	"github.com/wasmkeep/alarms/abi"
)

// ErrRuntimeNeverStopsGuests is wrapped by the error of CheckRuntime (and
// InstantiateAlarms) for a runtime that does not close a module
// when the context of its call is done: in it, no deadline can stop a guest
// that loops, and such a guest holds its actor, and the garbage collector,
// for ever.
var ErrRuntimeNeverStopsGuests = errors.New("the runtime does not close modules when their context is done: create it with wazero.NewRuntimeConfig().WithCloseOnContextDone(true)")

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
// runtime (Table.DeliverAlarm, or an engine given the runtime) calls it
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

// ourCode is the code of every Go function of the plugin's alarm module
// (goFunc's closure): a module under the plugin's name whose functions
// have other code was made by someone else.
var ourCode = reflect.ValueOf(goFunc(nil)).Pointer()

// IsAlarmModule reports whether m is a wasmkeep:alarm module this package
// built (NewAlarmModuleBuilder, InstantiateAlarms): named so, and every
// function of Functions it exports is the plugin's own (a host may add
// functions of its own to the builder). A host that finds a module of
// that name in a runtime it was given refuses one that is not: its
// functions would answer the guests instead of the plugin's.
func IsAlarmModule(m api.Module) bool {
	if m == nil || m.Name() != abi.AlarmModule {
		return false
	}
	defs := m.ExportedFunctionDefinitions()
	for _, f := range hostFuncs {
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

// GuestConfig returns the configuration of a guest instance, for a host
// that instantiates guests itself (package engine makes its instances
// with it): base (nil:
// a new one with crypto/rand as its random source and the system's
// monotonic clock) with no name, so that many instances of one class can
// live in a runtime, _initialize as its start function, and its wall clock
// read from c (nil: the system clock) at millisecond resolution.
// Without a wall clock wazero gives guests a fixed time in 2022, and a
// guest that sets its alarm from time.Now would set it in the past. The
// guest's standard streams, environment and files are base's.
func GuestConfig(base wazero.ModuleConfig, c clocks.Clock) wazero.ModuleConfig {
	if base == nil {
		base = defaultModuleConfig()
	}
	if c == nil {
		c = clocks.System{}
	}
	return base.
		WithName("").
		WithStartFunctions(abi.ExportInitialize).
		WithWalltime(func() (int64, int32) {
			t := c.Now()
			return t.Unix(), int32(t.Nanosecond())
		}, sys.ClockResolution(time.Millisecond))
}

// defaultModuleConfig is an instance's configuration when the host gives
// none: crypto/rand and the system's monotonic clock.
func defaultModuleConfig() wazero.ModuleConfig {
	return wazero.NewModuleConfig().WithRandSource(rand.Reader).WithSysNanotime()
}
