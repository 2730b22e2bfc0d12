// Package node is the reference host: a node that runs actor classes in
// wazero, one SQLite database per actor under its data directory, with the
// wasmkeep alarm host module, the node timer and delivery with committed
// backoff. It is what the demo and the tests run on.
package node

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/hostmod"
	"github.com/wasmkeep/alarms/sweeper"
)

// Clock is what the node needs of a clock: the time, and a way to wait.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

// DeliveryEvent tells an observer what one alarm delivery did.
type DeliveryEvent struct {
	Actor abi.ActorID
	// TimerAt is the time the timer held; Delivery what the actor did.
	TimerAt  int64
	At       time.Time
	Delivery hostmod.Delivery
	Err      error // a host error: the delivery is retried later
}

// Config configures a Node.
type Config struct {
	// DataDir holds one SQLite file per actor: <tenant>/<class>/<hex name>.db.
	DataDir string
	// Classes maps a class name to its compiled guest (.wasm bytes).
	Classes map[string][]byte
	// Clock defaults to the system clock.
	Clock Clock
	// Logger defaults to a null logger.
	Logger hclog.Logger
	// Engine options (deadlines, backoff, guest output). The clock and the
	// logger are passed on by the node.
	EngineOptions []hostmod.Option
	// RetryMax is the longest backoff; the timer keeps a retry within it
	// against earlier offers from a sweep (default 5 min).
	RetryMax time.Duration
	// HostErrorRetry is how long after a host-side failure (the database)
	// a delivery is tried again (default 5 s).
	HostErrorRetry time.Duration
	// MaxConcurrentDeliveries bounds deliveries in flight (default 64).
	MaxConcurrentDeliveries int
	// OnDelivery, if set, is called after each delivery.
	OnDelivery func(DeliveryEvent)
}

// Node runs actors on one machine.
type Node struct {
	cfg     Config
	log     hclog.Logger
	engine  *hostmod.Engine
	classes map[string]*hostmod.Class
	timer   *sweeper.Timer

	mu       sync.Mutex
	actors   map[abi.ActorID]*hostmod.Actor
	inflight map[string]bool
	closed   bool

	sem    chan struct{}
	wg     sync.WaitGroup
	cancel context.CancelFunc
	loop   chan struct{}
}

type sysClock struct{}

func (sysClock) Now() time.Time                         { return time.Now() }
func (sysClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// New creates a node: it compiles the classes (refusing a guest that breaks
// the ABI) and fills the timer from the alarms found in the data directory.
// Call Start to deliver alarms.
func New(ctx context.Context, cfg Config) (*Node, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("node: DataDir is required")
	}
	if cfg.Clock == nil {
		cfg.Clock = sysClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.RetryMax <= 0 {
		cfg.RetryMax = hostmod.DefaultRetryMax
	}
	if cfg.HostErrorRetry <= 0 {
		cfg.HostErrorRetry = 5 * time.Second
	}
	if cfg.MaxConcurrentDeliveries <= 0 {
		cfg.MaxConcurrentDeliveries = 64
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("node: data directory: %w", err)
	}
	opts := append([]hostmod.Option{hostmod.WithClock(cfg.Clock), hostmod.WithLogger(cfg.Logger)}, cfg.EngineOptions...)
	eng, err := hostmod.NewEngine(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	n := &Node{
		cfg:      cfg,
		log:      cfg.Logger,
		engine:   eng,
		classes:  map[string]*hostmod.Class{},
		timer:    sweeper.NewTimer(cfg.RetryMax),
		actors:   map[abi.ActorID]*hostmod.Actor{},
		inflight: map[string]bool{},
		sem:      make(chan struct{}, cfg.MaxConcurrentDeliveries),
	}
	for name, wasm := range cfg.Classes {
		if err := ValidateClass(name); err != nil {
			eng.Close(ctx)
			return nil, fmt.Errorf("node: %w", err)
		}
		c, err := eng.Compile(ctx, name, wasm)
		if err != nil {
			eng.Close(ctx)
			return nil, fmt.Errorf("node: %w", err)
		}
		n.classes[name] = c
	}
	if err := n.scan(ctx); err != nil {
		eng.Close(ctx)
		return nil, err
	}
	return n, nil
}

// ValidateTenant refuses a tenant that is empty or holds '/' or is "." or "..".
func ValidateTenant(t string) error {
	if t == "" || strings.ContainsAny(t, "/\\\x00") || t == "." || t == ".." {
		return fmt.Errorf("invalid tenant %q: must be non-empty, without '/', and not . or ..", t)
	}
	return nil
}

// ValidateClass refuses a class that is empty or holds '/' or '.'.
func ValidateClass(c string) error {
	if c == "" || strings.ContainsAny(c, "/.\\\x00") {
		return fmt.Errorf("invalid class %q: must be non-empty, without '/' or '.'", c)
	}
	return nil
}

// validate checks an actor identity.
func validate(id abi.ActorID) error {
	if err := ValidateTenant(id.Tenant); err != nil {
		return fmt.Errorf("actor %s: %w", id, err)
	}
	if err := ValidateClass(id.Class); err != nil {
		return fmt.Errorf("actor %s: %w", id, err)
	}
	if id.Name == "" {
		return fmt.Errorf("actor %s: empty name", id)
	}
	return nil
}

// Path is where the actor's database lives under dataDir.
func Path(dataDir string, id abi.ActorID) string {
	return filepath.Join(dataDir, id.Tenant, id.Class, hex.EncodeToString([]byte(id.Name))+".db")
}

// timerKey names an actor in the timer: tenant/class/hex(name).
func timerKey(id abi.ActorID) string {
	return id.Tenant + "/" + id.Class + "/" + hex.EncodeToString([]byte(id.Name))
}

func parseTimerKey(k string) (abi.ActorID, error) {
	parts := strings.SplitN(k, "/", 3)
	if len(parts) != 3 {
		return abi.ActorID{}, fmt.Errorf("malformed timer key %q", k)
	}
	name, err := hex.DecodeString(parts[2])
	if err != nil {
		return abi.ActorID{}, fmt.Errorf("malformed timer key %q: %w", k, err)
	}
	return abi.ActorID{Tenant: parts[0], Class: parts[1], Name: string(name)}, nil
}

// scan fills the timer from the actor databases in the data directory.
func (n *Node) scan(ctx context.Context) error {
	count := 0
	err := filepath.WalkDir(n.cfg.DataDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !strings.HasSuffix(path, ".db") {
			return nil
		}
		rel, _ := filepath.Rel(n.cfg.DataDir, path)
		parts := strings.Split(filepath.ToSlash(rel), "/")
		if len(parts) != 3 {
			n.log.Warn("scan: file outside the <tenant>/<class>/<name>.db layout, skipped", "path", path)
			return nil
		}
		name, herr := hex.DecodeString(strings.TrimSuffix(parts[2], ".db"))
		id := abi.ActorID{Tenant: parts[0], Class: parts[1], Name: string(name)}
		if herr != nil || validate(id) != nil {
			n.log.Warn("scan: malformed actor file name, skipped", "path", path)
			return nil
		}
		st, err := hostmod.OpenStore(path)
		if err != nil {
			return fmt.Errorf("node: scan actor %s: %w", id, err)
		}
		at, ok, err := st.Alarm()
		st.Close()
		if err != nil {
			return fmt.Errorf("node: scan actor %s: read alarm: %w", id, err)
		}
		if ok {
			n.timer.Set(timerKey(id), at)
			count++
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("node: scan %s: %w", n.cfg.DataDir, err)
	}
	n.log.Info("scanned data directory", "dir", n.cfg.DataDir, "alarms", count)
	return nil
}

// Timer exposes the node timer (for sweeps and inspection).
func (n *Node) Timer() *sweeper.Timer { return n.timer }

// Engine exposes the node's engine.
func (n *Node) Engine() *hostmod.Engine { return n.engine }

// Start runs the timer loop until Close.
func (n *Node) Start(ctx context.Context) {
	ctx, n.cancel = context.WithCancel(context.WithoutCancel(ctx))
	n.loop = make(chan struct{})
	go func() {
		defer close(n.loop)
		n.timer.Run(ctx, n.cfg.Clock, func(key string, at int64) { n.startDelivery(ctx, key, at) })
	}()
}

// actor returns the open actor, opening it if needed.
func (n *Node) actor(ctx context.Context, id abi.ActorID) (*hostmod.Actor, error) {
	if err := validate(id); err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, fmt.Errorf("actor %s: node closed", id)
	}
	if a, ok := n.actors[id]; ok {
		return a, nil
	}
	c, ok := n.classes[id.Class]
	if !ok {
		return nil, fmt.Errorf("actor %s: class %q is not served by this node", id, id.Class)
	}
	p := Path(n.cfg.DataDir, id)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return nil, fmt.Errorf("actor %s: %w", id, err)
	}
	a, err := n.engine.Open(ctx, id, c, p)
	if err != nil {
		return nil, err
	}
	n.actors[id] = a
	return a, nil
}

// Request runs a request event on the actor and updates the timer from the
// committed alarm.
func (n *Node) Request(ctx context.Context, id abi.ActorID, body []byte) (hostmod.Result, error) {
	a, err := n.actor(ctx, id)
	if err != nil {
		return hostmod.Result{}, err
	}
	res, err := a.Request(ctx, body)
	if err != nil {
		return res, err
	}
	n.schedule(id, res)
	return res, nil
}

// State reads an actor's committed alarm state.
func (n *Node) State(ctx context.Context, id abi.ActorID) (hostmod.State, error) {
	a, err := n.actor(ctx, id)
	if err != nil {
		return hostmod.State{}, err
	}
	return a.State(ctx)
}

func (n *Node) schedule(id abi.ActorID, r hostmod.Result) {
	if !r.AlarmChanged {
		return
	}
	if r.HasAlarm {
		n.timer.Set(timerKey(id), r.Alarm)
	} else {
		n.timer.Remove(timerKey(id))
	}
}

// startDelivery runs one delivery in the background, one per actor at a time.
func (n *Node) startDelivery(ctx context.Context, key string, at int64) {
	n.mu.Lock()
	if n.closed || n.inflight[key] {
		n.mu.Unlock()
		return
	}
	n.inflight[key] = true
	n.wg.Add(1)
	n.mu.Unlock()
	go func() {
		defer n.wg.Done()
		select {
		case n.sem <- struct{}{}:
		case <-ctx.Done():
			n.doneDelivery(key)
			return
		}
		defer func() { <-n.sem }()
		n.deliver(ctx, key, at)
		n.doneDelivery(key)
	}()
}

func (n *Node) doneDelivery(key string) {
	n.mu.Lock()
	delete(n.inflight, key)
	n.mu.Unlock()
}

// deliver runs the ordinary alarm event and re-arms the timer from the
// committed alarm.
func (n *Node) deliver(ctx context.Context, key string, at int64) {
	ev := DeliveryEvent{TimerAt: at}
	id, err := parseTimerKey(key)
	if err != nil {
		n.log.Error("dropping malformed timer entry", "key", key, "error", err)
		return
	}
	ev.Actor = id
	a, err := n.actor(ctx, id)
	if err == nil {
		ev.Delivery, err = a.DeliverAlarm(ctx)
	}
	ev.At = n.cfg.Clock.Now()
	if err != nil {
		ev.Err = err
		if ctx.Err() == nil {
			n.log.Error("alarm delivery failed; retrying", "actor", id.String(), "after", n.cfg.HostErrorRetry, "error", err)
			n.timer.Offer(key, ev.At.Add(n.cfg.HostErrorRetry).UnixMilli(), ev.At.UnixMilli())
		}
	} else {
		d := ev.Delivery
		if d.HasAlarm {
			n.timer.Set(key, d.Alarm)
		}
		if d.Ran && d.Err != nil {
			n.log.Warn("on-alarm failed; retry committed", "actor", id.String(), "retry_count", d.RetryCount, "next_ms", d.Alarm, "error", d.Err)
		} else if d.Ran {
			n.log.Debug("alarm delivered", "actor", id.String(), "scheduled_ms", d.Scheduled)
		}
	}
	if n.cfg.OnDelivery != nil {
		n.cfg.OnDelivery(ev)
	}
}

// Close stops the timer, waits for deliveries in flight, and closes every
// actor and the engine.
func (n *Node) Close(ctx context.Context) error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	n.mu.Unlock()
	if n.cancel != nil {
		n.cancel()
		<-n.loop
	}
	n.wg.Wait()
	var errs []error
	n.mu.Lock()
	for _, a := range n.actors {
		errs = append(errs, a.Close(ctx))
	}
	n.actors = nil
	n.mu.Unlock()
	errs = append(errs, n.engine.Close(ctx))
	return errors.Join(errs...)
}
