// Package clock is the one clock interface of the module: the plugin, its
// sweep and node timer, the node leases, the reference node, the host
// module and the engine (these two read only Now) all take a [Clock], and
// [System] is the real one. Tests move a clock of their own
// (the module's tests use one that stands still until moved).
//
// Intervals are measured by subtracting two readings of one clock, never by
// comparing readings of two machines; [System]'s readings carry Go's
// monotonic clock, so a step of the wall clock does not move them.
package clock

import "time"

// Clock gives the time and a way to wait on it.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// After returns a channel that receives the time once d has passed.
	After(d time.Duration) <-chan time.Time
}

// System is the real clock.
type System struct{}

// Now returns time.Now(), which carries a monotonic reading.
func (System) Now() time.Time { return time.Now() }

// After is time.After.
func (System) After(d time.Duration) <-chan time.Time { return time.After(d) }
