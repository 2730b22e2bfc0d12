package node_test

import (
	"context"
	"os"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
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
			if got := gathered(t, reg, "wasmkeep_actor_restores_total"); (got == 1) != tc.restore {
				t.Errorf("after removing %q the take restored %v snapshots, want a download: %v", tc.remove, got, tc.restore)
			}
		})
	}
}
