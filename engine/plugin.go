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
// a's State and SetMeta are not called while the event is open (they
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
// (alarms.Plugin.Arm, with the result's Alarm).
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

// inCommit is an actor inside a BeforeCommit hook: while the event is
// open, State returns what it is about to commit and SetMeta writes into
// its transaction; once it committed, both go to the actor.
type inCommit struct {
	alarms.Actor
	p *Pending
}

func (c inCommit) State(ctx context.Context) (hostmod.State, error) {
	if !c.p.Open() {
		return c.Actor.State(ctx)
	}
	return c.p.State, nil
}

func (c inCommit) SetMeta(ctx context.Context, key, value string) error {
	if c.p.Open() {
		return c.p.SetMeta(key, value)
	}
	return c.Actor.SetMeta(ctx, key, value)
}
