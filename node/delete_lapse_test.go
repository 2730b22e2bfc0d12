package node_test

import (
	"context"
	"testing"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/node"
)

// A delete is acknowledged only if its tombstone counts: an upload that
// returns after its hold lapsed counts for nothing (docs/design.md#hold-recheck),
// since another node may have taken the actor over meanwhile and restored
// the snapshot before it. Here a's tombstone PUT is held up at the bucket
// while a is cut off from renewing its lease; b takes the actor over and
// restores v1; then a's tombstone lands and returns. If a's Delete says it
// succeeded, the actor must read as deleted everywhere after it.
func TestADeleteIsNotAcknowledgedWhenItsTombstoneReturnsAfterTheHoldLapsed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	id := abi.ActorID{Tenant: "t", Class: "s", Name: "doomed"}
	l := lapseDuringUpload(t, id, func(a *node.Node) error { return a.Delete(ctx, id) })
	// After the delete returned, the actor is read on b, which holds it,
	// and then on a node that takes it from the bucket.
	vb := do(t, l.b, id, node.ExecDurable, "getkv k")
	if err := l.b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	c := startHost(t, l.mem, "c", t.TempDir(), l.classes, hostConfig{})
	vc := do(t, c, id, node.ExecDurable, "getkv k")
	if l.err == nil && (vb == "v1" || vc == "v1") {
		t.Fatalf("a's Delete succeeded (its tombstone returned after a's hold lapsed), yet after it the actor read %q on b and %q on the next holder: an acknowledged delete was lost", vb, vc)
	}
	if l.err == nil {
		t.Fatal("a's Delete, whose tombstone returned after its hold lapsed, succeeded")
	}
}
