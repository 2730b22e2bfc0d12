package sweeper

import (
	"context"
	"github.com/wasmkeep/alarms/clock"
	"sync"
	"time"
)

// Timer is a node's in-memory schedule of due alarms: at most one time per
// actor, the earliest first. The node fills it from the events it runs, from
// a scan of its data directory at start-up, and from sweeps. It is safe for
// concurrent use.
//
// Set is authoritative (the actor's own committed alarm, known after an
// event); Offer is what a sweep proposes, where a time the timer already
// holds earlier, or one within the retry horizon (the longest backoff: a
// retry in progress), wins.
type Timer struct {
	mu      sync.Mutex
	heap    []timerItem
	index   map[string]int32
	horizon int64 // ms
	wake    chan struct{}
}

type timerItem struct {
	at  int64
	key string
}

// NewTimer returns an empty timer whose Offer keeps held times within
// horizon of now (docs/design.md#sweep: the longest backoff, 5 min).
func NewTimer(horizon time.Duration) *Timer {
	return &Timer{index: make(map[string]int32), horizon: horizon.Milliseconds(), wake: make(chan struct{}, 1)}
}

// Len is the number of actors scheduled.
func (t *Timer) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.heap)
}

// Get returns the time held for key.
func (t *Timer) Get(key string) (atMs int64, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	i, ok := t.index[key]
	if !ok {
		return 0, false
	}
	return t.heap[i].at, true
}

// Set schedules key at atMs, replacing any time held for it.
func (t *Timer) Set(key string, atMs int64) {
	t.mu.Lock()
	t.set(key, atMs)
	t.mu.Unlock()
}

// Offer schedules key at atMs unless the timer holds it at a time that is not
// later, or at a time within the horizon of nowMs (a retry whose backoff a
// sweep must not cut short). It reports whether the offer was taken.
func (t *Timer) Offer(key string, atMs, nowMs int64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if i, ok := t.index[key]; ok {
		held := t.heap[i].at
		if held <= atMs || held <= nowMs+t.horizon {
			return false
		}
	}
	t.set(key, atMs)
	return true
}

// Keeps reports whether the timer holds key at a time that no offer of an
// overdue time (one not after nowMs) can replace: a time not later than
// nowMs plus the horizon (one already due or earlier, or a retry in
// progress). A sweep leaves such actors out of its cap (see
// [PlanInput.Busy]): offering them would change nothing.
func (t *Timer) Keeps(key string, nowMs int64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	i, ok := t.index[key]
	return ok && t.heap[i].at <= nowMs+t.horizon
}

// Remove unschedules key.
func (t *Timer) Remove(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	i, ok := t.index[key]
	if !ok {
		return
	}
	t.removeAt(int(i))
}

// Next returns the earliest time held.
func (t *Timer) Next() (atMs int64, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.heap) == 0 {
		return 0, false
	}
	return t.heap[0].at, true
}

// PopDue removes and returns the earliest entry if it is due at nowMs.
func (t *Timer) PopDue(nowMs int64) (key string, atMs int64, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.heap) == 0 || t.heap[0].at > nowMs {
		return "", 0, false
	}
	it := t.heap[0]
	t.removeAt(0)
	return it.key, it.at, true
}

// Wake returns a channel that is signalled when the earliest time held may
// have become earlier, for a loop of the caller's own over PopDue and
// Next (Run is one): wait on it beside the earliest time's timer.
func (t *Timer) Wake() <-chan struct{} { return t.wake }

// Run pops due entries and hands each to deliver until ctx ends. deliver
// must not block for long (start the delivery and return); it is called
// from Run's goroutine.
func (t *Timer) Run(ctx context.Context, clk clock.Clock, deliver func(key string, atMs int64)) {
	for {
		now := clk.Now().UnixMilli()
		for {
			key, at, ok := t.PopDue(now)
			if !ok {
				break
			}
			deliver(key, at)
		}
		var due <-chan time.Time
		if next, ok := t.Next(); ok {
			due = clk.After(time.Duration(next-now) * time.Millisecond)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.wake:
		case <-due:
		}
	}
}

func (t *Timer) set(key string, at int64) {
	if i, ok := t.index[key]; ok {
		old := t.heap[i].at
		t.heap[i].at = at
		if at < old {
			t.up(int(i))
		} else {
			t.down(int(i))
		}
	} else {
		t.heap = append(t.heap, timerItem{at: at, key: key})
		i := len(t.heap) - 1
		t.index[key] = int32(i)
		t.up(i)
	}
	if t.heap[0].key == key {
		select {
		case t.wake <- struct{}{}:
		default:
		}
	}
}

func (t *Timer) removeAt(i int) {
	last := len(t.heap) - 1
	delete(t.index, t.heap[i].key)
	if i != last {
		t.heap[i] = t.heap[last]
		t.index[t.heap[i].key] = int32(i)
	}
	t.heap[last] = timerItem{}
	t.heap = t.heap[:last]
	if i < len(t.heap) {
		t.down(i)
		t.up(i)
	}
}

func (t *Timer) less(i, j int) bool {
	if t.heap[i].at != t.heap[j].at {
		return t.heap[i].at < t.heap[j].at
	}
	return t.heap[i].key < t.heap[j].key
}

func (t *Timer) swap(i, j int) {
	t.heap[i], t.heap[j] = t.heap[j], t.heap[i]
	t.index[t.heap[i].key] = int32(i)
	t.index[t.heap[j].key] = int32(j)
}

func (t *Timer) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !t.less(i, p) {
			return
		}
		t.swap(i, p)
		i = p
	}
}

func (t *Timer) down(i int) {
	n := len(t.heap)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && t.less(r, l) {
			m = r
		}
		if !t.less(m, i) {
			return
		}
		t.swap(i, m)
		i = m
	}
}

// Under returns the keys the timer holds that start with prefix, and
// their times, in no order (a copy, read under the timer's lock).
func (t *Timer) Under(prefix string) map[string]int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]int64{}
	for _, it := range t.heap {
		if len(it.key) >= len(prefix) && it.key[:len(prefix)] == prefix {
			out[it.key] = it.at
		}
	}
	return out
}
