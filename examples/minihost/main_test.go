package main

import (
	"context"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/alarmstest"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/internal/testguest"
)

// The minimal host passes the plugin's conformance kit (a single node).
func TestConformance(t *testing.T) {
	alarmstest.Run(t, alarmstest.Host{Start: func(t testing.TB, cfg alarmstest.NodeConfig) alarmstest.Node {
		h, err := New(context.Background(), cfg.Bucket, t.TempDir(), alarmstest.Class, alarmstest.Guest,
			[]string{alarmstest.Tenant}, cfg.LeaseTTL+cfg.LeaseGrace, cfg.Sweep, cfg.SweepSafety, cfg.OnDelivery)
		if err != nil {
			t.Fatal(err)
		}
		return kitNode{h}
	}})
}

type kitNode struct{ *Host }

func (k kitNode) Request(ctx context.Context, id abi.ActorID, body []byte) error {
	_, err := k.Host.Request(ctx, id, body)
	return err
}

func (k kitNode) Crash() { _ = k.Close(context.Background()) }

// The traps of the recipe, gone: a guest without on-alarm, or with a
// mistyped one, is refused as the class loads, naming the export; a guest
// whose _initialize calls the alarm functions opens, and they answer
// EPERM there.
func TestGuestsTheRecipeOnceTrippedOn(t *testing.T) {
	ctx := context.Background()
	start := func(wasm []byte) (*Host, error) {
		return New(ctx, bucket.NewMem(), t.TempDir(), "c", wasm, []string{"t"}, time.Minute, time.Minute, 0, nil)
	}
	for _, name := range []string{"missing_on_alarm", "wrong_signature"} {
		if h, err := start(testguest.Fixture(t, name)); err == nil || !strings.Contains(err.Error(), `"on-alarm"`) {
			if h != nil {
				h.Close(ctx)
			}
			t.Errorf("%s: %v; want the class refused, naming on-alarm", name, err)
		}
	}
	h, err := start(testguest.Fixture(t, "init_calls"))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(ctx)
	resp, err := h.Request(ctx, abi.ActorID{Tenant: "t", Class: "c", Name: "a"}, nil)
	if err != nil {
		t.Fatalf("an actor whose _initialize calls the alarm functions: %v", err)
	}
	for i := range 3 {
		if len(resp) != 12 || binary.LittleEndian.Uint32(resp[4*i:]) != uint32(abi.EPERM) {
			t.Fatalf("the errnos of _initialize's calls: %v, want EPERM three times", resp)
		}
	}
}
