package sweeper

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/clock"
	"github.com/wasmkeep/alarms/format"
)

// DefaultPeriod is the default alarm_sweep: how often a node sweeps.
const DefaultPeriod = 10 * time.Second

// DefaultConcurrency is how many tenants' indexes a sweep lists at once by
// default: with 20 ms a LIST, 10,000 tenants take about 6 s, within one
// period.
const DefaultConcurrency = 32

// Lister lists keys of the bucket: up to limit keys under prefix that sort
// after startAfter, in key order. It returns fewer than limit keys only at
// the end of the listing.
type Lister interface {
	List(ctx context.Context, prefix, startAfter string, limit int) ([]string, error)
}

// Sink takes the sweep's deliveries (the node timer).
type Sink interface {
	Offer(d Overdue)
}

// SinkFunc adapts a function to [Sink].
type SinkFunc func(Overdue)

// Offer calls f(d).
func (f SinkFunc) Offer(d Overdue) { f(d) }

// LiveNodes reports the addresses of the nodes with fresh heartbeats.
type LiveNodes interface {
	LiveNodes(ctx context.Context) ([]string, error)
}

// Tenants reports the tenants whose index this node sweeps.
type Tenants interface {
	Tenants(ctx context.Context) ([]string, error)
}

// MemberLister reports the live nodes with the classes each serves, as
// nodes publish them (in the reference host, in their leases).
type MemberLister interface {
	Members(ctx context.Context) (View, error)
}

// StaticTenants is a fixed set of tenants.
type StaticTenants []string

// Tenants returns t.
func (t StaticTenants) Tenants(context.Context) ([]string, error) { return t, nil }

// Config configures a [Loop].
type Config struct {
	// Self is this node's address, as the live nodes report it. Required.
	Self string
	// Margin is the lease period plus grace. Required.
	Margin time.Duration
	// Period is alarm_sweep; zero takes DefaultPeriod.
	Period time.Duration

	Lister  Lister      // required
	Clock   clock.Clock // required
	Sink    Sink        // required
	Live    LiveNodes   // required
	Tenants Tenants     // required
	// Busy reports an actor already in flight or retrying on this node
	// (see [PlanInput.Busy]). Nil: none.
	Busy func(abi.ActorID) bool
	// Delivered reports an entry time of the actor this node ran lately
	// (see [PlanInput.Delivered]). Nil: none.
	Delivered func(id abi.ActorID, dueMs int64) bool
	// Kept, if set, is told each candidate Busy left out of a sweep's
	// plan ([Plan.Busy]), after the plan's deliveries were offered. Nil:
	// none.
	Kept func(Overdue)
	// Since, if set, reports when this node's node lease became valid
	// again after its latest lapse ([PlanInput.Since]; zero: no lapse).
	// Nil: entries are anyone's by their due time alone.
	Since func() time.Time
	// Valid, if set, reports whether this node's node lease is valid now.
	// A sweep while it is not is skipped: the node could take no actor,
	// and its view of the live nodes is stale (after a bucket outage, a
	// sweep begun just before the lease came back planned with this node
	// alone, and took every overdue actor as its own). Nil: always.
	Valid func() bool
	// Rand rotates anyone's entries. Required; used by one sweep at a time.
	Rand *rand.Rand
	// Logger; nil logs nothing.
	Logger hclog.Logger
	// OnSweep, if set, is told after each sweep how long it took (by
	// Clock) and its failures (nil: every tenant's index was read).
	OnSweep func(took time.Duration, err error)

	// Limits of a walk and a plan; zero takes the defaults.
	Walk          WalkLimits
	MaxDeliveries int
	// Concurrency is how many tenants' indexes a sweep lists at once
	// (zero takes DefaultConcurrency). Each tenant's walk is sequential;
	// its plan is made, and offered to the sink, once its walk ends, one
	// tenant at a time.
	Concurrency int

	// Members, if set, reports the live nodes with their classes, and
	// each tenant is walked only by its walkers ([Walkers], Walkers per
	// class) and by nodes a hint made walk it; its overdue entries are
	// shared among its walkers. Nil, or a view that does not hold Self:
	// every node walks every tenant, as the live nodes share the entries.
	Members MemberLister
	// Walkers is how many nodes walk a tenant per class (zero:
	// DefaultWalkers).
	Walkers int
	// Serves reports whether this node serves a class (nil: every class):
	// overdue entries of other classes do not keep a tenant listed every
	// period.
	Serves func(class string) bool
	// SafetyPeriod is the longest a walker leaves a tenant unlisted (zero:
	// SafetyPeriods sweep periods, DefaultSafetyPeriod at the default
	// period); see [Schedule].
	SafetyPeriod time.Duration

	// Pending, if set, reports how many deliveries this node has yet to
	// end: waiting for a worker, running, or retrying after a failure.
	// After a sweep whose plan the cap cut short ([PlanStats.Deferred])
	// and whose listings all succeeded, [Loop.Run] sweeps again as soon
	// as Pending falls to a quarter of MaxDeliveries, rather than a
	// period later: a backlog (a dead node's alarms) drains as fast as
	// the node delivers, 256 at a time, and a node whose deliveries
	// fail (the bucket down) keeps them pending and so relists no
	// sooner than every period. Nil: a period after each sweep.
	Pending func() int
	// Departures, if set, receives the address of each node seen to leave:
	// its lease was deleted once it had released its holds, or judged
	// expired. Run then walks at once every tenant this node walks, with
	// no margin and up to HandoverHorizon ahead, and hands the timer each
	// entry of its shard at its due time ([Loop.Handover]). Nil: a
	// departed node's alarms wait for the margin like any other node's.
	Departures <-chan string
}

// A handover walk ([Loop.Handover]) reads the entries due up to
// HandoverHorizon from now, at most HandoverEntries of a tenant: those
// later wait for the margin, as a dead node's do, unless their actor is
// taken first.
const (
	HandoverHorizon = time.Hour
	HandoverEntries = 32 * DefaultMaxEntries
)

// Stats counts what a loop did since it was made.
type Stats struct {
	// Sweeps counts sweeps of a tenant's index (successful or not).
	Sweeps int64
	// Lists counts LIST calls.
	Lists int64
	// Entries counts overdue entries the walks met.
	Entries int64
	// Delivered counts deliveries offered to the sink.
	Delivered int64
	// Malformed counts keys skipped as not index keys.
	Malformed int64
	// NewerFormat counts overdue entries skipped as of a format newer
	// than this build reads (WalkResult.Newer), each time a walk met one.
	NewerFormat int64
	// Errors counts failures: LIST, live nodes, tenants.
	Errors int64
	// Relists counts the sweeps of capped tenants begun before the
	// period was up (Config.Pending).
	Relists int64
	// Handovers counts the handover walks Run began when a node left
	// cleanly (Config.Departures).
	Handovers int64
	// Last is when the latest sweep ended, on the loop's clock (zero
	// before the first); LastErr its failures (nil: the index of every
	// tenant it walked was read).
	Last    time.Time
	LastErr error
}

// Loop sweeps every tenant's index every period and offers what it plans to
// the sink. Make it with [New]; run it with [Loop.Run] or drive it with
// [Loop.Sweep].
type Loop struct {
	cfg Config
	log hclog.Logger

	mu       sync.Mutex // one sweep at a time
	planMu   sync.Mutex // one plan at a time: rand, the sink
	cursorMu sync.Mutex
	cursors  map[string]string

	lastMu  sync.Mutex
	lastAt  time.Time // when the latest sweep ended (Clock)
	lastErr error     // its failures

	schedMu sync.Mutex
	sched   Schedule
	// letGo are the actors this node let go of (HintActor), until a sweep
	// offers one of their entries or finds their tenant empty.
	letGo map[abi.ActorID]bool
	// walks caches Walkers.Walks per tenant for the membership walksKey.
	walks    map[string]bool
	walksKey string
	// capped are the tenants whose latest plan the cap cut short
	// (Run walks them again early).
	capped map[string]bool

	sweeps, lists, entries, delivered, malformed, errs atomic.Int64
	newer                                              atomic.Int64
	// relists counts the walks of capped tenants Run began before the
	// period was up.
	relists atomic.Int64
	// handovers counts the handover walks (Handover).
	handovers atomic.Int64
}

// New checks cfg and makes a loop.
func New(cfg Config) (*Loop, error) {
	var missing []string
	if cfg.Self == "" {
		missing = append(missing, "Self")
	}
	if cfg.Margin <= 0 {
		missing = append(missing, "Margin")
	}
	if cfg.Lister == nil {
		missing = append(missing, "Lister")
	}
	if cfg.Clock == nil {
		missing = append(missing, "Clock")
	}
	if cfg.Sink == nil {
		missing = append(missing, "Sink")
	}
	if cfg.Live == nil {
		missing = append(missing, "Live")
	}
	if cfg.Tenants == nil {
		missing = append(missing, "Tenants")
	}
	if cfg.Rand == nil {
		missing = append(missing, "Rand")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("sweeper: config lacks %v", missing)
	}
	if cfg.Period <= 0 {
		cfg.Period = DefaultPeriod
	}
	cfg.Walk = cfg.Walk.withDefaults()
	if cfg.MaxDeliveries <= 0 {
		cfg.MaxDeliveries = DefaultMaxDeliveries
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	if cfg.SafetyPeriod <= 0 {
		cfg.SafetyPeriod = SafetyPeriods * cfg.Period
	}
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &Loop{cfg: cfg, log: log.Named("sweeper"), cursors: map[string]string{},
		sched: Schedule{Margin: cfg.Margin, Period: cfg.Period, Safety: cfg.SafetyPeriod}}, nil
}

// Run sweeps at once and then every period until ctx ends, and returns
// ctx's error; each sweep lists only the tenants due ([Loop.Tick]).
// Failures are logged and counted; the next period retries. Between two
// sweeps, a tenant whose plan the cap cut short is walked again once the
// node has delivered most of what it offered (Config.Pending).
func (l *Loop) Run(ctx context.Context) error {
	next := l.cfg.Clock.Now() // the next sweep of every tenant due
	departed := false
	for {
		var err error
		switch now := l.cfg.Clock.Now(); {
		case departed:
			departed = false
			err = l.Handover(ctx)
		case !now.Before(next):
			next = now.Add(l.cfg.Period)
			err = l.Tick(ctx) // logged and counted
		default:
			l.relists.Add(1)
			err = l.relist(ctx)
		}
		again := err == nil && l.cfg.Pending != nil && l.hasCapped()
		// Wait for the period, or while a backlog drains for the node to
		// deliver most of it: a poll apart at least, so a plan whose
		// deliveries end at once (the actors held elsewhere) does not
		// make a LIST of every one. A node that left ends the
		// wait at once.
	wait:
		for {
			now := l.cfg.Clock.Now()
			if !now.Before(next) {
				break
			}
			wait := next.Sub(now)
			if again {
				wait = min(wait, l.pollEvery())
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case node := <-l.cfg.Departures:
				l.log.Info("a node left: walking the alarms of its actors now", "node", node)
				departed = true
				break wait
			case <-l.cfg.Clock.After(wait):
			}
			if again && l.cfg.Pending() <= l.lowWater() {
				break
			}
		}
	}
}

// relist walks again the tenants whose plans the cap cut short in the
// latest sweep, and no other (Run).
func (l *Loop) relist(ctx context.Context) error {
	only := l.takeCapped()
	if len(only) == 0 {
		return nil // a Sweep meanwhile walked them
	}
	return l.run(ctx, false, only)
}

// hasCapped reports whether the latest sweep's plan of some tenant left
// entries for later by the cap.
func (l *Loop) hasCapped() bool {
	l.schedMu.Lock()
	defer l.schedMu.Unlock()
	return len(l.capped) > 0
}

// takeCapped returns the tenants whose plans the cap cut short, and
// forgets them.
func (l *Loop) takeCapped() map[string]bool {
	l.schedMu.Lock()
	defer l.schedMu.Unlock()
	c := l.capped
	l.capped = nil
	return c
}

// lowWater is how few deliveries may still be pending for a sweep the cap
// cut short to be followed at once by the next: a quarter of the cap, so
// the next plan reaches the timer before the node runs out of work.
func (l *Loop) lowWater() int { return l.cfg.MaxDeliveries / 4 }

// pollEvery is how often Run looks at Config.Pending while a backlog
// drains: a twentieth of the period, at most 100 ms.
func (l *Loop) pollEvery() time.Duration { return min(l.cfg.Period/20, 100*time.Millisecond) }

// Sweep finds the tenants and sweeps every tenant's index this node walks
// once, now, whatever the schedule says (tests, tools). It returns the
// failures, already logged and counted; a tenant's failure does not stop
// the others.
func (l *Loop) Sweep(ctx context.Context) error { return l.run(ctx, true, nil) }

// Handover walks every tenant this node walks, now, for the actors a node
// that left held (Config.Departures): with no margin, since that node
// released its holds, or its lease expired, and delivers nothing more, and up to
// HandoverHorizon ahead, since no timer holds their alarms any more. Each
// actor of this node's shard among the live nodes gets its earliest entry:
// overdue, delivered as by a sweep (the cap, then a relist); due later,
// handed to the timer at its due time, as the node that left held it. It
// leaves the schedule and the cursors as they were.
func (l *Loop) Handover(ctx context.Context) error {
	l.handovers.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	start := l.cfg.Clock.Now()
	err := l.sweepWith(ctx, true, nil, true)
	if l.cfg.OnSweep != nil {
		l.cfg.OnSweep(l.cfg.Clock.Now().Sub(start), err)
	}
	return err
}

// Tick is one sweep of the schedule ([Schedule]): it finds the tenants
// again only after a change of the live nodes or a safety period, and
// lists only the tenants this node walks that are due. Run calls it every
// period.
func (l *Loop) Tick(ctx context.Context) error { return l.run(ctx, false, nil) }

// Hint says this node let go of an actor of tenant (gave it up, released
// it, failed to replicate or deliver it): an entry of the tenant may be
// held by no live timer, so this node lists the tenant on its next sweep
// and walks it, whether or not it is one of its walkers, until a walk
// finds the tenant's index empty (docs/design.md#relist).
func (l *Loop) Hint(tenant string) {
	l.schedMu.Lock()
	l.sched.Hint(tenant, l.cfg.Clock.Now().UnixMilli())
	l.schedMu.Unlock()
}

// HintActor is Hint for the actor's tenant, and the actor's overdue
// entries are this node's to deliver whatever their shard, until a sweep
// offers one of them or finds the tenant empty: the other walkers may not
// have listed the tenant since the entry was written.
func (l *Loop) HintActor(id abi.ActorID) {
	l.schedMu.Lock()
	if l.letGo == nil {
		l.letGo = map[abi.ActorID]bool{}
	}
	l.letGo[id] = true
	l.sched.Hint(id.Tenant, l.cfg.Clock.Now().UnixMilli())
	l.schedMu.Unlock()
}

func (l *Loop) isLetGo(id abi.ActorID) bool {
	l.schedMu.Lock()
	defer l.schedMu.Unlock()
	return l.letGo[id]
}

func (l *Loop) run(ctx context.Context, all bool, only map[string]bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	start := l.cfg.Clock.Now()
	err := l.sweep(ctx, all, only)
	if l.cfg.OnSweep != nil {
		l.cfg.OnSweep(l.cfg.Clock.Now().Sub(start), err)
	}
	return err
}

// view returns the live nodes as members and the walkers among them (nil:
// every node walks every tenant).
func (l *Loop) view(ctx context.Context, live []string) (View, *Walkers, *Member, error) {
	if l.cfg.Members == nil {
		v := View{}
		for _, n := range liveNodes(l.cfg.Self, live) {
			v.Members = append(v.Members, Member{Addr: n, All: true})
		}
		return v, nil, nil, nil
	}
	v, err := l.cfg.Members.Members(ctx)
	if err != nil {
		return View{}, nil, nil, err
	}
	i := slices.IndexFunc(v.Members, func(m Member) bool { return m.Addr == l.cfg.Self })
	if i < 0 {
		// Without this node's own classes it cannot tell which tenants
		// it walks: it walks them all.
		return v, nil, nil, nil
	}
	self := v.Members[i]
	return v, NewWalkers(v, l.cfg.Walkers), &self, nil
}

// sweep walks the tenants due (all: every tenant); with only, just those
// of them in only.
func (l *Loop) sweep(ctx context.Context, all bool, only map[string]bool) error {
	return l.sweepWith(ctx, all, only, false)
}

// sweepWith is sweep, or with handover a handover walk (Handover).
func (l *Loop) sweepWith(ctx context.Context, all bool, only map[string]bool, handover bool) error {
	if l.cfg.Valid != nil && !l.cfg.Valid() {
		l.log.Debug("sweep skipped: this node's lease is not valid")
		return nil
	}
	live, err := l.cfg.Live.LiveNodes(ctx)
	if err != nil {
		l.errs.Add(1)
		l.log.Error("sweep skipped: cannot read live nodes; retrying next period", "error", err)
		err = fmt.Errorf("sweep: live nodes: %w", err)
		l.setLast(err)
		return err
	}
	view, walkers, self, err := l.view(ctx, live)
	if err != nil {
		l.errs.Add(1)
		l.log.Error("sweep skipped: cannot read the live nodes' classes; retrying next period", "error", err)
		err = fmt.Errorf("sweep: members: %w", err)
		l.setLast(err)
		return err
	}
	nowMs := l.cfg.Clock.Now().UnixMilli()
	l.schedMu.Lock()
	if l.sched.Members(view, nowMs) {
		l.log.Debug("the live nodes changed: every tenant is listed again", "nodes", len(view.Members), "epoch", view.Epoch)
	}
	_, static := l.cfg.Tenants.(StaticTenants)
	find := all || static || l.sched.FindTenants(nowMs)
	l.schedMu.Unlock()
	if find {
		found, err := l.cfg.Tenants.Tenants(ctx)
		if err != nil {
			l.errs.Add(1)
			l.log.Error("sweep skipped: cannot read tenants; retrying next period", "error", err)
			err = fmt.Errorf("sweep: tenants: %w", err)
			l.setLast(err)
			return err
		}
		l.schedMu.Lock()
		l.sched.Found(found, nowMs)
		l.schedMu.Unlock()
	}
	var tenants []string
	l.schedMu.Lock()
	if k := view.key(); k != l.walksKey || l.walks == nil {
		l.walks, l.walksKey = map[string]bool{}, k
	}
	for _, t := range l.sched.DueTenants(nowMs, all) {
		if only != nil && !only[t] {
			continue
		}
		if walkers != nil && !l.sched.Extra(t) {
			w, ok := l.walks[t]
			if !ok {
				w = walkers.Walks(*self, t)
				l.walks[t] = w
			}
			if !w {
				continue
			}
		}
		tenants = append(tenants, t)
	}
	l.schedMu.Unlock()
	// Up to Concurrency workers take the tenants in order; a tenant's
	// error goes in its slot, so the joined error lists them in order.
	errs := make([]error, len(tenants))
	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)
	for range min(l.cfg.Concurrency, len(tenants)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(tenants) {
					return
				}
				if ctx.Err() != nil {
					errs[i] = ctx.Err()
					return
				}
				if handover {
					errs[i] = l.handoverTenant(ctx, tenants[i], live, walkers)
				} else {
					errs[i] = l.sweepTenant(ctx, tenants[i], live, walkers, nowMs)
				}
			}
		}()
	}
	wg.Wait()
	err = errors.Join(errs...)
	l.setLast(err)
	return err
}

func (l *Loop) setLast(err error) {
	l.lastMu.Lock()
	l.lastAt, l.lastErr = l.cfg.Clock.Now(), err
	l.lastMu.Unlock()
}

// sweepTenant walks and plans one tenant; tickMs is when the sweep began,
// which the schedule counts from, so that a tenant due again in a period
// is due at the next sweep however long this one took.
func (l *Loop) sweepTenant(ctx context.Context, tenant string, live []string, walkers *Walkers, tickMs int64) error {
	l.sweeps.Add(1)
	now := l.cfg.Clock.Now()
	cutoff := now.UnixMilli() - l.cfg.Margin.Milliseconds()
	cursor := l.Cursor(tenant)
	w := NewWalk(tenant, cursor, cutoff, l.cfg.Walk)
	listErr := l.walkPages(ctx, w, "sweep", tenant)
	res := w.Result()
	l.cursorMu.Lock()
	l.cursors[tenant] = res.Cursor
	l.cursorMu.Unlock()
	l.entries.Add(int64(len(res.Entries)))
	actionable := false
	for _, e := range res.Entries {
		if l.cfg.Serves == nil || l.cfg.Serves(e.Key.Actor.Class) {
			actionable = true
			break
		}
	}
	l.schedMu.Lock()
	l.sched.Walked(tenant, tickMs, Walked{FromStart: cursor == "", Result: res, Actionable: actionable})
	if res.ReachedEnd && cursor == "" && res.Read == 0 && res.NextDueMs == 0 {
		for id := range l.letGo {
			if id.Tenant == tenant {
				delete(l.letGo, id) // nothing of the tenant is left
			}
		}
	}
	l.schedMu.Unlock()
	if n := len(res.Malformed); n > 0 {
		l.malformed.Add(int64(n))
		l.log.Warn("skipped keys that are not index entries", "tenant", tenant, "count", n, "first", res.Malformed[0])
	}
	l.skipNewer(tenant, res.Newer)
	if listErr != nil {
		l.errs.Add(1)
		l.log.Error("bucket listing failed; delivering what was read, retrying next period",
			"tenant", tenant, "read", res.Read, "error", listErr)
	}

	l.planMu.Lock()
	defer l.planMu.Unlock()
	plan := PlanSweep(l.planInput(tenant, res.Entries, now, live, walkers))
	for _, d := range plan.Deliveries {
		l.cfg.Sink.Offer(d)
	}
	if len(plan.Deliveries) > 0 {
		l.schedMu.Lock()
		for _, d := range plan.Deliveries {
			delete(l.letGo, d.Actor) // its entry is in this node's timer now
		}
		l.schedMu.Unlock()
	}
	l.delivered.Add(int64(len(plan.Deliveries)))
	l.schedMu.Lock()
	if plan.Stats.Deferred > 0 {
		if l.capped == nil {
			l.capped = map[string]bool{}
		}
		l.capped[tenant] = true
	} else {
		delete(l.capped, tenant)
	}
	l.schedMu.Unlock()
	if l.cfg.Kept != nil {
		for _, d := range plan.Busy {
			l.cfg.Kept(d)
		}
	}
	if len(res.Entries) > 0 || len(plan.Deliveries) > 0 {
		l.log.Debug("swept", "tenant", tenant, "entries", len(res.Entries), "delivered", len(plan.Deliveries),
			"own", plan.Stats.Own, "anyone", plan.Stats.Anyone, "busy", plan.Stats.Busy, "delivered_lately", plan.Stats.Delivered,
			"others", plan.Stats.Others, "returning", plan.Stats.Returning, "deferred", plan.Stats.Deferred, "cursor", res.Cursor)
	}
	return listErr
}

// skipNewer counts and logs the entries of a newer format a walk of
// tenant skipped: left in the index, for a node that reads them.
func (l *Loop) skipNewer(tenant string, newer []NewerEntry) {
	if len(newer) == 0 {
		return
	}
	l.newer.Add(int64(len(newer)))
	l.log.Warn("skipped index entries of a format newer than this build reads; left in the index for a node that reads them",
		"tenant", tenant, "count", len(newer), "format", newer[0].Version, "known", format.IndexVersion, "first", newer[0].Object)
}

// handoverTenant is a handover walk of one tenant (Handover): from the
// start of its index, up to HandoverHorizon ahead; the plan is
// PlanHandover's.
func (l *Loop) handoverTenant(ctx context.Context, tenant string, live []string, walkers *Walkers) error {
	l.sweeps.Add(1)
	now := l.cfg.Clock.Now()
	limits := l.cfg.Walk.withDefaults()
	limits.MaxEntries = max(limits.MaxEntries, HandoverEntries)
	w := NewWalk(tenant, "", now.Add(HandoverHorizon).UnixMilli(), limits)
	listErr := l.walkPages(ctx, w, "handover walk of", tenant)
	res := w.Result()
	l.entries.Add(int64(len(res.Entries)))
	if n := len(res.Malformed); n > 0 {
		l.malformed.Add(int64(n))
		l.log.Warn("skipped keys that are not index entries", "tenant", tenant, "count", n, "first", res.Malformed[0])
	}
	l.skipNewer(tenant, res.Newer)
	if listErr != nil {
		l.errs.Add(1)
		l.log.Error("bucket listing failed in a handover walk; handing over what was read, the sweeps find the rest", "tenant", tenant, "read", res.Read, "error", listErr)
	}
	l.planMu.Lock()
	defer l.planMu.Unlock()
	plan := PlanHandover(l.planInput(tenant, res.Entries, now, live, walkers))
	for _, d := range plan.Deliveries {
		l.cfg.Sink.Offer(d)
	}
	l.delivered.Add(int64(len(plan.Deliveries)))
	if plan.Stats.Deferred > 0 {
		l.schedMu.Lock()
		if l.capped == nil {
			l.capped = map[string]bool{}
		}
		l.capped[tenant] = true
		l.schedMu.Unlock()
	}
	l.log.Debug("handover walk", "tenant", tenant, "entries", len(res.Entries), "offered", len(plan.Deliveries),
		"ahead", plan.Stats.Ahead, "own", plan.Stats.Own, "others", plan.Stats.Others, "deferred", plan.Stats.Deferred)
	return listErr
}

// walkPages runs w to its end, one LIST a page, and returns the LIST that
// failed, if one did (what was read before it stays in w's result); what
// names the walk in the error.
func (l *Loop) walkPages(ctx context.Context, w *Walk, what, tenant string) error {
	for {
		page, ok := w.Next()
		if !ok {
			return nil
		}
		l.lists.Add(1)
		keys, err := l.cfg.Lister.List(ctx, page.Prefix, page.StartAfter, page.Limit)
		if err != nil {
			w.Abort()
			return fmt.Errorf("%s tenant %q: list %q after %q: %w", what, tenant, page.Prefix, page.StartAfter, err)
		}
		w.Feed(keys)
	}
}

// planInput is what a plan of tenant's entries starts from (planMu held:
// it reads Since and hands over the loop's Rand).
func (l *Loop) planInput(tenant string, entries []Entry, now time.Time, live []string, walkers *Walkers) PlanInput {
	var shard func(class string) []string
	if walkers != nil {
		shard = func(class string) []string { return walkers.Of(tenant, class) }
	}
	var since time.Time
	if l.cfg.Since != nil {
		since = l.cfg.Since()
	}
	return PlanInput{
		Entries:       entries,
		Now:           now,
		Since:         since,
		Margin:        l.cfg.Margin,
		Self:          l.cfg.Self,
		Live:          live,
		ShardNodes:    shard,
		Own:           l.isLetGo,
		Busy:          l.cfg.Busy,
		Delivered:     l.cfg.Delivered,
		Rand:          l.cfg.Rand,
		MaxDeliveries: l.cfg.MaxDeliveries,
	}
}

// Cursor returns where the next sweep of tenant's index starts ("" for the
// beginning).
func (l *Loop) Cursor(tenant string) string {
	l.cursorMu.Lock()
	defer l.cursorMu.Unlock()
	return l.cursors[tenant]
}

// Stats returns the loop's counters.
func (l *Loop) Stats() Stats {
	l.lastMu.Lock()
	last, lastErr := l.lastAt, l.lastErr
	l.lastMu.Unlock()
	return Stats{
		Sweeps:      l.sweeps.Load(),
		Lists:       l.lists.Load(),
		Entries:     l.entries.Load(),
		Delivered:   l.delivered.Load(),
		Malformed:   l.malformed.Load(),
		NewerFormat: l.newer.Load(),
		Errors:      l.errs.Load(),
		Relists:     l.relists.Load(),
		Handovers:   l.handovers.Load(),
		Last:        last,
		LastErr:     lastErr,
	}
}
