package engine

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/wasmkeep/alarms/clock"
)

// Residency defaults: an open database costs two file descriptors (the
// database and its WAL; its WAL index is in memory) and a few hundred KiB; an
// instance costs its linear memory (64 KiB for a small .wat guest, a few MiB
// for a Go guest). 1,024 databases stay within an fd limit of 4,096.
const (
	DefaultMaxOpenDatabases = 1024
	DefaultMaxInstances     = 512
	DefaultResidencyWait    = 10 * time.Second
)

// ErrNoRoom is returned (wrapped, naming the actor) when an actor needs a
// database or an instance, the budget is spent, and every actor holding
// one stayed busy in an event for the whole residency wait.
var ErrNoRoom = errors.New("residency budget spent: every open actor stayed busy")

// WithMaxOpenDatabases bounds how many actor databases are open at once
// (default 1,024). An actor that needs its database when the budget is spent
// puts the least recently used idle actor to sleep (closing its instance and
// its database); when every open actor is busy in an event it waits, up to
// the residency wait, and then fails with ErrNoRoom.
func WithMaxOpenDatabases(n int) Option { return func(o *config) { o.maxDBs = n } }

// WithMaxInstances bounds how many guest instances live at once (default
// 512). Past it, the least recently used idle actor's instance is closed
// (its database may stay open); a fresh one serves its next event.
func WithMaxInstances(n int) Option { return func(o *config) { o.maxInsts = n } }

// WithResidencyWait bounds how long an actor waits for a database or an
// instance when the budget is spent and every holder is busy (default 10 s).
func WithResidencyWait(d time.Duration) Option { return func(o *config) { o.resWait = d } }

// ResidencyStats are the engine's residency counters.
type ResidencyStats struct {
	// OpenDatabases and LiveInstances are counted when a slot is taken,
	// before the open, so they never read lower than what is open.
	OpenDatabases, LiveInstances int
	// MaxOpenDatabases and MaxInstances are the budgets.
	MaxOpenDatabases, MaxInstances int
	// PeakOpenDatabases and PeakLiveInstances are the highest counts seen.
	PeakOpenDatabases, PeakLiveInstances int
	// Slept counts actors put to sleep (database and instance closed) to
	// make room; InstancesClosed counts instances closed to make room.
	Slept, InstancesClosed uint64
	// Waits counts acquisitions that had to wait for a busy actor;
	// Refused counts those that gave up after the residency wait.
	Waits, Refused uint64
}

// residency keeps the budgets: two lists of actors, most recently used
// (the one whose last call ended last) at the front, one of those with an
// open database and one of those with a live instance. A slot is counted before the database or the instance is
// opened and uncounted after it is closed.
//
// Lock order: an actor's mu may be held while taking r.mu; with r.mu held,
// an actor's mu is only tried (TryLock), never waited for.
type residency struct {
	mu             sync.Mutex
	maxDBs         int
	maxInsts       int
	wait           time.Duration
	dbs, insts     list.List
	nDBs, nInsts   int
	peakDB, peakIn int
	slept, closed  uint64
	waits, refused uint64
	waiters        int
	freed          chan struct{} // closed and replaced when a slot may have freed
	clock          clock.Clock   // stamps each actor's last use, for sleepIdle
}

func newResidency(maxDBs, maxInsts int, wait time.Duration, c clock.Clock) *residency {
	return &residency{maxDBs: maxDBs, maxInsts: maxInsts, wait: wait, clock: c, freed: make(chan struct{})}
}

func (r *residency) stats() ResidencyStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return ResidencyStats{
		OpenDatabases: r.nDBs, LiveInstances: r.nInsts,
		MaxOpenDatabases: r.maxDBs, MaxInstances: r.maxInsts,
		PeakOpenDatabases: r.peakDB, PeakLiveInstances: r.peakIn,
		Slept: r.slept, InstancesClosed: r.closed,
		Waits: r.waits, Refused: r.refused,
	}
}

// wakeWaiters tells waiting acquisitions to look again (r.mu held).
func (r *residency) wakeWaiters() {
	if r.waiters > 0 {
		close(r.freed)
		r.freed = make(chan struct{})
	}
}

// idle ends a call of a's (a.mu held, and released here): a moves to the
// front of the lists it is on, stamped with the time its last call ended,
// before a.mu is released, so no waiter can take an actor whose call just
// ended for the least recently used; then waiters may put it to sleep.
func (r *residency) idle(a *Actor) {
	r.mu.Lock()
	r.touch(a)
	a.mu.Unlock()
	r.wakeWaiters()
	r.mu.Unlock()
}

// acquireDB counts a database slot for a (a.mu held) and puts a at the front
// of the list, putting the least recently used idle actor to sleep when the
// budget is spent.
func (r *residency) acquireDB(ctx context.Context, a *Actor) error {
	return r.acquire(ctx, a, &r.dbs, &r.nDBs, r.maxDBs, "databases open")
}

// acquireInst counts an instance slot for a (a.mu held).
func (r *residency) acquireInst(ctx context.Context, a *Actor) error {
	return r.acquire(ctx, a, &r.insts, &r.nInsts, r.maxInsts, "instances live")
}

func (r *residency) acquire(ctx context.Context, a *Actor, l *list.List, n *int, max int, what string) error {
	var timeout <-chan time.Time
	r.mu.Lock()
	for {
		if *n < max {
			*n++
			r.peaks()
			r.push(a, l)
			r.mu.Unlock()
			return nil
		}
		if v := r.victim(a, l); v != nil {
			// The victim's slot passes to a; v.mu is held, so v is idle.
			var closeDB bool
			if l == &r.dbs {
				closeDB = true
				r.slept++
				if v.instElem != nil {
					r.insts.Remove(v.instElem)
					v.instElem = nil
					r.nInsts--
					r.wakeWaiters()
				}
				r.dbs.Remove(v.dbElem)
				v.dbElem = nil
			} else {
				r.closed++
				r.insts.Remove(v.instElem)
				v.instElem = nil
			}
			r.push(a, l)
			r.mu.Unlock()
			v.sleep(closeDB)
			v.mu.Unlock()
			return nil
		}
		if timeout == nil {
			r.waits++
			t := time.NewTimer(r.wait)
			defer t.Stop()
			timeout = t.C
		}
		r.waiters++
		ch := r.freed
		r.mu.Unlock()
		var err error
		select {
		case <-ch:
		case <-timeout:
			err = fmt.Errorf("%d %s, all busy for %v: %w", max, what, r.wait, ErrNoRoom)
		case <-ctx.Done():
			err = ctx.Err()
		}
		r.mu.Lock()
		r.waiters--
		if err != nil {
			if errors.Is(err, ErrNoRoom) {
				r.refused++
			}
			r.mu.Unlock()
			return err
		}
	}
}

func (r *residency) peaks() {
	r.peakDB = max(r.peakDB, r.nDBs)
	r.peakIn = max(r.peakIn, r.nInsts)
}

func (r *residency) push(a *Actor, l *list.List) {
	a.lastUsed = r.clock.Now()
	if l == &r.dbs {
		a.dbElem = l.PushFront(a)
	} else {
		a.instElem = l.PushFront(a)
	}
}

// victim returns the least recently used actor of l other than a whose
// lock it could take (so it is in no event), with that lock held.
func (r *residency) victim(a *Actor, l *list.List) *Actor {
	for el := l.Back(); el != nil; el = el.Prev() {
		v := el.Value.(*Actor)
		if v == a || !v.mu.TryLock() {
			continue
		}
		return v
	}
	return nil
}

// touch moves a to the front of the lists it is on, if any (r.mu held).
func (r *residency) touch(a *Actor) {
	if a.dbElem == nil && a.instElem == nil {
		return // asleep or closed
	}
	a.lastUsed = r.clock.Now()
	if a.dbElem != nil {
		r.dbs.MoveToFront(a.dbElem)
	}
	if a.instElem != nil {
		r.insts.MoveToFront(a.instElem)
	}
}

// releaseDB uncounts a's database slot (a.mu held, its database closed).
func (r *residency) releaseDB(a *Actor) { r.release(&r.dbs, &a.dbElem, &r.nDBs) }

// releaseInst uncounts a's instance slot (a.mu held, its instance closed).
func (r *residency) releaseInst(a *Actor) { r.release(&r.insts, &a.instElem, &r.nInsts) }

// release takes an actor's element out of one budget's list and count, and
// wakes whoever waits for room.
func (r *residency) release(l *list.List, e **list.Element, n *int) {
	r.mu.Lock()
	if *e != nil {
		l.Remove(*e)
		*e = nil
		*n--
		r.wakeWaiters()
	}
	r.mu.Unlock()
}

// sleepIdle puts to sleep every actor whose last event ended before cutoff
// and that is in no event now; it returns how many.
func (r *residency) sleepIdle(cutoff time.Time) int {
	slept := 0
	for {
		r.mu.Lock()
		var v *Actor
		for el := r.dbs.Back(); el != nil; el = el.Prev() {
			c := el.Value.(*Actor)
			if !c.lastUsed.Before(cutoff) {
				break // the rest were used later
			}
			if c.mu.TryLock() {
				v = c
				break
			}
		}
		if v == nil {
			r.mu.Unlock()
			return slept
		}
		if v.instElem != nil {
			r.insts.Remove(v.instElem)
			v.instElem = nil
			r.nInsts--
		}
		r.dbs.Remove(v.dbElem)
		v.dbElem = nil
		r.nDBs--
		r.slept++
		r.wakeWaiters()
		r.mu.Unlock()
		v.sleep(true)
		v.mu.Unlock()
		slept++
	}
}
