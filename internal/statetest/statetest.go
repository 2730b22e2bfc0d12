// Package statetest plants an actor's replicated state in a bucket the way
// the cluster writes it, for tests that need a state no node wrote (a bad
// snapshot, a foreign database): the snapshot of a hold, and a released
// ownership record that names it, so that a node taking the actor restores
// it (cluster.ReadState).
package statetest

import (
	"context"
	"fmt"
	"testing"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/cluster"
)

// Plant writes data as the snapshot of actor id's hold of generation gen
// under prefix ("" means cluster.DefaultPrefix), and the actor's ownership
// record, released at that generation, naming it. It returns the
// snapshot's key.
func Plant(t testing.TB, b bucket.Bucket, prefix string, id abi.ActorID, gen uint64, data []byte) string {
	t.Helper()
	if prefix == "" {
		prefix = cluster.DefaultPrefix
	}
	ctx := context.Background()
	key := cluster.NewReplica(b, prefix).Key(id, gen, 0)
	if data == nil {
		data = []byte{}
	}
	etag, err := b.Put(ctx, key, data, bucket.Cond{})
	if err != nil {
		t.Fatalf("planting the snapshot of %s: %v", id, err)
	}
	rec := fmt.Sprintf(`{"node_id":"","generation":%d,"addr":"","state":"%020d-%020d","state_etag":%q}`, gen, gen, 0, etag)
	if _, err := b.Put(ctx, cluster.HoldKey(prefix, id), []byte(rec), bucket.Cond{}); err != nil {
		t.Fatalf("planting the ownership record of %s: %v", id, err)
	}
	return key
}
