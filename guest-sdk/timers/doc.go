// Package timers gives a wasmkeep actor any number of named timers over its
// one alarm: one-shot timers at a time (At), intervals (Every, EveryFrom)
// and cron schedules in UTC (Cron), each with optional data. Set creates or
// replaces a timer, Cancel removes one, Get, List and Next read them.
//
//	func init() {
//		timers.Handle(func(f timers.Fired) error {
//			switch {
//			case f.Name == "flush":
//				return flush()
//			case strings.HasPrefix(f.Name, "remind/"):
//				return remind(f.Data)
//			}
//			return nil
//		})
//		wasmkeep.HandleRequest(func(req []byte) ([]byte, error) {
//			// ... inside any event:
//			err := timers.Set("flush", timers.Every(30*time.Second), nil)
//			err = timers.Set("nightly", timers.Cron("0 3 * * *"), nil)
//			err = timers.Set("remind/42", timers.At(wasmkeep.Now().Add(time.Hour)), []byte("call Bob"))
//			...
//		})
//	}
//
// # Storage and the alarm
//
// The timers are kept in the actor's own key/value table, all in one value
// under StateKey, written with wasmkeep.Put: a change commits with the
// event's other writes, or rolls back with them. After every change the
// actor's alarm is set for the earliest timer (cleared when there is none),
// so the package owns the alarm: a guest that uses it registers Handle and
// does not call wasmkeep.HandleAlarm, SetAlarm or ClearAlarm itself. Every
// timer, its data included, must fit in that one value (1 MiB in the
// reference host; Set fails with E2BIG past it): thousands of timers with
// short names and data, not millions.
//
// The calls work inside an event (a request, on-init, or a timer's handler)
// and fail with EPERM outside one, as every SDK call does.
//
// # Dispatch
//
// When the alarm fires, the on-alarm event runs the handler once for every
// timer due by then (wasmkeep.Now), in order of due time, then name (byte
// order). Fired.Due is the tick being run, Fired.RetryCount the host's count
// of failed attempts at this event. Before its handler runs, a one-shot
// timer is removed and a repeating one moved to its next tick, so the
// handler sees (with Get or List) what will stand, and may Set or Cancel
// its own timer or others:
//
//   - Set replaces the timer's schedule and data, its own included (a
//     one-shot handler that sets its name again makes a new timer);
//   - a timer set during the event to a time already due runs in the next
//     on-alarm event, at once after this one commits, not in this one, so a
//     handler that keeps setting due timers cannot hold the event for ever;
//   - a timer due in this event that an earlier handler cancelled, or set
//     again, does not run in it (one set again runs at its new time).
//
// When the handlers are done, the timers are saved and the alarm set for
// the earliest one left, or cleared.
//
// # Missed ticks
//
// An interval or cron timer runs once however many of its ticks passed
// while it could not run (the actor's node was down, or the event was
// retrying): it then moves to its first tick after now, skipping the rest.
// An interval keeps its phase: its ticks stay first + n*every. Fired.Due is
// the earliest tick not yet run, so a handler can tell how late it is.
//
// # Failures
//
// A handler that returns an error (or panics) fails the whole on-alarm
// event, and the host rolls back every write of that event: the timers that
// ran before it in the same event, what their handlers wrote, and the moves
// of the repeating timers and removal of the one-shot ones. The handlers
// after it do not run. The host then retries the event on its committed
// backoff (1 s, doubling up to 5 min), and the retry runs every timer due by
// then, in the same order, so the timers that succeeded before the failing
// one run again with it: handlers must be idempotent, or check their own
// state. Fired.RetryCount counts the failed attempts, and goes back to 0
// once the event succeeds. A timer that keeps failing holds back every
// timer due after it; cancel it (or make its handler succeed) to release
// them.
//
// While the host backs off, a change to the timers made by a request keeps
// the retry (and its count) unless it makes the earliest timer later than
// the time that failed (by cancelling or moving the failing timer): then
// the alarm is set for the new earliest timer and the count starts again at
// 0. A timer set for before the retry runs with it. When the host gives up
// (an attempt limit, keepnode -max-attempts) the alarm is cleared but the
// timers stay as they were; the next change to them sets the alarm again.
//
// The format of the stored value and these rules are also described in
// docs/timers.md of the wasmkeep alarms module.
package timers
