package wasmkeep

import (
	"errors"
	"time"
)

// ErrNoAlarmHandler is what SetAlarm returns when no alarm handler is
// registered: the alarm would fire with nothing to run. Register one with
// HandleAlarm in an init function.
var ErrNoAlarmHandler = errors.New("wasmkeep: set-alarm: no alarm handler registered (call HandleAlarm from an init function)")

// SetAlarm sets the actor's alarm to fire at t, replacing any alarm already
// set. The host keeps the time in whole milliseconds; SetAlarm rounds t up to
// the next one, so the alarm never fires before t. A time in the past fires
// as soon as the host can deliver it.
//
// The alarm commits with the event: if the event fails, it is as if SetAlarm
// was never called. Errors: ErrNoAlarmHandler; a *HostError wrapping EINVAL
// for a time before 1970 or after the host's latest (the year 33658), EPERM
// outside an event, EIO when the host's database fails.
func SetAlarm(t time.Time) error {
	if alarmHandler == nil {
		return ErrNoAlarmHandler
	}
	return check("set-alarm", hostSetAlarm(toMillis(t)))
}

// GetAlarm returns the time the actor's alarm is set for, in UTC. While the
// host retries a failed alarm handler, it returns the time of the next
// attempt. Errors: ErrNotSet when no alarm is set; a *HostError wrapping EPERM
// outside an event or EIO when the host's database fails.
func GetAlarm() (time.Time, error) {
	var ms int64
	switch errno := hostGetAlarm(&ms); Errno(errno) {
	case 0:
		return fromMillis(ms), nil
	case ENOENT:
		return time.Time{}, ErrNotSet
	default:
		return time.Time{}, check("get-alarm", errno)
	}
}

// ClearAlarm removes the actor's alarm, if one is set; clearing when none is
// set is not an error. Like SetAlarm it commits with the event. A clear made
// by a failing alarm handler stands: the host does not retry that alarm.
// Errors: a *HostError wrapping EPERM outside an event or EIO when the host's
// database fails.
func ClearAlarm() error {
	return check("clear-alarm", hostClearAlarm())
}
