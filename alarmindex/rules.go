package alarmindex

import (
	"errors"
	"fmt"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/internal/variant"
)

// Rules decide what to do to the alarm index from facts the caller gathered;
// the caller does every request.
type Rules struct {
	// Nonces gives the nonce of every new entry. Required when a plan PUTs.
	Nonces Nonces
	// RetryMax is how long an entry kept because the bucket had nothing for
	// the actor waits before it is tried again. Zero: DefaultRetryMax.
	RetryMax time.Duration

	// variants turn safety rules off, for the simulator's unsafe variants
	// only (package internal/variant sets them; production never does).
	variants variant.Set
}

func init() {
	variant.Register(func(rules any, s variant.Set) any {
		r := rules.(Rules)
		r.variants = s
		return r
	})
}

// ErrGiveUp is wrapped by every error of the rules: the index cannot be
// brought in line with the committed alarm, so the node gives the actor up
// (as for a failed upload) rather than replicate an alarm no other node
// could find.
var ErrGiveUp = errors.New("give the actor up")

// GiveUpError says which actor to give up and why. It wraps ErrGiveUp. The
// rules return it as the cause of an *abi.ActorError, which names the actor.
type GiveUpError struct {
	Actor abi.ActorID
	Cause string
	// Err is the failed request's error, if one caused it.
	Err error
}

// Error gives the cause.
func (e *GiveUpError) Error() string {
	return fmt.Sprintf("alarm index: %v: %s", ErrGiveUp, e.Cause)
}

// Unwrap returns ErrGiveUp and the request's error, if any.
func (e *GiveUpError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrGiveUp, e.Err}
	}
	return []error{ErrGiveUp}
}

func giveUp(a abi.ActorID, format string, args ...any) error {
	return &abi.ActorError{ID: a, Err: &GiveUpError{Actor: a, Cause: fmt.Sprintf(format, args...)}}
}

// EventFacts are what the owner knows when an upload of the actor's database
// is about to happen: after an event, in the middle of one (exec-durable),
// or for a joining node's first snapshot.
type EventFacts struct {
	Actor abi.ActorID
	// Alarm is the committed alarm in Unix ms; nil when none is set.
	Alarm *int64
	// Recorded is the entry alarm_indexed names (see ParseRecorded); nil
	// for none.
	Recorded *Key
	// Generation is the owner's hold generation; for exec-durable, the
	// generation of the replica it uploads with.
	Generation uint64
	// HoldValid: the hold exists and the node lease is valid.
	HoldValid bool
}

// IndexPlan is what to do around one upload, in this order:
//
//  1. Put: PUT this empty entry with If-None-Match: *. A "precondition
//     failed" answer means the entry exists (an immediate retry of the same
//     PUT landed): treat it as success. Any other failure: do not upload;
//     give the actor up.
//  2. Record: if set, write FormatRecorded(Recorded) into the alarm_indexed
//     meta in the database, before replicating. On failure: do not upload;
//     give the actor up.
//  3. Replicate (the upload).
//  4. DeleteAfterReplicate: once the upload succeeded and the hold was still
//     valid when it returned, DELETE this entry (an upload that landed after
//     a takeover may have been overtaken by a newer state naming this entry).
//     Failure is harmless (an extra entry, removed when it comes due).
//
// UploadBeforePut is set only by the variant FirstUploadBeforeEntry: then the
// upload happens before steps 1 and 2.
type IndexPlan struct {
	Put                  *Key
	Record               bool
	Recorded             *Key
	DeleteAfterReplicate *Key
	UploadBeforePut      bool
}

// Empty reports a plan that costs no request and changes nothing.
func (p IndexPlan) Empty() bool {
	return p.Put == nil && !p.Record && p.DeleteAfterReplicate == nil
}

func (r Rules) check(a abi.ActorID, alarm *int64, rec *Key, holdValid bool) error {
	// docs/design.md#in-line: Only while its lease is valid and replication is healthy, so
	// what the database names is in the bucket. A lapsed lease is holdValid;
	// unhealthy replication is the failure of the plan's own PUT, meta write
	// or upload, each of which gives the actor up (the executor's error),
	// and of the hold re-check after the upload.
	if !holdValid {
		return giveUp(a, "the hold is not valid (lease lapsed or hold lost)")
	}
	if err := a.Validate(); err != nil {
		return giveUp(a, "%v", err)
	}
	if alarm != nil && (*alarm < 0 || *alarm > MaxDueMs) {
		return giveUp(a, "alarm time %d outside 0..%d", *alarm, int64(MaxDueMs))
	}
	if rec != nil {
		if rec.Actor != a {
			return giveUp(a, "recorded entry belongs to actor %s", rec.Actor)
		}
		if err := rec.Validate(); err != nil {
			return giveUp(a, "recorded entry cannot be read: %v", err)
		}
	}
	return nil
}

// freshKey is R1: "A fresh key for every PUT." Under UntaggedKeys it is the
// legacy key, reused for the same actor and time.
func (r Rules) freshKey(a abi.ActorID, due int64, gen uint64) (*Key, error) {
	var k Key
	if r.variants.UntaggedKeys {
		k = Key{Actor: a, DueMs: due, Legacy: true}
	} else {
		if r.Nonces == nil {
			return nil, giveUp(a, "no nonce source configured for new entries")
		}
		k = Key{Actor: a, DueMs: due, Tag: Tag{Generation: gen, Nonce: r.Nonces.Next()}}
	}
	if err := k.Validate(); err != nil {
		return nil, giveUp(a, "new entry: %v", err)
	}
	return &k, nil
}

// deletable returns old unless R3 forbids deleting it.
func (r Rules) deletable(old *Key, gen uint64) *Key {
	if old == nil {
		return nil
	}
	// R3: "Never delete an entry with a generation above one's own. A newer
	// owner wrote it." Legacy entries carry no generation.
	if !old.Legacy && old.Tag.Generation > gen && !r.variants.NoGenerationCheck {
		return nil
	}
	k := *old
	return &k
}

// AfterEvent is the owner's plan after an event committed, before it is
// replicated: list the committed alarm first, remove the replaced entry
// after. An error (a *GiveUpError) means give the actor up and replicate
// nothing.
func (r Rules) AfterEvent(f EventFacts) (IndexPlan, error) {
	if err := r.check(f.Actor, f.Alarm, f.Recorded, f.HoldValid); err != nil {
		return IndexPlan{}, err
	}
	return r.bringInLine(f, true)
}

// MidEventUpload is AfterEvent for exec-durable, which uploads in the middle
// of an event. docs/design.md#in-line: exec-durable, which uploads in the middle of an event,
// lists a pending alarm first too, under the generation of the replica it
// uploads with: f.Generation is that replica's generation.
func (r Rules) MidEventUpload(f EventFacts) (IndexPlan, error) {
	return r.AfterEvent(f)
}

// bringInLine makes the plan that leaves the database naming an entry for the
// committed alarm (or none). migrateLegacy replaces a legacy entry at the
// alarm's time by a tagged one.
func (r Rules) bringInLine(f EventFacts, migrateLegacy bool) (IndexPlan, error) {
	rec := f.Recorded
	if f.Alarm == nil {
		if rec == nil {
			return IndexPlan{}, nil
		}
		// A cleared alarm: record "" (empty for none), then remove the entry
		// listed before after replicating. docs/design.md#in-line: removes the entry it
		// listed before after replicating it, so a crash in between leaves
		// an extra entry, never a missing one.
		return IndexPlan{Record: true, DeleteAfterReplicate: r.deletable(rec, f.Generation)}, nil
	}
	due := *f.Alarm
	if rec != nil && rec.DueMs == due {
		// docs/design.md#in-line: An unchanged alarm keeps its entry, whichever owner wrote
		// it — no request, even on the first event of a new generation.
		if !rec.Legacy || !migrateLegacy || r.variants.UntaggedKeys {
			return IndexPlan{}, nil
		}
		// docs/design.md#in-line: a legacy one is replaced by a tagged one on the next event
		// (migration). Falls through to a fresh PUT.
	}
	// docs/design.md#in-line: the owner lists the committed alarm before replicating the
	// event, and removes the entry it listed before after replicating it.
	put, err := r.freshKey(f.Actor, due, f.Generation)
	if err != nil {
		return IndexPlan{}, err
	}
	recorded := *put
	p := IndexPlan{Put: put, Record: true, Recorded: &recorded}
	if old := r.deletable(rec, f.Generation); old != nil && *old != *put {
		// R2: "Delete only what the replicated state no longer names. The
		// entry an event replaced, once that event is replicated".
		p.DeleteAfterReplicate = old
	}
	return p, nil
}

// FirstUpload is R4, for an upload that is the actor's first snapshot in the
// bucket (the bucket had nothing for it: a node that ran on its own and
// joins, or a new actor). docs/design.md#r4: If that database holds an alarm, the node
// lists it under a fresh key and records the entry in the database first, so
// the snapshot names an entry that exists; if it cannot, nothing is uploaded
// and the alarm stays on that node only. The entry recorded before joining
// is not trusted to exist in this bucket, so a fresh key is listed even for
// an unchanged time, and nothing is deleted: an earlier attempt's snapshot
// naming that entry may still land (each failed attempt leaves one extra
// entry, removed after it fires).
func (r Rules) FirstUpload(f EventFacts) (IndexPlan, error) {
	if err := r.check(f.Actor, f.Alarm, f.Recorded, f.HoldValid); err != nil {
		return IndexPlan{}, err
	}
	if f.Alarm == nil {
		if f.Recorded == nil {
			return IndexPlan{}, nil
		}
		// No alarm: the snapshot must name no entry, or a later event that
		// sets an alarm for that time would take it as indexed.
		return IndexPlan{Record: true}, nil
	}
	put, err := r.freshKey(f.Actor, *f.Alarm, f.Generation)
	if err != nil {
		return IndexPlan{}, err
	}
	recorded := *put
	return IndexPlan{
		Put:             put,
		Record:          true,
		Recorded:        &recorded,
		UploadBeforePut: r.variants.FirstUploadBeforeEntry,
	}, nil
}

// DeliveryFacts are what a node knows once it took the actor (restoring it
// from the bucket) to deliver an entry.
type DeliveryFacts struct {
	// Delivered is the entry being delivered; its Actor is the actor.
	Delivered Key
	// Alarm is the committed alarm in Unix ms; nil when none is set.
	Alarm *int64
	// Recorded is the entry alarm_indexed names; nil for none.
	Recorded *Key
	// InitRecorded: on-init ran and is recorded in the database. With no
	// Alarm and no InitRecorded the actor has no state (deleted since, or
	// never initialised).
	InitRecorded bool
	// Generation is this node's hold generation.
	Generation uint64
	// HoldValid: the hold exists and the node lease is valid.
	HoldValid bool
	// Uploaded: this hold has uploaded anything for the actor.
	Uploaded bool
	// BucketHadActor: the bucket had state for the actor when this node
	// took it.
	BucketHadActor bool
}

// Outcome classifies a delivery.
type Outcome int

// Outcomes of a delivery.
const (
	// OutcomeRun: the committed alarm is the delivered time. Run on-alarm
	// as an ordinary event; its AfterEvent plan updates the index.
	OutcomeRun Outcome = iota + 1
	// OutcomeStale: the committed alarm is elsewhere or cleared; the
	// actor's entries at the delivered time are stale and are removed.
	OutcomeStale
	// OutcomeNoState: the actor has no state; its entries are removed
	// without running (instantiating) the actor.
	OutcomeNoState
	// OutcomeKeep: the bucket had nothing for the actor and nothing was
	// uploaded since: remove nothing, upload nothing, retry the entry after
	// RetryAfter and release the hold at once.
	OutcomeKeep
)

// String gives a short name for logs.
func (o Outcome) String() string {
	switch o {
	case OutcomeRun:
		return "run"
	case OutcomeStale:
		return "stale"
	case OutcomeNoState:
		return "no-state"
	case OutcomeKeep:
		return "keep"
	}
	return fmt.Sprintf("outcome(%d)", int(o))
}

// DeliveryPlan is what to do with a delivered entry, in this order:
//
//  1. Index: if not Empty, bring the index in line with the committed alarm
//     (an IndexPlan: Put, Record, replicate, DeleteAfterReplicate). Failure:
//     give the actor up and delete nothing.
//  2. Fence: if set, write owner_fence meta (a one-line change, for
//     example the hold's generation) and replicate it. Failure: delete
//     nothing (retry later).
//  3. List: if set, LIST TaggedPrefix(actor, delivered time), parse the
//     keys with ParseKey (skip what does not parse) and DELETE each key
//     StaleDeletes returns.
//
// RetryAfter, when positive, is when to try the entry again (instead of on
// every sweep); Release asks to release the actor's hold at once.
type DeliveryPlan struct {
	Outcome    Outcome
	Index      IndexPlan
	Fence      bool
	List       bool
	RetryAfter time.Duration
	Release    bool

	delivered Key
	spared    *Key
	gen       uint64
	noGenChk  bool
}

// Deliver decides what delivering f.Delivered does. An error (a
// *GiveUpError) means give the actor up and delete nothing.
func (r Rules) Deliver(f DeliveryFacts) (DeliveryPlan, error) {
	a := f.Delivered.Actor
	if err := r.check(a, f.Alarm, f.Recorded, f.HoldValid); err != nil {
		return DeliveryPlan{}, err
	}
	// A node timer knows the actor and the time, not which tagged entry a
	// sweep saw: a tagged key with no tag stands for "the entries at that
	// time" (only the actor, the time and Legacy decide anything here).
	check := f.Delivered
	if !check.Legacy && check.Tag == (Tag{}) {
		check.Tag.Nonce = "0"
	}
	if err := check.Validate(); err != nil {
		return DeliveryPlan{}, giveUp(a, "delivered entry: %v", err)
	}
	p := DeliveryPlan{
		delivered: f.Delivered,
		gen:       f.Generation,
		noGenChk:  r.variants.NoGenerationCheck,
	}
	due := f.Delivered.DueMs
	if f.Alarm != nil && *f.Alarm == due {
		// docs/design.md#delivery: Delivery is the ordinary alarm event: take the actor
		// (restoring it from the bucket), read the committed alarm, run
		// on-alarm if due. Other entries at this time stay; each is removed
		// as stale when delivered after the alarm moved.
		p.Outcome = OutcomeRun
		return p, nil
	}
	p.Outcome = OutcomeStale
	if f.Alarm == nil && !f.InitRecorded {
		// docs/design.md#delivery: An entry delivered for an actor with no state (no committed
		// alarm and no on-init recorded: deleted since, or never
		// initialised) is removed without running the actor, which would
		// only create it again. Removing it is a stale removal: the rules
		// below (bucket had nothing, fence, R3) apply as well.
		p.Outcome = OutcomeNoState
	}
	if !f.BucketHadActor && !f.Uploaded {
		if !r.variants.ClearWhileBucketEmpty {
			// docs/design.md#bucket-empty: An owner that found nothing in the bucket for the
			// actor, and has uploaded nothing since, removes nothing: an
			// earlier owner's first snapshot can name an entry (R4) and
			// still land. It does not fence by uploading either [...] It
			// retries such an entry after the longest backoff (retry_max,
			// 5 min) rather than on every sweep, and releases the actor's
			// lease at once.
			p.Outcome = OutcomeKeep
			p.RetryAfter = r.RetryMax
			if p.RetryAfter <= 0 {
				p.RetryAfter = DefaultRetryMax
			}
			p.Release = true
			return p, nil
		}
		// Mutation: remove the entries anyway, still without uploading.
		p.List = true
		p.spared = copyKey(f.Recorded)
		return p, nil
	}
	// docs/design.md#delivery: Entries at a time that does not match the committed alarm are
	// stale and are removed (R2, R3), after the committed alarm is
	// indexed. A legacy entry at the alarm's time counts as indexed here
	// (it lists the alarm); migration waits for the next event.
	idx, err := r.bringInLine(EventFacts{
		Actor:      a,
		Alarm:      f.Alarm,
		Recorded:   f.Recorded,
		Generation: f.Generation,
		HoldValid:  f.HoldValid,
	}, false)
	if err != nil {
		return DeliveryPlan{}, err
	}
	if old := idx.DeleteAfterReplicate; old != nil && (*old == f.Delivered || (!old.Legacy && old.DueMs == due)) {
		// Step 3 deletes it (it is at the delivered time): one DELETE.
		idx.DeleteAfterReplicate = nil
	}
	p.Index = idx
	// R2: "the actor's entries at that time other than the one the database
	// names" — the database as it stands after step 1.
	p.spared = copyKey(f.Recorded)
	if idx.Record {
		p.spared = copyKey(idx.Recorded)
	}
	// R2: "an owner that has uploaded nothing yet uploads a one-line change
	// (owner_fence meta) before it removes entries as stale: at most one
	// extra upload per hold." Step 1's upload, if any, already ends the
	// history.
	p.Fence = !f.Uploaded && !idx.Record && !r.variants.NoFence
	// docs/design.md#delivery: that costs one LIST of the actor's tagged entries at that
	// time (the legacy key is deleted by its exact name).
	p.List = true
	return p, nil
}

func copyKey(k *Key) *Key {
	if k == nil {
		return nil
	}
	c := *k
	return &c
}

// StaleDeletes returns the entries to DELETE, given the parsed LIST of
// TaggedPrefix(actor, delivered time) taken after the plan's Index and Fence
// steps: every listed tagged entry of the actor at that time except the one
// the database names (R2) and those of a generation above the hold's own
// (R3), then the delivered key itself if it is a legacy one (by its exact
// name). Nil when the plan does not list. Keys not of the actor and time are
// ignored.
func (p DeliveryPlan) StaleDeletes(listed []Key) []Key {
	if !p.List {
		return nil
	}
	var out []Key
	seen := make(map[Key]bool)
	for _, k := range listed {
		if k.Legacy || k.Actor != p.delivered.Actor || k.DueMs != p.delivered.DueMs || seen[k] {
			continue
		}
		if p.spared != nil && k == *p.spared {
			// R2: spare the entry the replicated state names.
			continue
		}
		if k.Tag.Generation > p.gen && !p.noGenChk {
			// R3: "Never delete an entry with a generation above one's
			// own. A newer owner wrote it".
			continue
		}
		seen[k] = true
		out = append(out, k)
	}
	if d := p.delivered; d.Legacy && (p.spared == nil || *p.spared != d) {
		out = append(out, d)
	}
	return out
}
