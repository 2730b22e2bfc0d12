package alarms

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/alarmindex"
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
// says. It returns once every delivery it started has ended.
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
	job := func() {
		defer p.wg.Done()
		defer p.release(key)
		defer func() {
			// A panic outside the actor's delivery (OnDelivery, say) ends
			// this delivery only.
			if r := recover(); r != nil {
				p.log.Error("panic in a delivery", "key", key, "panic", r, "stack", string(debug.Stack()))
			}
		}()
		d := p.deliverDue(ctx, key, at) // on the worker: the timer loop only hands out
		if p.cfg.OnDelivery != nil {
			p.cfg.OnDelivery(d)
		}
	}
	// The delivery slots are workers, at most MaxConcurrentDeliveries,
	// started as needed (only here, in the timer loop) and kept until ctx
	// ends: a delivery runs on a goroutine whose stack has already grown to
	// the depth of a guest's call into SQLite, rather than growing a fresh
	// one each time.
	if p.handOff(ctx, job) {
		return
	}
	// Wait for a worker here, in the timer loop, so a burst of due alarms
	// stays in the timer rather than in goroutines.
	select {
	case p.idle <- job:
	case <-ctx.Done():
		p.release(key)
		p.wg.Done()
	}
}

// handOff gives job to an idle worker, or to a new one while there are
// fewer than MaxConcurrentDeliveries; false if every worker is busy.
func (p *Plugin) handOff(ctx context.Context, job func()) bool {
	select {
	case p.idle <- job: // an idle worker runs it
		return true
	default:
	}
	if p.workers.Load() < int64(p.cfg.MaxConcurrentDeliveries) {
		p.workers.Add(1)
		p.wg.Add(1)
		go p.worker(ctx, job)
		return true
	}
	return false
}

// worker runs deliveries, the first job then whatever the timer loop
// hands it, until ctx ends.
func (p *Plugin) worker(ctx context.Context, job func()) {
	defer p.wg.Done()
	defer p.workers.Add(-1)
	for {
		job()
		select {
		case job = <-p.idle:
		case <-ctx.Done():
			return
		}
	}
}

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
