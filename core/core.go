// Package core is the part of the alarms plugin that decides, kept apart
// from the part that does: no goroutines, no locks, no clock, no I/O. Facts
// go in with the time given; decisions come out, for the caller to carry
// out and report back. The plugin (package alarms) runs it under its lock,
// with the bucket, the host and the node timer; the deterministic
// simulator (package sim) runs the very same code against its model of
// those, with crashes, late requests and a clock it moves itself.
//
// It sits on package alarmindex, whose rules are pure functions of one
// actor's facts, and adds what a node keeps between steps:
//
//   - which index plan a replication point takes (Plan);
//   - for each actor whose upload this node carried out, the entry that
//     upload named, and the removal of the actor's other overdue entries
//     that a sweep leaves out because the node timer keeps the actor at a
//     later time (Stale, StaleDone): see docs/design.md and the plugin's
//     stale.go;
//   - the removal of an overdue entry another node's sweep listed and
//     forwarded here because this node holds the actor (Forwarded), and,
//     on the node that listed it, which entry a sweep offered, so that a
//     delivery that finds the actor held elsewhere forwards it (Listed,
//     Forward): see docs/design.md#stale-forward;
//   - each actor's delivery slot: one delivery at a time, the time the
//     timer pops meanwhile, the entry time a failed delivery's retry
//     delivers again, the legacy entry a sweep offered (Start, Release,
//     Delivering, Failed, Entry).
//
// A State is not safe for concurrent use: its caller serialises calls.
package core

import (
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/alarmindex"
	"github.com/wasmkeep/alarms/sweeper"
)

// UploadKind says which replication point an upload is.
type UploadKind int

const (
	// AfterEvent: an event committed; its state is about to be uploaded.
	AfterEvent UploadKind = iota
	// MidEvent: an exec-durable event uploads before it replies.
	MidEvent
	// FirstUpload: a joining node uploads an actor the bucket does not have.
	FirstUpload
)

// Plan is the index plan for an upload of kind, given the actor's facts,
// and the entry the uploaded state names once it counts (nil: none).
func Plan(r alarmindex.Rules, kind UploadKind, f alarmindex.EventFacts) (plan alarmindex.IndexPlan, named *alarmindex.Key, err error) {
	switch kind {
	case MidEvent:
		plan, err = r.MidEventUpload(f)
	case FirstUpload:
		plan, err = r.FirstUpload(f)
	default:
		plan, err = r.AfterEvent(f)
	}
	if err != nil {
		return plan, nil, err
	}
	named = f.Recorded
	if plan.Record {
		named = plan.Recorded
	}
	return plan, named, nil
}

// Config sets the waits a State decides with.
type Config struct {
	// RetryAfterError is how long a removal of stale entries that failed
	// waits before the same entry time is tried again, and how long before
	// the same entry time is forwarded to the actor's holder again.
	RetryAfterError time.Duration
	// RetryMax is how long a removal that removed nothing (the rules kept
	// the entry: R3, say) waits before that entry time is tried again.
	RetryMax time.Duration
}

// State is what one node keeps between steps, by actor.
type State struct {
	cfg Config
	// known is the entry the latest upload this node carried out for
	// the actor named.
	known map[abi.ActorID]alarmindex.Key
	// tried keeps a removal of stale entries that removed nothing or
	// failed, and when to try that entry time again.
	tried map[abi.ActorID]staleTry
	// slots are the actors' delivery slots, by timer key (below).
	slots map[string]slot
	// legacy: the time of a legacy entry a sweep offered, by actor.
	legacy map[abi.ActorID]int64
	// listed: the time of the entry a sweep offered that the timer took,
	// by actor, until that actor's next delivery.
	listed map[abi.ActorID]int64
	// forwarded: the entry time last forwarded to the actor's holder, and
	// until when that time is not forwarded again; pruned of expired
	// records once it reaches forwardedCap.
	forwarded    map[abi.ActorID]staleTry
	forwardedCap int
	// ran: the entry time of the actor's alarm this node last ran, and
	// until when a sweep leaves that time out (RanLately); pruned of
	// expired records once it reaches ranCap.
	ran    map[abi.ActorID]staleTry
	ranCap int
}

// staleTry: the entry time due is not tried again before until (ms).
type staleTry struct {
	due, until int64
}

// New returns an empty State.
func New(cfg Config) *State {
	return &State{cfg: cfg, known: map[abi.ActorID]alarmindex.Key{}, tried: map[abi.ActorID]staleTry{}}
}

// Uploaded records the entry an upload of this node named (nil: none),
// once the upload counted (the hold was valid when it returned).
func (s *State) Uploaded(id abi.ActorID, named *alarmindex.Key) {
	if named == nil {
		delete(s.known, id)
		return
	}
	s.known[id] = *named
}

// Forget drops what the node keeps for the actor: it is not this node's
// (another node holds it), or its alarm was cleared.
func (s *State) Forget(id abi.ActorID) {
	delete(s.known, id)
	delete(s.tried, id)
	delete(s.listed, id)
}

// Armed is told the actor's committed alarm (key: its key in the node
// timer) after an event changed it
// (nil: cleared, and there is nothing left to remove stale entries for):
// the event's alarm wins over a retry a failed delivery waits for.
func (s *State) Armed(id abi.ActorID, key string, alarm *int64) {
	if sl := s.slots[key]; sl.hasRedeliver { // a retry pending from a failed delivery is dropped
		sl.redeliver, sl.hasRedeliver = 0, false
		s.put(key, sl)
	}
	if alarm == nil {
		s.Forget(id)
	}
}

// Kept is what the node knows, besides the State, when a sweep left an
// actor out for one of its overdue entries.
type Kept struct {
	// Now is the time, in ms.
	Now int64
	// Busy: the host cannot take the actor now (its delivery loop is not
	// running, say). A delivery under way (Start, Claim) or a failed one
	// waiting to deliver its entry time again (Failed) is the State's own.
	Busy bool
	// Key is the actor's key in the node timer.
	Key string
	// TimerAt is the time the node timer holds the actor at, if TimerHeld.
	TimerAt   int64
	TimerHeld bool
}

// Stale decides whether the node removes the stale entries a sweep left
// out (d: the actor, its earliest overdue entry time and keys): while the
// timer holds the actor at a later time (else the timer delivers that time
// itself), for an entry time other than the one this node's latest upload
// named, and not again before a removal that failed or removed nothing
// waited its turn. Whether or not this node has uploaded the actor: a node
// that restarted and holds the actor again, or one whose timer still has
// it from a hold it lost, has not (the fence covers the first; the second
// finds the actor held elsewhere and forwards the entry to the holder). It
// returns the entry to deliver, through the delivery rules, without
// running on-alarm.
func (s *State) Stale(d sweeper.Overdue, k Kept) (alarmindex.Key, bool) {
	if !k.TimerHeld {
		return alarmindex.Key{}, false
	}
	return s.removal(alarmindex.Key{Actor: d.Actor, DueMs: d.DueMs, Legacy: LegacyAmong(d.Keys)}, k)
}

// Forwarded decides whether the node removes the stale entries at an
// overdue entry time that another node's sweep listed and forwarded here
// because this node holds the actor (entry: the actor, the time, whether a
// legacy key was among the keys listed). As Stale, but whether or not the
// timer holds the actor (an actor with no alarm has only stale entries):
// not while the timer holds the actor at that time or earlier (it delivers
// that time itself, or an earlier one first), nor for the time the node's
// latest upload named (the timer has it, or had it and delivered it). It
// returns the entry to deliver, through the delivery rules, without
// running on-alarm.
func (s *State) Forwarded(entry alarmindex.Key, k Kept) (alarmindex.Key, bool) {
	return s.removal(alarmindex.Key{Actor: entry.Actor, DueMs: entry.DueMs, Legacy: entry.Legacy}, k)
}

// removal is what Stale and Forwarded share: not for the time the node's
// latest upload named or a time the timer delivers itself, not while the
// host is busy or a delivery of the actor is under way or waits to retry,
// and not again before a removal of that time that failed or removed
// nothing waited its turn.
func (s *State) removal(entry alarmindex.Key, k Kept) (alarmindex.Key, bool) {
	if t, ok := s.tried[entry.Actor]; ok && t.due == entry.DueMs && k.Now < t.until {
		return alarmindex.Key{}, false
	}
	if named, known := s.known[entry.Actor]; known && named.DueMs == entry.DueMs {
		return alarmindex.Key{}, false
	}
	if k.Busy || s.InFlight(k.Key) || s.Waiting(k.Key) {
		return alarmindex.Key{}, false
	}
	if k.TimerHeld && k.TimerAt <= entry.DueMs {
		return alarmindex.Key{}, false
	}
	return entry, true
}

// StaleStep is what a removal of stale entries does after the delivery
// rules decided (plan.Outcome).
type StaleStep int

const (
	// StaleRemove: execute the plan (fence, LIST, DELETE the stale entries).
	StaleRemove StaleStep = iota
	// StaleArm: the committed alarm is that time after all, and overdue:
	// set the node timer to it (the committed alarm decides).
	StaleArm
	// StaleLetGo: the bucket never had the actor and this hold uploaded
	// nothing; the rules remove nothing: release the hold and let it go.
	StaleLetGo
)

// StaleStepOf maps the delivery rules' outcome to the removal's step.
func StaleStepOf(o alarmindex.Outcome) StaleStep {
	switch o {
	case alarmindex.OutcomeStale, alarmindex.OutcomeNoState:
		return StaleRemove
	case alarmindex.OutcomeRun:
		return StaleArm
	default:
		return StaleLetGo
	}
}

// StaleDone records how a removal of the actor's stale entries at due
// ended at now (ms): failed (an error, or a DELETE that failed), removed
// (an entry removed, or the timer armed), or neither (the rules kept what
// it listed). A failed removal is tried again after RetryAfterError, one
// that removed nothing after RetryMax; so an entry the rules keep costs a
// take and a LIST per RetryMax, not per sweep.
func (s *State) StaleDone(id abi.ActorID, due, now int64, removed, failed bool) {
	switch {
	case failed:
		s.tried[id] = staleTry{due: due, until: now + s.cfg.RetryAfterError.Milliseconds()}
	case !removed:
		s.tried[id] = staleTry{due: due, until: now + s.cfg.RetryMax.Milliseconds()}
	default:
		delete(s.tried, id)
	}
}

// Delivery slots: one delivery (or removal of stale entries) of an actor
// at a time, the times the timer pops meanwhile kept for when it ends, the
// entry time of a delivery that failed kept for its retry, and the legacy
// entries sweeps offered.

// LegacyAmong reports whether one of a sweep's keys of an entry is a legacy
// key (one key per actor and time, delivered by its exact name).
func LegacyAmong(keys []string) bool {
	for _, k := range keys {
		if pk, err := alarmindex.ParseKey(k); err == nil && pk.Legacy {
			return true
		}
	}
	return false
}

// slot is what the State keeps of one actor's deliveries, by the actor's
// key in the node timer (a string: a map of them is the runtime's fast
// path); an actor with none of it has no slot.
type slot struct {
	inflight bool
	// again: a time the timer popped during a delivery.
	again    int64
	hasAgain bool
	// redeliver: the entry time of a failed delivery, for its retry.
	redeliver    int64
	hasRedeliver bool
	// delivering: the entry time the delivery under way delivers, until
	// Settled: a pop of that time meanwhile is the same alarm.
	delivering    int64
	hasDelivering bool
}

func (sl slot) empty() bool { return !sl.inflight && !sl.hasAgain && !sl.hasRedeliver }

// put stores the actor's slot, or drops it once it holds nothing.
func (s *State) put(key string, sl slot) {
	if sl.empty() {
		delete(s.slots, key)
		return
	}
	if s.slots == nil {
		s.slots = map[string]slot{}
	}
	s.slots[key] = sl
}

// OfferedLegacy records that the node timer took a sweep's entry of the
// actor at due whose keys include the legacy key (LegacyAmong): the
// delivery of that time names it (Entry).
func (s *State) OfferedLegacy(id abi.ActorID, due int64) {
	if s.legacy == nil {
		s.legacy = map[abi.ActorID]int64{}
	}
	s.legacy[id] = due
}

// Listed records that the node timer took a sweep's entry of the actor at
// due: a delivery of that time that finds the actor held by another node
// forwards it there (Forward).
func (s *State) Listed(id abi.ActorID, due int64) {
	if s.listed == nil {
		s.listed = map[abi.ActorID]int64{}
	}
	s.listed[id] = due
}

// Forward is told that a delivery of the actor's entry time due found the
// actor held by another node at now (ms): it returns the entry to forward
// to that node when a sweep of this node listed the actor's entry at that
// time (a legacy key among its keys: Legacy), and false when the time came
// from anywhere else (an alarm this node's timer kept from its own hold,
// say), which the holder's timer has, or when Forwarding says it was
// forwarded lately.
func (s *State) Forward(id abi.ActorID, due, now int64) (alarmindex.Key, bool) {
	at, ok := s.listed[id]
	if !ok || at != due {
		return alarmindex.Key{}, false
	}
	delete(s.listed, id)
	k := alarmindex.Key{Actor: id, DueMs: due}
	if l, ok := s.legacy[id]; ok && l == due {
		delete(s.legacy, id)
		k.Legacy = true
	}
	return k, s.Forwarding(k, now)
}

// HeldElsewhereLately reports whether a delivery of the actor found it
// held by another node, and this node forwarded that node the entry, less
// than RetryAfterError before now (ms): a sweep then leaves the actor out
// (it is no candidate of this node's; the holder has the entry in hand).
// Each delivery of it would only read its ownership record and its
// holder's lease again to be refused, once a sweep per walker: after a
// bucket outage, with every alarm overdue, two reads of every such actor a
// second from each node, which slowed the holders' own firings. After the
// wait the actor is a candidate again, so a holder that died meanwhile is
// taken over as before.
func (s *State) HeldElsewhereLately(id abi.ActorID, now int64) bool {
	f, ok := s.forwarded[id]
	return ok && now < f.until
}

// Ran records that this node ran the actor's alarm at due and replicated
// the outcome, at now (ms): the run replaced the entry at due, whose
// DELETE is queued or on its way.
func (s *State) Ran(id abi.ActorID, due, now int64) {
	remember(&s.ran, &s.ranCap, id, staleTry{due: due, until: now + s.cfg.RetryAfterError.Milliseconds()}, now)
}

// RanLately reports whether this node ran the actor's alarm at due less
// than RetryAfterError (a lease period) before now (ms). A walk that lists
// the entry in that time leaves it out: its LIST under load can end after
// the delivery and before the DELETE the run queued (batched) lands, and
// delivering it again would take the actor only to find the alarm moved
// and LIST the actor's entries at that time to remove nothing. After the
// wait an entry still there (its DELETE failed) is a stale entry like any
// other, removed when delivered.
func (s *State) RanLately(id abi.ActorID, due, now int64) bool {
	r, ok := s.ran[id]
	return ok && r.due == due && now < r.until
}

// remember records t for id in *m, first dropping the expired records
// (until at or before now) once *m reaches *limit entries (at least 1,024),
// so a map of records that expire stays about as large as those that
// have not.
func remember(m *map[abi.ActorID]staleTry, limit *int, id abi.ActorID, t staleTry, now int64) {
	if *m == nil {
		*m = map[abi.ActorID]staleTry{}
	}
	if len(*m) >= max(*limit, 1024) {
		for k, r := range *m {
			if now >= r.until {
				delete(*m, k)
			}
		}
		*limit = 2 * len(*m)
	}
	(*m)[id] = t
}

// Forwarding reports whether the entry may be forwarded to the actor's
// holder at now (ms), and records it: not when the same entry time of the
// actor was forwarded less than RetryAfterError (a lease period) before.
// A holder that skipped it has it in hand (its timer delivers that time,
// or a delivery of the actor was under way), and a walker lists an overdue
// entry at every sweep while it stays: without the wait, each sweep would
// send one more forward of an alarm the holder's timer is late with.
func (s *State) Forwarding(entry alarmindex.Key, now int64) bool {
	if f, ok := s.forwarded[entry.Actor]; ok && f.due == entry.DueMs && now < f.until {
		return false
	}
	remember(&s.forwarded, &s.forwardedCap, entry.Actor, staleTry{due: entry.DueMs, until: now + s.cfg.RetryAfterError.Milliseconds()}, now)
	return true
}

// Entry is the entry a delivery of the time due names: a legacy one when a
// sweep offered that time's legacy entry (it is removed by its exact name),
// else the tagged entries at that time.
func (s *State) Entry(id abi.ActorID, due int64) alarmindex.Key {
	delete(s.listed, id) // delivered here: nothing to forward
	k := alarmindex.Key{Actor: id, DueMs: due}
	if len(s.legacy) > 0 {
		if at, ok := s.legacy[id]; ok && at == due {
			delete(s.legacy, id)
			k.Legacy = true
		}
	}
	return k
}

// The delivery slot of one actor, by its key in the node timer (key).

// Start begins a delivery of the time at that the timer popped. False: a
// delivery of the actor is under way; at is kept, and Release hands it
// back when that delivery ends, or the actor would wait for a sweep.
func (s *State) Start(key string, at int64) bool {
	sl := s.slots[key]
	started := !sl.inflight
	if started {
		sl.inflight = true
	} else if sl.hasDelivering && at == sl.delivering {
		// The time being delivered, armed again by the host as it took
		// the actor (its committed alarm) or by the handler's own
		// commit: the delivery under way is that alarm's. Kept, it was
		// delivered again once that one ended, to find the alarm moved
		// and list the actor's entries for nothing (0.77 such deliveries
		// per orphan in a drain). Once the delivery has Settled, the
		// time popped is a new alarm and is kept.
	} else if !sl.hasAgain || at < sl.again {
		sl.again, sl.hasAgain = at, true
	}
	s.put(key, sl)
	return started
}

// Claim begins a removal of stale entries; false while a delivery of the
// actor is under way.
func (s *State) Claim(key string) bool {
	sl := s.slots[key]
	if sl.inflight {
		return false
	}
	sl.inflight = true
	s.put(key, sl)
	return true
}

// InFlight reports whether a delivery or a removal of the actor is under way.
func (s *State) InFlight(key string) bool { return s.slots[key].inflight }

// Waiting reports whether a failed delivery of the actor waits to deliver
// its entry time again.
func (s *State) Waiting(key string) bool { return s.slots[key].hasRedeliver }

// Pending counts the actors with a delivery under way or a failed one
// waiting to deliver its entry time again.
func (s *State) Pending() int {
	n := 0
	for _, sl := range s.slots {
		if sl.inflight || sl.hasRedeliver {
			n++
		}
	}
	return n
}

// Release ends what Start or Claim began. again: a time the timer popped
// meanwhile, for the caller to offer the timer again unless something
// armed the actor since.
func (s *State) Release(key string) (at int64, again bool) {
	sl := s.slots[key]
	at, again = sl.again, sl.hasAgain
	sl.inflight, sl.again, sl.hasAgain = false, 0, false
	sl.delivering, sl.hasDelivering = 0, false
	s.put(key, sl)
	return at, again
}

// Delivering is the time a delivery the timer popped at at delivers: at,
// or the earlier entry time of a delivery that failed and waits to be
// delivered again (its retry delivers that time, not the retry's).
func (s *State) Delivering(key string, at int64) int64 {
	sl := s.slots[key]
	if sl.hasRedeliver {
		at = min(at, sl.redeliver)
		sl.redeliver, sl.hasRedeliver = 0, false
	}
	if sl.inflight {
		sl.delivering, sl.hasDelivering = at, true
	}
	s.put(key, sl)
	return at
}

// Settled says the delivery under way has delivered its entry time (run
// or not): from now on a pop of that time, an alarm committed for it
// again, is kept for when the delivery ends ([State.Start]).
func (s *State) Settled(key string) {
	sl, ok := s.slots[key]
	if !ok || !sl.hasDelivering {
		return
	}
	sl.delivering, sl.hasDelivering = 0, false
	s.put(key, sl)
}

// Failed records that a delivery of the entry time at failed on the
// host's side and is retried: the retry delivers at again.
func (s *State) Failed(key string, at int64) {
	sl := s.slots[key]
	sl.redeliver, sl.hasRedeliver = at, true
	s.put(key, sl)
}
