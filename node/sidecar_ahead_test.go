package node_test

import (
	"context"
	"testing"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/node"
)

// A database ahead of the snapshot its sidecar names, with commits not yet
// uploaded, is kept when the node takes the actor again, so that a node
// killed before an upload loses none of them (the sidecar,
// TestAKeyAheadOfTheBucketIsUploadedBeforeItsReplay). That holds for an
// actor whose newest snapshot is a tombstone too: the actor created again
// after a delete, whose first commit the killed node never uploaded.
func TestADatabaseAheadOfItsSidecarIsKeptAlsoAfterADelete(t *testing.T) {
	t.Parallel()
	for _, deleted := range []bool{false, true} {
		name := map[bool]string{false: "live", true: "recreated after a delete"}[deleted]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := bucket.NewMem()
			classes := scripted(t)
			id := abi.ActorID{Tenant: "t", Class: "s", Name: "again"}
			dir := t.TempDir()
			a := startHost(t, b, "a", dir, classes, hostConfig{})
			do(t, a, id, node.ExecDurable, "put k v1")
			if deleted {
				if err := a.Delete(ctx, id); err != nil {
					t.Fatal(err)
				}
				// Taken again: the tombstone restored, the actor open.
				if _, err := a.State(ctx, id); err != nil {
					t.Fatal(err)
				}
			}
			if err := a.Close(ctx); err != nil {
				t.Fatal(err)
			}
			// The commit a killed node made and never uploaded (an
			// exec's, acknowledged before its upload).
			eng, err := engine.NewEngine(ctx)
			if err != nil {
				t.Fatal(err)
			}
			class, err := eng.Compile(ctx, "s", classes["s"])
			if err != nil {
				t.Fatal(err)
			}
			local, err := eng.Open(ctx, id, class, node.Path(dir, id))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := local.Request(ctx, []byte("put k v2")); err != nil {
				t.Fatal(err)
			}
			local.Close(ctx)
			eng.Close(ctx)

			a2 := startHost(t, b, "a", dir, classes, hostConfig{})
			if v := do(t, a2, id, node.ExecDurable, "getkv k"); v != "v2" {
				t.Fatalf("the restarted node read %q, want v2, its commit not yet uploaded, kept as for an actor that was never deleted", v)
			}
		})
	}
}
