package bucket

import (
	"context"
	"errors"
	"sync"
	"time"
)

// DefaultDeleteWindow is how long a Deleter gathers keys before it sends
// them.
const DefaultDeleteWindow = 100 * time.Millisecond

// DefaultDeleteRetries is how many times a Deleter sends a key again after
// a request that did not remove it, and DefaultDeleteRetryDelay the pause
// before the first of them (each next pause is four times longer: 1 s, 4 s
// and 16 s, so the last attempt goes about 21 s after the first).
const (
	DefaultDeleteRetries    = 3
	DefaultDeleteRetryDelay = time.Second
)

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
//
// A key the store did not remove (the request failed, or the store named
// the key as not deleted) is sent again, up to DefaultDeleteRetries times
// (see SetRetries): a retry is one more delete that lands late. Only when
// the last attempt fails is it handed to onErr.
//
// Several users of one bucket can share a Deleter's batches through Sub,
// each under its own key prefix and with its own error callback.
type Deleter struct {
	root   *Deleter // the Deleter whose batches this one's keys join (itself for NewDeleter's)
	prefix string   // added to each key given to Delete (a Sub's)
	onErr  func(keys []string, err error)

	// The rest is used in root only.
	b          Bucket
	window     time.Duration
	mu         sync.Mutex
	idle       sync.Cond // signalled when inflight drops to zero
	pending    []delKey
	timer      *time.Timer
	inflight   int // requests under way
	retries    int
	retryDelay time.Duration
	waiting    map[*time.Timer][]delKey // keys paused before a retry
}

// delKey is a key to delete (in full), how many requests carried it
// already, and the Deleter it was given to.
type delKey struct {
	key   string
	tries int
	by    *Deleter
}

// NewDeleter returns a Deleter on b that gathers keys for window (at most;
// DefaultDeleteWindow if not positive). onErr, if not nil, is called with
// the keys the store did not remove on any attempt, and the last error.
func NewDeleter(b Bucket, window time.Duration, onErr func(keys []string, err error)) *Deleter {
	if window <= 0 {
		window = DefaultDeleteWindow
	}
	d := &Deleter{b: b, window: window, onErr: onErr,
		retries: DefaultDeleteRetries, retryDelay: DefaultDeleteRetryDelay,
		waiting: map[*time.Timer][]delKey{}}
	d.root = d
	d.idle.L = &d.mu
	return d
}

// Sub returns a Deleter that puts prefix+key, for each key given to its
// Delete, in d's batches (a request carries the keys of every Deleter that
// shares them, up to MaxDeleteBatch), and hands its own keys that could
// not be deleted, prefix cut off, to onErr (nil: to nobody) rather than to
// d's callback. Flush, Pending and SetRetries act on the shared batches. A
// host and its alarm plugin share one this way: one multi-object request
// per window for the replaced snapshots and the replaced index entries
// together.
func (d *Deleter) Sub(prefix string, onErr func(keys []string, err error)) *Deleter {
	return &Deleter{root: d.root, prefix: d.prefix + prefix, onErr: onErr}
}

// SetRetries sets how many times a key the store did not remove is sent
// again (0: never) and the pause before the first retry (each next one is
// four times longer). Call it before the first Delete.
func (d *Deleter) SetRetries(n int, first time.Duration) {
	d = d.root
	d.mu.Lock()
	defer d.mu.Unlock()
	d.retries, d.retryDelay = max(n, 0), first
}

// Delete queues key for deletion and returns at once.
func (d *Deleter) Delete(key string) {
	k := delKey{key: d.prefix + key, by: d}
	d = d.root
	d.mu.Lock()
	d.queue(k)
	d.mu.Unlock()
}

// queue adds k to the pending keys and sends a full batch, or starts the
// window (d.mu held, d a root).
func (d *Deleter) queue(k delKey) {
	d.pending = append(d.pending, k)
	switch {
	case len(d.pending) >= MaxDeleteBatch:
		batch := d.take()
		d.inflight++
		go d.send(context.Background(), batch)
	case d.timer == nil:
		d.timer = time.AfterFunc(d.window, d.expire)
	}
}

// take returns the pending keys and stops the window (d.mu held, d a root).
func (d *Deleter) take() []delKey {
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

// send sends one batch counted in inflight; keys it did not remove are
// paused for a retry, or handed to their Deleter's onErr after the last
// (d a root).
func (d *Deleter) send(ctx context.Context, batch []delKey) {
	keys := make([]string, len(batch))
	for i, k := range batch {
		keys[i] = k.key
	}
	_, err := d.b.DeleteBatch(ctx, keys)
	var gaveUp []delKey
	d.mu.Lock()
	if err != nil {
		var be *BatchError
		failed := func(string) bool { return true } // the request failed as a whole
		if errors.As(err, &be) {
			failed = func(k string) bool { _, ok := be.Failed[k]; return ok }
		}
		again := map[int][]delKey{} // by tries: one pause each
		for _, k := range batch {
			switch {
			case !failed(k.key):
			case k.tries < d.retries:
				k.tries++
				again[k.tries] = append(again[k.tries], k)
			default:
				gaveUp = append(gaveUp, k)
			}
		}
		for _, ks := range again {
			d.pause(ks)
		}
	}
	d.mu.Unlock()
	report(gaveUp, err)
	d.mu.Lock()
	d.inflight--
	if d.inflight == 0 {
		d.idle.Broadcast()
	}
	d.mu.Unlock()
}

// pause queues keys again after the pause their tries call for (d.mu
// held; all of them carry the same tries, at least 1).
func (d *Deleter) pause(keys []delKey) {
	delay := d.retryDelay
	for range keys[0].tries - 1 {
		delay *= 4
	}
	var t *time.Timer
	t = time.AfterFunc(delay, func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		ks, ok := d.waiting[t]
		if !ok {
			return // Flush took them
		}
		delete(d.waiting, t)
		for _, k := range ks {
			d.queue(k)
		}
	})
	d.waiting[t] = keys
}

// report hands each Deleter its keys given up on, in the order they were
// queued, without its prefix.
func report(gaveUp []delKey, err error) {
	var order []*Deleter
	mine := map[*Deleter][]string{}
	for _, k := range gaveUp {
		if k.by.onErr == nil {
			continue
		}
		if _, seen := mine[k.by]; !seen {
			order = append(order, k.by)
		}
		mine[k.by] = append(mine[k.by], k.key[len(k.by.prefix):])
	}
	for _, by := range order {
		by.onErr(mine[by], err)
	}
}

// Flush sends the keys waiting now, those paused before a retry included,
// and returns once they and every request already under way have been
// answered.
func (d *Deleter) Flush(ctx context.Context) {
	d = d.root
	d.mu.Lock()
	for t, ks := range d.waiting {
		t.Stop()
		delete(d.waiting, t)
		d.pending = append(d.pending, ks...)
	}
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

// Pending returns how many keys wait to be sent, those paused before a
// retry included.
func (d *Deleter) Pending() int {
	d = d.root
	d.mu.Lock()
	defer d.mu.Unlock()
	n := len(d.pending)
	for _, ks := range d.waiting {
		n += len(ks)
	}
	return n
}
