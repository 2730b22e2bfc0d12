package node

import (
	"context"
	"time"

	"github.com/wasmkeep/alarms/engine"
)

// Residency: the engine keeps at most Config.MaxOpenDatabases actor
// databases open and Config.MaxInstances guest instances live; past either
// budget the least recently used idle actor sleeps (its instance and its
// database close) and wakes on its next event. The idle reaper closes, and
// in cluster mode releases, every actor no event reached for the idle
// timeout, and forgets it: a sleeping actor costs its entry in the node
// timer and nothing else.

// DefaultIdleTimeout is how long an actor stays open after its last event.
const DefaultIdleTimeout = time.Minute

// Residency returns the engine's residency counters (open databases, live
// instances, their budgets and peaks, how often room was made or refused)
// and how many actors the node keeps a record of.
func (n *Node) Residency() (engine.ResidencyStats, int) {
	n.mu.Lock()
	known := len(n.entries)
	n.mu.Unlock()
	return n.engine.Residency(), known
}

// idleTimeout is the idle timeout in force.
func (n *Node) idleTimeout() time.Duration {
	if c := n.cfg.Cluster; c != nil && c.IdleTimeout > 0 {
		return c.IdleTimeout
	}
	return n.cfg.IdleTimeout
}

// reapIdle closes (in cluster mode: uploads what is pending, closes and
// releases) the actors no event reached for the idle timeout, and drops
// their entries.
func (n *Node) reapIdle(ctx context.Context) {
	idle := n.idleTimeout()
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.cfg.Clock.After(idle / 4):
		}
		n.reapOnce(ctx, n.cfg.Clock.Now().Add(-idle))
	}
}

// reapOnce reaps the actors last used before cutoff; it returns how many.
func (n *Node) reapOnce(ctx context.Context, cutoff time.Time) int {
	n.mu.Lock()
	list := make([]*entry, 0, len(n.entries))
	for _, e := range n.entries {
		list = append(list, e)
	}
	n.mu.Unlock()
	reaped := 0
	for _, e := range list {
		if !e.mu.TryLock() {
			continue // busy: not idle
		}
		func() {
			defer e.mu.Unlock()
			var err error
			defer n.recoverEvent(ctx, e, "release", &err)
			if e.gone || !e.lastUsed.Before(cutoff) {
				return
			}
			if n.leases != nil {
				if e.held {
					err = n.release(ctx, e)
				}
			} else if e.a != nil {
				err = e.a.Close(ctx)
				e.a = nil
			}
			if e.a == nil && !e.held {
				n.mu.Lock()
				if n.entries[e.id] == e {
					delete(n.entries, e.id)
				}
				n.mu.Unlock()
				e.gone = true
				reaped++
			}
		}()
	}
	return reaped
}

// Journal returns the node journal's counters (durable commits through
// engine.WithJournal; zero without it).
func (n *Node) Journal() engine.JournalStats { return n.engine.Journal() }
