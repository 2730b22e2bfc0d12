package engine_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/hostmod"
	"github.com/wasmkeep/alarms/internal/testguest"
)

// testKey is a context key of the tests' own.
type testKey struct{}

// stopWait bounds how long a test waits for a looping guest to be stopped:
// far past every deadline the tests set, so only a guest that is never
// stopped reaches it.
const stopWait = 30 * time.Second

// within runs f and fails the test if it has not returned within stopWait.
// f's calls take ctx: past stopWait it is canceled, so that a guest the
// deadline failed to stop ends, and the test with it.
func within(t *testing.T, what string, f func(ctx context.Context) error) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	select {
	case err := <-done:
		return err
	case <-time.After(stopWait):
		cancel()
		<-done
		t.Fatalf("%s: still running after %v", what, stopWait)
		return nil
	}
}

// Each call into an instance has its own deadline, whatever the calls
// before it had: an on-alarm run with a short deadline is stopped at it
// right after a request with a long one, and again on the next run; a
// stopped run leaves nothing behind for the next request.
func TestEachCallIsStoppedAtItsOwnDeadline(t *testing.T) {
	e := newEnv(t, engine.WithAlarmDeadline(300*time.Millisecond), engine.WithEventDeadline(time.Hour))
	a := e.open(e.class("hostile", testguest.Fixture(t, "hostile")), "loop")
	for run := 1; run <= 2; run++ {
		// A request (its deadline an hour away) sets the alarm, then the
		// alarm's looping on-alarm runs.
		if got := errnos([]byte(e.req(a, string(hostileReq('a', uint64(t0+int64(run)*10_000)))))); !eq(got, []uint32{0}) {
			t.Fatalf("run %d: set-alarm errno %v", run, got)
		}
		e.clock.Set(t0 + int64(run)*10_000)
		var d hostmod.Delivery
		if err := within(t, "a looping on-alarm with a 300 ms deadline", func(ctx context.Context) (err error) {
			d, err = a.DeliverAlarm(ctx)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if !d.Ran || d.Err == nil || !strings.Contains(d.Err.Error(), "300ms deadline") || d.Failures != 1 {
			t.Fatalf("run %d: delivery %+v, want on-alarm stopped at its 300ms deadline, one failure", run, d)
		}
	}
	if got := errnos([]byte(e.req(a, string(hostileReq('a', t0+99_000))))); !eq(got, []uint32{0}) {
		t.Fatalf("a request after the stopped runs: errno %v", got)
	}
}

// A guest is never stopped before its deadline: a request that starts
// while the deadline timer is still set for an earlier call's deadline
// runs to its own.
func TestAGuestRunsUntilItsOwnDeadline(t *testing.T) {
	const deadline = 600 * time.Millisecond
	e := newEnv(t, engine.WithEventDeadline(deadline))
	a := e.open(e.class("hostile", testguest.Fixture(t, "hostile")), "loop")
	e.req(a, "") // its deadline is the timer's
	time.Sleep(deadline / 2)
	start := time.Now()
	err := within(t, "a looping request", func(ctx context.Context) error {
		_, err := a.Request(ctx, []byte("l"))
		return err
	})
	ran := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "deadline") {
		t.Fatalf("a looping request: %v, want it stopped at its deadline", err)
	}
	if ran < deadline {
		t.Fatalf("the looping request was stopped after %v, before its %v deadline", ran, deadline)
	}
}

// The caller's context stops a guest when it ends during the call: a
// context used for many calls (as a node does) as well as a new one, and
// a context that ended before the call stops it at once. The deadline is
// an hour: only the context can stop these.
func TestTheCallersContextStopsAGuest(t *testing.T) {
	e := newEnv(t, engine.WithEventDeadline(time.Hour))
	a := e.open(e.class("hostile", testguest.Fixture(t, "hostile")), "loop")
	loopUntilCanceled := func(ctx context.Context, cancel context.CancelFunc, what string) {
		t.Helper()
		go func() {
			time.Sleep(100 * time.Millisecond)
			cancel()
		}()
		err := within(t, what, func(context.Context) error {
			_, err := a.Request(ctx, []byte("l"))
			return err
		})
		var ae *abi.ActorError
		if !errors.Is(err, context.Canceled) && (!errors.As(err, &ae) || !strings.Contains(err.Error(), "canceled")) {
			t.Fatalf("%s: %v, want it stopped as canceled", what, err)
		}
		if strings.Contains(err.Error(), "deadline") {
			t.Fatalf("%s: %v, names a deadline that did not pass", what, err)
		}
	}

	long, cancelLong := context.WithCancel(context.Background())
	for i := 0; i < 3; i++ {
		if _, err := a.Request(long, nil); err != nil {
			t.Fatal(err)
		}
	}
	loopUntilCanceled(long, cancelLong, "a looping request under a context used before")

	// Another context's call runs (on a new instance); the canceled
	// context then stops a call to that instance before it runs.
	if _, err := a.Request(e.ctx, nil); err != nil {
		t.Fatalf("a request after the canceled one: %v", err)
	}
	if _, err := a.Request(long, nil); !errors.Is(err, context.Canceled) && (err == nil || !strings.Contains(err.Error(), "canceled")) {
		t.Fatalf("a request under a canceled context: %v, want it stopped as canceled", err)
	}
	// A new context: calls run, and its end stops the guest.
	if _, err := a.Request(e.ctx, nil); err != nil {
		t.Fatalf("a request after the canceled ones: %v", err)
	}
	fresh, cancelFresh := context.WithCancel(context.WithValue(context.Background(), testKey{}, "v"))
	loopUntilCanceled(fresh, cancelFresh, "a looping request under a new context")
	if _, err := a.Request(e.ctx, nil); err != nil {
		t.Fatalf("a request after the canceled ones: %v", err)
	}
}

// A caller's context that ends after its call stops no later call made
// under a context that cannot end: a node's HTTP request cancels its
// context as its handler returns, which may be while the next event, from
// context.Background, runs in the same instance (that event was stopped
// as canceled, and its instance closed).
func TestAnEarlierCallersContextStopsNoLaterCall(t *testing.T) {
	const deadline = 500 * time.Millisecond
	e := newEnv(t, engine.WithEventDeadline(deadline))
	a := e.open(e.class("hostile", testguest.Fixture(t, "hostile")), "loop")
	earlier, cancel := context.WithCancel(context.Background())
	if _, err := a.Request(earlier, nil); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := a.Request(context.Background(), []byte("l")) // loops until its deadline
		errc <- err
	}()
	waitBusy(t, e.eng, 1)
	cancel() // the earlier call's context ends while the loop runs
	err := <-errc
	if err == nil || !strings.Contains(err.Error(), "deadline") || strings.Contains(err.Error(), "canceled") {
		t.Fatalf("a looping request under context.Background: %v, want it stopped at its own deadline, not by the earlier call's context", err)
	}
}
