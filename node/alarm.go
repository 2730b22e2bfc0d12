package node

import (
	"context"
	"errors"
	"fmt"

	"github.com/wasmkeep/alarms"
	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/hostmod"
)

// An operator's control of one alarm: set it at a time, clear it, or fire
// it now. Each is an ordinary event on the actor, run by its holder (a
// *cluster.HeldElsewhereError names another node that holds it): committed
// in the actor's database without calling the guest (engine.Actor.SetAlarm),
// then, in a cluster, indexed and replicated before the call returns, by
// the same rules as a guest's set-alarm (engine.RunSetAlarm:
// the entry PUT and recorded in the event's own commit, the upload, the
// replaced entry deleted). Setting or clearing resets the failure count.

// ErrAlarmMoved is wrapped by the error of ClearAlarmAt when the committed
// alarm is not the time the caller named: it changed since the caller read
// it, and nothing was cleared.
var ErrAlarmMoved = errors.New("the committed alarm is not the one named")

// SetAlarm sets the actor's alarm to atMs (Unix ms, 0..abi.MaxAlarmMillis)
// from outside, without calling the guest, and returns what committed.
// The actor must exist (engine.ErrNotInitialised otherwise: a request
// creates it) and its class must have on-alarm (engine.ErrNoExport).
func (n *Node) SetAlarm(ctx context.Context, id abi.ActorID, atMs int64) (hostmod.Result, error) {
	var res hostmod.Result
	err := n.withActor(ctx, id, "set alarm", func(e *entry) error {
		var err error
		res, err = n.hostAlarm(ctx, e, &atMs, true)
		return err
	})
	return res, err
}

// ClearAlarm clears the actor's alarm from outside, without calling the
// guest, and returns what committed.
func (n *Node) ClearAlarm(ctx context.Context, id abi.ActorID) (hostmod.Result, error) {
	return n.clearAlarm(ctx, id, nil)
}

// ClearAlarmAt clears the actor's alarm only if the committed alarm is at
// atMs: an error wrapping ErrAlarmMoved otherwise, with nothing changed.
// It is a clear that cannot take away an alarm set since the caller read
// it (keepctl alarms delete).
func (n *Node) ClearAlarmAt(ctx context.Context, id abi.ActorID, atMs int64) (hostmod.Result, error) {
	return n.clearAlarm(ctx, id, &atMs)
}

func (n *Node) clearAlarm(ctx context.Context, id abi.ActorID, ifAt *int64) (hostmod.Result, error) {
	var res hostmod.Result
	err := n.withActor(ctx, id, "clear alarm", func(e *entry) error {
		if ifAt != nil {
			st, err := e.a.State(ctx)
			if err != nil {
				return err
			}
			if st.Alarm == nil || *st.Alarm != *ifAt {
				now := "none"
				if st.Alarm != nil {
					now = fmt.Sprint(*st.Alarm)
				}
				return &abi.ActorError{ID: id, Op: "clear alarm", Err: fmt.Errorf("%w: asked to clear the alarm at %d, the committed alarm is %s", ErrAlarmMoved, *ifAt, now)}
			}
		}
		var err error
		res, err = n.hostAlarm(ctx, e, nil, true)
		return err
	})
	return res, err
}

// Fired is what FireAlarm did.
type Fired struct {
	// Delivery is the alarm event: Ran when on-alarm was called, Err when
	// it failed (its retry is committed), and the committed state after it.
	hostmod.Delivery
}

// FireAlarm runs the actor's on-alarm now: it sets the alarm to the
// node's clock's now from outside (as SetAlarm does, so the failure count
// goes back to 0 and on-alarm gets retry count 0), then delivers that time
// at once, as the node timer would (the ordinary alarm event: committed,
// indexed and replicated; a failed on-alarm commits its retry). A failure
// of on-alarm is in the result, not the error; the error is the host's
// (the actor does not exist, its class has no on-alarm, the bucket, the
// hold).
func (n *Node) FireAlarm(ctx context.Context, id abi.ActorID) (Fired, error) {
	var f Fired
	err := n.withActor(ctx, id, "fire alarm", func(e *entry) error {
		now := n.cfg.Clock.Now().UnixMilli()
		// The timer is not armed with now: the delivery below is that
		// time's, and re-arms it from what on-alarm leaves.
		if _, err := n.hostAlarm(ctx, e, &now, false); err != nil {
			return err
		}
		d, err := n.plugin.Deliver(ctx, &nodeActor{n: n, e: e}, now)
		if err != nil {
			if n.leases != nil {
				n.giveUp(ctx, e, err)
			}
			return err
		}
		f.Delivery = d.Event
		if !d.Event.Ran {
			// Not run (the committed alarm was elsewhere after all): report
			// the committed state.
			st, err := e.a.State(ctx)
			if err != nil {
				return err
			}
			f.Delivery.Result = hostmod.Result{Alarm: st.Alarm, Failures: st.Failures}
		}
		return nil
	})
	return f, err
}

// hostAlarm runs the host's alarm event on e (e.mu held, the actor open)
// and, with arm, re-arms the timer from what committed. In a cluster the event is
// replicated before it returns; a failure after it began gives the actor
// up, as a failed upload does.
func (n *Node) hostAlarm(ctx context.Context, e *entry, at *int64, arm bool) (hostmod.Result, error) {
	var res hostmod.Result
	var err error
	if n.leases == nil {
		res, err = e.a.SetAlarm(ctx, at)
	} else {
		var kind alarms.UploadKind
		if kind, err = n.replicationKind(e, alarms.AfterEvent); err != nil {
			n.giveUp(ctx, e, err)
			return hostmod.Result{}, err
		}
		res, err = engine.RunSetAlarm(ctx, n.plugin, &nodeActor{n: n, e: e}, e.a, at, kind)
		if err != nil && !refusedAlarm(err) {
			n.giveUp(ctx, e, err)
		}
		if err == nil {
			e.dirty, e.joining = false, false
		}
	}
	if err != nil {
		return res, err
	}
	if at != nil {
		// Set again from outside: the dead letter, if any, is dealt with.
		// Under the actor's lock, so a dead letter of the alarm just set
		// (kept by a delivery, which takes the lock) is not the one deleted.
		// Only an actor whose database holds a dead letter can have a
		// record: the others cost no request.
		if derr := n.dropLetterOf(ctx, e); derr != nil {
			if arm {
				n.plugin.Arm(e.id, res.Alarm)
				return res, derr
			}
			n.log.Warn("the alarm was set again, but the dead letter's record could not be deleted", "actor", e.id.String(), "error", derr)
		}
	}
	if !arm {
		return res, nil
	}
	// Unconditionally: the failure count went back to 0 even when the
	// time is the one already committed.
	n.plugin.Arm(e.id, res.Alarm)
	return res, nil
}

// refusedAlarm reports an error of engine.Actor.SetAlarm that committed
// nothing because the change was refused before its event began.
func refusedAlarm(err error) bool {
	return errors.Is(err, engine.ErrNotInitialised) || errors.Is(err, engine.ErrAlarmOutOfRange) || errors.Is(err, engine.ErrNoExport)
}
