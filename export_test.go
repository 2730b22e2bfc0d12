package alarms

import (
	"context"
	"time"

	"github.com/wasmkeep/alarms/internal/variant"
)

// WithVariants returns cfg with the safety rules in v turned off, for tests
// that show a rule is needed.
func WithVariants(cfg Config, v variant.Set) Config {
	cfg.variants = v
	return cfg
}

// Workers returns how many delivery workers the timer loop has running.
func (p *Plugin) Workers() int {
	p.schedMu.Lock()
	defer p.schedMu.Unlock()
	return p.workers
}

// DeliverDue delivers one alarm the node timer popped (key is a TimerKey)
// as a worker of the timer loop does, on the calling goroutine.
func (p *Plugin) DeliverDue(ctx context.Context, key string, at int64) Delivery {
	return p.deliverDue(ctx, key, at)
}

// RunTimer runs the timer loop alone until ctx ends (Start runs it with
// the sweeps).
func (p *Plugin) RunTimer(ctx context.Context) { p.runTimer(ctx, ctx) }

// BeforeUpload is Replicate split around the upload, as package engine
// runs it (internal/seam).
func (p *Plugin) BeforeUpload(ctx context.Context, a Actor, kind UploadKind) (after func(context.Context) error, err error) {
	return p.beforeUpload(ctx, a, kind)
}

// RunSweeps runs the sweep loop alone until ctx ends (Start runs it with
// the timer loop).
func (p *Plugin) RunSweeps(ctx context.Context) { p.runSweeps(ctx) }

// Pending is what the sweep reads as the deliveries the node has yet to
// end (sweeper.Config.Pending).
func (p *Plugin) Pending() int { return p.pending() }

// SetGrowAfter sets how long the delivery workers may take no delivery
// before a new one starts past the processors, until restore.
func SetGrowAfter(d time.Duration) (restore func()) {
	old := growAfter
	growAfter = d
	return func() { growAfter = old }
}
