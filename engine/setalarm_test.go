package engine_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/hostmod"
)

// The host sets and clears an alarm from outside without calling the
// guest: no instance is started, the change commits (it is read back from
// the file), the failure count of a failing alarm goes back to 0, and the
// alarm set this way is delivered to on-alarm at its time.
func TestTheHostSetsAndClearsAnAlarmWithoutTheGuest(t *testing.T) {
	e := newEnv(t)
	c := e.scripted()
	a := e.open(c, "a")
	e.req(a, "mode fail")
	e.req(a, "set 1800000000000")
	if d := e.deliver(a); !d.Ran || d.Err == nil || d.Failures != 1 {
		t.Fatalf("the failing run: %+v", d)
	}
	a.Close(e.ctx)
	a = e.open(c, "a") // no instance: only a guest call would start one
	e.req(a, "mode ok")
	a.Close(e.ctx)
	a = e.open(c, "a")

	res, err := a.SetAlarm(e.ctx, ptr(t0+5_000))
	if err != nil {
		t.Fatal(err)
	}
	if res.Alarm == nil || *res.Alarm != t0+5_000 || res.Failures != 0 || !res.AlarmChanged {
		t.Fatalf("set from outside: %+v, want the alarm at +5s, failures 0, changed", res)
	}
	if live := e.eng.Residency().LiveInstances; live != 0 {
		t.Fatalf("%d instances live after the host set the alarm, want 0: the guest was called", live)
	}
	a.Close(e.ctx)
	a = e.open(c, "a")
	if st := e.state(a); st.Alarm == nil || *st.Alarm != t0+5_000 || st.Failures != 0 {
		t.Fatalf("committed state read from the file: %+v", st)
	}
	if d := e.deliver(a); d.Ran {
		t.Fatalf("delivered before its time: %+v", d)
	}
	e.clock.Set(t0 + 5_000)
	if d := e.deliver(a); !d.Ran || d.Err != nil || d.Scheduled != t0+5_000 || d.RetryCount != 0 || d.Alarm != nil {
		t.Fatalf("delivery at its time: %+v, want on-alarm run for +5s with retry count 0", d)
	}

	e.req(a, "set 1800000100000")
	res, err = a.SetAlarm(e.ctx, nil)
	if err != nil || res.Alarm != nil || !res.AlarmChanged {
		t.Fatalf("clear from outside: %+v, %v", res, err)
	}
	if got := e.req(a, "get"); got != "none" {
		t.Fatalf("the guest reads alarm %q after the clear, want none", got)
	}
	// Clearing what is clear commits and changes nothing.
	if res, err := a.SetAlarm(e.ctx, nil); err != nil || res.Alarm != nil || res.AlarmChanged {
		t.Fatalf("clearing again: %+v, %v", res, err)
	}
}

// A hook before the commit sees the alarm the host is about to commit and
// writes into the same transaction; a hook that fails leaves the alarm as
// it was.
func TestTheHostsAlarmEventRunsTheHookBeforeItsCommit(t *testing.T) {
	e := newEnv(t)
	a := e.open(e.scripted(), "a")
	e.req(a, "set 1800000000000")
	res, err := a.SetAlarmBefore(e.ctx, ptr(t0+60_000), func(ctx context.Context, p *engine.Pending) error {
		if p.Alarm == nil || *p.Alarm != t0+60_000 || p.Failures != 0 {
			t.Errorf("the hook saw %+v, want the alarm at +60s about to commit", p.State)
		}
		return p.SetMeta(hostmod.MetaAlarmIndexed, "1800000060000/1-ab")
	})
	if err != nil || (res.Alarm == nil || *res.Alarm != t0+60_000) {
		t.Fatalf("%+v, %v", res, err)
	}
	if st := e.state(a); st.Indexed != "1800000060000/1-ab" || (st.Alarm == nil || *st.Alarm != t0+60_000) {
		t.Fatalf("state after the event: %+v", st)
	}
	refused := errors.New("the index PUT failed")
	if _, err := a.SetAlarmBefore(e.ctx, nil, func(context.Context, *engine.Pending) error { return refused }); !errors.Is(err, refused) {
		t.Fatalf("error %v, want the hook's", err)
	}
	if st := e.state(a); st.Alarm == nil || *st.Alarm != t0+60_000 {
		t.Fatalf("state after a failed hook: %+v, want the alarm unchanged", st)
	}
}

// What the host refuses commits nothing and says why, naming the actor.
func TestTheHostsAlarmEventRefusesWhatCouldNeverBeDelivered(t *testing.T) {
	e := newEnv(t)
	fresh := e.open(e.scripted(), "fresh") // on-init never ran
	if _, err := fresh.SetAlarm(e.ctx, ptr(t0)); !errors.Is(err, engine.ErrNotInitialised) || !contains(err, "t1/scripted/fresh") {
		t.Fatalf("an actor that does not exist: %v, want ErrNotInitialised naming it", err)
	}
	if st := e.state(fresh); st.Alarm != nil || st.InitRecorded {
		t.Fatalf("state after the refusal: %+v, want nothing", st)
	}
	a := e.open(e.scripted(), "a")
	e.req(a, "set 1800000000000")
	for _, at := range []int64{-1, abi.MaxAlarmMillis + 1} {
		if _, err := a.SetAlarm(e.ctx, ptr(at)); !errors.Is(err, engine.ErrAlarmOutOfRange) || !contains(err, "t1/scripted/a") {
			t.Fatalf("time %d: %v, want ErrAlarmOutOfRange naming the actor", at, err)
		}
	}
	if res, err := a.SetAlarm(e.ctx, ptr(abi.MaxAlarmMillis)); err != nil || (res.Alarm == nil || *res.Alarm != abi.MaxAlarmMillis) {
		t.Fatalf("the latest time: %+v, %v", res, err)
	}
}

func ptr(v int64) *int64 { return &v }

func contains(err error, s string) bool { return err != nil && strings.Contains(err.Error(), s) }
