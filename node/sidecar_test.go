package node_test

import (
	"context"
	"os"
	"testing"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/node"
)

// A node taking an actor keeps its local database only if the database is
// there: an operator who removed it to have it downloaded again (or a disk
// that lost it) gets the bucket's state back, never a new, empty actor,
// even though the sidecar naming the bucket's newest snapshot stayed.
func TestARemovedLocalDatabaseIsRestoredEvenWithItsSidecarLeft(t *testing.T) {
	t.Parallel()
	b := bucket.NewMem()
	classes := scripted(t)
	id := abi.ActorID{Tenant: "t", Class: "s", Name: "r"}
	dir := t.TempDir()
	a := startHost(t, b, "a", dir, classes, hostConfig{})
	do(t, a, id, node.ExecDurable, "put k v1")
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	p := node.Path(dir, id)
	if _, err := os.Stat(p + ".sync"); err != nil {
		t.Fatalf("the released actor has no sidecar (%v): the test sees nothing", err)
	}
	for _, f := range []string{p, p + "-wal", p + "-shm"} {
		if err := os.Remove(f); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	a2 := startHost(t, b, "a2", dir, classes, hostConfig{})
	if v := do(t, a2, id, node.ExecDurable, "getkv k"); v != "v1" {
		t.Fatalf("after its database was removed the actor read %q, want v1 from the bucket", v)
	}
}
