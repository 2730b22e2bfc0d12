package node_test

import (
	"context"
	"os"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/node"
)

// A node taking an actor keeps its local database only if the database is
// there: an operator who removed it to have it downloaded again (or a disk
// that lost it) gets the bucket's state back, never a new, empty actor,
// though the sidecar naming the bucket's newest snapshot stayed. Untouched,
// the local database is kept (no download).
func TestARemovedLocalDatabaseIsRestoredEvenWithItsSidecarLeft(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		remove  []string // suffixes of the database's path
		restore bool     // whether the take downloads the snapshot
	}{
		{"untouched", nil, false},
		{"database", []string{"", "-wal", "-shm"}, true},
		{"database-only", []string{""}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := bucket.NewMem()
			classes := scripted(t)
			id := abi.ActorID{Tenant: "t", Class: "s", Name: "r"}
			dir := t.TempDir()
			a := startHost(t, b, "a", dir, classes, hostConfig{})
			do(t, a, id, node.ExecDurable, "put k v1")
			do(t, a, id, node.ExecDurable, "put k v2")
			if err := a.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			p := node.Path(dir, id)
			if _, err := os.Stat(p + ".sync"); err != nil {
				t.Fatalf("the released actor has no sidecar (%v): the test sees nothing", err)
			}
			if fi, err := os.Stat(p + "-wal"); err != nil || fi.Size() == 0 {
				t.Fatalf("the released actor's WAL is empty (%v): removing it would test nothing", err)
			}
			for _, suffix := range tc.remove {
				if err := os.Remove(p + suffix); err != nil && !os.IsNotExist(err) {
					t.Fatal(err)
				}
			}
			reg := prometheus.NewRegistry()
			a2 := startHost(t, b, "a2", dir, classes, hostConfig{registerer: reg})
			if v := do(t, a2, id, node.ExecDurable, "getkv k"); v != "v2" {
				t.Fatalf("after removing %q the actor read %q, want v2, the bucket's state", tc.remove, v)
			}
			if _, err := os.Stat(p + ".sync"); tc.restore && err == nil {
				// Left, it would vouch for the file just downloaded, not
				// synced until the release: a power cut could empty it.
				t.Errorf("after removing %q the take downloaded and left the sidecar beside the new file", tc.remove)
			}
			if got := gathered(t, reg, "wasmkeep_actor_restores_total"); (got == 1) != tc.restore {
				t.Errorf("after removing %q the take restored %v snapshots, want a download: %v", tc.remove, got, tc.restore)
			}
		})
	}
}

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
