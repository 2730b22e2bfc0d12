package hostmod

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/alarmindex"
)

// The defaults of a delivery (DeliverOptions): how long on-alarm may run,
// and the backoff of its failed runs, 1 s doubling to 5 min (ABI.md).
//
// The deadline is short because a handler holds a delivery worker and a
// guest slot for as long as it runs: one that spins or hangs costs its
// tenant's share that long at each retry (5 s, where it was 30 s). An
// honest handler runs in microseconds to milliseconds (a warm firing's
// whole delivery, commit included, measures in tens of microseconds,
// docs/benchmarks.md), a thousand times under it; a class whose handler
// needs longer gets a deadline of its own (engine.WithClassAlarmDeadline,
// keepnode -alarm-deadline CLASS=D).
const (
	DefaultAlarmDeadline = 5 * time.Second
	DefaultRetryBase     = alarmindex.DefaultRetryBase
	DefaultRetryMax      = alarmindex.DefaultRetryMax
)

// Meta keys in the _wasmkeep_meta table.
const (
	// MetaAlarmFailures is the committed failure count of the pending alarm.
	MetaAlarmFailures = "alarm_failures"
	// MetaAlarmIndexed names the index entry that stands for the alarm
	// (docs/design.md#the-index: "<at>/<tag>", empty for none). Written by the index updater.
	MetaAlarmIndexed = alarmindex.MetaAlarmIndexed
	// MetaOwnerFence is the one-line change an owner uploads before it removes
	// entries as stale (docs/design.md#r2).
	MetaOwnerFence = alarmindex.MetaOwnerFence
	// MetaInitDone records that on-init ran and committed.
	MetaInitDone = "init_done"
	// MetaAlarmDeadLetter is the dead letter of the last alarm whose
	// retries were given up (DeliverOptions.MaxAttempts), as JSON (DeadLetter).
	MetaAlarmDeadLetter = "alarm_dead_letter"
)

// DeadLetter is what an actor keeps of the last alarm whose retries were
// given up after the last attempt allowed (DeliverOptions.MaxAttempts): it
// stays in the actor's database, replicated with it, until the next alarm
// given up replaces it.
type DeadLetter struct {
	// Scheduled is the time (Unix ms) the last attempt ran for: the
	// alarm's time, moved by each retry.
	Scheduled int64 `json:"scheduled_ms"`
	// FailedAt is when the last attempt failed (Unix ms).
	FailedAt int64 `json:"failed_ms"`
	// Attempts is how many runs in a row failed.
	Attempts int `json:"attempts"`
	// Error is the last attempt's error (at most 1 KiB of it).
	Error string `json:"error"`
}

// ParseDeadLetter reads a MetaAlarmDeadLetter value.
func ParseDeadLetter(v string) (DeadLetter, error) {
	var d DeadLetter
	if err := json.Unmarshal([]byte(v), &d); err != nil {
		return DeadLetter{}, fmt.Errorf("meta %s: malformed value %q: %w", MetaAlarmDeadLetter, v, err)
	}
	return d, nil
}

// GuestError says that a guest export failed: it returned non-zero, trapped,
// or ran past its deadline. A delivery (Table.DeliverAlarm, RunDue), and the
// engine's actors, return it as the cause of an *abi.ActorError, which
// names the actor.
type GuestError struct {
	Actor  abi.ActorID
	Export string
	Code   uint32 // the non-zero result, when the export returned
	Cause  error  // the trap or deadline, when it did not
	// Said is the last line the guest wrote to stderr during the event
	// (the Go SDK writes the error a handler returned), "" for none.
	Said string
}

func (e *GuestError) Error() string {
	said := ""
	if e.Said != "" {
		said = fmt.Sprintf(" (the guest said: %s)", e.Said)
	}
	if e.Cause != nil {
		return fmt.Sprintf("%s failed: %v%s", e.Export, e.Cause, said)
	}
	return fmt.Sprintf("%s returned %d%s", e.Export, e.Code, said)
}

func (e *GuestError) Unwrap() error { return e.Cause }

// Result is what an event committed.
type Result struct {
	// Response is what the guest wrote with response-write (the engine's
	// wasmkeep:actor module; nil for a delivery and for a host's own
	// events).
	Response []byte
	// Alarm is the committed alarm after the event (Unix ms), nil for
	// none. It is shared: do not write through it.
	Alarm *int64
	// Failures is the committed failure count after the event.
	Failures int
	// AlarmChanged is true when the alarm differs from before the event.
	AlarmChanged bool
}

// Delivery is the outcome of DeliverAlarm.
type Delivery struct {
	// Ran is true when on-alarm was called (the alarm was set and due).
	Ran bool
	// Scheduled and RetryCount are what on-alarm was called with.
	Scheduled  int64
	RetryCount int
	// Err is why the run failed (a *GuestError), nil when it was handled.
	Err error
	// GaveUp is true when the run failed and was the last attempt
	// allowed (DeliverOptions.MaxAttempts, RetryPolicy.MaxAttempts): the retry was given up and the
	// actor's dead letter records it.
	GaveUp bool
	// Result is the committed state after the delivery.
	Result
}

// State is an actor's committed alarm state.
type State struct {
	// Alarm is the committed alarm (Unix ms), nil for none. It is shared:
	// do not write through it.
	Alarm    *int64
	Failures int
	Inited   bool
	// InitRecorded is true when the database records that on-init ran
	// (its MetaInitDone row), and Indexed is its MetaAlarmIndexed row
	// ("" for none): what an index updater reads.
	InitRecorded bool
	Indexed      string
}

// unreportedKey marks a context (Unreported).
type unreportedKey struct{}

// Unreported marks ctx as that of a read of an actor's committed state
// whose result the caller tells no one: the plugin re-arming its timer
// after a delivery. A host that holds what a call reports until the
// writes it saw are durable (an output gate, as the engine's deferred
// deliveries do) need not hold such a read.
func Unreported(ctx context.Context) context.Context {
	return context.WithValue(ctx, unreportedKey{}, true)
}

// IsUnreported reports whether ctx was marked by Unreported.
func IsUnreported(ctx context.Context) bool {
	v, _ := ctx.Value(unreportedKey{}).(bool)
	return v
}
