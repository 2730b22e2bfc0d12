package hostmod

import (
	"context"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/wasmkeep/alarms/abi"
)

// ModuleName is the import module of the alarm functions.
const ModuleName = abi.AlarmModule

const (
	i32 = api.ValueTypeI32
	i64 = api.ValueTypeI64
)

// ctxKey carries the per-call state under an unexported key.
type ctxKey struct{}

// call is the per-call state: the actor whose instance runs, and the event it
// runs in (nil outside an event).
type call struct {
	actor abi.ActorID
	ev    *event
}

// event is one event of an actor, as the alarm functions see it: the
// alarm in the event's database transaction, and what the guest did to it.
type event struct {
	// alarms is the database the alarm functions write (nil: they answer
	// EPERM, as outside an event).
	alarms       AlarmStore
	alarmTouched bool   // set-alarm or clear-alarm succeeded in this event
	alarm        *int64 // the alarm the event leaves, once alarmTouched
	failures     int    // the failure count in the event's transaction
	storageErr   error
}

func withCall(ctx context.Context, c *call) context.Context {
	return context.WithValue(ctx, ctxKey{}, c)
}

// callFrom returns the per-call state, nil when ctx carries none: a call
// with no event in its context, such as the guest's _initialize that a
// host runs as it instantiates the guest, or a call from a host that did
// not put the event in the context (WithEvent).
func callFrom(ctx context.Context) *call {
	c, _ := ctx.Value(ctxKey{}).(*call)
	return c
}

// NewAlarmModuleBuilder returns the builder of the wasmkeep:alarm host
// module with every function of Functions, for a host that adds functions
// of its own before instantiating it (InstantiateAlarms instantiates it
// as it is). IsAlarmModule recognises the module it builds.
func NewAlarmModuleBuilder(r wazero.Runtime) wazero.HostModuleBuilder {
	b := r.NewHostModuleBuilder(abi.AlarmModule)
	for _, f := range hostFuncs {
		b.NewFunctionBuilder().
			WithGoModuleFunction(goFunc(f.handler), f.params, []api.ValueType{i32}).
			WithParameterNames(f.paramNames...).WithResultNames("errno").
			Export(f.name)
	}
	return b
}

// goFunc is the Go function of the host function whose handler is h: the
// handler reads its parameters, then the errno goes over stack[0]. It is
// never inlined, so that every closure it returns has the one code
// pointer IsAlarmModule compares (an inlined copy would have its own).
//
//go:noinline
func goFunc(h func(ctx context.Context, mem api.Memory, stack []uint64) abi.Errno) api.GoModuleFunc {
	return func(ctx context.Context, mod api.Module, stack []uint64) {
		stack[0] = uint64(h(ctx, mod.Memory(), stack))
	}
}

// alarmEventOf returns the event of this call, or an errno for the guest:
// outside an event (no event in the context, as in _initialize), or in one
// that could not start on a host's connection (Table.NewEvent), there is
// no alarm to write, and the guest gets EPERM, as ABI.md says; never a
// trap.
func alarmEventOf(ctx context.Context) (*event, abi.Errno) {
	c := callFrom(ctx)
	if c == nil || c.ev == nil || c.ev.alarms == nil {
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
