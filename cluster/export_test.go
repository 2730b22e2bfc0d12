package cluster

import "context"

// TakeTicket is takeTicket.
func (l *Leases) TakeTicket() uint64 { return l.takeTicket() }

// ReadLeaseAfter is readLeaseAfter.
func (l *Leases) ReadLeaseAfter(ctx context.Context, id string, after uint64) (bool, error) {
	return l.readLeaseAfter(ctx, id, after)
}

// Joining is how many takes wait for a shared read of a lease now.
func (l *Leases) Joining() int64 { return l.joining.Load() }
