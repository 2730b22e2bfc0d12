package engine_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/internal/testguest"
)

// TestRetriesEndAfterMaxAttempts: with a limit of three attempts, a poison
// alarm runs three times on the committed backoff, then is cleared rather
// than retried; the actor keeps a dead letter (when, how many attempts, the
// last error), and nothing runs again. The count and the dead letter are
// in the database, so they survive the engine's restart: an alarm that
// failed twice before the restart gives up on its first failure after it.
func TestRetriesEndAfterMaxAttempts(t *testing.T) {
	e := newEnv(t, engine.WithBackoff(time.Second, 8*time.Second), engine.WithMaxAttempts(3))
	a := e.open(e.scripted(), "a")
	e.req(a, "mode fail")
	e.req(a, "set 1800000000000")
	now := int64(t0)
	for i, wantDelay := range []int64{1000, 2000} {
		d := e.deliver(a)
		if !d.Ran || d.Err == nil || d.GaveUp || d.Alarm == nil || *d.Alarm != now+wantDelay || d.Failures != i+1 {
			t.Fatalf("attempt %d: %+v; want a retry at +%d ms with %d failures", i+1, d, wantDelay, i+1)
		}
		now += wantDelay
		e.clock.Set(now)
	}
	if _, ok, err := a.DeadLetter(e.ctx); ok || err != nil {
		t.Fatalf("a dead letter before the last attempt (err %v)", err)
	}

	// The engine stops and a new one opens the same database.
	if err := a.Close(e.ctx); err != nil {
		t.Fatal(err)
	}
	eng2, err := engine.NewEngine(e.ctx, engine.WithClock(e.clock), engine.WithBackoff(time.Second, 8*time.Second), engine.WithMaxAttempts(3))
	if err != nil {
		t.Fatal(err)
	}
	defer eng2.Close(e.ctx)
	e.eng = eng2
	a = e.open(e.scripted(), "a")
	d := e.deliver(a)
	if !d.Ran || d.Err == nil || !d.GaveUp || d.RetryCount != 2 || d.Alarm != nil || d.Failures != 0 {
		t.Fatalf("third attempt, after a restart: %+v; want it given up: no alarm, no failures", d)
	}
	if got := e.req(a, "get"); got != "none" {
		t.Fatalf("get-alarm after the retries were given up = %q, want none", got)
	}
	dl, ok, err := a.DeadLetter(e.ctx)
	if err != nil || !ok {
		t.Fatalf("dead letter: %+v, %v, %v", dl, ok, err)
	}
	if dl.Attempts != 3 || dl.Scheduled != now || dl.FailedAt != now || !strings.Contains(dl.Error, "on-alarm") {
		t.Fatalf("dead letter %+v; want 3 attempts, scheduled and failed at %d, the guest's error", dl, now)
	}
	e.clock.Set(now + time.Hour.Milliseconds())
	if d := e.deliver(a); d.Ran {
		t.Fatalf("ran again after the retries were given up: %+v", d)
	}

	// A new alarm starts a new count; succeeding keeps the dead letter.
	e.req(a, "mode ok")
	e.req(a, "set "+itoa(now+time.Hour.Milliseconds()))
	if d := e.deliver(a); !d.Ran || d.Err != nil || d.GaveUp {
		t.Fatalf("a new alarm after the dead letter: %+v", d)
	}
	if dl2, ok, _ := a.DeadLetter(e.ctx); !ok || dl2 != dl {
		t.Fatalf("the dead letter changed on a success: %+v", dl2)
	}
}

// TestClassMaxAttemptsOverridesTheEngine: a class's own limit wins over the
// engine's, and 0 for a class means no limit for it.
func TestClassMaxAttemptsOverridesTheEngine(t *testing.T) {
	e := newEnv(t, engine.WithMaxAttempts(5), engine.WithClassMaxAttempts("scripted", 0), engine.WithClassMaxAttempts("once", 1))
	unlimited := e.open(e.scripted(), "a")
	once := e.open(e.class("once", testguest.Build(t, "testdata/guests/scripted")), "b")
	defaulted := e.open(e.class("other", testguest.Build(t, "testdata/guests/scripted")), "c")
	for _, a := range []*engine.Actor{unlimited, once, defaulted} {
		e.req(a, "mode fail")
		e.req(a, "set 1800000000000")
	}
	if d := e.deliver(once); !d.Ran || !d.GaveUp || d.Alarm != nil {
		t.Fatalf("the first attempt of a class limited to 1: %+v, want it given up", d)
	}
	now := int64(t0)
	for i := range 8 {
		d := e.deliver(unlimited)
		if !d.Ran || d.GaveUp || d.Alarm == nil {
			t.Fatalf("attempt %d of a class without a limit: %+v", i+1, d)
		}
		d = e.deliver(defaulted)
		if i < 4 && (!d.Ran || d.GaveUp || d.Alarm == nil) || i == 4 && (!d.Ran || !d.GaveUp || d.Alarm != nil) || i > 4 && d.Ran {
			t.Fatalf("attempt %d of a class under the engine's limit of 5: %+v", i+1, d)
		}
		now += 10 * time.Minute.Milliseconds()
		e.clock.Set(now)
	}
}

// TestMaxAttemptsRefusesNegative: a negative limit is an error naming it.
func TestMaxAttemptsRefusesNegative(t *testing.T) {
	ctx := context.Background()
	for _, o := range []engine.Option{engine.WithMaxAttempts(-1), engine.WithClassMaxAttempts("c", -2)} {
		if eng, err := engine.NewEngine(ctx, o); err == nil || !strings.Contains(err.Error(), "max attempts") {
			if eng != nil {
				eng.Close(ctx)
			}
			t.Fatalf("NewEngine with a negative limit: %v", err)
		}
	}
}
