package node_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmkeep/alarms"
	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/cluster"
	"github.com/wasmkeep/alarms/node"
	"github.com/wasmkeep/alarms/sweeper"
)

// A node gives an actor up when an event's upload fails, and lets its hold
// go. When that release fails too (the node is cut off from the bucket for
// a moment, its lease riding through), the ownership record still names
// the node, whose lease stays live: every other node that takes the actor
// for an overdue entry is refused (held elsewhere) and drops the alarm,
// while the named node holds nothing and its timer lacks the bucket's
// alarm (here the event was a clear, which left the timer empty; its
// upload failed, so the bucket keeps the alarm). The alarm then waited
// until it was anyone's, three margins overdue, and the node named in the
// record took it as such: the soak saw 9.7 s late where the bound is 9 s.
// The release is tried again, so the actor's shard owner takes it a
// margin after it was due, as for any alarm no node's timer has.
func TestAGivenUpActorWhoseReleaseFailedIsDeliveredByItsShardOwner(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := bucket.NewMem()
	// An actor whose shard among {a, b} is b: a holds it, b sweeps it.
	var id abi.ActorID
	for i := 0; ; i++ {
		id = abi.ActorID{Tenant: "t", Class: "s", Name: fmt.Sprintf("g%d", i)}
		if sweeper.Shard(id, []string{"a", "b"}) == "b" {
			break
		}
	}
	// The cut: every PUT of the actor's state and of its ownership record
	// fails (the nodes' leases are untouched).
	stateKey, holdKey := "cluster/state/"+id.Path()+"/", "cluster/holds/"+id.Path()
	var cut atomic.Bool
	mem.Faults = func(op bucket.Op) bucket.Fault {
		if cut.Load() && op.Kind == bucket.OpPut && (strings.HasPrefix(op.Key, stateKey) || op.Key == holdKey) {
			return bucket.Fault{Err: errors.New("injected: cut off from the bucket")}
		}
		return bucket.Fault{}
	}

	var mu sync.Mutex
	var fired []string // the node of each run
	var firedAt []time.Time
	obs := func(name string) func(node.DeliveryEvent) {
		return func(ev node.DeliveryEvent) {
			if ev.Actor != id || !ev.Event.Ran {
				return
			}
			mu.Lock()
			fired = append(fired, name)
			firedAt = append(firedAt, ev.At)
			mu.Unlock()
		}
	}
	classes := scripted(t)
	a := clusterNode(t, mem, "a", t.TempDir(), classes, obs("a"))
	a.Start(ctx)
	defer a.Close(ctx)
	bn := clusterNode(t, mem, "b", t.TempDir(), classes, obs("b"))
	bn.Start(ctx)
	defer bn.Close(ctx)
	live := func(n *node.Node) []string {
		var ids []string
		for _, ni := range n.Leases().Live() {
			ids = append(ids, ni.ID)
		}
		return ids
	}
	waitFor(t, "each node seeing the other live", func() bool {
		return slices.Contains(live(a), "b") && slices.Contains(live(bn), "a")
	})

	// a sets the alarm and uploads it; then a clear, whose upload and
	// release fail: a gives the actor up, its timer empty, the bucket
	// keeping the alarm and the record naming a.
	due := time.Now().Add(1500 * time.Millisecond).UnixMilli()
	do(t, a, id, node.ExecDurable, fmt.Sprintf("set %d", due))
	cut.Store(true)
	if _, err := a.Exec(ctx, id, []byte("clear"), node.ExecDurable); err == nil || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("a clear whose upload failed: %v, want the upload's error", err)
	}
	if at, ok := a.Timer().Get(alarms.TimerKey(id)); ok {
		t.Fatalf("a's timer holds the actor at %d after the clear, want nothing", at)
	}
	if rec, ok, err := cluster.ReadOwnership(ctx, mem, "cluster/", id); err != nil || !ok || rec.NodeID != "a" {
		t.Fatalf("ownership record after the failed release: %+v %v %v, want it still naming a", rec, ok, err)
	}
	cut.Store(false)

	waitFor(t, "the alarm firing", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(fired) > 0
	})
	mu.Lock()
	on, late := fired[0], firedAt[0].UnixMilli()-due
	mu.Unlock()
	// Margin 900 ms (lease 600 + grace 300); anyone's at 2,700 ms. b, its
	// shard owner, may not have listed the tenant since the entry was
	// written (docs/design.md#relist); a, which let the actor go, walks
	// the tenant and delivers the actor's entry as its own. Either way
	// about a margin late, not three.
	t.Logf("fired on %s, %d ms late", on, late)
	if late >= 2700 {
		t.Fatalf("the alarm fired on %s, %d ms late; want about a margin (900 ms) late: "+
			"the record still named a, so b was refused until the entry was anyone's", on, late)
	}
}
