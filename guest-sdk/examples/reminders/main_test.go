//go:build !wasip1

package main

import (
	"testing"
	"time"

	"github.com/wasmkeep/alarms/guest-sdk/wasmkeeptest"
)

// The actor's handlers, run natively against the fake host: reminders fire
// when the clock reaches them, a cancelled one does not, and the digest
// runs each day at 09:00 UTC.
func TestReminders(t *testing.T) {
	h := wasmkeeptest.New(wasmkeeptest.WithTime(time.Date(2025, 5, 1, 8, 0, 0, 0, time.UTC)))
	t.Cleanup(h.Close)
	send := func(req string) string {
		t.Helper()
		resp, err := h.Request([]byte(req))
		if err != nil {
			t.Fatalf("%s: %v", req, err)
		}
		return string(resp)
	}
	send("remind tea 300 put the kettle on")
	send("remind call 60 call Ann")
	send("remind gone 120 never sent")
	if got := send("cancel gone"); got != "true" {
		t.Fatalf("cancel gone = %q, want true", got)
	}
	want := "remind/call at 2025-05-01T08:01:00Z\nremind/tea at 2025-05-01T08:05:00Z\ndigest cron 2025-05-01T09:00:00Z\n"
	if got := send("list"); got != want {
		t.Fatalf("list =\n%s\nwant\n%s", got, want)
	}
	h.Advance(24 * time.Hour)
	want = "2025-05-01T08:01:00Z call: call Ann\n2025-05-01T08:05:00Z tea: put the kettle on\n"
	if got := send("sent"); got != want {
		t.Fatalf("sent =\n%s\nwant\n%s", got, want)
	}
	if v, _ := h.Get("digests"); string(v) != "1" {
		t.Errorf("digests = %q after one 09:00, want 1", v)
	}
	if at, ok := h.Alarm(); !ok || !at.Equal(time.Date(2025, 5, 2, 9, 0, 0, 0, time.UTC)) {
		t.Errorf("alarm %v %v, want the next digest", at, ok)
	}
}

// An interval ticks on time, ticks once for the ticks it missed while its
// node was down, and the actor knows its own name. (guest-sdk/README.md
// quotes this test.)
func TestIntervalTicksOnceForWhatItMissed(t *testing.T) {
	h := wasmkeeptest.New(wasmkeeptest.WithTime(time.Date(2025, 5, 1, 8, 0, 0, 0, time.UTC)),
		wasmkeeptest.WithActor(wasmkeeptest.ActorID{Tenant: "acme", Class: "reminders", Name: "ann"}))
	t.Cleanup(h.Close)
	if _, err := h.Request([]byte("every beat 30")); err != nil {
		t.Fatal(err)
	}
	h.Advance(95 * time.Second) // ticks at 08:00:30, 08:01:00, 08:01:30
	h.Down(10 * time.Minute)    // the node is down: 20 ticks missed
	if fired := h.Advance(0); len(fired) != 1 {
		t.Fatalf("%d deliveries after the outage, want 1", len(fired))
	}
	if n, _ := h.Get("ticks/beat"); string(n) != "4" {
		t.Errorf("ticks = %s, want 4", n)
	}
	if at, _ := h.Alarm(); !at.Equal(time.Date(2025, 5, 1, 8, 12, 0, 0, time.UTC)) {
		t.Errorf("next tick at %v, want 08:12:00 (the interval keeps its phase)", at)
	}
	if me, err := h.Request([]byte("whoami")); err != nil || string(me) != "acme/reminders/ann" {
		t.Errorf("whoami = %q, %v", me, err)
	}
}
