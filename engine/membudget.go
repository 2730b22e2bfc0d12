package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tetratelabs/wazero/experimental"

	"github.com/wasmkeep/alarms/abi"
)

// DefaultMaxTotalMemory bounds the linear memory of all of an engine's
// instances together: 4 GiB, room for the default 512 instances at 8 MiB
// each (an instance of the Go counter actor holds 3 MiB, a small .wat guest
// 64 KiB).
const DefaultMaxTotalMemory = 4 << 30

// ErrMemoryBudget is wrapped (in a *MemoryBudgetError, naming the actor) by
// the error of an event or an instantiation that needed instance memory past
// the engine's budget for all instances, when no idle instance was left to
// close for it.
var ErrMemoryBudget = errors.New("node memory budget for instances spent")

// MemoryBudgetError says that an actor's instance asked for memory the
// engine's budget for all instances could not give.
type MemoryBudgetError struct {
	Actor abi.ActorID
	// Want is the size the instance's memory would have had, in bytes.
	Want uint64
	// InUse is what every live instance held then, this one's included.
	InUse uint64
	// Budget is the engine's budget (WithMaxTotalMemory).
	Budget uint64
}

// Error says the sizes; the *abi.ActorError that wraps it names the actor.
func (e *MemoryBudgetError) Error() string {
	return fmt.Sprintf("instance memory of %s would pass the node's budget of %s for all instances (%s in use, every other instance busy)",
		size(e.Want), size(e.Budget), size(e.InUse))
}

func (e *MemoryBudgetError) Unwrap() error { return ErrMemoryBudget }

func size(n uint64) string {
	switch {
	case n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n < 1<<20:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// WithMaxTotalMemory bounds the linear memory of all the engine's instances
// together, in bytes (default DefaultMaxTotalMemory), beside the per-instance
// limit of WithMemoryLimit. Every instance's memory is counted from its
// creation, growth included, until it closes (and after, while its pages
// are pooled, zeroed, for another instance: MemoryStats.Pooled). An
// instance that needs more (to start, or in memory.grow) first makes room
// by giving pooled pages back, then by closing the least recently used
// idle instances (their actors keep their databases); when
// every other instance is busy, memory.grow fails for that guest (it sees
// -1, and a guest that traps on it fails its event with an error that wraps
// a *MemoryBudgetError) or the instance is not created; other actors are
// unharmed. Like WithMemoryLimit, it is ignored with WithRuntime: the
// embedder's runtime, its features (a shared memory cannot move) and its
// memory allocator are its own.
func WithMaxTotalMemory(bytes uint64) Option { return func(o *config) { o.maxMemory = bytes } }

// MemoryStats are the engine's counters of instance memory.
type MemoryStats struct {
	// InUse is the memory every live instance holds, in bytes (the
	// capacity of each instance's backing buffer).
	InUse uint64
	// Peak is the highest InUse seen.
	Peak uint64
	// Budget is the bound on InUse and Pooled together (WithMaxTotalMemory).
	Budget uint64
	// Closed counts idle instances closed to make room for memory.
	Closed uint64
	// Refused counts instantiations and memory.grow calls refused.
	Refused uint64
	// Pooled is the memory of closed instances' address ranges kept,
	// zeroed or reset to their image, for new instances (see memBudget's
	// pool), in bytes: what the ranges hold of their own. The
	// budget bounds InUse and Pooled together; a pooled range is given
	// back to the system before any idle instance is closed for room.
	Pooled uint64
	// Images is the memory of the pre-initialised images that the
	// engine's classes map copy-on-write into their instances (on Linux,
	// images larger than 1 MiB), each counted once, in bytes: the pages
	// every instance of an image shares, outside the budget. What an
	// instance writes is its own, in InUse.
	Images uint64
}

// Memory returns the engine's counters of instance memory.
func (e *Engine) Memory() MemoryStats {
	b := e.mem
	b.mu.Lock()
	defer b.mu.Unlock()
	return MemoryStats{InUse: b.used, Peak: b.peak, Budget: b.max, Closed: b.closed, Refused: b.refused, Pooled: b.pooled, Images: b.imageBytes}
}

// memBudget counts the bytes all instances hold. Its lock is never held
// while an instance closes or while taking another lock.
type memBudget struct {
	mu              sync.Mutex
	max, used, peak uint64
	closed, refused uint64

	kept keptMemories

	// pool holds address ranges of closed instances (memories larger than
	// a kept one, see reservation), scrubbed, for the next instance that
	// fits in one: a fresh range faults in every page the instance
	// writes, and an instance started from a pre-initialised image writes
	// its image's data into the first megabytes at once (issue 38). A
	// pooled range holds its committed pages, all reading zero (see
	// reservation.scrub); they are counted in pooled, against max with
	// used, so the budget still bounds the memory instances hold or will
	// be handed. A range mapped from a pre-initialised image is pooled
	// reset to the image instead, holding of its own only the pages its
	// instance wrote (see resetImage), for the next instance of that
	// image. At most poolCount ranges and poolBytes committed bytes
	// are pooled (none when poolCount is 0); room gives pooled ranges back
	// before it closes any idle instance, and Close gives back all.
	pool      []*reservation
	pooled    uint64
	poolCount int
	poolBytes uint64
	poolShut  bool

	// images are the images mapped into the engine's instances (see
	// Class.image), and imageBytes their size.
	images     map[*imageMemory]bool
	imageBytes uint64
}

// addImage counts img among the images the engine's instances map.
func (b *memBudget) addImage(img *imageMemory) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.images[img] {
		return
	}
	if b.images == nil {
		b.images = map[*imageMemory]bool{}
	}
	b.images[img] = true
	b.imageBytes += img.bytes()
}

// Bounds of the pool of instance ranges: poolLargest ranges, and the
// committed bytes of at most poolShare of the budget (a Go counter
// instance starts with 3 MiB: 64 of them pool 192 MiB, under a quarter of
// the default budget).
const (
	poolLargest = 64
	poolShare   = 4
)

// newMemBudget returns a budget of max bytes with its pool of ranges.
func newMemBudget(max uint64) *memBudget {
	return &memBudget{max: max, poolCount: poolLargest, poolBytes: max / poolShare}
}

// pooling says whether a range may go to the pool now (a hint: put
// decides).
func (b *memBudget) pooling() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.poolShut && len(b.pool) < b.poolCount
}

// put pools r, scrubbed, if the pool's bounds and the budget have room
// for its committed bytes; false when the caller must release it.
func (b *memBudget) put(r *reservation) bool {
	n := r.held()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.poolShut || len(b.pool) >= b.poolCount || b.pooled+n > b.poolBytes || b.used+b.pooled+n > b.max {
		return false
	}
	b.pool = append(b.pool, r)
	b.pooled += n
	return true
}

// get takes from the pool a range of at least need bytes, or returns nil:
// one mapped from img if there is one (img nil: one mapped from no
// image), else any, and of those the shortest. Its committed bytes are no
// longer counted: the caller shrinks or maps it to what its instance
// holds (counted by then).
func (b *memBudget) get(need uint64, img *imageMemory) *reservation {
	b.mu.Lock()
	defer b.mu.Unlock()
	best := -1
	better := func(r, than *reservation) bool {
		if m, n := r.mapped() == img, than.mapped() == img; m != n {
			return m
		}
		return r.size() < than.size()
	}
	for i, r := range b.pool {
		if r.size() >= need && (best < 0 || better(r, b.pool[best])) {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	r := b.pool[best]
	last := len(b.pool) - 1
	b.pool[best], b.pool[last] = b.pool[last], nil
	b.pool = b.pool[:last]
	b.pooled -= r.held()
	return r
}

// drop takes the oldest pooled range out of the pool for the caller to
// release, or returns nil.
func (b *memBudget) drop() *reservation {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.pool) == 0 {
		return nil
	}
	r := b.pool[0]
	last := len(b.pool) - 1
	copy(b.pool, b.pool[1:])
	b.pool[last] = nil
	b.pool = b.pool[:last]
	b.pooled -= r.held()
	return r
}

// shut empties the pool for good, returning its ranges for the caller to
// release.
func (b *memBudget) shut() []*reservation {
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.pool
	b.pool, b.pooled, b.poolShut = nil, 0, true
	return l
}

// wasmPage is the unit of a linear memory's size.
const wasmPage = 65536

// Memories of instances closed while idle are kept for the next instance
// that starts with the same size: a cold firing closes one instance and
// starts another, and a new Go slice of that size is a large allocation,
// zeroed, that makes the collector run (for a small .wat guest, two thirds
// of the bytes a cold firing allocates). A kept memory is zeroed when it
// is taken. At most keptMemoryBytes are kept, of memories up to
// keptMemoryLargest each; they are not counted in the budget, which
// counts live instances.
const (
	keptMemoryBytes   = 16 << 20
	keptMemoryLargest = 1 << 20
)

// keptMemories holds the backing buffers of closed instances, by
// capacity.
type keptMemories struct {
	mu    sync.Mutex
	bufs  map[int][][]byte
	bytes int
}

// put keeps b, unless it is too large or the store is full.
func (k *keptMemories) put(b []byte) {
	n := cap(b)
	if n == 0 || n > keptMemoryLargest {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.bytes+n > keptMemoryBytes {
		return
	}
	if k.bufs == nil {
		k.bufs = map[int][][]byte{}
	}
	k.bufs[n] = append(k.bufs[n], b[:n])
	k.bytes += n
}

// get returns a kept buffer of capacity n, all zero, or nil.
func (k *keptMemories) get(n int) []byte {
	k.mu.Lock()
	l := k.bufs[n]
	if len(l) == 0 {
		k.mu.Unlock()
		return nil
	}
	b := l[len(l)-1]
	l[len(l)-1] = nil
	k.bufs[n] = l[:len(l)-1]
	k.bytes -= n
	k.mu.Unlock()
	clear(b)
	return b
}

// take counts n more bytes if they fit the budget.
func (b *memBudget) take(n uint64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n > b.max-min(b.used+b.pooled, b.max) {
		return false
	}
	b.add(n)
	return true
}

// add counts n more bytes, budget or not (b.mu held).
func (b *memBudget) add(n uint64) {
	b.used += n
	b.peak = max(b.peak, b.used)
}

func (b *memBudget) give(n uint64) {
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
}

// refuse counts a refusal and returns the error naming the actor.
func (b *memBudget) refuse(id abi.ActorID, want uint64) *MemoryBudgetError {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refused++
	return &MemoryBudgetError{Actor: id, Want: want, InUse: b.used, Budget: b.max}
}

// room takes n bytes, giving pooled ranges back to the system, then
// closing the least recently used idle instances (none of whose actors is
// in an event), until they fit; false when they cannot.
func (e *Engine) room(n uint64) bool {
	for !e.mem.take(n) {
		if r := e.mem.drop(); r != nil {
			r.release()
			continue
		}
		if !e.res.closeIdleInstance() {
			return false
		}
		e.mem.mu.Lock()
		e.mem.closed++
		e.mem.mu.Unlock()
	}
	return true
}

// closeIdleInstance closes the instance of the least recently used actor
// that has one and is in no event; false when there is none.
func (r *residency) closeIdleInstance() bool {
	r.mu.Lock()
	v := r.victim(nil, &r.insts)
	if v == nil {
		r.mu.Unlock()
		return false
	}
	r.insts.Remove(v.instElem)
	v.instElem = nil
	r.nInsts--
	r.closed++
	r.wakeWaiters()
	r.mu.Unlock()
	v.sleep(false) // closing the instance frees its memory
	v.mu.Unlock()
	return true
}

// initialMemory returns the bytes of memory an instance of the class starts
// with.
func (c *Class) initialMemory() uint64 {
	var n uint64
	for _, m := range c.compiled.ExportedMemories() {
		n += uint64(m.Min()) * 65536
	}
	return n
}

// guestMemory backs one instance's linear memory, a Go slice or (when
// larger than a kept memory) an address range reserved for it, whose size
// is counted in the engine's budget. wazero calls Reallocate for
// the initial size and for every memory.grow, and Free when the instance
// closes (possibly from another goroutine, at a deadline).
type guestMemory struct {
	e  *Engine
	id abi.ActorID

	mu      sync.Mutex
	buf     []byte
	held    uint64 // bytes counted in the budget for this instance
	freed   bool
	refusal *MemoryBudgetError // the last refused growth, until taken
	// max is the largest the memory may grow to, from wazero.
	max uint64
	// res, for a memory larger than a kept one, is the address range
	// reserved for it up to max: buf lies at its start, and growing it
	// copies nothing (see reservation). Without one (a small memory, or a
	// system that gives none), buf is a Go slice copied when it grows.
	res *reservation
	// initial is the size the memory started with: a range pooled when
	// the instance closes keeps that much committed (see scrub).
	initial uint64
	// image, for an instance of a class whose module is a pre-initialised
	// image without its data (see Engine.image), is the image's memory:
	// the memory starts as a copy-on-write mapping of it, or, where it
	// cannot be mapped, as a copy of it. No instance of such a module may
	// start on any other memory.
	image *imageMemory
	// running counts the calls running guest code on the memory (and its
	// instantiation). A reservation freed while one runs (wazero closes an
	// instance at a call's deadline from another goroutine) is released
	// when the last returns: guest code still running on the range when it
	// went back to the system would fault and take the process down.
	running      int
	releaseLater bool
	// idle is set when the actor closes the instance in no call (see
	// closingIdle): no guest code can run on the buffer after Free, which
	// may then keep it for another instance. An instance closed by
	// wazero when a call's deadline passes may still be running guest
	// code: its buffer is never kept.
	idle bool
}

// closingIdle says the instance is about to be closed by its actor, in no
// call (the actor's lock held, no event running).
func (g *guestMemory) closingIdle() {
	if g == nil {
		return
	}
	g.mu.Lock()
	g.idle = true
	g.mu.Unlock()
}

// newGuestMemory reserves the class's initial memory for an instance of
// the actor id, making room if it must; nil in an embedder's runtime.
func (e *Engine) newGuestMemory(id abi.ActorID, c *Class) (*guestMemory, error) {
	if !e.owned {
		return nil, nil
	}
	n := c.initialMemory()
	if n > e.mem.max || !e.room(n) { // more than the whole budget closes nothing
		return nil, e.mem.refuse(id, n)
	}
	return &guestMemory{e: e, id: id, held: n, image: c.image}, nil
}

// with puts the memory in the context of the instantiation.
func (g *guestMemory) with(ctx context.Context) context.Context {
	if g == nil {
		return ctx
	}
	return experimental.WithMemoryAllocator(ctx, experimental.MemoryAllocatorFunc(func(_, max uint64) experimental.LinearMemory {
		g.mu.Lock()
		g.max = max
		g.mu.Unlock()
		return g
	}))
}

// enter and exit bracket guest code running on the memory: a call, or the
// instantiation (which runs _initialize).
func (g *guestMemory) enter() {
	if g == nil {
		return
	}
	g.mu.Lock()
	g.running++
	g.mu.Unlock()
}

func (g *guestMemory) exit() {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.running--
	if g.running == 0 && g.releaseLater {
		g.res.release()
		g.res, g.releaseLater = nil, false
	}
}

// Reallocate implements experimental.LinearMemory: it returns the memory
// grown to size bytes, or nil (memory.grow fails) when the budget cannot
// give them. wazero has already checked size against the instance's limit.
func (g *guestMemory) Reallocate(size uint64) []byte {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.freed {
		return nil
	}
	if size <= uint64(cap(g.buf)) {
		if g.buf == nil {
			g.buf = []byte{}
		}
		g.buf = g.buf[:size]
		return g.buf
	}
	initial := g.buf == nil
	if initial && (size > keptMemoryLargest || g.image != nil) {
		// Too large to be kept: its own range, up to the largest it may
		// grow to within the budget, so that it grows in place; a pooled
		// one when one is long enough (a longer one changes nothing the
		// guest sees: wazero bounds the memory by its own limit, and the
		// memory is exactly size bytes long), shrunk to the bytes
		// committed here (all reading zero: see scrub), or mapped from
		// the image (see prepare).
		g.initial = size
		need := max(size, min(g.max, g.e.mem.max&^0xffff))
		if r := g.e.mem.get(need, g.image); r != nil {
			if g.prepare(r, size) {
				g.res = r
			} else {
				r.release()
			}
		}
		if g.res == nil {
			if r := reserve(need); r != nil {
				if g.prepare(r, size) {
					g.res = r
				} else {
					r.release()
				}
			}
		}
	}
	// A quarter more than asked, when the budget has it, saves copying
	// the memory at each small growth; else exactly what was asked. A
	// memory in its own range grows without copying: exactly what was
	// asked.
	capacity := size
	if !initial && g.res == nil {
		capacity = max(size, uint64(cap(g.buf))+uint64(cap(g.buf))/4)
	}
	if capacity > g.held && !g.e.mem.take(capacity-g.held) {
		capacity = size
		switch {
		case capacity <= g.held:
		case initial:
			// The reservation covers the exported memory; a class whose
			// memory is not exported is counted as it starts.
			g.e.mem.mu.Lock()
			g.e.mem.add(capacity - g.held)
			g.e.mem.mu.Unlock()
		case size > g.e.mem.max || !g.e.room(capacity-g.held): // more than the whole budget closes nothing
			g.refusal = g.e.mem.refuse(g.id, size)
			return nil
		}
	}
	g.held = max(g.held, capacity)
	if g.res != nil {
		if nb := g.res.grow(size); nb != nil {
			g.buf = nb
			if initial && g.image != nil && g.res.mapped() != g.image {
				g.image.copyTo(nb) // the image could not be mapped: a copy
			}
			return nb
		}
		if !initial {
			// memory.grow fails; what was counted is given back when
			// the instance closes.
			return nil
		}
		// The system would not make the range usable: the memory is a
		// Go slice, as where no range is reserved (wazero cannot start
		// an instance on no memory).
		g.res.release()
		g.res = nil
	}
	var nb []byte
	if initial {
		if b := g.e.mem.kept.get(int(capacity)); b != nil {
			nb = b[:size]
		}
	}
	if nb == nil {
		nb = make([]byte, size, capacity)
	}
	copy(nb, g.buf)
	g.buf = nb
	if initial && g.image != nil {
		g.image.copyTo(nb) // the image could not be mapped: a copy
	}
	return g.buf
}

// prepare readies r, a range of the pool or a new one, for the memory's
// initial size: for an instance of an image of that size, mapped from the
// image (as it is already when the pool's range was); for any other, not
// mapped from any image, with at most size bytes committed, all reading
// zero. False when it could not (r must then be released).
func (g *guestMemory) prepare(r *reservation, size uint64) bool {
	if img := g.image; img != nil && img.bytes() == size {
		return r.mapped() == img || r.mapImage(img)
	}
	if r.mapped() != nil && !r.shrink(0) { // unmapped: nothing committed
		return false
	}
	return r.shrink(size)
}

// Free implements experimental.LinearMemory: the instance closed.
func (g *guestMemory) Free() {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.freed {
		return
	}
	g.freed = true
	g.e.mem.give(g.held)
	switch {
	case g.res != nil && g.running > 0:
		g.releaseLater = true // see running
	case g.res != nil:
		// Closed in no call, by its actor (idle): no guest code runs on
		// the range now or later, and it may be pooled once scrubbed;
		// else it goes back to the system.
		r := g.res
		g.res = nil
		if !g.idle || !g.e.mem.pooling() || !r.scrub(g.initial) || !g.e.mem.put(r) {
			r.release()
		}
	case g.idle:
		g.e.mem.kept.put(g.buf)
	}
	g.held, g.buf = 0, nil
}

// takeRefusal returns and forgets the last refused growth.
func (g *guestMemory) takeRefusal() *MemoryBudgetError {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.refusal
	g.refusal = nil
	return r
}

// memoryCollector exposes an engine's memory counters, read at each scrape.
type memoryCollector struct {
	e               *Engine
	inUse, max      *prometheus.Desc
	closed, refused *prometheus.Desc
	pooled, images  *prometheus.Desc
}

func newMemoryCollector(e *Engine) *memoryCollector {
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }
	return &memoryCollector{
		e:       e,
		inUse:   d("wasmkeep_instance_memory_bytes", "Linear memory the live guest instances hold, in bytes."),
		max:     d("wasmkeep_instance_memory_max_bytes", "The budget of linear memory for all guest instances together, in bytes."),
		closed:  d("wasmkeep_instance_memory_closed_total", "Idle guest instances closed to make room for another's memory."),
		refused: d("wasmkeep_instance_memory_refusals_total", "Instances not created and memory.grow calls refused: the memory budget was held by busy instances."),
		pooled:  d("wasmkeep_instance_memory_pooled_bytes", "Memory of closed instances kept, zeroed or reset to their pre-initialised image, for the next instances: what it holds of its own, in bytes (counted in the budget)."),
		images:  d("wasmkeep_instance_memory_image_bytes", "Memory of the pre-initialised images mapped copy-on-write into the instances, each image once, in bytes: the pages the instances of an image share."),
	}
}

func (c *memoryCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.inUse, c.max, c.closed, c.refused, c.pooled, c.images} {
		ch <- d
	}
}

func (c *memoryCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.e.Memory()
	ch <- prometheus.MustNewConstMetric(c.inUse, prometheus.GaugeValue, float64(m.InUse))
	ch <- prometheus.MustNewConstMetric(c.max, prometheus.GaugeValue, float64(m.Budget))
	ch <- prometheus.MustNewConstMetric(c.closed, prometheus.CounterValue, float64(m.Closed))
	ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(m.Refused))
	ch <- prometheus.MustNewConstMetric(c.pooled, prometheus.GaugeValue, float64(m.Pooled))
	ch <- prometheus.MustNewConstMetric(c.images, prometheus.GaugeValue, float64(m.Images))
}
