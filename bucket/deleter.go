package bucket

import (
	"context"
	"sync"
	"time"
)

// DefaultDeleteWindow is how long a Deleter gathers keys before it sends
// them.
const DefaultDeleteWindow = 100 * time.Millisecond

// Deleter gathers keys to delete and sends them together with DeleteBatch:
// once MaxDeleteBatch keys wait, or a window after the first of them
// arrived. S3 charges by request, and a node that replaces an index entry
// and a snapshot on every alarm firing would otherwise send two DELETEs per
// firing.
//
// A key handed to Delete reaches the store later than it would have with a
// DELETE sent at once, or never if the process dies first: only keys whose
// deletion may land late, or not at all, belong here. It is safe for
// concurrent use.
type Deleter struct {
	b      Bucket
	window time.Duration
	onErr  func(keys []string, err error)

	mu       sync.Mutex
	idle     sync.Cond // signalled when inflight drops to zero
	pending  []string
	timer    *time.Timer
	inflight int // requests under way
}

// NewDeleter returns a Deleter on b that gathers keys for window (at most;
// DefaultDeleteWindow if not positive). onErr, if not nil, is called with
// the keys of a request that failed, and its error.
func NewDeleter(b Bucket, window time.Duration, onErr func(keys []string, err error)) *Deleter {
	if window <= 0 {
		window = DefaultDeleteWindow
	}
	d := &Deleter{b: b, window: window, onErr: onErr}
	d.idle.L = &d.mu
	return d
}

// Delete queues key for deletion and returns at once.
func (d *Deleter) Delete(key string) {
	d.mu.Lock()
	d.pending = append(d.pending, key)
	switch {
	case len(d.pending) >= MaxDeleteBatch:
		batch := d.take()
		d.inflight++
		d.mu.Unlock()
		go d.send(context.Background(), batch)
		return
	case d.timer == nil:
		d.timer = time.AfterFunc(d.window, d.expire)
	}
	d.mu.Unlock()
}

// take returns the pending keys and stops the window (d.mu held).
func (d *Deleter) take() []string {
	batch := d.pending
	d.pending = nil
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
	return batch
}

func (d *Deleter) expire() {
	d.mu.Lock()
	batch := d.take()
	if len(batch) == 0 {
		d.mu.Unlock()
		return
	}
	d.inflight++
	d.mu.Unlock()
	d.send(context.Background(), batch)
}

// send sends one batch counted in inflight.
func (d *Deleter) send(ctx context.Context, keys []string) {
	if _, err := d.b.DeleteBatch(ctx, keys); err != nil && d.onErr != nil {
		d.onErr(keys, err)
	}
	d.mu.Lock()
	d.inflight--
	if d.inflight == 0 {
		d.idle.Broadcast()
	}
	d.mu.Unlock()
}

// Flush sends the keys waiting now and returns once they and every request
// already under way have been answered.
func (d *Deleter) Flush(ctx context.Context) {
	d.mu.Lock()
	batch := d.take()
	if len(batch) > 0 {
		d.inflight++
		d.mu.Unlock()
		d.send(ctx, batch)
		d.mu.Lock()
	}
	for d.inflight > 0 {
		d.idle.Wait()
	}
	d.mu.Unlock()
}

// Pending returns how many keys wait to be sent.
func (d *Deleter) Pending() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.pending)
}
