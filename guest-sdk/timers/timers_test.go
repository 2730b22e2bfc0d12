//go:build !wasip1

package timers

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	wasmkeep "github.com/wasmkeep/alarms/guest-sdk"
	"github.com/wasmkeep/alarms/guest-sdk/wasmkeeptest"
)

var t0 = time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)

// setup installs a fake host at t0 and registers h as the timers' handler.
func setup(t *testing.T, h func(Fired) error) *wasmkeeptest.Host {
	t.Helper()
	wasmkeep.HandleRequest(nil)
	wasmkeep.HandleInit(nil)
	Handle(h)
	host := wasmkeeptest.New(wasmkeeptest.WithTime(t0))
	t.Cleanup(func() {
		host.Close()
		handler = nil
		wasmkeep.HandleAlarm(nil)
	})
	return host
}

// recorder is a handler that records the names it ran and the ticks.
type recorder struct {
	runs []string
	due  []time.Time
	fail func(Fired) error
}

func (r *recorder) handle(f Fired) error {
	r.runs = append(r.runs, f.Name)
	r.due = append(r.due, f.Due)
	if r.fail != nil {
		return r.fail(f)
	}
	return nil
}

func run(t *testing.T, h *wasmkeeptest.Host, f func() error) {
	t.Helper()
	if err := h.Run(f); err != nil {
		t.Fatal(err)
	}
}

func names(ts []Timer) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.Name)
	}
	return out
}

func alarmAt(t *testing.T, h *wasmkeeptest.Host) time.Time {
	t.Helper()
	at, ok := h.Alarm()
	if !ok {
		t.Fatal("no alarm set")
	}
	return at
}

func TestSetListNextCancel(t *testing.T) {
	h := setup(t, (&recorder{}).handle)
	run(t, h, func() error {
		return errors.Join(
			Set("b", At(t0.Add(2*time.Minute)), []byte("B")),
			Set("a", At(t0.Add(2*time.Minute)), nil),
			Set("c", At(t0.Add(time.Minute)), nil),
			Set("tick", Every(5*time.Minute), nil),
			Set("nightly", Cron("0 3 * * *"), nil),
		)
	})
	if at := alarmAt(t, h); !at.Equal(t0.Add(time.Minute)) {
		t.Fatalf("alarm %v, want the earliest timer's t0+1m", at)
	}
	run(t, h, func() error {
		list, err := List()
		if err != nil {
			return err
		}
		if got, want := names(list), []string{"c", "a", "b", "tick", "nightly"}; !slices.Equal(got, want) {
			t.Errorf("List = %v, want %v (by due time, then name)", got, want)
		}
		if tk := list[3]; tk.Kind != KindEvery || tk.Every != 5*time.Minute || !tk.Due.Equal(t0.Add(5*time.Minute)) {
			t.Errorf("tick = %+v", tk)
		}
		if n := list[4]; n.Kind != KindCron || n.Cron != "0 3 * * *" || !n.Due.Equal(time.Date(2025, 3, 2, 3, 0, 0, 0, time.UTC)) {
			t.Errorf("nightly = %+v", n)
		}
		if b, err := Get("b"); err != nil || string(b.Data) != "B" || b.Kind != KindAt {
			t.Errorf("Get(b) = %+v, %v", b, err)
		}
		if next, err := Next(); err != nil || next.Name != "c" {
			t.Errorf("Next = %+v, %v; want c", next, err)
		}
		if _, err := Get("nope"); err != ErrNotFound {
			t.Errorf("Get(nope) = %v, want ErrNotFound", err)
		}
		return nil
	})
	run(t, h, func() error {
		if ok, err := Cancel("c"); !ok || err != nil {
			t.Errorf("Cancel(c) = %v, %v", ok, err)
		}
		if ok, err := Cancel("c"); ok || err != nil {
			t.Errorf("Cancel(c) again = %v, %v; want false, nil", ok, err)
		}
		return nil
	})
	if at := alarmAt(t, h); !at.Equal(t0.Add(2 * time.Minute)) {
		t.Fatalf("alarm %v after cancelling the earliest, want t0+2m", at)
	}
	run(t, h, func() error {
		for _, n := range []string{"a", "b", "tick", "nightly"} {
			if _, err := Cancel(n); err != nil {
				return err
			}
		}
		if _, err := Next(); err != ErrNotFound {
			t.Errorf("Next with no timers = %v, want ErrNotFound", err)
		}
		return nil
	})
	if _, ok := h.Alarm(); ok {
		t.Error("the alarm is still set with no timers")
	}
	if _, ok := h.Get(StateKey); ok {
		t.Error("the timers' value is still stored with no timers")
	}
}

func TestDueTimersRunInOrderOfDueTimeThenName(t *testing.T) {
	r := &recorder{}
	h := setup(t, r.handle)
	run(t, h, func() error {
		return errors.Join(
			Set("z", At(t0.Add(-2*time.Second)), nil),
			Set("b", At(t0.Add(-time.Second)), nil),
			Set("a", At(t0.Add(-time.Second)), nil),
			Set("B", At(t0.Add(-time.Second)), nil),
			Set("later", At(t0.Add(time.Hour)), nil),
		)
	})
	fired := h.Advance(0)
	if len(fired) != 1 || fired[0].Err != nil {
		t.Fatalf("firings %+v, want one successful event", fired)
	}
	if want := []string{"z", "B", "a", "b"}; !slices.Equal(r.runs, want) {
		t.Fatalf("ran %v, want %v", r.runs, want)
	}
	if !r.due[0].Equal(t0.Add(-2 * time.Second)) {
		t.Errorf("z's Due = %v, want its own time", r.due[0])
	}
	if at := alarmAt(t, h); !at.Equal(t0.Add(time.Hour)) {
		t.Errorf("alarm %v, want the one timer left's t0+1h", at)
	}
	h.Advance(time.Hour)
	if want := []string{"z", "B", "a", "b", "later"}; !slices.Equal(r.runs, want) {
		t.Fatalf("ran %v, want %v", r.runs, want)
	}
	if _, ok := h.Alarm(); ok {
		t.Error("the alarm is set after the last one-shot timer ran")
	}
}

func TestIntervalKeepsPhaseAndSkipsMissedTicks(t *testing.T) {
	r := &recorder{}
	h := setup(t, r.handle)
	run(t, h, func() error { return Set("tick", Every(10*time.Second), nil) })
	h.Advance(25 * time.Second) // ticks at +10 s and +20 s
	if len(r.due) != 2 || !r.due[0].Equal(t0.Add(10*time.Second)) || !r.due[1].Equal(t0.Add(20*time.Second)) {
		t.Fatalf("ticks %v, want t0+10s and t0+20s", r.due)
	}
	// Down from t0+25s to t0+75s: ticks at +30 ... +70 s are missed.
	h.Down(50 * time.Second)
	fired := h.Advance(0)
	if len(fired) != 1 || len(r.due) != 3 || !r.due[2].Equal(t0.Add(30*time.Second)) {
		t.Fatalf("after the outage: %d events, ticks %v; want one run, due t0+30s", len(fired), r.due)
	}
	run(t, h, func() error {
		tk, err := Get("tick")
		if err == nil && !tk.Due.Equal(t0.Add(80*time.Second)) {
			t.Errorf("next tick %v, want t0+80s (after now, on the t0+10s grid)", tk.Due)
		}
		return err
	})
	if at := alarmAt(t, h); !at.Equal(t0.Add(80 * time.Second)) {
		t.Errorf("alarm %v, want t0+80s", at)
	}
}

func TestEveryFromAndAtInThePast(t *testing.T) {
	r := &recorder{}
	h := setup(t, r.handle)
	run(t, h, func() error {
		return errors.Join(
			Set("grid", EveryFrom(t0.Add(-25*time.Second), 10*time.Second), nil),
			Set("future", EveryFrom(t0.Add(time.Hour), time.Minute), nil),
			Set("now", At(t0.Add(-time.Hour)), nil),
		)
	})
	run(t, h, func() error {
		g, _ := Get("grid")
		f, _ := Get("future")
		if !g.Due.Equal(t0.Add(5*time.Second)) || !f.Due.Equal(t0.Add(time.Hour)) {
			t.Errorf("grid due %v (want t0+5s), future due %v (want t0+1h)", g.Due, f.Due)
		}
		return nil
	})
	h.Advance(0)
	if !slices.Equal(r.runs, []string{"now"}) {
		t.Errorf("ran %v, want the past one-shot at once", r.runs)
	}
}

func TestCronTimerFiresOnItsMinutes(t *testing.T) {
	r := &recorder{}
	h := setup(t, r.handle)
	run(t, h, func() error { return Set("hourly", Cron("0 * * * *"), nil) })
	h.Advance(3 * time.Hour)
	want := []time.Time{t0.Add(time.Hour), t0.Add(2 * time.Hour), t0.Add(3 * time.Hour)}
	if !slices.EqualFunc(r.due, want, time.Time.Equal) {
		t.Fatalf("ticks %v, want %v", r.due, want)
	}
	for i, f := range h.Firings() {
		if !f.At.Equal(want[i]) {
			t.Errorf("event %d ran at %v, want %v", i, f.At, want[i])
		}
	}
	// Missed ticks are skipped here too: down 5 hours, one run, next on the hour.
	h.Down(5*time.Hour + 30*time.Minute)
	h.Advance(0)
	if len(r.due) != 4 || !r.due[3].Equal(t0.Add(4*time.Hour)) {
		t.Fatalf("ticks %v, want one more, due t0+4h", r.due)
	}
	if at := alarmAt(t, h); !at.Equal(t0.Add(9 * time.Hour)) {
		t.Errorf("alarm %v, want t0+9h (the first tick after now)", at)
	}
}

// TestFailureRerunsTheWholeEvent: a failing handler rolls back every write
// of the event, the other timers' runs and moves included, and the retry
// runs them all again, in the same order.
func TestFailureRerunsTheWholeEvent(t *testing.T) {
	r := &recorder{}
	var retries []int
	r.fail = func(f Fired) error {
		retries = append(retries, f.RetryCount)
		if err := wasmkeep.Put("ran/"+f.Name, nil); err != nil {
			return err
		}
		if f.Name == "b" && f.RetryCount < 2 {
			return errors.New("b is not ready")
		}
		return nil
	}
	h := setup(t, r.handle)
	run(t, h, func() error {
		return errors.Join(
			Set("a", At(t0.Add(time.Second)), nil),
			Set("b", At(t0.Add(time.Second)), nil),
			Set("c", At(t0.Add(2*time.Second)), nil),
			Set("tick", EveryFrom(t0.Add(time.Second), time.Minute), nil),
		)
	})
	fired := h.Advance(time.Second)
	if len(fired) != 1 || !errors.Is(fired[0].Err, wasmkeeptest.ErrEventFailed) || !strings.Contains(fired[0].Err.Error(), `timer "b"`) {
		t.Fatalf("firings %+v, want one failing, naming timer b", fired)
	}
	if slices.ContainsFunc(h.Keys(), func(k string) bool { return strings.HasPrefix(k, "ran/") }) {
		t.Errorf("keys %v: a's write committed though the event failed", h.Keys())
	}
	run(t, h, func() error {
		list, err := List()
		if got := names(list); !slices.Equal(got, []string{"a", "b", "tick", "c"}) {
			t.Errorf("timers after the failure %v: the one-shots and tick's move were not rolled back", got)
		}
		return err
	})
	if at := alarmAt(t, h); !at.Equal(t0.Add(2*time.Second)) || h.RetryCount() != 1 {
		t.Fatalf("alarm %v, count %d; want the retry at t0+2s, 1", at, h.RetryCount())
	}
	h.Advance(29 * time.Second) // retries at t0+2s (fails) and t0+4s (succeeds)
	want := []string{"a", "b", "a", "b", "a", "b", "tick", "c"}
	if !slices.Equal(r.runs, want) {
		t.Fatalf("ran %v, want %v", r.runs, want)
	}
	if !slices.Equal(retries, []int{0, 0, 1, 1, 2, 2, 2, 2}) {
		t.Errorf("retry counts %v", retries)
	}
	for _, k := range []string{"ran/a", "ran/b", "ran/c", "ran/tick"} {
		if _, ok := h.Get(k); !ok {
			t.Errorf("%s not committed after the event succeeded", k)
		}
	}
	// tick's missed tick at +1 s ran late once; it is next due at t0+61s.
	run(t, h, func() error {
		tk, err := Get("tick")
		if err == nil && !tk.Due.Equal(t0.Add(61*time.Second)) {
			t.Errorf("tick due %v, want t0+61s", tk.Due)
		}
		return err
	})
}

// TestARequestDuringBackoffKeepsTheRetry: changes that leave a timer due at
// or before the failed time keep the host's retry and count; a change that
// leaves none re-arms at the earliest timer, the count back to 0.
func TestARequestDuringBackoffKeepsTheRetry(t *testing.T) {
	r := &recorder{fail: func(f Fired) error {
		if f.Name == "bad" {
			return errors.New("bad")
		}
		return nil
	}}
	h := setup(t, r.handle)
	run(t, h, func() error { return Set("bad", At(t0), nil) })
	h.Advance(2 * time.Second) // fails at t0 and t0+1s; retry at t0+3s
	retryAt := alarmAt(t, h)
	if !retryAt.Equal(t0.Add(3*time.Second)) || h.RetryCount() != 2 {
		t.Fatalf("alarm %v count %d, want t0+3s, 2", retryAt, h.RetryCount())
	}
	run(t, h, func() error {
		return errors.Join(Set("later", At(t0.Add(time.Hour)), nil), Set("early", At(t0.Add(-time.Minute)), nil))
	})
	if at := alarmAt(t, h); !at.Equal(retryAt) || h.RetryCount() != 2 {
		t.Fatalf("after setting timers during the backoff: alarm %v count %d, want %v, 2 (the retry stands)", at, h.RetryCount(), retryAt)
	}
	run(t, h, func() error { _, err := Cancel("early"); return err })
	if at := alarmAt(t, h); !at.Equal(retryAt) || h.RetryCount() != 2 {
		t.Fatalf("after cancelling another timer: alarm %v count %d, want %v, 2", at, h.RetryCount(), retryAt)
	}
	run(t, h, func() error { _, err := Cancel("bad"); return err })
	if at := alarmAt(t, h); !at.Equal(t0.Add(time.Hour)) || h.RetryCount() != 0 {
		t.Fatalf("after cancelling the failing timer: alarm %v count %d, want later's t0+1h, 0", at, h.RetryCount())
	}
	h.Advance(time.Hour)
	if want := []string{"bad", "bad", "later"}; !slices.Equal(r.runs, want) {
		t.Errorf("ran %v, want %v", r.runs, want)
	}
}

func TestHandlersSetAndCancelDuringDispatch(t *testing.T) {
	r := &recorder{}
	r.fail = func(f Fired) error {
		if f.Name != "x" || len(r.runs) > 1 {
			return nil
		}
		// What stands during the handler: x is already gone (one-shot).
		if _, err := Get("x"); err != ErrNotFound {
			return fmt.Errorf("Get(x) in its handler = %v, want ErrNotFound", err)
		}
		if _, err := Cancel("y"); err != nil {
			return err
		}
		return errors.Join(
			Set("x", At(t0.Add(time.Minute)), nil),   // itself again, later
			Set("w", At(t0.Add(-time.Hour)), nil),    // due already: runs in the next event
			Set("z", At(t0.Add(2*time.Minute)), nil), // z moved: not run in this event
		)
	}
	h := setup(t, r.handle)
	run(t, h, func() error {
		return errors.Join(Set("x", At(t0.Add(-3*time.Second)), nil), Set("y", At(t0.Add(-2*time.Second)), nil),
			Set("z", At(t0.Add(-time.Second)), nil), Set("v", At(t0.Add(-time.Second)), nil))
	})
	fired := h.Advance(0)
	if len(fired) != 2 {
		t.Fatalf("%d events, want 2 (this one and the one for w)", len(fired))
	}
	if want := []string{"x", "v", "w"}; !slices.Equal(r.runs, want) {
		t.Fatalf("ran %v, want %v", r.runs, want)
	}
	h.Advance(time.Minute)
	h.Advance(time.Minute)
	if want := []string{"x", "v", "w", "x", "z"}; !slices.Equal(r.runs, want) {
		t.Fatalf("ran %v, want %v", r.runs, want)
	}
}

func TestTimersCommitWithTheEvent(t *testing.T) {
	h := setup(t, (&recorder{}).handle)
	err := h.Run(func() error {
		if err := Set("x", At(t0.Add(time.Minute)), nil); err != nil {
			return err
		}
		return errors.New("the request fails")
	})
	if err == nil {
		t.Fatal("Run did not fail")
	}
	if _, ok := h.Alarm(); ok {
		t.Error("the alarm of a failed event's timer was committed")
	}
	if _, ok := h.Get(StateKey); ok {
		t.Error("a failed event's timer was committed")
	}
}

func TestSetRefuses(t *testing.T) {
	h := setup(t, (&recorder{}).handle)
	run(t, h, func() error {
		for name, err := range map[string]error{
			"empty name":    Set("", At(t0), nil),
			"long name":     Set(strings.Repeat("n", MaxNameLen+1), At(t0), nil),
			"zero interval": Set("x", Every(0), nil),
			"bad cron":      Set("x", Cron("0 0 30 2 *"), nil),
			"zero time":     Set("x", At(time.Time{}), nil),
			"zero schedule": Set("x", Schedule{}, nil),
		} {
			if err == nil {
				t.Errorf("%s: Set returned nil", name)
			}
		}
		if err := Set(strings.Repeat("n", MaxNameLen), At(t0), nil); err != nil {
			t.Errorf("a %d-byte name: %v", MaxNameLen, err)
		}
		return nil
	})
	if err := Set("x", At(t0), nil); !errors.Is(err, wasmkeep.EPERM) {
		t.Errorf("Set outside an event = %v, want EPERM", err)
	}
	handler = nil
	if err := h.Run(func() error { return Set("x", At(t0), nil) }); err != ErrNoHandler {
		t.Errorf("Set before Handle = %v, want ErrNoHandler", err)
	}
}

func TestEncodeDecode(t *testing.T) {
	c, _ := ParseCron("*/5 * * * *")
	s := &state{armed: 1234, timers: map[string]*entry{
		"a": {name: "a", kind: KindAt, due: 5, data: []byte("hello")},
		"b": {name: "b", kind: KindEvery, due: 7, every: 1000},
		"c": {name: "c", kind: KindCron, due: -1, spec: "*/5 * * * *", cron: c},
	}}
	b := encode(s)
	got, err := decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(encode(got), b) || got.armed != 1234 || len(got.timers) != 3 || string(got.timers["a"].data) != "hello" ||
		got.timers["b"].every != 1000 || got.timers["c"].cron == nil {
		t.Fatalf("decode(encode(s)) = %+v", got)
	}
	for i := range b { // every truncation is refused, never a panic
		if _, err := decode(b[:i]); err == nil {
			t.Errorf("decode of %d of %d bytes succeeded", i, len(b))
		}
	}
	if _, err := decode(append([]byte{2}, b[1:]...)); err == nil {
		t.Error("decode of another version succeeded")
	}
}

func TestACorruptValueFailsTheEvent(t *testing.T) {
	h := setup(t, (&recorder{}).handle)
	run(t, h, func() error { return wasmkeep.Put(StateKey, []byte("junk")) })
	if err := h.Run(func() error { _, err := List(); return err }); err == nil || !strings.Contains(err.Error(), StateKey) {
		t.Errorf("List over a corrupt value = %v, want an error naming %s", err, StateKey)
	}
}
