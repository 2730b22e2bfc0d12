package sim

import (
	"container/heap"
	"fmt"
	"hash"
	"math/rand/v2"
	"reflect"

	"github.com/wasmkeep/alarms/alarmindex"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/internal/variant"

	"github.com/wasmkeep/alarms/abi"
)

// Config selects one simulation. The same Config gives the same trace.
type Config struct {
	// Seed selects the run: the world it starts from and every choice
	// made during it.
	Seed uint64
	// Variants turn safety rules of the index rules off; the zero value
	// runs the production rules.
	Variants variant.Set
	// SkipPut is the simulator's own canary: new index entries are recorded
	// in the actor's database as if PUT, but never sent to the bucket. Any
	// working invariant must catch it.
	SkipPut bool
	// AimedJoinFault is the probability that a joining node's first upload
	// is delayed at the bucket while the node is cut off (so its lease
	// lapses and another node can take the actor while the bucket has
	// nothing for it). Zero takes DefaultAimedJoinFault; negative disables.
	AimedJoinFault float64
	// NoAnyone drops the sweep's three-margin rule: the simulator discards
	// every delivery PlanSweep marks as anyone's (another node's shard,
	// three margins overdue), as if the planner never took them. An entry
	// whose shard falls to a live node that does not serve its class then
	// waits for ever.
	NoAnyone bool
	// NoMembershipRelist is the unsafe variant of the relisting schedule
	// (docs/design.md#relist): a walker lists the tenant again only when
	// its earliest known entry comes due (and on a hint), never because
	// the live nodes changed. An entry a node wrote after the walkers'
	// last walk, earlier than what they know, then waits for ever once
	// that node dies.
	NoMembershipRelist bool
	// NoStaleForward is the unsafe variant of the stale entries' removal
	// (docs/design.md#stale-forward): a node whose delivery of an entry
	// its sweep listed finds the actor held by another node drops it, as
	// before forwarding. A stale entry of an actor that keeps re-arming on
	// a node that walks none of its tenant then stays (the stale drill).
	NoStaleForward bool
	// NoListOmissions turns the listings' omissions off. By default a LIST
	// leaves out a key that a PUT wrote (created or overwrote) within the
	// last second with probability 0.3, as an erasure-coded store (MinIO)
	// now and then leaves out a key that is being written
	// (docs/design.md#lists): the sweeps' walks and the stale removals'
	// LISTs meet it; snapshots are overwritten by each hold's uploads, and
	// no decision lists them (the unsafe variant TrustListedState does).
	NoListOmissions bool
	// ListOmitAny is the probability that a LIST leaves out any other key
	// too (default 0; no store the project tests does). Safety must hold
	// with it on; an orphan's alarm whose entry a walk's listing left out
	// can then wait for the next event that relists its tenant, at worst
	// the safety period, which is longer than a run (TestSimOmitsAnyKey).
	ListOmitAny float64
	// TrustListedState is the unsafe variant of the restore: a node
	// taking an actor restores the newest snapshot a listing shows (as
	// nodes did before the ownership records named the state), not the
	// one the records name. A listing that leaves the newest out restores
	// an older state: acknowledged writes are lost, and the entries the
	// newer state's holder removed are named again.
	TrustListedState bool
	// RetakeUnconditional is the unsafe variant of the re-take after a
	// lapse (docs/design.md#retake): a node whose lease is valid again
	// writes the ownership record naming itself and keeps its open copy
	// of the actor without the condition that the record is still the one
	// its hold wrote. When another node took the actor over meanwhile,
	// both run it: acknowledged writes of one are lost, entries named by
	// one state are removed by the other.
	RetakeUnconditional bool
	// NoEarlyWalks is the unsafe variant of the drain (docs/design.md#drain):
	// a tenant whose plan the cap cut short waits for the next sweep, as
	// before the drain, so a dead node's backlog is delivered sweepCap per
	// walker a sweep period. The backlog drill's bound catches it.
	NoEarlyWalks bool
	// NoRearmIndex is the unsafe variant of a delivery's re-arm: the
	// alarm on-alarm set (a new time, or a committed retry) is recorded in
	// the actor's state as if its entry were PUT, but the entry is never
	// sent, as a delivery that replicates without indexing would leave it.
	// The invariant that the newest state's entry exists catches it.
	NoRearmIndex bool
	// KeepTrace keeps the whole trace in Result.Trace (memory grows with
	// the run; for replaying one seed).
	KeepTrace bool
}

// DefaultAimedJoinFault is the default of Config.AimedJoinFault.
const DefaultAimedJoinFault = 0.4

// TailLines is how many trace lines Result.Tail keeps.
const TailLines = 60

// Failure is why a run failed: the invariant broke, an alarm was never
// delivered in the final phase, or the simulator found itself inconsistent.
type Failure struct {
	// AtMs is the virtual time of the failure, in ms since the run began.
	AtMs int64
	// Kind is "invariant", "liveness", "backoff" (a committed retry off the
	// rule), "stale" (a stale entry older than the bound once quiet) or
	// "sim".
	Kind string
	// Msg names the actor and what was wrong.
	Msg string
}

// Error describes the failure.
func (f *Failure) Error() string {
	return fmt.Sprintf("%s failure at %s: %s", f.Kind, fmtMs(f.AtMs), f.Msg)
}

// Result is the outcome of one run.
type Result struct {
	Seed uint64
	// Failure is nil when the invariant held throughout and every
	// committed alarm fired in the final phase.
	Failure *Failure
	// Counters count what the run exercised.
	Counters Counters
	// TraceHash is an FNV-1a hash of every trace line: two runs of the same
	// Config give the same hash.
	TraceHash uint64
	// TraceLines is how many lines the trace had.
	TraceLines int
	// Tail is the last TailLines lines of the trace.
	Tail []string
	// Trace is the whole trace when Config.KeepTrace is set.
	Trace []string
	// MaxStaleMs is the oldest any stale entry grew after quiet, as the
	// stale-entry invariant measures it (staleBoundMs is the bound).
	MaxStaleMs int64
	// MaxDrainMs is how long after their due time the backlog drill's
	// alarms took to drain (0: the drill did not run).
	MaxDrainMs int64
}

// Counters count what a run (or, added up, many runs) exercised. Every
// field is a count of events.
type Counters struct {
	// Takeovers: holds granted on an actor whose previous hold was another
	// node's.
	Takeovers int64
	// Holds: holds granted (each with a new generation).
	Holds int64
	// Alarms: replicated events that set an alarm to a new time.
	Alarms int64
	// LateCommits: state uploads that became the actor's latest state while
	// a newer hold existed (an earlier holder's upload landing late).
	LateCommits int64
	// LateDeletes: DELETEs that landed after their caller gave up and
	// removed an entry.
	LateDeletes int64
	// Fences: owner_fence uploads made before removing stale entries.
	Fences int64
	// Joins: first snapshots uploaded by joining nodes from their own data
	// (R4).
	Joins int64
	// Deliveries: on-alarm runs whose outcome was replicated.
	Deliveries int64
	// TimerDeliveries: deliveries that came out of a node timer holding
	// an entry offered by a sweep.
	TimerDeliveries int64
	// MidEventUploads: exec-durable uploads in the middle of an event.
	MidEventUploads int64
	// ActorDeletes: replicated deletes of an actor.
	ActorDeletes int64
	// PutRetries: immediate retries of the same entry PUT after a timeout.
	PutRetries int64
	// PutRetryLanded: retries that found the first attempt had landed.
	PutRetryLanded int64
	// LegacyMigrations: legacy entries replaced by tagged ones.
	LegacyMigrations int64
	// LegacyRemovals: legacy entries removed by their exact name as stale.
	LegacyRemovals int64
	// Keeps: deliveries that kept an entry because the bucket had nothing
	// for the actor.
	Keeps int64
	// StaleDeletes: DELETEs sent for stale entries.
	StaleDeletes int64
	// KeptStale: stale entries' times delivered, without running, by the
	// node holding an actor its timer keeps at a later time.
	KeptStale int64
	// Forwards: entries a node's sweep listed whose delivery found the
	// actor held by another node, forwarded there; ForwardRemovals: the
	// holders' removals of stale entries after a forward.
	Forwards, ForwardRemovals int64
	// StaleDrills: final phases whose stale drill ran (a stale entry left
	// by a failed DELETE, its actor re-arming on a node that is no walker).
	StaleDrills int64
	// NoState: deliveries for an actor with no state.
	NoState int64
	// Requests: client requests that ran.
	Requests int64
	// Uploads: state uploads that succeeded.
	Uploads int64
	// GiveUps: actors given up (failed index step or upload, lost hold).
	GiveUps int64
	// LateOps: requests held to land after their caller gave up.
	LateOps int64
	// Crashes, Pauses, CutOffs: node faults injected.
	Crashes, Pauses, CutOffs int64
	// LeasesLost: node leases found expired at renewal (the node fenced
	// out).
	LeasesLost int64
	// AimedFaults: joining nodes' first uploads delayed while cut off.
	AimedFaults int64
	// JoinsReplaced: joining nodes' data set aside because the bucket had
	// the actor.
	JoinsReplaced int64
	// Anyone: sweep offers of another node's entries, three margins
	// overdue.
	Anyone int64
	// Gateways: runs with a node that serves no class.
	Gateways int64
	// LimitedRetries: runs whose retry policy ends after 3 attempts;
	// GivenUp: alarms whose last allowed attempt failed (cleared, the
	// actor's failure count back to 0).
	LimitedRetries, GivenUp int64
	// Checks: invariant checks of one actor.
	Checks int64
	// Walks: walks of the tenant's index (by its walkers, on the
	// relisting schedule); Relists: changes of the live nodes a node's
	// schedule saw (every tenant listed again).
	Walks, Relists int64
	// EarlyWalks: walks of a tenant whose plan the cap cut short, begun
	// before the next sweep once the node's deliveries were few (the
	// drain, docs/design.md#drain).
	EarlyWalks int64
	// Drills: final phases whose orphan drill ran (a node crashed holding
	// the only timer of an alarm no walker had listed).
	Drills int64
	// BacklogDrills: final phases whose backlog drill ran (a node died for
	// good holding thousands of alarms due at one instant);
	// BacklogAlarms: their alarms, each delivered exactly once within the
	// bound; BacklogListPages: the LIST pages the bucket served while they
	// drained (every node's, the drain's walks among them).
	BacklogDrills, BacklogAlarms, BacklogListPages int64
	// BacklogRedeliveries: deliveries of a drill actor's due time after
	// it ran (the alarm moved: nothing to run, stale entries looked for).
	BacklogRedeliveries int64
	// DeliveredLately: walks' candidates left out because their node ran
	// that entry time lately and its DELETE was on its way
	// (core.State.RanLately).
	DeliveredLately int64
	// Omitted: keys that LISTs left out though they existed; StateProbes:
	// HEADs a take sent to learn whether the last hold uploaded.
	Omitted, StateProbes int64
	// DurableAcks: exec-durable events acknowledged (their upload in the
	// middle of the event counted); every one must be in the actor's
	// state from then on.
	DurableAcks int64
	// Retakes: holds taken again after a lapse with one conditional write
	// of the record, the open copy kept (docs/design.md#retake);
	// RetakesRefused: those whose record had changed (taken over or
	// released), the actor then taken anew.
	Retakes, RetakesRefused int64
}

// Add adds o to c.
func (c *Counters) Add(o Counters) {
	cv, ov := reflect.ValueOf(c).Elem(), reflect.ValueOf(o)
	for i := range cv.NumField() {
		cv.Field(i).SetInt(cv.Field(i).Int() + ov.Field(i).Int())
	}
}

// Field is one named counter.
type Field struct {
	Name  string
	Value int64
}

// Fields lists the counters in declaration order.
func (c Counters) Fields() []Field {
	v := reflect.ValueOf(c)
	out := make([]Field, v.NumField())
	for i := range out {
		out[i] = Field{Name: v.Type().Field(i).Name, Value: v.Field(i).Int()}
	}
	return out
}

// Required are the counters a push run must see above zero: each names a
// behaviour the model claims to cover.
var Required = []string{
	"Takeovers", "Alarms", "LateCommits", "LateDeletes", "Fences", "Joins",
	"Deliveries", "TimerDeliveries", "MidEventUploads", "ActorDeletes",
	"PutRetries", "LegacyMigrations", "Keeps", "Crashes", "Pauses", "CutOffs",
	"AimedFaults", "Checks", "Anyone", "Gateways", "LimitedRetries", "GivenUp",
	"Walks", "Relists", "EarlyWalks", "Drills", "BacklogDrills", "KeptStale", "Forwards", "ForwardRemovals",
	"StaleDrills", "Omitted", "StateProbes", "DurableAcks", "Retakes", "RetakesRefused",
}

// Run runs one simulation to its end and reports the outcome. It is
// deterministic and single-threaded; runs may proceed in parallel.
func Run(cfg Config) Result {
	s := newSim(cfg)
	s.run()
	return s.result()
}

// Virtual time. Everything is in Unix milliseconds from epochMs.
const (
	epochMs  = 1_800_000_000_000
	leaseMs  = 10_000 // node lease
	renewMs  = 3_000  // lease renewal period
	safetyMs = 1_000  // a node stops trusting its lease this long before it ends
	graceMs  = 5_000
	marginMs = leaseMs + graceMs // lease period plus grace: the sweep's cutoff
	sweepMs  = 10_000            // alarm_sweep
	checkMs  = 50                // invariant check period
	mainMs   = 360_000           // main phase: faults, requests
	finalMs  = 820_000           // final phase: faults off, no requests
	gridMs   = 5_000             // alarm times fall on this grid, so they collide
	idleMs   = 20_000            // a hold idle this long is released
	tenant   = "acme"
	class    = "counter"
)

// The relisting schedule (docs/design.md#relist) in the model.
const (
	// safetyPeriodMs is the schedule's safety period: longer than a run,
	// so that no relisting the design argues for rests on it.
	safetyPeriodMs = mainMs + finalMs + 1
	walkersR       = 2 // walkers per tenant and class
	// sweepCap is the sweep's cap on a plan, small so that the model's
	// few actors meet it and the drain's early walks run
	// (docs/design.md#drain): a tenant the cap cut short is walked again,
	// polled every relistPollMs, once the node has at most
	// sweepCap/4 deliveries pending, until the next sweep.
	sweepCap = 4
	// walkMaxEntries is how many keys one walk reads at most, the next
	// walk resuming after the last: the plugin's 2,048 scaled with the
	// cap (256), so the backlog drill's walks resume as the plugin's do
	// over a backlog of tens of thousands.
	walkMaxEntries = 8 * sweepCap
	relistPollMs   = sweepMs / 20
	// safetyWalkMs: the final phase's last minutes, after every committed
	// alarm must have been delivered, start with the safety period's
	// relisting.
	safetyWalkMs = 180_000
	// drillMs: when in the final phase the orphan drill runs;
	// orphanDueMs: when its alarm is due; orphanCheckMs: when it must have
	// been delivered (three margins and a sweep later, and a few seconds
	// for the delivery itself).
	drillMs       = 240_000
	orphanDueMs   = drillMs + 20_000
	orphanCheckMs = orphanDueMs + 3*marginMs + sweepMs + 5_000
	// quietMs: how long into the final phase every fault of the main
	// phase is over (a cut-off aimed at a join, ≤ 110 s; a late request,
	// ≤ 120 s): from then on no stale entry may grow older than
	// staleBoundMs (staleCheck).
	quietMs = 120_000
	// staleDrillMs: when in the final phase the stale drill runs;
	// tickMs: how often its ticker re-arms, until tickEndMs.
	staleDrillMs = 100_000
	tickMs       = 5_000
	tickEndMs    = 200_000
	// staleBoundMs is the bound on a stale entry's age once quiet
	// (docs/design.md#stale-forward): counted from when it is a margin
	// overdue (or was written, or quiet began, whichever is last), its
	// walkers list it within a sweep and offer it as its shard's, or as
	// anyone's two margins later; the delivery forwards it to the holder
	// at once; a holder whose delivery of the actor was under way skips
	// it, and the same time is forwarded again a lease period later, at
	// the next sweep after. 2 margins + 2 sweeps + a lease: 60 s, six
	// sweeps.
	staleBoundMs = 2*marginMs + 2*sweepMs + leaseMs
)

var retryMax = alarmindex.DefaultRetryMax

func fmtMs(ms int64) string { return fmt.Sprintf("%d.%03ds", ms/1000, ms%1000) }

type event struct {
	at  int64
	seq uint64
	fn  func()
}

type eventQueue []event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	old[len(old)-1] = event{}
	*q = old[:len(old)-1]
	return e
}

type sim struct {
	// drillAt, when not zero, is the alarm the next set request sets (the
	// final phase's orphan drill); drillNode the node that ran it.
	drillAt   int64
	drillNode *node
	// orphanAt is the orphan drill's alarm once its node crashed (0:
	// the drill did not run).
	orphanAt int64

	// The stale drill (staleDrill): setAt is the alarm the next set
	// request on an actor sets; failDelete the actors whose next replaced
	// entry's DELETE fails on every try; the ticker re-arms within the
	// horizon on every on-alarm until tickUntil.
	setAt      map[string]int64
	failDelete map[string]bool
	ticker     string
	tickUntil  int64
	// maxStaleMs is the oldest a stale entry grew after quiet (staleCheck).
	maxStaleMs int64
	// bl is the backlog drill's state (nil until it runs); maxDrainMs how
	// long after their due time its alarms took to drain.
	bl         *backlog
	maxDrainMs int64

	cfg     Config
	rng     *rand.Rand
	now     int64
	seq     uint64
	q       eventQueue
	final   bool
	mainEnd int64
	end     int64
	fail    *Failure

	b         *bucket.Mem
	nextFault bucket.Fault
	lateSeq   uint64

	nodes      []*node
	actors     []abi.ActorID // every actor, in creation order
	actorKeys  []string
	cluster    []abi.ActorID // actors client requests may reach from the start
	joined     []abi.ActorID // joining nodes' actors
	lastTarget *abi.ActorID
	byKey      map[string]abi.ActorID

	// maxAttempts is the retry policy's limit (0: none); half the runs
	// have one of 3 attempts.
	maxAttempts int

	epochs uint64
	leases []storeLease
	holds  map[string]*holdRec

	sh      shadow
	ownKeys map[string]ownKey // stateOf's snapshot key of each record's own hold
	c       Counters
	tr      tracer
}

type tracer struct {
	h    hash.Hash64
	n    int
	ring []string
	next int
	all  []string
	keep bool
}

func (s *sim) logf(format string, args ...any) {
	line := fmtMs(s.now-epochMs) + " " + fmt.Sprintf(format, args...)
	t := &s.tr
	t.h.Write([]byte(line))
	t.h.Write([]byte{'\n'})
	t.n++
	if len(t.ring) < TailLines {
		t.ring = append(t.ring, line)
	} else {
		t.ring[t.next] = line
		t.next = (t.next + 1) % TailLines
	}
	if t.keep {
		t.all = append(t.all, line)
	}
}

func (s *sim) at(t int64, fn func()) {
	if t < s.now {
		t = s.now
	}
	s.seq++
	heap.Push(&s.q, event{at: t, seq: s.seq, fn: fn})
}

func (s *sim) after(d int64, fn func()) { s.at(s.now+d, fn) }

// failf records the first failure and stops the run.
func (s *sim) failf(kind, format string, args ...any) {
	if s.fail != nil {
		return
	}
	s.fail = &Failure{AtMs: s.now - epochMs, Kind: kind, Msg: fmt.Sprintf(format, args...)}
	s.logf("FAIL %s: %s", kind, s.fail.Msg)
}

func (s *sim) run() {
	for s.q.Len() > 0 && s.fail == nil {
		e := heap.Pop(&s.q).(event)
		if e.at > s.end {
			break
		}
		s.now = e.at
		e.fn()
	}
	if s.fail == nil {
		s.now = s.end
		s.finalCheck()
	}
}

func (s *sim) result() Result {
	t := &s.tr
	tail := make([]string, 0, len(t.ring))
	tail = append(tail, t.ring[t.next:]...)
	tail = append(tail, t.ring[:t.next]...)
	return Result{
		Seed:       s.cfg.Seed,
		Failure:    s.fail,
		Counters:   s.c,
		TraceHash:  t.h.Sum64(),
		TraceLines: t.n,
		Tail:       tail,
		Trace:      t.all,
		MaxStaleMs: s.maxStaleMs,
		MaxDrainMs: s.maxDrainMs,
	}
}

// chance reports true with probability p, drawing from the run's source.
func (s *sim) chance(p float64) bool { return s.rng.Float64() < p }

// between draws uniformly from [lo, hi].
func (s *sim) between(lo, hi int64) int64 { return lo + s.rng.Int64N(hi-lo+1) }

// The model's rates. They are tuned so that every unsafe variant of the
// rules is caught within 20 seeds while a run stays cheap; see doc.go for
// why each race needs what it needs.
const (
	// requestGapMaxMs bounds the gap between client requests (uniform from
	// 100 ms).
	requestGapMaxMs = 1000
	// pBurst: a request goes to the same actor as the one before.
	pBurst = 0.3
	// durableShare is the percentage of requests that are exec-durable.
	durableShare = 30
	// pResume: an exec-durable event first sets a resume alarm for now.
	pResume = 0.6
	// durableRestMinMs, durableRestMaxMs bound how long an exec-durable
	// event runs after its mid-event upload.
	durableRestMinMs = 500
	durableRestMaxMs = 20_000
	// pReuse is the percentage of alarm choices that reuse a time the
	// actor already has other entries at.
	pReuse = 40
	// pSlowHandler: a handler runs for up to slowHandlerMaxMs.
	pSlowHandler     = 0.05
	slowHandlerMaxMs = 8000
	// pStaleListPause: a node stalls for longer than a lease between
	// deciding to remove stale entries and listing them (R3's race).
	pStaleListPause = 0.5
	// pPauseAfterUpload: a node stalls right after an upload.
	pPauseAfterUpload = 0.02
	// pCrashAfterUpload: a node crashes between an upload and the DELETE
	// of the entry it replaced.
	pCrashAfterUpload = 0.01
)
