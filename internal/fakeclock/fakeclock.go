// Package fakeclock is the clock of the tests and the simulator: time
// stands still until the test moves it. It is kept out of the production
// packages' APIs.
package fakeclock

import (
	"context"
	"sort"
	"sync"
	"time"
)

// Clock is a clock for tests (a clock.Clock, for the leases, the sweeper,
// the plugin and the node): time stands still until Advance moves it. It
// is safe for concurrent use.
type Clock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []fakeWaiter
}

type fakeWaiter struct {
	at time.Time
	ch chan time.Time
}

// New returns a Clock reading start.
func New(start time.Time) *Clock {
	return &Clock{now: start}
}

// Now returns the fake time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After returns a channel that receives the fake time once Advance has moved
// it by at least d. A d of zero or less fires at once.
func (c *Clock) After(d time.Duration) <-chan time.Time {
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
func (c *Clock) Advance(d time.Duration) {
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
func (c *Clock) Waiting() (n int, next time.Time) {
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
func (c *Clock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.Advance(d)
	return nil
}
