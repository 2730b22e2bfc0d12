package sim

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/wasmkeep/alarms/alarmindex"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/sweeper"

	"github.com/wasmkeep/alarms/abi"
)

var errCutOff = errors.New("node cut off from the network")
var errInjected = errors.New("injected failure")

func newSim(cfg Config) *sim {
	if cfg.AimedJoinFault == 0 {
		cfg.AimedJoinFault = DefaultAimedJoinFault
	}
	s := &sim{
		cfg:   cfg,
		rng:   rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		now:   epochMs,
		byKey: map[string]abi.ActorID{},
		holds: map[string]*holdRec{},
		sh:    shadow{objects: map[string]*stateInfo{}, entries: map[string]map[string]alarmindex.Key{}, putAt: map[string]int64{}, written: map[string]int64{}, keptAt: map[string]int64{}, acked: map[string]int{}},
		tr:    tracer{h: fnv.New64a(), keep: cfg.KeepTrace},
	}
	s.setAt, s.failDelete = map[string]int64{}, map[string]bool{}
	s.ownKeys = map[string]ownKey{}
	s.mainEnd = epochMs + mainMs
	s.end = s.mainEnd + finalMs
	s.b = bucket.NewMem()
	s.b.Faults = s.faultHook
	s.b.Sleep = func(context.Context, time.Duration) error { return nil }
	s.b.OnChange = s.onChange
	s.setup()
	return s
}

// setup builds the starting world: actors (some with state from before,
// with legacy entries), three nodes up, one or two nodes joining later with
// alarms in their own data.
func (s *sim) setup() {
	names := []string{"a0", "a1", "a2", "a3", "a/4", "\x00\xff5"}
	for _, n := range names {
		a := abi.ActorID{Tenant: tenant, Class: class, Name: n}
		s.addActor(a)
		s.cluster = append(s.cluster, a)
	}
	// Actors from before: the first one to three carry legacy entries
	// (written before tags existed), sometimes with a leftover legacy entry
	// no state names; a3 has a tagged entry. a/4 and the last are new.
	legacy := 1 + s.rng.IntN(3)
	for i, a := range s.cluster[:4] {
		gen := uint64(1 + s.rng.IntN(3))
		at := epochMs + s.between(0, 12)*gridMs
		d := db{init: true, alarm: &at}
		if i < legacy {
			d.rec = &alarmindex.Key{Actor: a, DueMs: at, Legacy: true}
			if s.chance(0.5) {
				old := alarmindex.Key{Actor: a, DueMs: at - s.between(1, 6)*gridMs, Legacy: true}
				s.seedPut(old.String(), nil)
			}
		} else {
			d.rec = &alarmindex.Key{Actor: a, DueMs: at, Tag: alarmindex.Tag{Generation: gen, Nonce: "0abc"}}
		}
		s.seedPut(d.rec.String(), nil)
		s.seedPut(stateKey(a, gen, 0), encode(d))
		s.holds[a.String()] = &holdRec{node: -1, gen: gen, released: true, state: stateKey(a, gen, 0)}
	}

	core := 3
	joiners := 1 + s.rng.IntN(2)
	for i := range core + joiners {
		n := &node{id: i, addr: fmt.Sprintf("10.0.0.%d:7000", i+1), local: map[string]*db{}}
		s.nodes = append(s.nodes, n)
		s.leases = append(s.leases, storeLease{})
	}
	for _, n := range s.nodes[:core] {
		s.after(s.between(0, 500), func() { s.boot(n) })
		s.faultLoop(n)
	}
	for _, n := range s.nodes[core:] {
		n.joiner = true
		joinAt := epochMs + s.between(20_000, mainMs-90_000)
		for k := range 1 + s.rng.IntN(2) {
			a := abi.ActorID{Tenant: tenant, Class: class, Name: fmt.Sprintf("j%d-%d", n.id, k)}
			if k == 1 && s.chance(0.3) {
				// Data for an actor the cluster may have too: the bucket's
				// version wins if it has one.
				a = s.cluster[s.rng.IntN(len(s.cluster))]
			} else {
				s.addActor(a)
				s.joined = append(s.joined, a)
			}
			var d db
			d.init = true
			// Mostly overdue when the node joins (so sweeps elsewhere find
			// its entry at once), else soon.
			at := (joinAt/gridMs)*gridMs - s.between(4, 12)*gridMs
			if s.chance(0.3) {
				at = (joinAt/gridMs + s.between(1, 6)) * gridMs
			}
			d.alarm = &at
			switch s.rng.IntN(3) {
			case 0: // an entry recorded in another bucket, before joining
				k := alarmindex.Key{Actor: a, DueMs: at, Tag: alarmindex.Tag{Generation: uint64(s.between(1, 9)), Nonce: fmt.Sprintf("f%x", s.rng.Uint32())}}
				d.rec = &k
			case 1:
				k := alarmindex.Key{Actor: a, DueMs: at, Legacy: true}
				d.rec = &k
			}
			n.local[a.String()] = &d
		}
		s.at(joinAt, func() {
			s.logf("%s joins with %d actors of its own", n.addr, len(n.local))
			s.boot(n)
			s.faultLoop(n)
		})
	}

	// Half the runs, chosen apart from the run's own draws, give a failing
	// alarm up after three attempts (the retry policy with an end): the
	// alarm is cleared by an ordinary committed change, under the same
	// index rules as a handler's own clear.
	if rand.New(rand.NewPCG(s.cfg.Seed, 0x72657472696573)).IntN(2) == 0 {
		s.maxAttempts = 3
		s.c.LimitedRetries++
	}

	// Half the runs, chosen apart from the run's own draws, have a gateway:
	// a node that sweeps and counts as live but serves no class. The
	// entries whose shard falls to it are delivered only by the
	// three-margin rule.
	if rand.New(rand.NewPCG(s.cfg.Seed, 0x67617465776179)).IntN(2) == 0 {
		n := &node{id: len(s.nodes), addr: fmt.Sprintf("10.0.0.%d:7000", len(s.nodes)+1), local: map[string]*db{}, gateway: true}
		s.nodes = append(s.nodes, n)
		s.leases = append(s.leases, storeLease{})
		s.c.Gateways++
		s.after(s.between(0, 500), func() { s.boot(n) })
		s.faultLoop(n)
	}

	s.every(checkMs, s.checkAll)
	s.requestLoop()
	s.at(s.mainEnd, s.startFinal)
}

func (s *sim) addActor(a abi.ActorID) {
	s.actors = append(s.actors, a)
	s.actorKeys = append(s.actorKeys, a.String())
	s.byKey[a.String()] = a
}

// seedPut writes the starting bucket, with no faults.
func (s *sim) seedPut(key string, body []byte) {
	if _, err := s.b.Put(context.Background(), key, body, bucket.Cond{}); err != nil {
		panic(err)
	}
}

// every runs fn every period of virtual time until the run ends.
func (s *sim) every(period int64, fn func()) {
	var tick func()
	tick = func() {
		fn()
		s.after(period, tick)
	}
	s.after(period, tick)
}

// startFinal turns faults and requests off: every node comes up and stays
// up, and every committed alarm must now fire.
func (s *sim) startFinal() {
	s.final = true
	s.logf("final phase: faults off, no requests")
	// The schedule's safety period is longer than a run, so that every
	// committed alarm must be delivered by the relisting the design argues
	// for (docs/design.md#relist); checked before the end. Then the safety
	// period's relisting comes once, for what it is there for: entries no
	// state names (a PUT that landed after its node gave the actor up),
	// which the end requires gone.
	// The orphan drill: once the cluster is quiet, a node sets an alarm
	// on an actor, due soon, and crashes once it is replicated (it comes
	// back at once, with a new lease and an empty timer). No walker has
	// listed the entry; only the change of the live nodes (the node's new
	// lease) makes them list the tenant before the safety period
	// (Config.NoMembershipRelist shows the simulator catches its loss).
	at := s.mainEnd + orphanDueMs
	s.after(drillMs, func() {
		for _, n := range s.nodes {
			if n.up && !n.gateway && !n.cut(s.now) {
				s.drillAt = at
				s.request(n, s.actors[0], reqSet, 0)
				break
			}
		}
		s.after(5_000, func() {
			if n := s.drillNode; n != nil && n.up {
				s.c.Drills++
				s.orphanAt = at
				s.logf("orphan drill: %s crashes with the alarm of %s in no other timer", n.addr, s.actors[0])
				s.crash(n)
			}
		})
	})
	s.after(orphanCheckMs, s.orphanCheck)
	s.after(staleDrillMs, s.staleDrill)
	s.after(backlogDrillMs, s.backlogDrill)
	s.after(finalMs-safetyWalkMs, func() {
		s.checkDelivered()
		for _, n := range s.nodes {
			if n.up && n.sched != nil {
				n.sched.Expire(s.now)
			}
		}
	})
	for _, n := range s.nodes {
		if !n.up {
			s.boot(n)
			if n.joiner && !n.started {
				s.faultLoop(n)
			}
		}
	}
}

// orphanCheck requires the orphan drill's alarm delivered within the
// design's bound for an orphan whose shard may fall to a node that serves
// no class: three margins and a sweep after it was due. It runs before
// the backlog drill, whose entries keep the walkers listing the tenant and
// would find the orphan without the relisting the drill is there to show.
func (s *sim) orphanCheck() {
	if s.orphanAt == 0 {
		return
	}
	if st := s.stateOf(s.actors[0].String()); st != nil && st.db.alarm != nil && *st.db.alarm == s.orphanAt {
		s.failf("liveness", "orphan drill: actor %s: alarm at %s not delivered by %s (state %s)", s.actors[0], fmtMs(s.orphanAt-epochMs), fmtMs(s.now-epochMs), st.key)
	}
}

// staleDrill leaves a stale entry of an actor that then keeps re-arming,
// within the retry horizon, on a node that is none of its tenant's
// walkers (docs/design.md#stale-forward): a node sets the actor's alarm
// soon, then later, and the DELETE of the entry that replaced fails on
// every try (its node walks the tenant, hinted, but does not hold the
// actor for long); the holder lets the actor go, and a node that is no
// walker takes it with a request and holds it, its on-alarm re-arming every
// few seconds. Only a walker's delivery meets the stale entry, and finds
// the actor held: forwarded to the holder, it goes within the bound
// (staleCheck); dropped (Config.NoStaleForward), it stays until the
// safety period's relisting.
func (s *sim) staleDrill() {
	a := s.cluster[1]
	ak := a.String()
	walkers := sweeper.NewWalkers(s.view(), walkersR)
	ready := func(n *node) bool { return n.up && !n.gateway && !n.cut(s.now) && s.now >= n.pausedUntil }
	var h, p *node
	for _, n := range s.nodes {
		if ready(n) && h == nil && !slices.Contains(walkers.Of(tenant, class), n.addr) {
			h = n
		}
	}
	for _, n := range s.nodes {
		if ready(n) && n != h && p == nil {
			p = n
		}
	}
	if h == nil || p == nil {
		s.logf("stale drill: no node that is no walker, or no other node, to run it")
		return
	}
	s.c.StaleDrills++
	t1 := (s.now/gridMs + 2) * gridMs
	s.logf("stale drill: %s sets %s to %s, then later with the replaced entry's DELETE failing; %s (no walker) takes it and re-arms it every %s", p.addr, a, fmtMs(t1-epochMs), h.addr, fmtMs(tickMs))
	s.setAt[ak] = t1
	s.request(p, a, reqSet, 0)
	s.after(3_000, func() {
		s.setAt[ak], s.failDelete[ak] = t1+2*gridMs, true
		s.request(p, a, reqSet, 0)
	})
	s.after(6_000, func() {
		if o, ok := s.holder(ak); ok && o != h.id {
			if held := s.nodes[o].held[ak]; held != nil && !s.nodes[o].busy[ak] {
				s.logf("stale drill: %s lets %s go", s.nodes[o].addr, a)
				s.release(s.nodes[o], held)
			}
		}
		s.ticker, s.tickUntil = ak, s.mainEnd+tickEndMs
		s.request(h, a, reqWrite, 0)
	})
}

// staleCheck is the stale-entry invariant, once the final phase is quiet:
// no entry that the latest state of its actor does not name grows older
// than staleBoundMs, counted from the latest of when it became a margin
// overdue, when it was written, and when quiet began. Actors the bucket
// has no state of keep their entries (docs/design.md#bucket-empty).
func (s *sim) staleCheck() {
	quiet := s.mainEnd + quietMs
	if !s.final || s.now < quiet {
		return
	}
	for _, ak := range s.actorKeys {
		st := s.stateOf(ak)
		if st == nil {
			continue
		}
		for _, key := range sortedKeys(s.sh.entries[ak]) {
			k := s.sh.entries[ak][key]
			if key == st.recKey && st.db.alarm != nil {
				continue
			}
			since := max(k.DueMs+marginMs, s.sh.putAt[key], quiet)
			if at, ok := s.sh.keptAt[keptKey(ak, k.DueMs)]; ok {
				// A node kept the actor's entries at that time while the
				// bucket had nothing for it: it tries the time again only
				// after the longest backoff (the design's bound for a
				// first snapshot that landed late, or never).
				since = max(since, at+retryMax.Milliseconds())
			}
			age := s.now - since
			if age <= 0 {
				continue
			}
			s.maxStaleMs = max(s.maxStaleMs, age)
			if age > staleBoundMs {
				s.failf("stale", "actor %s: entry %s, which its state %s does not name, still in the index %s after it was a margin overdue (bound %s once quiet)", s.byKey[ak], key, st.key, fmtMs(age), fmtMs(staleBoundMs))
				return
			}
		}
	}
}

// kept records that a delivery kept actor a's entries at due (the bucket
// had nothing for it).
func (s *sim) kept(a abi.ActorID, due int64) {
	s.sh.keptAt[keptKey(a.String(), due)] = s.now
}

func keptKey(ak string, due int64) string { return ak + "@" + strconv.FormatInt(due, 10) }

// ---- state snapshots in the bucket ----

func statePrefix(a abi.ActorID) string {
	return "state/" + a.Path() + "/"
}

// stateKey names an actor's snapshot of hold generation gen: each hold
// writes its one key (seq 0), overwritten by its uploads. Which key is the
// state is read from the ownership records (stateOf), as
// cluster.ReadState does, never from a listing alone.
func stateKey(a abi.ActorID, gen, seq uint64) string {
	return fmt.Sprintf("%s%020d-%020d", statePrefix(a), gen, seq)
}

func parseStateKey(key string) (actorKey string, gen, seq uint64, ok bool) {
	parts := strings.Split(key, "/")
	if len(parts) != 5 || parts[0] != "state" {
		return "", 0, 0, false
	}
	a, err := abi.ParsePath(strings.Join(parts[1:4], "/"))
	if err != nil {
		return "", 0, 0, false
	}
	g, sq, found := strings.Cut(parts[4], "-")
	if !found {
		return "", 0, 0, false
	}
	gen, err1 := strconv.ParseUint(g, 10, 64)
	seq, err2 := strconv.ParseUint(sq, 10, 64)
	if err1 != nil || err2 != nil {
		return "", 0, 0, false
	}
	return a.String(), gen, seq, true
}

// ---- the actor's database, as replicated ----

type db struct {
	durable  int // exec-durable events the state holds (acknowledged ones must never be lost)
	alarm    *int64
	rec      *alarmindex.Key // alarm_indexed
	init     bool            // on-init ran
	failures int             // alarm_failures
	fence    uint64          // owner_fence
	writes   int             // other writes
	fired    int             // on-alarm runs this state descends from
}

func (d db) clone() db {
	c := d
	if d.alarm != nil {
		v := *d.alarm
		c.alarm = &v
	}
	if d.rec != nil {
		k := *d.rec
		c.rec = &k
	}
	return c
}

func encode(d db) []byte {
	alarm := "-"
	if d.alarm != nil {
		alarm = strconv.FormatInt(*d.alarm, 10)
	}
	init := 0
	if d.init {
		init = 1
	}
	return fmt.Appendf(nil, "alarm=%s\nalarm_indexed=%s\ninit=%d\nalarm_failures=%d\nowner_fence=%d\nwrites=%d\ndurable=%d\nfired=%d\n",
		alarm, alarmindex.FormatRecorded(d.rec), init, d.failures, d.fence, d.writes, d.durable, d.fired)
}

func decode(a abi.ActorID, body []byte) (db, error) {
	var d db
	for line := range strings.SplitSeq(strings.TrimSuffix(string(body), "\n"), "\n") {
		k, v, _ := strings.Cut(line, "=")
		var err error
		switch k {
		case "alarm":
			if v != "-" {
				var at int64
				at, err = strconv.ParseInt(v, 10, 64)
				d.alarm = &at
			}
		case "alarm_indexed":
			d.rec, err = alarmindex.ParseRecorded(a, v)
		case "init":
			d.init = v == "1"
		case "alarm_failures":
			d.failures, err = strconv.Atoi(v)
		case "owner_fence":
			d.fence, err = strconv.ParseUint(v, 10, 64)
		case "writes":
			d.writes, err = strconv.Atoi(v)
		case "durable":
			d.durable, err = strconv.Atoi(v)
		case "fired":
			d.fired, err = strconv.Atoi(v)
		default:
			err = fmt.Errorf("unknown field %q", k)
		}
		if err != nil {
			return db{}, fmt.Errorf("actor %s: snapshot: %w", a, err)
		}
	}
	return d, nil
}

func (d db) String() string {
	alarm := "none"
	if d.alarm != nil {
		alarm = fmtMs(*d.alarm - epochMs)
	}
	return fmt.Sprintf("alarm=%s indexed=%q init=%t", alarm, alarmindex.FormatRecorded(d.rec), d.init)
}

// ---- bucket requests ----

// reqClass says which fault budget a request draws from.
type reqClass int

const (
	clsEntryPut reqClass = iota
	clsEntryRetry
	clsState
	clsDelete
	clsRead
)

type request struct {
	kind   bucket.OpKind
	class  reqClass
	key    string
	body   []byte
	cond   bucket.Cond
	prefix string
	limit  int
	// forced, if set, replaces the drawn fault (an aimed fault); lateAfter
	// is then when the held request lands.
	forced    *bucket.Fault
	lateAfter int64
}

type result struct {
	err  error
	keys []string
	body []byte
	etag string
	late bool // timed out; it may still land
}

func (s *sim) faultHook(op bucket.Op) bucket.Fault {
	f := s.nextFault
	s.nextFault = bucket.Fault{}
	if f.Late && (op.Kind == bucket.OpPut || op.Kind == bucket.OpDelete) {
		s.lateSeq = op.Seq
	}
	return f
}

// drawFault decides a request's fate when it is sent.
func (s *sim) drawFault(n *node, r *request) bucket.Fault {
	if r.forced != nil {
		return *r.forced
	}
	if n.cut(s.now) {
		return bucket.Fault{Err: errCutOff}
	}
	if s.final {
		return s.omissions(r)
	}
	var pLate, pErr float64
	switch r.class {
	case clsEntryPut:
		pLate, pErr = 0.05, 0.02
	case clsEntryRetry:
		pLate, pErr = 0.02, 0.01
	case clsState:
		pLate, pErr = 0.05, 0.02
	case clsDelete:
		pLate, pErr = 0.15, 0.03
	case clsRead:
		pErr = 0.02
	}
	x := s.rng.Float64()
	switch {
	case x < pLate:
		return bucket.Fault{Late: true}
	case x < pLate+pErr:
		return bucket.Fault{Err: errInjected}
	}
	return s.omissions(r)
}

// omissions is the fault of a request that otherwise goes through: for a
// LIST, the keys it leaves out (see Config.NoListOmissions and
// ListOmitAny), also in the final phase, as a store that does it keeps
// doing it. Each key's fate is drawn when the page is read, in key order.
func (s *sim) omissions(r *request) bucket.Fault {
	if r.kind != bucket.OpList || s.cfg.NoListOmissions {
		return bucket.Fault{}
	}
	return bucket.Fault{Omit: func(key string) bool {
		p := s.cfg.ListOmitAny
		if at, ok := s.sh.written[key]; ok && s.now-at < 1000 {
			p = 0.3
		}
		if p > 0 && s.chance(p) {
			s.c.Omitted++
			return true
		}
		return false
	}}
}

// latency is how long a request takes to reach the bucket.
func (s *sim) latency() int64 {
	if !s.final && s.chance(0.03) {
		return s.between(200, 4000)
	}
	return s.between(2, 25)
}

// lateDelay is how long after being sent a held request lands.
func (s *sim) lateDelay() int64 {
	switch x := s.rng.IntN(10); {
	case x < 4:
		return s.between(1, 3000)
	case x < 8:
		return s.between(3000, 30_000)
	default:
		return s.between(30_000, 120_000)
	}
}

// timeoutMs is how long a caller waits before it takes a request as timed
// out.
const timeoutMs = 3000

// send issues one bucket request from node n: it lands after a latency
// (whether or not n is still alive: it is on the wire), and then k runs on n
// with the outcome, unless n crashed meanwhile. k may be nil.
func (s *sim) send(n *node, r request, k func(result)) {
	boot := n.boot
	f := s.drawFault(n, &r)
	s.after(s.latency(), func() {
		res := s.apply(n, &r, f)
		if k == nil {
			return
		}
		d := int64(0)
		if res.late {
			d = timeoutMs
		}
		s.step(n, boot, d, func() { k(res) })
	})
}

// apply performs r against the bucket now, under fault f.
func (s *sim) apply(n *node, r *request, f bucket.Fault) result {
	ctx := context.Background()
	s.nextFault = f
	s.lateSeq = 0
	var res result
	switch r.kind {
	case bucket.OpPut:
		res.etag, res.err = s.b.Put(ctx, r.key, r.body, r.cond)
	case bucket.OpDelete:
		res.err = s.b.Delete(ctx, r.key)
	case bucket.OpGet:
		res.body, res.etag, res.err = s.b.Get(ctx, r.key)
	case bucket.OpHead:
		res.etag, res.err = s.b.Head(ctx, r.key)
	case bucket.OpList:
		res.keys, res.err = s.b.List(ctx, r.prefix, "", r.limit)
	}
	s.nextFault = bucket.Fault{}
	res.late = f.Late && res.err != nil
	if seq := s.lateSeq; seq != 0 {
		s.c.LateOps++
		d := r.lateAfter
		if d == 0 {
			d = s.lateDelay()
		}
		s.logf("%s %s %s timed out; lands in %s", n.addr, r.kind, r.key, fmtMs(d))
		s.after(d, func() { s.landLate(seq) })
	}
	return res
}

// landLate applies the held request with sequence number seq.
func (s *sim) landLate(seq uint64) {
	for i, op := range s.b.Late() {
		if op.Seq == seq {
			err := s.b.ApplyLateOne(i)
			s.logf("late %s %s landed (err=%v)", op.Kind, op.Key, err)
			return
		}
	}
	s.failf("sim", "late request %d is not held", seq)
}

// listNow lists at once (a sweep's pages), with a drawn fault.
func (s *sim) listNow(n *node, prefix, startAfter string, limit int) ([]string, error) {
	f := s.drawFault(n, &request{kind: bucket.OpList, class: clsRead, prefix: prefix})
	s.nextFault = f
	keys, err := s.b.List(context.Background(), prefix, startAfter, limit)
	s.nextFault = bucket.Fault{}
	return keys, err
}

// ---- the shadow of the bucket and the invariant ----

// ownKey is the snapshot key of an actor's hold of generation gen, kept
// so that the checks do not format it each time.
type ownKey struct {
	gen uint64
	key string
}

type stateInfo struct {
	key      string
	gen, seq uint64
	db       db
	recKey   string // the object key of db.rec
}

type shadow struct {
	objects map[string]*stateInfo                // snapshot key -> what it holds now
	entries map[string]map[string]alarmindex.Key // actor key -> object key -> entry
	putAt   map[string]int64                     // object key -> when it was written
	written map[string]int64                     // key -> when a PUT last wrote it (created or overwrote it)
	// keptAt: when a delivery last kept an actor's entries at a time,
	// since the bucket had nothing for it (R2's bucket-empty clause), by
	// actor key and time: that node tries the time again after the
	// longest backoff, not sooner (docs/design.md#bucket-empty).
	keptAt map[string]int64
	acked  map[string]int // actor key -> exec-durable events acknowledged
}

// stateOf is the actor's state as the ownership records name it (what
// cluster.ReadState reads): the snapshot of the record's own hold if that
// hold uploaded, else the one the record notes; nil for none.
func (s *sim) stateOf(ak string) *stateInfo {
	r := s.holds[ak]
	if r == nil {
		return nil
	}
	own, ok := s.ownKeys[ak]
	if !ok || own.gen != r.gen {
		own = ownKey{gen: r.gen, key: stateKey(s.byKey[ak], r.gen, 0)}
		s.ownKeys[ak] = own
	}
	if st := s.sh.objects[own.key]; st != nil {
		return st
	}
	if r.state == "" {
		return nil
	}
	return s.sh.objects[r.state]
}

func (s *sim) onChange(op bucket.Op) {
	if op.Kind == bucket.OpPut {
		s.sh.written[op.Key] = s.now
	}
	switch {
	case strings.HasPrefix(op.Key, alarmindex.Root):
		k, err := alarmindex.ParseKey(op.Key)
		if err != nil {
			s.failf("sim", "unparsable index key %q written: %v", op.Key, err)
			return
		}
		ak := k.Actor.String()
		m := s.sh.entries[ak]
		if m == nil {
			m = map[string]alarmindex.Key{}
			s.sh.entries[ak] = m
		}
		if op.Kind == bucket.OpPut {
			m[op.Key] = k
			s.sh.putAt[op.Key] = s.now
		} else {
			delete(m, op.Key)
			delete(s.sh.putAt, op.Key)
			if op.Late {
				s.c.LateDeletes++
			}
		}
		s.check(ak)
	case strings.HasPrefix(op.Key, "state/"):
		ak, gen, seq, ok := parseStateKey(op.Key)
		a, known := s.byKey[ak]
		if !ok || !known || op.Kind != bucket.OpPut {
			s.failf("sim", "unexpected state change %s %s", op.Kind, op.Key)
			return
		}
		d, err := decode(a, op.Body)
		if err != nil {
			s.failf("sim", "%v", err)
			return
		}
		st := &stateInfo{key: op.Key, gen: gen, seq: seq, db: d}
		if d.rec != nil {
			st.recKey = d.rec.String()
		}
		s.sh.objects[op.Key] = st
		if h := s.holds[ak]; h != nil && h.gen > gen && s.stateOf(ak) == st {
			s.c.LateCommits++
			s.logf("late commit: %s becomes the state of %s (hold is at generation %d): %s", op.Key, a, h.gen, d)
		}
		s.backlogState(ak)
		s.check(ak)
	}
}

func (s *sim) checkAll() {
	for _, ak := range s.actorKeys {
		s.check(ak)
		if s.fail != nil {
			return
		}
	}
	s.checkBacklog()
	s.staleCheck()
}

// check is the invariant for one actor: when the latest state in the bucket
// has an alarm, it names an entry (alarm_indexed), that entry is at the
// alarm's time, and it exists.
func (s *sim) check(ak string) {
	s.c.Checks++
	st := s.stateOf(ak)
	if acked := s.sh.acked[ak]; acked > 0 && (st == nil || st.db.durable < acked) {
		got, key := 0, "none"
		if st != nil {
			got, key = st.db.durable, st.key
		}
		s.failf("invariant", "actor %s: state %s holds %d exec-durable events, but %d were acknowledged: an acknowledged write is lost", s.byKey[ak], key, got, acked)
		return
	}
	if st == nil || st.db.alarm == nil {
		return
	}
	at, rec := *st.db.alarm, st.db.rec
	switch {
	case rec == nil:
		s.failf("invariant", "actor %s: state %s has an alarm at %s but names no entry", s.byKey[ak], st.key, fmtMs(at-epochMs))
	case rec.DueMs != at:
		s.failf("invariant", "actor %s: state %s has an alarm at %s but names entry %s at another time", s.byKey[ak], st.key, fmtMs(at-epochMs), rec)
	default:
		if _, ok := s.sh.entries[ak][st.recKey]; !ok {
			s.failf("invariant", "actor %s: state %s has an alarm at %s whose named entry %s does not exist", s.byKey[ak], st.key, fmtMs(at-epochMs), rec)
		}
	}
}

// finalCheck runs at the end of the final phase: every committed alarm has
// fired, every entry an actor with state had is gone, and the shadow agrees
// with the bucket.
// checkDelivered fails the run if an actor's latest state still has an
// alarm.
func (s *sim) checkDelivered() {
	for _, a := range s.actors {
		ak := a.String()
		if st := s.stateOf(ak); st != nil && st.db.alarm != nil {
			s.failf("liveness", "actor %s: committed alarm at %s never delivered (state %s)", a, fmtMs(*st.db.alarm-epochMs), st.key)
			return
		}
	}
}

func (s *sim) finalCheck() {
	var want []string
	for _, es := range s.sh.entries {
		for k := range es {
			want = append(want, k)
		}
	}
	var got []string
	for _, k := range s.b.Keys() {
		if strings.HasPrefix(k, alarmindex.Root) {
			got = append(got, k)
		}
	}
	slices.Sort(want)
	if !slices.Equal(want, got) {
		s.failf("sim", "shadow index (%d entries) differs from the bucket (%d)", len(want), len(got))
		return
	}
	s.checkDelivered()
	for _, a := range s.actors {
		ak := a.String()
		if s.stateOf(ak) == nil {
			continue // an actor the bucket never had keeps its entries (docs/design.md#bucket-empty)
		}
		keys := make([]string, 0, len(s.sh.entries[ak]))
		for k := range s.sh.entries[ak] {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			s.failf("liveness", "actor %s: entry %s still in the index at the end", a, k)
			return
		}
	}
}

// ---- the coordination store: node leases and holds ----

type storeLease struct {
	epoch   uint64
	expires int64
}

type holdRec struct {
	node     int
	epoch    uint64
	gen      uint64
	released bool
	// state is the snapshot the record notes: what its hold found when
	// taken, or, once released, the hold's own last upload that counted
	// ("" for none).
	state string
}

func (s *sim) leaseValid(node int, epoch uint64) bool {
	if node < 0 {
		return false
	}
	l := s.leases[node]
	return l.epoch == epoch && s.now < l.expires
}

// holder is the node holding actor ak by the store's rule: the hold exists,
// is not released, and its node lease is valid.
func (s *sim) holder(ak string) (int, bool) {
	h := s.holds[ak]
	if h == nil || h.released || !s.leaseValid(h.node, h.epoch) {
		return -1, false
	}
	return h.node, true
}

// liveAddrs are the nodes with fresh heartbeats (valid leases).
func (s *sim) liveAddrs() []string {
	var out []string
	for i, n := range s.nodes {
		if s.leaseValid(i, s.leases[i].epoch) {
			out = append(out, n.addr)
		}
	}
	return out
}
