package hostmod

import (
	"errors"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/alarmindex"
)

// alarmStore is what the alarm functions need of the actor's database,
// inside the event's transaction: the engine's Store, or a Table on a
// host's own connection.
type alarmStore interface {
	Alarm() (atMs int64, ok bool, err error)
	SetAlarm(atMs int64) error
	ClearAlarm() error
	SetFailures(n int) error
}

// deliveryStore is what a delivery needs besides: its transactions and the
// dead letter.
type deliveryStore interface {
	alarmStore
	Begin() error
	Rollback() error
	SetDeadLetter(d DeadLetter) error
}

// retryPolicy is the committed backoff of an actor's failed runs: the
// first retry after base, doubling up to max; after maxAttempts failed
// runs in a row (0: no limit) the retries are given up.
type retryPolicy struct {
	base, max   time.Duration
	maxAttempts int
}

// runDue is the delivery of a due alarm, the one both the engine's actors
// and the hosts that own their instances (Table.DeliverAlarm) run, so the
// backoff lives once: on-alarm runs for the alarm at (Unix ms), whose
// committed failure count is failures, in a transaction of s, at now.
//
// run calls the guest within ev. An error wrapping a *GuestError is the
// guest's failure; any other error is the host's, and nothing commits.
// On success the alarm is gone unless the handler set one, and the
// failure count is reset. On the guest's failure its writes roll back and,
// in a new transaction, whatever alarm the handler left due before the
// retry time moves to the retry time, one it set later or a clear stands
// (alarmindex.AfterFailure), and the failure count grows by one; after the
// last attempt the policy allows, the retry is given up
// (alarmindex.AfterLastFailure) and the dead letter records the run.
//
// finish commits the open transaction, which leaves the alarm next and the
// failure count n, and returns what committed.
func runDue(id abi.ActorID, s deliveryStore, ev *event, at, now int64, failures int, pol retryPolicy,
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
	retryAt := now + alarmindex.RetryDelay(n, pol.base, pol.max).Milliseconds()
	next := alarmindex.AfterFailure(left, retryAt)
	if alarmindex.GiveUp(n, pol.maxAttempts) {
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
