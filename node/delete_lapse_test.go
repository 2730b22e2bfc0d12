package node_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/node"
)

// A delete is acknowledged only if its tombstone counts: an upload that
// returns after its hold lapsed counts for nothing (docs/design.md#state),
// since another node may have taken the actor over meanwhile and restored
// the snapshot before it. Here a's tombstone PUT is held up at the bucket
// while a is cut off from renewing its lease; b takes the actor over and
// restores v1; then a's tombstone lands and returns. If a's Delete says it
// succeeded, the actor must read as deleted everywhere after it.
func TestADeleteIsNotAcknowledgedWhenItsTombstoneReturnsAfterTheHoldLapsed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := bucket.NewMem()
	var slow, cut atomic.Bool
	mem.Faults = func(op bucket.Op) bucket.Fault {
		switch {
		case cut.Load() && op.Kind == bucket.OpPut && op.Key == "cluster/nodes/a":
			return bucket.Fault{Err: errors.New("injected: a is cut off from the bucket")}
		case slow.Load() && op.Kind == bucket.OpPut && strings.HasPrefix(op.Key, "cluster/state/"):
			slow.Store(false)
			return bucket.Fault{Delay: 6 * time.Second}
		}
		return bucket.Fault{}
	}
	classes := scripted(t)
	id := abi.ActorID{Tenant: "t", Class: "s", Name: "doomed"}
	hc := hostConfig{ttl: time.Second, margin: 300 * time.Millisecond, grace: 300 * time.Millisecond}
	z := startHost(t, mem, "z", t.TempDir(), classes, hc)
	do(t, z, id, node.ExecDurable, "put k v1")
	if err := z.Close(ctx); err != nil {
		t.Fatal(err)
	}
	a := startHost(t, mem, "a", t.TempDir(), classes, hc)
	bn := startHost(t, mem, "b", t.TempDir(), classes, hc)
	if v := do(t, a, id, node.ExecDurable, "getkv k"); v != "v1" {
		t.Fatalf("a read %q, want v1", v)
	}
	slow.Store(true)
	done := make(chan error, 1)
	go func() { done <- a.Delete(ctx, id) }()
	waitFor(t, "a's tombstone held up at the bucket", func() bool { return !slow.Load() })
	cut.Store(true)
	waitFor(t, "b taking the actor over", func() bool {
		_, err := bn.State(ctx, id)
		return err == nil
	})
	delErr := <-done
	// After the delete returned, the actor is read on b, which holds it,
	// and then on a node that takes it from the bucket.
	vb := do(t, bn, id, node.ExecDurable, "getkv k")
	if err := bn.Close(ctx); err != nil {
		t.Fatal(err)
	}
	c := startHost(t, mem, "c", t.TempDir(), classes, hostConfig{})
	vc := do(t, c, id, node.ExecDurable, "getkv k")
	if delErr == nil && (vb == "v1" || vc == "v1") {
		t.Fatalf("a's Delete succeeded (its tombstone returned after a's hold lapsed), yet after it the actor read %q on b and %q on the next holder: an acknowledged delete was lost", vb, vc)
	}
	t.Logf("delete: %v; b then read %q, the next holder %q", delErr, vb, vc)
}
