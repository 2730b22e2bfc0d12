// Package guesttest runs a compiled actor guest, in any language, in the
// real host (package engine, on package hostmod, with its SQLite database
// and its committed backoff) on a clock the test moves: send a request, advance
// time and see which alarms fired with their retry counts, read the
// committed alarm and the guest's key/value table, crash and reopen. It is
// to a guest what net/http/httptest is to a handler.
//
// For a Go actor's handlers run natively, without WebAssembly, use the Go
// SDK's wasmkeeptest instead; this package runs the .wasm itself, so it
// tests what the host will run.
package guesttest

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/hostmod"
	"github.com/wasmkeep/alarms/internal/fakeclock"
)

// DefaultStart is the clock's time when New is not given WithTime:
// 2025-01-01T00:00:00Z, as the SDKs' fakes start.
var DefaultStart = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// DefaultActor is the actor's identity when New is not given WithActor.
var DefaultActor = abi.ActorID{Tenant: "tenant", Class: "class", Name: "actor"}

// Firing is one delivery of the alarm.
type Firing struct {
	// Scheduled and RetryCount are what on-alarm was called with.
	Scheduled  time.Time
	RetryCount int
	// At is the clock when it ran.
	At time.Time
	// Err is nil when the handler succeeded, else why it failed (the
	// host then committed a retry on its backoff).
	Err error
}

// Option configures a Guest.
type Option func(*Guest)

// WithTime starts the clock at t.
func WithTime(t time.Time) Option { return func(g *Guest) { g.start = t } }

// WithActor sets the actor's identity (its class names the compiled guest).
func WithActor(id abi.ActorID) Option { return func(g *Guest) { g.id = id } }

// WithEngineOptions passes options to the host module's engine (for
// example engine.WithMaxAttempts); the clock is the Guest's own.
func WithEngineOptions(opts ...engine.Option) Option {
	return func(g *Guest) { g.engOpts = append(g.engOpts, opts...) }
}

// T is what a Guest needs of its test: *testing.T and *testing.B have it.
type T interface {
	Helper()
	Fatalf(format string, args ...any)
	TempDir() string
	Cleanup(func())
}

// Guest is one actor of a compiled guest in the real host module. Its
// methods fail the test on a host error (not on a guest's: those are
// returned), and are not safe for concurrent use.
type Guest struct {
	tb      T
	ctx     context.Context
	wasm    []byte
	id      abi.ActorID
	path    string
	engOpts []engine.Option
	start   time.Time
	clock   *fakeclock.Clock
	eng     *engine.Engine
	actor   *engine.Actor
	firings []Firing
}

// New compiles wasm, opens its actor on a fresh database in a temporary
// directory, and closes both when the test ends.
func New(tb T, wasm []byte, opts ...Option) *Guest {
	tb.Helper()
	g := &Guest{tb: tb, ctx: context.Background(), wasm: wasm, id: DefaultActor,
		path: filepath.Join(tb.TempDir(), "actor.db"), start: DefaultStart}
	for _, o := range opts {
		o(g)
	}
	g.clock = fakeclock.New(g.start)
	g.open()
	tb.Cleanup(g.close)
	return g
}

func (g *Guest) open() {
	g.tb.Helper()
	eng, err := engine.NewEngine(g.ctx, append([]engine.Option{engine.WithClock(g.clock)}, g.engOpts...)...)
	if err != nil {
		g.tb.Fatalf("guesttest: %v", err)
	}
	c, err := eng.Compile(g.ctx, g.id.Class, g.wasm)
	if err == nil {
		g.actor, err = eng.Open(g.ctx, g.id, c, g.path)
	}
	if err != nil {
		eng.Close(g.ctx)
		g.tb.Fatalf("guesttest: %v", err)
	}
	g.eng = eng
}

func (g *Guest) close() {
	if g.eng != nil {
		g.actor.Close(g.ctx)
		g.eng.Close(g.ctx)
		g.eng, g.actor = nil, nil
	}
}

// Restart closes the actor and the engine, as a crash between events
// would leave them, and opens the actor again from its database: only what
// committed survives, the alarm and its retry count included.
func (g *Guest) Restart() {
	g.tb.Helper()
	g.close()
	g.open()
}

// Request runs on-request with body and returns the response, or the
// guest's error (its writes then rolled back).
func (g *Guest) Request(body []byte) ([]byte, error) {
	r, err := g.actor.Request(g.ctx, body)
	return r.Response, err
}

// Now is the clock.
func (g *Guest) Now() time.Time { return g.clock.Now() }

// Alarm is the committed alarm.
func (g *Guest) Alarm() (time.Time, bool) {
	s := g.state()
	if s.Alarm == nil {
		return time.UnixMilli(0).UTC(), false
	}
	return time.UnixMilli(*s.Alarm).UTC(), true
}

// RetryCount is the committed count of failed attempts at the alarm: what
// its next delivery receives.
func (g *Guest) RetryCount() int { return g.state().Failures }

// Get is the committed value under key in the guest's key/value table.
func (g *Guest) Get(key string) ([]byte, bool) {
	g.tb.Helper()
	var v []byte
	var ok bool
	if err := g.actor.Lock(func(st *engine.Store) (err error) {
		v, ok, err = st.KVGet([]byte(key))
		return err
	}); err != nil {
		g.tb.Fatalf("guesttest: %v", err)
	}
	return v, ok
}

// Firings is every delivery so far, oldest first.
func (g *Guest) Firings() []Firing { return append([]Firing(nil), g.firings...) }

// Advance moves the clock forward by d, delivering the alarm each time it
// falls due on the way (retries included), at its time, and returns those
// deliveries. Advance(0) delivers an alarm already due.
func (g *Guest) Advance(d time.Duration) []Firing {
	g.tb.Helper()
	target := g.clock.Now().Add(d)
	var out []Firing
	for {
		s := g.state()
		if s.Alarm == nil || *s.Alarm > target.UnixMilli() {
			break
		}
		if len(out) == 10_000 {
			g.tb.Fatalf("guesttest: 10000 deliveries in one Advance: does on-alarm set its alarm for now again and again?")
		}
		g.clock.Advance(time.UnixMilli(*s.Alarm).Sub(g.clock.Now())) // to the alarm's time, if later
		d, err := g.actor.DeliverAlarm(g.ctx)
		if err != nil {
			g.tb.Fatalf("guesttest: delivering the alarm: %v", err)
		}
		out = append(out, Firing{Scheduled: time.UnixMilli(d.Scheduled).UTC(), RetryCount: d.RetryCount, At: g.clock.Now(), Err: d.Err})
	}
	g.clock.Advance(target.Sub(g.clock.Now()))
	g.firings = append(g.firings, out...)
	return out
}

// Down moves the clock forward by d without delivering anything, as if the
// actor's node were down; the next Advance delivers what fell due, late.
func (g *Guest) Down(d time.Duration) { g.clock.Advance(d) }

func (g *Guest) state() hostmod.State {
	g.tb.Helper()
	s, err := g.actor.State(g.ctx)
	if err != nil {
		g.tb.Fatalf("guesttest: %v", err)
	}
	return s
}

// String names the actor, for messages.
func (g *Guest) String() string { return fmt.Sprintf("guesttest actor %s", g.id) }
