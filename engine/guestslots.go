package engine

import (
	"context"
	"fmt"
	"runtime"
	"sync"
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
// guest slots), fewer than the runtime's processors (GOMAXPROCS), which it
// raises when needed: one processor at least has no guest to run and
// serves the network, the timers and the rest at once, and the operating
// system shares the cores between the threads.
//
// The slots are shared fairly between tenants (package fair): a free slot
// goes to the tenant whose guests have held slots the least time, by
// weight, and no tenant's guests run on more than half the CPUs at once
// (at least one: WithTenantGuestSlots), so whatever one tenant's guests
// do, the others' and the node's own work keep the other half. Measured
// on two cores under a machine load of 5 to 14 with 20 spinning handlers
// (cmd/noisy): with a tenant allowed 3 of the 4 slots, another tenant's
// read took 71 to 675 ms at the 99th percentile; allowed 1, 12 to 25 ms.

// procsAtStart is the processors the Go runtime was given, before any
// engine raised GOMAXPROCS: the CPUs the node may use.
var procsAtStart = runtime.GOMAXPROCS(0)

// DefaultGuestSlots is the guest slots of an engine made without
// WithGuestSlots: the Go runtime's processors (GOMAXPROCS at start) less
// one, and at least 4; on a machine of two cores, 4, with GOMAXPROCS
// raised to 5.
func DefaultGuestSlots() int { return max(4, procsAtStart-1) }

// DefaultTenantGuestSlots is how many guest slots one tenant may hold at
// once without WithTenantGuestSlots: half the Go runtime's processors at
// start, at least 1 (1 on two cores).
func DefaultTenantGuestSlots() int { return max(1, procsAtStart/2) }

// WithTenantGuestSlots sets how many guest slots one tenant's calls may
// hold at once (default DefaultTenantGuestSlots(), at most the slots): a
// tenant whose guests spin burns that many CPUs at most, and the other
// tenants and the node keep the rest. A node serving one tenant, whose
// guests do much work, may give it every slot.
func WithTenantGuestSlots(n int) Option { return func(o *config) { o.tenantGuestSlots = n } }

// WithGuestSlots sets how many guest calls (events, alarm handlers, an
// instance's _initialize) run at once across all actors (default
// DefaultGuestSlots()). A call waits for a slot before it starts; its
// deadline counts from then. NewEngine raises GOMAXPROCS to n + 1 when it
// is lower, so that guests in every slot leave the Go runtime a processor
// (logged at INFO). One tenant holds at most WithTenantGuestSlots of
// them.
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
}

type slotWaiter struct{ granted chan fair.Ticket }

// tenantGuestStats are one metric label's counters.
type tenantGuestStats struct {
	seconds float64 // time guests held slots
	calls   uint64
	waits   uint64 // calls that waited for a slot
}

func newGuestSlots(n, perTenant int, weights map[string]int) *guestSlots {
	g := &guestSlots{base: time.Now(), labels: map[string]string{}, stats: map[string]*tenantGuestStats{}}
	for t := range weights {
		g.labels[t] = t
		g.stats[t] = &tenantGuestStats{}
	}
	g.stats[OtherTenants] = &tenantGuestStats{}
	g.q = fair.New[*slotWaiter](fair.Config{Slots: n, Headroom: n - min(n, perTenant), Weight: func(t string) int { return weights[t] }})
	return g
}

// ensureProcs raises GOMAXPROCS so that guests in every slot leave the Go
// runtime a processor; it returns the value before, and after.
func ensureProcs(slots int) (before, after int) {
	before = runtime.GOMAXPROCS(0)
	if before > slots {
		return before, before
	}
	runtime.GOMAXPROCS(slots + 1)
	return before, slots + 1
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
// end; w is the caller's own waiter (one call at a time each), reused.
func (g *guestSlots) acquire(ctx context.Context, tenant string, w *slotWaiter) (fair.Ticket, error) {
	g.mu.Lock()
	now := g.now()
	if tk, ok := g.q.TryStart(tenant, now); ok {
		g.peak = max(g.peak, g.q.Running())
		g.mu.Unlock()
		return tk, nil
	}
	if w.granted == nil {
		w.granted = make(chan fair.Ticket, 1)
	}
	it := g.q.Push(tenant, now, w)
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
	}
	g.peak = max(g.peak, g.q.Running())
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
