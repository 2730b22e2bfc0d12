package node_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/internal/testguest"
	"github.com/wasmkeep/alarms/node"
)

// lockedBuffer is a log's output, read while the node writes it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// One dead letter is one line of the node's log, at ERROR, naming the
// actor, the attempts and the error: not a WARN of the engine's beside
// the plugin's ERROR, which an operator counting errors reads as two.
func TestADeadLetterIsLoggedOnce(t *testing.T) {
	ctx := context.Background()
	var out lockedBuffer
	var gaveUp atomic.Int64
	n := newNode(t, t.TempDir(), map[string][]byte{"f": testguest.Fixture(t, "fail_on_alarm")}, node.Config{
		Logger:        hclog.New(&hclog.LoggerOptions{Name: "n", Level: hclog.Info, Output: &out}),
		EngineOptions: []engine.Option{engine.WithMaxAttempts(1), engine.WithBackoff(time.Second, time.Minute)},
		OnDelivery: func(ev node.DeliveryEvent) {
			if ev.Event.GaveUp {
				gaveUp.Add(1)
			}
		},
	})
	defer n.Close(ctx)
	n.Start(ctx)
	id := abi.ActorID{Tenant: "t", Class: "f", Name: "poison"}
	if _, err := n.Request(ctx, id, nil); err != nil { // its alarm at 1000 ms, due at once
		t.Fatal(err)
	}
	waitFor(t, "the alarm's only attempt to fail", func() bool { return gaveUp.Load() == 1 })
	var lines []string
	for l := range strings.Lines(out.String()) {
		if strings.Contains(l, "last attempt") || strings.Contains(l, "given up") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 {
		t.Fatalf("the dead letter is logged in %d lines, want 1:\n%s", len(lines), strings.Join(lines, ""))
	}
	for _, want := range []string{"[ERROR]", "actor=t/f/poison", "attempts=1", "error="} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("the dead letter's line lacks %q: %s", want, lines[0])
		}
	}
}
