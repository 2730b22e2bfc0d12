package hostmod

import (
	"errors"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/alarmindex"
)

// AlarmStore is what the alarm functions need of the actor's database,
// inside the event's transaction (Event.Reset): Rows, as a Table has,
// or a host's own.
type AlarmStore interface {
	Alarm() (atMs int64, ok bool, err error)
	SetAlarm(atMs int64) error
	ClearAlarm() error
	SetFailures(n int) error
}

// DeliveryStore is what a delivery (RunDue) needs besides: its
// transactions and the dead letter.
type DeliveryStore interface {
	AlarmStore
	Begin() error
	Rollback() error
	SetDeadLetter(d DeadLetter) error
}

// RetryPolicy is the committed backoff of an actor's failed runs: the
// first retry after Base, doubling up to Max; after MaxAttempts failed
// runs in a row (0: no limit) the retries are given up.
type RetryPolicy struct {
	Base, Max   time.Duration
	MaxAttempts int
}

// Due is one delivery of a due alarm, for RunDue.
type Due struct {
	// Actor is whose alarm it is.
	Actor abi.ActorID
	// Store is the actor's database; no transaction is open on it.
	Store DeliveryStore
	// Event is the delivery's event: RunDue starts it (Event.Reset) on
	// Store with Failures, and RunDue's run calls the guest with it in
	// its context (WithEvent, or Event.ContextValue).
	Event *Event
	// At is the alarm's time (Unix ms), Now the time of the delivery, and
	// Failures the alarm's committed failure count.
	At, Now  int64
	Failures int
	// Retry is the backoff of failed runs.
	Retry RetryPolicy
}

// RunDue is the delivery of a due alarm, the one every host runs, so that
// the backoff lives once: Table.DeliverAlarm runs it on a host's own
// connection and instance, and a host that keeps its actors' databases
// and instances its own way (package engine) runs it on them. On-alarm
// runs for the alarm at due.At in a transaction of due.Store.
//
// run calls the guest's on-alarm(due.At, due.Failures) within due.Event.
// An error wrapping a *GuestError is the guest's failure; any other error
// is the host's, and nothing commits. finish commits the open
// transaction, which leaves the alarm next and the failure count n, and
// returns what committed. (They are parameters, not fields of Due, so
// that a caller's closures stay on its stack: RunDue keeps neither.)
//
// On success the alarm is gone unless the handler set one, and the
// failure count is reset. On the guest's failure its writes roll back and,
// in a new transaction, whatever alarm the handler left due before the
// retry time moves to the retry time, one it set later or a clear stands
// (alarmindex.AfterFailure), and the failure count grows by one; after the
// last attempt the policy allows, the retry is given up
// (alarmindex.AfterLastFailure) and the dead letter records the run.
func RunDue(due Due, run func() error, finish func(next *int64, n int) (Result, error)) (Delivery, error) {
	due.Event.Reset(due.Actor, due.Store, due.Failures)
	return runDue(due.Actor, due.Store, &due.Event.ev, due.At, due.Now, due.Failures, due.Retry, run, finish)
}

// runDue is RunDue.
func runDue(id abi.ActorID, s DeliveryStore, ev *event, at, now int64, failures int, pol RetryPolicy,
	run func() error, finish func(next *int64, n int) (Result, error)) (Delivery, error) {
	d := Delivery{Ran: true, Scheduled: at, RetryCount: failures}
	if err := s.Begin(); err != nil {
		return Delivery{}, &abi.ActorError{ID: id, Op: "begin", Err: err}
	}
	defer s.Rollback()
	err := run()
	if err == nil {
		if !ev.alarmTouched {
			if err := s.ClearAlarm(); err != nil {
				return Delivery{}, &abi.ActorError{ID: id, Op: "clear delivered alarm", Err: err}
			}
		}
		if ev.failures != 0 {
			if err := s.SetFailures(0); err != nil {
				return Delivery{}, &abi.ActorError{ID: id, Op: "reset the failure count", Err: err}
			}
		}
		res, err := finish(ev.alarm, 0)
		if err != nil {
			return Delivery{}, err
		}
		d.Result = res
		return d, nil
	}
	var ge *GuestError
	if !errors.As(err, &ge) {
		// The host failed (the database), not the guest: nothing is
		// committed and the alarm stays as it was.
		return Delivery{}, err
	}
	d.Err = err

	// What did the handler leave? Read it before rolling its writes back.
	left := &at
	if ev.alarmTouched {
		left = ev.alarm
	}
	if err := s.Rollback(); err != nil {
		return Delivery{}, &abi.ActorError{ID: id, Op: "roll back failed on-alarm", Err: err}
	}
	if err := s.Begin(); err != nil {
		return Delivery{}, &abi.ActorError{ID: id, Op: "begin", Err: err}
	}
	n := failures + 1
	// The same arithmetic the simulator runs (package alarmindex is pure).
	retryAt := now + alarmindex.RetryDelay(n, pol.Base, pol.Max).Milliseconds()
	next := alarmindex.AfterFailure(left, retryAt)
	if alarmindex.GiveUp(n, pol.MaxAttempts) {
		d.GaveUp = true
		next = alarmindex.AfterLastFailure(left, retryAt)
		if err := s.SetDeadLetter(DeadLetter{Scheduled: at, FailedAt: now, Attempts: n, Error: d.Err.Error()}); err != nil {
			return Delivery{}, &abi.ActorError{ID: id, Op: "record dead letter", Err: err}
		}
		n = 0
	} else if next == nil {
		n = 0
	}
	if next != nil {
		err = s.SetAlarm(*next)
	} else {
		err = s.ClearAlarm()
	}
	if err == nil {
		err = s.SetFailures(n)
	}
	if err != nil {
		return Delivery{}, &abi.ActorError{ID: id, Op: "commit retry", Err: err}
	}
	res, err := finish(next, n)
	if err != nil {
		return Delivery{}, err
	}
	d.Result = res
	return d, nil
}

// sameAlarm reports whether two alarms (nil: none) are the same.
func sameAlarm(x, y *int64) bool {
	if x == nil || y == nil {
		return x == y
	}
	return *x == *y
}
