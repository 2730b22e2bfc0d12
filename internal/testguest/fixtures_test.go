package testguest_test

import (
	"slices"
	"testing"
	"time"

	"github.com/tetratelabs/wazero/api"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/internal/testguest"
)

// The fixtures' behaviour, as testdata/wasm/README.md states it, checked on
// the fake host: host tests rely on it.

func TestFixturesShape(t *testing.T) {
	for _, name := range fixtures {
		t.Run(name, func(t *testing.T) {
			cm := compile(t, testguest.Fixture(t, name))
			mem, ok := cm.ExportedMemories()["memory"]
			if !ok || mem.Min() != 1 {
				t.Errorf("memory export %v (ok %v), want one page", mem, ok)
			}
			checkImports(t, cm)
			exports := cm.ExportedFunctions()
			switch name {
			case "wrong_signature":
				f := exports[abi.ExportOnAlarm]
				if f == nil || !sameSig(f, []api.ValueType{api.ValueTypeI32}, []api.ValueType{api.ValueTypeI32}) {
					t.Errorf("on-alarm %v, want (param i32) (result i32)", f)
				}
				checkExport(t, cm, abi.ExportOnRequest)
			case "missing_on_alarm":
				if _, ok := exports[abi.ExportOnAlarm]; ok {
					t.Error("exports on-alarm")
				}
				checkExport(t, cm, abi.ExportOnRequest)
			default:
				checkExport(t, cm, abi.ExportOnAlarm)
				checkExport(t, cm, abi.ExportOnRequest)
			}
			if name == "init_calls" {
				checkExport(t, cm, abi.ExportInitialize)
			}
			// Both refused guests import set-alarm, which is what makes
			// on-alarm required.
			imports := map[string]bool{}
			for _, f := range cm.ImportedFunctions() {
				mod, fn, _ := f.Import()
				imports[mod+" "+fn] = true
			}
			if !imports[abi.AlarmModule+" "+abi.FuncSetAlarm] {
				t.Error("does not import set-alarm")
			}
		})
	}
}

func TestBadPointer(t *testing.T) {
	h := newHost(t, testguest.Fixture(t, "bad_pointer"))
	// Longer than 6 bytes, so request-read(65530, 100) would copy past the end.
	resp := h.mustRequest("0123456789")
	if got, want := errnos(t, resp), []uint32{abi.EFAULT, abi.EFAULT, abi.EFAULT, abi.EFAULT}; !slices.Equal(got, want) {
		t.Errorf("errnos %v, want %v", got, want)
	}
	wantCalls := []string{
		"set-alarm(5000)=0",
		"get-alarm(65532)=21",
		"get-alarm(-1)=21",
		"request-read(65530,100)=21",
		"response-write(65530,100)=21",
		"response-write(0,16)=0",
	}
	if !slices.Equal(h.calls, wantCalls) {
		t.Errorf("calls %q, want %q", h.calls, wantCalls)
	}
	if h.alarm == nil || *h.alarm != 5000 {
		t.Errorf("alarm %v, want 5000 committed", h.alarm)
	}
}

func TestBadTime(t *testing.T) {
	h := newHost(t, testguest.Fixture(t, "bad_time"))
	resp := h.mustRequest("")
	if got, want := errnos(t, resp), []uint32{abi.EINVAL, abi.EINVAL, 0, 0}; !slices.Equal(got, want) {
		t.Errorf("errnos %v, want %v", got, want)
	}
	wantCalls := []string{
		"set-alarm(-1)=28",
		"set-alarm(1000000000000000)=28",
		"set-alarm(999999999999999)=0",
		"set-alarm(7000)=0",
		"response-write(0,16)=0",
	}
	if !slices.Equal(h.calls, wantCalls) {
		t.Errorf("calls %q, want %q", h.calls, wantCalls)
	}
	if h.alarm == nil || *h.alarm != 7000 {
		t.Errorf("alarm %v, want 7000", h.alarm)
	}
}

func TestInitCalls(t *testing.T) {
	h := newHost(t, testguest.Fixture(t, "init_calls"))
	wantCalls := []string{"set-alarm(1000)=63", "get-alarm(0)=63", "clear-alarm()=63"}
	if !slices.Equal(h.calls, wantCalls) {
		t.Errorf("calls from _initialize %q, want %q", h.calls, wantCalls)
	}
	resp := h.mustRequest("")
	if got, want := errnos(t, resp), []uint32{abi.EPERM, abi.EPERM, abi.EPERM}; !slices.Equal(got, want) {
		t.Errorf("errnos %v, want %v", got, want)
	}
	if h.alarm != nil {
		t.Errorf("alarm %d set from _initialize", *h.alarm)
	}
}

func TestFailingAlarmFixtures(t *testing.T) {
	tests := []struct {
		name     string
		deadline time.Duration
		trap     bool // the call ends in an error (trap or deadline), not a result
		code     uint32
		closed   bool // the module is closed after the call
	}{
		{"trap_on_alarm", eventDeadline, true, 0, false},
		{"fail_on_alarm", eventDeadline, false, 1, false},
		// The loop never ends; the deadline closes the module.
		{"hang_on_alarm", 100 * time.Millisecond, true, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHost(t, testguest.Fixture(t, tt.name))
			h.mustRequest("")
			if h.alarm == nil || *h.alarm != 1000 {
				t.Fatalf("alarm %v after the request, want 1000", h.alarm)
			}
			scheduled, code, err := h.fire(tt.deadline)
			if scheduled != 1000 {
				t.Errorf("fired alarm %d", scheduled)
			}
			if (err != nil) != tt.trap || code != tt.code {
				t.Errorf("on-alarm: code %d, err %v; want code %d, error %v", code, err, tt.code, tt.trap)
			}
			if h.mod.IsClosed() != tt.closed {
				t.Errorf("module closed: %v, want %v", h.mod.IsClosed(), tt.closed)
			}
		})
	}
}

func TestTrapOnRequestRollsBack(t *testing.T) {
	h := newHost(t, testguest.Fixture(t, "trap_on_request"))
	h.req = nil
	_, err := h.event(eventDeadline, abi.ExportOnRequest, 0)
	if err == nil {
		t.Fatal("on-request did not trap")
	}
	if !slices.Equal(h.calls, []string{"set-alarm(1000)=0"}) {
		t.Errorf("calls %q, want set-alarm(1000) first", h.calls)
	}
	if h.alarm != nil {
		t.Errorf("alarm %d survived the trap", *h.alarm)
	}
}

func TestFixturesOnAlarmReturnsZero(t *testing.T) {
	for _, name := range []string{"bad_pointer", "bad_time", "init_calls", "trap_on_request"} {
		h := newHost(t, testguest.Fixture(t, name))
		code, err := h.event(eventDeadline, abi.ExportOnAlarm, api.EncodeI64(1000), 0)
		if err != nil || code != 0 {
			t.Errorf("%s: on-alarm = %d, %v; want 0", name, code, err)
		}
	}
}
