package sweeper

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/wasmkeep/alarms/abi"
)

// Defaults of a plan.
const (
	// DefaultMaxDeliveries is how many deliveries one sweep hands to the
	// timer at most.
	DefaultMaxDeliveries = 256
	// AnyoneShareDivisor sets the part of MaxDeliveries kept for anyone's
	// entries when there are some: an eighth.
	AnyoneShareDivisor = 8
	// AnyoneAfterMargins is how many margins (lease + grace) past due an
	// entry becomes anyone's.
	AnyoneAfterMargins = 3
)

// Overdue is one alarm the sweep hands to the timer: an actor, the due time
// of its earliest overdue entries, and the keys of all its entries at that
// time.
type Overdue struct {
	Actor abi.ActorID
	// DueMs is the due time in Unix milliseconds.
	DueMs int64
	// Keys are the object keys of the actor's entries at DueMs, in listing
	// order.
	Keys []string
	// Anyone says the entry was not this node's shard but is overdue three
	// margins.
	Anyone bool
}

// Due returns the due time.
func (d Overdue) Due() time.Time { return time.UnixMilli(d.DueMs) }

// PlanInput is what [PlanSweep] decides from.
type PlanInput struct {
	// Entries are the overdue entries the walk met.
	Entries []Entry
	// Now is the time of the sweep.
	Now time.Time
	// Margin is the lease period plus grace.
	Margin time.Duration
	// Self is this node's address.
	Self string
	// Since, if set, is when this node could deliver again after its node
	// lease lapsed (it became valid again then). An entry of another node's shard
	// becomes anyone's three margins past whichever is later, its due
	// time or Since. After a bucket outage every entry is many margins
	// overdue, though the holders of most of them are back too and about
	// to deliver them from their own timers; counting from the outage's
	// end gives them three margins before every node chases every other
	// node's actors. Likewise an entry of this node's own shard is
	// delivered a margin past whichever is later, its due time or Since:
	// a margin for the holders' timers to deliver what the outage held
	// up before the walkers take and forward it (each a read of the
	// record, refused). Entries of actors [PlanInput.Own] reports are
	// this node's alone and wait for nothing. Zero: from the due time
	// alone.
	Since time.Time
	// Live are the addresses of the nodes with fresh heartbeats. Self counts
	// as live whether or not it is listed: a node that sweeps is alive.
	Live []string
	// ShardNodes, if set, are the nodes an entry of a class is shared
	// among, in place of Live: the walkers of the tenant for that class
	// (see [Walkers]). Self counts whether or not it is listed.
	ShardNodes func(class string) []string
	// Own, if set, reports actors whose entries are this node's whatever
	// their shard: actors it let go of, whose alarm only it knows may be
	// held by no timer (docs/design.md#relist). Nil: none.
	Own func(abi.ActorID) bool
	// Busy reports an actor this node already has in flight or retrying;
	// its entries are neither delivered again nor counted against the cap.
	// Nil: none.
	Busy func(abi.ActorID) bool
	// Delivered reports an entry time of the actor that this node ran
	// lately: the run replaced the entry and its DELETE is on its way, so
	// a walk that lists it before the DELETE lands leaves it out, neither
	// planned, counted against the cap, nor in Plan.Busy. Delivering it
	// again would take the actor only to find its alarm moved and list its
	// entries at that time for nothing. Nil: none.
	Delivered func(id abi.ActorID, dueMs int64) bool
	// Rand picks the rotation of anyone's entries. Nil: no rotation.
	Rand *rand.Rand
	// MaxDeliveries caps the plan; zero takes DefaultMaxDeliveries.
	MaxDeliveries int
}

// PlanStats counts what a plan decided, by actor (one delivery candidate per
// actor) unless named otherwise.
type PlanStats struct {
	// Entries is how many entries the plan was given.
	Entries int
	// Later counts entries skipped because their actor has an earlier one.
	Later int
	// Busy counts actors already in flight or retrying on this node.
	Busy int
	// Delivered counts actors whose entry time this node ran lately
	// ([PlanInput.Delivered]).
	Delivered int
	// Others counts actors in another node's shard, not yet anyone's.
	Others int
	// Returning counts actors of this node's shard left to their holders
	// for a margin after this node came back from a lapse
	// ([PlanInput.Since]).
	Returning int
	// Own and Anyone count the candidates of each kind.
	Own, Anyone int
	// Deferred counts candidates left for a later sweep by the cap.
	Deferred int
	// Ahead counts the candidates due after Now a handover planned
	// ([PlanHandover]).
	Ahead int
}

// Plan is the outcome of [PlanSweep].
type Plan struct {
	// Deliveries, own ones first (earliest first), then anyone's in the
	// order of their rotation.
	Deliveries []Overdue
	// Busy are the candidates [PlanInput.Busy] left out (earliest first),
	// whatever their shard: a caller that tends to them otherwise (the
	// plugin removes a stale entry of an actor its timer keeps at a later
	// time) can see them.
	Busy  []Overdue
	Stats PlanStats
}

// PlanSweep decides which overdue entries this node delivers in one sweep.
//
//   - One delivery per actor: its earliest entries (all keys at that time);
//     entries of the actor at later times wait for a later sweep.
//   - Actors [PlanInput.Busy] reports are skipped and not counted, and so
//     are entry times [PlanInput.Delivered] reports.
//   - Own: the actor's shard ([Shard]) among the live nodes is this node,
//     and this node back from a lapse of its lease at least a margin
//     ([PlanInput.Since]); or [PlanInput.Own] reports it.
//   - Anyone's: another node's shard, overdue at least three margins, and
//     this node back from a lapse of its lease at least that long
//     ([PlanInput.Since]).
//   - At most MaxDeliveries: own first; anyone's keep an eighth of the cap
//     when there are that many, and take what own leave. Anyone's are taken
//     from a random rotation of their list (in due order), so nodes that
//     take over the same backlog spread out over it.
//
// PlanSweep does no I/O and reads no clock; the only randomness is Rand.
func PlanSweep(in PlanInput) Plan {
	maxDel := in.MaxDeliveries
	if maxDel <= 0 {
		maxDel = DefaultMaxDeliveries
	}
	plan := Plan{Stats: PlanStats{Entries: len(in.Entries)}}

	cands := earliestPerActor(in.Entries, &plan.Stats)

	nodes := liveNodes(in.Self, in.Live)
	anyoneBefore := in.Now.UnixMilli() - int64(AnyoneAfterMargins)*in.Margin.Milliseconds()
	if !in.Since.IsZero() && in.Since.UnixMilli() > anyoneBefore {
		anyoneBefore = math.MinInt64 // back from a lapse less than three margins ago: nothing is anyone's yet
	}
	// Back from a lapse less than a margin ago: the shard's entries wait.
	returning := !in.Since.IsZero() && in.Since.UnixMilli() > in.Now.UnixMilli()-in.Margin.Milliseconds()
	var own, anyone []Overdue
	for _, c := range cands {
		if in.Delivered != nil && in.Delivered(c.Actor, c.DueMs) {
			plan.Stats.Delivered++
			continue
		}
		if in.Busy != nil && in.Busy(c.Actor) {
			plan.Stats.Busy++
			plan.Busy = append(plan.Busy, c)
			continue
		}
		shardNodes := nodes
		if in.ShardNodes != nil {
			shardNodes = liveNodes(in.Self, in.ShardNodes(c.Actor.Class))
		}
		switch {
		case in.Own != nil && in.Own(c.Actor):
			own = append(own, c)
		case Shard(c.Actor, shardNodes) == in.Self:
			if returning {
				plan.Stats.Returning++ // its holder's timer first
				break
			}
			own = append(own, c)
		case c.DueMs <= anyoneBefore:
			c.Anyone = true
			anyone = append(anyone, c)
		default:
			plan.Stats.Others++
		}
	}
	plan.Stats.Own, plan.Stats.Anyone = len(own), len(anyone)

	reserve := min(len(anyone), max(1, maxDel/AnyoneShareDivisor)) // one at least, under a cap below 8
	ownTake := min(len(own), maxDel-reserve)
	anyTake := min(len(anyone), maxDel-ownTake)
	plan.Stats.Deferred = len(own) - ownTake + len(anyone) - anyTake

	if len(anyone) > 1 && in.Rand != nil {
		r := in.Rand.IntN(len(anyone))
		anyone = slices.Concat(anyone[r:], anyone[:r])
	}
	plan.Deliveries = make([]Overdue, 0, ownTake+anyTake)
	plan.Deliveries = append(plan.Deliveries, own[:ownTake]...)
	plan.Deliveries = append(plan.Deliveries, anyone[:anyTake]...)
	return plan
}

// PlanHandover decides what a handover walk hands the timer when a node
// left (cleanly, or its lease expired): every actor gets its earliest
// entry. Those due by Now are planned as by [PlanSweep] (own and anyone's,
// busy ones left out, the cap). Those due later, of actors with no entry due by Now, are planned
// after them, all of them, for the actors of this node's shard (or Own)
// that are not busy: the timer holds them to their due times, as the node
// that left held them, instead of the sweep finding them a margin late.
// Like PlanSweep it does no I/O and reads no clock.
func PlanHandover(in PlanInput) Plan {
	nowMs := in.Now.UnixMilli()
	var due, later []Entry
	for _, e := range in.Entries {
		if e.Key.DueMs <= nowMs {
			due = append(due, e)
		} else {
			later = append(later, e)
		}
	}
	din := in
	din.Entries = due
	plan := PlanSweep(din)
	plan.Stats.Entries = len(in.Entries)
	hasDue := make(map[abi.ActorID]bool, len(due))
	for _, e := range due {
		hasDue[e.Key.Actor] = true
	}
	nodes := liveNodes(in.Self, in.Live)
	for _, c := range earliestPerActor(later, &plan.Stats) {
		if hasDue[c.Actor] {
			plan.Stats.Later += len(c.Keys)
			continue
		}
		if in.Busy != nil && in.Busy(c.Actor) {
			plan.Stats.Busy++
			continue
		}
		shardNodes := nodes
		if in.ShardNodes != nil {
			shardNodes = liveNodes(in.Self, in.ShardNodes(c.Actor.Class))
		}
		if Shard(c.Actor, shardNodes) != in.Self && (in.Own == nil || !in.Own(c.Actor)) {
			plan.Stats.Others++
			continue
		}
		plan.Stats.Ahead++
		plan.Deliveries = append(plan.Deliveries, c)
	}
	return plan
}

// earliestPerActor groups entries by actor, keeping each actor's earliest due
// time with all its keys at that time, ordered by due time (then first
// appearance).
func earliestPerActor(entries []Entry, st *PlanStats) []Overdue {
	idx := make(map[abi.ActorID]int, len(entries))
	var out []Overdue
	for _, e := range entries {
		i, ok := idx[e.Key.Actor]
		if !ok {
			idx[e.Key.Actor] = len(out)
			out = append(out, Overdue{Actor: e.Key.Actor, DueMs: e.Key.DueMs, Keys: []string{e.Object}})
			continue
		}
		d := &out[i]
		switch {
		case e.Key.DueMs == d.DueMs:
			d.Keys = append(d.Keys, e.Object)
		case e.Key.DueMs < d.DueMs:
			st.Later += len(d.Keys)
			d.DueMs, d.Keys = e.Key.DueMs, []string{e.Object}
		default:
			st.Later++
		}
	}
	slices.SortStableFunc(out, func(a, b Overdue) int { return cmp.Compare(a.DueMs, b.DueMs) })
	return out
}

// liveNodes is live plus self, without duplicates or empty addresses.
func liveNodes(self string, live []string) []string {
	nodes := make([]string, 0, len(live)+1)
	if self != "" {
		nodes = append(nodes, self)
	}
	for _, n := range live {
		if n != "" && !slices.Contains(nodes, n) {
			nodes = append(nodes, n)
		}
	}
	return nodes
}

// Shard returns the node among nodes responsible for actor's entries, by
// rendezvous (highest random weight) hashing: each node scores the actor with
// a hash of (node address, actor) and the highest score wins (ties go to the
// smaller address). Every node computing Shard over the same set agrees, and
// when a node joins or leaves only the actors it wins or held move: a dead
// node's actors spread evenly over the survivors, everyone else's stay put.
// An actor's winner among all live nodes also wins among any subset that
// holds it, so since each node counts itself live, nodes that merely miss
// live nodes still cover every actor; only a view holding a node that does
// not sweep (dead, its heartbeat not yet stale) leaves actors to the
// three-margin rule.
// Shard returns "" for no nodes. The hash is fixed (FNV-1a, then a 64-bit
// finalizer), the same on every node and every run.
func Shard(actor abi.ActorID, nodes []string) string {
	var best string
	var bestScore uint64
	for i, n := range nodes {
		s := score(n, actor)
		if i == 0 || s > bestScore || (s == bestScore && n < best) {
			best, bestScore = n, s
		}
	}
	return best
}

const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

// score hashes node and actor, each field length-prefixed so no two
// different tuples hash the same bytes.
func score(node string, a abi.ActorID) uint64 {
	h := uint64(fnvOffset64)
	for _, s := range [...]string{node, a.Tenant, a.Class, a.Name} {
		n := uint64(len(s))
		for range 8 {
			h ^= n & 0xff
			h *= fnvPrime64
			n >>= 8
		}
		for i := 0; i < len(s); i++ {
			h ^= uint64(s[i])
			h *= fnvPrime64
		}
	}
	// splitmix64's finalizer: FNV's low-entropy high bits get mixed in.
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}
