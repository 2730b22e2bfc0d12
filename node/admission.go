package node

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TenantLimits bound one tenant's requests to the HTTP API of one node:
// those of its routes under /v1/actors/{tenant}/ (events, deletes, the
// alarm's reads and changes) but alarm:offer, a node's own. A call another
// node forwards with the peer token (Security.PeerToken) was admitted
// there and passes; without a peer token the nodes cannot be told from
// clients, and each node counts the calls it serves. A request past a
// limit is answered 429 (code throttled) with a Retry-After, and nothing
// runs: sending it again is always safe. The zero value limits nothing.
type TenantLimits struct {
	// Concurrency is how many of the tenant's requests the node serves at
	// once (0: no limit).
	Concurrency int
	// Rate is how many of the tenant's requests the node starts a second,
	// on average (0: no limit), with bursts of up to Burst (a token
	// bucket; 0: Rate, at least 1).
	Rate  float64
	Burst int
}

// Admission is the per-tenant limits of a node's HTTP API
// (Config.Admission): Default for every tenant, Tenants for those with
// limits of their own.
type Admission struct {
	Default TenantLimits
	Tenants map[string]TenantLimits
}

// limitsOf is a tenant's limits.
func (a Admission) limitsOf(tenant string) TenantLimits {
	if l, ok := a.Tenants[tenant]; ok {
		return l
	}
	return a.Default
}

func (l TenantLimits) check(tenant string) error {
	if l.Concurrency < 0 || l.Rate < 0 || l.Burst < 0 || math.IsNaN(l.Rate) || math.IsInf(l.Rate, 0) {
		return fmt.Errorf("node: admission limits of tenant %q (%+v): each must be 0 (no limit) or more", tenant, l)
	}
	return nil
}

// admission keeps each tenant's requests in flight and token bucket.
type admission struct {
	cfg   Admission
	now   func() time.Time
	label func(string) string

	mu      sync.Mutex
	tenants map[string]*tenantAdmission

	throttled *prometheus.CounterVec // tenant, reason
}

type tenantAdmission struct {
	inFlight int
	tokens   float64
	at       time.Time // when tokens was last brought up to date
}

// Reasons a request was throttled, the reason label of
// wasmkeep_tenant_http_throttled_total.
const (
	throttledConcurrency = "concurrency"
	throttledRate        = "rate"
)

func newAdmission(cfg Admission, now func() time.Time, label func(string) string) (*admission, error) {
	if err := cfg.Default.check("*"); err != nil {
		return nil, err
	}
	for t, l := range cfg.Tenants {
		if err := l.check(t); err != nil {
			return nil, err
		}
	}
	return &admission{cfg: cfg, now: now, label: label, tenants: map[string]*tenantAdmission{},
		throttled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wasmkeep_tenant_http_throttled_total",
			Help: "Requests of the tenant answered 429 (throttled), by reason: concurrency (its requests in flight at its cap) or rate (its token bucket empty). Tenants not named in the configuration are counted under tenant=\"other\".",
		}, []string{"tenant", "reason"}),
	}, nil
}

// limited reports whether any tenant has a limit: without one, admission
// costs nothing.
func (a *admission) limited() bool {
	if a.cfg.Default != (TenantLimits{}) {
		return true
	}
	for _, l := range a.cfg.Tenants {
		if l != (TenantLimits{}) {
			return true
		}
	}
	return false
}

// admit takes a slot of tenant's concurrency and a token of its bucket.
// ok false: refused, with the reason and how long until a retry may pass;
// otherwise done must be called when the request ends.
func (a *admission) admit(tenant string) (done func(), retryAfter time.Duration, reason string, ok bool) {
	l := a.cfg.limitsOf(tenant)
	if l == (TenantLimits{}) {
		return func() {}, 0, "", true
	}
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	t := a.tenants[tenant]
	if t == nil {
		if len(a.tenants) >= 4096 {
			a.forgetIdle(now)
		}
		t = &tenantAdmission{tokens: burstOf(l), at: now}
		a.tenants[tenant] = t
	}
	if l.Concurrency > 0 && t.inFlight >= l.Concurrency {
		a.throttled.WithLabelValues(a.label(tenant), throttledConcurrency).Inc()
		return nil, time.Second, throttledConcurrency, false
	}
	if l.Rate > 0 {
		t.tokens = min(burstOf(l), t.tokens+now.Sub(t.at).Seconds()*l.Rate)
		t.at = now
		if t.tokens < 1 {
			a.throttled.WithLabelValues(a.label(tenant), throttledRate).Inc()
			wait := time.Duration((1 - t.tokens) / l.Rate * float64(time.Second))
			return nil, wait, throttledRate, false
		}
		t.tokens--
	}
	t.inFlight++
	return func() {
		a.mu.Lock()
		t.inFlight--
		a.mu.Unlock()
	}, 0, "", true
}

// burstOf is the size of a tenant's token bucket.
func burstOf(l TenantLimits) float64 {
	if l.Burst > 0 {
		return float64(l.Burst)
	}
	return max(1, l.Rate)
}

// forgetIdle drops the state of tenants with nothing in flight and a
// full bucket: it is the state a new tenant starts with (a.mu held).
func (a *admission) forgetIdle(now time.Time) {
	for name, t := range a.tenants {
		tl := a.cfg.limitsOf(name)
		if t.inFlight == 0 && (tl.Rate == 0 || t.tokens+now.Sub(t.at).Seconds()*tl.Rate >= burstOf(tl)) {
			delete(a.tenants, name)
		}
	}
}

// admitted wraps a route of an actor's with the tenant's admission: a
// request another node forwarded with the peer token was admitted there
// and passes.
func (n *Node) admitted(h http.HandlerFunc) http.HandlerFunc {
	if !n.admission.limited() {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(forwardedHeader) != "" && n.sec.fromPeer(r) {
			h(w, r)
			return
		}
		tenant := r.PathValue("tenant")
		done, wait, reason, ok := n.admission.admit(tenant)
		if !ok {
			secs := max(1, int64(math.Ceil(wait.Seconds())))
			w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
			writeProblem(w, http.StatusTooManyRequests, CodeThrottled, fmt.Sprintf("tenant %s: too many requests (%s limit of this node); nothing ran, send it again after Retry-After", tenant, reason))
			return
		}
		defer done()
		h(w, r)
	}
}
