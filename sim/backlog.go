package sim

import (
	"fmt"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/alarmindex"
)

// The backlog drill (docs/simulation.md#the-backlog-drill): once the final
// phase is quiet, a node holds between backlogMin and backlogMax actors
// whose alarms are all due at one instant a few seconds ahead, and dies for
// good before they are due. Its hold records, their snapshots and their
// entries are what a node that took and armed them leaves in the bucket;
// no other node's timer holds them. The survivors' walkers find them once
// they are a margin overdue and deliver them a plan of sweepCap at a time,
// each next plan walked early once the node's deliveries are few (the
// drain, docs/design.md#drain). Every one must fire exactly once (its
// state descends from one run of on-alarm, never two), and all
// within backlogBound of their due time, which the periodic sweeps alone
// (Config.NoEarlyWalks) miss many times over.
const (
	// backlogDrillMs: when in the final phase the drill starts: after the
	// orphan drill's alarm was required delivered (orphanCheckMs), since
	// the drill's entries keep the walkers listing the tenant and would
	// find an orphan without the relisting that drill shows, and long
	// after the stale drill's ticker stopped (tickEndMs): a backlog longer
	// than a walk reads (walkMaxEntries) is walked from a cursor, a walk
	// resuming after the last key the one before read, so an entry due
	// before the backlog is read again only once the cursor comes round,
	// and the stale bound (staleBoundMs) holds for a cluster with fewer
	// overdue entries than a walk reads, not beside a drain
	// (docs/design.md#drain). The final phase is long enough for the
	// largest backlog's bound to pass before every committed alarm must
	// have been delivered (finalMs - safetyWalkMs).
	backlogDrillMs = orphanCheckMs
	// backlogMin, backlogMax bound the drill's actors.
	backlogMin, backlogMax = 1000, 1500
	// backlogPlanMs is the longest a plan's deliveries take once the
	// cluster is quiet: six requests in turn of at most 25 ms each (the
	// take's read of the record and of the holder's lease and its
	// conditional write, the restore, the upload, the entry's DELETE) and
	// a handler of at most 30 ms, with room.
	backlogPlanMs = 200
	// backlogCheckBatch is how many of the drill's actors each periodic
	// check (checkMs) looks at, in turn; every change of an actor's keys
	// in the bucket checks it at once too.
	backlogCheckBatch = 10
)

// backlogBound is how long after their due time n alarms of a dead node
// may take to drain: a margin until they are listed, a sweep until a
// walker's schedule walks them, then plans of sweepCap by one walker (the
// other walker may be a gateway, whose shard waits to be anyone's), each
// a poll apart plus its deliveries. The periodic sweeps alone deliver
// sweepCap a walker a sweep period: for 1,000 alarms, up to 2,500 s
// against a bound of 200.7 s.
func backlogBound(n int) int64 {
	plans := int64(n)/sweepCap + 1
	return marginMs + sweepMs + plans*(relistPollMs+backlogPlanMs)
}

// backlog is the drill's state.
type backlog struct {
	dueMs int64
	keys  []string // the drill's actors
	// runs is how many runs of on-alarm each actor's state descends
	// from, as last seen: one is its delivery, two a duplicate.
	runs  map[string]int
	left  int   // actors whose run is still to come
	pages int64 // the bucket's LIST pages when the drill began
	next  int   // the periodic check's turn
}

// backlogDrill runs the drill (see above).
func (s *sim) backlogDrill() {
	stale := s.cluster[1].String() // the stale drill's actor: its holder stays
	var d *node
	for _, n := range s.nodes {
		if n.up && !n.gateway && !n.joiner && !n.cut(s.now) && s.now >= n.pausedUntil && n.held[stale] == nil {
			d = n
			break
		}
	}
	if d == nil {
		s.logf("backlog drill: no node to run it")
		return
	}
	size := int(s.between(backlogMin, backlogMax))
	bl := &backlog{dueMs: (s.now/gridMs + 2) * gridMs, runs: map[string]int{}, left: size, pages: s.b.ListPagesSent()}
	s.bl = bl
	s.c.BacklogDrills++
	s.c.BacklogAlarms += int64(size)
	for i := range size {
		a := abi.ActorID{Tenant: tenant, Class: class, Name: fmt.Sprintf("backlog/%04d", i)}
		ak := a.String()
		s.actors = append(s.actors, a)
		s.byKey[ak] = a
		bl.keys = append(bl.keys, ak)
		bl.runs[ak] = 0
		// What d leaves having taken the actor (generation 1), set its
		// alarm and replicated it: its hold record, the entry, then the
		// snapshot naming it (R4's order).
		at := bl.dueMs
		rec := alarmindex.Key{Actor: a, DueMs: at, Tag: alarmindex.Tag{Generation: 1, Nonce: fmt.Sprintf("b%x", i)}}
		s.holds[ak] = &holdRec{node: d.id, epoch: d.epoch, gen: 1}
		s.seedPut(rec.String(), nil)
		s.seedPut(stateKey(a, 1, 0), encode(db{init: true, alarm: &at, rec: &rec}))
	}
	s.logf("backlog drill: %s holds %d actors due at %s and dies for good", d.addr, size, fmtMs(bl.dueMs-epochMs))
	s.kill(d)
	s.at(bl.dueMs+backlogBound(size), func() {
		if bl.left == 0 {
			return
		}
		var first string
		for _, ak := range bl.keys {
			if bl.runs[ak] == 0 {
				first = ak
				break
			}
		}
		s.failf("liveness", "backlog drill: %d of the %d alarms of the dead node %s still not delivered %s after they were due (the bound for %d), %s among them",
			bl.left, size, d.addr, fmtMs(backlogBound(size)), size, s.byKey[first])
	})
}

// kill stops n for good: unlike crash, nothing starts it again.
func (s *sim) kill(n *node) { s.stop(n, "dies") }

// backlogState counts a drill actor's delivery once its state, as the
// records name it, descends from one run of on-alarm (the run's outcome
// replicated, whether or not its node lived to hear so): a state that
// descends from two is a duplicate.
func (s *sim) backlogState(ak string) {
	bl := s.bl
	if bl == nil {
		return
	}
	c, ok := bl.runs[ak]
	st := s.stateOf(ak)
	if !ok || st == nil || st.db.fired == c {
		return
	}
	if st.db.fired > 1 {
		s.failf("invariant", "backlog drill: actor %s: state %s descends from %d runs of on-alarm for %s", s.byKey[ak], st.key, st.db.fired, fmtMs(bl.dueMs-epochMs))
		return
	}
	if st.db.fired < c {
		s.failf("invariant", "backlog drill: actor %s: state %s descends from no run of on-alarm, an earlier state from one: a delivered alarm is back", s.byKey[ak], st.key)
		return
	}
	bl.runs[ak] = st.db.fired
	bl.left--
	if bl.left == 0 {
		pages := s.b.ListPagesSent() - bl.pages
		s.c.BacklogListPages += pages
		drain := s.now - bl.dueMs
		s.maxDrainMs = max(s.maxDrainMs, drain)
		s.logf("backlog drill: all %d alarms delivered %s after due (bound %s), %d LIST pages", len(bl.keys), fmtMs(drain), fmtMs(backlogBound(len(bl.keys))), pages)
	}
}

// backlogRedelivered counts a delivery of a drill actor's due time that
// did not run on-alarm: the time was delivered already.
func (s *sim) backlogRedelivered(ak string, due int64) {
	if bl := s.bl; bl != nil && due == bl.dueMs {
		if _, ok := bl.runs[ak]; ok {
			s.c.BacklogRedeliveries++
		}
	}
}

// checkBacklog checks the next backlogCheckBatch of the drill's actors.
func (s *sim) checkBacklog() {
	bl := s.bl
	if bl == nil {
		return
	}
	for range min(backlogCheckBatch, len(bl.keys)) {
		s.check(bl.keys[bl.next])
		bl.next = (bl.next + 1) % len(bl.keys)
		if s.fail != nil {
			return
		}
	}
}
