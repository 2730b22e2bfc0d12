package main

// The glue that gives the host of host.go durable alarms: all of it is in
// this file, besides the lines marked "alarms:" in host.go.

import (
	"context"
	"time"

	"github.com/wasmkeep/alarms"
	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/hostmod"
	"github.com/wasmkeep/alarms/sweeper"
)

// alarmsGlue is the plugin and its loops: the timer, which delivers each
// alarm when due, and the sweep of the bucket's index. As the plugin's
// host (alarms.Host) it is one node.
type alarmsGlue struct {
	alarms.OneNode
	h    *Host
	p    *alarms.Plugin
	b    bucket.Bucket
	stop func() // ends the loops
}

// New starts a host running class (wasm) with its databases under dir, its
// alarm index and replicas in b, sweeping tenants every sweep, and each
// at the latest every safety (zero: the plugin's default).
func New(ctx context.Context, b bucket.Bucket, dir, class string, wasm []byte, tenants []string, margin, sweep, safety time.Duration, onDelivery func(alarms.Delivery)) (*Host, error) {
	h, err := newHost(ctx, dir, class, wasm)
	if err != nil {
		return nil, err
	}
	g := &alarmsGlue{OneNode: alarms.OneNode{Name: "minihost"}, h: h, b: b}
	h.alarms = g // before Start: its deliveries take actors, which reads it
	g.p, err = alarms.Register(alarms.Config{Bucket: b, Host: g, Tenants: tenants, Timer: sweeper.NewTimer(hostmod.DefaultRetryMax),
		Margin: margin, SweepPeriod: sweep, SweepSafetyPeriod: safety, OnDelivery: onDelivery, Serves: func(c string) bool { return c == class }})
	if err != nil {
		h.rt.Close(ctx)
		return nil, err
	}
	g.stop = g.p.Start(ctx)
	return h, nil
}

// afterEvent replicates a committed event with the index in line around
// the upload (or gives the actor up), and re-arms the timer.
func (g *alarmsGlue) afterEvent(ctx context.Context, a *actor, ev *hostmod.Event) error {
	if err := g.p.Replicate(ctx, a, alarms.AfterEvent); err != nil {
		a.close(ctx)
		return err
	}
	if r := ev.Result(); r.AlarmChanged {
		g.p.Arm(a.id, r.Alarm)
	}
	return nil
}

// Take takes the actor for a delivery; an error passed to done means the
// plugin gave the actor up.
func (g *alarmsGlue) Take(ctx context.Context, id abi.ActorID) (alarms.Actor, func(error), error) {
	a, err := g.h.take(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	return a, func(err error) {
		if err != nil {
			a.close(ctx)
		}
		a.mu.Unlock()
	}, nil
}

// The rest of the plugin's view of an actor (alarms.Actor) is
// alarms.TableActor's: the hold lasts while the actor is open.
func (a *actor) Release(ctx context.Context) { a.close(ctx) }

// RunAlarm delivers the alarm on the host's own instance, with the
// committed backoff, then replicates what the delivery committed.
func (a *actor) RunAlarm(ctx context.Context) (hostmod.Delivery, error) {
	d, err := a.Table.DeliverAlarm(ctx, a.id, a.onAlarm, hostmod.DeliverOptions{})
	if err == nil && d.Ran {
		err = a.h.alarms.p.Replicate(ctx, a, alarms.AfterEvent)
	}
	return d, err
}

// onAlarm calls on-alarm as the host calls any export: with the state of
// its own imports in the context.
func (a *actor) onAlarm(ctx context.Context, params ...uint64) ([]uint64, error) {
	ctx = context.WithValue(ctx, callKey{}, &call{conn: a.conn})
	return a.mod.ExportedFunction(abi.ExportOnAlarm).Call(ctx, params...)
}
