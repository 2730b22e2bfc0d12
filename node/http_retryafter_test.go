package node_test

import (
	"errors"
	"math"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/client"
	"github.com/wasmkeep/alarms/internal/s3test"
)

// A 503 during a failover tells the client how long the failover is still
// expected to take (lease TTL + grace + TTL/3, or the period the node
// reads the leases if set, less what the request already waited inside
// the node), in whole seconds rounded up, rather
// than "try again in a second" for the whole failover. On versitygw: b
// holds an actor and cannot be reached; a answers for it.
func TestRetryAfterIsTheRemainingFailover(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	classes := oneshot(t)
	// The asking nodes' failover: 3 s + 1 s + 1 s, or at the defaults
	// 10 s + 2 s + 10/3 s.
	lease := hostConfig{ttl: 3 * time.Second, margin: time.Second, grace: time.Second}
	b := lease
	b.addr = "127.0.0.1:1" // nothing listens: a connection is refused
	holder := startHost(t, srv.Bucket, "b", t.TempDir(), classes, b)
	if _, err := holder.Request(t.Context(), abi.ActorID{Tenant: "t", Class: "oneshot", Name: "held"}, hourAhead()); err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct {
		name     string
		lease    hostConfig
		failover time.Duration
		wait     time.Duration // the node's FailoverWait
		waited   time.Duration // at least this long inside the node
	}{
		{"no wait in the node", lease, 5 * time.Second, -1, 0},
		{"2 s waited in the node", lease, 5 * time.Second, 2 * time.Second, 2 * time.Second},
		{"the default lease, no wait in the node", hostConfig{}, 10*time.Second + 2*time.Second + 10*time.Second/3, -1, 0},
		{"the default lease read every 8 s, no wait in the node", hostConfig{read: 8 * time.Second}, 10*time.Second + 2*time.Second + 8*time.Second, -1, 0},
	} {
		hc := c.lease
		hc.failoverWait = c.wait
		failover := c.failover
		a := serveHost(t, srv.Bucket, "a"+strconv.Itoa(i), classes, hc)
		cl, err := client.New(a.URL)
		if err != nil {
			t.Fatal(err)
		}
		held := abi.ActorID{Tenant: "t", Class: "oneshot", Name: "held"}
		for _, method := range []string{"POST", "GET"} {
			start := time.Now()
			if method == "POST" {
				_, err = cl.Exec(t.Context(), held, hourAhead())
			} else {
				_, err = cl.Alarm(t.Context(), held) // read only: no wait inside the node
			}
			took := time.Since(start)
			waited := c.waited
			if method == "GET" {
				waited = 0
			}
			// The node's own clock started after ours and stopped before.
			lo, hi := time.Duration(math.Ceil((failover-took).Seconds()))*time.Second, time.Duration(math.Ceil((failover-waited).Seconds()))*time.Second
			p := new(client.Problem) // stays empty if err is no Problem
			if !errors.As(err, &p) || p.Status != 503 || p.Code != client.CodeForwardFailed || p.RetryAfter < max(lo, time.Second) || p.RetryAfter > hi {
				t.Errorf("%s, %s: %v, Retry-After %v after %v; want 503 forward_failed and %v to %v", c.name, method, err, p.RetryAfter, took.Round(time.Millisecond), lo, hi)
			}
		}
	}

	// A node whose own lease lapsed: its failover, 1 s + 0.3 s + 1/3 s.
	var down atomic.Bool
	m := bucket.NewMem()
	m.Faults = func(bucket.Op) bucket.Fault {
		if down.Load() {
			return bucket.Fault{Err: errors.New("injected: connection refused")}
		}
		return bucket.Fault{}
	}
	lapsed := serveHost(t, m, "c", classes, hostConfig{ttl: time.Second, margin: 300 * time.Millisecond, grace: 300 * time.Millisecond, failoverWait: -1})
	down.Store(true)
	waitFor(t, "c's lease to lapse", func() bool { status, _ := call(t, "GET", lapsed.URL+"/v1/healthz", nil); return status == 503 })
	cl, err := client.New(lapsed.URL)
	if err != nil {
		t.Fatal(err)
	}
	p := new(client.Problem)
	if _, err := cl.Exec(t.Context(), abi.ActorID{Tenant: "t", Class: "oneshot", Name: "x"}, hourAhead()); !errors.As(err, &p) || p.Status != 503 || p.Code != client.CodeLeaseNotValid || p.RetryAfter != 2*time.Second {
		t.Errorf("a node whose lease lapsed: %v, Retry-After %v; want 503 lease_not_valid and 2 s", err, p.RetryAfter)
	}
}
