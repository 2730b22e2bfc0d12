package engine

import (
	"context"

	"github.com/wasmkeep/alarms"
	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/hostmod"
	"github.com/wasmkeep/alarms/internal/seam"
)

// beforeUpload is the plugin's replication split around an upload that is
// not one call (internal/seam): the steps up to the upload, and after it.
var beforeUpload = seam.BeforeUpload.(func(*alarms.Plugin, context.Context, alarms.Actor, alarms.UploadKind) (func(context.Context) error, error))

// PluginState reads what alarms.Actor.Read returns from the database of an
// actor the engine runs: the committed alarm, alarm_indexed and whether
// on-init is recorded. A host built on the engine calls it from its Read;
// its WriteMeta is Actor.SetMeta, which keeps the actor's committed state
// known, so the next Read costs no query.
func PluginState(ctx context.Context, a *Actor) (alarms.ActorState, error) {
	s, err := a.State(ctx)
	if err != nil {
		return alarms.ActorState{}, err
	}
	st := alarms.ActorState{Indexed: s.Indexed, InitRecorded: s.InitRecorded}
	if s.HasAlarm {
		st.Alarm = &s.Alarm
	}
	return st, nil
}

// RunAlarm runs the alarm event of an actor the engine runs (h is a's
// database and instance) and replicates it with p as p.Replicate does,
// with one commit where DeliverAlarm then Replicate take two: the entry for
// the alarm the event leaves is PUT before the event commits and recorded
// in the event's own transaction (Actor.DeliverAlarmBefore), then
// the committed database is uploaded (a.Upload), the hold re-checked and
// the replaced entry deleted. The bucket sees the same order as with
// Replicate: the entry, then the state that names it, then the DELETE of
// the one it replaced. An entry PUT for an event that then fails to commit
// is an extra entry, removed when it comes due.
//
// a's Read and WriteMeta are not called while the event is open (they
// would wait for the actor h holds); the plugin reads what is about to
// commit from the event instead. An error means: give the actor up. When
// the alarm was not due, nothing runs and nothing is replicated.
func RunAlarm(ctx context.Context, p *alarms.Plugin, a alarms.Actor, h *Actor, kind alarms.UploadKind) (hostmod.Delivery, error) {
	if p.SingleNode() {
		return h.DeliverAlarm(ctx)
	}
	var after func(context.Context) error
	var indexErr error
	d, err := h.DeliverAlarmBefore(ctx, func(ctx context.Context, pend *Pending) error {
		after, indexErr = beforeUpload(p, ctx, inCommit{Actor: a, p: pend}, kind)
		return indexErr
	})
	if indexErr != nil {
		return d, &abi.ActorError{ID: a.ID(), Op: "replicate", Err: indexErr}
	}
	if err != nil || !d.Ran {
		return d, err
	}
	return d, uploadCommitted(ctx, a, after)
}

// uploadCommitted uploads an event that committed with its index entry
// recorded in its own transaction, then runs what beforeUpload left for
// after the upload (the hold re-checked, the replaced entry deleted).
func uploadCommitted(ctx context.Context, a alarms.Actor, after func(context.Context) error) error {
	err := a.Upload(ctx)
	if err == nil {
		err = after(ctx)
	}
	if err != nil {
		return &abi.ActorError{ID: a.ID(), Op: "replicate", Err: err}
	}
	return nil
}

// RunSetAlarm runs the host's own event on an actor the engine runs that
// sets its alarm to at (nil: clears it) without calling the guest
// (Actor.SetAlarmBefore: an operator moving, clearing or firing the
// alarm), and replicates it with p as RunAlarm does: the entry
// for the alarm it leaves is PUT before the event commits and recorded in
// the event's own transaction, then the database is uploaded, the hold
// re-checked and the replaced entry deleted. The change is indexed and
// replicated by the same rules as a guest's set-alarm, so nothing writes
// the alarm behind them. The host re-arms its timer from the result
// (alarms.Plugin.Arm).
//
// An error from the engine before the event began (a time out of range, an
// actor whose on-init never ran, no on-alarm: see SetAlarm) commits
// nothing; any other means: give the actor up.
func RunSetAlarm(ctx context.Context, p *alarms.Plugin, a alarms.Actor, h *Actor, at *int64, kind alarms.UploadKind) (hostmod.Result, error) {
	if p.SingleNode() {
		return h.SetAlarm(ctx, at)
	}
	var after func(context.Context) error
	var indexErr error
	res, err := h.SetAlarmBefore(ctx, at, func(ctx context.Context, pend *Pending) error {
		after, indexErr = beforeUpload(p, ctx, inCommit{Actor: a, p: pend}, kind)
		return indexErr
	})
	if indexErr != nil {
		return res, &abi.ActorError{ID: a.ID(), Op: "replicate", Err: indexErr}
	}
	if err != nil {
		return res, err
	}
	return res, uploadCommitted(ctx, a, after)
}

// inCommit is an actor inside a BeforeCommit hook: while the event
// is open, Read returns what it is about to commit and WriteMeta writes
// into its transaction; once it committed, both go to the actor.
type inCommit struct {
	alarms.Actor
	p *Pending
}

func (c inCommit) Read(ctx context.Context) (alarms.ActorState, error) {
	if !c.p.Open() {
		return c.Actor.Read(ctx)
	}
	st := alarms.ActorState{Indexed: c.p.Indexed, InitRecorded: c.p.InitRecorded}
	if c.p.HasAlarm {
		at := c.p.Alarm
		st.Alarm = &at
	}
	return st, nil
}

func (c inCommit) WriteMeta(ctx context.Context, key, value string) error {
	if c.p.Open() {
		return c.p.SetMeta(key, value)
	}
	return c.Actor.WriteMeta(ctx, key, value)
}
