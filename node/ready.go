package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/wasmkeep/alarms/sweeper"
)

// Readiness is the reply of GET /v1/readyz.
type Readiness struct {
	// Ready: the node serves requests and alarms. A node running alone is
	// ready until it closes; a cluster node when all three checks pass.
	Ready bool `json:"ready"`
	// Lease: the node lease is valid (it may act on its holds).
	Lease *Check `json:"lease,omitempty"`
	// Bucket: a GET of the node's own lease object succeeded just now.
	Bucket *Check `json:"bucket,omitempty"`
	// Sweep: the latest sweep read every tenant's index and ended within
	// three sweep periods.
	Sweep *Check `json:"sweep,omitempty"`
}

// Check is one readiness check.
type Check struct {
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// readinessProbeTimeout bounds the bucket check of a readiness probe.
const readinessProbeTimeout = 2 * time.Second

// Ready checks the node's readiness: in cluster mode its lease, the bucket
// (one GET) and its sweeps.
func (n *Node) Ready(ctx context.Context) Readiness {
	n.mu.Lock()
	closed := n.closed
	n.mu.Unlock()
	if n.leases == nil || closed {
		return Readiness{Ready: !closed}
	}
	now := n.cfg.Clock.Now()
	var r Readiness
	if until := n.leases.ValidUntil(); !until.IsZero() {
		r.Lease = &Check{OK: true, Detail: fmt.Sprintf("valid for %v", until.Sub(now).Round(time.Millisecond))}
	} else {
		r.Lease = &Check{Detail: "not valid: the last renewal failed or came too late"}
	}
	pctx, cancel := context.WithTimeout(ctx, readinessProbeTimeout)
	defer cancel()
	if _, _, err := n.cfg.Cluster.Bucket.Get(pctx, n.cfg.Cluster.Prefix+"nodes/"+n.leases.NodeID()); err != nil {
		r.Bucket = &Check{Detail: err.Error()}
	} else {
		r.Bucket = &Check{OK: true, Detail: "reachable"}
	}
	period := n.cfg.Cluster.SweepPeriod
	if period <= 0 {
		period = sweeper.DefaultPeriod
	}
	st := n.plugin.SweepStats()
	at, err := st.Last, st.LastErr
	switch {
	case at.IsZero():
		r.Sweep = &Check{Detail: "no sweep yet"}
	case err != nil:
		r.Sweep = &Check{Detail: fmt.Sprintf("the last sweep, %v ago, failed: %v", now.Sub(at).Round(time.Millisecond), err)}
	case now.Sub(at) > 3*period:
		r.Sweep = &Check{Detail: fmt.Sprintf("the last sweep ended %v ago, more than three periods (%v)", now.Sub(at).Round(time.Millisecond), period)}
	default:
		r.Sweep = &Check{OK: true, Detail: fmt.Sprintf("the last sweep ended %v ago", now.Sub(at).Round(time.Millisecond))}
	}
	r.Ready = r.Lease.OK && r.Bucket.OK && r.Sweep.OK
	return r
}

func (n *Node) handleReady(w http.ResponseWriter, r *http.Request) {
	rd := n.Ready(r.Context())
	w.Header().Set("Content-Type", "application/json")
	if !rd.Ready {
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	json.NewEncoder(w).Encode(rd)
}
