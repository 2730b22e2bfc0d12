package node_test

import (
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/internal/s3test"
	"github.com/wasmkeep/alarms/node"
)

// A 503 during a failover tells the client how long the failover is still
// expected to take (lease TTL + grace + TTL/3, less what the request
// already waited inside the node), in whole seconds rounded up, rather
// than "try again in a second" for the whole failover. On versitygw: b
// holds an actor and cannot be reached; a answers for it.
func TestRetryAfterIsTheRemainingFailover(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	classes := oneshot(t)
	// failover: 3 s + 1 s + 1 s.
	const failover = 5 * time.Second
	lease := hostConfig{ttl: 3 * time.Second, margin: time.Second, grace: time.Second}
	b := lease
	b.addr = "127.0.0.1:1" // nothing listens: a connection is refused
	holder := startHost(t, srv.Bucket, "b", t.TempDir(), classes, b)
	if _, err := holder.Request(t.Context(), abi.ActorID{Tenant: "t", Class: "oneshot", Name: "held"}, hourAhead()); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		wait   time.Duration // the node's FailoverWait
		waited time.Duration // at least this long inside the node
	}{
		{"no wait in the node", -1, 0},
		{"2 s waited in the node", 2 * time.Second, 2 * time.Second},
	} {
		hc := lease
		hc.failoverWait = c.wait
		a := serveHost(t, srv.Bucket, "a-"+strconv.Itoa(int(c.wait)), classes, hc)
		for _, method := range []string{"POST", "GET"} {
			u := a.URL + "/v1/actors/t/oneshot/held"
			if method == "GET" {
				u += "/alarm" // read only: no wait inside the node
			}
			start := time.Now()
			status, h, p := problemCall(t, method, u)
			took := time.Since(start)
			waited := c.waited
			if method == "GET" {
				waited = 0
			}
			// The node's own clock started after ours and stopped before.
			lo, hi := int(math.Ceil((failover - took).Seconds())), int(math.Ceil((failover - waited).Seconds()))
			got, err := strconv.Atoi(h.Get("Retry-After"))
			if status != 503 || p.Code != node.CodeForwardFailed || err != nil || got < max(lo, 1) || got > hi {
				t.Errorf("%s, %s: %d %s, Retry-After %q after %v; want 503 forward_failed and %d to %d s", c.name, method, status, p.Code, h.Get("Retry-After"), took.Round(time.Millisecond), lo, hi)
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
	if status, h, p := problemCall(t, "POST", lapsed.URL+"/v1/actors/t/oneshot/x"); status != 503 || p.Code != node.CodeLeaseNotValid || h.Get("Retry-After") != "2" {
		t.Errorf("a node whose lease lapsed: %d %s, Retry-After %q; want 503 lease_not_valid and 2", status, p.Code, h.Get("Retry-After"))
	}
}

// problemCall sends one request and decodes an error answer.
func problemCall(t *testing.T, method, u string) (int, http.Header, node.Problem) {
	t.Helper()
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p node.Problem
	json.NewDecoder(resp.Body).Decode(&p)
	return resp.StatusCode, resp.Header, p
}
