package engine

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wasmkeep/alarms/fair"
)

// Guest slots. A guest that spins holds a goroutine that is always
// runnable: the engine's runtime returns to Go at every loop turn (the
// check of the call's deadline), so Go's scheduler preempts it every
// 10 ms, but a processor with spinners in its run queue reads the global
// queue, where the goroutines the network wakes go, only once in 61
// turns. With spinning guests queued on every processor of the Go
// runtime, each wakeup of an HTTP round trip waits up to about 0.6 s: the
// node's lease renewal, its HTTP server and its bucket requests crawl
// (64 spinners on 2 processors: a loopback round trip took 0.8 s on
// average and 4 s at worst, docs/benchmarks.md), and the lease can lapse.
// The engine therefore runs at most a number of guest calls at once (its
// guest slots), and while guest calls run long (WithLongGuestCall) it
// raises the Go runtime's processors (GOMAXPROCS) to one more than those
// calls: one processor at least has no long guest to run and serves the
// network, the timers and the rest at once, and the operating system
// shares the cores between the threads. It lowers them again once no call
// has run long for procsHold. It does not raise them for short calls:
// more processors than cores cost every firing (warm firings on two cores
// took a fifth more CPU each with GOMAXPROCS at 5), and a short call ends
// before the network's wakeups wait long.

// The slots are shared fairly between tenants (package fair): a free slot
// goes to the tenant whose guests have held slots the least time, by
// weight. A tenant whose calls are short (honest handlers and requests,
// well under a millisecond each) may hold every slot but one, so a node
// serving one busy tenant runs its guests on every CPU, as without slots,
// and the slot left over is there at once for another tenant's call. A
// tenant one of whose calls has run for WithLongGuestCall (100 ms by
// default), and for LongGuestCallsCount after such a call ends, holds at
// most WithTenantGuestSlots (half the CPUs, at least one): whatever its
// guests do, spin or hang until their deadline, the other tenants and the
// node's own work keep the other half. Its first calls may all run long
// before the first reaches 100 ms: for one deadline at most, a spinning
// tenant holds every slot but one. Measured on two cores under a machine
// load of 5 to 14 with 20 spinning handlers (cmd/noisy): with a tenant
// allowed 3 of the 4 slots for good, another tenant's read took 71 to
// 675 ms at the 99th percentile; allowed 1, 12 to 25 ms.

// procsAtStart is the processors the Go runtime was given, before any
// engine raised GOMAXPROCS: the CPUs the node may use.
var procsAtStart = runtime.GOMAXPROCS(0)

// DefaultGuestSlots is the guest slots of an engine made without
// WithGuestSlots: the Go runtime's processors (GOMAXPROCS at start) less
// one, and at least 4; on a machine of two cores, 4.
func DefaultGuestSlots() int { return max(4, procsAtStart-1) }

// DefaultTenantGuestSlots is how many guest slots one tenant whose calls
// run long may hold at once without WithTenantGuestSlots: half the Go
// runtime's processors at start, at least 1 (1 on two cores).
func DefaultTenantGuestSlots() int { return max(1, procsAtStart/2) }

// WithTenantGuestSlots sets how many guest slots one tenant whose calls
// run long (WithLongGuestCall) may hold at once (default
// DefaultTenantGuestSlots(), at most the slots): a tenant whose guests
// spin burns that many CPUs at most, and the other tenants and the node
// keep the rest. A node serving one tenant whose guests do much work in
// each call may give it every slot. A tenant whose calls are short holds
// every slot but one, whatever this says.
func WithTenantGuestSlots(n int) Option { return func(o *config) { o.tenantGuestSlots = n } }

// DefaultLongGuestCall is how long a guest call runs before its tenant
// counts as one whose calls run long (WithLongGuestCall): a hundred times
// an honest handler's, and past a Go actor's _initialize (about 12 ms).
const DefaultLongGuestCall = 100 * time.Millisecond

// LongGuestCallsCount is how long after its last long call ended a
// tenant still holds at most WithTenantGuestSlots: a tenant whose
// handlers spin to their deadline, or back off between attempts, does not
// take every slot again with its next calls.
const LongGuestCallsCount = 30 * time.Second

// WithLongGuestCall sets how long a guest call runs (its slot held)
// before its tenant is held to WithTenantGuestSlots (default
// DefaultLongGuestCall).
func WithLongGuestCall(d time.Duration) Option { return func(o *config) { o.longGuestCall = d } }

// WithGuestSlots sets how many guest calls (events, alarm handlers, an
// instance's _initialize) run at once across all actors (default
// DefaultGuestSlots()). A call waits for a slot before it starts; its
// deadline counts from then. While guest calls run long, the engine
// raises GOMAXPROCS to one more than they are, so that they leave the Go
// runtime a processor (logged at INFO). One tenant holds every slot but
// one at most, and WithTenantGuestSlots while its calls run long.
func WithGuestSlots(n int) Option { return func(o *config) { o.guestSlots = n } }

// WithTenantWeights gives tenants their weights in the share of the guest
// slots (default 1 each: equal shares). The tenants named here are also
// the ones the per-tenant metrics name (WithRegisterer); every other
// tenant is counted under the label "other", so the metrics' cardinality
// is bounded by the configuration, not by the tenants that show up.
func WithTenantWeights(w map[string]int) Option {
	return func(o *config) { o.tenantWeights = w }
}

// OtherTenants is the tenant label of the per-tenant metrics for the
// tenants not named in the configuration.
const OtherTenants = "other"

// guestSlots is the pool of guest slots.
type guestSlots struct {
	mu     sync.Mutex
	q      *fair.Queue[*slotWaiter]
	base   time.Time
	labels map[string]string // the tenants named: their metric label
	stats  map[string]*tenantGuestStats
	peak   int
	waits  uint64
	// roomQ holds each tenant's AwaitRoom calls in order (the rooms given
	// and not yet used or released are places reserved in q).
	roomQ map[string][]*roomWaiter
	// kick wakes the watch of long calls (watchProcs) from its sleep.
	kick chan struct{}
}

type slotWaiter struct{ granted chan fair.Ticket }

// Room is a delivery's place in its tenant's line for the guest slots,
// taken before it takes its actor (Engine.TryRoom, Engine.AwaitRoom): a
// tenant's calls waiting for a slot, and the rooms given for calls about
// to, are at most as many as the slots it may hold at once, and as many
// more as it could start now (fair.Queue.Reserve). So a tenant whose calls
// start at once is never made to wait for a room, and a tenant
// whose guests hang does not hold an actor for each of its due alarms
// while they wait their turn behind the hangs: its alarms wait, without
// their actors, in the timer's queue and in AwaitRoom, and a request or a
// delete of one of those actors finds it free.
type Room struct {
	g      *guestSlots
	tenant string
	held   atomic.Bool // a place reserved in g.q, not yet used by a call (set and cleared with g.mu held)
}

// roomWaiter is an AwaitRoom waiting for a room.
type roomWaiter struct{ granted chan *Room }

// tenantGuestStats are one metric label's counters.
type tenantGuestStats struct {
	seconds float64 // time guests held slots
	calls   uint64
	waits   uint64 // calls that waited for a slot
}

func newGuestSlots(n, perTenant int, long time.Duration, weights map[string]int) *guestSlots {
	g := &guestSlots{base: time.Now(), labels: map[string]string{}, stats: map[string]*tenantGuestStats{},
		roomQ: map[string][]*roomWaiter{}, kick: make(chan struct{}, 1)}
	for t := range weights {
		g.labels[t] = t
		g.stats[t] = &tenantGuestStats{}
	}
	g.stats[OtherTenants] = &tenantGuestStats{}
	g.q = fair.New[*slotWaiter](fair.Config{Slots: n, Headroom: min(1, n-1), Weight: func(t string) int { return weights[t] },
		LongCap: min(n, perTenant), LongAfter: int64(long), LongFor: int64(LongGuestCallsCount)})
	return g
}

// procsHold is how long no guest call may run long before the engine
// lowers GOMAXPROCS again to what it was at start.
const procsHold = 10 * time.Second

// procsWatch is how often an engine counts its guest calls that run long.
const procsWatch = 25 * time.Millisecond

// procGuard keeps GOMAXPROCS above the long guest calls running in every
// engine of the process: the processors are the process's.
type procGuard struct {
	mu     sync.Mutex
	long   map[*guestSlots]int
	raised bool      // GOMAXPROCS is ours, above procsAtStart
	low    time.Time // since when fewer were needed than set
}

var procs = procGuard{long: map[*guestSlots]int{}}

// report records that g runs n long calls now; it returns GOMAXPROCS
// before and after, when it changed it.
func (p *procGuard) report(g *guestSlots, n int, now time.Time) (before, after int, changed bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n > 0 {
		p.long[g] = n
	} else {
		delete(p.long, g)
	}
	total := 0
	for _, k := range p.long {
		total += k
	}
	want := procsAtStart
	if total > 0 {
		want = max(procsAtStart, total+1)
	}
	cur := runtime.GOMAXPROCS(0)
	switch {
	case want > cur:
		runtime.GOMAXPROCS(want)
		p.raised, p.low = true, time.Time{}
		return cur, want, true
	case want < cur && p.raised:
		if p.low.IsZero() {
			p.low = now
		}
		if now.Sub(p.low) < procsHold {
			return cur, cur, false
		}
		runtime.GOMAXPROCS(want)
		p.raised, p.low = want > procsAtStart, time.Time{}
		return cur, want, true
	default:
		p.low = time.Time{}
		return cur, cur, false
	}
}

// watchProcs counts g's long calls every procsWatch until stop closes,
// and keeps GOMAXPROCS above them (procGuard).
// While no call runs and GOMAXPROCS is not raised, it sleeps until a call
// starts (g.kick): an idle node does not wake for it.
func (g *guestSlots) watchProcs(stop <-chan struct{}, log func(before, after, long int)) {
	t := time.NewTicker(procsWatch)
	defer t.Stop()
	for {
		g.mu.Lock()
		n, busy := g.q.LongRunning(g.now()), g.q.Running()
		g.mu.Unlock()
		if before, after, changed := procs.report(g, n, time.Now()); changed {
			log(before, after, n)
		}
		wake := t.C
		if busy == 0 && !procs.isRaised() {
			wake = nil
		}
		select {
		case <-stop:
			procs.report(g, 0, time.Now())
			return
		case <-wake:
		case <-g.kick:
		}
	}
}

// started wakes the watch of long calls when the first call starts (mu
// held, after a start).
func (g *guestSlots) started() {
	if g.q.Running() == 1 {
		select {
		case g.kick <- struct{}{}:
		default:
		}
	}
}

// isRaised reports whether GOMAXPROCS is raised above what it was at start.
func (p *procGuard) isRaised() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.raised
}

func (g *guestSlots) now() int64 { return int64(time.Since(g.base)) }

func (g *guestSlots) label(tenant string) string {
	if l, ok := g.labels[tenant]; ok {
		return l
	}
	return OtherTenants
}

func (g *guestSlots) statsOf(tenant string) *tenantGuestStats {
	l := g.label(tenant)
	s := g.stats[l]
	if s == nil {
		s = &tenantGuestStats{}
		g.stats[l] = s
	}
	return s
}

// acquire waits for a slot for a call of tenant's guest, or for ctx to
// end; w is the caller's own waiter (one call at a time each), reused. A
// room the call was given (nil: none) is used up: from here the call
// counts as waiting or running.
func (g *guestSlots) acquire(ctx context.Context, tenant string, w *slotWaiter, room *Room) (fair.Ticket, error) {
	g.mu.Lock()
	now := g.now()
	if room != nil && room.held.Load() {
		room.held.Store(false)
		g.q.Unreserve(tenant)
	}
	if tk, ok := g.q.TryStart(tenant, now); ok {
		g.peak = max(g.peak, g.q.Running())
		g.started()
		g.grantRooms(now)
		g.mu.Unlock()
		return tk, nil
	}
	if w.granted == nil {
		w.granted = make(chan fair.Ticket, 1)
	}
	it := g.q.Push(tenant, now, w)
	queuedCalls.Add(1)
	defer queuedCalls.Add(-1)
	g.waits++
	g.statsOf(tenant).waits++
	g.dispatch(now)
	g.mu.Unlock()
	select {
	case tk := <-w.granted:
		return tk, nil
	case <-ctx.Done():
	}
	g.mu.Lock()
	cancelled := g.q.Cancel(it)
	if cancelled {
		g.grantRooms(g.now())
	}
	g.mu.Unlock()
	if !cancelled {
		g.release(tenant, <-w.granted) // granted meanwhile: pass it on
	}
	return fair.Ticket{}, fmt.Errorf("waiting for a guest slot (all %d busy): %w", g.q.Slots(), context.Cause(ctx))
}

// release frees a slot and charges its tenant the time it held it.
func (g *guestSlots) release(tenant string, tk fair.Ticket) {
	g.mu.Lock()
	now := g.now()
	s := g.statsOf(tenant)
	s.calls++
	s.seconds += time.Duration(now - tk.Start()).Seconds()
	g.q.Done(tk, now)
	g.dispatch(now)
	g.mu.Unlock()
}

// dispatch hands free slots to waiting calls (mu held).
func (g *guestSlots) dispatch(now int64) {
	for {
		w, tk, ok := g.q.Pop(now)
		if !ok {
			break
		}
		w.granted <- tk
		g.started()
	}
	g.peak = max(g.peak, g.q.Running())
	g.grantRooms(now)
}

// grantRooms gives rooms, in order, to the AwaitRoom calls of the
// tenants that have room again (mu held).
func (g *guestSlots) grantRooms(now int64) {
	for tenant, q := range g.roomQ {
		for len(q) > 0 && g.q.Reserve(tenant, now) {
			q[0].granted <- g.newRoom(tenant)
			q[0] = nil
			q = q[1:]
		}
		if len(q) == 0 {
			delete(g.roomQ, tenant)
		} else {
			g.roomQ[tenant] = q
		}
	}
}

// TryRoom gives a room in tenant's line for the guest slots, or nil when
// the tenant's calls already fill it (Room).
func (e *Engine) TryRoom(tenant string) *Room {
	g := e.slots
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.roomQ[tenant]) > 0 || !g.q.Reserve(tenant, g.now()) {
		return nil
	}
	return g.newRoom(tenant)
}

// newRoom is a room held in tenant's line (mu held, a place reserved in g.q).
func (g *guestSlots) newRoom(tenant string) *Room {
	r := &Room{g: g, tenant: tenant}
	r.held.Store(true)
	return r
}

// AwaitRoom waits for a room in tenant's line for the guest slots (Room),
// in the order asked, or for ctx to end.
func (e *Engine) AwaitRoom(ctx context.Context, tenant string) (*Room, error) {
	if r := e.TryRoom(tenant); r != nil {
		return r, nil
	}
	g := e.slots
	w := &roomWaiter{granted: make(chan *Room, 1)}
	g.mu.Lock()
	g.roomQ[tenant] = append(g.roomQ[tenant], w)
	g.grantRooms(g.now()) // room may have come meanwhile
	g.mu.Unlock()
	select {
	case r := <-w.granted:
		return r, nil
	case <-ctx.Done():
	}
	g.mu.Lock()
	q := g.roomQ[tenant]
	for i, x := range q {
		if x == w {
			g.roomQ[tenant] = append(q[:i:i], q[i+1:]...)
			if len(g.roomQ[tenant]) == 0 {
				delete(g.roomQ, tenant)
			}
			break
		}
	}
	g.mu.Unlock()
	select {
	case r := <-w.granted: // given meanwhile: pass it on
		r.Release()
	default:
	}
	return nil, fmt.Errorf("waiting for room among tenant %q's guest calls (its calls waiting for a slot fill its share): %w", tenant, context.Cause(ctx))
}

// Release gives the room back if no call used it; it may be called more
// than once.
func (r *Room) Release() {
	if r == nil || !r.held.Load() { // used by its call: the usual case, no lock
		return
	}
	g := r.g
	g.mu.Lock()
	if r.held.Load() {
		r.held.Store(false)
		g.q.Unreserve(r.tenant)
		g.grantRooms(g.now())
	}
	g.mu.Unlock()
}

// GuestSlotStats are the engine's guest slot counters.
type GuestSlotStats struct {
	// Slots is how many guest calls may run at once; Cap how many of them
	// one tenant may hold.
	Slots, Cap int
	// Busy is how many run now, Waiting how many wait for a slot, Peak
	// the most that ran at once.
	Busy, Waiting, Peak int
	// Waits counts the calls that waited for a slot.
	Waits uint64
}

// GuestSlots returns the guest slot counters.
func (e *Engine) GuestSlots() GuestSlotStats {
	g := e.slots
	g.mu.Lock()
	defer g.mu.Unlock()
	return GuestSlotStats{Slots: g.q.Slots(), Cap: g.q.Cap(), Busy: g.q.Running(), Waiting: g.q.Waiting(), Peak: g.peak, Waits: g.waits}
}

// guestCollector exposes the guest slots and each tenant label's guest
// time.
type guestCollector struct {
	g                            *guestSlots
	slots, busy, waiting         *prometheus.Desc
	seconds, calls, tenantWaited *prometheus.Desc
}

func newGuestCollector(g *guestSlots) *guestCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &guestCollector{
		g:            g,
		slots:        d("wasmkeep_guest_slots", "How many guest calls may run at once (engine.WithGuestSlots)."),
		busy:         d("wasmkeep_guest_slots_busy", "Guest calls running now."),
		waiting:      d("wasmkeep_guest_slots_waiting", "Guest calls waiting for a slot now."),
		seconds:      d("wasmkeep_tenant_guest_seconds_total", "Time the tenant's guest calls held guest slots (events, alarm handlers, instance starts). Tenants not named in the configuration are counted under tenant=\"other\".", "tenant"),
		calls:        d("wasmkeep_tenant_guest_calls_total", "The tenant's guest calls.", "tenant"),
		tenantWaited: d("wasmkeep_tenant_guest_slot_waits_total", "The tenant's guest calls that waited for a guest slot: every slot busy, or the tenant at its cap.", "tenant"),
	}
}

func (c *guestCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.slots, c.busy, c.waiting, c.seconds, c.calls, c.tenantWaited} {
		ch <- d
	}
}

func (c *guestCollector) Collect(ch chan<- prometheus.Metric) {
	g := c.g
	g.mu.Lock()
	slots, busy, waiting := g.q.Slots(), g.q.Running(), g.q.Waiting()
	type row struct {
		label string
		s     tenantGuestStats
	}
	rows := make([]row, 0, len(g.stats))
	for l, s := range g.stats {
		rows = append(rows, row{l, *s})
	}
	g.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(c.slots, prometheus.GaugeValue, float64(slots))
	ch <- prometheus.MustNewConstMetric(c.busy, prometheus.GaugeValue, float64(busy))
	ch <- prometheus.MustNewConstMetric(c.waiting, prometheus.GaugeValue, float64(waiting))
	for _, r := range rows {
		ch <- prometheus.MustNewConstMetric(c.seconds, prometheus.CounterValue, r.s.seconds, r.label)
		ch <- prometheus.MustNewConstMetric(c.calls, prometheus.CounterValue, float64(r.s.calls), r.label)
		ch <- prometheus.MustNewConstMetric(c.tenantWaited, prometheus.CounterValue, float64(r.s.waits), r.label)
	}
}

// queuedCalls is how many guest calls wait for a slot now, in every
// engine of the process (the journal's sync hands its processor off while
// they are many: handsOff).
var queuedCalls atomic.Int64
