package timers

import (
	"errors"
	"fmt"
	"time"

	wasmkeep "github.com/wasmkeep/alarms/guest-sdk"
)

// Kind is how a timer repeats.
type Kind uint8

const (
	// KindAt fires once, at a time (At).
	KindAt Kind = 1
	// KindEvery fires at a fixed interval (Every, EveryFrom).
	KindEvery Kind = 2
	// KindCron fires when a cron expression matches (Cron).
	KindCron Kind = 3
)

func (k Kind) String() string {
	switch k {
	case KindAt:
		return "at"
	case KindEvery:
		return "every"
	case KindCron:
		return "cron"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// MaxNameLen is the longest timer name, in bytes.
const MaxNameLen = 256

var (
	// ErrNotFound is what Get and Next return when there is no such timer.
	ErrNotFound = errors.New("timers: no such timer")
	// ErrNoHandler is what Set returns before Handle registered a handler:
	// the timer would fire with nothing to run.
	ErrNoHandler = errors.New("timers: no handler registered (call timers.Handle from an init function)")
	// ErrBadName is wrapped by the error of Set for an empty name or one
	// longer than MaxNameLen.
	ErrBadName = errors.New("timers: a timer's name must be 1 to 256 bytes")
)

// Schedule says when a timer fires; make one with At, Every, EveryFrom or
// Cron.
type Schedule struct {
	kind  Kind
	at    time.Time
	every time.Duration
	cron  *CronSchedule
	err   error
}

// At fires once, at t (rounded up to the millisecond, so never before t).
// A time not after now fires at once: in the next on-alarm event.
func At(t time.Time) Schedule { return Schedule{kind: KindAt, at: t} }

// Every fires every d, the first time d from now. d is rounded up to a
// whole millisecond and must be positive.
func Every(d time.Duration) Schedule { return Schedule{kind: KindEvery, every: d} }

// EveryFrom fires at first and then every d after it. When first is not
// after now, the first tick is the first one of that series after now.
func EveryFrom(first time.Time, d time.Duration) Schedule {
	return Schedule{kind: KindEvery, at: first, every: d}
}

// Cron fires each minute the 5-field cron expression matches, in UTC (see
// CronSchedule); the first time is the first match after now. Set returns
// the expression's error, if any.
func Cron(spec string) Schedule {
	c, err := parseCached(spec)
	return Schedule{kind: KindCron, cron: c, err: err}
}

// Timer is one named timer as stored.
type Timer struct {
	// Name is the timer's name, unique within the actor.
	Name string
	// Kind is how it repeats.
	Kind Kind
	// Due is when it next fires. In Fired, the tick being fired.
	Due time.Time
	// Every is the interval of a KindEvery timer.
	Every time.Duration
	// Cron is the expression of a KindCron timer.
	Cron string
	// Data is what Set stored with the timer (nil when empty).
	Data []byte
}

// Fired is what the handler receives for each due timer.
type Fired struct {
	Timer
	// RetryCount is how many times this on-alarm event failed before
	// (the host's count, shared by every timer the event runs).
	RetryCount int
}

var handler func(Fired) error

// dispatching is the state an on-alarm event is running timers from; while
// it is set, Set, Cancel, Get, List and Next work on it, and the dispatch
// saves it once its handlers are done.
var dispatching *state

// Handle registers the function that runs each due timer, and makes the
// timers the owner of the actor's alarm: it registers the SDK's alarm
// handler (wasmkeep.HandleAlarm), so call it from an init function, and do
// not call wasmkeep.HandleAlarm, SetAlarm or ClearAlarm yourself.
//
// On each on-alarm event the handler runs once for every timer due by then
// (wasmkeep.Now), in order of due time, then name. A handler that returns an
// error fails the whole event; see the package documentation for what that
// means.
func Handle(h func(Fired) error) {
	handler = h
	wasmkeep.HandleAlarm(dispatch)
}

// Set creates the timer name, or replaces it (its schedule and data), and
// sets the alarm for the earliest timer. It must run inside an event, and
// commits with it.
func Set(name string, s Schedule, data []byte) error {
	if handler == nil {
		return ErrNoHandler
	}
	if name == "" || len(name) > MaxNameLen {
		return fmt.Errorf("%w: got %d bytes", ErrBadName, len(name))
	}
	if s.err != nil {
		return s.err
	}
	now := wasmkeep.Now().UnixMilli()
	e := &entry{name: name, kind: s.kind}
	if len(data) > 0 {
		e.data = append([]byte(nil), data...)
	}
	switch s.kind {
	case KindAt:
		e.due = ceilMillis(s.at)
	case KindEvery:
		if s.every <= 0 {
			return fmt.Errorf("timers: %q: the interval %v is not positive", name, s.every)
		}
		e.every = (int64(s.every) + int64(time.Millisecond) - 1) / int64(time.Millisecond)
		if s.at.IsZero() {
			e.due = now + e.every
		} else if e.due = ceilMillis(s.at); e.due <= now {
			e.due = nextTick(e.due, e.every, now)
		}
	case KindCron:
		e.spec, e.cron = s.cron.spec, s.cron
		next, err := s.cron.next(time.UnixMilli(now))
		if err != nil {
			return err
		}
		e.due = next.UnixMilli()
	default:
		return errors.New("timers: Set: a zero Schedule (use At, Every, EveryFrom or Cron)")
	}
	if e.due < 0 || e.due > maxAlarmMillis {
		return fmt.Errorf("timers: %q: due at %d ms, outside the host's alarm range", name, e.due)
	}
	return update(func(st *state) error {
		st.timers[name] = e
		return nil
	})
}

// Cancel removes the timer name, reporting whether there was one, and sets
// the alarm for the earliest timer left (or clears it). It commits with the
// event.
func Cancel(name string) (bool, error) {
	found := false
	err := update(func(st *state) error {
		_, found = st.timers[name]
		delete(st.timers, name)
		return nil
	})
	return found, err
}

// Get returns the timer name, or ErrNotFound.
func Get(name string) (Timer, error) {
	st, err := current()
	if err != nil {
		return Timer{}, err
	}
	e, ok := st.timers[name]
	if !ok {
		return Timer{}, ErrNotFound
	}
	return e.timer(), nil
}

// List returns every timer, in dispatch order: by due time, then name.
func List() ([]Timer, error) {
	st, err := current()
	if err != nil {
		return nil, err
	}
	out := make([]Timer, 0, len(st.timers))
	for _, e := range st.sorted() {
		out = append(out, e.timer())
	}
	return out, nil
}

// Next returns the timer due first (the earliest name among those due at
// the same time), or ErrNotFound when there are none.
func Next() (Timer, error) {
	st, err := current()
	if err != nil {
		return Timer{}, err
	}
	e := st.earliest()
	if e == nil {
		return Timer{}, ErrNotFound
	}
	return e.timer(), nil
}

// current is the state the calls see: the dispatch's during one, else the
// stored one.
func current() (*state, error) {
	if dispatching != nil {
		return dispatching, nil
	}
	return load()
}

// update applies f to the timers and, outside a dispatch, saves them and
// sets the alarm (a dispatch does both when its handlers are done).
func update(f func(*state) error) error {
	if dispatching != nil {
		return f(dispatching)
	}
	st, err := load()
	if err != nil {
		return err
	}
	if err := f(st); err != nil {
		return err
	}
	if err := sync(st); err != nil {
		return err
	}
	return save(st)
}

// sync sets the alarm for the earliest timer, outside on-alarm, keeping a
// retry in progress: while the host is backing off a failed on-alarm (the
// alarm is later than the time the timers set it for) and the earliest
// timer is not later than that time, the alarm and its retry count are left
// as they are; the timers due then would run in the same event, after the
// ones that failed.
func sync(st *state) error {
	first := st.earliest()
	cur, err := wasmkeep.GetAlarm()
	has := err == nil
	if err != nil && !errors.Is(err, wasmkeep.ErrNotSet) {
		return err
	}
	curMs := cur.UnixMilli()
	if first == nil {
		st.armed = -1
		if has {
			return wasmkeep.ClearAlarm()
		}
		return nil
	}
	switch {
	case has && st.armed >= 0 && curMs > st.armed && first.due <= st.armed:
		return nil // backing off: the retry stands
	case has && curMs == first.due:
		st.armed = first.due // already set: leave the retry count alone
		return nil
	}
	st.armed = first.due
	return wasmkeep.SetAlarm(time.UnixMilli(first.due))
}

// dispatch is the on-alarm handler: it runs every timer due by now, in
// order of due time then name, moving each repeating timer to its next tick
// after now (skipping the ticks missed) and removing each one-shot timer
// before its handler runs, then saves the timers and sets the alarm for the
// earliest one left (or clears it).
func dispatch(_ time.Time, retryCount int) error {
	st, err := load()
	if err != nil {
		return err
	}
	now := wasmkeep.Now().UnixMilli()
	var due []*entry
	for _, e := range st.sorted() {
		if e.due > now {
			break
		}
		due = append(due, e)
	}
	dispatching = st
	defer func() { dispatching = nil }()
	for _, e := range due {
		if st.timers[e.name] != e {
			continue // an earlier handler cancelled or replaced it
		}
		fired := Fired{Timer: e.timer(), RetryCount: retryCount}
		switch e.kind {
		case KindAt:
			delete(st.timers, e.name)
		case KindEvery, KindCron:
			next := *e
			if next.reschedule(now) {
				st.timers[e.name] = &next
			} else {
				delete(st.timers, e.name)
			}
		}
		if err := handler(fired); err != nil {
			return fmt.Errorf("timer %q due %s: %w", e.name, fired.Due.Format(time.RFC3339Nano), err)
		}
	}
	dispatching = nil
	// The host removes the delivered alarm unless the handler sets one, so
	// set (or clear) it even when it would not change.
	if first := st.earliest(); first != nil {
		st.armed = first.due
		err = wasmkeep.SetAlarm(time.UnixMilli(first.due))
	} else {
		st.armed = -1
		err = wasmkeep.ClearAlarm()
	}
	if err != nil {
		return err
	}
	return save(st)
}

// reschedule moves a repeating timer to its first tick after now; false when
// it has none within the host's alarm range.
func (e *entry) reschedule(now int64) bool {
	switch e.kind {
	case KindEvery:
		e.due = nextTick(e.due, e.every, now)
	case KindCron:
		t, err := e.cron.next(time.UnixMilli(now))
		if err != nil {
			return false
		}
		e.due = t.UnixMilli()
	}
	return e.due <= maxAlarmMillis
}

// nextTick is the first of the ticks due, due+every, due+2*every ... after
// now.
func nextTick(due, every, now int64) int64 {
	if due > now {
		return due
	}
	return due + ((now-due)/every+1)*every
}

func (e *entry) timer() Timer {
	t := Timer{Name: e.name, Kind: e.kind, Due: time.UnixMilli(e.due).UTC(), Cron: e.spec}
	if e.kind == KindEvery {
		t.Every = time.Duration(e.every) * time.Millisecond
	}
	if len(e.data) > 0 {
		t.Data = append([]byte(nil), e.data...)
	}
	return t
}

// maxAlarmMillis is the latest alarm the host accepts (abi.MaxAlarmMillis).
const maxAlarmMillis = 999_999_999_999_999

// ceilMillis is t in Unix ms rounded up, as wasmkeep.SetAlarm rounds;
// times too far from 1970 come out of range and are refused.
func ceilMillis(t time.Time) int64 {
	sec := t.Unix()
	switch {
	case sec < -(maxAlarmMillis/1000 + 1):
		return -1
	case sec > maxAlarmMillis/1000+1:
		return maxAlarmMillis + 1
	}
	return sec*1000 + (int64(t.Nanosecond())+999_999)/1_000_000
}
