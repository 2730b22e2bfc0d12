package alarms

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
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
// says. It returns once every delivery it started has ended, and those it
// queued are dropped (released to the timer's state as if never popped).
func (p *Plugin) runTimer(ctx context.Context) {
	p.mu.Lock()
	p.runCtx = ctx // removals of stale entries take actors while it runs (stale.go)
	p.mu.Unlock()
	defer p.wg.Wait()
	defer func() {
		p.mu.Lock()
		p.runCtx = nil
		p.mu.Unlock()
	}()
	defer p.dropQueued()
	defer p.workerWG.Wait()
	p.cfg.Timer.Run(ctx, p.cfg.Host, func(key string, at int64) { p.start(ctx, key, at) })
}

// Arm sets the node timer to an actor's committed alarm (nil: none) after
// an event changed it (for an event of package hostmod or engine: its
// Result's Alarm, when AlarmChanged); a retry pending from a failed
// delivery is dropped.
func (p *Plugin) Arm(id abi.ActorID, alarm *int64) {
	key := TimerKey(id)
	p.mu.Lock()
	p.forgetFailing(key) // an event that sets or clears the alarm resets the failure count
	p.core.Armed(id, key, alarm)
	p.mu.Unlock()
	if alarm != nil {
		p.cfg.Timer.Set(key, *alarm)
	} else {
		p.cfg.Timer.Remove(key)
	}
}

// job is one delivery the timer loop popped: waiting in its tenant's
// queue of the fair scheduler, then on a worker.
type job struct {
	key    string
	at     int64
	tenant string
	tk     fair.Ticket
	// started: the scheduler gave it a worker; waited: not at once (every
	// worker busy, or its tenant at its cap).
	started, waited bool
	// stale, when set, is a removal of stale index entries (stale.go) to
	// run instead of a delivery.
	stale func()
}

// tenantOfKey is the tenant of a TimerKey: its first path element.
func tenantOfKey(key string) string {
	t, _, _ := strings.Cut(key, "/")
	return t
}

// start queues a due alarm the timer popped in its tenant's queue of the
// fair scheduler (docs/operations.md#tenants-on-one-node), which hands the
// queued deliveries to the workers: never more than
// MaxConcurrentDeliveries at once, nor more than all but the headroom to
// one tenant, and each free worker to the tenant whose deliveries have
// held workers the least time. The timer loop never waits for a worker: a
// tenant's burst of due alarms waits in its own queue, not in front of
// the others'.
func (p *Plugin) start(ctx context.Context, key string, at int64) {
	p.mu.Lock()
	if !p.core.Start(key, at) {
		// The timer popped a time while a delivery for the actor is still
		// under way (an alarm re-armed for now, due before that delivery
		// ended): the core keeps it, or the actor would wait for a sweep.
		p.mu.Unlock()
		return
	}
	p.wg.Add(1)
	p.mu.Unlock()
	j := &job{key: key, at: at, tenant: tenantOfKey(key)}
	p.schedMu.Lock()
	p.sched.Push(j.tenant, at, j)
	p.dispatch(ctx)
	if !j.started {
		j.waited = true
	}
	p.schedMu.Unlock()
}

// dispatch hands the deliveries the scheduler starts now to the workers,
// starting workers as needed: as many as deliveries run, at most
// MaxConcurrentDeliveries, kept until ctx ends, so a delivery runs on a
// goroutine whose stack has already grown to the depth of a guest's call
// into SQLite rather than growing a fresh one each time (schedMu held).
func (p *Plugin) dispatch(ctx context.Context) {
	now := p.cfg.Host.Now().UnixNano()
	for {
		j, tk, ok := p.sched.Pop(now)
		if !ok {
			break
		}
		j.tk, j.started = tk, true
		p.jobs <- j // never blocks: it holds as many as the scheduler runs at once
	}
	for int(p.workers.Load()) < p.sched.Running() {
		p.workers.Add(1)
		p.workerWG.Add(1)
		go p.worker(ctx)
	}
}

// startNow gives j a worker at once if the scheduler has one for its
// tenant without passing over anyone who waits; false otherwise.
func (p *Plugin) startNow(ctx context.Context, j *job) bool {
	p.schedMu.Lock()
	defer p.schedMu.Unlock()
	tk, ok := p.sched.TryStart(j.tenant, p.cfg.Host.Now().UnixNano())
	if !ok {
		return false
	}
	j.tk, j.started = tk, true
	p.jobs <- j
	p.dispatch(ctx) // starts a worker for it if needed
	return true
}

// worker runs deliveries until ctx ends.
func (p *Plugin) worker(ctx context.Context) {
	defer p.workerWG.Done()
	defer p.workers.Add(-1)
	for {
		select {
		case j := <-p.jobs:
			p.runJob(ctx, j)
		case <-ctx.Done():
			return
		}
	}
}

// runJob delivers one queued alarm on a worker, then frees the worker in
// the scheduler, charging the job's tenant the time it held it.
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
		d = p.deliverDue(ctx, j.key, j.at) // on the worker: the timer loop only hands out
		if p.cfg.OnDelivery != nil {
			p.cfg.OnDelivery(d)
		}
	}()
	end := p.cfg.Host.Now()
	if j.stale == nil {
		p.m.tenantDelivery(p.tenantLabel(j.tenant), d, end.Sub(start), j.waited)
	}
	p.schedMu.Lock()
	p.sched.Done(j.tk, end.UnixNano())
	p.dispatch(ctx)
	p.schedMu.Unlock()
}

// dropQueued gives back the deliveries still queued once the timer loop
// and its workers have ended: each is released as if it had not been
// popped (a time popped meanwhile goes back to the timer).
func (p *Plugin) dropQueued() {
	p.schedMu.Lock()
	queued := p.sched.Drain()
	for len(p.jobs) > 0 {
		j := <-p.jobs
		queued = append(queued, j)
		p.sched.Done(j.tk, p.cfg.Host.Now().UnixNano())
	}
	p.schedMu.Unlock()
	for _, j := range queued {
		p.release(j.key)
		p.wg.Done()
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
		p.delivered(id, key, d.Event, d.At)
	case errors.Is(err, ErrNotHere):
		d.Err = err
		p.m.delivered(FiringNotHere, hostmod.Delivery{}, d.At)
		p.mu.Lock()
		entry, listed := p.core.Forward(id, at, d.At.UnixMilli())
		p.forgetFailing(key)
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
func (p *Plugin) delivered(id abi.ActorID, key string, ev hostmod.Delivery, now time.Time) {
	p.trackFailing(key, ev)
	switch {
	case ev.Ran && ev.Err != nil:
		p.m.delivered(FiringFailed, ev, now)
	case ev.Ran:
		p.m.delivered(FiringOK, ev, now)
	default:
		p.m.delivered(FiringStale, ev, now)
	}
	if ev.GaveUp {
		p.log.Error("on-alarm failed on its last attempt; retries given up and a dead letter kept", "actor", id.String(), "attempts", ev.RetryCount+1, "error", ev.Err)
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
	p.m.delivered(FiringGaveUp, hostmod.Delivery{}, now)
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
	p.delivered(id, key, d.Event, now)
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
	if err == nil && d.RetryAt == 0 {
		// Re-arm from the committed state (a failed on-alarm committed its
		// retry; a handler may have set the next alarm).
		if st, rerr := a.State(ctx); rerr == nil && st.Alarm != nil {
			alarm = st.Alarm
			p.cfg.Timer.Set(key, *st.Alarm)
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
