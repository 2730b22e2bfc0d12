package node

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/cluster"
	"github.com/wasmkeep/alarms/hostmod"
	"github.com/wasmkeep/alarms/inspect"
)

// Where a Peek read the state.
const (
	// FromHolder: this node holds the actor and read its database.
	FromHolder = "holder"
	// FromBucket: nobody holds the actor; read from its latest snapshot.
	FromBucket = "bucket"
	// FromNone: the actor does not exist (or was deleted): no alarm.
	FromNone = "none"
)

// Peeked is what Peek read.
type Peeked struct {
	State hostmod.State
	// From is FromHolder, FromBucket or FromNone.
	From string
}

// Peek reads the actor's committed alarm state without creating the actor
// or taking its hold. If this node holds the actor, from its database; if
// another node holds it, a *cluster.HeldElsewhereError names that node (the
// HTTP API forwards the read there); otherwise from the bucket's latest
// snapshot (one GET of the ownership record, then a LIST of the snapshots
// and a GET of the latest), or, on a node running alone, from its data
// directory. An actor that does not exist reads as no alarm.
func (n *Node) Peek(ctx context.Context, id abi.ActorID) (Peeked, error) {
	if err := id.Validate(); err != nil {
		return Peeked{}, err
	}
	n.mu.Lock()
	_, served := n.classes[id.Class]
	e := n.entries[id]
	closed := n.closed
	n.mu.Unlock()
	switch {
	case closed:
		return Peeked{}, fmt.Errorf("actor %s: node closed", id)
	case !served:
		return Peeked{}, fmt.Errorf("actor %s: class %q is %w", id, id.Class, ErrClassNotServed)
	}
	if e != nil {
		e.mu.Lock()
		if e.a != nil && (n.leases == nil || (e.held && n.holds.Valid(e.hold))) {
			st, err := e.a.State(ctx)
			e.mu.Unlock()
			return Peeked{State: st, From: FromHolder}, err
		}
		e.mu.Unlock()
	}
	if n.leases == nil {
		if _, err := os.Stat(n.path(id)); errors.Is(err, os.ErrNotExist) {
			return Peeked{From: FromNone}, nil
		}
		st, err := n.State(ctx, id) // the actor exists here: open it
		return Peeked{State: st, From: FromHolder}, err
	}
	holder, held, err := n.holds.Lookup(ctx, id)
	if err != nil {
		return Peeked{}, err
	}
	if held && holder.ID != n.leases.NodeID() {
		return Peeked{}, &cluster.HeldElsewhereError{Actor: id, NodeID: holder.ID, Addr: holder.Addr}
	}
	info, err := inspect.New(n.cfg.Cluster.Bucket, n.cfg.Cluster.Prefix).Actor(ctx, id)
	if err != nil {
		return Peeked{}, err
	}
	if !info.InBucket || info.Deleted {
		return Peeked{From: FromNone}, nil
	}
	st := hostmod.State{Alarm: info.AlarmMs, Failures: info.RetryCount, Inited: info.InitDone}
	return Peeked{State: st, From: FromBucket}, nil
}
