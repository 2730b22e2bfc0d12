// Package faultproxy is a reverse proxy on 127.0.0.1 in front of an S3
// server that fails, delays and holds back requests: on demand (FailNext,
// SetDelay), at random rates from a seeded source (SetFaults), or all of
// them (SetPartitioned, a node cut off from the bucket; SetOutage, the
// bucket down: requests hung, connections reset, or 503s). Tests reach it
// through s3test.NewProxy; the soak (cmd/soak) puts one in front of each
// node. It depends on no testing package.
package faultproxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"
)

// FailMode is how the proxy fails a request.
type FailMode int

// The ways the proxy fails a request.
const (
	// Respond503 answers 503 Service Unavailable without forwarding: the
	// request is not applied.
	Respond503 FailMode = iota
	// Drop closes the connection without forwarding or answering: the
	// request is not applied.
	Drop
	// DropAfterForward forwards the request, waits for the server's
	// answer, then closes the connection without passing it on: the
	// request is applied but its caller sees a failure (a reply lost on
	// the way back).
	DropAfterForward
	// Reset resets the connection (TCP RST) without forwarding: the
	// request is not applied, and the caller sees "connection reset".
	Reset
	// LandLate closes the connection at once, so the caller sees a
	// failure, and forwards the request later (after the late delay,
	// SetLateDelay): a request that lands after its caller gave up, maybe
	// after the caller's later requests.
	LandLate
)

// String names the mode as the soak's summary does.
func (m FailMode) String() string {
	switch m {
	case Respond503:
		return "503"
	case Drop:
		return "dropped"
	case DropAfterForward:
		return "reply lost"
	case Reset:
		return "reset"
	case LandLate:
		return "landed late"
	}
	return "unknown"
}

// Modes lists every FailMode.
var Modes = []FailMode{Respond503, Drop, DropAfterForward, Reset, LandLate}

// Faults are random fault rates, each the probability (0 to 1) that a
// request gets it. At most one failure applies to a request (tried in
// the order of Modes); latency adds to any of them.
type Faults struct {
	// Fail maps a FailMode to its rate.
	Fail map[FailMode]float64
	// Latency is the rate of requests delayed by a uniform random time up
	// to MaxLatency before they are handled.
	Latency    float64
	MaxLatency time.Duration
}

// Outage is a bucket outage as the proxy plays it: while one is on, every
// request fails in its way, unforwarded, whatever else is set.
type Outage int

// The kinds of outage.
const (
	// NoOutage forwards requests (the faults set apply).
	NoOutage Outage = iota
	// OutageCut accepts connections and reads requests but never answers
	// them: each hangs until its caller gives up or the outage changes,
	// then its connection is closed (a network that drops the packets).
	OutageCut
	// OutageRefused resets every connection as it is accepted, and every
	// request on a connection already open (a server that is down; a
	// closed port would refuse before the proxy could count anything).
	OutageRefused
	// Outage503 answers every request 503 Service Unavailable (a server
	// that is up but failing).
	Outage503
	// OutageWrites answers every write (any method but GET and HEAD) 503
	// and forwards the reads: an erasure-coded store that lost its write
	// quorum (too few drives or nodes up to write, enough to read).
	OutageWrites
)

// String names the outage as the soak's summary does.
func (o Outage) String() string {
	switch o {
	case NoOutage:
		return "none"
	case OutageCut:
		return "cut"
	case OutageRefused:
		return "refused"
	case Outage503:
		return "503"
	case OutageWrites:
		return "writes 503"
	}
	return "unknown"
}

type failRule struct {
	method string
	left   int
	mode   FailMode
}

// Proxy is a running fault proxy. The client must sign for the proxy's
// host: the proxy keeps the Host header so SigV4 signatures stay valid.
type Proxy struct {
	// URL is the proxy's endpoint, http://127.0.0.1:PORT.
	URL string

	rp  *httputil.ReverseProxy
	srv *http.Server
	ln  net.Listener

	mu          sync.Mutex
	rules       []*failRule
	delays      map[string]time.Duration
	counts      map[string]int
	byArea      map[string]int // by Area
	faults      Faults
	rng         *rand.Rand
	partitioned bool
	outage      Outage
	cutEnd      chan struct{} // closed when an OutageCut ends
	late        time.Duration
	injected    map[string]int // by kind: FailMode.String(), "latency", "partitioned"
	hook        func(Fault)
	// lateHeld counts the requests held to land late that have not
	// landed (or been dropped) yet; landed is signalled as each does (both
	// under mu). Not a WaitGroup: a held request is counted before its caller
	// sees the refusal, a causal order through the connection that the
	// race detector cannot see, and an Add from zero that it cannot order
	// before a Wait is reported as a misuse.
	lateHeld int
	landed   *sync.Cond
	// afterLateRefusal, when set (tests; under mu), runs once a request
	// held to land late has been refused to its caller, before it is
	// held.
	afterLateRefusal func()
}

// Fault is one fault the proxy injected into a request.
type Fault struct {
	At     time.Time
	Method string
	// Path is the request's URL path: the bucket and the key, path-style.
	Path string
	// Kind is the fault's kind, as Injected counts it.
	Kind string
}

// SetFaultHook calls f, outside the proxy's lock, with every fault the
// proxy injects from now on (nil: none), so a caller can tell which
// requests failed and when.
func (p *Proxy) SetFaultHook(f func(Fault)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hook = f
}

// DefaultLateDelay is how long a LandLate request waits before it is
// forwarded, unless SetLateDelay says otherwise.
const DefaultLateDelay = 2 * time.Second

// Start starts a proxy to target (an http:// URL) on a port of 127.0.0.1
// the kernel picks; seed drives the random faults. Close stops it.
func Start(target string, seed uint64) (*Proxy, error) {
	return StartAt("127.0.0.1:0", target, seed)
}

// StartAt is Start on a given address (a restarted node's proxy can keep
// its port).
func StartAt(addr, target string, seed uint64) (*Proxy, error) {
	u, err := url.Parse(target)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return nil, errors.New("faultproxy: target " + target + " is not a URL")
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	p := &Proxy{
		URL:      "http://" + l.Addr().String(),
		ln:       l,
		delays:   map[string]time.Duration{},
		counts:   map[string]int{},
		byArea:   map[string]int{},
		injected: map[string]int{},
		rng:      rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		late:     DefaultLateDelay,
	}
	p.landed = sync.NewCond(&p.mu)
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(u)
			r.Out.Host = r.In.Host // the client signed the proxy's host
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(&outageListener{Listener: l, p: p}) }()
	return p, nil
}

// outageListener resets connections as they are accepted during an
// OutageRefused.
type outageListener struct {
	net.Listener
	p *Proxy
}

func (l *outageListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.p.mu.Lock()
		refuse := l.p.outage == OutageRefused
		if refuse {
			l.p.injected["outage refused connection"]++
		}
		l.p.mu.Unlock()
		if !refuse {
			return c, nil
		}
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}
}

// SetOutage starts an outage of the given kind, replacing the one on, or
// ends it (NoOutage). Requests hung by an OutageCut are closed when it
// ends. Injected counts each failed request under "outage " and the
// kind's String, and each connection reset as it was accepted (no
// request read, so not in Count) under "outage refused connection".
func (p *Proxy) SetOutage(o Outage) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.outage == OutageCut && o != OutageCut {
		close(p.cutEnd)
	}
	if o == OutageCut && p.outage != OutageCut {
		p.cutEnd = make(chan struct{})
	}
	p.outage = o
}

// Close stops the proxy; requests still waiting to land late are dropped
// once their delay ends (they may still land).
func (p *Proxy) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := p.srv.Shutdown(ctx)
	_ = p.srv.Close()
	if errors.Is(err, context.DeadlineExceeded) {
		err = nil
	}
	return err
}

// WaitLate waits until every request held back to land late has landed.
func (p *Proxy) WaitLate() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.lateHeld > 0 {
		p.landed.Wait()
	}
}

// heldDone counts a held request as landed, or dropped.
func (p *Proxy) heldDone() {
	p.mu.Lock()
	p.lateHeld--
	p.landed.Broadcast()
	p.mu.Unlock()
}

// FailNext fails the next n requests whose HTTP method is method ("" for
// any) in the given mode. Rules queue up in the order they were added.
func (p *Proxy) FailNext(method string, n int, mode FailMode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = append(p.rules, &failRule{method: strings.ToUpper(method), left: n, mode: mode})
}

// SetDelay delays every later request with this HTTP method ("" for any
// method without a delay of its own) by d before handling it; 0 removes
// the delay.
func (p *Proxy) SetDelay(method string, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if d <= 0 {
		delete(p.delays, strings.ToUpper(method))
		return
	}
	p.delays[strings.ToUpper(method)] = d
}

// SetLateDelay sets how long a LandLate request is held before it is
// forwarded.
func (p *Proxy) SetLateDelay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.late = d
}

// SetFaults sets the random fault rates (the zero Faults turns them off).
func (p *Proxy) SetFaults(f Faults) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults = f
}

// SetPartitioned cuts the proxy's clients off from the server (true):
// every request is refused by closing its connection, unforwarded; false
// heals the partition.
func (p *Proxy) SetPartitioned(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.partitioned = on
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

// ByArea returns how many requests the proxy has received, failed ones
// included, by [Area].
func (p *Proxy) ByArea() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.byArea)
}

// Area names what a request does and where, for counting: its operation
// (GET, PUT, DELETE, HEAD, LIST, or POST for a batched DELETE) and the
// first two folders of its key (a LIST's prefix), which tell the node
// leases, the holds, the snapshots and the index apart under a common
// prefix: "PUT cluster/holds", "LIST alarms/tenant".
func Area(r *http.Request) string {
	op := r.Method
	// Path-style: /bucket/key.
	key := strings.TrimPrefix(r.URL.Path, "/")
	_, key, _ = strings.Cut(key, "/")
	if op == http.MethodGet && key == "" {
		op, key = "LIST", r.URL.Query().Get("prefix")
	}
	first, rest, _ := strings.Cut(key, "/")
	second, _, _ := strings.Cut(rest, "/")
	switch {
	case first == "":
		return op + " -"
	case second == "":
		return op + " " + first
	}
	return op + " " + first + "/" + second
}

// Injected returns how many faults the proxy injected, by kind: a
// FailMode's String, "latency", "partitioned", "outage " with an
// Outage's String, and "outage refused connection" (see SetOutage).
func (p *Proxy) Injected() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.injected)
}

// decide picks what happens to a request: its delay, and its failure
// (nil: forwarded as it is).
func (p *Proxy) decide(r *http.Request) (delay time.Duration, mode *FailMode, late time.Duration, cut <-chan struct{}) {
	var kinds []string
	p.mu.Lock()
	hook := p.hook
	defer func() {
		p.mu.Unlock()
		if hook != nil {
			for _, k := range kinds {
				hook(Fault{At: time.Now(), Method: r.Method, Path: r.URL.Path, Kind: k})
			}
		}
	}()
	inject := func(kind string) {
		p.injected[kind]++
		kinds = append(kinds, kind)
	}
	p.counts[r.Method]++
	p.byArea[Area(r)]++
	late = p.late
	switch p.outage {
	case OutageCut:
		inject("outage cut")
		return 0, nil, late, p.cutEnd
	case OutageRefused:
		inject("outage refused")
		m := Reset
		return 0, &m, late, nil
	case Outage503:
		inject("outage 503")
		m := Respond503
		return 0, &m, late, nil
	case OutageWrites:
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			inject("outage writes 503")
			m := Respond503
			return 0, &m, late, nil
		}
	}
	if p.partitioned {
		inject("partitioned")
		m := Drop
		return 0, &m, late, nil
	}
	delay, ok := p.delays[r.Method]
	if !ok {
		delay = p.delays[""]
	}
	for i, fr := range p.rules {
		if fr.method == "" || fr.method == r.Method {
			if fr.left--; fr.left <= 0 {
				p.rules = append(p.rules[:i:i], p.rules[i+1:]...)
			}
			m := fr.mode
			return delay, &m, late, nil
		}
	}
	if p.faults.Latency > 0 && p.faults.MaxLatency > 0 && p.rng.Float64() < p.faults.Latency {
		delay += time.Duration(p.rng.Int64N(int64(p.faults.MaxLatency)))
		inject("latency")
	}
	for _, m := range Modes {
		if rate := p.faults.Fail[m]; rate > 0 && p.rng.Float64() < rate {
			inject(m.String())
			return delay, &m, late, nil
		}
	}
	return delay, nil, late, nil
}

// ServeHTTP applies delays and failures, then forwards the request.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	delay, mode, late, cut := p.decide(r)
	if cut != nil {
		select {
		case <-cut:
		case <-r.Context().Done():
		}
		hijackAndClose(w, false)
		return
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	if mode == nil {
		p.rp.ServeHTTP(w, r)
		return
	}
	switch *mode {
	case Respond503:
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>ServiceUnavailable</Code><Message>injected by the fault proxy</Message></Error>`))
	case Drop:
		hijackAndClose(w, false)
	case Reset:
		hijackAndClose(w, true)
	case DropAfterForward:
		p.rp.ServeHTTP(&discard{header: http.Header{}}, r)
		hijackAndClose(w, false)
	case LandLate:
		body, err := io.ReadAll(r.Body)
		if err != nil {
			hijackAndClose(w, false)
			return
		}
		// Counted as held before the caller sees its failure: a caller
		// that then waits for the late requests (WaitLate) waits for this
		// one too, however late this goroutine runs again.
		p.mu.Lock()
		p.lateHeld++
		h := p.afterLateRefusal
		p.mu.Unlock()
		launched := false
		defer func() {
			if !launched { // the hijack refused (a panic)
				p.heldDone()
			}
		}()
		hijackAndClose(w, false)
		if h != nil {
			h()
		}
		held := r.Clone(context.Background())
		launched = true
		go func() {
			defer p.heldDone()
			time.Sleep(late)
			held.Body = io.NopCloser(bytes.NewReader(body))
			held.ContentLength = int64(len(body))
			// A pooled connection the server closed meanwhile is retried
			// on a new one, rather than the late request silently never
			// landing.
			held.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
			p.rp.ServeHTTP(&discard{header: http.Header{}}, held)
		}()
	}
}

// hijackAndClose closes the request's connection without a response;
// with rst, as a reset (SO_LINGER 0).
func hijackAndClose(w http.ResponseWriter, rst bool) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler) // closes the connection without a response
	}
	if tc, ok := conn.(*net.TCPConn); ok && rst {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

// discard is a ResponseWriter that throws the response away.
type discard struct{ header http.Header }

func (d *discard) Header() http.Header         { return d.header }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}
