package cluster

import (
	"context"
	"sort"
	"sync"
	"time"
)

// Clock is the time source of node leases. Leases measure every interval
// (a lease's validity, how long another node's lease has stood unchanged)
// by subtracting two readings of this clock, never by comparing wall-clock
// readings of two machines; [SystemClock]'s readings carry Go's monotonic
// clock, so a wall-clock step does not move them.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// After returns a channel that receives the time once d has passed.
	After(d time.Duration) <-chan time.Time
}

// SystemClock is the real clock.
type SystemClock struct{}

// Now returns time.Now(), which carries a monotonic reading.
func (SystemClock) Now() time.Time { return time.Now() }

// After is time.After.
func (SystemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// FakeClock is a Clock for tests: time stands still until Advance moves it.
// It is safe for concurrent use.
type FakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []fakeWaiter
}

type fakeWaiter struct {
	at time.Time
	ch chan time.Time
}

// NewFakeClock returns a FakeClock reading start.
func NewFakeClock(start time.Time) *FakeClock {
	return &FakeClock{now: start}
}

// Now returns the fake time.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After returns a channel that receives the fake time once Advance has moved
// it by at least d. A d of zero or less fires at once.
func (c *FakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, fakeWaiter{at: c.now.Add(d), ch: ch})
	return ch
}

// Advance moves the fake time forward by d (a negative d is ignored) and
// fires the After channels that have come due, earliest first.
func (c *FakeClock) Advance(d time.Duration) {
	if d < 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	sort.SliceStable(c.waiters, func(i, j int) bool { return c.waiters[i].at.Before(c.waiters[j].at) })
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if w.at.After(c.now) {
			kept = append(kept, w)
			continue
		}
		w.ch <- c.now
	}
	c.waiters = kept
}

// Waiting returns how many After channels wait to fire and the earliest
// time one of them fires (the zero time when none waits): a test that runs
// loops on the clock knows they are all idle when as many wait as there
// are loops, and moves the time straight to the next event.
func (c *FakeClock) Waiting() (n int, next time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.waiters {
		if next.IsZero() || w.at.Before(next) {
			next = w.at
		}
	}
	return len(c.waiters), next
}

// Sleep advances the fake time by d at once. It has the signature of
// bucket.Mem's Sleep hook, so a delayed request to an in-memory bucket
// takes fake time; it fails only if ctx has already ended.
func (c *FakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.Advance(d)
	return nil
}
