// Package fair is the core of the node's fair scheduler: which tenant's
// waiting work takes the next free slot of a pool (a delivery worker, a
// guest slot), as pure code. It holds no lock, starts no goroutine, reads
// no clock and does no I/O: the caller passes each cost in and serialises
// the calls, as the alarms plugin does for its delivery workers and the
// engine for its guest slots.
//
// The rules:
//
//   - Each tenant has a queue of its own, in due order (ties in the order
//     pushed).
//   - No tenant runs more than Slots - Headroom items at once: Headroom
//     slots are always left to the other tenants, so one tenant's burst,
//     or its handlers that hang until their deadline, cannot take every
//     slot. Below that a tenant may use every slot the others leave idle.
//   - Among the tenants that may start an item, the next free slot goes to
//     the one with the least charged time, divided by its weight (weighted
//     fair queuing by virtual time, as Linux's CFS picks the task with the
//     least virtual run time; deficit round robin has the same bound). A
//     tenant is charged the time its items hold their slots, the running
//     ones' time so far included: a tenant whose items spin or hang until
//     their deadline is charged all of it as it passes, and waits behind
//     the tenants that spend little.
//   - A tenant that was idle comes back at the time of the last tenant
//     served, never earlier: idle time banks no credit (CFS's
//     min_vruntime), and debt it left is kept.
//
// So a tenant with a backlog delays another tenant's due item by at most
// the time until one of its own items ends when the other holds fewer than
// Headroom slots (none: a free slot is always there for it), and in turn
// order when several tenants wait.
package fair

import (
	"github.com/wasmkeep/alarms/internal/variant"
)

// Config configures a Queue.
type Config struct {
	// Slots is how many items run at once (at least 1).
	Slots int
	// Headroom is how many slots no single tenant may take: each tenant
	// runs at most Slots - Headroom items at once (at least 1). 0: none,
	// a tenant may take every slot.
	Headroom int
	// Weight returns a tenant's weight, its share relative to the others
	// (nil, or a result below 1: 1).
	Weight func(tenant string) int
	// LongCap, when above 0, is the most items at once of a tenant whose
	// items run long: one of its items runs, or ended within LongFor of
	// now, having run LongAfter or more (in the caller's time unit). Other
	// tenants run up to Slots - Headroom. So a tenant whose items are
	// short may use every slot the others leave idle, and one whose items
	// spin or hang until their deadline holds LongCap slots (the engine's
	// guest slots set it: a tenant whose guests spin burns that many CPUs).
	LongCap   int
	LongAfter int64
	LongFor   int64

	// variants turn the fairness off (internal/variant), for the test that
	// shows it is needed; production never sets them.
	variants variant.Set
}

// Queue is the scheduler of one pool: the tenants' queues of waiting items
// and what each tenant runs and was charged. Times are the caller's, in
// nanoseconds of any clock that does not go back. It is not safe for
// concurrent use.
type Queue[T any] struct {
	cfg     Config
	cap     int // Slots - Headroom
	running int
	waiting int
	tenants map[string]*tenant[T]
	ready   []*tenant[T] // tenants with waiting items
	floor   int64        // the virtual time of the last tenant served
	picks   uint64
	seq     uint64
	idle    []*tenant[T] // idle tenants still owing time, looked at a few at a time
	fifo    bool
	shared  itemHeap[T] // the unsafe variant's one queue
}

type tenant[T any] struct {
	name   string
	weight int64
	// vt is the time charged for ended items, divided by the weight;
	// with the running items' time so far (n*now - starts) it is the
	// tenant's virtual time.
	vt      int64
	running int
	starts  int64   // the sum of the running items' start times
	started []int64 // the running items' start times, with LongAfter
	// longUntil is when the tenant's last long item (LongCap) stops
	// counting.
	longUntil int64
	// reserved are places taken in the tenant's line (Reserve) for items
	// not pushed or started yet.
	reserved int
	items    itemHeap[T]
	ready    int    // index in Queue.ready, -1 when not there
	picked   uint64 // when it was last served: ties go to the longest waiting
	idle     bool   // in Queue.idle
}

// vtAt is the tenant's virtual time at now.
func (t *tenant[T]) vtAt(now int64) int64 {
	return t.vt + (int64(t.running)*now-t.starts)/t.weight
}

// Item is a waiting item, for Cancel.
type Item[T any] struct {
	V      T
	tenant *tenant[T]
	due    int64
	seq    uint64
	index  int // in its heap, -1 once out
}

// Ticket is a started item's claim on its slot, for Done.
type Ticket struct {
	t     any // *tenant[T]
	start int64
}

// Start is when the item started, as Pop or TryStart was told.
func (t Ticket) Start() int64 { return t.start }

// New returns an empty queue.
func New[T any](cfg Config) *Queue[T] {
	if cfg.Slots < 1 {
		cfg.Slots = 1
	}
	return &Queue[T]{cfg: cfg, cap: max(1, cfg.Slots-max(0, cfg.Headroom)), tenants: map[string]*tenant[T]{},
		fifo: cfg.variants.SharedFIFO}
}

func init() {
	variant.RegisterFair(func(c any, s variant.Set) any {
		cfg := c.(Config)
		cfg.variants = s
		return cfg
	})
}

// Slots is the pool's size.
func (q *Queue[T]) Slots() int { return q.cfg.Slots }

// Cap is the most items one tenant runs at once: Slots - Headroom.
func (q *Queue[T]) Cap() int { return q.cap }

// Running is how many items run now.
func (q *Queue[T]) Running() int { return q.running }

// Waiting is how many items wait.
func (q *Queue[T]) Waiting() int { return q.waiting }

// capAt is the most items t may run at once at now: LongCap while its
// items run long, Cap otherwise.
func (q *Queue[T]) capAt(t *tenant[T], now int64) int {
	if q.cfg.LongCap <= 0 || q.cfg.LongCap >= q.cap {
		return q.cap
	}
	if now < t.longUntil {
		return q.cfg.LongCap
	}
	for _, s := range t.started {
		if now-s >= q.cfg.LongAfter {
			return q.cfg.LongCap
		}
	}
	return q.cap
}

// CapOf is the most items tenant may run at once at now (Cap, or LongCap
// while its items run long).
func (q *Queue[T]) CapOf(tenant string, now int64) int {
	t := q.tenants[tenant]
	if t == nil {
		return q.cap
	}
	return q.capAt(t, now)
}

// LongRunning is how many items run at now that started LongAfter or
// more before (0 without LongAfter).
func (q *Queue[T]) LongRunning(now int64) int {
	n := 0
	if q.cfg.LongAfter <= 0 {
		return 0
	}
	for _, t := range q.tenants {
		for _, s := range t.started {
			if now-s >= q.cfg.LongAfter {
				n++
			}
		}
	}
	return n
}

// Startable is how many items Pop would start now, one after another: as
// many as free slots allow of those whose tenants are below their caps.
func (q *Queue[T]) Startable(now int64) int {
	free := q.cfg.Slots - q.running
	if free <= 0 {
		return 0
	}
	if q.fifo {
		return min(free, q.shared.Len())
	}
	n := 0
	for _, t := range q.ready {
		n += max(0, min(t.items.Len(), q.capAt(t, now)-t.running))
		if n >= free {
			return free
		}
	}
	return n
}

// Tenants is how many tenants the queue keeps state for (running, waiting
// or still owing time).
func (q *Queue[T]) Tenants() int { return len(q.tenants) }

// TenantStats is what one tenant runs and waits for now.
type TenantStats struct {
	Running, Waiting int
	Reserved         int // places taken with Reserve
}

// Reserve takes a place in tenant's line at now, for an item it will
// push or start later; ok reports whether it did. The line holds as many
// items, waiting or reserved, as the tenant may run at once (CapOf), and
// as many more as it could start now (its cap less what it runs): a
// tenant whose items start at once is never refused, and one whose cap is
// full waits with at most a cap's worth in line. A place is given back
// with Unreserve.
func (q *Queue[T]) Reserve(tenantName string, now int64) (ok bool) {
	t := q.tenant(tenantName)
	c := q.capAt(t, now)
	if t.items.Len()+t.reserved >= c+max(0, c-t.running) {
		q.idled(t)
		return false
	}
	t.reserved++
	return true
}

// Unreserve gives back a place Reserve took.
func (q *Queue[T]) Unreserve(tenantName string) {
	t := q.tenants[tenantName]
	if t == nil || t.reserved <= 0 {
		panic("fair: Unreserve without Reserve")
	}
	t.reserved--
	q.idled(t)
}

// Tenant returns what a tenant runs and waits for now.
func (q *Queue[T]) Tenant(name string) TenantStats {
	t := q.tenants[name]
	if t == nil {
		return TenantStats{}
	}
	return TenantStats{Running: t.running, Waiting: t.items.Len(), Reserved: t.reserved}
}

// tenant returns the named tenant's state, made afresh or brought back
// from idle at the floor: idle time banks no credit.
func (q *Queue[T]) tenant(name string) *tenant[T] {
	t := q.tenants[name]
	if t == nil {
		w := 1
		if q.cfg.Weight != nil {
			w = max(1, q.cfg.Weight(name))
		}
		t = &tenant[T]{name: name, weight: int64(w), ready: -1}
		q.tenants[name] = t
	}
	if t.running == 0 && t.items.Len() == 0 && t.vt < q.floor {
		t.vt = q.floor
	}
	return t
}

// Push adds an item of tenant, due at due (any ordered number: a time, a
// sequence), to its queue.
func (q *Queue[T]) Push(tenantName string, due int64, v T) *Item[T] {
	t := q.tenant(tenantName)
	q.seq++
	it := &Item[T]{V: v, tenant: t, due: due, seq: q.seq, index: -1}
	q.waiting++
	if q.fifo {
		q.shared.push(it)
		t.items.n++ // counted, for Tenant
		return it
	}
	t.items.push(it)
	q.update(t)
	return it
}

// TryStart starts an item of tenant at now without queueing it, when a
// slot is free, the tenant runs fewer than Cap items, and no one waits who
// could take the slot (Pop would have given it to them).
func (q *Queue[T]) TryStart(tenantName string, now int64) (Ticket, bool) {
	if q.running >= q.cfg.Slots {
		return Ticket{}, false
	}
	if q.fifo {
		if q.shared.Len() > 0 {
			return Ticket{}, false
		}
	} else if q.Startable(now) > 0 {
		return Ticket{}, false
	} else if t := q.tenants[tenantName]; t != nil && (t.running >= q.capAt(t, now) || t.items.Len() > 0) {
		return Ticket{}, false
	}
	t := q.tenant(tenantName)
	if t.running >= q.capAt(t, now) {
		return Ticket{}, false
	}
	return q.start(t, now), true
}

// Pop starts, at now, the next item when a slot is free: the earliest
// item of the tenant with the least virtual time among those below their
// cap. ok is false when no slot is free or no tenant may start one.
func (q *Queue[T]) Pop(now int64) (v T, tk Ticket, ok bool) {
	if q.running >= q.cfg.Slots {
		return v, Ticket{}, false
	}
	var it *Item[T]
	if q.fifo {
		if q.shared.Len() == 0 {
			return v, Ticket{}, false
		}
		it = q.shared.pop()
		it.tenant.items.n--
	} else {
		if len(q.ready) == 0 {
			return v, Ticket{}, false
		}
		var best *tenant[T]
		var bestVT int64
		for _, t := range q.ready {
			if t.running >= q.capAt(t, now) {
				continue
			}
			vt := t.vtAt(now)
			if best == nil || vt < bestVT || (vt == bestVT && t.picked < best.picked) {
				best, bestVT = t, vt
			}
		}
		if best == nil {
			return v, Ticket{}, false
		}
		it = best.items.pop()
		q.floor = max(q.floor, bestVT)
	}
	q.waiting--
	tk = q.start(it.tenant, now)
	q.forgetIdle(2, now)
	return it.V, tk, true
}

// start counts a started item of t.
func (q *Queue[T]) start(t *tenant[T], now int64) Ticket {
	q.running++
	t.running++
	t.starts += now
	q.picks++
	t.picked = q.picks
	if q.cfg.LongAfter > 0 {
		t.started = append(t.started, now)
	}
	q.update(t)
	return Ticket{t: t, start: now}
}

// Done frees, at now, the slot of a started item, and charges its tenant
// the time the item held it.
func (q *Queue[T]) Done(tk Ticket, now int64) {
	t, ok := tk.t.(*tenant[T])
	if !ok {
		return
	}
	q.running--
	t.running--
	t.starts -= tk.start
	t.vt += max(0, now-tk.start) / t.weight
	if q.cfg.LongAfter > 0 {
		for i, s := range t.started {
			if s == tk.start {
				last := len(t.started) - 1
				t.started[i] = t.started[last]
				t.started = t.started[:last]
				break
			}
		}
		if now-tk.start >= q.cfg.LongAfter {
			t.longUntil = max(t.longUntil, now+q.cfg.LongFor)
		}
	}
	q.update(t)
	q.idled(t)
}

// Cancel takes a waiting item out of its queue; false if it is not
// waiting (started, or cancelled already).
func (q *Queue[T]) Cancel(it *Item[T]) bool {
	if it == nil || it.index < 0 {
		return false
	}
	t := it.tenant
	if q.fifo {
		q.shared.remove(it.index)
		t.items.n--
	} else {
		t.items.remove(it.index)
		q.update(t)
	}
	q.waiting--
	q.idled(t)
	return true
}

// Drain takes every waiting item out, in no particular order.
func (q *Queue[T]) Drain() []T {
	var out []T
	for _, t := range q.tenants {
		for len(t.items.s) > 0 {
			out = append(out, t.items.pop().V)
		}
		q.update(t)
	}
	for q.shared.Len() > 0 {
		it := q.shared.pop()
		it.tenant.items.n--
		out = append(out, it.V)
	}
	q.waiting = 0
	for _, t := range q.tenants {
		q.idled(t)
	}
	return out
}

// update puts t in the ready list, or takes it out, as its waiting items
// and its cap say.
func (q *Queue[T]) update(t *tenant[T]) {
	if q.fifo {
		return
	}
	ready := t.items.Len() > 0 // below its cap or not: Pop looks (capAt)
	switch {
	case ready && t.ready < 0:
		t.ready = len(q.ready)
		q.ready = append(q.ready, t)
	case !ready && t.ready >= 0:
		last := len(q.ready) - 1
		q.ready[t.ready] = q.ready[last]
		q.ready[t.ready].ready = t.ready
		q.ready[last] = nil
		q.ready = q.ready[:last]
		t.ready = -1
	}
}

// idled puts t in the idle list when it runs and waits for nothing.
func (q *Queue[T]) idled(t *tenant[T]) {
	if t.running == 0 && t.items.Len() == 0 && t.reserved == 0 && !t.idle {
		t.idle = true
		q.idle = append(q.idle, t)
	}
}

// forgetIdle looks at up to n idle tenants: one with work again leaves the
// list, one that owes no time any more (the floor passed it) and whose
// items ran long no more lately is forgotten, and the rest go to the back.
func (q *Queue[T]) forgetIdle(n int, now int64) {
	for ; n > 0 && len(q.idle) > 0; n-- {
		t := q.idle[0]
		q.idle[0] = nil
		q.idle = q.idle[1:]
		switch {
		case t.running > 0 || t.items.Len() > 0 || t.reserved > 0:
			t.idle = false
		case t.vt <= q.floor && t.longUntil <= now:
			t.idle = false
			if q.tenants[t.name] == t {
				delete(q.tenants, t.name)
			}

		default:
			q.idle = append(q.idle, t)
		}
	}
}

// itemHeap orders items by due time, then by push order.
type itemHeap[T any] struct {
	s []*Item[T]
	n int // the unsafe variant counts a tenant's items without holding them
}

func (h *itemHeap[T]) Len() int { return len(h.s) + h.n }

func (h *itemHeap[T]) less(i, j int) bool {
	a, b := h.s[i], h.s[j]
	if a.due != b.due {
		return a.due < b.due
	}
	return a.seq < b.seq
}

func (h *itemHeap[T]) swap(i, j int) {
	h.s[i], h.s[j] = h.s[j], h.s[i]
	h.s[i].index, h.s[j].index = i, j
}

func (h *itemHeap[T]) push(it *Item[T]) {
	it.index = len(h.s)
	h.s = append(h.s, it)
	h.up(it.index)
}

func (h *itemHeap[T]) pop() *Item[T] { return h.remove(0) }

func (h *itemHeap[T]) remove(i int) *Item[T] {
	last := len(h.s) - 1
	it := h.s[i]
	if i != last {
		h.swap(i, last)
	}
	h.s[last] = nil
	h.s = h.s[:last]
	if i < last {
		h.down(i)
		h.up(i)
	}
	it.index = -1
	return it
}

func (h *itemHeap[T]) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h *itemHeap[T]) down(i int) {
	n := len(h.s)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && h.less(r, l) {
			m = r
		}
		if !h.less(m, i) {
			return
		}
		h.swap(i, m)
		i = m
	}
}
