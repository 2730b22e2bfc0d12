package node_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/internal/fakeclock"
	"github.com/wasmkeep/alarms/internal/metricstest"
	"github.com/wasmkeep/alarms/internal/testguest"
	"github.com/wasmkeep/alarms/node"
)

// sendTo sends one request to the node's API and returns the status, the
// problem's code ("" for a success) and the Retry-After.
func sendTo(t *testing.T, base, method, path, body string) (status int, code, retryAfter string) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p node.Problem
	if resp.StatusCode >= 400 {
		if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
			t.Fatalf("%s %s: %d without a problem body: %v", method, path, resp.StatusCode, err)
		}
	}
	return resp.StatusCode, p.Code, resp.Header.Get("Retry-After")
}

// A tenant's token bucket lets Burst requests through at once and then
// Rate a second; the rest are answered 429 throttled, with the seconds to
// wait, and run nothing. Another tenant, and a tenant with limits of its
// own, are not held by it.
func TestATenantsRateIsItsOwn(t *testing.T) {
	clk := fakeclock.New(time.UnixMilli(1_800_000_000_000))
	reg := prometheus.NewRegistry()
	n := newNode(t, t.TempDir(), map[string][]byte{"c": testguest.Fixture(t, "oneshot_alarm")}, node.Config{
		Clock: clk, Registerer: reg,
		Admission: node.Admission{
			Default: node.TenantLimits{Rate: 0.5, Burst: 2},
			Tenants: map[string]node.TenantLimits{"vip": {Rate: 100}},
		},
	})
	defer n.Close(context.Background())
	srv := httptest.NewServer(n.Handler())
	defer srv.Close()
	get := func(tenant string) (int, string, string) {
		return sendTo(t, srv.URL, "GET", "/v1/actors/"+tenant+"/c/x/alarm", "")
	}
	for i := range 2 {
		if st, _, _ := get("a"); st != 200 {
			t.Fatalf("tenant a's request %d of its burst of 2: %d", i+1, st)
		}
	}
	st, code, ra := get("a")
	if st != 429 || code != node.CodeThrottled || ra != "2" {
		t.Fatalf("tenant a's third request at once: %d %q Retry-After %q; want 429 %q, Retry-After 2 (a token every 2 s)", st, code, ra, node.CodeThrottled)
	}
	if st, _, _ := get("b"); st != 200 {
		t.Fatalf("tenant b while a is throttled: %d", st)
	}
	for i := range 50 {
		if st, _, _ := get("vip"); st != 200 {
			t.Fatalf("tenant vip's request %d (its own rate, 100 a second): %d", i+1, st)
		}
	}
	clk.Advance(2 * time.Second)
	if st, _, _ := get("a"); st != 200 {
		t.Fatalf("tenant a once a token came back: %d", st)
	}
	if st, _, _ := get("a"); st != 429 {
		t.Fatalf("tenant a with its bucket empty again: %d", st)
	}
	fams := metricstest.Gather(reg)
	if got := fams.Value("wasmkeep_tenant_http_throttled_total", "tenant", "other", "reason", "rate"); got != 2 {
		t.Errorf("throttled requests of unnamed tenants counted: %v, want 2", got)
	}
	if got := fams.Value("wasmkeep_tenant_http_throttled_total", "tenant", "vip"); got != 0 {
		t.Errorf("throttled requests of tenant vip counted: %v, want 0", got)
	}
}

// A tenant's requests in flight stop at its concurrency: one more is
// answered 429 at once while they run, another tenant's is served, and
// once they end the tenant is served again.
func TestATenantsConcurrencyIsCapped(t *testing.T) {
	reg := prometheus.NewRegistry()
	n := newNode(t, t.TempDir(), map[string][]byte{"h": testguest.Fixture(t, "hostile")}, node.Config{
		EngineOptions: []engine.Option{engine.WithEventDeadline(3 * time.Second)},
		Admission:     node.Admission{Default: node.TenantLimits{Concurrency: 1}},
		Registerer:    reg,
	})
	defer n.Close(context.Background())
	srv := httptest.NewServer(n.Handler())
	defer srv.Close()
	looping := make(chan int, 1)
	go func() {
		st, _, _ := sendTo(t, srv.URL, "POST", "/v1/actors/a/h/loop", "l") // loops until its deadline
		looping <- st
	}()
	// Wait until the loop runs in a guest slot, holding tenant a's one
	// request in flight. (Probing with tenant a's own requests instead
	// raced the loop's: a probe admitted first turned the loop away.)
	for deadline := time.Now().Add(30 * time.Second); metricstest.Gather(reg).Value("wasmkeep_guest_slots_busy") < 1; time.Sleep(10 * time.Millisecond) {
		select {
		case st := <-looping:
			t.Fatalf("the looping request ended (%d) before it ran", st)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the looping request did not run in 30 s")
		}
	}
	if st, code, ra := sendTo(t, srv.URL, "POST", "/v1/actors/a/h/other", "x"); st != 429 || code != node.CodeThrottled || ra != "1" {
		t.Fatalf("tenant a past its concurrency: %d %q Retry-After %q, want 429 throttled, Retry-After 1", st, code, ra)
	}
	if st, _, _ := sendTo(t, srv.URL, "POST", "/v1/actors/b/h/x", "x"); st != 200 {
		t.Fatalf("tenant b while tenant a is at its cap: %d", st)
	}
	select {
	case st := <-looping:
		t.Fatalf("the looping request ended (%d) before the others were checked", st)
	default:
	}
	if st := <-looping; st != 422 {
		t.Fatalf("the looping request: %d, want 422 (stopped at its deadline)", st)
	}
	if st, _, _ := sendTo(t, srv.URL, "POST", "/v1/actors/a/h/other", "x"); st != 200 {
		t.Fatalf("tenant a once its request ended: %d", st)
	}
}

// Limits that make no sense are refused, naming the tenant.
func TestBadAdmissionLimitsAreRefused(t *testing.T) {
	_, err := node.New(context.Background(), node.Config{DataDir: t.TempDir(),
		Admission: node.Admission{Tenants: map[string]node.TenantLimits{"acme": {Rate: -1}}}})
	if err == nil || !strings.Contains(err.Error(), `"acme"`) {
		t.Fatalf("a negative rate: %v, want an error naming tenant acme", err)
	}
}

// A call another node forwards with the peer token was admitted there and
// passes; the same header from a client does not.
func TestOnlyThePeerTokenPassesTheLimits(t *testing.T) {
	n := newNode(t, t.TempDir(), map[string][]byte{"c": testguest.Fixture(t, "oneshot_alarm")}, node.Config{
		Security:  node.Security{Token: "op", PeerToken: "peer"},
		Admission: node.Admission{Default: node.TenantLimits{Rate: 1e-6, Burst: 1}},
	})
	defer n.Close(context.Background())
	srv := httptest.NewServer(n.Handler())
	defer srv.Close()
	get := func(token string, forwarded bool) int {
		req, _ := http.NewRequest("GET", srv.URL+"/v1/actors/a/c/x/alarm", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		if forwarded {
			req.Header.Set("X-Wasmkeep-Forwarded", "1")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if st := get("op", false); st != 200 {
		t.Fatalf("the first request: %d", st)
	}
	if st := get("op", true); st != 429 {
		t.Fatalf("a client's request marked forwarded, past the limit: %d, want 429", st)
	}
	if st := get("peer", true); st != 200 {
		t.Fatalf("a peer's forwarded request: %d, want 200 (admitted where the client called)", st)
	}
}
