package cluster

import "time"

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
