package inspect_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	clusterpkg "github.com/wasmkeep/alarms/cluster"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/format"
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

// An actor whose snapshot a later build wrote (its schema version above
// this build's) is not read at all: the error wraps a *format.NewerError
// naming the actor and the snapshot, not engine.ErrBadSnapshot.
func TestAnActorWhoseSnapshotIsOfANewerFormat(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := bucket.NewMem()
	good := abi.ActorID{Tenant: "t", Class: "oneshot", Name: "good"}
	cluster(t, b, map[abi.ActorID]int64{good: 1_900_000_000_000})
	s, ok, err := clusterpkg.ReadState(ctx, b, prefix, good)
	if err != nil || !ok {
		t.Fatalf("the good actor's state: %v %v", ok, err)
	}
	data, _, err := clusterpkg.NewReplica(b, prefix).Download(ctx, good, s)
	if err != nil {
		t.Fatal(err)
	}
	later := bytes.Clone(data)
	binary.BigEndian.PutUint32(later[60:], 2) // the schema's version
	id := abi.ActorID{Tenant: "t", Class: "oneshot", Name: "later"}
	key := statetest.Plant(t, b, prefix, id, 1<<40, later)
	_, err = inspect.New(b, prefix).Actor(ctx, id)
	if ne, ok := format.As(err); !ok || ne.Kind != format.Schema || ne.Version != 2 || errors.Is(err, engine.ErrBadSnapshot) ||
		!strings.Contains(err.Error(), "actor t/oneshot/later") || !strings.Contains(err.Error(), key) {
		t.Fatalf("Actor of a snapshot of schema version 2: %v; want a newer schema format naming the actor and %s", err, key)
	}
}
