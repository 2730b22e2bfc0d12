package hostmod

import (
	"context"

	"github.com/tetratelabs/wazero/api"

	"github.com/wasmkeep/alarms/abi"
)

// hostFunc is one host function of the ABI: where it is imported from, its
// handler (which reads its parameters and returns the errno, the one
// result), and its parameters' types and names as abi/ABI.md gives them.
type hostFunc struct {
	module, name string
	handler      func(ctx context.Context, mem api.Memory, params []uint64) abi.Errno
	params       []api.ValueType
	paramNames   []string
}

// hostFuncs is every function of wasmkeep:alarm, declared once: it drives
// the module builder (NewAlarmModuleBuilder), AlarmFunctions and
// Functions; a test holds it to the signatures in abi/ABI.md.
var hostFuncs = []hostFunc{
	{abi.AlarmModule, abi.FuncSetAlarm, setAlarm, []api.ValueType{i64}, []string{"at_ms"}},
	{abi.AlarmModule, abi.FuncGetAlarm, getAlarm, []api.ValueType{i32}, []string{"out_ptr"}},
	{abi.AlarmModule, abi.FuncClearAlarm, clearAlarm, nil, nil},
}

// Function describes one host function of the ABI. Every one returns a
// single i32, the errno.
type Function struct {
	Module, Name string
	Params       []api.ValueType
	ParamNames   []string
}

// Functions returns the signature of every function of wasmkeep:alarm, in
// the order ABI.md lists them: for tools, for a host's import checks, and
// for test hosts that must offer the same imports.
func Functions() []Function {
	out := make([]Function, len(hostFuncs))
	for i, f := range hostFuncs {
		out[i] = Function{Module: f.module, Name: f.name,
			Params: append([]api.ValueType(nil), f.params...), ParamNames: append([]string(nil), f.paramNames...)}
	}
	return out
}
