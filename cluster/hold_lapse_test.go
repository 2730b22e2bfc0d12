package cluster_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/cluster"
	"github.com/wasmkeep/alarms/internal/fakeclock"
)

// TestALeaseThatLapsesWhileTakingAHoldTakesNothing: Acquire answers with a
// hold only if the node's lease stayed valid while it took it. The lease
// lapses (the clock passes the creating PUT's window) while the ownership
// record is read: no record is written and Acquire fails naming the actor.
// It lapses while the record is written: Acquire fails too, rather than
// hand the host a hold it may not act on.
func TestALeaseThatLapsesWhileTakingAHoldTakesNothing(t *testing.T) {
	for name, during := range map[string]bucket.OpKind{"read": bucket.OpGet, "write": bucket.OpPut} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			clk := fakeclock.New(t0)
			m := bucket.NewMem()
			a := startNode(t, m, clk, "a")
			key := a.holds.Key(actorX)
			var mu sync.Mutex
			armed, puts := true, 0
			m.Faults = func(op bucket.Op) bucket.Fault {
				mu.Lock()
				defer mu.Unlock()
				if op.Key != key {
					return bucket.Fault{}
				}
				if op.Kind == bucket.OpPut {
					puts++
				}
				if armed && op.Kind == during {
					armed = false
					clk.Advance(9 * time.Second) // the creating PUT's window (TTL - Margin) ends
				}
				return bucket.Fault{}
			}
			h, err := a.holds.Acquire(ctx, actorX)
			if err == nil || !errors.Is(err, cluster.ErrLeaseNotValid) || !strings.Contains(err.Error(), actorX.String()) {
				t.Fatalf("Acquire = %+v, %v; want an error naming %s and the lapsed lease", h, err, actorX)
			}
			mu.Lock()
			defer mu.Unlock()
			if during == bucket.OpGet && puts != 0 {
				t.Errorf("the lease lapsed before the record was written, yet %d PUTs of it were sent", puts)
			}
		})
	}
}
