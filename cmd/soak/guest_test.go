package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/engine"
)

type guestClock struct{ t time.Time }

func (c *guestClock) Now() time.Time { return c.t }

// After is never called: the host module and the engine wait on no clock.
func (c *guestClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// The soak actor writes "run <scheduled> <retry count>" to stdout on every
// on-alarm run, a failed one included, before the run commits: the soak
// counts runs from these lines.
func TestTheSoakActorSaysEachRun(t *testing.T) {
	ctx := context.Background()
	clock := &guestClock{t: time.UnixMilli(1_700_000_000_000)}
	var stdout bytes.Buffer
	eng, err := engine.NewEngine(ctx, engine.WithClock(clock), engine.WithBackoff(time.Second, time.Minute),
		engine.WithGuestOutput(&stdout, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close(ctx)
	wasm, err := os.ReadFile(filepath.Join("..", "..", "examples", "soak-actor", "soak_actor.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	class, err := eng.Compile(ctx, "soak", wasm)
	if err != nil {
		t.Fatal(err)
	}
	a, err := eng.Open(ctx, abi.ActorID{Tenant: "soak", Class: "soak", Name: "a"}, class, filepath.Join(t.TempDir(), "a.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	due := clock.t.UnixMilli() + 5
	// Arm: fail once, then re-arm every 10 s.
	if _, err := a.Request(ctx, request(1, due, 1, 10_000, 1)); err != nil {
		t.Fatal(err)
	}
	clock.t = time.UnixMilli(due)
	d, err := a.DeliverAlarm(ctx)
	if err != nil || !d.Ran || d.Err == nil {
		t.Fatalf("first run: %+v, %v; want a failed run", d, err)
	}
	clock.t = time.UnixMilli(*d.Alarm)
	d2, err := a.DeliverAlarm(ctx)
	if err != nil || !d2.Ran || d2.Err != nil {
		t.Fatalf("the retry: %+v, %v; want it run", d2, err)
	}
	want := fmt.Sprintf("run %d 0\nrun %d 1\n", due, d2.Scheduled)
	if got := stdout.String(); got != want {
		t.Fatalf("stdout %q, want %q", got, want)
	}
}
