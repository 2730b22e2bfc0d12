package engine_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/hostmod"
	"github.com/wasmkeep/alarms/internal/testguest"
)

type stillClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stillClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

// After is never called: the host module and the engine wait on no clock.
func (c *stillClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
func (c *stillClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// A guest's stderr reaches the node's log with the actor's name, at most
// GuestLogBurst lines at once and GuestLogRate a second after that (the
// rest counted and reported); a failed request's error carries the last
// line the guest wrote during that event (the Go SDK writes the error its
// handler returned).
func TestGuestOutputGoesToTheLogAndIntoTheError(t *testing.T) {
	ctx := context.Background()
	clock := &stillClock{now: time.UnixMilli(1_800_000_000_000)}
	eng, class, logs := loggedCounter(t, engine.WithClock(clock))
	id := abi.ActorID{Tenant: "t", Class: "counter", Name: "loud"}
	a, err := eng.Open(ctx, id, class, filepath.Join(t.TempDir(), "a.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)

	_, err = a.Request(ctx, []byte("explode"))
	var ge *hostmod.GuestError
	if !errors.As(err, &ge) || !strings.Contains(ge.Said, `unknown command "explode"`) || !strings.Contains(err.Error(), "the guest said: ") {
		t.Fatalf("a failed request: %v (said %q), want the guest's error line in it", err, ge.Said)
	}
	if _, err := a.Request(ctx, []byte("get")); err != nil {
		t.Fatal(err)
	}
	_, err = a.Request(ctx, []byte("start -1"))
	if !errors.As(err, &ge) || !strings.Contains(ge.Said, "positive interval") || strings.Contains(ge.Said, "explode") {
		t.Fatalf("the next failed request: %v, want its own line only", err)
	}

	count := func(s string) int { return strings.Count(logs.String(), s) }
	if n := count("guest stderr: actor=t/counter/loud"); n != 2 {
		t.Fatalf("%d guest lines logged with the actor's name, want 2:\n%s", n, logs.String())
	}
	for range engine.GuestLogBurst + 10 {
		_, _ = a.Request(ctx, []byte("explode"))
	}
	if n := count("guest stderr: actor="); n != engine.GuestLogBurst {
		t.Fatalf("%d lines logged in a burst, want the limit %d", n, engine.GuestLogBurst)
	}
	clock.advance(time.Second)
	_, _ = a.Request(ctx, []byte("explode"))
	if n := count("guest stderr: actor="); n != engine.GuestLogBurst+1 || count("guest output dropped over the rate limit: actor=t/counter/loud stream=stderr lines=12") != 1 {
		t.Fatalf("after a second: %d lines, want %d, and the 12 dropped reported:\n%s", n, engine.GuestLogBurst+1, logs.String())
	}
}

// lockedBuffer is a buffer the logger writes to from any goroutine.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// bufferLogger is an Info logger whose lines are kept in a buffer.
func bufferLogger() (hclog.Logger, *lockedBuffer) {
	logs := &lockedBuffer{}
	return hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Info}), logs
}

// loggedCounter returns an engine that logs into the returned buffer
// (with opts), closed when the test ends, and the Go counter class
// compiled on it.
func loggedCounter(t *testing.T, opts ...engine.Option) (*engine.Engine, *engine.Class, *lockedBuffer) {
	t.Helper()
	ctx := context.Background()
	logger, logs := bufferLogger()
	eng, err := engine.NewEngine(ctx, append([]engine.Option{engine.WithLogger(logger)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close(ctx) })
	class, err := eng.Compile(ctx, "counter", testguest.Build(t, "examples/counter-actor"))
	if err != nil {
		t.Fatal(err)
	}
	return eng, class, logs
}

// Each actor's output goes to its own stream, however its instances
// interleave: two actors of one class that fail in turn each carry their
// own line in the error, and the log names the actor that wrote it.
func TestEachActorsOutputIsItsOwn(t *testing.T) {
	ctx := context.Background()
	eng, class, logs := loggedCounter(t)
	dir := t.TempDir()
	var actors [2]*engine.Actor
	for i, name := range []string{"a", "b"} {
		a, err := eng.Open(ctx, abi.ActorID{Tenant: "t", Class: "counter", Name: name}, class, filepath.Join(dir, name+".db"))
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close(ctx)
		actors[i] = a
	}
	for round := range 3 {
		for i, a := range actors {
			cmd := "explode-" + a.ID().Name
			_, err := a.Request(ctx, []byte(cmd))
			var ge *hostmod.GuestError
			if !errors.As(err, &ge) {
				t.Fatalf("round %d, actor %d: %v, want the guest's error", round, i, err)
			}
			if !strings.Contains(ge.Said, `"`+cmd+`"`) {
				t.Fatalf("round %d, actor %d said %q, want its own line %q", round, i, ge.Said, cmd)
			}
			if other := "explode-" + actors[1-i].ID().Name; strings.Contains(ge.Said, other) {
				t.Fatalf("round %d, actor %d said %q: the other actor's line", round, i, ge.Said)
			}
		}
	}
	lines := 0
	for _, line := range strings.Split(logs.String(), "\n") {
		if !strings.Contains(line, "guest stderr: ") {
			continue
		}
		lines++
		for _, name := range []string{"a", "b"} {
			if strings.Contains(line, "actor=t/counter/"+name+" ") != strings.Contains(line, "explode-"+name) {
				t.Fatalf("a line logged under the wrong actor: %s", line)
			}
		}
	}
	if lines != 6 {
		t.Fatalf("%d guest lines logged, want 6:\n%s", lines, logs.String())
	}
}
