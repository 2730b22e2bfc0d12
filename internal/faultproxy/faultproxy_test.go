package faultproxy

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// backend is an HTTP server recording what reaches it.
type backend struct {
	mu     sync.Mutex
	served []string // "METHOD body"
	got    chan struct{}
}

func startBackend(t *testing.T) (*backend, string) {
	t.Helper()
	b := &backend{got: make(chan struct{}, 100)}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		b.mu.Lock()
		b.served = append(b.served, r.Method+" "+string(body))
		b.mu.Unlock()
		b.got <- struct{}{}
		_, _ = io.WriteString(w, "ok")
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return b, "http://" + l.Addr().String()
}

func (b *backend) seen() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Join(b.served, ",")
}

func start(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := Start(target, 7)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func send(p *Proxy, method, body string) (int, error) {
	req, _ := http.NewRequest(method, p.URL+"/b/k", strings.NewReader(body))
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return resp.StatusCode, nil
}

// A reset request never reaches the server and its caller sees the reset;
// a reply lost on the way back was applied; a request that lands late is
// refused to its caller at once and applied after the late delay, after
// the caller's next request.
func TestResetLostReplyAndLateLanding(t *testing.T) {
	b, target := startBackend(t)
	p := start(t, target)
	p.SetLateDelay(300 * time.Millisecond)

	p.FailNext("PUT", 1, Reset)
	if _, err := send(p, "PUT", "reset"); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("reset PUT: error %v, want connection reset", err)
	}
	p.FailNext("PUT", 1, DropAfterForward)
	if _, err := send(p, "PUT", "applied"); err == nil {
		t.Fatal("PUT whose reply was dropped succeeded")
	}
	p.FailNext("PUT", 1, LandLate)
	if _, err := send(p, "PUT", "late"); err == nil {
		t.Fatal("PUT held to land late succeeded at once")
	}
	if st, err := send(p, "PUT", "next"); err != nil || st != 200 {
		t.Fatalf("the next PUT: %d, %v", st, err)
	}
	if got := b.seen(); got != "PUT applied,PUT next" {
		t.Fatalf("before the late delay the server saw %q", got)
	}
	p.WaitLate()
	if got := b.seen(); got != "PUT applied,PUT next,PUT late" {
		t.Fatalf("after the late delay the server saw %q (the late PUT, body and all, last)", got)
	}
}

// WaitLate waits for a request held to land late even when its handler
// is slow to get going after refusing it: the caller, which saw the
// refusal at once, cannot call WaitLate before the request counts as
// held.
func TestWaitLateWaitsForARequestRefusedJustNow(t *testing.T) {
	b, target := startBackend(t)
	p := start(t, target)
	p.SetLateDelay(10 * time.Millisecond)
	p.mu.Lock()
	p.afterLateRefusal = func() { time.Sleep(200 * time.Millisecond) }
	p.mu.Unlock()
	p.FailNext("PUT", 1, LandLate)
	if _, err := send(p, "PUT", "late"); err == nil {
		t.Fatal("PUT held to land late succeeded at once")
	}
	p.WaitLate()
	if got := b.seen(); got != "PUT late" {
		t.Fatalf("once WaitLate returned the server saw %q, want the late PUT", got)
	}
}

// A partitioned proxy refuses every request, unforwarded, and counts
// them; healed, it forwards again.
func TestPartition(t *testing.T) {
	b, target := startBackend(t)
	p := start(t, target)
	p.SetPartitioned(true)
	for i := 0; i < 3; i++ {
		if _, err := send(p, "GET", ""); err == nil {
			t.Fatal("a partitioned proxy answered")
		}
	}
	p.SetPartitioned(false)
	if st, err := send(p, "GET", "x"); err != nil || st != 200 {
		t.Fatalf("healed: %d, %v", st, err)
	}
	if got, n := b.seen(), p.Injected()["partitioned"]; got != "GET x" || n != 3 {
		t.Fatalf("server saw %q, %d refused; want only the request after healing, 3 refused", got, n)
	}
}

// Random faults come at their rates and are counted by kind: at rate 1
// every request gets one; the same seed gives the same faults.
func TestRandomFaults(t *testing.T) {
	_, target := startBackend(t)
	p := start(t, target)
	p.SetFaults(Faults{Fail: map[FailMode]float64{Respond503: 1}, Latency: 1, MaxLatency: time.Millisecond})
	for i := 0; i < 5; i++ {
		if st, err := send(p, "GET", ""); err != nil || st != 503 {
			t.Fatalf("at rate 1: %d, %v; want 503", st, err)
		}
	}
	if inj := p.Injected(); inj["503"] != 5 || inj["latency"] != 5 {
		t.Fatalf("injected %v, want 5 503s and 5 delays", inj)
	}
	// The hook hears of each fault, with its request.
	var mu sync.Mutex
	var heard []string
	p.SetFaultHook(func(f Fault) {
		mu.Lock()
		defer mu.Unlock()
		heard = append(heard, f.Kind+" "+f.Method+" "+f.Path)
	})
	if st, err := send(p, "PUT", "x"); err != nil || st != 503 {
		t.Fatalf("at rate 1: %d, %v; want 503", st, err)
	}
	p.SetFaultHook(nil)
	mu.Lock()
	if got := strings.Join(heard, ","); got != "latency PUT /b/k,503 PUT /b/k" {
		t.Errorf("the fault hook heard %q, want the delay and the 503 of PUT /b/k", got)
	}
	mu.Unlock()

	run := func() string {
		q := start(t, target)
		q.SetFaults(Faults{Fail: map[FailMode]float64{Respond503: 0.5}})
		var s strings.Builder
		for i := 0; i < 40; i++ {
			st, _ := send(q, "GET", "")
			s.WriteString(http.StatusText(st)[:1])
		}
		return s.String()
	}
	a, c := run(), run()
	if a != c || !strings.Contains(a, "S") || !strings.Contains(a, "O") {
		t.Fatalf("two runs with one seed at rate 0.5: %s and %s; want the same mix of 503s and 200s", a, c)
	}
	p.SetFaults(Faults{})
	if st, err := send(p, "GET", ""); err != nil || st != 200 {
		t.Fatalf("faults off: %d, %v", st, err)
	}
}

// An outage fails every request in its own way and forwards none: a cut
// hangs the request until the outage changes, refused resets the
// connection, 503 answers; once it ends, requests reach the server again.
func TestAnOutageFailsEveryRequestUntilItEnds(t *testing.T) {
	b, target := startBackend(t)
	p := start(t, target)

	p.SetOutage(OutageCut)
	hung := make(chan error, 1)
	go func() { _, err := send(p, "GET", ""); hung <- err }()
	for deadline := time.Now().Add(5 * time.Second); p.Injected()["outage cut"] == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the request never reached the proxy")
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case err := <-hung:
		t.Fatalf("a request during a cut was answered (%v), want it hung", err)
	case <-time.After(100 * time.Millisecond):
	}
	p.SetOutage(OutageRefused)
	if err := <-hung; err == nil {
		t.Fatal("the hung request succeeded once the cut ended, want its connection closed")
	}
	if _, err := send(p, "PUT", "x"); !errors.Is(err, syscall.ECONNRESET) && !strings.Contains(err.Error(), "reset") && !strings.Contains(err.Error(), "EOF") {
		t.Fatalf("a request while refused: %v, want the connection reset", err)
	}
	p.SetOutage(Outage503)
	if code, err := send(p, "GET", ""); err != nil || code != http.StatusServiceUnavailable {
		t.Fatalf("a request during a 503 outage: %d %v, want 503", code, err)
	}
	if got := b.seen(); got != "" {
		t.Fatalf("the server saw %q during the outage, want nothing", got)
	}
	p.SetOutage(NoOutage)
	if code, err := send(p, "PUT", "after"); err != nil || code != http.StatusOK {
		t.Fatalf("a request after the outage: %d %v, want it forwarded", code, err)
	}
	if got := b.seen(); got != "PUT after" {
		t.Fatalf("the server saw %q, want only the request after the outage", got)
	}
	in := p.Injected()
	if in["outage cut"] != 1 || in["outage refused connection"] < 1 || in["outage 503"] != 1 {
		t.Fatalf("injected %v, want one of each outage", in)
	}
}

// A lost write quorum fails the writes and lets the reads through, as an
// erasure-coded store with too few drives up to write does.
func TestAWriteOutageFailsOnlyTheWrites(t *testing.T) {
	b, target := startBackend(t)
	p := start(t, target)
	p.SetOutage(OutageWrites)
	for _, m := range []string{"PUT", "POST", "DELETE"} {
		if code, err := send(p, m, "w"); err != nil || code != http.StatusServiceUnavailable {
			t.Fatalf("%s during a write outage: %d %v, want 503", m, code, err)
		}
	}
	for _, m := range []string{"GET", "HEAD"} {
		if code, err := send(p, m, ""); err != nil || code != http.StatusOK {
			t.Fatalf("%s during a write outage: %d %v, want it forwarded", m, code, err)
		}
	}
	if got := b.seen(); got != "GET ,HEAD " {
		t.Fatalf("the server saw %q, want the reads only", got)
	}
	if in := p.Injected(); in["outage writes 503"] != 3 {
		t.Fatalf("injected %v, want 3 writes refused", in)
	}
}

// Area tells requests apart by operation and the key's first two folders,
// path-style, with a listing named LIST by its prefix.
func TestArea(t *testing.T) {
	for _, tc := range []struct{ method, target, want string }{
		{"PUT", "/b/cluster/holds/t/c/x", "PUT cluster/holds"},
		{"GET", "/b/cluster/nodes/n1", "GET cluster/nodes"},
		{"GET", "/b?list-type=2&prefix=cluster%2Falarms%2Ft%2F", "LIST cluster/alarms"},
		{"GET", "/b/?list-type=2&prefix=", "LIST -"},
		{"DELETE", "/b/top", "DELETE top"},
		{"POST", "/b?delete", "POST -"},
	} {
		r := httptest.NewRequest(tc.method, "http://127.0.0.1"+tc.target, nil)
		if got := Area(r); got != tc.want {
			t.Errorf("%s %s: %q, want %q", tc.method, tc.target, got, tc.want)
		}
	}
}
