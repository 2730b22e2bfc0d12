package engine

import (
	"context"
	"sync"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/hostmod"
)

// callCtx is the context of every call into one actor's instance, made once
// and reused from call to call, so that an event allocates no context, no
// timer and no channel. It carries the call (the actor and its event) for
// the host functions, and its Done channel closes when the call's deadline
// passes or the caller's context ends during the call: wazero then closes
// the instance, and the guest stops at its next loop header or call (the
// engine's runtime compiles those checks in; see WithRuntime).
//
// The deadline's timer is armed lazily: a call arms it only when it is not
// armed or is armed for later than this call's deadline. When it fires it
// closes Done if a call is running past its deadline, re-arms itself for
// the running call's deadline if that is later, and otherwise stays unarmed.
// So a stream of short calls costs no timer operation apiece, and a guest is
// never stopped before its own deadline.
//
// The caller's context is watched with context.AfterFunc, registered once
// for each Done channel the caller's contexts have (a node passes the same
// one for every event) and kept between calls; release drops it with the
// timer when the instance closes, so a closed instance leaves nothing in the
// caller's context or in the runtime's timers. A watch kept from an earlier
// call stops only a call of the same Done channel: a call whose context
// cannot end (context.Background) is not stopped when the earlier caller's
// context ends (an HTTP request's, canceled as its handler returns).
//
// The actor runs one call at a time (Actor.mu); begin, end and release run
// there. wazero's watcher goroutine of a call may outlive it: it reads Done
// and Err only, under mu, and does nothing once the call has ended.
type callCtx struct {
	mu sync.Mutex
	// parent and c are the running call's, set under mu; Value reads
	// them without it, only from the call's own goroutine (host
	// functions).
	parent context.Context
	c      call
	// idle is the alarm functions' event outside an event (c.ev nil): no
	// alarm to write, so they answer EPERM.
	idle     hostmod.Event
	done     chan struct{} // closed when err is set; replaced by the next call
	err      error
	deadline time.Time // the running call's
	inCall   bool

	timer  *time.Timer
	armed  bool
	fireAt time.Time // when the armed timer fires

	// watched is the caller's context whose Done channel (watchedDone) an
	// AfterFunc registration (stopWatch) watches.
	watched     context.Context
	watchedDone <-chan struct{}
	stopWatch   func() bool
	// callDone is the running call's caller's Done channel (nil: its
	// context cannot end): only its closing stops the call. The watch is
	// kept for the next call with the same channel; a call with another,
	// or with none, is not stopped by it.
	callDone <-chan struct{}
}

func newCallCtx(id abi.ActorID) *callCtx {
	cc := &callCtx{c: call{actor: id}, done: make(chan struct{})}
	cc.idle.Reset(id, nil, 0)
	return cc
}

// begin starts a call within ev (nil outside an event), which may run for d
// and ends early if parent ends.
func (cc *callCtx) begin(parent context.Context, ev *event, d time.Duration) {
	now := time.Now()
	pd := parent.Done()
	cc.mu.Lock()
	cc.parent, cc.c.ev = parent, ev
	if cc.err != nil { // the last call's Done was closed
		cc.done, cc.err = make(chan struct{}), nil
	}
	cc.deadline = now.Add(d)
	cc.inCall = true
	cc.callDone = pd
	if !cc.armed || cc.deadline.Before(cc.fireAt) {
		cc.arm(d)
	}
	if pd != nil && pd != cc.watchedDone {
		if cc.stopWatch != nil {
			cc.stopWatch()
		}
		cc.watchedDone = pd
		cc.stopWatch = context.AfterFunc(parent, func() { cc.parentDone(pd) })
	}
	if pd != nil {
		cc.watched = parent
		select {
		case <-pd: // ended already: the call stops before it starts
			cc.expire(parent.Err())
		default:
		}
	}
	cc.mu.Unlock()
}

// end ends the call and returns why Done closed during it (nil if it did
// not): context.DeadlineExceeded for the call's own deadline, or the
// caller's context's error.
func (cc *callCtx) end() error {
	cc.mu.Lock()
	cc.inCall = false
	err := cc.err
	cc.parent, cc.c.ev = nil, nil
	cc.mu.Unlock()
	return err
}

// release stops the timer and the watch of the caller's context: the
// instance closed. The next call arms them again.
func (cc *callCtx) release() {
	cc.mu.Lock()
	if cc.timer != nil {
		cc.timer.Stop()
	}
	cc.armed = false
	if cc.stopWatch != nil {
		cc.stopWatch()
	}
	cc.watched, cc.watchedDone, cc.stopWatch = nil, nil, nil
	cc.mu.Unlock()
}

// arm sets the timer to fire in d, at the running call's deadline (mu held).
func (cc *callCtx) arm(d time.Duration) {
	cc.armed, cc.fireAt = true, cc.deadline
	if cc.timer == nil {
		cc.timer = time.AfterFunc(d, cc.fire)
	} else {
		cc.timer.Reset(d)
	}
}

// fire runs when the timer fires.
func (cc *callCtx) fire() {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	cc.armed = false
	if !cc.inCall || cc.err != nil {
		return
	}
	if left := time.Until(cc.deadline); left > 0 {
		cc.arm(left)
		return
	}
	cc.expire(context.DeadlineExceeded)
}

// parentDone runs when the watched Done channel pd closes.
func (cc *callCtx) parentDone(pd <-chan struct{}) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if pd == cc.watchedDone && pd == cc.callDone && cc.inCall && cc.err == nil {
		cc.expire(cc.watched.Err())
	}
}

// expire closes Done with err (mu held, err not yet set).
func (cc *callCtx) expire(err error) {
	cc.err = err
	close(cc.done)
}

// Deadline returns the earlier of the call's deadline and the caller's.
func (cc *callCtx) Deadline() (time.Time, bool) {
	cc.mu.Lock()
	d, p := cc.deadline, cc.parent
	cc.mu.Unlock()
	if p != nil {
		if pd, ok := p.Deadline(); ok && pd.Before(d) {
			return pd, true
		}
	}
	return d, true
}

// Done is closed when the call's deadline passes or the caller's context
// ends during the call.
func (cc *callCtx) Done() <-chan struct{} {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.done
}

// Err says why Done is closed: context.DeadlineExceeded for the call's
// deadline, or the caller's context's error.
func (cc *callCtx) Err() error {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.err
}

// Value returns the running call's event under the alarm functions' key
// (hostmod.Event.ContextValue), the running call under the wasmkeep:actor
// functions' key, and the caller's context's values.
func (cc *callCtx) Value(key any) any {
	ev := &cc.idle
	if cc.c.ev != nil {
		ev = &cc.c.ev.alarm
	}
	if v, ok := ev.ContextValue(key); ok {
		return v
	}
	if _, ok := key.(ctxKey); ok {
		return &cc.c
	}
	if cc.parent == nil {
		return nil
	}
	return cc.parent.Value(key)
}

func (cc *callCtx) String() string { return "wasmkeep call of " + cc.c.actor.String() }
