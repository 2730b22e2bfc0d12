package node_test

import (
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/node"
)

// GET /v1/readyz: 503 before the first sweep ended, 200 once it did, with
// the lease, bucket and sweep checks; 503 naming the bucket while it fails.
func TestReadiness(t *testing.T) {
	t.Parallel()
	m := bucket.NewMem()
	var down atomic.Bool
	m.Faults = func(op bucket.Op) bucket.Fault {
		if down.Load() && op.Kind != bucket.OpPut { // renewals go through: the lease stays valid
			return bucket.Fault{Err: errors.New("injected: connection refused")}
		}
		return bucket.Fault{}
	}
	a := serveHost(t, m, "a", counter(t), hostConfig{})
	ready := func() (int, node.Readiness) {
		t.Helper()
		status, body := call(t, "GET", a.URL+"/v1/readyz", nil)
		var r node.Readiness
		if err := json.Unmarshal([]byte(body), &r); err != nil {
			t.Fatalf("readyz: %d %q: %v", status, body, err)
		}
		return status, r
	}
	if status, r := ready(); status != 503 || r.Ready || r.Sweep == nil || r.Sweep.OK || r.Sweep.Detail != "no sweep yet" {
		t.Fatalf("before any sweep: %d %+v (sweep %+v)", status, r, r.Sweep)
	}
	a.Start(t.Context())
	waitFor(t, "the first sweep", func() bool { return !a.Plugin().SweepStats().Last.IsZero() })
	status, r := ready()
	if status != 200 || !r.Ready || !r.Lease.OK || !r.Bucket.OK || !r.Sweep.OK {
		t.Fatalf("after a sweep: %d %+v %+v %+v %+v", status, r, r.Lease, r.Bucket, r.Sweep)
	}
	down.Store(true)
	status, r = ready()
	if status != 503 || r.Ready || r.Bucket.OK || !strings.Contains(r.Bucket.Detail, "connection refused") || !r.Lease.OK {
		t.Fatalf("with the bucket failing reads: %d %+v, bucket %+v, lease %+v", status, r, r.Bucket, r.Lease)
	}
}
