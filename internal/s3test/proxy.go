package s3test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// FailMode is how a Proxy fails a request.
type FailMode int

// The ways a Proxy fails a request.
const (
	// Respond503 answers 503 Service Unavailable without
	// forwarding: the request is not applied.
	Respond503 FailMode = iota
	// Drop closes the connection without forwarding or answering: the
	// request is not applied.
	Drop
	// DropAfterForward forwards the request, waits for the server's answer,
	// then closes the connection without passing it on: the request is
	// applied but its caller sees a failure (a reply lost on the way back).
	DropAfterForward
)

type failRule struct {
	method string
	left   int
	mode   FailMode
}

// Proxy is a reverse proxy on 127.0.0.1 in front of an S3 server that can
// fail and delay requests. Point a client at URL with bucket.WithEndpoint;
// the proxy keeps the Host header so SigV4 signatures stay valid.
type Proxy struct {
	// URL is the proxy's endpoint, http://127.0.0.1:PORT.
	URL string

	rp     *httputil.ReverseProxy
	mu     sync.Mutex
	rules  []*failRule
	delays map[string]time.Duration
	counts map[string]int
}

// NewProxy starts a proxy to target (an http:// URL) and closes it when the
// test ends.
func NewProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	u, err := url.Parse(target)
	if err != nil || u.Scheme == "" || u.Host == "" {
		tb.Fatalf("s3test: proxy target %q is not a URL", target)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("s3test: proxy listen: %v", err)
	}
	p := &Proxy{
		URL:    "http://" + l.Addr().String(),
		delays: map[string]time.Duration{},
		counts: map[string]int{},
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(u)
			r.Out.Host = r.In.Host // the client signed the proxy's host
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			tb.Logf("s3test: proxy shutdown: %v", err)
		}
		_ = srv.Close()
	})
	return p
}

// FailNext fails the next n requests whose HTTP method is method ("" for
// any) in the given mode. Rules queue up in the order they were added.
func (p *Proxy) FailNext(method string, n int, mode FailMode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = append(p.rules, &failRule{method: strings.ToUpper(method), left: n, mode: mode})
}

// SetDelay delays every later request with this HTTP method ("" for any
// method without a delay of its own) by d before handling it; 0 removes the
// delay.
func (p *Proxy) SetDelay(method string, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if d <= 0 {
		delete(p.delays, strings.ToUpper(method))
		return
	}
	p.delays[strings.ToUpper(method)] = d
}

// Count returns how many requests with this HTTP method ("" for all) the
// proxy has received, failed ones included.
func (p *Proxy) Count(method string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if method == "" {
		total := 0
		for _, n := range p.counts {
			total += n
		}
		return total
	}
	return p.counts[strings.ToUpper(method)]
}

// ServeHTTP applies delays and failures, then forwards the request.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.counts[r.Method]++
	delay, ok := p.delays[r.Method]
	if !ok {
		delay = p.delays[""]
	}
	var rule *failRule
	for i, fr := range p.rules {
		if fr.method == "" || fr.method == r.Method {
			rule = fr
			if fr.left--; fr.left <= 0 {
				p.rules = append(p.rules[:i:i], p.rules[i+1:]...)
			}
			break
		}
	}
	p.mu.Unlock()

	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	if rule == nil {
		p.rp.ServeHTTP(w, r)
		return
	}
	switch rule.mode {
	case Respond503:
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>ServiceUnavailable</Code><Message>injected by s3test.Proxy</Message></Error>`))
	case Drop:
		hijackAndClose(w)
	case DropAfterForward:
		rec := &discard{header: http.Header{}}
		p.rp.ServeHTTP(rec, r)
		hijackAndClose(w)
	}
}

func hijackAndClose(w http.ResponseWriter) {
	if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
		_ = conn.Close()
		return
	}
	panic(http.ErrAbortHandler) // closes the connection without a response
}

// discard is a ResponseWriter that throws the response away.
type discard struct{ header http.Header }

func (d *discard) Header() http.Header         { return d.header }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}
