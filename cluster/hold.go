package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/format"
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

	// State is the actor's newest replicated state as this hold knows
	// it: the snapshot the hold found when it was taken (the Key is ""
	// when the bucket had none), then, once it uploaded, its own (see
	// Holds.Uploaded). Read from the ownership records, never from a
	// listing alone (see ReadState).
	State Snapshot

	etag  string // ETag of the ownership record this hold wrote
	epoch uint64 // lease epoch it was taken in

	// fetched is State's body when Acquire read it to learn the state (a
	// GET of the record's hold's own snapshot, where a HEAD would tell
	// only that it exists): the restore needs no second request. Only
	// the Hold Acquire returns carries it, never the one Holds keeps.
	fetched *[]byte
}

// Fetched returns the body of State when taking the hold already read it,
// and whether it did; the caller restores from it instead of downloading
// State again.
func (h Hold) Fetched() ([]byte, bool) {
	if h.fetched == nil {
		return nil, false
	}
	return *h.fetched, true
}

// WithoutFetched is the hold without the body Fetched returns: the one to
// keep, so the body is not held for as long as the hold.
func (h Hold) WithoutFetched() Hold {
	h.fetched = nil
	return h
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
	// Format is the record's format version (format.HoldVersion); none
	// (0) in records written before versions: version 1. parseHold
	// checks it before any other field.
	Format     int    `json:"format"`
	NodeID     string `json:"node_id"`
	Generation uint64 `json:"generation"`
	Addr       string `json:"addr"`
	// Instance is the holding process's lease instance: a hold of an
	// earlier process under a node ID that a later one took back is void.
	// Empty in records written before it existed.
	Instance string `json:"instance,omitempty"`
	// State names the actor's newest snapshot as the record's writer knew
	// it: the one the hold found when it was taken, or, in a release, the
	// hold's own last upload. "none" when there was none, else the last
	// segment of the snapshot's key (<generation>-<seq>). The newest state
	// is the key of the record's own generation if that hold uploaded,
	// else this one (see ReadState). Empty in records written before
	// records named the state: the newest key a listing shows is the
	// state then.
	State string `json:"state,omitempty"`
	// StateETag is the ETag of that snapshot when it was noted, if known.
	StateETag string `json:"state_etag,omitempty"`
	// LeaseSeq is the sequence number of the writer's lease version that
	// had last landed, to the writer's knowledge, when it wrote the
	// record: a taker that has judged a version of that instance's lease
	// with this sequence number or a later one expired takes the hold
	// without reading the lease again (see "Taking over on a judgement
	// already made" in the package documentation). Zero in records written
	// before it existed, and in releases: the lease is read, as before.
	// Adding it took no new format version: a reader of an earlier build
	// ignores it and reads the lease, as it always did.
	LeaseSeq uint64 `json:"lease_seq,omitempty"`
}

// stateNone is holdRecord.State for "the bucket has no state".
const stateNone = "none"

// Holds takes, checks and releases this node's holds of actors. Create it
// with NewHolds. It is safe for concurrent use; callers run one event at a
// time per actor, and so do not race themselves for one actor.
type Holds struct {
	b      bucket.Bucket
	prefix string
	r      *Replica
	l      *Leases
	log    hclog.Logger

	mu   sync.Mutex
	mine map[abi.ActorID]Hold // holds taken and not released
	// refused are the actors a take found held by another node, with the
	// holder and until when (a lease TTL) Acquire answers so again
	// without a request, unless the holder's lease is seen removed or
	// judged expired meanwhile, or Doubt drops it.
	refused map[abi.ActorID]refusal

	taken, takeovers, released, releaseErrs, retaken  atomic.Int64
	fromMemory, newer, leaseReadsSkipped, refusedRead atomic.Int64
	refusedWatched                                    atomic.Int64
}

// refusal is a take refused because another node held the actor.
type refusal struct {
	nodeID, addr string
	until        time.Time // on the lease's clock
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
	// Retaken counts the holds among Taken that Retake took again after a
	// lapse, each with one conditional write.
	Retaken int64
	// RefusedFromMemory counts the refusals Refused reported: takes not
	// tried, the actor found held by a live node within a lease TTL
	// before.
	RefusedFromMemory int64
	// NewerFormat counts the ownership records read that were of a
	// format newer than this build reads: each refused (Acquire, Lookup)
	// with an error wrapping a *format.NewerError.
	NewerFormat int64
	// Refused counts the takes Acquire refused after reading the record
	// and the holder's lease, found live: two GETs each. RefusedWatched
	// counts those it refused on the record alone, this node's readings of
	// the leases having shown the holder's renewed within a TTL: one GET.
	Refused, RefusedWatched int64
	// LeaseReadsSkipped counts the takeovers among Takeovers that read no
	// lease: the record named a version of the holder's lease this node
	// had already judged expired, or an earlier one of the same process.
	LeaseReadsSkipped int64
}

// Stats returns the counters.
func (h *Holds) Stats() HoldStats {
	return HoldStats{Taken: h.taken.Load(), Takeovers: h.takeovers.Load(), Released: h.released.Load(), ReleaseErrors: h.releaseErrs.Load(), Retaken: h.retaken.Load(), RefusedFromMemory: h.fromMemory.Load(), NewerFormat: h.newer.Load(), LeaseReadsSkipped: h.leaseReadsSkipped.Load(), Refused: h.refusedRead.Load(), RefusedWatched: h.refusedWatched.Load()}
}

// parse reads the actor's ownership record (key) with parseHold, and
// counts and logs one of a newer format.
func (h *Holds) parse(id abi.ActorID, key string, body []byte) (holdRecord, error) {
	rec, err := parseHold(body)
	if err == nil {
		return rec, nil
	}
	if newer, ok := format.As(err); ok {
		h.newer.Add(1)
		h.log.Warn("the actor's ownership record is of a format newer than this build reads; refused, left as it is",
			"actor", id.String(), "key", key, "format", newer.Version, "known", newer.Known)
	}
	return holdRecord{}, h.errorf(id, "ownership record %s: %w", key, err)
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
		r:      NewReplica(b, prefix),
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
		// No hold was ever taken, so nothing was ever uploaded.
		return h.take(ctx, id, epoch, 1, bucket.Cond{IfNoneMatch: true}, Snapshot{})
	}
	if err != nil {
		return Hold{}, h.errorf(id, "reading the ownership record: %w", err)
	}
	rec, err := h.parse(id, key, body)
	if err != nil {
		return Hold{}, err
	}
	takeover := false
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
		if h.l.expiredThrough(rec.NodeID, rec.Instance, rec.LeaseSeq) {
			// A version of the holder's lease that this very process
			// wrote after the record was judged expired: the epoch the
			// record was written in has ended, and with it the hold.
			h.leaseReadsSkipped.Add(1)
			takeover = true
			break
		}
		if h.l.renewedLately(rec.NodeID, rec.Instance) {
			// Its holder renewed within a TTL: a read would refuse too.
			h.refusedWatched.Add(1)
			return Hold{}, h.refuse(id, rec.NodeID, rec.Addr)
		}
		expired, err := h.l.readLease(ctx, rec.NodeID)
		if newer, ok := format.As(err); ok {
			// Counted as a read of the lease (Leases.NewerFormatReads).
			h.log.Warn("the actor's holder has a lease of a format newer than this build reads; refused, its hold left as it is",
				"actor", id.String(), "holder", rec.NodeID, "format", newer.Version, "known", newer.Known)
		}
		if err != nil {
			return Hold{}, h.errorf(id, "checking holder %s: %w", rec.NodeID, err)
		}
		// The lease was read after the record: an instance other than the
		// record's is a later process's, which took the node ID back only
		// once the record's process had expired.
		if !expired && !h.l.earlierInstance(rec.NodeID, rec.Instance) {
			h.refusedRead.Add(1)
			return Hold{}, h.refuse(id, rec.NodeID, rec.Addr)
		}
		takeover = true
	}
	// The state is read before the record is written: the record's holder
	// no longer acts (released, expired, or this node's own earlier
	// epoch), so what it confirmed uploading is in the bucket by now, and
	// the write below is conditional on the record read.
	st, fetched, err := stateOf(ctx, h.b, h.r, id, rec, true)
	if err != nil {
		return Hold{}, h.errorf(id, "reading the actor's state: %w", err)
	}
	if takeover {
		// One line per actor at DEBUG: a dead node's backlog is taken
		// over an actor at a time, thousands a second. The judgement is
		// the INFO line ("node lease expired"); Takeovers counts them.
		h.log.Debug("taking over from a node whose lease expired", "actor", id, "from", rec.NodeID, "instance", rec.Instance, "generation", rec.Generation+1)
	}
	hold, err := h.take(ctx, id, epoch, rec.Generation+1, bucket.Cond{IfMatch: etag}, st)
	if err == nil && takeover {
		h.takeovers.Add(1)
	}
	if err == nil && fetched != nil {
		hold.fetched = fetched
	}
	return hold, err
}

// Retake takes again, with one conditional write, a hold this node took
// in an earlier epoch of its lease, which a lapse made void: it writes the
// record naming this node with the next generation, If-Match the record
// that hold wrote, noting the state that hold knew (its own last upload,
// or what it found). The write lands only if no node wrote the record
// since: none took the actor over, so the state that hold knew is still
// the newest, and the caller may keep the actor's local copy (nothing to
// read or restore). Whether that hold uploaded is read with a HEAD of its
// key, as Acquire reads it, unless the hold recorded an upload of its own.
//
// A record that changed since (taken over, or released) fails the write:
// the error is a *HeldElsewhereError or wraps bucket.ErrPrecondition, and
// the caller gives its local copy up and takes the actor with Acquire. So
// does a hold this node released or no longer has. Retake refuses to work
// while the lease is not valid.
func (h *Holds) Retake(ctx context.Context, old Hold) (Hold, error) {
	id := old.Actor
	epoch, ok := h.l.validEpoch()
	if !ok {
		return Hold{}, h.errorf(id, "%w", ErrLeaseNotValid)
	}
	h.mu.Lock()
	have, ok := h.mine[id]
	h.mu.Unlock()
	if !ok || old.etag == "" || have.etag != old.etag || old.NodeID != h.l.NodeID() {
		return Hold{}, h.errorf(id, "retaking generation %d: not this node's latest hold: %w", old.Generation, bucket.ErrPrecondition)
	}
	if have.epoch == epoch {
		return have, nil
	}
	st := have.State
	if own := h.r.Key(id, have.Generation, 0); st.Key != own {
		etag, err := bucket.Head(ctx, h.b, own)
		switch {
		case err == nil:
			st = Snapshot{Key: own, Generation: have.Generation, ETag: etag}
		case !errors.Is(err, bucket.ErrNotFound):
			return Hold{}, h.errorf(id, "reading the actor's state: %w", err)
		}
	}
	hold, err := h.take(ctx, id, epoch, have.Generation+1, bucket.Cond{IfMatch: have.etag}, st)
	if err == nil {
		h.retaken.Add(1)
	}
	return hold, err
}

// refuse remembers that another node holds the actor, for a lease TTL,
// and returns the error that says so.
func (h *Holds) refuse(id abi.ActorID, nodeID, addr string) *HeldElsewhereError {
	h.mu.Lock()
	if h.refused == nil {
		h.refused = map[abi.ActorID]refusal{}
	}
	if len(h.refused) >= maxRefusals {
		now := h.l.clk.Now()
		for a, r := range h.refused {
			if !now.Before(r.until) {
				delete(h.refused, a)
			}
		}
	}
	if len(h.refused) < maxRefusals {
		h.refused[id] = refusal{nodeID: nodeID, addr: addr, until: h.l.clk.Now().Add(h.l.cfg.TTL)}
	}
	h.mu.Unlock()
	return &HeldElsewhereError{Actor: id, NodeID: nodeID, Addr: addr}
}

// maxRefusals bounds the refusals a node remembers; past it, new ones are
// not remembered until old ones expire.
const maxRefusals = 1 << 16

// Refused reports a take of id that Acquire refused within a lease TTL,
// the holder's lease not seen removed or judged expired since, and no
// hold of this node's taken since: a take now would read the record and
// the holder's lease to be refused again. A host answers a client's
// request with it (forwarding the request to the holder) without a
// request to the bucket (docs/design.md#refusals). Nil: take the actor.
func (h *Holds) Refused(id abi.ActorID) *HeldElsewhereError {
	h.mu.Lock()
	r, ok := h.refused[id]
	if ok && !h.l.clk.Now().Before(r.until) {
		delete(h.refused, id)
		ok = false
	}
	if _, mine := h.mine[id]; mine {
		ok = false
	}
	h.mu.Unlock()
	if !ok || h.l.Expired(r.nodeID) {
		return nil
	}
	h.fromMemory.Add(1)
	return &HeldElsewhereError{Actor: id, NodeID: r.nodeID, Addr: r.addr}
}

// Doubt forgets that another node was found holding the actor: the next
// Acquire reads the record again. Call it when the holder could not be
// reached (a forward that found no connection).
func (h *Holds) Doubt(id abi.ActorID) {
	if h == nil {
		return
	}
	h.mu.Lock()
	delete(h.refused, id)
	h.mu.Unlock()
}

// stateOf is the actor's newest replicated state as its ownership record
// rec (just read with a GET) names it: the snapshot of the record's own
// hold if that hold uploaded, else the one the record notes. Whether the
// record's hold uploaded is read with a HEAD of its key, unless the record
// already names that key (a release after an upload); with fetch, a GET,
// whose body it returns when the key exists (a taker restores from it: a
// request fewer than a HEAD and then a download). Nothing is taken
// from a listing: an erasure-coded store may leave a key being overwritten
// out of one (docs/design.md#lists). A record from before records named
// the state is the exception: its state is the newest key a listing shows,
// as then, and the hold taken on it notes that key for every later one.
func stateOf(ctx context.Context, b bucket.Bucket, r *Replica, id abi.ActorID, rec holdRecord, fetch bool) (Snapshot, *[]byte, error) {
	if rec.State == "" {
		s, _, err := r.ListLatest(ctx, id)
		return s, nil, err
	}
	noted, err := parseState(r, id, rec.State, rec.StateETag)
	if err != nil {
		return Snapshot{}, nil, err
	}
	own := r.Key(id, rec.Generation, 0)
	if rec.Generation == 0 || noted.Key == own {
		return noted, nil, nil
	}
	var etag string
	var body *[]byte
	if fetch {
		var data []byte
		data, etag, err = b.Get(ctx, own)
		body = &data
	} else {
		etag, err = bucket.Head(ctx, b, own)
	}
	switch {
	case err == nil:
		return Snapshot{Key: own, Generation: rec.Generation, ETag: etag}, body, nil
	case errors.Is(err, bucket.ErrNotFound):
		return noted, nil, nil
	default:
		return Snapshot{}, nil, err
	}
}

// parseState reads holdRecord.State (not empty).
func parseState(r *Replica, id abi.ActorID, state, etag string) (Snapshot, error) {
	if state == stateNone {
		return Snapshot{}, nil
	}
	s, err := r.Parse(id, r.ActorPrefix(id)+state)
	if err != nil {
		return Snapshot{}, fmt.Errorf("the ownership record names state %.100q: %w", state, err)
	}
	s.ETag = etag
	return s, nil
}

// stateField is holdRecord.State for s.
func (h *Holds) stateField(id abi.ActorID, s Snapshot) string {
	if s.Key == "" {
		return stateNone
	}
	return strings.TrimPrefix(s.Key, h.r.ActorPrefix(id))
}

// take writes an ownership record naming this node with generation gen,
// noting st as the actor's state.
func (h *Holds) take(ctx context.Context, id abi.ActorID, epoch, gen uint64, cond bucket.Cond, st Snapshot) (Hold, error) {
	e, seq, ok := h.l.validEpochSeq()
	if !ok || e != epoch {
		return Hold{}, h.errorf(id, "%w: it lapsed before taking the hold", ErrLeaseNotValid)
	}
	key := h.Key(id)
	self := holdRecord{Format: format.HoldVersion, NodeID: h.l.NodeID(), Generation: gen, Addr: h.l.cfg.Addr, Instance: h.l.instance, State: h.stateField(id, st), StateETag: st.ETag, LeaseSeq: seq}
	body, _ := json.Marshal(self)
	etag, err := h.b.Put(ctx, key, body, cond)
	if errors.Is(err, bucket.ErrPrecondition) {
		// Someone raced us, or a retry of this PUT found its first attempt
		// landed: read once more and report.
		rbody, retag, rerr := h.b.Get(ctx, key)
		if rerr != nil {
			return Hold{}, h.errorf(id, "lost a race for the hold (%w); reading the record again: %w", err, rerr)
		}
		rec, perr := h.parse(id, key, rbody)
		switch {
		case perr != nil:
			return Hold{}, perr
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
	hold := Hold{Actor: id, Generation: gen, NodeID: self.NodeID, State: st, etag: etag, epoch: epoch}
	h.mu.Lock()
	h.mine[id] = hold
	delete(h.refused, id)
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

// Uploaded records s, an upload of hold's own that returned while the
// hold was valid, as the actor's state, and returns the hold with it: a
// release then names it, so the next holder need not read whether this
// hold uploaded. The hold value returned replaces the caller's (a later
// Release of an older copy would name an older state; harmless, since the
// next holder then reads this hold's key, but a request more).
func (h *Holds) Uploaded(hold Hold, s Snapshot) Hold {
	if s.Key != h.r.Key(hold.Actor, hold.Generation, 0) {
		// Not this hold's snapshot (a host bug): a release naming it
		// would name a state the records cannot read back.
		h.log.Error("an upload recorded for a hold is not the hold's snapshot; ignored", "actor", hold.Actor, "generation", hold.Generation, "snapshot", s.Key)
		return hold
	}
	hold.State = s
	h.mu.Lock()
	defer h.mu.Unlock()
	if have, ok := h.mine[hold.Actor]; ok && have.etag == hold.etag {
		have.State = s
		h.mine[hold.Actor] = have
	}
	return hold
}

// Release gives the hold up: it writes the record with no node and the same
// generation, naming the hold's state (its own last upload, or what it
// found), If-Match the record this hold wrote, so the next hold gets a
// higher generation and a hold another node has taken since is left alone
// (an error wrapping bucket.ErrPrecondition). It works with a lapsed lease.
func (h *Holds) Release(ctx context.Context, hold Hold) error {
	id := hold.Actor
	if hold.etag == "" || hold.NodeID != h.l.NodeID() {
		return h.errorf(id, "releasing a hold this node did not take")
	}
	st := hold.State
	h.mu.Lock()
	if have, ok := h.mine[id]; ok && have.etag == hold.etag {
		st = have.State
		delete(h.mine, id)
	}
	h.mu.Unlock()
	body, _ := json.Marshal(holdRecord{Format: format.HoldVersion, Generation: hold.Generation, State: h.stateField(id, st), StateETag: st.ETag})
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
	rec, err := h.parse(id, h.Key(id), body)
	if err != nil {
		return NodeInfo{}, false, err
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
	// Format is the record's format version; 0 in records written before
	// versions (version 1). A record of a newer format than this build
	// reads is refused (ReadOwnership's error wraps a *format.NewerError).
	Format     int    `json:"format,omitempty"`
	NodeID     string `json:"node_id"`
	Generation uint64 `json:"generation"`
	Addr       string `json:"addr"`
	// Instance is the holding process's lease instance.
	Instance string `json:"instance,omitempty"`
	// State and StateETag are the state the record notes (see ReadState):
	// "none", the last segment of a snapshot key, or empty in a record
	// from before records named the state.
	State     string `json:"state,omitempty"`
	StateETag string `json:"state_etag,omitempty"`
	// LeaseSeq is the sequence number of the holder's lease version that
	// had last landed when it wrote the record (0: not noted).
	LeaseSeq uint64 `json:"lease_seq,omitempty"`
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

// ReadState reads the actor's newest replicated state without joining the
// cluster or writing anything: a GET of its ownership record and, unless
// the record already names its own hold's snapshot, a HEAD of that
// snapshot's key (a record from before records named the state: a LIST of
// its snapshots, as then). ok is false when the bucket has no state for
// the actor (it was never held, or no hold uploaded); a deleted actor has
// a tombstone (an empty snapshot). This is what a node restores when it
// takes the actor, and what decides that the bucket "has nothing" for it:
// never a listing's word alone (docs/design.md#lists).
func ReadState(ctx context.Context, b bucket.Bucket, prefix string, id abi.ActorID) (s Snapshot, ok bool, err error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	r := NewReplica(b, prefix)
	read := func() (holdRecord, string, bool, error) {
		body, etag, err := b.Get(ctx, HoldKey(prefix, id))
		if errors.Is(err, bucket.ErrNotFound) {
			return holdRecord{}, "", false, nil
		}
		if err != nil {
			return holdRecord{}, "", false, &abi.ActorError{ID: id, Op: "read the ownership record", Err: err}
		}
		rec, err := parseHold(body)
		if err != nil {
			return holdRecord{}, "", false, &abi.ActorError{ID: id, Op: "ownership record " + HoldKey(prefix, id), Err: err}
		}
		return rec, etag, true, nil
	}
	rec, etag, found, err := read()
	for try := 0; found && err == nil; try++ {
		s, _, err = stateOf(ctx, b, r, id, rec, false)
		if err != nil {
			return Snapshot{}, false, &abi.ActorError{ID: id, Op: "read the actor's state", Err: err}
		}
		if s.Key != "" || try == 4 {
			return s, s.Key != "", nil
		}
		// No state: true only if the record still stands. A node may
		// have taken the actor meanwhile, uploaded and removed the
		// snapshot the record's hold had made (Acquire, which writes
		// on the record it read, needs no such check).
		again, etag2, found2, err2 := read()
		if err2 != nil || !found2 || etag2 == etag {
			return Snapshot{}, false, err2
		}
		rec, etag = again, etag2
	}
	return Snapshot{}, false, err
}

func parseHold(body []byte) (holdRecord, error) {
	if err := format.CheckJSON(format.Hold, body); err != nil {
		return holdRecord{}, err
	}
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
	if rec.State != "" && rec.State != stateNone && !validStateSegment(rec.State) {
		return holdRecord{}, fmt.Errorf("names state %.100q, which is no snapshot", rec.State)
	}
	if g, _, _ := strings.Cut(rec.State, "-"); rec.State != "" && rec.State != stateNone {
		if gen, err := strconv.ParseUint(g, 10, 64); err != nil || gen > rec.Generation {
			// A hold notes a state written before it: a later
			// generation's is no state this record can name.
			return holdRecord{}, fmt.Errorf("names state %.100q of a generation above its own (%d)", rec.State, rec.Generation)
		}
	}
	return rec, nil
}

// validStateSegment reports whether s is the last segment of a snapshot
// key: <generation, 20 digits>-<seq, 20 digits>.
func validStateSegment(s string) bool {
	g, q, ok := strings.Cut(s, "-")
	if !ok || len(g) != 20 || len(q) != 20 {
		return false
	}
	for _, c := range g + q {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
