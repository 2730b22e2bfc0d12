package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
)

// Hold is this node's right to run one actor: the actor's ownership record
// names this node, written in the current epoch of its lease. Holds.Valid
// tells whether it still stands.
type Hold struct {
	// Actor is the actor held.
	Actor abi.ActorID
	// Generation is higher than that of every earlier hold of the actor, on
	// any node. Index entries are tagged with it (alarm rule R3).
	Generation uint64
	// NodeID is the holding node (this one).
	NodeID string

	etag  string // ETag of the ownership record this hold wrote
	epoch uint64 // lease epoch it was taken in
}

// HeldElsewhereError is returned by Acquire when another node holds the
// actor and its lease has not expired. Find it with errors.As.
type HeldElsewhereError struct {
	Actor abi.ActorID
	// NodeID and Addr name the holder, for routing the request there.
	NodeID string
	Addr   string
}

// Error says which node holds the actor.
func (e *HeldElsewhereError) Error() string {
	return fmt.Sprintf("actor %s is held by node %s (%s)", e.Actor, e.NodeID, e.Addr)
}

// holdRecord is the body of an ownership record. NodeID is empty once
// released; Generation never goes down.
type holdRecord struct {
	NodeID     string `json:"node_id"`
	Generation uint64 `json:"generation"`
	Addr       string `json:"addr"`
	// Instance is the holding process's lease instance: a hold of an
	// earlier process under a node ID that a later one took back is void.
	// Empty in records written before it existed.
	Instance string `json:"instance,omitempty"`
}

// Holds takes, checks and releases this node's holds of actors. Create it
// with NewHolds. It is safe for concurrent use; callers run one event at a
// time per actor, and so do not race themselves for one actor.
type Holds struct {
	b      bucket.Bucket
	prefix string
	l      *Leases
	log    hclog.Logger

	mu   sync.Mutex
	mine map[abi.ActorID]Hold // holds taken and not released

	taken, takeovers, released, releaseErrs atomic.Int64
}

// HoldStats counts what a node's Holds did since they were made.
type HoldStats struct {
	// Taken counts holds taken: ownership records this node wrote naming
	// itself with a new generation.
	Taken int64
	// Takeovers counts the holds among them taken from another node whose
	// lease had expired (a failover).
	Takeovers int64
	// Released counts holds given up; ReleaseErrors those whose record
	// could not be written back (taken over meanwhile, or the bucket
	// failed).
	Released, ReleaseErrors int64
}

// Stats returns the counters.
func (h *Holds) Stats() HoldStats {
	return HoldStats{Taken: h.taken.Load(), Takeovers: h.takeovers.Load(), Released: h.released.Load(), ReleaseErrors: h.releaseErrs.Load()}
}

// NewHolds returns the holds of the node whose lease is l, with ownership
// records under <prefix>holds/ in b (prefix "" means DefaultPrefix). A nil
// logger logs nothing.
func NewHolds(b bucket.Bucket, prefix string, l *Leases, logger hclog.Logger) *Holds {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &Holds{
		b:      b,
		prefix: prefix,
		l:      l,
		log:    logger.Named("holds").With("node", l.NodeID()),
		mine:   map[abi.ActorID]Hold{},
	}
}

// Key returns the object key of the actor's ownership record:
// <prefix>holds/<tenant>/<class>/<name as hex>.
func (h *Holds) Key(id abi.ActorID) string { return HoldKey(h.prefix, id) }

func (h *Holds) errorf(id abi.ActorID, format string, args ...any) error {
	return &abi.ActorError{ID: id, Op: "hold on node " + h.l.NodeID(), Err: fmt.Errorf(format, args...)}
}

// ErrLeaseNotValid is wrapped by Acquire's errors when this node's lease is
// not valid (a renewal is late, the node was cut off from the bucket):
// nothing was done for the actor, and the same call may succeed once the
// lease is renewed, or find another node holding the actor.
var ErrLeaseNotValid = errors.New("this node's lease is not valid")

// Acquire takes the actor's hold for this node, or returns the one it has.
//
// It reads the ownership record. If there is none, it creates it with
// generation 1 (If-None-Match). If it names this node and this node took it
// in the current lease epoch, the hold is returned as it is (same
// generation). If it was released, names this node from an earlier epoch, or
// names a node whose lease has expired (read afresh after the record, see
// Leases.Expired), it writes a record naming this node with the next
// generation, If-Match the record read. If it names another node whose lease
// has not expired, Acquire returns a *HeldElsewhereError. A conditional write
// that fails means another node raced: the record is read once more and the
// error reports who holds the actor (or wraps bucket.ErrPrecondition if it
// is free again).
//
// Acquire refuses to work while this node's lease is not valid, and fails if
// the lease lapsed while it worked.
func (h *Holds) Acquire(ctx context.Context, id abi.ActorID) (Hold, error) {
	if err := id.Validate(); err != nil {
		return Hold{}, err
	}
	epoch, ok := h.l.validEpoch()
	if !ok {
		return Hold{}, h.errorf(id, "%w", ErrLeaseNotValid)
	}
	key := h.Key(id)
	body, etag, err := h.b.Get(ctx, key)
	if errors.Is(err, bucket.ErrNotFound) {
		return h.take(ctx, id, epoch, 1, bucket.Cond{IfNoneMatch: true})
	}
	if err != nil {
		return Hold{}, h.errorf(id, "reading the ownership record: %w", err)
	}
	rec, err := parseHold(body)
	if err != nil {
		return Hold{}, h.errorf(id, "ownership record %s: %w", key, err)
	}
	switch rec.NodeID {
	case h.l.NodeID():
		h.mu.Lock()
		have, ok := h.mine[id]
		h.mu.Unlock()
		if ok && have.etag == etag && have.epoch == epoch {
			return have, nil
		}
		// Written by this node in an earlier epoch: someone may be about to
		// take it, so take it anew, conditionally.
	case "":
	default:
		expired, err := h.l.readLease(ctx, rec.NodeID)
		if err != nil {
			return Hold{}, h.errorf(id, "checking holder %s: %w", rec.NodeID, err)
		}
		// The lease was read after the record: an instance other than the
		// record's is a later process's, which took the node ID back only
		// once the record's process had expired.
		if !expired && !h.l.earlierInstance(rec.NodeID, rec.Instance) {
			return Hold{}, &HeldElsewhereError{Actor: id, NodeID: rec.NodeID, Addr: rec.Addr}
		}
		h.log.Info("taking over from a node whose lease expired", "actor", id, "from", rec.NodeID, "instance", rec.Instance, "generation", rec.Generation+1)
		hold, err := h.take(ctx, id, epoch, rec.Generation+1, bucket.Cond{IfMatch: etag})
		if err == nil {
			h.takeovers.Add(1)
		}
		return hold, err
	}
	return h.take(ctx, id, epoch, rec.Generation+1, bucket.Cond{IfMatch: etag})
}

// take writes an ownership record naming this node with generation gen.
func (h *Holds) take(ctx context.Context, id abi.ActorID, epoch, gen uint64, cond bucket.Cond) (Hold, error) {
	if e, ok := h.l.validEpoch(); !ok || e != epoch {
		return Hold{}, h.errorf(id, "%w: it lapsed before taking the hold", ErrLeaseNotValid)
	}
	key := h.Key(id)
	self := holdRecord{NodeID: h.l.NodeID(), Generation: gen, Addr: h.l.cfg.Addr, Instance: h.l.instance}
	body, _ := json.Marshal(self)
	etag, err := h.b.Put(ctx, key, body, cond)
	if errors.Is(err, bucket.ErrPrecondition) {
		// Someone raced us, or a retry of this PUT found its first attempt
		// landed: read once more and report.
		rbody, retag, rerr := h.b.Get(ctx, key)
		if rerr != nil {
			return Hold{}, h.errorf(id, "lost a race for the hold (%w); reading the record again: %w", err, rerr)
		}
		rec, perr := parseHold(rbody)
		switch {
		case perr != nil:
			return Hold{}, h.errorf(id, "ownership record %s: %w", key, perr)
		case rec == self:
			etag, err = retag, nil // our own PUT landed
		case rec.NodeID != "" && rec.NodeID != self.NodeID:
			return Hold{}, &HeldElsewhereError{Actor: id, NodeID: rec.NodeID, Addr: rec.Addr}
		default:
			return Hold{}, h.errorf(id, "lost a race for the hold, the record changed to generation %d; try again: %w", rec.Generation, err)
		}
	}
	if err != nil {
		return Hold{}, h.errorf(id, "writing the ownership record (generation %d): %w", gen, err)
	}
	hold := Hold{Actor: id, Generation: gen, NodeID: self.NodeID, etag: etag, epoch: epoch}
	h.mu.Lock()
	h.mine[id] = hold
	h.mu.Unlock()
	h.taken.Add(1)
	if e, ok := h.l.validEpoch(); !ok || e != epoch {
		return Hold{}, h.errorf(id, "%w: it lapsed while taking the hold (generation %d)", ErrLeaseNotValid, gen)
	}
	return hold, nil
}

// Valid reports whether hold still stands: this node took it in the current
// epoch of its lease, has not released it, and the lease is valid. This is
// the lease view the alarm rules ask for.
func (h *Holds) Valid(hold Hold) bool {
	epoch, ok := h.l.validEpoch()
	if !ok || hold.epoch != epoch || hold.NodeID != h.l.NodeID() {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	have, ok := h.mine[hold.Actor]
	return ok && have.etag == hold.etag
}

// Release gives the hold up: it writes the record with no node and the same
// generation, If-Match the record this hold wrote, so the next hold gets a
// higher generation and a hold another node has taken since is left alone
// (an error wrapping bucket.ErrPrecondition). It works with a lapsed lease.
func (h *Holds) Release(ctx context.Context, hold Hold) error {
	id := hold.Actor
	if hold.etag == "" || hold.NodeID != h.l.NodeID() {
		return h.errorf(id, "releasing a hold this node did not take")
	}
	h.mu.Lock()
	if have, ok := h.mine[id]; ok && have.etag == hold.etag {
		delete(h.mine, id)
	}
	h.mu.Unlock()
	body, _ := json.Marshal(holdRecord{Generation: hold.Generation})
	if _, err := h.b.Put(ctx, h.Key(id), body, bucket.Cond{IfMatch: hold.etag}); err != nil {
		h.releaseErrs.Add(1)
		if errors.Is(err, bucket.ErrPrecondition) {
			return h.errorf(id, "releasing generation %d: the record changed since (taken over or released): %w", hold.Generation, err)
		}
		return h.errorf(id, "releasing generation %d: %w", hold.Generation, err)
	}
	h.released.Add(1)
	return nil
}

// Lookup tells where to route a request for the actor, with one GET: held is
// false if no node holds it (no record, released, or the holder's lease is
// known to be expired); otherwise holder names the node and its address. A
// record naming this node counts as held while this node's lease is valid.
// A holder this node has not observed yet counts as holding.
func (h *Holds) Lookup(ctx context.Context, id abi.ActorID) (holder NodeInfo, held bool, err error) {
	if err := id.Validate(); err != nil {
		return NodeInfo{}, false, h.errorf(id, "%w", err)
	}
	body, _, err := h.b.Get(ctx, h.Key(id))
	if errors.Is(err, bucket.ErrNotFound) {
		return NodeInfo{}, false, nil
	}
	if err != nil {
		return NodeInfo{}, false, h.errorf(id, "reading the ownership record: %w", err)
	}
	rec, err := parseHold(body)
	if err != nil {
		return NodeInfo{}, false, h.errorf(id, "ownership record %s: %w", h.Key(id), err)
	}
	switch {
	case rec.NodeID == "":
		return NodeInfo{}, false, nil
	case rec.NodeID == h.l.NodeID():
		if !h.l.Valid() {
			return NodeInfo{}, false, nil
		}
	case h.l.Expired(rec.NodeID):
		return NodeInfo{}, false, nil
	case rec.Instance != "" && h.l.earlierInstance(rec.NodeID, rec.Instance):
		// Seen a later process of the node ID: make sure with a read made
		// after the record's (the view may be older than the record).
		if _, err := h.l.readLease(ctx, rec.NodeID); err != nil {
			return NodeInfo{}, false, h.errorf(id, "checking holder %s: %w", rec.NodeID, err)
		}
		if h.l.Expired(rec.NodeID) || h.l.earlierInstance(rec.NodeID, rec.Instance) {
			return NodeInfo{}, false, nil
		}
	}
	return NodeInfo{ID: rec.NodeID, Addr: rec.Addr}, true, nil
}

// Ownership is an actor's ownership record as it stands in the bucket,
// for tools that inspect a cluster without joining it.
type Ownership struct {
	// NodeID names the holder; empty once released.
	NodeID     string `json:"node_id"`
	Generation uint64 `json:"generation"`
	Addr       string `json:"addr"`
	// Instance is the holding process's lease instance.
	Instance string `json:"instance,omitempty"`
}

// HoldKey is the object key of the actor's ownership record under prefix
// ("" means DefaultPrefix).
func HoldKey(prefix string, id abi.ActorID) string {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return prefix + "holds/" + id.Path()
}

// ReadOwnership reads the actor's ownership record with one GET, writing
// nothing; ok is false when the actor has none.
func ReadOwnership(ctx context.Context, b bucket.Bucket, prefix string, id abi.ActorID) (rec Ownership, ok bool, err error) {
	body, _, err := b.Get(ctx, HoldKey(prefix, id))
	if errors.Is(err, bucket.ErrNotFound) {
		return Ownership{}, false, nil
	}
	if err != nil {
		return Ownership{}, false, &abi.ActorError{ID: id, Op: "read the ownership record", Err: err}
	}
	hr, err := parseHold(body)
	if err != nil {
		return Ownership{}, false, &abi.ActorError{ID: id, Op: "ownership record " + HoldKey(prefix, id), Err: err}
	}
	return Ownership(hr), true, nil
}

func parseHold(body []byte) (holdRecord, error) {
	var rec holdRecord
	if err := json.Unmarshal(body, &rec); err != nil {
		return holdRecord{}, fmt.Errorf("unreadable: %w", err)
	}
	if rec.NodeID != "" && rec.Generation == 0 {
		return holdRecord{}, errors.New("names a node with generation 0")
	}
	if rec.Generation == math.MaxUint64 {
		// The next holder's generation would wrap to 0 and rank below
		// every earlier one.
		return holdRecord{}, errors.New("has the last generation there is")
	}
	if strings.Contains(rec.NodeID, "/") {
		return holdRecord{}, fmt.Errorf("names node %.100q, which holds '/'", rec.NodeID)
	}
	return rec, nil
}
