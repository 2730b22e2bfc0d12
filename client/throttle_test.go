package client_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/client"
	"github.com/wasmkeep/alarms/internal/metricstest"
	"github.com/wasmkeep/alarms/internal/testguest"
	"github.com/wasmkeep/alarms/node"
)

// A 429 (throttled) means nothing ran: the client sends the call again
// after the node's Retry-After, by itself, within the call's context; with
// no retries left, or no time, the 429 is a *Problem the caller may send
// again (Temporary).
func TestTheClientWaitsOutAThrottle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	n, err := node.New(ctx, node.Config{
		DataDir: t.TempDir(), Logger: hclog.NewNullLogger(), Registerer: reg,
		Classes:   map[string][]byte{"oneshot": testguest.Fixture(t, "oneshot_alarm")},
		Admission: node.Admission{Default: node.TenantLimits{Rate: 1, Burst: 1}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close(ctx)
	srv := httptest.NewServer(n.Handler())
	defer srv.Close()
	id := abi.ActorID{Tenant: "t", Class: "oneshot", Name: "x"}
	throttled := func() float64 { return metricstest.Gather(reg).Value("wasmkeep_tenant_http_throttled_total") }

	c, err := client.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, err := c.Exec(ctx, id, at(1<<40)); err != nil {
			t.Fatalf("call %d: %v; want the client to wait out the 429", i+1, err)
		}
	}
	if got := throttled(); got != 1 {
		t.Fatalf("the node throttled %v calls, want 1: the second, then sent again after Retry-After", got)
	}

	none, err := client.New(srv.URL, client.WithThrottleRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	_, err = none.Alarm(ctx, id)
	var p *client.Problem
	if !errors.As(err, &p) || p.Status != 429 || p.Code != client.CodeThrottled || p.RetryAfter != time.Second || !p.Temporary() {
		t.Fatalf("a throttled call without retries: %v; want a temporary 429 throttled with Retry-After 1 s", err)
	}

	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := c.Alarm(short, id); !errors.As(err, &p) || p.Status != 429 {
		t.Fatalf("a throttled call whose context ends before the Retry-After: %v, want the 429 at once", err)
	}
}
