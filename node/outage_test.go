package node_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/cluster"
	"github.com/wasmkeep/alarms/node"
)

// A bucket outage longer than the lease, on one node holding 40 actors:
//   - an exec on an actor the node holds runs while the lease is valid
//     (it needs no bucket to answer);
//   - once renewals have failed for longer than the failover wait, an
//     exec-durable is answered 503 with Retry-After naming the bucket and
//     the renewals' last error, without waiting for a renewal;
//   - the node's requests to the bucket during the outage stay bounded
//     however many actors it gave up: fewer in two lease periods than the
//     actors whose hold release failed (each was sent once a lease period
//     until the first failure of a round stopped the rest);
//   - once the bucket answers, the alarm due during the outage fires,
//     every committed write is there, and taking the actors again
//     downloads only the one whose write the outage kept from the bucket.
func TestABucketOutageFailsFastStaysBoundedAndLosesNothing(t *testing.T) {
	ctx := context.Background()
	mem := bucket.NewMem()
	var down atomic.Bool
	var during atomic.Int64 // requests while down
	// Releases of the alarmed actor's hold sent after the bucket returned.
	var releasedAfter atomic.Int64
	var back atomic.Bool
	alarmedHold := cluster.HoldKey("", abi.ActorID{Tenant: "t", Class: "s", Name: "o0"})
	mem.Faults = func(op bucket.Op) bucket.Fault {
		if down.Load() {
			during.Add(1)
			return bucket.Fault{Err: errors.New("injected: connection refused")}
		}
		if back.Load() && op.Kind == bucket.OpPut && op.Key == alarmedHold && bytes.Contains(op.Body, []byte(`"node_id":""`)) {
			releasedAfter.Add(1)
		}
		return bucket.Fault{}
	}
	var mu sync.Mutex
	var fired []node.DeliveryEvent
	reg := prometheus.NewRegistry()
	lease := time.Second
	n, err := node.New(ctx, node.Config{
		DataDir: t.TempDir(), Classes: scripted(t), Registerer: reg,
		Logger: hclog.New(&hclog.LoggerOptions{Name: "a", Level: hclog.Off, Output: testWriter{t}}),
		OnDelivery: func(ev node.DeliveryEvent) {
			mu.Lock()
			fired = append(fired, ev)
			mu.Unlock()
		},
		Cluster: &node.ClusterConfig{
			Bucket: mem, NodeID: "a", Addr: "a.invalid:1",
			LeaseTTL: lease, LeaseMargin: 200 * time.Millisecond, LeaseGrace: 500 * time.Millisecond,
			SweepPeriod: 300 * time.Millisecond, IdleTimeout: time.Minute, Tenants: []string{"t"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	n.Start(ctx)
	defer n.Close(ctx)
	srv := httptest.NewServer(n.Handler())
	defer srv.Close()

	const actors = 40
	id := func(i int) abi.ActorID { return abi.ActorID{Tenant: "t", Class: "s", Name: fmt.Sprintf("o%d", i)} }
	for i := range actors {
		do(t, n, id(i), node.ExecDurable, fmt.Sprintf("put k v%d", i))
	}
	alarmed, plain := id(0), id(1)
	due := time.Now().Add(2 * time.Second).UnixMilli()
	do(t, n, alarmed, node.ExecDurable, fmt.Sprintf("set %d", due))
	waitFor(t, "a valid lease", n.Leases().Valid)

	down.Store(true)
	start := time.Now()
	// The lease is valid for TTL - margin from its last renewal: an exec
	// on a held actor runs (its upload, after the reply, fails later).
	if !n.Leases().Valid() {
		t.Skip("the lease lapsed before the first request of the outage: a machine too slow for this test's timings")
	}
	if got := do(t, n, plain, node.Exec, "put during yes"); got != "ok" {
		t.Fatalf("an exec on a held actor at the outage's start answered %q, want ok", got)
	}

	// Renewals fail; once for longer than the failover wait (TTL + grace +
	// TTL/3) past a lease, events that need the bucket fail at once.
	waitFor(t, "renewals failing for longer than the failover wait", func() bool {
		since, err := n.Leases().RenewalsFailing()
		return err != nil && !n.Leases().Valid() && time.Since(since) > lease+500*time.Millisecond+lease/3+lease+100*time.Millisecond
	})
	resp, err := http.Post(srv.URL+"/v1/actors/t/s/o2?kind=exec-durable", "application/octet-stream", strings.NewReader("put k lost"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
		!strings.Contains(string(body), "the bucket is unreachable") || !strings.Contains(string(body), "injected: connection refused") {
		t.Fatalf("exec-durable during the outage: %d Retry-After %q %q; want 503 with Retry-After naming the bucket and the renewals' error",
			resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	// Every actor touched during the outage is given up, and the release
	// of its hold fails.
	for i := 2; i < actors; i++ {
		if _, err := n.Exec(ctx, id(i), []byte("put k lost"), node.ExecDurable); !errors.Is(err, node.ErrBucketUnreachable) {
			t.Fatalf("exec-durable on %s during the outage: %v, want ErrBucketUnreachable", id(i), err)
		}
	}
	// Two lease periods of the node's own loops (renewals, the leases'
	// observation, sweeps, deliveries tried again, releases tried again).
	before := during.Load()
	time.Sleep(2 * lease)
	sent := during.Load() - before
	t.Logf("bucket requests in two lease periods of the outage, %d actors given up: %d (%d in %v of outage)", actors-2, sent, during.Load(), time.Since(start).Round(time.Millisecond))
	if sent >= actors-2 {
		t.Fatalf("%d bucket requests in two lease periods of the outage, with %d actors given up: the node sends a request for every actor it gave up, want fewer", sent, actors-2)
	}

	restoresBefore := gathered(t, reg, "wasmkeep_actor_restores_total")
	back.Store(true)
	down.Store(false)
	backAt := time.Now()
	waitFor(t, "the alarm due during the outage firing", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, ev := range fired {
			if ev.Actor == alarmed && ev.Event.Ran && ev.Event.Scheduled == due {
				t.Logf("the alarm fired %v after the bucket returned", ev.At.Sub(backAt).Round(time.Millisecond))
				return true
			}
		}
		return false
	})
	// The node took the actor back for the delivery it was retrying
	// without releasing its hold first: released, another node's sweep
	// could take it and download it.
	if n := releasedAfter.Load(); n > 0 {
		t.Fatalf("the hold of %s, whose failed delivery the timer was about to retry, was released %d times after the bucket returned; want it kept for that delivery", alarmed, n)
	}
	// Nothing committed is lost; the durable requests the outage refused
	// did nothing.
	waitFor(t, "the lease valid again", n.Leases().Valid)
	for i := range actors {
		var got string
		waitFor(t, "a read of "+id(i).String(), func() bool {
			r, err := n.Exec(ctx, id(i), []byte("getkv k"), node.ExecDurable)
			got = string(r.Response)
			return err == nil
		})
		if want := fmt.Sprintf("v%d", i); got != want {
			t.Fatalf("%s: k = %q after the outage, want %q, as committed before it", id(i), got, want)
		}
	}
	if restored := gathered(t, reg, "wasmkeep_actor_restores_total") - restoresBefore; restored != 1 {
		t.Fatalf("%v actors restored from the bucket after the outage, want 1 (%s, whose exec was not uploaded): "+
			"the others' local databases are the bucket's newest state", restored, plain)
	}
}
