package hostmod

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/wasmkeep/alarms/abi"
)

// ErrGuestABI is wrapped by the errors of CheckGuest: the guest does not
// follow the alarm functions' side of abi/ABI.md.
var ErrGuestABI = errors.New("the guest breaks abi/ABI.md")

// CheckGuest checks a compiled guest against the alarm functions' side of
// abi/ABI.md, before any instance of it runs: each function it imports
// from wasmkeep:alarm is one of Functions, with its signature, and its
// on-alarm export has the signature (param $scheduled_ms i64) (param
// $retry_count i32) (result i32); a guest that imports anything from
// wasmkeep:alarm must export it. A guest that imports none and exports no
// on-alarm passes: it never has an alarm. The error wraps ErrGuestABI and
// names the import or export and the signature it must have.
//
// A host that runs its own instances calls it once per class, after
// compiling it: a guest it refuses would otherwise fail only when its
// alarm falls due (no on-alarm to call), or fail every delivery and be
// retried for ever (a mistyped one). Package engine's Compile makes the
// same checks. A host whose framework hides its runtime (Extism) checks
// the guest's bytes with CheckGuestWasm.
func CheckGuest(m wazero.CompiledModule) error {
	importsAlarm := false
	for _, f := range m.ImportedFunctions() {
		mod, name, _ := f.Import()
		if mod != abi.AlarmModule {
			continue
		}
		importsAlarm = true
		i := slices.IndexFunc(hostFuncs, func(h hostFunc) bool { return h.name == name })
		if i < 0 {
			return fmt.Errorf("hostmod: guest imports %s %q, which is not an alarm function (%s): %w", mod, name, alarmNames(), ErrGuestABI)
		}
		want := hostFuncs[i]
		if !slices.Equal(f.ParamTypes(), want.params) || !slices.Equal(f.ResultTypes(), []api.ValueType{i32}) {
			return fmt.Errorf("hostmod: guest imports %s %q with signature %s, want %s: %w",
				mod, name, signature(f.ParamTypes(), nil, f.ResultTypes()), signature(want.params, want.paramNames, []api.ValueType{i32}), ErrGuestABI)
		}
	}
	onAlarm, ok := m.ExportedFunctions()[abi.ExportOnAlarm]
	switch {
	case !ok && importsAlarm:
		return fmt.Errorf("hostmod: guest imports %s but does not export %q %s: %w", abi.AlarmModule, abi.ExportOnAlarm, abi.OnAlarmSignature, ErrGuestABI)
	case ok && (!slices.Equal(onAlarm.ParamTypes(), abi.OnAlarmParams) || !slices.Equal(onAlarm.ResultTypes(), abi.OnAlarmResults)):
		return fmt.Errorf("hostmod: guest exports %q with signature %s, want %s: %w",
			abi.ExportOnAlarm, signature(onAlarm.ParamTypes(), nil, onAlarm.ResultTypes()), abi.OnAlarmSignature, ErrGuestABI)
	}
	return nil
}

// CheckGuestWasm is CheckGuest for a host that has the guest's bytes but
// not the runtime that runs them (Extism, and other frameworks that keep
// their wazero runtime to themselves): it compiles wasm for the check
// alone, in a wazero interpreter of its own (a fraction of what compiling
// it for the framework's runtime costs). An error that does not wrap
// ErrGuestABI says that wasm is not a module wazero can compile.
func CheckGuestWasm(ctx context.Context, wasm []byte) error {
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer r.Close(ctx)
	m, err := r.CompileModule(ctx, wasm)
	if err != nil {
		return fmt.Errorf("hostmod: compile the guest to check it: %w", err)
	}
	return CheckGuest(m)
}

// signature writes a function's signature in .wat, with its parameters'
// names when it has them.
func signature(params []api.ValueType, names []string, results []api.ValueType) string {
	var b strings.Builder
	b.WriteString("(func")
	for i, p := range params {
		if i < len(names) {
			fmt.Fprintf(&b, " (param $%s %s)", names[i], api.ValueTypeName(p))
		} else {
			fmt.Fprintf(&b, " (param %s)", api.ValueTypeName(p))
		}
	}
	for _, r := range results {
		fmt.Fprintf(&b, " (result %s)", api.ValueTypeName(r))
	}
	b.WriteString(")")
	return b.String()
}

// alarmNames lists the alarm functions' names.
func alarmNames() string {
	names := make([]string, len(hostFuncs))
	for i, f := range hostFuncs {
		names[i] = f.name
	}
	return strings.Join(names, ", ")
}
