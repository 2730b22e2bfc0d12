package hostmod_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/hostmod"
	"github.com/wasmkeep/alarms/internal/testguest"
)

// CheckGuest refuses a guest that imports wasmkeep:alarm without
// exporting on-alarm, one whose on-alarm has another signature, and one
// that imports an alarm function that does not exist or with another
// signature, naming the export or import and the signature it wants; it
// passes the guests that follow the ABI.
func TestCheckGuestRefusesWhatBreaksTheABI(t *testing.T) {
	ctx := context.Background()
	r := wazero.NewRuntime(ctx)
	defer r.Close(ctx)
	check := func(wasm []byte) error {
		t.Helper()
		c, err := r.CompileModule(ctx, wasm)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		return hostmod.CheckGuest(c)
	}
	for _, c := range []struct {
		name string
		wasm []byte
		want []string // in the error; none: no error
	}{
		{"missing_on_alarm", testguest.Fixture(t, "missing_on_alarm"), []string{`does not export "on-alarm"`, abi.OnAlarmSignature}},
		{"wrong_signature", testguest.Fixture(t, "wrong_signature"), []string{`exports "on-alarm" with signature (func (param i32) (result i32))`, "want " + abi.OnAlarmSignature}},
		{"set-alarm mistyped", importing(abi.FuncSetAlarm, api.ValueTypeI32), []string{`"set-alarm" with signature (func (param i32) (result i32)), want (func (param $at_ms i64) (result i32))`}},
		{"an unknown alarm function", importing("snooze-alarm"), []string{`"snooze-alarm", which is not an alarm function`}},
		{"host_owned", testguest.Fixture(t, "host_owned"), nil},
		{"no alarms at all", testguest.Fixture(t, "grow_memory"), nil},
	} {
		err := check(c.wasm)
		if len(c.want) == 0 {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		if !errors.Is(err, hostmod.ErrGuestABI) {
			t.Errorf("%s: %v, want ErrGuestABI", c.name, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", c.name, err, w)
			}
		}
	}
}

// importing returns a module that imports wasmkeep:alarm's name as (func
// (param params...) (result i32)) and exports a correct on-alarm.
func importing(name string, params ...api.ValueType) []byte {
	str := func(s string) []byte { return append([]byte{byte(len(s))}, s...) }
	section := func(id byte, body ...[]byte) []byte {
		var b []byte
		for _, x := range body {
			b = append(b, x...)
		}
		return append([]byte{id, byte(len(b))}, b...)
	}
	imp := append([]byte{0x60, byte(len(params))}, params...)
	imp = append(imp, 1, api.ValueTypeI32)
	out := []byte{0, 'a', 's', 'm', 1, 0, 0, 0}
	out = append(out, section(1, []byte{2}, imp, []byte{0x60, 2, api.ValueTypeI64, api.ValueTypeI32, 1, api.ValueTypeI32})...)
	out = append(out, section(2, []byte{1}, str(abi.AlarmModule), str(name), []byte{0, 0})...)
	out = append(out, section(3, []byte{1, 1})...)
	out = append(out, section(7, []byte{1}, str(abi.ExportOnAlarm), []byte{0, 1})...)
	return append(out, section(10, []byte{1, 4, 0, 0x41, 0, 0x0b})...)
}

// CheckGuestWasm checks a guest's bytes as CheckGuest checks the compiled
// module, and says when the bytes are no module at all.
func TestCheckGuestWasm(t *testing.T) {
	ctx := context.Background()
	if err := hostmod.CheckGuestWasm(ctx, testguest.Fixture(t, "wrong_signature")); !errors.Is(err, hostmod.ErrGuestABI) || !strings.Contains(err.Error(), abi.OnAlarmSignature) {
		t.Errorf("wrong_signature: %v", err)
	}
	if err := hostmod.CheckGuestWasm(ctx, testguest.Fixture(t, "host_owned")); err != nil {
		t.Errorf("host_owned: %v", err)
	}
	if err := hostmod.CheckGuestWasm(ctx, []byte("not wasm")); err == nil || errors.Is(err, hostmod.ErrGuestABI) || !strings.Contains(err.Error(), "compile") {
		t.Errorf("bytes that are no module: %v", err)
	}
}
