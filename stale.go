package alarms

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/alarmindex"
	"github.com/wasmkeep/alarms/core"
	"github.com/wasmkeep/alarms/sweeper"
)

// Stale entries: entries no state names, of actors the node timer keeps,
// and of actors another node holds (docs/design.md#stale-forward).
//
// A sweep leaves out an actor whose time in the node timer no offer can
// replace (one within the retry horizon: its next alarm, or a retry in
// progress). That is right for the alarm the timer holds, but an overdue
// entry of the actor at another, earlier time (a replaced entry whose
// DELETE failed on every attempt, or whose node died before its batch
// left) would then never be delivered, and so never removed, for as long
// as the actor keeps re-arming within the horizon.
//
// So when a sweep leaves out such an actor for an overdue entry at a time
// other than the one this node's latest upload named, while the timer
// holds the actor at a later time, the plugin delivers that entry time on
// its own: it takes the actor, and the ordinary delivery rules decide
// (docs/design.md#delivery): entries at a time that is not the committed
// alarm are stale and are removed (R2, with the fence; R3; nothing while
// the bucket never had the actor). on-alarm never runs here; if the
// committed alarm is that time after all, the timer is armed with it. The
// timer's own time, retries and failure counts are left as they were. If
// another node holds the actor, the timer drops it and the entry goes to
// the holder (Forwarder), as a delivery's does.
//
// The holder of an actor need not walk its tenant: a walker's delivery of
// the entry finds the actor held and forwards it, and the holder's
// OfferEntry removes it the same way.

// noteUploaded records the entry an upload of this node named (nil:
// none), once the upload counted (the hold was valid when it returned).
func (p *Plugin) noteUploaded(id abi.ActorID, named *alarmindex.Key) {
	p.mu.Lock()
	p.core.Uploaded(id, named)
	p.mu.Unlock()
}

// forgetKnown drops what noteUploaded recorded for the actor (it is not
// this node's, or has no alarm).
func (p *Plugin) forgetKnown(id abi.ActorID) {
	p.mu.Lock()
	p.core.Forget(id)
	p.mu.Unlock()
}

// kept is told each actor a sweep left out, with its earliest overdue
// entries (sweeper.Config.Kept).
func (p *Plugin) kept(d sweeper.Overdue) {
	key := TimerKey(d.Actor)
	timerAt, timerHeld := p.cfg.Timer.Get(key)
	now := p.cfg.Host.Now().UnixMilli()
	p.mu.Lock()
	ctx := p.runCtx
	// Not while a delivery is under way or a failed one waits to deliver
	// its entry time again; only while the timer loop runs.
	entry, ok := p.core.Stale(d, core.Kept{Now: now, Busy: ctx == nil, TimerAt: timerAt, TimerHeld: timerHeld, Key: key})
	p.mu.Unlock()
	if !ok {
		return
	}
	if !p.claim(key) {
		return
	}
	// A free delivery worker the fair scheduler gives the actor's tenant
	// at once; otherwise a later sweep tries again (never wait here: this
	// is the sweep).
	j := &job{key: key, tenant: d.Actor.Tenant, stale: func() { _, _ = p.removeStale(ctx, d.Actor, entry, true) }}
	if p.startNow(ctx, j) { // its worker releases key and ends the wait group's count
		return
	}
	p.release(key)
	p.wg.Done()
}

// claim marks key in flight for a removal of stale entries (false: a
// delivery is under way, or the timer loop has ended) and counts it in the
// plugin's wait group.
func (p *Plugin) claim(key string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.runCtx == nil || p.runCtx.Err() != nil || !p.core.Claim(key) {
		return false
	}
	p.wg.Add(1)
	return true
}

// release ends what claim (or the timer loop's start) began: the actor's
// delivery slot is free, and a time the timer popped meanwhile, if nothing
// armed the actor since, is offered again.
func (p *Plugin) release(key string) {
	p.mu.Lock()
	at, again := p.core.Release(key)
	p.mu.Unlock()
	if _, held := p.cfg.Timer.Get(key); again && !held {
		p.cfg.Timer.Offer(key, at, p.cfg.Host.Now().UnixMilli())
	}
}

// removeStale takes the actor and delivers the entry time of delivered
// without running on-alarm: the stale entries at that time are removed as
// the rules say. An error gives the actor up, as a failed delivery does;
// its entries stay for a later sweep. An actor another node holds is
// dropped from the timer, as a delivery drops it, and with forward (an
// entry this node's sweep listed) the entry is forwarded to the holder.
func (p *Plugin) removeStale(ctx context.Context, id abi.ActorID, delivered alarmindex.Key, forward bool) (OfferOutcome, error) {
	a, done, err := p.cfg.Host.Take(ctx, id)
	if err != nil {
		p.log.Debug("could not take the actor to remove its stale index entries", "actor", id.String(), "due_ms", delivered.DueMs, "error", err)
		if errors.Is(err, ErrNotHere) {
			p.forgetKnown(id)
			p.cfg.Timer.Remove(TimerKey(id))
			if f, ok := p.cfg.Host.(Forwarder); ok && forward {
				p.mu.Lock()
				forward = p.core.Forwarding(delivered, p.cfg.Host.Now().UnixMilli())
				p.mu.Unlock()
				if forward {
					p.forward(ctx, f, delivered, err)
				}
			}
		}
		return "", err
	}
	out, failedDeletes, err := p.removeStaleTaken(ctx, a, delivered)
	now := p.cfg.Host.Now()
	p.mu.Lock()
	p.core.StaleDone(id, delivered.DueMs, now.UnixMilli(), out == OfferRemoved || out == OfferArmed, err != nil || failedDeletes)
	p.mu.Unlock()
	if err != nil {
		p.log.Debug("could not remove the stale index entries of an actor; a later sweep tries again", "actor", id.String(), "due_ms", delivered.DueMs, "error", err)
	}
	done(err)
	return out, err
}

// forward hands an overdue entry this node's sweep listed to the node
// holding the actor, which notHere names (docs/design.md#stale-forward).
func (p *Plugin) forward(ctx context.Context, f Forwarder, entry alarmindex.Key, notHere error) bool {
	err := f.Forward(ctx, entry, notHere)
	p.m.forwardSent(err)
	if err != nil {
		p.log.Debug("could not forward an overdue index entry to the actor's holder; a later sweep lists it again", "actor", entry.Actor.String(), "due_ms", entry.DueMs, "error", err)
	}
	return err == nil
}

// removeStaleTaken does removeStale's work on the taken actor: out says
// whether it removed an entry (or found none left at that time), armed the
// timer, or the rules kept what it listed; failedDeletes whether a DELETE
// failed (harmless: the actor is not given up for it).
func (p *Plugin) removeStaleTaken(ctx context.Context, a Actor, delivered alarmindex.Key) (out OfferOutcome, failedDeletes bool, err error) {
	id := a.ID()
	key := TimerKey(id)
	defer func() {
		if r := recover(); r != nil {
			p.log.Error("panic removing stale index entries; giving the actor up", "actor", id.String(), "panic", r, "stack", string(debug.Stack()))
			err = &abi.ActorError{ID: id, Op: "remove stale index entries", Err: fmt.Errorf("%w: %v", ErrPanicked, r)}
		}
	}()
	plan, st, err := p.deliveryPlan(ctx, a, delivered)
	if err != nil {
		return "", false, err
	}
	p.m.unmatchedEntry(plan.Outcome)
	switch core.StaleStepOf(plan.Outcome) {
	case core.StaleRemove:
		var d Delivery
		err = p.run(ctx, a, p.rules.ExecDelivery(plan), &d)
		failedDeletes = d.failedDeletes > 0
		// Nothing listed at that time any more (a DELETE landed since the
		// sweep listed it) is done as well: nothing is left to try again.
		out = OfferKept
		if len(d.Deleted) > 0 || d.listed == 0 {
			out = OfferRemoved
		}
		if err == nil {
			p.log.Info("removed stale index entries of an actor", "actor", id.String(), "due_ms", delivered.DueMs, "deleted", len(d.Deleted))
		}
	case core.StaleArm:
		p.cfg.Timer.Set(key, *st.Alarm)
		out = OfferArmed
	case core.StaleLetGo:
		a.Release(ctx)
		p.LetGo(id)
		out = OfferKept
	}
	return out, failedDeletes, err
}

// OfferOutcome is what the node holding an actor did with an entry another
// node forwarded to it (Plugin.OfferEntry).
type OfferOutcome string

const (
	// OfferSkipped: nothing to do here now: the timer delivers that time
	// (or an earlier one) itself, the node's latest upload named it, a
	// delivery of the actor is under way or waits to retry, or the same
	// time's removal waits its turn.
	OfferSkipped OfferOutcome = "skipped"
	// OfferRemoved: the stale entries at that time were removed (or none
	// was left there).
	OfferRemoved OfferOutcome = "removed"
	// OfferArmed: the committed alarm is that time after all: the timer is
	// armed with it (it delivers it, never early).
	OfferArmed OfferOutcome = "armed"
	// OfferKept: the rules kept what was listed at that time (R3, or the
	// bucket never had the actor); not tried again before RetryMax.
	OfferKept OfferOutcome = "kept"
)

// OfferEntry is the holder's side of a forwarded entry
// (docs/design.md#stale-forward): another node's sweep listed the actor's
// overdue index entry (its time, and whether a legacy key was among its
// keys), and that node's delivery found the actor held here. The node
// decides with its core (core.State.Forwarded) and, unless it skips it,
// takes the actor (Host.Take) and delivers that entry time as a removal of
// stale entries does: without running on-alarm, the entries at that time
// that the committed state does not name removed under R2, R3 and the
// fence, nothing while the bucket never had the actor, the timer armed if
// the committed alarm is that time after all. It runs on the caller's
// goroutine, holding the actor's delivery slot. An error wrapping
// ErrNotHere: another node holds the actor now.
func (p *Plugin) OfferEntry(ctx context.Context, entry alarmindex.Key) (OfferOutcome, error) {
	id := entry.Actor
	if err := id.Validate(); err != nil {
		return "", err
	}
	key := TimerKey(id)
	timerAt, timerHeld := p.cfg.Timer.Get(key)
	now := p.cfg.Host.Now().UnixMilli()
	p.mu.Lock()
	entry, ok := p.core.Forwarded(entry, core.Kept{Now: now, TimerAt: timerAt, TimerHeld: timerHeld, Key: key})
	ok = ok && p.core.Claim(key)
	p.mu.Unlock()
	if !ok {
		p.m.forwardedEntry(OfferSkipped, nil)
		return OfferSkipped, nil
	}
	defer p.release(key)
	out, err := p.removeStale(ctx, id, entry, false)
	p.m.forwardedEntry(out, err)
	return out, err
}
