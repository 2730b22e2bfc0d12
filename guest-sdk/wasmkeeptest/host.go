//go:build !wasip1

package wasmkeeptest

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	// The SDK registers its exports with the seam when it is linked in.
	_ "github.com/wasmkeep/alarms/guest-sdk"
	wasmkeep "github.com/wasmkeep/alarms/guest-sdk"
	"github.com/wasmkeep/alarms/guest-sdk/internal/native"
)

// The host's limits and backoff (abi/ABI.md).
const (
	maxAlarmMillis = 999_999_999_999_999
	maxKeyLen      = 1024
	maxValueLen    = 1 << 20
	maxResponse    = 16 << 20
	// RetryBase is the delay before the first retry of a failed alarm
	// handler; each further failure doubles it, up to RetryMax.
	RetryBase = time.Second
	// RetryMax is the longest delay between retries.
	RetryMax = 5 * time.Minute
	// maxDeliveries bounds the alarms one Advance delivers, so a handler
	// that sets its alarm for now again and again ends the test rather than
	// hanging it.
	maxDeliveries = 100_000
)

// errnos the fake returns, as numbered in the ABI.
const (
	e2BIG  = 1
	eINVAL = 28
	eNOENT = 44
	ePERM  = 63
)

// DefaultStart is the clock's time when New is not given WithTime:
// 2025-01-01T00:00:00Z.
var DefaultStart = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// ErrEventFailed is wrapped by the error of an event whose handler failed
// (returned an error or panicked); its writes were rolled back.
var ErrEventFailed = errors.New("wasmkeeptest: the event failed")

// ActorID is the actor's identity: its tenant, class and name, as
// wasmkeep.Self returns it.
type ActorID = wasmkeep.ActorID

// DefaultActor is the actor's identity when New is not given WithActor.
var DefaultActor = ActorID{Tenant: "tenant", Class: "class", Name: "actor"}

// Firing is one delivery of the alarm: on-alarm's arguments, the clock when
// it ran, and what the handler returned.
type Firing struct {
	// Scheduled is the time on-alarm received: the alarm's time, or during
	// retries the time of this attempt.
	Scheduled time.Time
	// RetryCount is how many attempts at this alarm failed before this one.
	RetryCount int
	// At is the clock when the handler ran (the alarm's time: the fake
	// delivers it as soon as it is due).
	At time.Time
	// Err is nil when the handler succeeded; otherwise it wraps
	// ErrEventFailed and says what the SDK logged.
	Err error
	// GaveUp is true when this failure was the last attempt WithMaxAttempts
	// allows: no retry was committed.
	GaveUp bool
}

// Option configures a Host.
type Option func(*Host)

// WithTime starts the clock at t (milliseconds, as the host's clock has)
// rather than DefaultStart.
func WithTime(t time.Time) Option {
	return func(h *Host) { h.now = t.UnixMilli() }
}

// WithActor sets the actor's identity, which Actor returns and the guest
// reads with wasmkeep.Self (DefaultActor when not given).
func WithActor(id ActorID) Option {
	return func(h *Host) { h.id = id }
}

// WithMaxAttempts ends the retries of a failing alarm after n attempts, as
// a host configured with an attempt limit does (keepnode -max-attempts):
// the last failure commits no retry, the alarm it left due is cleared and
// the failure count goes back to 0. 0, the default, retries for ever.
func WithMaxAttempts(n int) Option {
	return func(h *Host) { h.maxAttempts = n }
}

// Host is the fake host, with one actor. Its methods are not safe for
// concurrent use; a guest runs one event at a time.
type Host struct {
	now         int64 // Unix ms
	id          ActorID
	maxAttempts int

	// Committed state.
	kv       map[string][]byte
	alarm    *int64
	failures int
	inited   bool

	ev      *event // the event running, nil between events
	firings []Firing
	log     bytes.Buffer // what the SDK logged, all of it
	closed  bool
}

// event is one event's working state: what commits if it succeeds.
type event struct {
	kv       map[string][]byte
	alarm    *int64
	touched  bool // set-alarm or clear-alarm succeeded
	failures int
	req      []byte
	resp     []byte
}

// New installs a fake host for the SDK's calls and returns it. It panics if
// another Host is installed and not closed: the SDK has one host per
// process, as a guest has.
func New(opts ...Option) *Host {
	if native.Current != nil {
		panic("wasmkeeptest: New while another Host is installed (Close it first; tests that use a Host must not run in parallel)")
	}
	h := &Host{now: DefaultStart.UnixMilli(), id: DefaultActor, kv: map[string][]byte{}}
	for _, o := range opts {
		o(h)
	}
	native.Current, native.Log = impl{h}, &h.log
	return h
}

// Close uninstalls the host: SDK calls return EPERM again. Closing twice
// does nothing.
func (h *Host) Close() {
	if h.closed {
		return
	}
	h.closed = true
	if c, ok := native.Current.(impl); ok && c.h == h {
		native.Current, native.Log = nil, nil
	}
}

// Actor returns the actor's identity (WithActor; DefaultActor by default).
func (h *Host) Actor() ActorID { return h.id }

// Now returns the fake's clock, which wasmkeep.Now returns to the guest.
func (h *Host) Now() time.Time { return time.UnixMilli(h.now).UTC() }

// Alarm returns the committed alarm, if one is set.
func (h *Host) Alarm() (time.Time, bool) {
	if h.alarm == nil {
		return time.Time{}, false
	}
	return time.UnixMilli(*h.alarm).UTC(), true
}

// RetryCount returns the committed failure count: the retryCount the next
// delivery of the alarm receives.
func (h *Host) RetryCount() int { return h.failures }

// Get returns the committed value under key.
func (h *Host) Get(key string) ([]byte, bool) {
	v, ok := h.kv[key]
	return bytes.Clone(v), ok
}

// Keys returns the committed keys, sorted.
func (h *Host) Keys() []string { return slices.Sorted(maps.Keys(h.kv)) }

// Firings returns every delivery of the alarm so far, oldest first.
func (h *Host) Firings() []Firing { return slices.Clone(h.firings) }

// Log returns what the SDK wrote for failed events so far (on a guest's
// standard error, in a real host).
func (h *Host) Log() string { return h.log.String() }

// Request sends a request to the actor (on-request), first running on-init
// if it has not succeeded yet. It returns the response, or an error wrapping
// ErrEventFailed when a handler failed; its writes are then rolled back.
func (h *Host) Request(body []byte) ([]byte, error) {
	if err := h.ensureInit(); err != nil {
		return nil, err
	}
	var resp []byte
	err := h.run("on-request", body, func() int32 { return native.OnRequest(int32(len(body))) }, func(ev *event) {
		resp = ev.resp
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// Run runs f as an event of the actor, as a request handler would run it:
// inside f the SDK's calls (and package timers) work, and f's writes commit
// when it returns nil and roll back when it returns an error, which Run
// returns. Tests use it to read or seed the actor's state through the SDK.
// on-init runs first if it has not succeeded yet.
func (h *Host) Run(f func() error) error {
	if err := h.ensureInit(); err != nil {
		return err
	}
	var ferr error
	err := h.run("event", nil, func() int32 {
		if ferr = f(); ferr != nil {
			return 1
		}
		return 0
	}, nil)
	if ferr != nil {
		return ferr
	}
	return err
}

// Advance moves the clock forward by d, delivering the alarm each time it
// falls due on the way (retries included), at its time, and returns those
// deliveries. Advance(0) delivers an alarm already due.
func (h *Host) Advance(d time.Duration) []Firing {
	return h.AdvanceTo(h.Now().Add(d))
}

// AdvanceTo moves the clock to t, as Advance does. A t before the clock
// delivers what is due and leaves the clock where it is.
func (h *Host) AdvanceTo(t time.Time) []Firing {
	h.checkOpen()
	target := t.UnixMilli()
	var out []Firing
	for h.alarm != nil && *h.alarm <= max(target, h.now) {
		if len(out) == maxDeliveries {
			panic(fmt.Sprintf("wasmkeeptest: %d alarms delivered in one Advance: does the alarm handler set its alarm for now again and again?", maxDeliveries))
		}
		h.now = max(h.now, *h.alarm)
		out = append(out, h.deliver())
	}
	h.now = max(h.now, target)
	h.firings = append(h.firings, out...)
	return out
}

// Down moves the clock forward by d without delivering anything, as if the
// actor's node were down meanwhile; the next Advance (Advance(0) at once)
// delivers the alarm that fell due, late, with the clock past its time.
func (h *Host) Down(d time.Duration) {
	h.checkOpen()
	h.now = max(h.now, h.Now().Add(d).UnixMilli())
}

// deliver runs on-alarm for the committed alarm, due now, and commits the
// outcome as the host does.
func (h *Host) deliver() Firing {
	at, failures := *h.alarm, h.failures
	f := Firing{Scheduled: time.UnixMilli(at).UTC(), RetryCount: failures, At: h.Now()}
	var left *int64
	f.Err = h.run("on-alarm", nil, func() int32 { return native.OnAlarm(at, int32(failures)) }, func(ev *event) {
		if !ev.touched {
			h.alarm = nil
		}
		h.failures = 0
	}, func(ev *event) {
		left = &at
		if ev.touched {
			left = ev.alarm
		}
	})
	if f.Err == nil {
		return f
	}
	n := failures + 1
	retryAt := min(h.now+retryDelay(n).Milliseconds(), maxAlarmMillis)
	switch {
	case h.maxAttempts > 0 && n >= h.maxAttempts:
		f.GaveUp = true
		if left != nil && *left < retryAt {
			left = nil
		}
		h.alarm, h.failures = left, 0
	case left == nil:
		h.alarm, h.failures = nil, 0
	default:
		next := max(*left, retryAt)
		h.alarm, h.failures = &next, n
	}
	return f
}

// retryDelay is the delay after the n-th failure in a row.
func retryDelay(n int) time.Duration {
	d := RetryBase
	for i := 1; i < n && d < RetryMax; i++ {
		d *= 2
	}
	return min(d, RetryMax)
}

func (h *Host) ensureInit() error {
	if h.inited {
		return nil
	}
	return h.run("on-init", nil, native.OnInit, func(*event) { h.inited = true })
}

// run runs one event: call is the export, onCommit adjusts the committed
// state after a success (it runs after the event's state is committed),
// onFail (optional) sees the failed event before it is rolled back.
func (h *Host) run(export string, req []byte, call func() int32, onCommit func(*event), onFail ...func(*event)) (err error) {
	h.checkOpen()
	if h.ev != nil {
		panic("wasmkeeptest: an event started inside another (a handler called the Host)")
	}
	ev := &event{kv: maps.Clone(h.kv), alarm: h.alarm, failures: h.failures, req: req}
	h.ev = ev
	logged := h.log.Len()
	code := int32(1)
	func() {
		defer func() {
			if r := recover(); r != nil {
				// A panic traps the instance in a guest: the event fails.
				fmt.Fprintf(&h.log, "wasmkeep: %s: panic: %v\n", export, r)
				code = 1
			}
		}()
		code = call()
	}()
	h.ev = nil
	if code != 0 {
		for _, f := range onFail {
			f(ev)
		}
		said := strings.TrimSpace(h.log.String()[logged:])
		if said == "" {
			return fmt.Errorf("%w: %s returned %d", ErrEventFailed, export, code)
		}
		return fmt.Errorf("%w: %s", ErrEventFailed, said)
	}
	h.kv, h.alarm, h.failures = ev.kv, ev.alarm, ev.failures
	if onCommit != nil {
		onCommit(ev)
	}
	return nil
}

func (h *Host) checkOpen() {
	if h.closed {
		panic("wasmkeeptest: Host used after Close")
	}
}

// impl is the Host as the SDK's imports see it.
type impl struct{ h *Host }

func (c impl) Now() time.Time { return c.h.Now() }

func (c impl) SetAlarm(atMs int64) uint32 {
	ev := c.h.ev
	if ev == nil {
		return ePERM
	}
	if atMs < 0 || atMs > maxAlarmMillis {
		return eINVAL
	}
	ev.alarm, ev.touched, ev.failures = &atMs, true, 0
	return 0
}

func (c impl) GetAlarm(out *int64) uint32 {
	ev := c.h.ev
	if ev == nil {
		return ePERM
	}
	if ev.alarm == nil {
		return eNOENT
	}
	*out = *ev.alarm
	return 0
}

func (c impl) ClearAlarm() uint32 {
	ev := c.h.ev
	if ev == nil {
		return ePERM
	}
	ev.alarm, ev.touched, ev.failures = nil, true, 0
	return 0
}

func (c impl) RequestRead(buf []byte) uint32 {
	ev := c.h.ev
	if ev == nil {
		return ePERM
	}
	copy(buf, ev.req)
	return 0
}

func (c impl) ResponseWrite(buf []byte) uint32 {
	ev := c.h.ev
	if ev == nil {
		return ePERM
	}
	if len(ev.resp)+len(buf) > maxResponse {
		return e2BIG
	}
	ev.resp = append(ev.resp, buf...)
	return 0
}

func (c impl) KVGet(key string, buf []byte, outLen *uint32) uint32 {
	ev := c.h.ev
	if ev == nil {
		return ePERM
	}
	if len(key) > maxKeyLen {
		return e2BIG
	}
	v, ok := ev.kv[key]
	if !ok {
		return eNOENT
	}
	*outLen = uint32(len(v))
	copy(buf, v)
	return 0
}

func (c impl) KVPut(key string, val []byte) uint32 {
	ev := c.h.ev
	if ev == nil {
		return ePERM
	}
	if len(key) > maxKeyLen || len(val) > maxValueLen {
		return e2BIG
	}
	ev.kv[key] = bytes.Clone(val)
	if ev.kv[key] == nil {
		ev.kv[key] = []byte{}
	}
	return 0
}

func (c impl) KVDelete(key string) uint32 {
	ev := c.h.ev
	if ev == nil {
		return ePERM
	}
	if len(key) > maxKeyLen {
		return e2BIG
	}
	delete(ev.kv, key)
	return 0
}

func (c impl) ActorID(buf []byte, outLen *uint32) uint32 {
	if c.h.ev == nil {
		return ePERM
	}
	id := c.h.id.String()
	*outLen = uint32(len(id))
	if len(id) > len(buf) {
		return e2BIG
	}
	copy(buf, id)
	return 0
}
