package node_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/internal/testguest"
	"github.com/wasmkeep/alarms/node"
)

// The longest identity abi accepts lives a whole life on a real file system
// and in the bucket: its database and companions under the data directory,
// a restart's scan, a joining node's first upload with its index entry, and
// a takeover on a node that never ran it, where the sweep reads the actor
// back from the entry's key and fires its alarm.
func TestTheLongestIdentityFitsTheDataDirectoryAndTheBucket(t *testing.T) {
	t.Parallel()
	ixBuckets(t, func(t *testing.T, b bucket.Bucket) {
		ctx := context.Background()
		id := abi.ActorID{
			Tenant: strings.Repeat("t", abi.MaxTenantLen),
			Class:  strings.Repeat("c", abi.MaxClassLen),
			Name:   strings.Repeat("\xff/.\x00", abi.MaxNameLen)[:abi.MaxNameLen],
		}
		classes := map[string][]byte{id.Class: testguest.Fixture(t, "oneshot_alarm")}
		dir := t.TempDir()
		t1 := time.Now().Add(time.Second).UnixMilli()

		solo, err := node.New(ctx, node.Config{DataDir: dir, Classes: classes})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := solo.Request(ctx, id, setBody(t1)); err != nil {
			t.Fatalf("set on the single node: %v", err)
		}
		if err := solo.Close(ctx); err != nil {
			t.Fatal(err)
		}
		// A restart finds it by its file name.
		solo, err = node.New(ctx, node.Config{DataDir: dir, Classes: classes})
		if err != nil {
			t.Fatal(err)
		}
		if at, ok := solo.Timer().Get(id.Path()); !ok || at != t1 {
			t.Fatalf("after a restart the timer holds %d, %v for the actor; want %d", at, ok, t1)
		}
		if err := solo.Close(ctx); err != nil {
			t.Fatal(err)
		}

		cLog := &ixDeliveries{}
		cfg := ixConfig{classes: classes, tenants: []string{id.Tenant}}
		c := cfg
		c.log = cLog
		ixNode(t, b, "c", t.TempDir(), c)
		j := cfg
		j.noStart = true
		jn := ixNode(t, b, "j", dir, j)
		snap, e := ixNamed(t, b, id)
		if e.DueMs != t1 || e.Actor != id {
			t.Fatalf("the first snapshot %s names %+v, want the actor's entry at %d", snap.Key, e, t1)
		}
		if n := len(e.String()); n > 1024 {
			t.Fatalf("index key of %d bytes", n)
		}
		jn.Crash()
		cLog.wait(t, id, "the alarm firing on c", ran(t1))

	})
}

// A cluster configuration that would let a key outgrow S3's limit, or that
// names a tenant no actor can have, is refused at start.
func TestClusterConfigWithinTheLimits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		c    node.ClusterConfig
		says string
	}{
		{"a prefix over 512 bytes", node.ClusterConfig{Prefix: strings.Repeat("p", node.MaxPrefixLen+1)}, "the cluster prefix is 513 bytes, over the limit of 512 bytes"},
		{"an invalid tenant", node.ClusterConfig{Tenants: []string{"t", "Acme"}}, `the tenant "Acme" does not start`},
	} {
		tc.c.Bucket = bucket.NewMem()
		_, err := node.New(context.Background(), node.Config{DataDir: t.TempDir(), Cluster: &tc.c})
		if err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.says)
		}
	}
}
