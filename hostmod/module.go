package hostmod

import (
	"context"
	"encoding/binary"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/wasmkeep/alarms/abi"
)

// ModuleName is the import module of the alarm functions.
const ModuleName = abi.AlarmModule

// ActorModuleName is the import module of the request and data functions.
const ActorModuleName = abi.ActorModule

// maxResponse bounds what response-write accepts in one event.
const maxResponse = 16 << 20

const (
	i32 = api.ValueTypeI32
	i64 = api.ValueTypeI64
)

// ctxKey carries the per-call state under an unexported key.
type ctxKey struct{}

// call is the per-call state: the actor whose instance runs, and the event it
// runs in (nil outside an event, for example during _initialize).
type call struct {
	actor abi.ActorID
	ev    *event
}

// event is one call into an actor: its database transaction, the request and
// the response, and what the guest did to the alarm.
type event struct {
	// alarms is the database the alarm functions write: the engine's
	// Store, or a host's own connection (Table).
	alarms alarmStore
	// store is the engine's Store, for the actor module's functions (nil
	// in an event of a host's own connection, which serves no actor
	// module).
	store        *Store
	request      []byte
	response     []byte
	alarmTouched bool   // set-alarm or clear-alarm succeeded in this event
	alarm        *int64 // the alarm the event leaves, once alarmTouched
	failures     int    // the failure count in the event's transaction
	storageErr   error
}

func withCall(ctx context.Context, c *call) context.Context {
	return context.WithValue(ctx, ctxKey{}, c)
}

// callFrom returns the per-call state. A host function called with none is a
// bug of the host that embeds this module, and the only case that traps.
func callFrom(ctx context.Context) *call {
	c, _ := ctx.Value(ctxKey{}).(*call)
	if c == nil {
		panic("wasmkeep: host function called without an actor in its context (host bug)")
	}
	return c
}

// NewModuleBuilders returns the builders of the two host modules, for hosts
// that want to add functions of their own before instantiating. Every
// function comes from one table (Functions).
func NewModuleBuilders(r wazero.Runtime) (alarm, actor wazero.HostModuleBuilder) {
	alarm = r.NewHostModuleBuilder(abi.AlarmModule)
	actor = r.NewHostModuleBuilder(abi.ActorModule)
	for _, f := range hostFuncs {
		b := alarm
		if f.module == abi.ActorModule {
			b = actor
		}
		b.NewFunctionBuilder().
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

// eventOf returns the event of this call, or an errno for the guest.
func eventOf(ctx context.Context) (*event, abi.Errno) {
	c := callFrom(ctx)
	if c.ev == nil {
		return nil, abi.EPERM
	}
	return c.ev, abi.ESUCCESS
}

// alarmEventOf is eventOf for the alarm functions: an event that could not
// start on a host's connection (Table.NewEvent) has no alarm to write.
func alarmEventOf(ctx context.Context) (*event, abi.Errno) {
	ev, e := eventOf(ctx)
	if e == 0 && ev.alarms == nil {
		return nil, abi.EPERM
	}
	return ev, e
}

// ioErr records a storage failure on the event (the event then fails) and
// returns EIO for the guest.
func (ev *event) ioErr(err error) abi.Errno {
	if ev.storageErr == nil {
		ev.storageErr = err
	}
	return abi.EIO
}

// setAlarm is set-alarm (param $at_ms i64) (result i32).
//
// It sets the actor's one alarm to at_ms (Unix milliseconds), replacing any,
// and resets the failure count. Errno: EINVAL when at_ms < 0 or
// > abi.MaxAlarmMillis; EPERM outside an event; EIO when the database fails.
func setAlarm(ctx context.Context, _ api.Memory, stack []uint64) abi.Errno {
	ev, e := alarmEventOf(ctx)
	if e != 0 {
		return e
	}
	at := int64(stack[0])
	if at < 0 || at > abi.MaxAlarmMillis {
		return abi.EINVAL
	}
	if err := ev.alarms.SetAlarm(at); err != nil {
		return ev.ioErr(err)
	}
	return alarmChanged(ev, &at)
}

// getAlarm is get-alarm (param $out_ptr i32) (result i32).
//
// It writes the alarm time as an i64, little-endian, at out_ptr. Errno:
// ENOENT when none is set; EFAULT when the 8 bytes are not inside memory;
// EPERM outside an event; EIO when the database fails.
func getAlarm(ctx context.Context, mem api.Memory, stack []uint64) abi.Errno {
	ev, e := alarmEventOf(ctx)
	if e != 0 {
		return e
	}
	ptr := uint32(stack[0])
	at, ok, err := ev.alarms.Alarm()
	if err != nil {
		return ev.ioErr(err)
	}
	if !ok {
		return abi.ENOENT
	}
	if mem == nil || !mem.WriteUint64Le(ptr, uint64(at)) {
		return abi.EFAULT
	}
	return abi.ESUCCESS
}

// clearAlarm is clear-alarm (result i32).
//
// It removes the alarm, if any, and resets the failure count. Errno: EPERM
// outside an event; EIO when the database fails.
func clearAlarm(ctx context.Context, _ api.Memory, stack []uint64) abi.Errno {
	ev, e := alarmEventOf(ctx)
	if e != 0 {
		return e
	}
	if err := ev.alarms.ClearAlarm(); err != nil {
		return ev.ioErr(err)
	}
	return alarmChanged(ev, nil)
}

// alarmChanged ends set-alarm and clear-alarm: a change resets the failure
// count (a failed on-alarm run rolls this back and commits its own count).
// Where the event's count is known, a count already 0 costs no write; an
// event on a host's connection starts with it unknown (-1).
func alarmChanged(ev *event, at *int64) abi.Errno {
	if ev.failures != 0 {
		if err := ev.alarms.SetFailures(0); err != nil {
			return ev.ioErr(err)
		}
		ev.failures = 0
	}
	ev.alarmTouched, ev.alarm = true, at
	return abi.ESUCCESS
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
	if c.ev == nil {
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
