package engine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/hostmod"
)

// A hook before the commit sees what the alarm event is about to commit,
// and a meta row it writes commits with the event: the index updater of a
// cluster records the entry it listed in the event's own transaction.
func TestAHookBeforeCommitWritesIntoTheEvent(t *testing.T) {
	e := newEnv(t)
	a := e.open(e.scripted(), "a")
	e.req(a, "mode set:1800000060000")
	e.req(a, "set 1800000000000")
	var kept *engine.Pending
	d, err := a.DeliverAlarmBefore(e.ctx, func(ctx context.Context, p *engine.Pending) error {
		if p.Alarm == nil || *p.Alarm != t0+60_000 || p.Failures != 0 || p.Indexed != "" || !p.Open() {
			t.Errorf("the hook saw %+v, want the handler's alarm at +60s about to commit", p.State)
		}
		kept = p
		return p.SetMeta(hostmod.MetaAlarmIndexed, "1800000060000/1-ab")
	})
	if err != nil || !d.Ran || d.Err != nil || (d.Alarm == nil || *d.Alarm != t0+60_000) {
		t.Fatalf("delivery %+v, %v", d, err)
	}
	if err := kept.SetMeta(hostmod.MetaAlarmIndexed, "late"); err == nil || kept.Open() {
		t.Fatal("a meta row was written after the event's transaction ended")
	}
	reads := a.StateReads()
	if st := e.state(a); st.Indexed != "1800000060000/1-ab" || (st.Alarm == nil || *st.Alarm != t0+60_000) {
		t.Fatalf("state after the event: %+v", st)
	}
	if got := a.StateReads() - reads; got != 0 {
		t.Fatalf("the state was read back %d times after the event, want 0", got)
	}
	// From the file, not only from what the actor keeps.
	a.Close(e.ctx)
	a = e.open(e.scripted(), "a")
	if st := e.state(a); st.Indexed != "1800000060000/1-ab" || (st.Alarm == nil || *st.Alarm != t0+60_000) {
		t.Fatalf("state read from the file: %+v", st)
	}
	if got := e.req(a, "getkv log"); got != "1800000000000:0" {
		t.Fatalf("handler log %q", got)
	}
}

// A hook that fails rolls the whole event back, the handler's writes and
// the hook's own, as a failure of the host: the alarm stays due, the
// failure count unchanged, and the error is the hook's.
func TestAFailingHookRollsTheEventBack(t *testing.T) {
	e := newEnv(t, engine.WithBackoff(time.Second, 8*time.Second))
	a := e.open(e.scripted(), "a")
	e.req(a, "mode set:1800000060000")
	e.req(a, "set 1800000000000")
	refused := errors.New("the index PUT failed")
	_, err := a.DeliverAlarmBefore(e.ctx, func(ctx context.Context, p *engine.Pending) error {
		if err := p.SetMeta(hostmod.MetaAlarmIndexed, "1800000060000/1-ab"); err != nil {
			return err
		}
		return refused
	})
	if !errors.Is(err, refused) {
		t.Fatalf("error %v, want the hook's", err)
	}
	if st := e.state(a); st.Alarm == nil || *st.Alarm != t0 || st.Failures != 0 || st.Indexed != "" {
		t.Fatalf("state after a failed hook: %+v, want the alarm still due and nothing recorded", st)
	}
	if got := e.req(a, "getkv log"); got != "none" {
		t.Fatalf("handler log %q after a failed hook, want the run rolled back", got)
	}

	// A failing handler's committed retry goes through the hook too.
	e.req(a, "mode fail")
	d, err := a.DeliverAlarmBefore(e.ctx, func(ctx context.Context, p *engine.Pending) error {
		if p.Alarm == nil || *p.Alarm != t0+1000 || p.Failures != 1 {
			t.Errorf("the hook saw %+v, want the retry at +1s with one failure", p.State)
		}
		return p.SetMeta(hostmod.MetaAlarmIndexed, "1800000001000/1-cd")
	})
	if err != nil || !d.Ran || d.Err == nil || (d.Alarm == nil || *d.Alarm != t0+1000) || d.Failures != 1 {
		t.Fatalf("failed run %+v, %v", d, err)
	}
	if st := e.state(a); st.Indexed != "1800000001000/1-cd" || st.Failures != 1 {
		t.Fatalf("state after the retry committed: %+v", st)
	}
}
