package hostmod_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/tetratelabs/wazero/api"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/hostmod"
	"github.com/wasmkeep/alarms/internal/testguest"
)

// A guest whose _initialize calls the alarm functions is instantiated
// with GuestConfig as the recipe says, with no event in the context: each
// call answers EPERM (ABI.md), none traps, and no alarm is set. The
// exported handlers, called by a host with a context that carries no
// event, answer EPERM too.
func TestAlarmFunctionsWithNoEventAnswerEPERM(t *testing.T) {
	h := newOwnHost(t, filepath.Join(t.TempDir(), "a.db"))
	// init_calls also imports response-write, the host's own.
	if _, err := h.r.NewHostModuleBuilder(abi.ActorModule).NewFunctionBuilder().
		WithFunc(func(int32, int32) int32 { return 0 }).Export(abi.FuncResponseWrite).Instantiate(h.ctx); err != nil {
		t.Fatal(err)
	}
	m, err := h.r.InstantiateWithConfig(h.ctx, testguest.Fixture(t, "init_calls"), hostmod.GuestConfig(nil, nil))
	if err != nil {
		t.Fatalf("a guest whose _initialize calls the alarm functions could not be instantiated: %v", err)
	}
	for i, name := range []string{abi.FuncSetAlarm, abi.FuncGetAlarm, abi.FuncClearAlarm} {
		if e, ok := m.Memory().ReadUint32Le(16 + 4*uint32(i)); !ok || e != uint32(abi.EPERM) {
			t.Errorf("%s from _initialize answered %d, want EPERM", name, e)
		}
	}
	for _, f := range hostmod.AlarmFunctions() {
		stack := []uint64{api.EncodeI64(t0)}
		f.Call(context.Background(), h.mod.Memory(), stack)
		if abi.Errno(stack[0]) != abi.EPERM {
			t.Errorf("%s called with no event in its context answered %d, want EPERM", f.Name, stack[0])
		}
	}
	if _, err := h.mod.ExportedFunction("clear").Call(h.ctx); err != nil {
		t.Errorf("an export calling clear-alarm with no event in its context trapped: %v", err)
	}
	if st := h.state(); st.Alarm != nil {
		t.Fatalf("calls outside an event set the alarm: %+v", st)
	}
}
