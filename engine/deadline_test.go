package engine_test

import (
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/hostmod"
	"github.com/wasmkeep/alarms/internal/testguest"
)

// Each class has its own deadlines: a class named in
// WithClassAlarmDeadline or WithClassEventDeadline is stopped at its own,
// the others at the engine's. The error names the deadline that stopped
// the guest, and a handler stopped at its deadline is a failure with its
// retry committed.
func TestDeadlinesPerClass(t *testing.T) {
	e := newEnv(t,
		engine.WithAlarmDeadline(100*time.Millisecond), engine.WithClassAlarmDeadline("patient", 700*time.Millisecond),
		engine.WithEventDeadline(150*time.Millisecond), engine.WithClassEventDeadline("patient", 900*time.Millisecond))
	wasm := testguest.Fixture(t, "hostile")
	for _, tc := range []struct {
		class        string
		alarm, event string
	}{
		{"hasty", "stopped at the 100ms deadline", "stopped at the 150ms deadline"},
		{"patient", "stopped at the 700ms deadline", "stopped at the 900ms deadline"},
	} {
		t.Run(tc.class, func(t *testing.T) {
			a := e.openAs(e.class(tc.class, wasm), "t", tc.class)
			if _, err := a.Request(e.ctx, []byte("l")); err == nil || !strings.Contains(err.Error(), tc.event) {
				t.Fatalf("a request that loops: %v, want an error saying %q", err, tc.event)
			}
			if _, err := a.Request(e.ctx, hostileReq('a', t0)); err != nil {
				t.Fatal(err)
			}
			d := e.deliver(a)
			if !d.Ran || d.Err == nil || !strings.Contains(d.Err.Error(), tc.alarm) {
				t.Fatalf("an on-alarm that loops: %+v, want a failure saying %q", d, tc.alarm)
			}
			if d.Alarm == nil || *d.Alarm != t0+int64(hostmod.DefaultRetryBase/time.Millisecond) || d.Failures != 1 {
				t.Fatalf("committed %+v, want the first retry", d.Result)
			}
		})
	}
}

// A deadline that is not positive is refused, naming the class.
func TestABadClassDeadlineIsRefused(t *testing.T) {
	_, err := engine.NewEngine(t.Context(), engine.WithClassAlarmDeadline("batch", 0))
	if err == nil || !strings.Contains(err.Error(), `"batch"`) {
		t.Fatalf("NewEngine with a zero deadline for class batch: %v, want an error naming it", err)
	}
}
