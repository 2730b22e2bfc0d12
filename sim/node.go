package sim

import (
	"math/rand/v2"
	"slices"
	"time"

	"github.com/wasmkeep/alarms/alarmindex"
	"github.com/wasmkeep/alarms/core"
	"github.com/wasmkeep/alarms/internal/variant"
	"github.com/wasmkeep/alarms/sweeper"

	"github.com/wasmkeep/alarms/abi"
)

type node struct {
	id      int
	addr    string
	joiner  bool
	started bool
	// gateway nodes hold a node lease and sweep, but serve no class: they
	// run no actors, take no requests and deliver nothing, yet count among
	// the live nodes that share the index.
	gateway bool

	up          bool
	boot        uint64 // changes at every crash and start: steps of an older boot are dropped
	epoch       uint64 // the node lease this node believes it has
	validAgain  int64  // when it became valid again after its latest lapse (0: none)
	validUntil  int64  // when it stops trusting that lease
	pausedUntil int64
	cutUntil    int64

	rules alarmindex.Rules
	// core is the plugin's deterministic core (package core), as the
	// plugin keeps it: lost with the process.
	core   *core.State
	rng    *rand.Rand // the sweep planner's rotation
	timer  *sweeper.Timer
	wakeAt int64
	// swept is the time a sweep offered each actor at (the simulator's
	// count of deliveries through a sweep, not a decision).
	swept  map[string]int64
	held   map[string]*held
	busy   map[string]bool
	cursor string
	// sched is when the node lists the tenant (sweeper.Schedule, as the
	// plugin's loop runs it); letGo are the actors it let go of, whose
	// overdue entries it delivers as its own (docs/design.md#relist).
	sched *sweeper.Schedule
	letGo map[string]bool
	// unreleased are the holds whose release failed (the node was cut
	// off), by actor key: tried again every lease period, as the node's
	// releaseAgain does.
	unreleased map[string]holdRec

	// local is single-node data not yet in the bucket (a joining node's
	// actors); it survives crashes.
	local map[string]*db
}

// held is an actor a node holds: its hold generation and its database.
type held struct {
	actor     abi.ActorID
	gen       uint64
	epoch     uint64
	db        db
	state     string // the newest state as this hold knows it (a snapshot key, "" for none)
	etag      string // the ETag of this hold's last upload ("": it has uploaded nothing)
	uploaded  bool   // this hold uploaded anything
	bucketHad bool   // the bucket had state for the actor when taken
	fromLocal bool   // the database came from the node's own data
	lastUse   int64
	// rearming: the replication under way is of an alarm on-alarm set
	// (Config.NoRearmIndex skips its entry's PUT).
	rearming bool
}

func (n *node) cut(now int64) bool { return now < n.cutUntil }

// step runs fn on node n after d, unless n crashed (or restarted) in
// between; while n is paused, its steps wait.
func (s *sim) step(n *node, boot uint64, d int64, fn func()) {
	var run func()
	run = func() {
		if n.boot != boot || !n.up {
			return
		}
		if s.now < n.pausedUntil {
			s.at(n.pausedUntil, run)
			return
		}
		fn()
	}
	if d == 0 {
		run()
		return
	}
	s.after(d, run)
}

// nodeEvery runs fn on n every period while this boot lasts.
func (s *sim) nodeEvery(n *node, phase, period int64, fn func()) {
	boot := n.boot
	var tick func()
	tick = func() {
		fn()
		s.step(n, boot, period, tick)
	}
	s.step(n, boot, phase, tick)
}

func (s *sim) boot(n *node) {
	n.up = true
	n.started = true
	n.boot++
	s.epochs++
	n.epoch = s.epochs
	n.validAgain = 0
	s.leases[n.id] = storeLease{epoch: n.epoch, expires: s.now + leaseMs}
	n.validUntil = s.now + leaseMs - safetyMs
	var seed [32]byte
	for i := range 4 {
		v := s.rng.Uint64()
		for j := range 8 {
			seed[i*8+j] = byte(v >> (8 * j))
		}
	}
	nonces, err := alarmindex.NewNonceSource(rand.NewChaCha8(seed))
	if err != nil {
		panic(err)
	}
	n.rules = variant.Rules(alarmindex.Rules{Nonces: nonces, RetryMax: retryMax}, s.cfg.Variants)
	n.core = core.New(core.Config{RetryAfterError: leaseMs * time.Millisecond, RetryMax: retryMax})
	n.rng = rand.New(rand.NewPCG(s.rng.Uint64(), s.rng.Uint64()))
	n.timer = sweeper.NewTimer(retryMax)
	n.wakeAt = 0
	n.swept = map[string]int64{}
	n.held = map[string]*held{}
	n.busy = map[string]bool{}
	n.cursor = ""
	n.sched = &sweeper.Schedule{Margin: marginMs * time.Millisecond, Period: sweepMs * time.Millisecond, Safety: safetyPeriodMs * time.Millisecond}
	n.letGo = map[string]bool{}
	n.unreleased = map[string]holdRec{}
	s.logf("%s up (lease epoch %d)", n.addr, n.epoch)

	// Start-up scan of its own data: alarms into the timer, and each actor
	// the bucket may not have offered as a first snapshot.
	for _, ak := range sortedKeys(n.local) {
		if d := n.local[ak]; d.alarm != nil {
			n.timer.Set(ak, *d.alarm)
		}
		a := s.byKey[ak]
		s.step(n, n.boot, s.between(1, 50), func() { s.joinAttempt(n, a) })
	}
	s.arm(n)
	s.nodeEvery(n, renewMs, renewMs, func() { s.renew(n) })
	s.nodeEvery(n, s.between(0, sweepMs), sweepMs, func() { s.sweep(n) })
	s.nodeEvery(n, 5000, 5000, func() { s.releaseIdle(n) })
	s.nodeEvery(n, leaseMs, leaseMs, func() { s.releaseAgain(n) })
}

// stop ends n's process: what it held in memory is gone.
func (s *sim) stop(n *node, how string) {
	s.c.Crashes++
	s.logf("%s %s", n.addr, how)
	n.up = false
	n.boot++
	n.held, n.busy, n.swept = nil, nil, nil
}

func (s *sim) crash(n *node) {
	s.stop(n, "crashes")
	down := s.between(1000, 20_000)
	if s.final {
		down = 1
	}
	s.after(down, func() {
		if !n.up {
			s.boot(n)
		}
	})
}

// faultLoop injects crashes, pauses and cut-offs into n during the main
// phase.
func (s *sim) faultLoop(n *node) {
	d := int64(s.rng.ExpFloat64() * 70_000)
	s.after(max(d, 1000), func() {
		if s.final {
			return
		}
		switch x := s.rng.IntN(100); {
		case x < 35:
			if n.up {
				s.crash(n)
			}
		case x < 70:
			if n.up {
				s.pause(n, s.between(2000, 30_000), "random")
			}
		default:
			until := s.now + s.between(2000, 25_000)
			if until > n.cutUntil {
				n.cutUntil = until
			}
			s.c.CutOffs++
			s.logf("%s cut off until %s", n.addr, fmtMs(n.cutUntil-epochMs))
		}
		s.faultLoop(n)
	})
}

func (s *sim) pause(n *node, d int64, why string) {
	until := s.now + d
	if until > n.pausedUntil {
		n.pausedUntil = until
	}
	s.c.Pauses++
	s.logf("%s pauses until %s (%s)", n.addr, fmtMs(n.pausedUntil-epochMs), why)
}

// maybePause pauses n at an interesting point with probability p, for
// longer than a lease: whatever n decided before, it does after another
// node may have taken over.
func (s *sim) maybePause(n *node, p float64, site string) {
	if s.final || !s.chance(p) {
		return
	}
	s.pause(n, s.between(leaseMs, 3*leaseMs), site)
}

// renew renews n's node lease. A node that finds its lease expired was
// fenced out: it gets a new lease, and every hold it had is void.
func (s *sim) renew(n *node) {
	if n.cut(s.now) {
		return
	}
	if s.leaseValid(n.id, n.epoch) {
		s.leases[n.id].expires = s.now + leaseMs
		n.validUntil = s.now + leaseMs - safetyMs
		return
	}
	s.c.LeasesLost++
	s.epochs++
	n.epoch = s.epochs
	n.validAgain = s.now
	s.leases[n.id] = storeLease{epoch: n.epoch, expires: s.now + leaseMs}
	n.validUntil = s.now + leaseMs - safetyMs
	// Its holds are void (another epoch's) but kept, as the node keeps
	// its open actors: the next event of each takes it again, with one
	// conditional write when no node took it meanwhile (retake).
	s.logf("%s lost its lease; new lease epoch %d, holds void", n.addr, n.epoch)
}

// holdValid is what a node knows of its hold: it still has it, and its
// node lease is valid by its own clock.
func (s *sim) holdValid(n *node, h *held) bool {
	return n.up && n.held[h.actor.String()] == h && h.epoch == n.epoch && s.now < n.validUntil
}

func (s *sim) releaseIdle(n *node) {
	for _, ak := range sortedKeys(n.held) {
		h := n.held[ak]
		if !n.busy[ak] && s.now-h.lastUse > idleMs {
			s.logf("%s releases idle %s", n.addr, h.actor)
			s.release(n, h)
		}
	}
}

// release gives the hold back, if the node can still reach the store; a
// release that fails for that is tried again (releaseAgain).
func (s *sim) release(n *node, h *held) {
	ak := h.actor.String()
	if n.held[ak] == h {
		delete(n.held, ak)
	}
	if r := s.holds[ak]; r != nil && r.node == n.id && r.gen == h.gen {
		if n.cut(s.now) {
			n.unreleased[ak] = holdRec{node: n.id, gen: h.gen, state: h.state}
			return
		}
		// The release names the hold's state: its own last upload that
		// counted, or what it found (cluster.Holds.Release).
		*r = holdRec{node: r.node, epoch: r.epoch, gen: r.gen, released: true, state: h.state}
	}
	delete(n.unreleased, ak)
}

// releaseAgain tries again, every lease period, the releases that failed
// (node.releaseAgain): while the record names this node and its lease is
// valid, every other node is refused the actor, yet this node holds
// nothing. A hold taken anew since has nothing left to release.
func (s *sim) releaseAgain(n *node) {
	if n.cut(s.now) {
		return
	}
	for _, ak := range sortedKeys(n.unreleased) {
		u := n.unreleased[ak]
		delete(n.unreleased, ak)
		if n.held[ak] != nil || n.busy[ak] {
			continue
		}
		if r := s.holds[ak]; r != nil && r.node == n.id && r.gen == u.gen && !r.released {
			*r = holdRec{node: r.node, epoch: r.epoch, gen: r.gen, released: true, state: u.state}
			s.logf("%s releases %s again (its release had failed)", n.addr, s.byKey[ak])
		}
	}
}

// view is the live nodes as every node sees them (one clock, one truth):
// each serving every class, as its lease says; a gateway's lease says so
// too (a stale class view: docs/design.md#walkers), though it serves none.
// The epoch sums the live nodes' lease epochs, so a node that restarted,
// or lost its lease and took a new one, changes the view as a later
// process under a node ID does (cluster.Leases.MembersEpoch).
func (s *sim) view() sweeper.View {
	var v sweeper.View
	for i, n := range s.nodes {
		if s.leaseValid(i, s.leases[i].epoch) {
			v.Members = append(v.Members, sweeper.Member{Addr: n.addr, All: true})
			v.Epoch += s.leases[i].epoch
		}
	}
	return v
}

// letGo is the plugin's LetGo: n let go of actor a, whose entry may be in
// no live timer now.
func (s *sim) letGo(n *node, a abi.ActorID) {
	if n.sched == nil {
		return
	}
	n.sched.Hint(a.Tenant, s.now)
	n.letGo[a.String()] = true
}

// relistLater polls, every relistPollMs until n's next sweep, for n's
// deliveries to fall to a quarter of the cap, and then walks the tenant
// again early (sweeper.Loop.Run).
func (s *sim) relistLater(n *node, polls int64) {
	if polls*relistPollMs >= sweepMs {
		return // the next sweep walks it
	}
	s.step(n, n.boot, relistPollMs, func() {
		if n.core.Pending() > sweepCap/4 {
			s.relistLater(n, polls+1)
			return
		}
		s.c.EarlyWalks++
		s.logf("%s walks the tenant early: its plan was capped, %d deliveries pending", n.addr, n.core.Pending())
		s.sweep(n)
	})
}

// sweep is one alarm_sweep of n, on the schedule (sweeper.Schedule) the
// plugin's loop follows, or an early walk (relistLater): walk the overdue
// part of the index when the tenant is due and n is one of its walkers (or
// was hinted), plan with the production planner among the tenant's
// walkers, offer to the node timer; a plan the cap cut short, after a walk
// whose listing did not fail, is walked again early.
func (s *sim) sweep(n *node) {
	// Not while its lease is not valid, as the plugin (sweeper.Config.Valid).
	if n.cut(s.now) || s.now >= n.validUntil {
		return
	}
	v := s.view()
	if !s.cfg.NoMembershipRelist || !n.sched.Known() {
		if n.sched.Members(v, s.now) {
			s.c.Relists++
		}
	}
	n.sched.Found([]string{tenant}, s.now)
	walkers := sweeper.NewWalkers(v, walkersR)
	self := sweeper.Member{Addr: n.addr, All: !n.gateway, Classes: []string{}}
	if !n.sched.Due(tenant, s.now) || !(n.sched.Extra(tenant) || walkers.Walks(self, tenant)) {
		return
	}
	s.c.Walks++
	from := n.cursor
	w := sweeper.NewWalk(tenant, n.cursor, s.now-marginMs, sweeper.WalkLimits{MaxEntries: walkMaxEntries})
	listFailed := false
	for {
		pg, ok := w.Next()
		if !ok {
			break
		}
		keys, err := s.listNow(n, pg.Prefix, pg.StartAfter, pg.Limit)
		if err != nil {
			w.Abort()
			listFailed = true
			break
		}
		w.Feed(keys)
	}
	res := w.Result()
	n.cursor = res.Cursor
	n.sched.Walked(tenant, s.now, sweeper.Walked{FromStart: from == "", Result: res, Actionable: !n.gateway && len(res.Entries) > 0})
	if res.ReachedEnd && from == "" && res.Read == 0 && res.NextDueMs == 0 {
		clear(n.letGo) // the tenant is empty
	}
	shard := walkers.Of(tenant, class) // the model's one class
	plan := sweeper.PlanSweep(sweeper.PlanInput{
		Entries:    res.Entries,
		Now:        time.UnixMilli(s.now),
		Margin:     marginMs * time.Millisecond,
		Self:       n.addr,
		Since:      sinceMs(n.validAgain),
		Live:       s.liveAddrs(),
		ShardNodes: func(string) []string { return shard },
		Own:        func(a abi.ActorID) bool { return n.letGo[a.String()] },
		// A class the node does not serve counts as busy, as in the
		// plugin: nodes that serve it deliver the entry, as anyone's once
		// three margins overdue.
		Busy: func(a abi.ActorID) bool {
			return n.gateway || n.busy[a.String()] || n.core.InFlight(a.String()) || n.core.HeldElsewhereLately(a, s.now) || n.timer.Keeps(a.String(), s.now)
		},
		Delivered: func(a abi.ActorID, due int64) bool {
			return n.core.RanLately(a, due, s.now)
		},
		Rand:          n.rng,
		MaxDeliveries: sweepCap,
	})
	s.c.DeliveredLately += int64(plan.Stats.Delivered)
	for _, d := range plan.Deliveries {
		if d.Anyone && s.cfg.NoAnyone {
			continue
		}
		ak := d.Actor.String()
		if _, known := s.byKey[ak]; !known {
			s.failf("sim", "sweep met an entry of unknown actor %s", d.Actor)
			return
		}
		delete(n.letGo, ak) // offered: in the node's timer now
		if n.timer.Offer(ak, d.DueMs, s.now) {
			n.core.Listed(d.Actor, d.DueMs)
			if d.Anyone {
				s.c.Anyone++
			}
			if core.LegacyAmong(d.Keys) {
				n.core.OfferedLegacy(d.Actor, d.DueMs)
			}
			n.swept[ak] = d.DueMs
			s.logf("%s sweep offers %s at %s (%d keys, anyone=%t)", n.addr, d.Actor, fmtMs(d.DueMs-epochMs), len(d.Keys), d.Anyone)
		}
	}
	for _, d := range plan.Busy {
		s.removeKeptStale(n, d)
	}
	s.arm(n)
	if plan.Stats.Deferred > 0 && !listFailed && !s.cfg.NoEarlyWalks {
		s.relistLater(n, 0)
	}
}

// removeKeptStale carries out the plugin's removal of an overdue entry of
// an actor the timer keeps at a later time, as the plugin's stale.go does:
// the plugin's core (core.State.Stale) decides whether to, the delivery
// rules what to remove; on-alarm never runs and the timer's time is left
// alone, unless the committed alarm is that time after all.
func (s *sim) removeKeptStale(n *node, d sweeper.Overdue) {
	ak := d.Actor.String()
	at, inTimer := n.timer.Get(ak)
	entry, ok := n.core.Stale(d, core.Kept{Now: s.now, Busy: n.gateway || n.busy[ak], TimerAt: at, TimerHeld: inTimer, Key: ak})
	if !ok || !n.core.Claim(ak) {
		return
	}
	s.removeStale(n, entry, true, func(bool) {})
}

// forwardEntry is the plugin's forward of an entry n's sweep listed whose
// delivery found the actor held by node o (alarms.Forwarder, the node's
// POST .../alarm:offer): it reaches o after a network delay, unless either
// end is cut off, and o's plugin handles it (offerEntry).
func (s *sim) forwardEntry(n, o *node, entry alarmindex.Key) {
	if s.cfg.NoStaleForward || n.cut(s.now) {
		return
	}
	s.c.Forwards++
	s.logf("%s forwards %s to its holder %s", n.addr, entry, o.addr)
	s.step(o, o.boot, s.between(1, 20), func() {
		if !o.cut(s.now) {
			s.offerEntry(o, entry)
		}
	})
}

// offerEntry is the holder's side of a forwarded entry, as the plugin's
// OfferEntry: its core decides (core.State.Forwarded), then the removal
// runs as for an entry the timer keeps.
func (s *sim) offerEntry(n *node, entry alarmindex.Key) {
	ak := entry.Actor.String()
	at, inTimer := n.timer.Get(ak)
	e, ok := n.core.Forwarded(entry, core.Kept{Now: s.now, Busy: n.gateway || n.busy[ak], TimerAt: at, TimerHeld: inTimer, Key: ak})
	if !ok || !n.core.Claim(ak) {
		s.logf("%s skips the forwarded %s", n.addr, entry)
		return
	}
	s.removeStale(n, e, false, func(removed bool) {
		if removed {
			s.c.ForwardRemovals++
		}
	})
}

// removeStale takes the actor (n holds its delivery slot) and delivers the
// entry time of entry without running on-alarm, as the plugin's
// removeStale: the stale entries at that time removed as the rules say, the
// timer armed if the committed alarm is that time after all; an actor
// another node holds dropped from the timer and, with forward (an entry
// n's sweep listed), the entry forwarded to the holder. end is told
// whether it removed an entry.
func (s *sim) removeStale(n *node, entry alarmindex.Key, forward bool, end func(removed bool)) {
	a := entry.Actor
	ak := a.String()
	n.busy[ak] = true
	boot := n.boot
	finish := func() {
		if n.boot == boot {
			s.endDelivery(n, a)
		}
	}
	done := func(removed, failed bool) {
		if n.boot == boot {
			n.core.StaleDone(a, entry.DueMs, s.now, removed, failed)
		}
		finish()
	}
	s.take(n, a, func(h *held, owner int, _ string) {
		if h == nil {
			if owner >= 0 && n.boot == boot {
				n.core.Forget(a) // another node's
				n.timer.Remove(ak)
				if forward && n.core.Forwarding(entry, s.now) {
					s.forwardEntry(n, s.nodes[owner], entry)
				}
			}
			finish()
			return
		}
		p, err := n.rules.Deliver(s.deliveryFacts(n, h, entry))
		if err != nil {
			s.giveUp(n, h, err.Error())
			done(false, true)
			return
		}
		switch core.StaleStepOf(p.Outcome) {
		case core.StaleRemove:
			s.c.KeptStale++
			s.logf("%s removes stale entries of %s at %s", n.addr, h.actor, fmtMs(entry.DueMs-epochMs))
			dr := &driven{next: h.db.clone(), entry: entry, indexed: true}
			s.drive(n, h, n.rules.ExecDelivery(p), dr, func(err error) {
				h.lastUse = s.now
				if err != nil {
					s.giveUp(n, h, err.Error())
				}
				// Nothing left at that time is done too, as in the plugin.
				removed := dr.staleDeletes > 0 || dr.listed == 0
				done(removed, err != nil)
				end(err == nil && dr.staleDeletes > 0)
			})
		case core.StaleArm:
			n.timer.Set(ak, entry.DueMs)
			s.arm(n)
			done(true, false)
		case core.StaleLetGo:
			s.kept(h.actor, entry.DueMs)
			s.release(n, h)
			s.letGo(n, h.actor)
			done(false, false)
		}
	})
}

// arm makes sure a wake-up is scheduled for the timer's next time.
func (s *sim) arm(n *node) {
	next, ok := n.timer.Next()
	if !ok {
		return
	}
	at := max(next, s.now)
	if n.wakeAt != 0 && n.wakeAt <= at {
		return
	}
	n.wakeAt = at
	boot := n.boot
	s.at(at, func() {
		s.step(n, boot, 0, func() {
			n.wakeAt = 0
			for {
				ak, due, ok := n.timer.PopDue(s.now)
				if !ok {
					break
				}
				s.deliver(n, ak, due)
			}
			s.arm(n)
		})
	})
}

// setTimer makes n's timer match the committed alarm of h (Set is
// authoritative).
func (s *sim) setTimer(n *node, h *held) {
	ak := h.actor.String()
	// As the plugin re-arms after a delivery (deliverTaken): the time a
	// delivery under way delivers is settled first, so a committed alarm
	// at that very time is kept for when it ends (core.State.Settled).
	n.core.Settled(ak)
	n.core.Armed(h.actor, ak, h.db.alarm)
	if h.db.alarm == nil {
		n.timer.Remove(ak)
		return
	}
	n.timer.Set(ak, *h.db.alarm)
	s.arm(n)
}

// retryLater tries a delivery of the entry time due again after d, as the
// plugin does after a failure on the host's side: the timer is offered the
// retry (a time it holds earlier wins), and the core keeps due for it, so
// the retry delivers that entry time (core.State.Failed); the plugin hints
// the actor's tenant too.
func (s *sim) retryLater(n *node, a abi.ActorID, due, d int64) {
	s.letGo(n, a)
	if n.timer.Offer(a.String(), s.now+d, s.now) {
		n.core.Failed(a.String(), due)
	}
	s.arm(n)
}

// endDelivery ends what core.State.Start or Claim began, as the plugin's
// release does: the actor is free, and a time the timer popped meanwhile,
// if nothing armed the actor since, is offered again.
func (s *sim) endDelivery(n *node, a abi.ActorID) {
	ak := a.String()
	delete(n.busy, ak)
	if at, again := n.core.Release(ak); again {
		if _, held := n.timer.Get(ak); !held {
			n.timer.Offer(ak, at, s.now)
			s.arm(n)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// sinceMs is a PlanInput.Since of ms (0: none).
func sinceMs(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}
