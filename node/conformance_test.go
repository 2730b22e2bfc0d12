package node_test

import (
	"context"
	"testing"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/alarmstest"
	"github.com/wasmkeep/alarms/node"
)

// The reference host passes the plugin's conformance kit.
func TestConformance(t *testing.T) {
	alarmstest.Run(t, alarmstest.Host{Start: startKitNode, MultiNode: true, IndexPrefix: "cluster/"})
}

type kitNode struct{ *node.Node }

func (k kitNode) Request(ctx context.Context, id abi.ActorID, body []byte) error {
	_, err := k.Exec(ctx, id, body, node.ExecDurable)
	return err
}

func startKitNode(t testing.TB, cfg alarmstest.NodeConfig) alarmstest.Node {
	ctx := context.Background()
	n, err := node.New(ctx, node.Config{
		DataDir: t.TempDir(),
		Classes: map[string][]byte{alarmstest.Class: alarmstest.Guest},
		OnDelivery: func(ev node.DeliveryEvent) {
			cfg.OnDelivery(ev)
		},
		Cluster: &node.ClusterConfig{
			Bucket: cfg.Bucket, NodeID: cfg.Name, Addr: "127.0.0.1:0",
			LeaseTTL: cfg.LeaseTTL, LeaseGrace: cfg.LeaseGrace, LeaseMargin: cfg.LeaseTTL / 5,
			SweepPeriod: cfg.Sweep, SweepSafetyPeriod: cfg.SweepSafety, Tenants: []string{alarmstest.Tenant},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	n.Start(ctx)
	return kitNode{n}
}
