// Command minihost is a minimal host of the alarms plugin, written only
// against the module's public API: one process, a wazero runtime of its
// own, and a bucket (S3 or in memory) for the alarm index and a replica of
// each actor. Its local databases are the truth and it holds every actor
// (generation 1, for ever): a single node, delivering through the index.
package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/tetratelabs/wazero"

	"github.com/wasmkeep/alarms"
	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/hostmod"
	"github.com/wasmkeep/alarms/sweeper"
)

// Host runs the actors of one class.
type Host struct {
	rt      wazero.Runtime
	eng     *hostmod.Engine
	class   *hostmod.Class
	b       bucket.Bucket
	dir     string
	tenants []string
	p       *alarms.Plugin
	cancel  context.CancelFunc
	done    chan struct{}
	mu      sync.Mutex
	actors  map[abi.ActorID]*actor
}

// New starts a host running class (wasm) with its databases under dir.
func New(ctx context.Context, b bucket.Bucket, dir, class string, wasm []byte, tenants []string, margin, sweep time.Duration, onDelivery func(alarms.Delivered)) (*Host, error) {
	h := &Host{b: b, dir: dir, tenants: tenants, actors: map[abi.ActorID]*actor{}, done: make(chan struct{})}
	h.rt = wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCloseOnContextDone(true))
	var err error
	if h.eng, err = hostmod.NewEngine(ctx, hostmod.WithRuntime(h.rt)); err == nil {
		h.class, err = h.eng.Compile(ctx, class, wasm)
	}
	if err == nil {
		h.p, err = alarms.Register(alarms.Config{Bucket: b, Host: h, Timer: sweeper.NewTimer(hostmod.DefaultRetryMax), Margin: margin,
			SweepPeriod: sweep, OnDelivery: onDelivery, Serves: func(c string) bool { return c == class }})
	}
	if err != nil {
		h.rt.Close(ctx)
		return nil, err
	}
	ctx, h.cancel = context.WithCancel(context.WithoutCancel(ctx))
	go func() { defer close(h.done); go h.p.RunSweeps(ctx); h.p.RunTimer(ctx, h) }()
	return h, nil
}

// Request runs a request event on the actor and replicates it before it
// returns.
func (h *Host) Request(ctx context.Context, id abi.ActorID, body []byte) ([]byte, error) {
	a, err := h.take(ctx, id)
	if err != nil {
		return nil, err
	}
	defer a.mu.Unlock()
	res, err := a.a.Request(ctx, body)
	if err == nil {
		err = h.p.Replicate(ctx, a, alarms.AfterEvent) // PUT, record, Upload, hold check, DELETE
	}
	if err != nil {
		return nil, err
	}
	h.p.ArmEvent(id, res) // the timer follows the committed alarm
	return res.Response, nil
}

// Close stops the loops and closes every actor and the runtime.
func (h *Host) Close(ctx context.Context) error {
	h.cancel()
	<-h.done
	for _, a := range h.actors {
		a.mu.Lock()
		a.close(ctx)
		a.mu.Unlock()
	}
	h.eng.Close(ctx)
	return h.rt.Close(ctx)
}

// take returns the actor locked and open.
func (h *Host) take(ctx context.Context, id abi.ActorID) (*actor, error) {
	h.mu.Lock()
	a := h.actors[id]
	if a == nil {
		a = &actor{h: h, id: id}
		h.actors[id] = a
	}
	h.mu.Unlock()
	a.mu.Lock()
	if a.a != nil {
		return a, nil
	}
	_, _, err := h.b.Get(ctx, a.key())
	if a.bucketHad = err == nil; errors.Is(err, bucket.ErrNotFound) {
		err = nil
	}
	p := filepath.Join(h.dir, filepath.FromSlash(id.Path())+".db")
	if err == nil {
		err = os.MkdirAll(filepath.Dir(p), 0o755)
	}
	if err == nil {
		a.a, err = h.eng.Open(ctx, id, h.class, p)
	}
	if err != nil {
		a.mu.Unlock()
		return nil, err
	}
	return a, nil
}

// The plugin's view of the host (alarms.Host, alarms.Taker).
func (h *Host) Now() time.Time                              { return time.Now() }
func (h *Host) After(d time.Duration) <-chan time.Time      { return time.After(d) }
func (h *Host) Self() string                                { return "minihost" }
func (h *Host) LiveNodes(context.Context) ([]string, error) { return []string{h.Self()}, nil }
func (h *Host) Tenants(context.Context) ([]string, error)   { return h.tenants, nil }
func (h *Host) Take(ctx context.Context, id abi.ActorID) (alarms.Taken, error) {
	return h.take(ctx, id)
}

// actor is an actor as the plugin sees it (alarms.Actor, alarms.Taken).
type actor struct {
	h                   *Host
	id                  abi.ActorID
	mu                  sync.Mutex
	a                   *hostmod.Actor
	uploaded, bucketHad bool
}

func (a *actor) key() string          { return "state/" + alarms.TimerKey(a.id) }
func (a *actor) ID() abi.ActorID      { return a.id }
func (a *actor) Generation() uint64   { return 1 }
func (a *actor) HoldValid() bool      { return a.a != nil }
func (a *actor) Uploaded() bool       { return a.uploaded }
func (a *actor) BucketHadActor() bool { return a.bucketHad }

func (a *actor) Read(ctx context.Context) (alarms.ActorState, error) {
	return alarms.ReadHostmod(ctx, a.a)
}
func (a *actor) WriteMeta(ctx context.Context, k, v string) error {
	return alarms.WriteHostmodMeta(ctx, a.a, k, v)
}

func (a *actor) Upload(ctx context.Context) error {
	data, err := a.a.Snapshot(ctx)
	if err == nil {
		_, err = a.h.b.Put(ctx, a.key(), data, bucket.Cond{})
	}
	a.uploaded = a.uploaded || err == nil
	return err
}

// RunAlarm runs the alarm event and replicates it: the plugin PUTs the
// entry for the alarm the event leaves before the event commits, records
// it in the event's own transaction, and has Upload called once it did.
func (a *actor) RunAlarm(ctx context.Context) (hostmod.Delivery, error) {
	return a.h.p.RunHostmodAlarm(ctx, a, a.a, alarms.AfterEvent)
}

func (a *actor) Release(ctx context.Context) { a.close(ctx) }

func (a *actor) Done(context.Context, error) { a.mu.Unlock() }

func (a *actor) close(ctx context.Context) {
	if a.a != nil {
		a.a.Close(ctx)
		a.a = nil
	}
}
