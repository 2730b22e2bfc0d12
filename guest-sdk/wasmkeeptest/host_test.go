//go:build !wasip1

package wasmkeeptest_test

import (
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

// newHost installs a host at t0 with no handlers registered.
func newHost(t *testing.T, opts ...wasmkeeptest.Option) *wasmkeeptest.Host {
	t.Helper()
	wasmkeep.HandleRequest(nil)
	wasmkeep.HandleAlarm(nil)
	wasmkeep.HandleInit(nil)
	h := wasmkeeptest.New(append([]wasmkeeptest.Option{wasmkeeptest.WithTime(t0)}, opts...)...)
	t.Cleanup(h.Close)
	return h
}

func TestOutsideAnEventEveryCallIsEPERM(t *testing.T) {
	newHost(t)
	if err := wasmkeep.Put("k", []byte("v")); !errors.Is(err, wasmkeep.EPERM) {
		t.Fatalf("Put outside an event = %v, want EPERM", err)
	}
	if _, err := wasmkeep.GetAlarm(); !errors.Is(err, wasmkeep.EPERM) {
		t.Fatalf("GetAlarm outside an event = %v, want EPERM", err)
	}
}

func TestRequestCommitsOrRollsBack(t *testing.T) {
	h := newHost(t)
	wasmkeep.HandleAlarm(func(time.Time, int) error { return nil })
	wasmkeep.HandleRequest(func(req []byte) ([]byte, error) {
		if err := wasmkeep.Put("last", req); err != nil {
			return nil, err
		}
		if err := wasmkeep.SetAlarm(wasmkeep.Now().Add(time.Hour)); err != nil {
			return nil, err
		}
		if string(req) == "fail" {
			return []byte("ignored"), errors.New("refused")
		}
		return append([]byte("got "), req...), nil
	})
	resp, err := h.Request([]byte("one"))
	if err != nil || string(resp) != "got one" {
		t.Fatalf("Request(one) = %q, %v", resp, err)
	}
	h.Advance(time.Minute)
	resp, err = h.Request([]byte("fail"))
	if !errors.Is(err, wasmkeeptest.ErrEventFailed) || !strings.Contains(err.Error(), "refused") || resp != nil {
		t.Fatalf("failing Request = %q, %v; want ErrEventFailed saying refused", resp, err)
	}
	if v, _ := h.Get("last"); string(v) != "one" {
		t.Errorf("last = %q after a failed request, want one (rolled back)", v)
	}
	if at, ok := h.Alarm(); !ok || !at.Equal(t0.Add(time.Hour)) {
		t.Errorf("alarm = %v %v, want the first request's %v", at, ok, t0.Add(time.Hour))
	}
	if !strings.Contains(h.Log(), "on-request: refused") {
		t.Errorf("log %q, want the SDK's line for the failed request", h.Log())
	}
}

func TestInitRunsOnceAndAgainWhileItFails(t *testing.T) {
	h := newHost(t)
	inits := 0
	wasmkeep.HandleInit(func() error {
		inits++
		if err := wasmkeep.Put("init", []byte("x")); err != nil {
			return err
		}
		if inits == 1 {
			return errors.New("not yet")
		}
		return nil
	})
	wasmkeep.HandleRequest(func([]byte) ([]byte, error) { return nil, nil })
	if _, err := h.Request(nil); !errors.Is(err, wasmkeeptest.ErrEventFailed) {
		t.Fatalf("request after a failing on-init = %v, want ErrEventFailed", err)
	}
	if _, ok := h.Get("init"); ok {
		t.Fatal("the failed on-init's write was committed")
	}
	for range 3 {
		if _, err := h.Request(nil); err != nil {
			t.Fatal(err)
		}
	}
	if inits != 2 {
		t.Errorf("on-init ran %d times, want 2 (once failing, once succeeding)", inits)
	}
}

func TestAlarmFiresWhenTheClockReachesIt(t *testing.T) {
	h := newHost(t)
	var got []time.Time
	wasmkeep.HandleAlarm(func(scheduled time.Time, retry int) error {
		got = append(got, scheduled)
		if now := wasmkeep.Now(); !now.Equal(scheduled) {
			t.Errorf("the handler's clock = %v, want the alarm's time %v", now, scheduled)
		}
		return nil
	})
	if err := h.Run(func() error { return wasmkeep.SetAlarm(t0.Add(10 * time.Second)) }); err != nil {
		t.Fatal(err)
	}
	if f := h.Advance(9999 * time.Millisecond); len(f) != 0 {
		t.Fatalf("fired %v before the alarm's time", f)
	}
	f := h.Advance(time.Millisecond)
	if len(f) != 1 || !f[0].Scheduled.Equal(t0.Add(10*time.Second)) || f[0].RetryCount != 0 || f[0].Err != nil {
		t.Fatalf("firings %+v, want one at t0+10s, retry 0, succeeded", f)
	}
	if _, ok := h.Alarm(); ok {
		t.Error("the alarm is still set after a handler that did not set it succeeded")
	}
	if !h.Now().Equal(t0.Add(10 * time.Second)) {
		t.Errorf("clock %v, want t0+10s", h.Now())
	}
}

func TestFailingAlarmBacksOffAndRollsBack(t *testing.T) {
	h := newHost(t)
	wasmkeep.HandleAlarm(func(scheduled time.Time, retry int) error {
		if err := wasmkeep.Put("attempt", []byte{byte(retry)}); err != nil {
			return err
		}
		return errors.New("down")
	})
	if err := h.Run(func() error { return wasmkeep.SetAlarm(t0) }); err != nil {
		t.Fatal(err)
	}
	fired := h.Advance(20 * time.Minute)
	// Attempts at t0, then 1 s, 2 s, 4 s ... later, the gap capped at 5 min.
	wantGaps := []time.Duration{1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300}
	at := t0
	for i, f := range fired {
		if f.RetryCount != i || !f.At.Equal(at) || !f.Scheduled.Equal(at) || !errors.Is(f.Err, wasmkeeptest.ErrEventFailed) {
			t.Fatalf("firing %d = %+v, want at %v with retry %d, failed", i, f, at, i)
		}
		if i < len(wantGaps) {
			at = at.Add(wantGaps[i] * time.Second)
		} else {
			at = at.Add(5 * time.Minute)
		}
	}
	if len(fired) < len(wantGaps) {
		t.Fatalf("%d firings in 20 min, want at least %d", len(fired), len(wantGaps))
	}
	if _, ok := h.Get("attempt"); ok {
		t.Error("a failed handler's write was committed")
	}
	if next, ok := h.Alarm(); !ok || !next.Equal(at) || h.RetryCount() != len(fired) {
		t.Errorf("committed alarm %v %v, retry count %d; want %v and %d", next, ok, h.RetryCount(), at, len(fired))
	}
	if got := h.Firings(); len(got) != len(fired) {
		t.Errorf("Firings() has %d, want %d", len(got), len(fired))
	}
}

func TestFailingHandlerThatSetLaterOrClearedStands(t *testing.T) {
	h := newHost(t)
	mode := "later"
	wasmkeep.HandleAlarm(func(scheduled time.Time, retry int) error {
		switch mode {
		case "later":
			if err := wasmkeep.SetAlarm(scheduled.Add(time.Hour)); err != nil {
				return err
			}
		case "clear":
			if err := wasmkeep.ClearAlarm(); err != nil {
				return err
			}
		}
		return errors.New("fail")
	})
	if err := h.Run(func() error { return wasmkeep.SetAlarm(t0) }); err != nil {
		t.Fatal(err)
	}
	h.Advance(0)
	if at, ok := h.Alarm(); !ok || !at.Equal(t0.Add(time.Hour)) || h.RetryCount() != 1 {
		t.Fatalf("after a failed run that set a later alarm: %v %v count %d, want t0+1h, 1", at, ok, h.RetryCount())
	}
	mode = "clear"
	h.Advance(time.Hour)
	if _, ok := h.Alarm(); ok || h.RetryCount() != 0 {
		t.Fatalf("after a failed run that cleared: alarm %v, count %d; want none, 0", ok, h.RetryCount())
	}
}

func TestSettingTheAlarmResetsTheRetryCount(t *testing.T) {
	h := newHost(t)
	var retries []int
	wasmkeep.HandleAlarm(func(_ time.Time, retry int) error {
		retries = append(retries, retry)
		return errors.New("fail")
	})
	wasmkeep.HandleRequest(func([]byte) ([]byte, error) {
		return nil, wasmkeep.SetAlarm(wasmkeep.Now())
	})
	if _, err := h.Request(nil); err != nil {
		t.Fatal(err)
	}
	h.Advance(2 * time.Second) // attempts at +0 and +1 s; the next is at +3 s
	if h.RetryCount() != 2 {
		t.Fatalf("retry count %d, want 2", h.RetryCount())
	}
	if _, err := h.Request(nil); err != nil { // sets the alarm: count back to 0
		t.Fatal(err)
	}
	h.Advance(0)
	if want := []int{0, 1, 0}; !slices.Equal(retries, want) {
		t.Fatalf("retry counts %v, want %v", retries, want)
	}
}

func TestMaxAttemptsGivesUp(t *testing.T) {
	h := newHost(t, wasmkeeptest.WithMaxAttempts(3))
	wasmkeep.HandleAlarm(func(time.Time, int) error { return errors.New("poison") })
	if err := h.Run(func() error { return wasmkeep.SetAlarm(t0) }); err != nil {
		t.Fatal(err)
	}
	fired := h.Advance(time.Hour)
	if len(fired) != 3 || !fired[2].GaveUp || fired[1].GaveUp {
		t.Fatalf("firings %+v, want 3, the last one giving up", fired)
	}
	if _, ok := h.Alarm(); ok || h.RetryCount() != 0 {
		t.Errorf("after giving up: alarm set %v, count %d; want none, 0", ok, h.RetryCount())
	}
}

func TestDownDeliversLate(t *testing.T) {
	h := newHost(t)
	var at time.Time
	wasmkeep.HandleAlarm(func(time.Time, int) error { at = wasmkeep.Now(); return nil })
	if err := h.Run(func() error { return wasmkeep.SetAlarm(t0.Add(time.Second)) }); err != nil {
		t.Fatal(err)
	}
	h.Down(time.Minute)
	if !at.IsZero() {
		t.Fatal("an alarm was delivered while the host was down")
	}
	f := h.Advance(0)
	if len(f) != 1 || !f[0].Scheduled.Equal(t0.Add(time.Second)) || !at.Equal(t0.Add(time.Minute)) {
		t.Fatalf("firings %+v, handler's clock %v; want the t0+1s alarm run at t0+1m", f, at)
	}
}

func TestPanicFailsTheEvent(t *testing.T) {
	h := newHost(t)
	wasmkeep.HandleRequest(func([]byte) ([]byte, error) {
		if err := wasmkeep.Put("k", []byte("v")); err != nil {
			return nil, err
		}
		panic("boom")
	})
	if _, err := h.Request(nil); !errors.Is(err, wasmkeeptest.ErrEventFailed) || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("Request with a panicking handler = %v, want ErrEventFailed with the panic", err)
	}
	if len(h.Keys()) != 0 {
		t.Errorf("keys %v after a panic, want none", h.Keys())
	}
}

func TestRunAndIdentity(t *testing.T) {
	id := wasmkeeptest.ActorID{Tenant: "t", Class: "c", Name: "n"}
	h := newHost(t, wasmkeeptest.WithActor(id))
	if h.Actor() != id {
		t.Errorf("Actor() = %+v, want %+v", h.Actor(), id)
	}
	if err := h.Run(func() error { return wasmkeep.Put("seed", []byte("1")) }); err != nil {
		t.Fatal(err)
	}
	mine := errors.New("mine")
	if err := h.Run(func() error { _ = wasmkeep.Put("seed", []byte("2")); return mine }); err != mine {
		t.Fatalf("Run = %v, want f's own error", err)
	}
	if v, _ := h.Get("seed"); string(v) != "1" {
		t.Errorf("seed = %q, want 1 (the failed Run rolled back)", v)
	}
	if got := h.Keys(); len(got) != 1 || got[0] != "seed" {
		t.Errorf("Keys() = %v", got)
	}
}

// A guest reads the identity WithActor gave, the default without it, and
// nothing outside an event.
func TestSelfIsTheActorsIdentity(t *testing.T) {
	id := wasmkeeptest.ActorID{Tenant: "acme", Class: "orders", Name: "o/42"}
	h := newHost(t, wasmkeeptest.WithActor(id))
	wasmkeep.HandleRequest(func([]byte) ([]byte, error) {
		self, err := wasmkeep.Self()
		return []byte(self.String()), err
	})
	if got, err := h.Request(nil); err != nil || string(got) != "acme/orders/o/42" {
		t.Fatalf("Request answered %q, %v; want acme/orders/o/42", got, err)
	}
	if _, err := wasmkeep.Self(); !errors.Is(err, wasmkeep.EPERM) {
		t.Errorf("Self() outside an event: %v, want EPERM", err)
	}
	h.Close()
	h = newHost(t)
	if err := h.Run(func() error {
		self, err := wasmkeep.Self()
		if err == nil && self != wasmkeeptest.DefaultActor {
			err = fmt.Errorf("Self() = %+v, want DefaultActor %+v", self, wasmkeeptest.DefaultActor)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

func TestOneHostAtATime(t *testing.T) {
	h := newHost(t)
	func() {
		defer func() {
			if recover() == nil {
				t.Error("a second New while one is installed did not panic")
			}
		}()
		wasmkeeptest.New()
	}()
	h.Close()
	if err := wasmkeep.Put("k", nil); !errors.Is(err, wasmkeep.EPERM) {
		t.Errorf("Put after Close = %v, want EPERM", err)
	}
	h2 := wasmkeeptest.New()
	h2.Close()
}
