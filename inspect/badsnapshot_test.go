package inspect_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/inspect"
	"github.com/wasmkeep/alarms/internal/statetest"
)

// An actor whose latest snapshot is not a database the host wrote reads
// as engine.ErrBadSnapshot, naming the actor and the snapshot, which a
// retry cannot mend (a node answers 500 for it, not 503), while an actor
// whose snapshot is good reads as before.
func TestAnActorWhoseSnapshotIsNotADatabase(t *testing.T) {
	t.Parallel()
	onBoth(t, func(t *testing.T, b bucket.Bucket) {
		ctx := context.Background()
		good := abi.ActorID{Tenant: "t", Class: "oneshot", Name: "good"}
		cluster(t, b, map[abi.ActorID]int64{good: 1_900_000_000_000})
		bad := abi.ActorID{Tenant: "t", Class: "oneshot", Name: "bad"}
		key := statetest.Plant(t, b, prefix, bad, 1<<40, []byte("not a database"))
		c := inspect.New(b, prefix)
		if _, err := c.Actor(ctx, bad); !errors.Is(err, engine.ErrBadSnapshot) || !strings.Contains(err.Error(), "actor t/oneshot/bad") || !strings.Contains(err.Error(), key) {
			t.Fatalf("Actor of a snapshot that is not a database: %v; want engine.ErrBadSnapshot naming the actor and %s", err, key)
		}
		if info, err := c.Actor(ctx, good); err != nil || info.AlarmMs == nil || *info.AlarmMs != 1_900_000_000_000 {
			t.Fatalf("Actor of a good snapshot: %+v, %v", info, err)
		}
	})
}
