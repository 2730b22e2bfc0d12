package testguest_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/tetratelabs/wazero/sys"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/engine"
)

// The tests share one runtime, with the fake host modules in it, and compile
// each guest once: instantiating a Go guest is fast, compiling it is not.
// Host functions find their fakeHost in the call's context.
var (
	sharedOnce sync.Once
	sharedRT   wazero.Runtime
	compiledMu sync.Mutex
	compiled   = map[[32]byte]wazero.CompiledModule{}
)

type hostKey struct{}

func sharedRuntime(t testing.TB) wazero.Runtime {
	sharedOnce.Do(func() {
		ctx := context.Background()
		sharedRT = wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCloseOnContextDone(true))
		wasi_snapshot_preview1.MustInstantiate(ctx, sharedRT)
		if err := instantiateHostModules(ctx, sharedRT); err != nil {
			panic(err)
		}
	})
	return sharedRT
}

// compile compiles wasm once per process.
func compile(t testing.TB, wasm []byte) wazero.CompiledModule {
	t.Helper()
	r := sharedRuntime(t)
	sum := sha256.Sum256(wasm)
	compiledMu.Lock()
	defer compiledMu.Unlock()
	if cm, ok := compiled[sum]; ok {
		return cm
	}
	cm, err := r.CompileModule(context.Background(), wasm)
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	compiled[sum] = cm
	return cm
}

// fakeHost is a small in-memory host with the ABI's semantics, enough to
// check what the guests do: one instance, one event at a time, each event's
// KV writes and alarm changes rolled back when it fails. It records every
// import call, failed events' included.
type fakeHost struct {
	t   testing.TB
	mod api.Module

	nowMs    int64 // the guest's wall clock
	inEvent  bool
	touched  bool // set-alarm or clear-alarm succeeded in this event
	alarm    *int64
	failures int
	kv       map[string]string
	req      []byte
	resp     []byte
	calls    []string // "set-alarm(5000)=0", in order
	stderr   bytes.Buffer
}

// newHost instantiates wasm (running _initialize, if exported, outside any
// event) on a fresh fake host.
func newHost(t testing.TB, wasm []byte) *fakeHost {
	t.Helper()
	cm := compile(t, wasm)
	h := &fakeHost{t: t, nowMs: 1_700_000_000_000, kv: map[string]string{}}
	ctx := context.WithValue(context.Background(), hostKey{}, h)
	cfg := wazero.NewModuleConfig().
		WithName("").
		WithStartFunctions(abi.ExportInitialize).
		WithStderr(&h.stderr).
		WithWalltime(func() (int64, int32) {
			return h.nowMs / 1000, int32(h.nowMs % 1000 * 1_000_000)
		}, sys.ClockResolution(time.Millisecond))
	mod, err := sharedRuntime(t).InstantiateModule(ctx, cm, cfg)
	if err != nil {
		t.Fatalf("instantiate guest: %v (stderr %q)", err, h.stderr.String())
	}
	t.Cleanup(func() { mod.Close(context.Background()) })
	h.mod = mod
	return h
}

func (h *fakeHost) record(name string, args []any, errno uint32) uint32 {
	s := make([]string, len(args))
	for i, a := range args {
		s[i] = fmt.Sprint(a)
	}
	h.calls = append(h.calls, fmt.Sprintf("%s(%s)=%d", name, strings.Join(s, ","), errno))
	return errno
}

func instantiateHostModules(ctx context.Context, r wazero.Runtime) error {
	i32, i64 := api.ValueTypeI32, api.ValueTypeI64
	// The signatures come from the host's own table, declared once.
	sigs := map[string][]api.ValueType{}
	for _, f := range engine.Functions() {
		sigs[f.Name] = f.Params
	}
	fn := func(b wazero.HostModuleBuilder, name string, f func(h *fakeHost, m api.Module, p []uint64) uint32) {
		params := sigs[name]
		b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, m api.Module, stack []uint64) {
			h := ctx.Value(hostKey{}).(*fakeHost)
			var errno uint32
			if !h.inEvent {
				errno = abi.EPERM
			} else {
				errno = f(h, m, stack)
			}
			args := make([]any, len(params))
			for i, p := range params {
				if p == i64 {
					args[i] = int64(stack[i])
				} else {
					args[i] = int32(stack[i])
				}
			}
			stack[0] = uint64(h.record(name, args, errno))
		}), params, []api.ValueType{i32}).Export(name)
	}
	// f reads its arguments from the stack and must not change it: they are
	// recorded after it returns, then the errno goes over stack[0].
	alarm := r.NewHostModuleBuilder(abi.AlarmModule)
	fn(alarm, abi.FuncSetAlarm, func(h *fakeHost, _ api.Module, p []uint64) uint32 {
		at := int64(p[0])
		if at < 0 || at > abi.MaxAlarmMillis {
			return abi.EINVAL
		}
		h.alarm, h.touched = &at, true
		return 0
	})
	fn(alarm, abi.FuncGetAlarm, func(h *fakeHost, m api.Module, p []uint64) uint32 {
		if h.alarm == nil {
			return abi.ENOENT
		}
		if !m.Memory().WriteUint64Le(uint32(p[0]), uint64(*h.alarm)) {
			return abi.EFAULT
		}
		return 0
	})
	fn(alarm, abi.FuncClearAlarm, func(h *fakeHost, _ api.Module, _ []uint64) uint32 {
		h.alarm, h.touched = nil, true
		return 0
	})
	if _, err := alarm.Instantiate(ctx); err != nil {
		return err
	}

	actor := r.NewHostModuleBuilder(abi.ActorModule)
	fn(actor, abi.FuncRequestRead, func(h *fakeHost, m api.Module, p []uint64) uint32 {
		n := min(int(uint32(p[1])), len(h.req))
		if !m.Memory().Write(uint32(p[0]), h.req[:n]) {
			return abi.EFAULT
		}
		return 0
	})
	fn(actor, abi.FuncResponseWrite, func(h *fakeHost, m api.Module, p []uint64) uint32 {
		b, ok := m.Memory().Read(uint32(p[0]), uint32(p[1]))
		if !ok {
			return abi.EFAULT
		}
		h.resp = append(h.resp, b...)
		return 0
	})
	fn(actor, abi.FuncKVGet, func(h *fakeHost, m api.Module, p []uint64) uint32 {
		key, ok := m.Memory().Read(uint32(p[0]), uint32(p[1]))
		if !ok {
			return abi.EFAULT
		}
		v, found := h.kv[string(key)]
		if !found {
			return abi.ENOENT
		}
		n := min(int(uint32(p[3])), len(v))
		if !m.Memory().WriteUint32Le(uint32(p[4]), uint32(len(v))) || !m.Memory().WriteString(uint32(p[2]), v[:n]) {
			return abi.EFAULT
		}
		return 0
	})
	fn(actor, abi.FuncKVPut, func(h *fakeHost, m api.Module, p []uint64) uint32 {
		if uint32(p[1]) > abi.MaxKeyLen || uint32(p[3]) > abi.MaxValueLen {
			return abi.E2BIG
		}
		key, ok1 := m.Memory().Read(uint32(p[0]), uint32(p[1]))
		val, ok2 := m.Memory().Read(uint32(p[2]), uint32(p[3]))
		if !ok1 || !ok2 {
			return abi.EFAULT
		}
		h.kv[string(key)] = string(val)
		return 0
	})
	fn(actor, abi.FuncKVDelete, func(h *fakeHost, m api.Module, p []uint64) uint32 {
		key, ok := m.Memory().Read(uint32(p[0]), uint32(p[1]))
		if !ok {
			return abi.EFAULT
		}
		delete(h.kv, string(key))
		return 0
	})
	fn(actor, abi.FuncActorID, func(h *fakeHost, m api.Module, p []uint64) uint32 {
		const id = "t/c/fake"
		if !m.Memory().WriteUint32Le(uint32(p[2]), uint32(len(id))) {
			return abi.EFAULT
		}
		if uint32(p[1]) < uint32(len(id)) {
			return abi.E2BIG
		}
		if !m.Memory().WriteString(uint32(p[0]), id) {
			return abi.EFAULT
		}
		return 0
	})
	_, err := actor.Instantiate(ctx)
	return err
}

// event calls an export as one event, within deadline, and rolls its writes
// back unless it returned 0. err is a trap, an exit or the deadline.
func (h *fakeHost) event(deadline time.Duration, export string, params ...uint64) (code uint32, err error) {
	h.t.Helper()
	f := h.mod.ExportedFunction(export)
	if f == nil {
		h.t.Fatalf("guest does not export %q", export)
	}
	alarm, kv := h.alarm, maps.Clone(h.kv)
	h.inEvent, h.touched, h.resp = true, false, nil
	ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), hostKey{}, h), deadline)
	defer cancel()
	res, err := f.Call(ctx, params...)
	h.inEvent = false
	if err == nil {
		code = uint32(res[0])
	}
	if err != nil || code != 0 {
		h.alarm, h.kv, h.resp = alarm, kv, nil
	}
	return code, err
}

const eventDeadline = 10 * time.Second

// request runs on-request with body and returns the response and the
// export's result; a trap fails the test.
func (h *fakeHost) request(body string) (string, uint32) {
	h.t.Helper()
	h.req = []byte(body)
	code, err := h.event(eventDeadline, abi.ExportOnRequest, uint64(len(body)))
	if err != nil {
		h.t.Fatalf("request %q: %v (stderr %q)", body, err, h.stderr.String())
	}
	return string(h.resp), code
}

// mustRequest runs a request that must succeed.
func (h *fakeHost) mustRequest(body string) string {
	h.t.Helper()
	resp, code := h.request(body)
	if code != 0 {
		h.t.Fatalf("request %q returned %d (stderr %q)", body, code, h.stderr.String())
	}
	return resp
}

// fire delivers the set alarm: on success an alarm the handler did not touch
// is removed and the failure count reset; on failure the count grows (the
// fake keeps the alarm; the real host's retry rule is not modelled).
func (h *fakeHost) fire(deadline time.Duration) (scheduled int64, code uint32, err error) {
	h.t.Helper()
	if h.alarm == nil {
		h.t.Fatal("fire: no alarm set")
	}
	scheduled = *h.alarm
	code, err = h.event(deadline, abi.ExportOnAlarm, api.EncodeI64(scheduled), uint64(h.failures))
	if err != nil || code != 0 {
		h.failures++
		return scheduled, code, err
	}
	if !h.touched {
		h.alarm = nil
	}
	h.failures = 0
	return scheduled, 0, nil
}

// errnos decodes a response of i32 LE errnos.
func errnos(t testing.TB, resp string) []uint32 {
	t.Helper()
	if len(resp)%4 != 0 {
		t.Fatalf("response of %d bytes is not a list of i32", len(resp))
	}
	var out []uint32
	for i := 0; i < len(resp); i += 4 {
		out = append(out, binary.LittleEndian.Uint32([]byte(resp[i:i+4])))
	}
	return out
}
