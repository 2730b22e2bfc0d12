package alarms

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/alarmindex"
	"github.com/wasmkeep/alarms/fair"
	"github.com/wasmkeep/alarms/hostmod"
)

// ErrNotHere is wrapped by the error of Host.Take when the actor is not
// this node's to run: another node holds it, or this node does not serve
// its class. The timer loop then drops the alarm from the node timer: the holder
// has it, and a sweep offers an orphaned one again.
var ErrNotHere = errors.New("the actor is not this node's to run")

// Forwarder is implemented by a Host that can reach the node holding an
// actor (docs/design.md#stale-forward). When a delivery of an entry this
// node's sweep listed finds the actor held by another node (Host.Take's
// error wraps ErrNotHere), the timer loop drops the alarm as before and
// hands the entry to Forward, with Take's error, which names the holder in
// the host's own terms: the host sends it there, and the holder's plugin
// decides with Plugin.OfferEntry. A Forward that cannot reach the holder
// returns an error; the entry is listed, and forwarded, again at a later
// sweep while it stays.
type Forwarder interface {
	Forward(ctx context.Context, entry alarmindex.Key, notHere error) error
}

// runTimer runs the node timer (Config.Timer) until ctx ends, as Start
// says: it moves each due alarm into its tenant's queue of the fair
// scheduler (deliveryLoop). It returns once every delivery it started has ended,
// and those it queued are dropped (released to the timer's state as if
// never popped).
func (p *Plugin) runTimer(ctx, work context.Context) {
	p.mu.Lock()
	p.runCtx = ctx // removals of stale entries take actors while it runs (stale.go)
	p.mu.Unlock()
	defer p.wg.Wait()
	defer func() {
		p.mu.Lock()
		p.runCtx = nil
		p.mu.Unlock()
	}()
	p.deliveryLoop(ctx, work)
}

// Arm sets the node timer to an actor's committed alarm (nil: none) after
// an event changed it (for an event of package hostmod or engine: its
// Result's Alarm, when AlarmChanged); a retry pending from a failed
// delivery is dropped.
func (p *Plugin) Arm(id abi.ActorID, alarm *int64) {
	key := TimerKey(id)
	var now int64
	if p.m != nil && alarm != nil {
		now = p.cfg.Host.Now().UnixMilli()
	}
	p.mu.Lock()
	p.forgetFailing(key) // an event that sets or clears the alarm resets the failure count
	p.noteDue(key, alarm, now)
	p.core.Armed(id, key, alarm)
	p.mu.Unlock()
	if alarm != nil {
		p.cfg.Timer.Set(key, *alarm)
	} else {
		p.cfg.Timer.Remove(key)
	}
}

// job is one delivery the timer popped: waiting in its tenant's queue of
// the fair scheduler, then on a worker.
type job struct {
	key    string
	at     int64
	tenant string
	tk     fair.Ticket
	// queued is when it was queued; waited: it waited more than
	// growAfter for a worker (every worker busy, or its tenant at its
	// cap).
	queued time.Time
	waited bool
	// stale, when set, is a removal of stale index entries (stale.go) to
	// run instead of a delivery.
	stale func()
}

// tenantOfKey is the tenant of a TimerKey: its first path element.
func tenantOfKey(key string) string {
	t, _, _ := strings.Cut(key, "/")
	return t
}

// The delivery workers and their fair scheduler
// (docs/operations.md#tenants-on-one-node). The timer loop moves each alarm
// the node timer holds into its tenant's queue as soon as it is due, and
// never waits for a worker to do so: a tenant's burst waits in its own
// queue, not in front of the others'. Each worker, as its delivery ends,
// takes the next one the scheduler starts, on the same goroutine, or
// waits for one: at most MaxConcurrentDeliveries run at once, no tenant
// more than all but an eighth of them, and each free worker goes to the
// tenant whose deliveries have held workers the least time.
//
// A new worker starts when a delivery can start and no worker is idle,
// and either there are fewer workers than the Go runtime's processors
// and the deliveries the host says wait for the disk now (SyncHost: a
// durable commit's sync), or none has taken a delivery for growAfter: the
// workers use every processor at once, a delivery waiting for a sync
// leaves its processor to another (whose commit then shares that sync or
// the next), they grow while those there stay busy (on the bucket, in a
// hung guest), and as many deliveries run at once as keep up, not as many
// as may. Measured on two cores, warm firings on 64 workers at once cost
// each about twice the CPU of the few that keep up; on one worker they
// used one core of two (warm firings of 50 actors 20 % fewer than before
// the fair scheduler); durable cold firings on workers as many as the
// processors waited for syncs most of the time, half the rate of those
// not durable, and shared a sync between two commits.

// growAfter is how long the workers there may take no delivery, with one
// that could start, before a new worker starts (a variable for the tests).
var growAfter = time.Millisecond

// A worker is surplus once its delivery waited in a queue of the host's
// for a share that more workers do not add (NoteWaitedForShare: the
// engine's room in its tenant's line for the guest slots): the workers
// grown while others waited for the disk or the bucket then stay, and
// each takes the next due alarm only to wait for that share again, a
// park and a wake a firing. After such a delivery the worker ends if
// there are more workers than the Go runtime's processors and the
// deliveries waiting for the disk now (wakeIdle's at), so the workers
// shrink back to what keeps up. Measured on two cores (warm firings of
// the Go counter, one tenant): 31 to 56 workers and 0.37 to 0.88 waits
// for a room a firing before, 18 or 19 workers and 0.001 waits after, a
// firing's CPU 0.95 of before (docs/benchmarks.md#surplus-workers).

// workerState is a worker's own, reachable from its deliveries' contexts.
type workerState struct{ waited atomic.Bool }

type workerKey struct{}

// NoteWaitedForShare tells the plugin that the delivery of ctx (a
// Host.Take's) waited for a share of the host's that is bounded whatever
// the number of workers: its tenant's share of the guest calls, say.
// Waits for the disk or the network are no such waits. The worker that
// runs the delivery may end once it ends, when the workers are more than
// keep up (docs/operations.md#tenants-on-one-node). Outside a delivery of
// the timer loop it does nothing.
func NoteWaitedForShare(ctx context.Context) {
	if w, ok := ctx.Value(workerKey{}).(*workerState); ok {
		w.waited.Store(true)
	}
}

// lookAgain is how soon the timer loop looks again for a worker for a
// delivery that could start and found none.
const lookAgain = time.Millisecond

// deliveryLoop is the timer loop (runTimer).
func (p *Plugin) deliveryLoop(ctx, work context.Context) {
	clk := p.cfg.Host
	p.schedMu.Lock()
	p.loopCtx, p.workCtx = ctx, work
	p.schedMu.Unlock()
	defer func() {
		// Workers end with ctx; what was queued or started for no worker
		// is given back. From here startNow starts nothing and no worker
		// is started: nothing is left in ready after the drain.
		p.schedMu.Lock()
		p.loopCtx, p.workCtx = nil, nil
		p.schedMu.Unlock()
		p.workerWG.Wait()
		p.schedMu.Lock()
		dropped := append(p.ready, p.sched.Drain()...)
		p.ready = nil
		for _, j := range dropped {
			if j.tk != (fair.Ticket{}) {
				p.sched.Done(j.tk, clk.Now().UnixNano())
			}
		}
		p.publish()
		p.schedMu.Unlock()
		for _, j := range dropped {
			p.release(j.key)
			p.wg.Done()
		}
	}()
	var due, grow <-chan time.Time
	var dueAt int64
	for popDue := true; ; {
		now := clk.Now()
		var queued []*job
		for popDue {
			key, at, ok := p.cfg.Timer.PopDue(now.UnixMilli())
			if !ok {
				break
			}
			if j := p.started(key, at); j != nil {
				queued = append(queued, j)
			}
		}
		popDue = false
		p.schedMu.Lock()
		for _, j := range queued {
			j.queued = time.Now()
			p.sched.Push(j.tenant, j.at, j)
		}
		if p.wakeIdle() && grow == nil {
			grow = time.After(lookAgain)
		}
		p.publish()
		p.schedMu.Unlock()
		// The earliest time's timer, made again only when that time moved.
		if next, ok := p.cfg.Timer.Next(); !ok {
			due, dueAt = nil, 0
		} else if due == nil || next != dueAt {
			due, dueAt = clk.After(time.Duration(next-now.UnixMilli())*time.Millisecond), next
		}
		select {
		case <-ctx.Done():
			return
		case <-p.cfg.Timer.Wake():
			popDue = true
		case <-due:
			popDue, due = true, nil
		case <-grow:
			grow = nil
		}
	}
}

// started begins a delivery of a due alarm the timer popped: a job for
// its tenant's queue, or nil while the actor's delivery is still under
// way.
func (p *Plugin) started(key string, at int64) *job {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.core.Start(key, at) {
		// The timer popped a time while a delivery for the actor is still
		// under way (an alarm re-armed for now, due before that delivery
		// ended): the core keeps it, or the actor would wait for a sweep.
		return nil
	}
	p.wg.Add(1)
	return &job{key: key, at: at, tenant: tenantOfKey(key)}
}

// wakeIdle wakes an idle worker for each delivery that can start, and
// starts a new worker when one can start, none is idle, and there are
// fewer than the Go runtime's processors, and the host's deliveries
// waiting for the disk (SyncHost), or none has taken a delivery for
// growAfter. It reports whether a
// delivery could start and found no worker: the caller looks again after
// lookAgain (schedMu held).
func (p *Plugin) wakeIdle() (stuck bool) {
	if p.loopCtx == nil {
		return false
	}
	at := p.workersToKeepUp()
	for n := len(p.ready) + p.sched.Startable(p.cfg.Host.Now().UnixNano()) - p.coming; n > 0; n-- {
		switch {
		case p.idle > 0:
			p.idle--
			p.wake <- struct{}{} // never blocks: a place for each worker
		case p.workers >= p.cfg.MaxConcurrentDeliveries:
			return false // one frees soon enough
		case p.workers >= at && time.Since(p.lastTake) < growAfter:
			return true
		default:
			p.workers++
			p.workerWG.Add(1)
			p.lastTake = time.Now() // the next one starts growAfter later at the soonest
			go p.worker(p.loopCtx, p.workCtx)
		}
		p.coming++
	}
	return false
}

// workersToKeepUp is the workers that keep every processor busy: the Go
// runtime's processors, and as many more as the host's deliveries
// waiting for the disk now (SyncHost).
func (p *Plugin) workersToKeepUp() int {
	at := runtime.GOMAXPROCS(0)
	if p.syncing != nil {
		at += p.syncing()
	}
	return at
}

// next takes the next delivery for a worker: one started for no worker
// (a removal of stale entries), or the next the scheduler starts; nil if
// none (schedMu held).
func (p *Plugin) next(now time.Time) *job {
	if n := len(p.ready); n > 0 {
		j := p.ready[0]
		p.ready[0] = nil
		p.ready = p.ready[1:]
		p.lastTake = time.Now()
		return j
	}
	j, tk, ok := p.sched.Pop(now.UnixNano())
	if !ok {
		return nil
	}
	p.lastTake = time.Now()
	j.tk, j.waited = tk, p.lastTake.Sub(j.queued) > growAfter
	return j
}

// publish keeps the scheduler's counts where the metrics read them
// (schedMu held).
func (p *Plugin) publish() {
	p.running.Store(int64(p.sched.Running()))
	p.waiting.Store(int64(p.sched.Waiting()))
}

// startNow gives j (a removal of stale entries) a worker at once if the
// scheduler has one for its tenant without passing over anyone who waits;
// false otherwise.
func (p *Plugin) startNow(ctx context.Context, j *job) bool {
	p.schedMu.Lock()
	defer p.schedMu.Unlock()
	if p.loopCtx == nil {
		// The timer loop is not running (it ended after the sweep claimed
		// the key): no worker would run j.
		return false
	}
	tk, ok := p.sched.TryStart(j.tenant, p.cfg.Host.Now().UnixNano())
	if !ok {
		return false
	}
	j.tk = tk
	p.ready = append(p.ready, j)
	p.wakeIdle()
	p.publish()
	return true
}

// worker runs deliveries until ctx ends: as each ends, the next the
// scheduler starts, on the same goroutine, and when there is none it
// waits to be woken. A delivery runs on a goroutine whose stack has
// already grown to the depth of a guest's call into SQLite, with work as
// its context: one under way when ctx ends runs to its end (Start's stop
// cancels work at its drain deadline).
func (p *Plugin) worker(ctx, work context.Context) {
	defer p.workerWG.Done()
	w := &workerState{}
	work = context.WithValue(work, workerKey{}, w)
	var j *job
	fresh := true // woken or new: one of p.coming
	for {
		waited := j != nil && w.waited.Swap(false)
		p.schedMu.Lock()
		if j != nil {
			p.sched.Done(j.tk, p.cfg.Host.Now().UnixNano())
		}
		if waited && p.workers > p.workersToKeepUp() {
			// Its delivery waited for a share more workers do not add,
			// and the others are as many as keep up. A delivery its end
			// let start goes to an idle worker, if one waits.
			p.workers--
			p.wakeIdle()
			p.publish()
			p.schedMu.Unlock()
			return
		}
		if ctx.Err() != nil {
			p.workers--
			p.publish()
			p.schedMu.Unlock()
			return
		}
		if fresh {
			p.coming--
			fresh = false
		}
		j = p.next(p.cfg.Host.Now())
		if j == nil {
			p.idle++
			p.publish()
			p.schedMu.Unlock()
			select {
			case <-p.wake:
				fresh = true
				continue
			case <-ctx.Done():
				p.schedMu.Lock()
				select {
				case <-p.wake: // woken meanwhile: the token is spent
					p.coming--
				default:
					p.idle--
				}
				p.workers--
				p.publish()
				p.schedMu.Unlock()
				return
			}
		}
		p.publish()
		p.schedMu.Unlock()
		p.runJob(work, j)
	}
}

// runJob delivers one queued alarm on a worker.
func (p *Plugin) runJob(ctx context.Context, j *job) {
	defer p.wg.Done()
	start := p.cfg.Host.Now()
	var d Delivery
	func() {
		defer p.release(j.key)
		defer func() {
			// A panic outside the actor's delivery (OnDelivery, say) ends
			// this delivery only.
			if r := recover(); r != nil {
				p.log.Error("panic in a delivery", "key", j.key, "panic", r, "stack", string(debug.Stack()))
			}
		}()
		if j.stale != nil {
			j.stale()
			return
		}
		dctx := ctx
		if p.cfg.StartDelivery != nil {
			if id, err := ParseTimerKey(j.key); err == nil {
				var end func(Delivery)
				dctx, end = p.cfg.StartDelivery(ctx, id)
				// Deferred: ended with what the delivery came to, even
				// if it panicked.
				defer func() { end(d) }()
			}
		}
		d = p.deliverDue(dctx, j.key, j.at) // on the worker: the timer loop only hands out
		if p.cfg.OnDelivery != nil {
			p.cfg.OnDelivery(d)
		}
	}()
	if j.stale == nil {
		p.m.tenantDelivery(p.tenantLabel(j.tenant), d, p.cfg.Host.Now().Sub(start), j.waited)
	}
}

// tenantLabel is a tenant's label in the per-tenant metrics: its name if
// Config.TenantWeights names it, OtherTenants otherwise, so the number of
// series is bounded by the configuration.
func (p *Plugin) tenantLabel(tenant string) string {
	if _, ok := p.cfg.TenantWeights[tenant]; ok {
		return tenant
	}
	return OtherTenants
}

// OtherTenants is the tenant label of the per-tenant metrics for the
// tenants Config.TenantWeights does not name.
const OtherTenants = "other"

// deliverDue delivers one alarm the node timer popped (key is a TimerKey),
// on the calling goroutine (a worker of the timer loop): take the actor,
// deliver, re-arm, or give up and retry.
func (p *Plugin) deliverDue(ctx context.Context, key string, at int64) Delivery {
	id, err := ParseTimerKey(key)
	if err != nil {
		p.log.Error("dropping a malformed timer entry", "key", key, "error", err)
		return Delivery{TimerAt: at, Err: err}
	}
	p.mu.Lock()
	at = p.core.Delivering(key, at)
	since := p.dueSinceOf(key)
	p.mu.Unlock()
	d := Delivery{Actor: id, TimerAt: at}
	a, done, err := p.cfg.Host.Take(ctx, id)
	if err == nil {
		var alarm *int64
		d, alarm, err = p.deliverTaken(ctx, a, key, at)
		d.Actor, d.TimerAt, d.Alarm = id, at, alarm
		done(err)
	}
	d.At = p.cfg.Host.Now()
	switch {
	case err == nil:
		p.m.unmatchedEntry(d.Outcome)
		if d.Outcome != alarmindex.OutcomeRun {
			p.log.Debug("delivered an entry time that is not the actor's alarm: nothing ran", "actor", id.String(), "at", at, "outcome", d.Outcome.String(), "alarm", orZero(d.Alarm), "stale_deleted", len(d.Deleted), "listed", d.listed)
		}
		d.dueFrom = since.from(d.Event)
		p.delivered(id, key, d.Event, d.At, since)
	case errors.Is(err, ErrNotHere):
		d.Err = err
		p.m.delivered(FiringNotHere, hostmod.Delivery{}, d.At, 0)
		p.mu.Lock()
		entry, listed := p.core.Forward(id, at, d.At.UnixMilli())
		p.forgetFailing(key)
		p.noteDue(key, nil, 0)
		p.core.Forget(id)
		p.mu.Unlock()
		p.cfg.Timer.Remove(key)
		p.log.Debug("alarm dropped: the actor is not this node's to run", "actor", id.String(), "error", err)
		if f, ok := p.cfg.Host.(Forwarder); ok && listed {
			// An entry this node's sweep listed: the holder's timer may
			// never deliver its time (a stale entry of an actor it keeps
			// re-arming), and it may walk no tenant of its own.
			d.Forwarded = p.forwardLater(ctx, f, entry, err)
		}
	default:
		d.Err = err
		if ctx.Err() != nil {
			return d
		}
		d.RetryAt = p.retryAfterError(id, key, at, d.At, err)
		p.LetGo(id) // given up; the timer retries, and the sweep walks its tenant
	}
	return d
}

// delivered counts and logs a delivery that the rules carried out (on-alarm
// ran, or the entry was stale), and tracks the actor's failures.
func (p *Plugin) delivered(id abi.ActorID, key string, ev hostmod.Delivery, now time.Time, since dueSince) {
	p.trackFailing(key, ev, since)
	switch from := since.from(ev); {
	case ev.Ran && ev.Err != nil:
		p.m.delivered(FiringFailed, ev, now, from)
	case ev.Ran:
		p.m.delivered(FiringOK, ev, now, from)
	default:
		p.m.delivered(FiringStale, ev, now, from)
	}
	if ev.GaveUp {
		p.log.Error("on-alarm failed on its last attempt; retries given up and a dead letter kept", "actor", id.String(), "attempts", ev.RetryCount+1, "scheduled_ms", ev.Scheduled, "error", ev.Err)
	} else if ev.Ran && ev.Err != nil {
		p.log.Warn("on-alarm failed; retry committed", "actor", id.String(), "retry_count", ev.RetryCount, "next_ms", orZero(ev.Alarm), "error", ev.Err)
	} else if ev.Ran && p.log.IsDebug() {
		// The hot path: the line's fields are made only for a logger
		// that writes it. At DEBUG: a node logs a summary of its firings
		// at INFO instead (node.Config.LogSummaryEvery).
		p.log.Debug("alarm fired", "actor", id.String(), "scheduled_ms", ev.Scheduled, "fired_ms", now.UnixMilli(), "retry_count", ev.RetryCount)
	}
}

// retryAfterError counts a delivery of the entry time at that failed on
// the host's side and offers the same time again after
// Config.RetryAfterError (docs/design.md#delivery: a lease period later).
// It returns when, or 0 if the timer holds the actor earlier anyway.
func (p *Plugin) retryAfterError(id abi.ActorID, key string, at int64, now time.Time, err error) int64 {
	p.m.delivered(FiringGaveUp, hostmod.Delivery{}, now, 0)
	retry := now.Add(p.cfg.RetryAfterError).UnixMilli()
	p.log.Error("alarm delivery failed; retrying", "actor", id.String(), "after", p.cfg.RetryAfterError, "error", err)
	if !p.cfg.Timer.Offer(key, retry, now.UnixMilli()) {
		return 0
	}
	p.mu.Lock()
	p.core.Failed(key, at)
	p.mu.Unlock()
	return retry
}

// Deliver delivers the entry time at to an actor the host already holds
// and has locked (an operator firing its alarm now, say), as a delivery of
// the timer loop does once it took the actor: it runs the alarm event when
// the committed alarm is that time, and otherwise removes the stale
// entries at that time as the rules say (R2, R3, the fence, an actor with
// no state, a bucket that had nothing); then the timer is re-armed from the
// committed alarm (or cleared), and the firing counted and logged. An error
// means: give the actor up (nothing was deleted); the same entry time is
// then delivered again after Config.RetryAfterError, as by the timer loop.
func (p *Plugin) Deliver(ctx context.Context, a Actor, at int64) (Delivery, error) {
	id := a.ID()
	key := TimerKey(id)
	p.mu.Lock()
	since := p.dueSinceOf(key)
	p.mu.Unlock()
	d, err := p.deliver(ctx, a, at)
	now := p.cfg.Host.Now()
	if err != nil {
		p.retryAfterError(id, key, at, now, err)
		return d, err
	}
	if d.RetryAt == 0 {
		st, rerr := a.State(ctx)
		if rerr != nil {
			return d, &abi.ActorError{ID: id, Op: "read the committed alarm", Err: rerr}
		}
		p.Arm(id, st.Alarm)
	}
	d.dueFrom = since.from(d.Event)
	p.delivered(id, key, d.Event, now, since)
	return d, nil
}

// ErrPanicked is wrapped by the error of a delivery that panicked: the
// actor is given up (the done of Host.Take) and the delivery retried like any other
// that failed.
var ErrPanicked = errors.New("a delivery panicked")

// deliverTaken delivers to a taken actor and re-arms the timer from the
// committed state; a panic in the host or the plugin is recovered here.
func (p *Plugin) deliverTaken(ctx context.Context, a Actor, key string, at int64) (d Delivery, alarm *int64, err error) {
	defer func() {
		if r := recover(); r != nil {
			p.log.Error("panic in a delivery; giving the actor up", "actor", a.ID().String(), "panic", r, "stack", string(debug.Stack()))
			err = &abi.ActorError{ID: a.ID(), Op: "deliver", Err: fmt.Errorf("%w: %v", ErrPanicked, r)}
		}
	}()
	d, err = p.deliver(ctx, a, at)
	// The time is delivered: a pop of it from now is an alarm committed
	// for it again (the re-arm below, say), not this one.
	p.mu.Lock()
	p.core.Settled(key)
	p.mu.Unlock()
	if err == nil && d.RetryAt == 0 {
		// Re-arm from the committed state (a failed on-alarm committed its
		// retry; a handler may have set the next alarm).
		// The timer is the plugin's own: the read need not wait for the
		// delivery's commit to be durable (hostmod.Unreported).
		if st, rerr := a.State(hostmod.Unreported(ctx)); rerr == nil && st.Alarm != nil {
			alarm = st.Alarm
			p.cfg.Timer.Set(key, *st.Alarm)
			if d.Event.Ran && p.m != nil {
				// An alarm before now after a run is one its handler set
				// (a retry is later): due since now.
				if now := p.cfg.Host.Now().UnixMilli(); *st.Alarm < now {
					p.mu.Lock()
					p.noteDue(key, st.Alarm, now)
					p.mu.Unlock()
				}
			}
		}
	}
	return d, alarm, err
}

// orZero is *p, or 0 for nil: an alarm in a log line, 0 for none.
func orZero(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

// forwardLater forwards the entry to the actor's holder apart from the
// delivery that found it held there, and reports whether it did: a
// forward waits for the holder, which takes the actor to tend to it (up to
// the host's own timeout), and done in the delivery's worker it kept that
// worker from the node's own alarms. After a bucket outage, with every
// alarm overdue, each node's workers were taken up by forwards of the
// other nodes' actors while its own waited behind them. At most a quarter
// of MaxConcurrentDeliveries are in flight; with none free the entry is
// not forwarded now, and a later sweep lists it again.
func (p *Plugin) forwardLater(ctx context.Context, f Forwarder, entry alarmindex.Key, notHere error) bool {
	select {
	case p.forwarding <- struct{}{}:
	default:
		p.log.Debug("not forwarding an overdue index entry now: every forward slot is busy; a later sweep lists it again", "actor", entry.Actor.String(), "due_ms", entry.DueMs)
		return false
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer func() { <-p.forwarding }()
		p.forward(ctx, f, entry, notHere)
	}()
	return true
}

// NotHere wraps err in ErrNotHere, for Host.Take.
func NotHere(err error) error { return fmt.Errorf("%w: %w", ErrNotHere, err) }
