package engine_test

import (
	"testing"
	"time"

	"github.com/wasmkeep/alarms/engine"
)

// TestASuccessEndsTheBackoff: an alarm fails three times, then its handler
// succeeds without setting another. The success commits a failure count of
// 0, so the actor's state, read again after the actor was closed and
// opened (a restart, or hibernation), no longer shows the failures of an
// alarm that was handled (the retry count an operator reads in its alarm
// state), and the next alarm that fails is retried after the base delay
// again (docs/design.md#retries).
func TestASuccessEndsTheBackoff(t *testing.T) {
	e := newEnv(t, engine.WithBackoff(time.Second, 8*time.Second))
	cls := e.scripted()
	a := e.open(cls, "a")
	e.req(a, "mode fail")
	e.req(a, "set "+itoa(t0))
	now := int64(t0)
	for i, delay := range []int64{1000, 2000, 4000} {
		if d := e.deliver(a); !d.Ran || d.Err == nil || d.Failures != i+1 || (d.Alarm == nil || *d.Alarm != now+delay) {
			t.Fatalf("failure %d: %+v, want a retry at +%d with %d failures", i+1, d, delay, i+1)
		}
		now += delay
		e.clock.Set(now)
	}
	e.req(a, "mode ok")
	if d := e.deliver(a); !d.Ran || d.Err != nil || d.Alarm != nil {
		t.Fatalf("the success %+v, want a run that leaves no alarm", d)
	}
	if err := a.Close(e.ctx); err != nil {
		t.Fatal(err)
	}
	a = e.open(cls, "a")
	if s := e.state(a); s.Failures != 0 || s.Alarm != nil {
		t.Fatalf("after the success the committed state has %d failures (alarm %v), want 0 and no alarm", s.Failures, s.Alarm != nil)
	}

	next := now + 60_000
	e.req(a, "mode fail")
	e.req(a, "set "+itoa(next))
	e.clock.Set(next)
	d := e.deliver(a)
	if !d.Ran || d.Err == nil || d.RetryCount != 0 || d.Failures != 1 || (d.Alarm == nil || *d.Alarm != next+1000) {
		t.Fatalf("the next alarm's first failure: %+v, want retry count 0, 1 failure and a retry 1 s later at %d", d, next+1000)
	}
}
