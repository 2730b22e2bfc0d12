// Package alarms wires durable alarms into a wazero-based host that runs
// actors on a cluster of nodes sharing an S3 bucket.
//
// The parts: the host module and committed backoff (package hostmod; package
// engine is one host built on it), the node timer and the sweep (package sweeper), and the alarm index in the
// bucket, whose rules (package alarmindex) this package carries out. A host
// embeds them through two small interfaces it implements:
//
//   - [Host]: its clock, this node's name, the live nodes, and taking an
//     actor for a delivery.
//   - [Actor]: an actor this node holds: what the host knows of its hold
//     ([Hold]), read and write access to its database, and the host's own
//     operations on it (upload now, run the alarm event, release).
//
// The host calls the plugin at its replication points ([Plugin.Replicate]
// around every upload of an actor's database: after an event, in the
// middle of an exec-durable event, or a joining node's first upload), after
// an event changed the alarm ([Plugin.Arm]), and to deliver an alarm to an
// actor it already holds ([Plugin.Deliver]). [Plugin.Start] runs the node
// timer, which takes each actor whose alarm is due ([Host.Take]) and
// delivers it, and the sweep loop, which offers orphaned alarms to the
// timer. A host whose nodes can reach each other also makes its Host a
// [Forwarder], and passes the stale index entries other nodes forward to
// it to [Plugin.OfferEntry] (docs/design.md#stale-forward).
//
// The reference host in package node is built on nothing else.
package alarms

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/alarmindex"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/clock"
	"github.com/wasmkeep/alarms/core"
	"github.com/wasmkeep/alarms/fair"
	"github.com/wasmkeep/alarms/hostmod"
	"github.com/wasmkeep/alarms/internal/seam"
	"github.com/wasmkeep/alarms/internal/variant"
	"github.com/wasmkeep/alarms/sweeper"
)

// Host is what the plugin needs of the runtime that embeds it.
type Host interface {
	// Clock is the host's clock: alarms are due by it.
	clock.Clock
	// Self is this node's name as LiveNodes reports it.
	Self() string
	// LiveNodes reports the nodes with fresh heartbeats.
	LiveNodes(ctx context.Context) ([]string, error)
	// Take takes an actor for a delivery of the node timer (in a cluster:
	// its hold, restoring the actor from the bucket when the local copy is
	// not the newest state) and returns it locked for the caller, with
	// done, which ends the delivery and unlocks it. done(err) with a
	// non-nil err means the delivery failed part-way: the host gives the
	// actor up (closes its local copy and lets the hold go), as for a
	// failed upload.
	//
	// An error wrapping ErrNotHere ([NotHere]) drops the alarm: the actor
	// is not this node's to run. Any other error retries the same entry
	// time after Config.RetryAfterError.
	Take(ctx context.Context, id abi.ActorID) (a Actor, done func(err error), err error)
}

// MembersHost is a Host that reports the live nodes with the classes each
// serves (in the reference host, from their leases). With it, each tenant's
// index is walked by a few nodes (Config.SweepWalkers per class) rather
// than by all.
type MembersHost interface {
	Host
	Members(ctx context.Context) (sweeper.View, error)
}

// LapseHost is a Host whose node lease can lapse and come back (a bucket
// outage, a partition). LeaseValid reports whether it is valid now: while
// it is not, the plugin does not sweep (sweeper.Config.Valid).
// ValidAgainSince reports when it became valid again after its latest
// lapse (zero: no lapse, or not valid now): its sweeps then count the
// overdue time of other nodes' alarms only from then
// (sweeper.PlanInput.Since). In the reference host, cluster.Leases.Valid
// and ValidAgainSince.
type LapseHost interface {
	Host
	LeaseValid() bool
	ValidAgainSince() time.Time
}

// SyncHost is a Host whose deliveries may wait for the disk: a durable
// commit's sync. Syncing reports how many of its calls wait so now; the
// plugin then runs that many more delivery workers at once than the Go
// runtime has processors, so that a delivery waiting for a sync leaves its
// processor to another, whose commit shares the next sync when the host
// shares them. In the reference host, the engine's Syncing (the node
// journal).
type SyncHost interface {
	Host
	Syncing() int
}

// HandoverHost is a Host that learns when another node leaves: Departures
// receives a node's address once it released its holds and deleted its
// lease, or once its lease is judged expired (it died: in the reference
// host, cluster.Leases.Departures). The sweep then walks at once, with no
// margin, the alarms of the actors that node held, and hands the node
// timer those of this node's shard at their due times
// (sweeper.Config.Departures, docs/design.md#handover): without it they
// fire a margin (lease + grace) late, plus up to a sweep period.
type HandoverHost interface {
	Host
	Departures() <-chan string
}

// Hold is what the host knows of its hold on an actor, as the rules need
// it (docs/design.md#the-index).
type Hold struct {
	// Generation is the generation of this node's hold on the actor (for
	// an exec-durable upload, the generation of the replica it uploads
	// with).
	Generation uint64
	// Valid: the hold exists and the node lease is valid.
	Valid bool
	// Uploaded: this hold has uploaded the actor's database.
	Uploaded bool
	// BucketHad: the bucket had state for the actor when this node took
	// it.
	BucketHad bool
}

// Actor is an actor the host holds, as the plugin sees it. The host calls
// the plugin with the actor's lock held, and the plugin calls back only
// these methods, on the same goroutine.
type Actor interface {
	ID() abi.ActorID
	// Hold is the hold as it is now: the plugin asks again after an
	// upload, whose hold may have lapsed on the way.
	Hold() Hold
	// State reads the committed state: of it the plugin reads the alarm,
	// the alarm_indexed meta row (Indexed) and whether on-init ran and is
	// recorded (InitRecorded).
	State(ctx context.Context) (hostmod.State, error)
	// SetMeta commits a meta row in a transaction of its own.
	SetMeta(ctx context.Context, key, value string) error
	// Upload uploads the database now: the replication alone. The plugin
	// brings the index in line around it (Plugin.Replicate).
	Upload(ctx context.Context) error
	// RunAlarm runs the ordinary alarm event: on-alarm if the committed
	// alarm is due, committed, then replicated (through Plugin.Replicate).
	RunAlarm(ctx context.Context) (hostmod.Delivery, error)
	// Release lets the hold go at once.
	Release(ctx context.Context)
}

// UploadKind says which replication point an upload is.
type UploadKind = core.UploadKind

const (
	// AfterEvent: an event committed; its state is about to be uploaded.
	AfterEvent = core.AfterEvent
	// MidEvent: an exec-durable event uploads before it replies.
	MidEvent = core.MidEvent
	// FirstUpload: a joining node uploads an actor the bucket does not have.
	FirstUpload = core.FirstUpload
)

// Config configures the plugin.
type Config struct {
	// Bucket holds the alarm index (under "alarms/"). A host that keeps
	// its objects under a root passes bucket.WithPrefix(b, root), so the
	// index is <root>alarms/... and clusters sharing a bucket under
	// different roots never see each other's entries.
	Bucket bucket.Bucket
	// Tenants, if not empty, are the only tenants whose index this node
	// sweeps. Empty (the usual case): every sweep first finds every tenant
	// with entries in the index, with one delimited LIST of "alarms/" per
	// 1,000 tenants, so no alarm waits for its tenant to be named.
	Tenants []string
	// Host is the embedding runtime.
	Host Host
	// Timer is the node timer that sweeps offer orphaned alarms to.
	Timer *sweeper.Timer
	// Margin is the lease period plus grace: how overdue an entry must be
	// before a sweep delivers it.
	Margin time.Duration
	// SweepPeriod is alarm_sweep (default 10 s).
	SweepPeriod time.Duration
	// SweepConcurrency is how many tenants' indexes a sweep lists at once
	// (default sweeper.DefaultConcurrency, 32).
	SweepConcurrency int
	// SweepMaxDeliveries caps the deliveries one sweep of a tenant offers
	// the node timer (default sweeper.DefaultMaxDeliveries, 256). A tenant
	// whose plan the cap cut short is walked again as soon as the node has
	// delivered most of them, not a sweep period later, so the cap bounds
	// how much of a backlog is queued at once, not how fast it drains
	// (docs/design.md#drain).
	SweepMaxDeliveries int
	// SweepWalkers is how many live nodes walk each tenant's index, per
	// class they serve (default sweeper.DefaultWalkers, 2), when the Host
	// reports the live nodes' classes (MembersHost); otherwise every node
	// walks every tenant.
	SweepWalkers int
	// SweepSafetyPeriod is the longest a walker leaves a tenant's index
	// unlisted when nothing says an entry in it can be overdue (default
	// 360 sweep periods: sweeper.DefaultSafetyPeriod, 1 h, at the
	// default period). A tenant is listed again
	// sooner when its earliest entry comes due, when the live nodes
	// change, and when this node lets go of one of its actors
	// (docs/design.md#relist).
	SweepSafetyPeriod time.Duration
	// RetryMax is the longest backoff (default 5 min).
	RetryMax time.Duration
	// Busy reports an actor already in flight on this node. Actors the
	// Timer keeps against a sweep's offer (retrying) count as busy without
	// it.
	Busy func(abi.ActorID) bool
	// Serves reports whether this node runs actors of a class (nil: every
	// class). A sweep neither offers entries of other classes nor counts
	// them against its cap of 256: nodes that serve the class deliver them
	// (as anyone's once three margins overdue), and entries of a class no
	// node serves cannot hold the others back.
	Serves func(class string) bool
	// Deletes gathers the DELETEs of entries that replicated state replaced
	// into multi-object requests (nil: a Deleter of the plugin's own on
	// Bucket, with bucket.DefaultDeleteWindow). A host may share one for
	// its own deletes that can land late, such as replaced snapshots, so
	// that both go in the same requests: a Deleter on Bucket's keys (for a
	// Bucket under a prefix, Sub of the host's Deleter with that prefix).
	// Failed requests are counted and logged for the plugin's keys; the
	// host's callback sees only its own. The host should Flush it when it
	// stops (FlushDeletes does).
	Deletes *bucket.Deleter
	// Nonces defaults to a source seeded from crypto/rand.
	Nonces alarmindex.Nonces
	// Logger defaults to a null logger.
	Logger hclog.Logger

	// SingleNode: the host runs alone, without a bucket. There is no index
	// and no sweep; a delivery runs the alarm event. Bucket and Margin are
	// then not needed.
	SingleNode bool
	// RetryAfterError is how long after a failed delivery (the bucket
	// unreachable, the actor's database failing) the timer loop tries the same
	// entry time again: the lease period in a cluster, as a holder that
	// cannot reach the bucket loses its lease in that time (default:
	// Margin; 5 s for SingleNode).
	RetryAfterError time.Duration
	// MaxConcurrentDeliveries is the timer loop's delivery workers: how
	// many deliveries run at once (default DefaultDeliveryWorkers()). They
	// are shared fairly between tenants: due alarms wait in a queue per
	// tenant, in due order, no tenant holds more than all but an eighth of
	// the workers while it has work, and a free worker goes to the tenant
	// whose deliveries have held workers the least time, by weight
	// (package fair).
	MaxConcurrentDeliveries int
	// DrainTimeout is how long the stop function of Start lets the
	// deliveries in flight finish before it cancels their context
	// (default DefaultDrainTimeout). Once stop is called no delivery
	// starts; those under way run to their end, replicate and re-arm, so
	// a clean shutdown runs no on-alarm twice. One still running at the
	// deadline is cut: its actor is given up, and the next holder runs
	// on-alarm again from the last replicated state, as after a crash
	// (docs/design.md#shutdown).
	DrainTimeout time.Duration
	// TenantWeights gives tenants their weights in the share of the
	// delivery workers (default 1 each: equal shares). The tenants named
	// are also the ones the per-tenant metrics name; every other tenant
	// is counted under OtherTenants, so the series are bounded by the
	// configuration, not by the tenants that show up.
	TenantWeights map[string]int
	// OnDelivery, if set, is called after each delivery the timer loop
	// makes.
	OnDelivery func(Delivery)
	// StartDelivery, if set, is called on the delivery worker as each
	// delivery of the timer loop begins, before the host takes the actor,
	// with the worker's context; the context it returns is the one the
	// delivery runs with (Host.Take and every call on the taken actor),
	// and end is called with the delivery once it ended (after
	// OnDelivery, and also when the delivery panicked). A host traces its deliveries with it (a span started
	// here carries the bucket's requests beneath it). A delivery whose
	// timer key is not an actor's does not call it.
	StartDelivery func(ctx context.Context, id abi.ActorID) (_ context.Context, end func(Delivery))
	// Registerer, if set, is where the plugin registers its metrics
	// (nil: none, and nothing is recorded): alarms pending in the timer,
	// firings by outcome, lateness, retries and failing actors, and in a
	// cluster the sweeps and the index's PUTs and DELETEs. Two plugins in
	// one registry collide (Register fails): give each a registry, or a
	// label of its own with prometheus.WrapRegistererWith.
	Registerer prometheus.Registerer

	// variants turn safety rules off, for tests that show a rule is needed
	// (export_test.go); production never sets them.
	variants variant.Set
}

// DefaultDeliveryWorkers is the delivery workers of a plugin made now
// without Config.MaxConcurrentDeliveries: 16 per CPU, at least 64. A
// delivery spends most of its time waiting on the bucket (its upload, the
// index), not on a CPU.
func DefaultDeliveryWorkers() int { return max(64, 16*runtime.NumCPU()) }

// DefaultDrainTimeout is how long a stop lets deliveries in flight finish
// without Config.DrainTimeout: most take milliseconds; a guest that hangs
// for its whole alarm deadline (30 s by default) is cut short, so that a
// supervisor's usual stop timeout (30 s in Kubernetes) leaves time to
// replicate and release the actors.
const DefaultDrainTimeout = 10 * time.Second

// Plugin carries out the index rules and runs the sweep for one node.
type Plugin struct {
	cfg   Config
	rules alarmindex.Rules
	log   hclog.Logger
	loop  *sweeper.Loop

	mu sync.Mutex
	// core decides (package core), under mu: one delivery of an actor at
	// a time, the entry each delivery names, the entry each upload named
	// and the removals of stale entries (stale.go).
	core *core.State
	// runCtx is the timer loop's, while it runs (stale.go).
	runCtx context.Context
	// syncing is the host's SyncHost.Syncing (nil: it is no SyncHost),
	// which the delivery workers grow by (wakeIdle).
	syncing func() int
	// schedMu guards the delivery workers' state (delivery.go): sched,
	// the fair scheduler, where the deliveries the timer popped wait in
	// their tenants' queues; ready, deliveries started for no worker yet
	// (removals of stale entries); workers, the worker goroutines, at most
	// Config.MaxConcurrentDeliveries, and idle, those waiting on wake (a
	// token each, buffered); lastTake, when a worker last took a
	// delivery; loopCtx, the timer loop's context while it runs, for the
	// workers it starts (nil otherwise: nothing starts), and workCtx, the
	// context of their deliveries, which outlives loopCtx by at most
	// Config.DrainTimeout (Start). workerWG waits
	// for the workers; running and waiting are the scheduler's counts for
	// the metrics.
	schedMu          sync.Mutex
	sched            *fair.Queue[*job]
	ready            []*job
	workers, idle    int
	coming           int // workers woken or started that have not looked for a delivery yet
	lastTake         time.Time
	loopCtx, workCtx context.Context
	wake             chan struct{}
	workerWG         sync.WaitGroup
	running, waiting atomic.Int64
	// wg counts the deliveries popped and not yet ended or dropped, and
	// the forwards in flight.
	wg sync.WaitGroup
	// forwarding bounds the forwards in flight (delivery.go, forwardLater).
	forwarding chan struct{}

	m *metrics // nil without Config.Registerer
	// failing are the actors whose latest run here failed, with their
	// failure count (kept only with metrics).
	failing map[string]int
	// dueSince are the actors whose alarm an event here committed already
	// due (its time before the node's now), with when it was committed:
	// lateness counts from then (kept only with metrics).
	dueSince map[string]dueSince
}

// Register creates the plugin for a host.
func Register(cfg Config) (*Plugin, error) {
	if (cfg.Bucket == nil && !cfg.SingleNode) || cfg.Host == nil || cfg.Timer == nil {
		return nil, errors.New("alarms: Register needs a Bucket, a Host and a Timer")
	}
	if cfg.Margin <= 0 && !cfg.SingleNode {
		return nil, errors.New("alarms: Margin (lease period plus grace) must be positive")
	}
	if cfg.RetryAfterError <= 0 {
		cfg.RetryAfterError = cfg.Margin
		if cfg.SingleNode {
			cfg.RetryAfterError = 5 * time.Second
		}
	}
	if cfg.MaxConcurrentDeliveries <= 0 {
		cfg.MaxConcurrentDeliveries = DefaultDeliveryWorkers()
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = DefaultDrainTimeout
	}
	for t, w := range cfg.TenantWeights {
		if w < 1 {
			return nil, fmt.Errorf("alarms: weight %d for tenant %q: want 1 or more", w, t)
		}
	}
	if cfg.RetryMax <= 0 {
		cfg.RetryMax = hostmod.DefaultRetryMax
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	m := newMetrics(cfg)
	log := cfg.Logger
	var p *Plugin
	deleteFailed := func(keys []string, err error) {
		m.deleteReplacedFailed(len(keys))
		// A replaced entry left behind is in no timer: the sweep removes
		// it when it comes due, if it lists the tenant (docs/design.md#relist).
		for _, k := range keys {
			if key, perr := alarmindex.ParseKey(k); perr == nil && p != nil && p.loop != nil {
				p.loop.Hint(key.Actor.Tenant)
			}
		}
		log.Debug("could not delete replaced index entries; each is removed when it comes due", "keys", len(keys), "error", err)
	}
	if cfg.Deletes == nil {
		cfg.Deletes = bucket.NewDeleter(cfg.Bucket, 0, deleteFailed)
	} else {
		// The host's batches carry the entries too; their failures are
		// the plugin's to count.
		cfg.Deletes = cfg.Deletes.Sub("", deleteFailed)
	}
	if cfg.Nonces == nil {
		ns, err := alarmindex.NewNonceSource(rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("alarms: nonce source: %w", err)
		}
		cfg.Nonces = ns
	}
	p = &Plugin{
		cfg:   cfg,
		rules: variant.Rules(alarmindex.Rules{Nonces: cfg.Nonces, RetryMax: cfg.RetryMax}, cfg.variants),
		log:   cfg.Logger,
		core:  core.New(core.Config{RetryAfterError: cfg.RetryAfterError, RetryMax: cfg.RetryMax}),
		sched: fair.New[*job](variant.Fair(fair.Config{
			Slots:    cfg.MaxConcurrentDeliveries,
			Headroom: cfg.MaxConcurrentDeliveries / 8,
			Weight:   func(t string) int { return cfg.TenantWeights[t] },
		}, cfg.variants)),
		wake:       make(chan struct{}, cfg.MaxConcurrentDeliveries),
		forwarding: make(chan struct{}, max(1, cfg.MaxConcurrentDeliveries/4)),
		m:          m,
		failing:    map[string]int{},
		dueSince:   map[string]dueSince{},
	}
	if sh, ok := cfg.Host.(SyncHost); ok {
		p.syncing = sh.Syncing
	}
	if cfg.SingleNode {
		if err := m.register(p); err != nil {
			return nil, err
		}
		return p, nil
	}
	var tenants sweeper.Tenants = sweeper.StaticTenants(cfg.Tenants)
	if len(cfg.Tenants) == 0 {
		tenants = sweeper.IndexTenants{Lister: cfg.Bucket}
	}
	var seed [16]byte
	_, _ = rand.Read(seed[:])
	// Actors of classes this node does not serve, actors in flight, those
	// found held by another node and forwarded there lately
	// (core.State.HeldElsewhereLately), and those the timer keeps (a
	// retry in progress, or a time already earlier) do not count against
	// a sweep's cap: an offer would change
	// nothing for them, and counting them let more than 256 such entries
	// hold every other overdue entry back.
	busy := func(id abi.ActorID) bool {
		if cfg.Serves != nil && !cfg.Serves(id.Class) {
			return true
		}
		if cfg.Busy != nil && cfg.Busy(id) {
			return true
		}
		key := TimerKey(id)
		now := cfg.Host.Now().UnixMilli()
		p.mu.Lock()
		busy := p.core.InFlight(key) || p.core.HeldElsewhereLately(id, now)
		p.mu.Unlock()
		return busy || cfg.Timer.Keeps(key, now)
	}
	var onSweep func(time.Duration, error)
	if m != nil {
		onSweep = m.sweep
	}
	var members sweeper.MemberLister
	if mh, ok := cfg.Host.(MembersHost); ok {
		members = mh
	}
	var departures <-chan string
	if hh, ok := cfg.Host.(HandoverHost); ok {
		departures = hh.Departures()
	}
	var since func() time.Time
	var valid func() bool
	if lh, ok := cfg.Host.(LapseHost); ok {
		since, valid = lh.ValidAgainSince, lh.LeaseValid
	}
	loop, err := sweeper.New(sweeper.Config{
		Self:    cfg.Host.Self(),
		Margin:  cfg.Margin,
		Period:  cfg.SweepPeriod,
		Lister:  cfg.Bucket,
		Clock:   cfg.Host,
		Sink:    sweeper.SinkFunc(p.offer),
		Live:    cfg.Host,
		Tenants: tenants,
		Busy:    busy,
		Delivered: func(id abi.ActorID, dueMs int64) bool {
			p.mu.Lock()
			defer p.mu.Unlock()
			return p.core.RanLately(id, dueMs, cfg.Host.Now().UnixMilli())
		},
		Since:   since,
		Valid:   valid,
		Kept:    p.kept,
		Rand:    mrand.New(mrand.NewPCG(leUint64(seed[:8]), leUint64(seed[8:]))),
		Logger:  cfg.Logger.Named("sweep"),
		OnSweep: onSweep,

		Concurrency:   cfg.SweepConcurrency,
		MaxDeliveries: cfg.SweepMaxDeliveries,
		Members:       members,
		Walkers:       cfg.SweepWalkers,
		Serves:        cfg.Serves,
		SafetyPeriod:  cfg.SweepSafetyPeriod,
		Pending:       p.pending,
		Departures:    departures,
	})
	if err != nil {
		return nil, fmt.Errorf("alarms: %w", err)
	}
	p.loop = loop
	if err := m.register(p); err != nil {
		return nil, err
	}
	return p, nil
}

func init() { seam.BeforeUpload = (*Plugin).beforeUpload }

// pending is how many deliveries the node has yet to end: started
// (waiting for a worker or running), or waiting to deliver again after a
// failure (the sweep walks a tenant its cap cut short again once these
// are few: sweeper.Config.Pending). The simulator reads the same count.
func (p *Plugin) pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.core.Pending()
}

func leUint64(b []byte) uint64 {
	var v uint64
	for i := 7; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v
}

// TimerKey names an actor in the node timer: its [abi.ActorID.Path].
func TimerKey(id abi.ActorID) string { return id.Path() }

// ParseTimerKey reads a TimerKey (see [abi.ParsePath]).
func ParseTimerKey(k string) (abi.ActorID, error) { return abi.ParsePath(k) }

// runSweeps runs the sweep loop until ctx ends (at once for SingleNode).
func (p *Plugin) runSweeps(ctx context.Context) {
	if p.loop != nil {
		p.loop.Run(ctx)
	}
}

// Start runs the plugin's two loops, each in a goroutine of its own, until
// stop is called: the sweep loop (none for SingleNode), and the timer
// loop, which delivers each alarm the node timer pops in the background,
// one delivery per actor at a time and at most
// Config.MaxConcurrentDeliveries at once: take the actor (Host.Take),
// deliver, then re-arm the timer from the committed alarm. A delivery that
// failed on the way gives the actor up and delivers the same entry time
// again after Config.RetryAfterError. stop starts no new delivery and
// sweep, lets the deliveries under way finish for up to
// Config.DrainTimeout (then cancels them), and returns once both loops have
// ended and every delivery they started is done.
func (p *Plugin) Start(ctx context.Context) (stop func()) {
	work, cut := context.WithCancel(context.WithoutCancel(ctx))
	ctx, cancel := context.WithCancel(work)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.runSweeps(ctx) }()
	go func() { defer wg.Done(); p.runTimer(ctx, work) }()
	return func() {
		defer cut() // the deliveries' context ends with stop
		cancel()    // nothing new starts
		ended := make(chan struct{})
		go func() { wg.Wait(); close(ended) }()
		select {
		case <-ended:
		case <-p.cfg.Host.After(p.cfg.DrainTimeout):
			p.log.Warn("deliveries still running at the drain deadline are cut short; their actors are given up and run on-alarm again where they are taken next", "drain_timeout", p.cfg.DrainTimeout, "running", p.running.Load())
			cut()
			<-ended
		}
	}
}

// LetGo tells the sweep that this node let go of an actor (gave it up or
// released its hold) whose alarm no timer of its may hold any more: the
// node lists the actor's tenant at its next sweep and walks it until a walk
// finds it empty (docs/design.md#relist). The plugin calls it itself where
// it gives an actor up; a host calls it where it does.
func (p *Plugin) LetGo(id abi.ActorID) {
	if p.loop != nil {
		p.loop.HintActor(id)
	}
}

// Sweep runs one sweep now over every tenant this node walks, whatever
// the schedule of the sweep loop (tests, tools).
func (p *Plugin) Sweep(ctx context.Context) {
	if p.loop != nil {
		p.loop.Sweep(ctx)
	}
}

// SweepStats returns the sweep loop's counters, and when the latest sweep
// ended with its failures (Stats.Last, Stats.LastErr). A SingleNode plugin
// never sweeps: the zero Stats.
func (p *Plugin) SweepStats() sweeper.Stats {
	if p.loop == nil {
		return sweeper.Stats{}
	}
	return p.loop.Stats()
}

// offer hands a sweep's delivery to the node timer, where a time it already
// holds earlier, or a retry within the longest backoff, wins. The core
// remembers an offer the timer took, so that a delivery that finds the
// actor held by another node forwards the entry there
// (docs/design.md#stale-forward).
func (p *Plugin) offer(d sweeper.Overdue) {
	if !p.cfg.Timer.Offer(TimerKey(d.Actor), d.DueMs, p.cfg.Host.Now().UnixMilli()) {
		return
	}
	p.mu.Lock()
	p.core.Listed(d.Actor, d.DueMs)
	if core.LegacyAmong(d.Keys) {
		p.core.OfferedLegacy(d.Actor, d.DueMs)
	}
	p.mu.Unlock()
}

func toIndex(id abi.ActorID) abi.ActorID { return id }

func (p *Plugin) eventFacts(ctx context.Context, a Actor) (alarmindex.EventFacts, error) {
	st, err := a.State(ctx)
	if err != nil {
		return alarmindex.EventFacts{}, &abi.ActorError{ID: a.ID(), Op: "read the committed alarm", Err: err}
	}
	rec, err := alarmindex.ParseRecorded(toIndex(a.ID()), st.Indexed)
	if err != nil {
		return alarmindex.EventFacts{}, &abi.ActorError{ID: a.ID(), Op: "the recorded index entry cannot be read", Err: err}
	}
	h := a.Hold()
	return alarmindex.EventFacts{
		Actor:      toIndex(a.ID()),
		Alarm:      st.Alarm,
		Recorded:   rec,
		Generation: h.Generation,
		HoldValid:  h.Valid,
	}, nil
}

// indexExec plans the upload of kind and returns its executor and the
// entry the uploaded state names (nil: none).
func (p *Plugin) indexExec(ctx context.Context, a Actor, kind UploadKind) (*alarmindex.Exec, *alarmindex.Key, error) {
	f, err := p.eventFacts(ctx, a)
	if err != nil {
		return nil, nil, err
	}
	plan, named, err := core.Plan(p.rules, kind, f)
	if err != nil {
		return nil, nil, err
	}
	return p.rules.ExecIndex(f.Actor, plan), named, nil
}

// Replicate uploads the actor's database (Actor.Upload) with the alarm
// index brought in line around it, in the only safe order: PUT a fresh
// entry for a changed alarm and record it in the database, upload, check
// that the hold is still valid, and only then DELETE the entry the upload
// replaced. It is what a host calls at each replication point: after an
// event, in the middle of an exec-durable event (MidEvent), and for a
// joining node's first upload (FirstUpload). An error means: the upload
// did not happen or does not count; give the actor up.
func (p *Plugin) Replicate(ctx context.Context, a Actor, kind UploadKind) error {
	if p.cfg.SingleNode {
		return nil
	}
	x, named, err := p.indexExec(ctx, a, kind)
	if err != nil {
		p.LetGo(a.ID())
		return err
	}
	if err := p.run(ctx, a, x, nil); err != nil {
		p.LetGo(a.ID())
		return err
	}
	p.noteUploaded(a.ID(), named)
	return nil
}

// SingleNode reports whether the plugin runs alone, without a bucket
// (Config.SingleNode): then an event replicates nothing.
func (p *Plugin) SingleNode() bool { return p.cfg.SingleNode }

// beforeUpload is Replicate split around an upload that is not one call
// (package engine's, which records the entry in the event's own commit:
// it reaches this through internal/seam, so that no host can get the
// order wrong): it PUTs and records the entry for the committed alarm and
// returns what to do once the upload succeeded. after checks that the hold
// is still valid and then DELETEs the entry the upload replaced; its error
// means the upload does not count (the hold lapsed on the way): give the
// actor up. Call after only when the upload succeeded. An error from
// beforeUpload means: do not upload; give the actor up.
func (p *Plugin) beforeUpload(ctx context.Context, a Actor, kind UploadKind) (after func(context.Context) error, err error) {
	if p.cfg.SingleNode {
		return func(context.Context) error { return nil }, nil
	}
	x, named, err := p.indexExec(ctx, a, kind)
	if err != nil {
		p.LetGo(a.ID())
		return nil, err
	}
	// Run the steps up to the upload, which is the host's.
	for {
		s := x.Next()
		if s.Kind == alarmindex.StepDone {
			p.LetGo(a.ID())
			return nil, x.Err() // a plan has an upload: only a failure ends here
		}
		if s.Kind == alarmindex.StepUpload {
			x.Report(nil)
			return func(ctx context.Context) error {
				if err := p.run(ctx, a, x, nil); err != nil {
					p.LetGo(a.ID())
					return err
				}
				p.noteUploaded(a.ID(), named)
				return nil
			}, nil
		}
		p.step(ctx, a, x, s, nil)
	}
}

// run carries out the rest of x's steps with a's operations and the bucket.
func (p *Plugin) run(ctx context.Context, a Actor, x *alarmindex.Exec, d *Delivery) error {
	for {
		s := x.Next()
		if s.Kind == alarmindex.StepDone {
			if err := x.Err(); err != nil {
				return err
			}
			return nil
		}
		p.step(ctx, a, x, s, d)
	}
}

// step carries out one step and reports it.
func (p *Plugin) step(ctx context.Context, a Actor, x *alarmindex.Exec, s alarmindex.Step, d *Delivery) {
	id := a.ID()
	switch s.Kind {
	case alarmindex.StepPut:
		_, err := p.cfg.Bucket.Put(ctx, s.Key.String(), nil, bucket.Cond{IfNoneMatch: true})
		if errors.Is(err, bucket.ErrPrecondition) {
			err = nil // an earlier try of the same PUT landed
		}
		p.m.put(err)
		x.Report(err)
	case alarmindex.StepRecord:
		x.Report(a.SetMeta(ctx, alarmindex.MetaAlarmIndexed, s.Value))
	case alarmindex.StepFence:
		x.Report(a.SetMeta(ctx, alarmindex.MetaOwnerFence, s.Value))
	case alarmindex.StepUpload:
		x.Report(a.Upload(ctx))
	case alarmindex.StepCheckHold:
		x.ReportHold(a.Hold().Valid)
	case alarmindex.StepDelete:
		if !s.Stale {
			// The entry the upload replaced, once the hold was re-checked:
			// its DELETE joins the next multi-object request, within a
			// short window. Sending it later changes nothing: keys are
			// never written again (R1), so a DELETE that lands late
			// removes nothing a newer state names; a failure, or a crash
			// before it is sent, leaves an extra entry, removed when it
			// comes due.
			p.cfg.Deletes.Delete(s.Key.String())
			p.m.deleteReplaced()
			x.Report(nil)
			return
		}
		err := p.cfg.Bucket.Delete(ctx, s.Key.String())
		p.m.deleteStale(err)
		if err != nil {
			p.log.Debug("could not delete an index entry; it is removed when it comes due", "actor", id.String(), "key", s.Key.String(), "stale", s.Stale, "error", err)
			if d != nil {
				d.failedDeletes++
			}
		} else if s.Stale && d != nil {
			d.Deleted = append(d.Deleted, s.Key.String())
		}
		x.Report(err)
	case alarmindex.StepList:
		keys, err := p.cfg.Bucket.List(ctx, s.Prefix, "", bucket.MaxPage)
		if d != nil {
			d.listed += len(keys)
		}
		x.ReportList(keys, err)
	case alarmindex.StepRun:
		ev, err := a.RunAlarm(ctx)
		if d != nil && err == nil {
			// A run whose outcome failed to replicate is given up: as far
			// as the cluster knows it did not run, and it is retried.
			d.Event = ev
		}
		x.Report(err)
	case alarmindex.StepRetry:
		if d != nil {
			d.RetryAt = p.cfg.Host.Now().Add(s.After).UnixMilli()
			p.cfg.Timer.Set(TimerKey(id), d.RetryAt)
		}
		x.Report(nil)
	case alarmindex.StepRelease:
		a.Release(ctx)
		p.LetGo(id)
		x.Report(nil)
	default:
		x.Report(fmt.Errorf("unknown step %s", s.Kind))
	}
}

// FlushDeletes sends the queued DELETEs of replaced entries now and waits
// for them (a host calls it when it stops; tests, to see the bucket
// settled).
func (p *Plugin) FlushDeletes(ctx context.Context) { p.cfg.Deletes.Flush(ctx) }

// Delivery is what one delivery did (Deliver, or a delivery of the timer
// loop), for the host's logs, its OnDelivery and tests.
type Delivery struct {
	Actor abi.ActorID
	// TimerAt is the entry time delivered (the time of the first try when
	// this is a retry).
	TimerAt int64
	// Outcome is what the rules made of the entry (nothing when the actor
	// was not taken).
	Outcome alarmindex.Outcome
	// Event is what the alarm event did (OutcomeRun).
	Event hostmod.Delivery
	// Deleted are the stale entries removed.
	Deleted []string
	// RetryAt, when not zero, is when the host's timer tries again.
	RetryAt int64
	// Alarm is the committed alarm the timer was re-armed with (nil:
	// none, or not re-armed; the timer loop).
	Alarm *int64
	// At is when the delivery ended, on the host's clock (the timer
	// loop).
	At time.Time
	// dueFrom is when the alarm run became due, when an event committed
	// it already due (0: at Event.Scheduled): lateness counts from then.
	dueFrom int64
	// Err is why the delivery did not happen or failed (the timer loop):
	// wrapping ErrNotHere, the alarm was dropped; otherwise it
	// is retried at RetryAt.
	Err error
	// Forwarded: the alarm was dropped (ErrNotHere) and the entry, which a
	// sweep of this node listed, is being forwarded to the node holding
	// the actor (through the Host, a Forwarder), apart from the delivery:
	// at most MaxConcurrentDeliveries/4 forwards are in flight, and a
	// delivery that finds them all busy forwards nothing (a later sweep
	// lists the entry again).
	Forwarded bool

	failedDeletes int // stale DELETEs that failed
	listed        int // entries the LIST of stale entries found
}

// deliver delivers the entry at dueMs for an actor the host took for it
// (the node timer fired): it runs the alarm event when the committed alarm
// is that time, and otherwise removes the stale entries at that time as the
// rules say (R2, R3, the fence, an actor with no state, a bucket that had
// nothing). An error means: give the actor up; nothing was deleted.
func (p *Plugin) deliver(ctx context.Context, a Actor, dueMs int64) (Delivery, error) {
	if p.cfg.SingleNode {
		ev, err := a.RunAlarm(ctx)
		if err != nil {
			return Delivery{Outcome: alarmindex.OutcomeRun}, err
		}
		return Delivery{Outcome: alarmindex.OutcomeRun, Event: ev}, nil
	}
	id := a.ID()
	p.mu.Lock()
	delivered := p.core.Entry(toIndex(id), dueMs)
	p.mu.Unlock()
	plan, _, err := p.deliveryPlan(ctx, a, delivered)
	if err != nil {
		return Delivery{}, err
	}
	out := Delivery{Outcome: plan.Outcome}
	err = p.run(ctx, a, p.rules.ExecDelivery(plan), &out)
	if err == nil && out.Event.Ran {
		// The run replaced the entry at dueMs: a walk that lists it before
		// its DELETE lands leaves it out (core.State.RanLately).
		p.mu.Lock()
		p.core.Ran(delivered.Actor, dueMs, p.cfg.Host.Now().UnixMilli())
		p.mu.Unlock()
	}
	return out, err
}

// deliveryPlan reads the actor's committed state and decides what
// delivering the entry time of delivered does.
func (p *Plugin) deliveryPlan(ctx context.Context, a Actor, delivered alarmindex.Key) (alarmindex.DeliveryPlan, hostmod.State, error) {
	id := a.ID()
	st, err := a.State(ctx)
	if err != nil {
		return alarmindex.DeliveryPlan{}, st, &abi.ActorError{ID: id, Op: "read the committed alarm", Err: err}
	}
	rec, err := alarmindex.ParseRecorded(toIndex(id), st.Indexed)
	if err != nil {
		return alarmindex.DeliveryPlan{}, st, &abi.ActorError{ID: id, Op: "the recorded index entry cannot be read", Err: err}
	}
	h := a.Hold()
	plan, err := p.rules.Deliver(alarmindex.DeliveryFacts{
		Delivered:      delivered,
		Alarm:          st.Alarm,
		Recorded:       rec,
		InitRecorded:   st.InitRecorded,
		Generation:     h.Generation,
		HoldValid:      h.Valid,
		Uploaded:       h.Uploaded,
		BucketHadActor: h.BucketHad,
	})
	return plan, st, err
}
