package guesttest_test

import (
	"testing"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/guesttest"
	"github.com/wasmkeep/alarms/internal/testguest"
)

// A failing on-alarm is retried on the host's committed backoff, and a
// restart between attempts keeps the count: only what committed survives.
func TestTheBackoffSurvivesARestart(t *testing.T) {
	g := guesttest.New(t, testguest.Fixture(t, "fail_on_alarm")) // on-request: set-alarm(1000); on-alarm fails
	if _, err := g.Request(nil); err != nil {
		t.Fatal(err)
	}
	t0 := g.Now()
	first := g.Advance(0)
	if len(first) != 1 || first[0].RetryCount != 0 || first[0].Err == nil || !first[0].Scheduled.Equal(time.UnixMilli(1000).UTC()) {
		t.Fatalf("first delivery %+v, want one failed run at 1000 ms with retry count 0", first)
	}
	if at, ok := g.Alarm(); !ok || !at.Equal(t0.Add(time.Second)) || g.RetryCount() != 1 {
		t.Fatalf("alarm %v %v, retry count %d; want a retry 1 s on, count 1", at, ok, g.RetryCount())
	}
	g.Advance(1500 * time.Millisecond) // the retry at +1 s fails too: the next is 2 s later
	g.Restart()
	if at, _ := g.Alarm(); g.RetryCount() != 2 || !at.Equal(t0.Add(3*time.Second)) {
		t.Fatalf("after a restart: alarm %v, retry count %d; want +3 s and 2", at, g.RetryCount())
	}
	fired := g.Advance(2 * time.Second)
	if len(fired) != 1 || fired[0].RetryCount != 2 || !fired[0].At.Equal(t0.Add(3*time.Second)) {
		t.Fatalf("deliveries %+v, want the third attempt at +3 s with retry count 2", fired)
	}
	if n := len(g.Firings()); n != 3 {
		t.Errorf("%d firings in all, want 3", n)
	}
}

// The Go reminders actor, compiled, in the real host: an interval ticks on
// time and once for what it missed while down, its timers survive a
// restart, and the actor reads the identity it was given.
func TestACompiledGuestsTimers(t *testing.T) {
	g := guesttest.New(t, testguest.Build(t, "guest-sdk/examples/reminders"),
		guesttest.WithTime(time.Date(2025, 5, 1, 8, 0, 0, 0, time.UTC)),
		guesttest.WithActor(abi.ActorID{Tenant: "acme", Class: "reminders", Name: "ann"}))
	if _, err := g.Request([]byte("every beat 30")); err != nil {
		t.Fatal(err)
	}
	if fired := g.Advance(95 * time.Second); len(fired) != 3 {
		t.Fatalf("%d ticks in 95 s, want 3", len(fired))
	}
	g.Restart()
	g.Down(10 * time.Minute)
	if fired := g.Advance(0); len(fired) != 1 || fired[0].Err != nil {
		t.Fatalf("after 10 min down: %+v, want one successful delivery", fired)
	}
	if v, _ := g.Get("ticks/beat"); string(v) != "4" {
		t.Errorf("ticks %q, want 4", v)
	}
	if at, _ := g.Alarm(); !at.Equal(time.Date(2025, 5, 1, 8, 12, 0, 0, time.UTC)) {
		t.Errorf("next tick %v, want 08:12:00", at)
	}
	if me, err := g.Request([]byte("whoami")); err != nil || string(me) != "acme/reminders/ann" {
		t.Errorf("whoami = %q, %v", me, err)
	}
}
