package sim

import (
	"errors"
	"slices"

	"github.com/wasmkeep/alarms/alarmindex"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/core"

	"github.com/wasmkeep/alarms/abi"
)

// ---- taking an actor ----

// take gets a hold on actor a for n and its database (restored from the
// bucket, or from n's own data when the bucket has nothing). k gets the
// held actor, or nil with the owning node (-1 for none) and why not.
func (s *sim) take(n *node, a abi.ActorID, k func(h *held, owner int, why string)) {
	ak := a.String()
	if h := n.held[ak]; h != nil {
		if s.holdValid(n, h) {
			k(h, -1, "")
			return
		}
		if n.up && h.epoch == n.epoch && (s.now >= n.validUntil || !s.leaseValid(n.id, n.epoch)) {
			// The lease lapsed: the node keeps the hold to take it again
			// once the lease is valid (node.open), and refuses meanwhile.
			k(nil, -1, "no valid node lease")
			return
		}
		delete(n.held, ak)
		if n.up && h.epoch != n.epoch {
			s.retake(n, h, k)
			return
		}
	}
	if n.cut(s.now) {
		k(nil, -1, "cut off")
		return
	}
	s.step(n, n.boot, s.between(1, 10), func() {
		if n.cut(s.now) {
			k(nil, -1, "cut off")
			return
		}
		if !s.leaseValid(n.id, n.epoch) || s.now >= n.validUntil {
			k(nil, -1, "no valid node lease")
			return
		}
		if o, ok := s.holder(ak); ok && o != n.id {
			k(nil, o, "held elsewhere")
			return
		}
		// The record as read (cluster.Holds.Acquire's GET); the take is
		// written on it (If-Match), after the state is known.
		var read *holdRec
		if r := s.holds[ak]; r != nil {
			c := *r
			read = &c
		}
		s.stateAtTake(n, a, read, true, func(state string, fetched *[]byte, ok bool, why string) {
			if !ok {
				k(nil, -1, why)
				return
			}
			if n.cut(s.now) || !s.leaseValid(n.id, n.epoch) || s.now >= n.validUntil {
				k(nil, -1, "no valid node lease")
				return
			}
			cur := s.holds[ak]
			if (cur == nil) != (read == nil) || (cur != nil && *cur != *read) {
				if o, held := s.holder(ak); held && o != n.id {
					k(nil, o, "held elsewhere")
				} else {
					k(nil, -1, "lost a race for the hold")
				}
				return
			}
			gen := uint64(1)
			if read != nil {
				gen = read.gen + 1
				if read.node != n.id {
					s.c.Takeovers++
				}
			}
			s.c.Holds++
			s.holds[ak] = &holdRec{node: n.id, epoch: n.epoch, gen: gen, state: state}
			s.logf("%s holds %s (generation %d, state %q)", n.addr, a, gen, state)
			s.restore(n, a, gen, state, fetched, k)
		})
	})
}

// retake takes again a hold h of an earlier epoch of n's lease (a lapse
// voided it), as cluster.Holds.Retake does: the record is written naming
// n with the next generation, on the condition that it is still the one h
// wrote (the same node, epoch and generation, not released: every take
// raises the generation, every release marks it), noting the state h knew
// (a HEAD of its own key when it recorded no upload of its own). The open
// copy is kept: nothing is read or restored. A record that changed takes
// the actor anew (take, without h).
func (s *sim) retake(n *node, h *held, k func(h *held, owner int, why string)) {
	a, ak := h.actor, h.actor.String()
	wrote := func() bool {
		r := s.holds[ak]
		if s.cfg.RetakeUnconditional {
			return true // the unsafe variant: whatever the record says now
		}
		return r != nil && r.node == n.id && r.epoch == h.epoch && r.gen == h.gen && !r.released
	}
	if n.cut(s.now) {
		k(nil, -1, "cut off")
		return
	}
	s.step(n, n.boot, s.between(1, 10), func() {
		if n.cut(s.now) || !s.leaseValid(n.id, n.epoch) || s.now >= n.validUntil {
			k(nil, -1, "no valid node lease")
			return
		}
		s.stateAtTake(n, a, &holdRec{node: n.id, gen: h.gen, state: h.state}, false, func(state string, _ *[]byte, ok bool, why string) {
			if !ok {
				k(nil, -1, why)
				return
			}
			if n.cut(s.now) || !s.leaseValid(n.id, n.epoch) || s.now >= n.validUntil {
				k(nil, -1, "no valid node lease")
				return
			}
			if n.held[ak] != nil {
				k(nil, -1, "lost a race for the hold") // taken meanwhile by another event of n
				return
			}
			if !wrote() {
				s.c.RetakesRefused++
				s.logf("%s cannot take %s again: its record changed since its hold of generation %d", n.addr, a, h.gen)
				s.take(n, a, k)
				return
			}
			s.c.Retakes++
			s.c.Holds++
			gen := h.gen + 1
			if r := s.holds[ak]; r != nil && r.gen >= gen {
				gen = r.gen + 1 // the unsafe variant over a newer record: generations still grow
			}
			s.holds[ak] = &holdRec{node: n.id, epoch: n.epoch, gen: gen, state: state}
			h.gen, h.epoch, h.state, h.etag, h.uploaded, h.lastUse = gen, n.epoch, state, "", false, s.now
			if state != "" {
				h.bucketHad = true
			}
			n.held[ak] = h
			s.logf("%s takes %s again after a lapse (generation %d, state %q), its copy kept", n.addr, a, gen, state)
			k(h, -1, "")
		})
	})
}

// stateAtTake is the state a take of a notes in its record, read as
// cluster.Holds.Acquire reads it: none for an actor never held; the
// record's own hold's snapshot if that hold uploaded (a GET of its key,
// whose body the restore uses, with fetch, as Acquire does; a HEAD
// without, as Retake does; neither if the record already names it); else
// the snapshot the record notes.
func (s *sim) stateAtTake(n *node, a abi.ActorID, read *holdRec, fetch bool, k func(state string, fetched *[]byte, ok bool, why string)) {
	if read == nil {
		k("", nil, true, "")
		return
	}
	own := stateKey(a, read.gen, 0)
	if read.state == own {
		k(own, nil, true, "")
		return
	}
	s.c.StateProbes++
	kind := bucket.OpHead
	if fetch {
		kind = bucket.OpGet
	}
	s.send(n, request{kind: kind, class: clsRead, key: own}, func(r result) {
		switch {
		case r.err == nil && fetch:
			body := r.body
			k(own, &body, true, "")
		case r.err == nil:
			k(own, nil, true, "")
		case errors.Is(r.err, bucket.ErrNotFound):
			k(read.state, nil, true, "")
		default:
			k("", nil, false, "reading the state: "+r.err.Error())
		}
	})
}

// restore gives n the actor's state after a take: state's snapshot, from
// fetched when the take read it (Hold.Fetched), else downloaded.
func (s *sim) restore(n *node, a abi.ActorID, gen uint64, state string, fetched *[]byte, k func(*held, int, string)) {
	ak := a.String()
	epoch := n.epoch
	failed := func(why string) {
		if r := s.holds[ak]; r != nil && r.node == n.id && r.gen == gen && !n.cut(s.now) {
			r.released = true
		}
		k(nil, -1, why)
	}
	h := &held{actor: a, gen: gen, epoch: epoch, lastUse: s.now, state: state}
	nothing := func() {
		if d := n.local[ak]; d != nil {
			h.db, h.fromLocal = d.clone(), true
		}
		s.logf("%s restores %s: bucket has nothing (own data: %t)", n.addr, a, h.fromLocal)
		n.held[ak] = h
		k(h, -1, "")
	}
	var got func(key string, r result)
	download := func(key string) {
		s.send(n, request{kind: bucket.OpGet, class: clsRead, key: key}, func(r result) { got(key, r) })
	}
	got = func(key string, r result) {
		if errors.Is(r.err, bucket.ErrNotFound) && !s.cfg.TrustListedState {
			s.failf("sim", "actor %s: the records name snapshot %s, which the bucket lacks", a, key)
			return
		}
		if r.err != nil {
			failed("restore: " + r.err.Error())
			return
		}
		d, err := decode(a, r.body)
		if _, _, _, ok := parseStateKey(key); err != nil || !ok {
			s.failf("sim", "actor %s: cannot read snapshot %s: %v", a, key, err)
			return
		}
		h.db, h.bucketHad = d, true
		if n.local[ak] != nil {
			// The bucket's version wins; the node's own file is set
			// aside.
			delete(n.local, ak)
			s.c.JoinsReplaced++
			s.logf("%s sets its own data for %s aside: the bucket has it", n.addr, a)
		}
		s.logf("%s restores %s from %s: %s", n.addr, a, key, d)
		n.held[ak] = h
		k(h, -1, "")
	}
	if s.cfg.TrustListedState {
		// The unsafe variant: the newest key a listing shows.
		s.send(n, request{kind: bucket.OpList, class: clsRead, prefix: statePrefix(a), limit: 100_000}, func(r result) {
			if r.err != nil {
				failed("restore: " + r.err.Error())
				return
			}
			if len(r.keys) == 0 {
				h.state = ""
				nothing()
				return
			}
			h.state = r.keys[len(r.keys)-1]
			download(h.state)
		})
		return
	}
	if state == "" {
		nothing()
		return
	}
	if fetched != nil {
		got(state, result{body: *fetched})
		return
	}
	download(state)
}

// giveUp drops the actor, as for a failed upload.
func (s *sim) giveUp(n *node, h *held, why string) {
	s.c.GiveUps++
	s.logf("%s gives %s up: %s", n.addr, h.actor, why)
	s.release(n, h)
	s.letGo(n, h.actor)
}

// ---- client requests ----

type reqKind int

const (
	reqSet reqKind = iota
	reqClear
	reqRead
	reqWrite
	reqDurable
	reqDelete
)

var reqNames = [...]string{"set", "clear", "read", "write", "exec-durable", "delete"}

func (s *sim) requestLoop() {
	s.after(s.between(100, requestGapMaxMs), func() {
		if s.final {
			return
		}
		s.newRequest()
		s.requestLoop()
	})
}

func (s *sim) newRequest() {
	targets := slices.Clone(s.cluster)
	for _, a := range s.joined {
		if s.stateOf(a.String()) != nil {
			targets = append(targets, a)
		}
	}
	a := targets[s.rng.IntN(len(targets))]
	if s.lastTarget != nil && s.chance(pBurst) {
		a = *s.lastTarget // traffic comes in bursts: often the same actor again
	}
	s.lastTarget = &a
	var kind reqKind
	switch x := s.rng.IntN(100); {
	case x < 35:
		kind = reqSet
	case x < 45:
		kind = reqClear
	case x < 55:
		kind = reqRead
	case x < 100-6-durableShare:
		kind = reqWrite
	case x < 94:
		kind = reqDurable
	default:
		kind = reqDelete
	}
	var ups []*node
	for _, n := range s.nodes {
		if n.up && !n.cut(s.now) && !n.gateway {
			ups = append(ups, n)
		}
	}
	if len(ups) == 0 {
		return
	}
	n := ups[s.rng.IntN(len(ups))]
	s.step(n, n.boot, s.between(1, 20), func() { s.request(n, a, kind, 0) })
}

func (s *sim) request(n *node, a abi.ActorID, kind reqKind, tries int) {
	ak := a.String()
	if n.cut(s.now) || tries > 5 {
		return
	}
	if n.busy[ak] {
		s.step(n, n.boot, s.between(100, 400), func() { s.request(n, a, kind, tries+1) })
		return
	}
	if o, ok := s.holder(ak); ok && o != n.id {
		s.forward(s.nodes[o], a, kind, tries)
		return
	}
	n.busy[ak] = true
	boot := n.boot
	finish := func() {
		if n.boot == boot {
			delete(n.busy, ak)
		}
	}
	s.take(n, a, func(h *held, owner int, why string) {
		if h == nil {
			finish()
			if owner >= 0 {
				s.forward(s.nodes[owner], a, kind, tries)
			}
			return
		}
		s.runRequest(n, h, kind, finish)
	})
}

func (s *sim) forward(o *node, a abi.ActorID, kind reqKind, tries int) {
	s.step(o, o.boot, s.between(1, 20), func() { s.request(o, a, kind, tries+1) })
}

// handlerTime is how long a guest handler runs.
func (s *sim) handlerTime() int64 {
	if !s.final && s.chance(pSlowHandler) {
		return s.between(1000, slowHandlerMaxMs)
	}
	return s.between(1, 30)
}

// durableRest is how long an exec-durable event runs after its upload.
func (s *sim) durableRest() int64 {
	if s.final {
		return s.between(1, 30)
	}
	return s.between(durableRestMinMs, durableRestMaxMs)
}

func (s *sim) runRequest(n *node, h *held, kind reqKind, finish func()) {
	s.step(n, n.boot, s.handlerTime(), func() {
		s.c.Requests++
		next := h.db.clone()
		initRan := !next.init
		next.init = true
		s.logf("%s request %s on %s", n.addr, reqNames[kind], h.actor)
		done := func(ok bool) {
			h.lastUse = s.now
			if ok {
				s.setTimer(n, h)
			}
			finish()
		}
		switch kind {
		case reqRead:
			if !initRan {
				done(false) // no writes: nothing to replicate
				return
			}
		case reqSet:
			next.alarm, next.failures = s.pickAlarm(h.actor), 0
			if s.drillAt != 0 {
				at := s.drillAt
				next.alarm, s.drillAt, s.drillNode = &at, 0, n
			}
			if at, ok := s.setAt[h.actor.String()]; ok {
				next.alarm = &at
				delete(s.setAt, h.actor.String())
			}
		case reqClear:
			next.alarm, next.failures = nil, 0
		case reqWrite:
			next.writes++
		case reqDelete:
			next = db{rec: next.rec, durable: next.durable, fired: next.fired} // a delete keeps the counts of acknowledged events and runs: what follows descends from them
		case reqDurable:
			s.durable(n, h, next, done)
			return
		}
		s.replicate(n, h, next, false, func(ok bool) {
			if ok && kind == reqDelete {
				s.c.ActorDeletes++
			}
			done(ok)
		})
	})
}

// durable is an exec-durable event, modelled on the durable-workflow idiom:
// often the event first sets a resume alarm for now (so that if it dies
// mid-way, the alarm resumes the work), checkpoints with an upload in the
// middle of the event (MidEventUpload), runs on for a while (the actor is
// busy: its own timer cannot deliver meanwhile), then clears or moves the
// alarm and uploads after the event.
func (s *sim) durable(n *node, h *held, next db, done func(bool)) {
	resume := !s.final && s.chance(pResume)
	if resume {
		next.alarm, next.failures = s.pastAlarm(h.actor), 0
	} else {
		s.mutateAlarm(h.actor, &next)
	}
	next.durable++
	s.replicate(n, h, next, true, func(ok bool) {
		if !ok {
			done(false)
			return
		}
		s.c.MidEventUploads++
		// Acknowledged: from now on every state of the actor holds it.
		s.c.DurableAcks++
		s.sh.acked[h.actor.String()] = next.durable
		s.step(n, n.boot, s.durableRest(), func() {
			next := h.db.clone()
			switch {
			case resume && s.chance(0.8):
				// The work is done: clear the resume alarm or set the next
				// one.
				next.alarm, next.failures = nil, 0
				if s.chance(0.3) {
					next.alarm = s.pickAlarm(h.actor)
				}
			case s.chance(0.5):
				s.mutateAlarm(h.actor, &next)
			default:
				next.writes++
			}
			s.replicate(n, h, next, false, done)
		})
	})
}

// pastAlarm is an alarm "for now": the current grid time, or a past time
// the actor already has entries at.
func (s *sim) pastAlarm(a abi.ActorID) *int64 {
	at := (s.now / gridMs) * gridMs
	if times := s.otherEntryTimes(a); len(times) > 0 && s.chance(0.5) {
		if t := times[s.rng.IntN(len(times))]; t <= s.now {
			at = t
		}
	}
	return &at
}

// otherEntryTimes are the times the actor has index entries at, other than
// its committed alarm's, in order.
func (s *sim) otherEntryTimes(a abi.ActorID) []int64 {
	var times []int64
	cur := s.stateOf(a.String())
	for _, k := range s.sh.entries[a.String()] {
		if cur == nil || cur.db.alarm == nil || *cur.db.alarm != k.DueMs {
			times = append(times, k.DueMs)
		}
	}
	slices.Sort(times)
	return slices.Compact(times)
}

func (s *sim) mutateAlarm(a abi.ActorID, d *db) {
	switch s.rng.IntN(4) {
	case 0, 1:
		d.alarm, d.failures = s.pickAlarm(a), 0
	case 2:
		d.alarm, d.failures = nil, 0
	default:
		d.writes++
	}
}

// pickAlarm chooses an alarm time on a coarse grid, often one the actor
// already has entries at (so keys and times collide, as the rules must
// survive), sometimes in the past ("now").
func (s *sim) pickAlarm(a abi.ActorID) *int64 {
	base := (s.now/gridMs + 1) * gridMs
	var at int64
	switch x := s.rng.IntN(100); {
	case x < pReuse:
		if times := s.otherEntryTimes(a); len(times) > 0 {
			at = times[s.rng.IntN(len(times))]
			break
		}
		fallthrough
	case x < 35:
		at = base - s.between(1, 4)*gridMs
	case x < 92:
		at = base + s.between(0, 6)*gridMs
	default:
		at = base + s.between(12, 30)*gridMs
	}
	return &at
}

// ---- replicating an event: the rules' IndexPlan around one upload ----

// replicate brings the index in line with next and uploads it: the plan is
// FirstUpload when this is the actor's first snapshot in the bucket,
// MidEventUpload for exec-durable's upload in the middle of an event, else
// AfterEvent. done(false) means the actor was given up.
func (s *sim) replicate(n *node, h *held, next db, mid bool, done func(bool)) {
	f := alarmindex.EventFacts{
		Actor:      h.actor,
		Alarm:      next.alarm,
		Recorded:   next.rec,
		Generation: h.gen,
		HoldValid:  s.holdValid(n, h),
	}
	first := !h.bucketHad && !h.uploaded
	kind := core.AfterEvent
	switch {
	case first:
		kind = core.FirstUpload
	case mid:
		kind = core.MidEvent
	}
	p, named, err := core.Plan(n.rules, kind, f)
	if err != nil {
		s.giveUp(n, h, err.Error())
		done(false)
		return
	}
	var aimed bool
	if first && h.fromLocal && !s.final && s.cfg.AimedJoinFault > 0 {
		aimed = s.chance(s.cfg.AimedJoinFault)
	}
	s.execIndex(n, h, next, p, aimed, func(ok bool) {
		if !ok {
			done(false)
			return
		}
		n.core.Uploaded(h.actor, named) // the upload counted
		if first && h.fromLocal {
			delete(n.local, h.actor.String())
			h.fromLocal = false
			s.c.Joins++
			s.logf("%s joined %s to the cluster (R4)", n.addr, h.actor)
		}
		done(true)
	})
}

// execIndex executes an IndexPlan around the upload of next with the
// executor production runs (alarmindex.Exec). done(false) means the actor
// was given up.
func (s *sim) execIndex(n *node, h *held, next db, p alarmindex.IndexPlan, aimed bool, done func(bool)) {
	before := h.db
	x := n.rules.ExecIndex(h.actor, p)
	s.drive(n, h, x, &driven{next: next, aimed: aimed, uploadFirst: p.UploadBeforePut}, func(err error) {
		if err != nil {
			s.giveUp(n, h, err.Error())
			done(false)
			return
		}
		if old := before.rec; old != nil && old.Legacy && next.alarm != nil && h.db.rec != nil && !h.db.rec.Legacy {
			s.c.LegacyMigrations++
		}
		if old := before.alarm; next.alarm != nil && (old == nil || *old != *next.alarm) {
			s.c.Alarms++
		}
		done(true)
	})
}

// driven is what drive keeps while it carries out one plan.
type driven struct {
	next     db   // the state the next upload replicates
	aimed    bool // the fault aimed at a joining node's first upload
	uploaded bool // the index plan's upload happened
	// uploadFirst: the index plan uploads before its PUT (a mutation).
	uploadFirst bool
	indexed     bool // a delivery's index step ended (the timer is re-armed)
	// staleDeletes counts the stale entries the plan's DELETEs named;
	// listed the entries its LIST found.
	staleDeletes int
	listed       int
	entry        alarmindex.Key
	swept        bool
	finish       func()
}

var errStep = errors.New("failed")

// drive carries out x's steps for n on h, each the way the simulated node
// does it (requests through the faulty bucket, pauses, crashes), and calls
// k with the plan's outcome (nil, or why to give the actor up). A crash
// ends it without calling k.
func (s *sim) drive(n *node, h *held, x *alarmindex.Exec, d *driven, k func(error)) {
	boot := n.boot
	var loop func()
	report := func(ok bool) {
		if ok {
			x.Report(nil)
		} else {
			x.Report(errStep)
		}
		loop()
	}
	loop = func() {
		st := x.Next()
		if d.finish != nil && !d.indexed && st.Phase != alarmindex.PhaseIndex && x.Err() == nil {
			d.indexed = true
			s.setTimer(n, h)
		}
		switch st.Kind {
		case alarmindex.StepDone:
			k(x.Err())
		case alarmindex.StepPut:
			key := st.Key
			s.putEntry(n, h, &key, func(ok bool) {
				if ok && !d.uploaded && !s.final && s.chance(0.01) {
					s.crash(n) // between the PUT and the upload: an extra entry
					return
				}
				report(ok)
			})
		case alarmindex.StepRecord:
			rec, err := alarmindex.ParseRecorded(h.actor, st.Value)
			if err != nil {
				s.failf("sim", "actor %s: the executor records %q: %v", h.actor, st.Value, err)
				return
			}
			if !s.final && s.chance(0.01) {
				report(false) // the database write fails
				return
			}
			target := &d.next
			var after db
			if d.uploaded {
				after = h.db.clone() // the mutation's order: the upload went first
				target = &after
			}
			target.rec = rec
			if h.fromLocal {
				if l := n.local[h.actor.String()]; l != nil {
					l.rec = rec // the node's own file records it too
				}
			}
			if d.uploaded {
				h.db = after
			}
			report(true)
		case alarmindex.StepFence:
			d.next = h.db.clone()
			d.next.fence = h.gen
			report(true)
		case alarmindex.StepUpload:
			index := st.Phase == alarmindex.PhaseIndex
			s.upload(n, h, d.next, d.aimed && index, func(ok bool) {
				if index {
					d.uploaded = true
				}
				if ok && st.Phase == alarmindex.PhaseFence {
					s.c.Fences++
				}
				if ok && index && !d.uploadFirst && !s.final && s.chance(pCrashAfterUpload) {
					s.crash(n) // between the upload and the DELETE: an extra entry
					return
				}
				report(ok)
			})
		case alarmindex.StepCheckHold:
			valid := s.holdValid(n, h)
			if !valid && st.Phase != alarmindex.PhaseStale {
				// It landed, but the hold lapsed on the way: a newer
				// holder may have uploaded first, so this snapshot may
				// not be the state. Not a success: nothing is deleted
				// after it.
				s.logf("%s uploaded %s after its hold lapsed: not counted", n.addr, h.actor)
			}
			x.ReportHold(valid)
			loop()
		case alarmindex.StepDelete:
			if st.Stale {
				d.staleDeletes++
				s.c.StaleDeletes++
				if st.Key.Legacy {
					s.c.LegacyRemovals++
				}
				s.logf("%s deletes stale %s", n.addr, st.Key)
			}
			req := request{kind: bucket.OpDelete, class: clsDelete, key: st.Key.String()}
			if ak := h.actor.String(); !st.Stale && s.failDelete[ak] {
				// The stale drill: this replaced entry's DELETE fails on
				// every try (the Deleter gives it up).
				delete(s.failDelete, ak)
				req.forced = &bucket.Fault{Err: errInjected}
				s.logf("%s: the DELETE of replaced %s fails on every try", n.addr, st.Key)
			}
			s.send(n, req, func(r result) {
				if r.err != nil && n.up {
					s.letGo(n, h.actor) // an entry left behind: its tenant is walked
				}
			})
			report(true)
		case alarmindex.StepList:
			s.maybePause(n, pStaleListPause, "before a stale LIST")
			s.step(n, boot, s.between(1, 5), func() {
				s.send(n, request{kind: bucket.OpList, class: clsRead, prefix: st.Prefix, limit: 1000}, func(r result) {
					h.lastUse = s.now
					d.listed += len(r.keys)
					x.ReportList(r.keys, r.err)
					if r.err != nil {
						loop()
						return
					}
					s.maybePause(n, 0.03, "before stale DELETEs")
					s.step(n, boot, s.between(1, 5), loop)
				})
			})
		case alarmindex.StepRun:
			s.runAlarm(n, h, &d.entry, d.swept, func() { report(true) })
		case alarmindex.StepRetry:
			// The plugin's StepRetry: the timer set to the retry time
			// (the rules kept the entry; the hold was let go).
			n.timer.Set(h.actor.String(), s.now+st.After.Milliseconds())
			s.arm(n)
			report(true)
		case alarmindex.StepRelease:
			s.release(n, h)
			s.letGo(n, h.actor)
			report(true)
		default:
			s.failf("sim", "actor %s: unknown step %s", h.actor, st.Kind)
		}
	}
	loop()
}

// putEntry PUTs a new index entry with If-None-Match: *, retrying the same
// PUT once after a timeout (R1's one exception).
func (s *sim) putEntry(n *node, h *held, k *alarmindex.Key, done func(bool)) {
	if k == nil {
		done(true)
		return
	}
	if s.cfg.SkipPut {
		s.logf("%s canary: records %s without PUTting it", n.addr, k)
		done(true)
		return
	}
	if s.cfg.NoRearmIndex && h.rearming {
		s.logf("%s variant: records the re-armed %s without PUTting it", n.addr, k)
		done(true)
		return
	}
	s.maybePause(n, 0.02, "before an entry PUT")
	key := k.String()
	s.step(n, n.boot, s.between(0, 5), func() {
		req := request{kind: bucket.OpPut, class: clsEntryPut, key: key, cond: bucket.Cond{IfNoneMatch: true}}
		s.send(n, req, func(r result) {
			switch {
			case r.err == nil || errors.Is(r.err, bucket.ErrPrecondition):
				done(true)
			case r.late:
				s.c.PutRetries++
				s.logf("%s retries PUT %s", n.addr, key)
				req.class = clsEntryRetry
				s.send(n, req, func(r result) {
					switch {
					case errors.Is(r.err, bucket.ErrPrecondition):
						s.c.PutRetryLanded++
						done(true)
					case r.err == nil:
						done(true)
					default:
						done(false)
					}
				})
			default:
				done(false)
			}
		})
	})
}

// upload replicates next as the actor's next snapshot, only while the hold
// is valid and the node can reach the bucket. aimed delays it at the bucket
// and cuts the node off meanwhile (the fault aimed at a joining node's first
// upload).
func (s *sim) upload(n *node, h *held, next db, aimed bool, done func(bool)) {
	if !s.holdValid(n, h) || n.cut(s.now) {
		s.logf("%s cannot upload %s: hold lapsed or cut off", n.addr, h.actor)
		done(false)
		return
	}
	if !aimed {
		s.maybePause(n, 0.02, "before an upload")
	}
	s.step(n, n.boot, s.between(0, 5), func() {
		// The hold's one key: its first upload If-None-Match, each later
		// one If-Match the last (cluster.Replica.Upload).
		key := stateKey(h.actor, h.gen, 0)
		cond := bucket.Cond{IfNoneMatch: true}
		if h.etag != "" {
			cond = bucket.Cond{IfMatch: h.etag}
		}
		req := request{kind: bucket.OpPut, class: clsState, key: key, body: encode(next), cond: cond}
		if aimed {
			d := s.between(45_000, 100_000)
			req.forced = &bucket.Fault{Late: true}
			req.lateAfter = d
			n.cutUntil = max(n.cutUntil, s.now+d+s.between(1000, 10_000))
			s.c.AimedFaults++
			s.c.CutOffs++
			s.logf("%s first upload of %s delayed at the bucket by %s; node cut off until %s", n.addr, h.actor, fmtMs(d), fmtMs(n.cutUntil-epochMs))
		}
		s.send(n, req, func(r result) {
			if r.err != nil {
				if errors.Is(r.err, bucket.ErrPrecondition) {
					s.failf("sim", "snapshot key %s written twice", key)
				}
				done(false)
				return
			}
			h.etag, h.db, h.uploaded = r.etag, next, true
			if s.holdValid(n, h) {
				// It counted: the hold's state, which its release names
				// (cluster.Holds.Uploaded).
				h.state = key
			}
			s.c.Uploads++
			s.logf("%s uploaded %s: %s", n.addr, key, next)
			s.maybePause(n, pPauseAfterUpload, "after an upload")
			done(true)
		})
	})
}

// ---- joining with one's own data (R4) ----

func (s *sim) joinAttempt(n *node, a abi.ActorID) {
	ak := a.String()
	if n.local[ak] == nil {
		return
	}
	boot := n.boot
	retry := func() {
		s.step(n, boot, s.between(5000, 15_000), func() { s.joinAttempt(n, a) })
	}
	if n.busy[ak] {
		retry()
		return
	}
	n.busy[ak] = true
	finish := func() {
		if n.boot == boot {
			delete(n.busy, ak)
		}
	}
	s.take(n, a, func(h *held, owner int, why string) {
		if h == nil {
			finish()
			retry()
			return
		}
		if !h.fromLocal {
			finish() // the bucket had it: nothing to join
			return
		}
		s.replicate(n, h, h.db.clone(), false, func(ok bool) {
			h.lastUse = s.now
			finish()
			if !ok {
				retry()
				return
			}
			s.setTimer(n, h)
		})
	})
}

// ---- delivery ----

// deliver handles a time n's timer popped for actor ak as the plugin's
// timer loop does, with the plugin's core: one delivery of an actor at a
// time (a time popped meanwhile is kept for when it ends), the entry time
// of a failed delivery delivered again by its retry, a legacy entry a
// sweep offered named by its time; take the actor and hand the entry to
// the rules (Deliver).
func (s *sim) deliver(n *node, ak string, at int64) {
	a := s.byKey[ak]
	if !n.core.Start(ak, at) {
		return // the core keeps at for when the delivery under way ends
	}
	at = n.core.Delivering(ak, at)
	sweptAt, ok := n.swept[ak]
	swept := ok && sweptAt == at
	if n.busy[ak] {
		// A request or a join holds the actor: the plugin's Take waits
		// for it; the simulator tries the same entry time again shortly.
		n.core.Release(ak)
		n.core.Failed(ak, at)
		n.timer.Set(ak, s.now+500)
		s.arm(n)
		return
	}
	delete(n.swept, ak)
	n.busy[ak] = true
	boot := n.boot
	finish := func() {
		if n.boot == boot {
			s.endDelivery(n, a)
		}
	}
	s.take(n, a, func(h *held, owner int, why string) {
		if h == nil {
			if owner >= 0 {
				// Not this node's to run: dropped, and forgotten.
				s.logf("%s drops %s at %s: %s owns it", n.addr, a, fmtMs(at-epochMs), s.nodes[owner].addr)
				if n.boot == boot {
					entry, listed := n.core.Forward(a, at, s.now)
					n.core.Forget(a)
					n.timer.Remove(ak)
					if listed {
						s.forwardEntry(n, s.nodes[owner], entry)
					}
				}
			} else {
				s.logf("%s cannot deliver %s now (%s); retries after a lease period", n.addr, a, why)
				s.retryLater(n, a, at, leaseMs)
			}
			finish()
			return
		}
		if h.fromLocal && !h.uploaded {
			// The node's own data: its first snapshot first (R4).
			s.replicate(n, h, h.db.clone(), false, func(ok bool) {
				if !ok {
					finish()
					s.step(n, boot, s.between(5000, 15_000), func() { s.joinAttempt(n, a) })
					return
				}
				s.deliverHeld(n, h, n.core.Entry(a, at), swept, finish)
			})
			return
		}
		s.deliverHeld(n, h, n.core.Entry(a, at), swept, finish)
	})
}

// deliveryFacts are the facts of delivering entry to h on n, gathered as
// the plugin's deliveryPlan gathers them.
func (s *sim) deliveryFacts(n *node, h *held, entry alarmindex.Key) alarmindex.DeliveryFacts {
	return alarmindex.DeliveryFacts{
		Delivered:      entry,
		Alarm:          h.db.alarm,
		Recorded:       h.db.rec,
		InitRecorded:   h.db.init,
		Generation:     h.gen,
		HoldValid:      s.holdValid(n, h),
		Uploaded:       h.uploaded,
		BucketHadActor: h.bucketHad,
	}
}

func (s *sim) deliverHeld(n *node, h *held, entry alarmindex.Key, swept bool, finish func()) {
	p, err := n.rules.Deliver(s.deliveryFacts(n, h, entry))
	if err != nil {
		s.giveUp(n, h, err.Error())
		s.retryLater(n, h.actor, entry.DueMs, leaseMs)
		finish()
		return
	}
	s.logf("%s delivers %s: %s", n.addr, entry, p.Outcome)
	if p.Outcome != alarmindex.OutcomeRun {
		s.backlogRedelivered(h.actor.String(), entry.DueMs)
	}
	switch p.Outcome {
	case alarmindex.OutcomeKeep:
		s.c.Keeps++
		s.kept(h.actor, entry.DueMs)
	case alarmindex.OutcomeNoState:
		s.c.NoState++
	}
	// The executor production runs: index, fence, LIST and DELETE the
	// stale entries, or run; a failure gives the actor up and retries the
	// same entry after a lease period, as the plugin's timer loop does.
	dr := &driven{next: h.db.clone(), entry: entry, swept: swept, finish: finish, indexed: p.Index.Empty()}
	s.drive(n, h, n.rules.ExecDelivery(p), dr, func(err error) {
		h.lastUse = s.now
		if err != nil && p.Outcome != alarmindex.OutcomeRun {
			s.giveUp(n, h, err.Error())
			s.retryLater(n, h.actor, entry.DueMs, leaseMs)
		}
		finish()
	})
}

// runAlarm runs on-alarm: success (clearing or re-arming), a failure with
// committed backoff, or deleting the actor; then replicates the outcome.
func (s *sim) runAlarm(n *node, h *held, entry *alarmindex.Key, swept bool, finish func()) {
	s.step(n, n.boot, s.handlerTime(), func() {
		next := h.db.clone()
		if next.alarm == nil {
			finish()
			return
		}
		scheduled := *next.alarm
		next.fired++
		x := s.rng.IntN(100)
		if s.final {
			x = 0
		}
		outcome := "cleared"
		switch {
		case s.final && h.actor.String() == s.ticker && s.now < s.tickUntil:
			// The stale drill's ticker re-arms within the horizon.
			at := s.now + tickMs
			next.alarm, next.failures = &at, 0
			outcome = "re-armed (ticker)"
		case x < 50:
			next.alarm, next.failures = nil, 0
		case x < 65:
			next.alarm, next.failures = s.pickAlarm(h.actor), 0
			outcome = "re-armed"
		case x < 94:
			// Committed retry: whatever the handler left due before the
			// retry time moves there.
			next.failures++
			var left *int64
			switch y := s.rng.IntN(10); {
			case y < 6:
				left = &scheduled
			case y < 8:
				now := s.now
				left = &now
			case y < 9:
				left = s.pickAlarm(h.actor)
			}
			var gaveUp bool
			next.alarm, gaveUp = n.rules.AfterFailureLimitedAt(left, next.failures, s.now, s.maxAttempts)
			s.checkRetry(h.actor, left, next.failures, next.alarm)
			outcome = "failed"
			if gaveUp {
				next.failures = 0
				outcome = "failed its last attempt: given up"
				s.c.GivenUp++
			}
		default:
			next = db{rec: next.rec, durable: next.durable} // a delete keeps the count of acknowledged events: what follows descends from them
			outcome = "deleted the actor"
		}
		s.logf("%s on-alarm %s at %s: %s", n.addr, h.actor, fmtMs(scheduled-epochMs), outcome)
		h.rearming = next.alarm != nil
		s.replicate(n, h, next, false, func(ok bool) {
			h.rearming = false
			h.lastUse = s.now
			if ok {
				n.core.Ran(h.actor, scheduled, s.now)
				s.c.Deliveries++
				if swept {
					s.c.TimerDeliveries++
				}
				if outcome == "deleted the actor" {
					s.c.ActorDeletes++
				}
				s.setTimer(n, h)
			} else if entry != nil {
				s.retryLater(n, h.actor, entry.DueMs, leaseMs)
			}
			finish()
		})
	})
}

// checkRetry holds a committed retry to the rule, written out here apart
// from the production arithmetic: the n-th failure in a row retries after
// 1 s doubled n-1 times, at most retry_max (5 min); an alarm the handler
// left before that time moves to it, a later one or a clear stands. Under
// a retry limit, the failure that reaches it retries nothing: an alarm
// left before the retry time is cleared, a later one stands.
func (s *sim) checkRetry(a abi.ActorID, left *int64, failures int, got *int64) {
	delay := int64(1000)
	for i := 1; i < failures && delay < retryMax.Milliseconds(); i++ {
		delay *= 2
	}
	delay = min(delay, retryMax.Milliseconds())
	var want *int64
	switch {
	case left == nil:
	case s.maxAttempts > 0 && failures >= s.maxAttempts:
		if *left >= s.now+delay {
			w := *left
			want = &w
		}
	default:
		w := max(*left, s.now+delay)
		want = &w
	}
	if (want == nil) != (got == nil) || (want != nil && *want != *got) {
		s.failf("backoff", "actor %s: failure %d with %s left committed a retry at %s, want %s", a, failures, fmtAlarm(left), fmtAlarm(got), fmtAlarm(want))
	}
}

func fmtAlarm(at *int64) string {
	if at == nil {
		return "none"
	}
	return fmtMs(*at - epochMs)
}
