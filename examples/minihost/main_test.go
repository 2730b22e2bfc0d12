package main

import (
	"context"
	"testing"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/alarmstest"
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
