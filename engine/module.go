package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/hostmod"
)

// ActorModuleName is the import module of the request and data functions,
// which the engine provides beside hostmod's wasmkeep:alarm.
const ActorModuleName = abi.ActorModule

// maxResponse bounds what response-write accepts in one event.
const maxResponse = 16 << 20

const (
	i32 = api.ValueTypeI32
	i64 = api.ValueTypeI64
)

// actorFunc is one function of wasmkeep:actor: its name, its handler
// (which reads its parameters and returns the errno, the one result), and
// its parameters' types and names as abi/ABI.md gives them.
type actorFunc struct {
	name       string
	handler    func(ctx context.Context, mem api.Memory, params []uint64) abi.Errno
	params     []api.ValueType
	paramNames []string
}

// actorFuncs is every function of wasmkeep:actor, declared once: it drives
// the module builder (NewModuleBuilders), the import checks at load
// (Compile) and Functions; a test holds it to the signatures in
// abi/ABI.md.
var actorFuncs = []actorFunc{
	{abi.FuncRequestRead, requestRead, []api.ValueType{i32, i32}, []string{"buf", "buf_len"}},
	{abi.FuncResponseWrite, responseWrite, []api.ValueType{i32, i32}, []string{"buf", "len"}},
	{abi.FuncKVGet, kvGet, []api.ValueType{i32, i32, i32, i32, i32}, []string{"key", "key_len", "buf", "buf_len", "out_len_ptr"}},
	{abi.FuncKVPut, kvPut, []api.ValueType{i32, i32, i32, i32}, []string{"key", "key_len", "val", "val_len"}},
	{abi.FuncKVDelete, kvDelete, []api.ValueType{i32, i32}, []string{"key", "key_len"}},
	{abi.FuncActorID, actorID, []api.ValueType{i32, i32, i32}, []string{"buf", "buf_len", "out_len_ptr"}},
}

// Functions returns the signature of every host function the engine's
// modules provide, in the order ABI.md lists them: wasmkeep:alarm's
// (hostmod.Functions), then wasmkeep:actor's. For tools, and for test
// hosts that must offer the same imports.
func Functions() []hostmod.Function {
	out := hostmod.Functions()
	for _, f := range actorFuncs {
		out = append(out, hostmod.Function{Module: abi.ActorModule, Name: f.name,
			Params: append([]api.ValueType(nil), f.params...), ParamNames: append([]string(nil), f.paramNames...)})
	}
	return out
}

// alarmParams are the parameters of each function of wasmkeep:alarm, for
// the import checks.
var alarmParams = func() map[string][]api.ValueType {
	m := map[string][]api.ValueType{}
	for _, f := range hostmod.Functions() {
		m[f.Name] = f.Params
	}
	return m
}()

// lookupFunc returns the parameters of the host function module.name, if
// the engine provides one.
func lookupFunc(module, name string) ([]api.ValueType, bool) {
	switch module {
	case abi.AlarmModule:
		p, ok := alarmParams[name]
		return p, ok
	case abi.ActorModule:
		for _, f := range actorFuncs {
			if f.name == name {
				return f.params, true
			}
		}
	}
	return nil, false
}

// ctxKey carries the per-call state of the wasmkeep:actor functions under
// an unexported key.
type ctxKey struct{}

// call is the per-call state: the actor whose instance runs, and the event it
// runs in (nil outside an event, for example during _initialize).
type call struct {
	actor abi.ActorID
	ev    *event
}

// event is one call into an actor: its database transaction, the request
// and the response, and the alarm functions' event (hostmod.Event), which
// holds what the guest did to the alarm.
type event struct {
	alarm      hostmod.Event
	store      *Store
	request    []byte
	response   []byte
	storageErr error // a database error of the wasmkeep:actor functions
}

// dbErr is the first database error a host function met in the event.
func (ev *event) dbErr() error {
	if ev.storageErr != nil {
		return ev.storageErr
	}
	return ev.alarm.DatabaseErr()
}

// withCall returns ctx carrying c for both modules' functions: for the
// calls into an instance made outside an Actor's reused context (its
// _initialize).
func withCall(ctx context.Context, c *call) context.Context {
	ctx = context.WithValue(ctx, ctxKey{}, c)
	ev := new(hostmod.Event)
	ev.Reset(c.actor, nil, 0) // no event: the alarm functions answer EPERM
	return hostmod.WithEvent(ctx, ev)
}

// callFrom returns the per-call state, nil when ctx carries none: a
// module instantiated in an embedder's runtime (WithRuntime) outside the
// engine, whose start function calls the imports, or a host that called an
// export without the actor's context. The imports then answer EPERM, as
// outside an event, and never trap.
func callFrom(ctx context.Context) *call {
	c, _ := ctx.Value(ctxKey{}).(*call)
	return c
}

// eventOf returns the event of this call, or an errno for the guest.
func eventOf(ctx context.Context) (*event, abi.Errno) {
	c := callFrom(ctx)
	if c == nil || c.ev == nil {
		return nil, abi.EPERM
	}
	return c.ev, abi.ESUCCESS
}

// ioErr records a storage failure on the event (the event then fails) and
// returns EIO for the guest.
func (ev *event) ioErr(err error) abi.Errno {
	if ev.storageErr == nil {
		ev.storageErr = err
	}
	return abi.EIO
}

// NewModuleBuilders returns the builders of the two host modules, for hosts
// that want to add functions of their own before instantiating:
// wasmkeep:alarm's is hostmod.NewAlarmModuleBuilder, and every function
// comes from one table (Functions).
func NewModuleBuilders(r wazero.Runtime) (alarm, actor wazero.HostModuleBuilder) {
	alarm = hostmod.NewAlarmModuleBuilder(r)
	actor = r.NewHostModuleBuilder(abi.ActorModule)
	for _, f := range actorFuncs {
		actor.NewFunctionBuilder().
			WithGoModuleFunction(goFunc(f.handler), f.params, []api.ValueType{i32}).
			WithParameterNames(f.paramNames...).WithResultNames("errno").
			Export(f.name)
	}
	return alarm, actor
}

// goFunc is the Go function of the host function whose handler is h: the
// handler reads its parameters, then the errno goes over stack[0]. It is
// never inlined, so that every closure it returns has the one code
// pointer isOurs compares (an inlined copy would have its own).
//
//go:noinline
func goFunc(h func(ctx context.Context, mem api.Memory, stack []uint64) abi.Errno) api.GoModuleFunc {
	return func(ctx context.Context, mod api.Module, stack []uint64) {
		stack[0] = uint64(h(ctx, mod.Memory(), stack))
	}
}

// Instantiate instantiates the wasmkeep:alarm and wasmkeep:actor host modules
// in r. Guests instantiated afterwards can import them; each call into a guest
// must carry its actor and event in the context, which only an Engine does:
// to run guests in a runtime of your own, pass it to NewEngine with
// WithRuntime (which calls Instantiate when the modules are not there yet).
func Instantiate(ctx context.Context, r wazero.Runtime) error {
	alarm, actor := NewModuleBuilders(r)
	if _, err := alarm.Instantiate(ctx); err != nil {
		return err
	}
	_, err := actor.Instantiate(ctx)
	return err
}

// MustInstantiate calls Instantiate and panics on error.
func MustInstantiate(ctx context.Context, r wazero.Runtime) {
	if err := Instantiate(ctx, r); err != nil {
		panic(err)
	}
}

// ErrForeignModule is wrapped by the error of NewEngine with WithRuntime
// when the runtime already has a module named wasmkeep:alarm or
// wasmkeep:actor that this package (or hostmod, for wasmkeep:alarm) did
// not instantiate: its functions would answer the guests instead of the
// engine's.
var ErrForeignModule = errors.New("a module of that name, not instantiated by this package, is already in the runtime")

// ourCode is the code of every Go function of the engine's wasmkeep:actor
// module (goFunc's closure): a module under its name whose functions have
// other code was made by someone else.
var ourCode = reflect.ValueOf(goFunc(nil)).Pointer()

// isOurs reports whether every function of wasmkeep:actor that m, named
// so, exports is the engine's own (a host may add functions of its own to
// the builders, NewModuleBuilders).
func isOurs(m api.Module) bool {
	defs := m.ExportedFunctionDefinitions()
	for _, f := range actorFuncs {
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
// that this package, or hostmod, did not instantiate.
func checkForeign(r wazero.Runtime) error {
	if m := r.Module(abi.AlarmModule); m != nil && !hostmod.IsAlarmModule(m) {
		return foreign(abi.AlarmModule)
	}
	if m := r.Module(abi.ActorModule); m != nil && !isOurs(m) {
		return foreign(abi.ActorModule)
	}
	return nil
}

func foreign(name string) error {
	return fmt.Errorf("engine: module %q: %w; leave the name to NewEngine, or register the alarm functions in a module of your own (hostmod.AlarmFunctions) and run your own instances (hostmod.Table)", name, ErrForeignModule)
}

// requestRead is request-read (param $buf i32) (param $buf_len i32) (result i32).
//
// It copies min(buf_len, request length) bytes of the request body to buf.
// Errno: EFAULT when that range is not inside memory; EPERM outside an event.
func requestRead(ctx context.Context, mem api.Memory, stack []uint64) abi.Errno {
	ev, e := eventOf(ctx)
	if e != 0 {
		return e
	}
	buf, n := uint32(stack[0]), uint32(stack[1])
	if uint64(n) > uint64(len(ev.request)) {
		n = uint32(len(ev.request))
	}
	if mem == nil || !mem.Write(buf, ev.request[:n]) {
		return abi.EFAULT
	}
	return abi.ESUCCESS
}

// responseWrite is response-write (param $buf i32) (param $len i32) (result i32).
//
// It appends len bytes at buf to the response. Errno: EFAULT when the range
// is not inside memory; E2BIG past 16 MiB of response; EPERM outside an event.
func responseWrite(ctx context.Context, mem api.Memory, stack []uint64) abi.Errno {
	ev, e := eventOf(ctx)
	if e != 0 {
		return e
	}
	b, ok := readMem(mem, uint32(stack[0]), uint32(stack[1]))
	if !ok {
		return abi.EFAULT
	}
	if len(ev.response)+len(b) > maxResponse {
		return abi.E2BIG
	}
	ev.response = append(ev.response, b...)
	return abi.ESUCCESS
}

// kvGet is kv-get (param $key i32) (param $key_len i32) (param $buf i32)
// (param $buf_len i32) (param $out_len_ptr i32) (result i32).
//
// It writes the value's length (u32 LE) at out_len_ptr and copies
// min(buf_len, length) bytes to buf. Errno: ENOENT when the key is absent;
// EFAULT for a range outside memory; E2BIG for a key over abi.MaxKeyLen;
// EPERM outside an event; EIO when the database fails.
func kvGet(ctx context.Context, mem api.Memory, stack []uint64) abi.Errno {
	ev, key, e := keyCall(ctx, mem, stack)
	if e != 0 {
		return e
	}
	buf, bufLen, outLen := uint32(stack[2]), uint32(stack[3]), uint32(stack[4])
	v, ok, err := ev.store.KVGet(key)
	if err != nil {
		return ev.ioErr(err)
	}
	if !ok {
		return abi.ENOENT
	}
	n := uint32(len(v))
	if n > bufLen {
		n = bufLen
	}
	var lenLE [4]byte
	binary.LittleEndian.PutUint32(lenLE[:], uint32(len(v)))
	if mem == nil || !mem.Write(outLen, lenLE[:]) || !mem.Write(buf, v[:n]) {
		return abi.EFAULT
	}
	return abi.ESUCCESS
}

// actorID is actor-id (param $buf i32) (param $buf_len i32) (param
// $out_len_ptr i32) (result i32).
//
// It writes the length of the actor's identity, "tenant/class/name" (at
// most abi.MaxActorIDLen bytes), as a u32 LE at out_len_ptr, then copies
// the identity to buf. Errno: E2BIG when buf_len is shorter than the
// identity (the length is written, nothing is copied); EFAULT when the 4
// bytes at out_len_ptr, or the identity's bytes from buf, are not inside
// memory; EPERM outside an event.
func actorID(ctx context.Context, mem api.Memory, stack []uint64) abi.Errno {
	c := callFrom(ctx)
	if c == nil || c.ev == nil {
		return abi.EPERM
	}
	buf, bufLen, outLen := uint32(stack[0]), uint32(stack[1]), uint32(stack[2])
	id := c.actor.Tenant + "/" + c.actor.Class + "/" + c.actor.Name
	if mem == nil || !mem.WriteUint32Le(outLen, uint32(len(id))) {
		return abi.EFAULT
	}
	if uint64(len(id)) > uint64(bufLen) {
		return abi.E2BIG
	}
	if !mem.WriteString(buf, id) {
		return abi.EFAULT
	}
	return abi.ESUCCESS
}

// kvPut is kv-put (param $key i32) (param $key_len i32) (param $val i32)
// (param $val_len i32) (result i32).
//
// It writes the value under the key in the guest's own table, in the
// event's transaction. Errno: EFAULT, E2BIG (key over abi.MaxKeyLen or value
// over abi.MaxValueLen), EPERM outside an event, EIO.
func kvPut(ctx context.Context, mem api.Memory, stack []uint64) abi.Errno {
	ev, key, e := keyCall(ctx, mem, stack)
	if e != 0 {
		return e
	}
	if uint32(stack[3]) > abi.MaxValueLen {
		return abi.E2BIG
	}
	val, ok := readMem(mem, uint32(stack[2]), uint32(stack[3]))
	if !ok {
		return abi.EFAULT
	}
	if err := ev.store.KVPut(key, val); err != nil {
		return ev.ioErr(err)
	}
	return abi.ESUCCESS
}

// kvDelete is kv-delete (param $key i32) (param $key_len i32) (result i32).
//
// Errno: EFAULT, E2BIG, EPERM outside an event, EIO. Deleting an absent key
// succeeds.
func kvDelete(ctx context.Context, mem api.Memory, stack []uint64) abi.Errno {
	ev, key, e := keyCall(ctx, mem, stack)
	if e != 0 {
		return e
	}
	if err := ev.store.KVDelete(key); err != nil {
		return ev.ioErr(err)
	}
	return abi.ESUCCESS
}

// keyCall starts a kv function: the event, and the key at stack[0:2].
func keyCall(ctx context.Context, mem api.Memory, stack []uint64) (*event, []byte, abi.Errno) {
	ev, e := eventOf(ctx)
	if e != 0 {
		return nil, nil, e
	}
	if ev.store == nil { // an event on a host's own connection has no kv table
		return nil, nil, abi.EPERM
	}
	key, e := readKey(mem, uint32(stack[0]), uint32(stack[1]))
	return ev, key, e
}

func readKey(mem api.Memory, ptr, n uint32) ([]byte, abi.Errno) {
	if n > abi.MaxKeyLen {
		return nil, abi.E2BIG
	}
	b, ok := readMem(mem, ptr, n)
	if !ok {
		return nil, abi.EFAULT
	}
	return b, 0
}

// readMem copies n bytes at ptr out of the guest's memory.
func readMem(mem api.Memory, ptr, n uint32) ([]byte, bool) {
	if mem == nil {
		return nil, n == 0
	}
	b, ok := mem.Read(ptr, n)
	if !ok {
		return nil, false
	}
	return append([]byte(nil), b...), true
}
