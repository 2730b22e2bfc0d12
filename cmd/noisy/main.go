// Command noisy measures how well one node isolates its tenants: tenant A
// runs a light load (5 actors whose alarms fire every second, a read every
// 200 ms) while tenant B runs, one after another, each load a hostile or
// careless tenant brings: a flood of requests, thousands of alarms due at
// one instant, handlers that hang, handlers that spin, handlers that fail
// at once every time. For each load it prints A's alarm lateness and read
// latency against A's own baseline of the same run, B's throughput with A
// against B's alone in the same run, the node's lease lapses and how close
// its renewals came to the end of their window, and it exits 1 when a
// bound of issue 48 is passed (docs/operations.md#tenants-on-one-node):
//
//   - A's lateness p99 ≤ 3 × its baseline p99 + 100 ms, and ≥ 95 % of its
//     expected firings;
//   - A's read p99 ≤ 3 × its baseline p99 + 100 ms;
//   - no lease lapse;
//   - B's rate with A ≥ half its rate alone.
//
// The node is a keepnode process on an S3 bucket (versitygw, started here
// unless AWS_ENDPOINT_URL names a server); with -nodes 3 it is the first
// of a three-node cluster, and no other node may take any actor over.
// -short is the form CI runs (about 2 minutes); there a load past its
// bounds runs once more before the run fails (-retries).
//
//	go run ./cmd/noisy -short
//	go run ./cmd/noisy -phase 60s -alone 30s
//	go run ./cmd/noisy -nodes 3 -loads spin
package main

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/client"
	"github.com/wasmkeep/alarms/internal/clusterproc"
)

//go:embed noisy.wasm
var guestWasm []byte

// The classes: A's and B's actors run the same guest, each tenant under a
// class of its own (-short gives B's a short alarm deadline).
const (
	classA = "noisy"
	classB = "noisyb"
)

// The guest's modes (noisy.wat).
const (
	modeOK   = 'k'
	modeSpin = 's'
	modeHang = 'h'
	modeFail = 'f'
)

// loads are B's loads, in the order they run.
var loads = []string{"flood", "burst", "hang", "spin", "fail"}

type options struct {
	short                      bool
	phase, alone               time.Duration
	loads                      string
	nodes                      int
	burst, hostile, floodConns int
	aActors                    int
	aInterval, readEvery       time.Duration
	keepnodeFlags, keepnode    string
	bDeadline                  time.Duration
	keep, verbose              bool
	latenessSlack, readSlack   time.Duration
	latenessFactor, readFactor float64
	minFired, minBRatio        float64
	retries                    int
}

func main() {
	o := &options{}
	fs := flag.NewFlagSet("noisy", flag.ExitOnError)
	fs.BoolVar(&o.short, "short", false, "the form CI runs (about 2 minutes): 10 s phases, 5 s alone, 1,000 alarms in the burst, 8 hostile actors, B's on-alarm deadline 500 ms, and 10 actors and a read every 50 ms for A")
	fs.DurationVar(&o.phase, "phase", 30*time.Second, "how long A runs beside each of B's loads, and alone for its baseline")
	fs.DurationVar(&o.alone, "alone", 15*time.Second, "how long each of B's loads runs alone, for its rate without A")
	fs.StringVar(&o.loads, "loads", strings.Join(loads, ","), "B's loads to run, comma-separated: "+strings.Join(loads, ", "))
	fs.IntVar(&o.nodes, "nodes", 1, "nodes: 1, or a cluster whose first node runs both tenants (the others must take nothing over)")
	fs.IntVar(&o.burst, "burst", 2000, "the burst load's alarms, due at one instant")
	fs.IntVar(&o.hostile, "hostile", 70, "the actors of the hang, spin and fail loads, due at one instant")
	fs.IntVar(&o.floodConns, "flood-clients", 8, "the flood load's clients, each sending requests back to back")
	fs.IntVar(&o.aActors, "a-actors", 5, "tenant A's actors")
	fs.DurationVar(&o.aInterval, "a-interval", time.Second, "how often each of A's alarms fires")
	fs.DurationVar(&o.readEvery, "a-read-every", 200*time.Millisecond, "how often A reads")
	fs.DurationVar(&o.bDeadline, "b-alarm-deadline", 0, "tenant B's class's on-alarm deadline (default: keepnode's, 5 s; -short: 500 ms, so that its hanging and spinning handlers drain in the time CI gives)")
	fs.StringVar(&o.keepnode, "keepnode", "", "a keepnode binary to run rather than this tree's (one from before the per-tenant flags and metrics runs without them: A's figures and the lapses only)")
	fs.StringVar(&o.keepnodeFlags, "keepnode-flags", "", "more keepnode flags, space-separated (for example \"-workers 32 -guest-slots 6\")")
	fs.BoolVar(&o.keep, "keep", false, "keep the run's directory (the nodes' logs)")
	fs.BoolVar(&o.verbose, "v", false, "print the nodes' log lines")
	fs.DurationVar(&o.latenessSlack, "lateness-slack", 100*time.Millisecond, "bound: A's lateness p99 ≤ factor × baseline + this")
	fs.Float64Var(&o.latenessFactor, "lateness-factor", 3, "bound: A's lateness p99 ≤ this × baseline + slack")
	fs.DurationVar(&o.readSlack, "read-slack", 100*time.Millisecond, "bound: A's read p99 ≤ factor × baseline + this")
	fs.Float64Var(&o.readFactor, "read-factor", 3, "bound: A's read p99 ≤ this × baseline + slack")
	fs.Float64Var(&o.minFired, "min-fired", 0.95, "bound: A gets at least this share of its expected firings")
	fs.Float64Var(&o.minBRatio, "min-b-ratio", 0.5, "bound: B's rate beside A is at least this share of its rate alone")
	fs.IntVar(&o.retries, "retries", 0, "how many times a load past its bounds runs again before the run fails (-short: 1): on a shared machine one slow second can pass a bound of the short phases")
	fs.Parse(os.Args[1:])
	if o.short {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["phase"] {
			o.phase = 10 * time.Second
		}
		if !set["alone"] {
			o.alone = 5 * time.Second
		}
		if !set["burst"] {
			o.burst = 1000
		}
		if !set["hostile"] {
			o.hostile = 8
		}
		if !set["b-alarm-deadline"] {
			o.bDeadline = 500 * time.Millisecond
		}
		// More of A's samples in the short phases, for percentiles that
		// are not just the slowest one: still a light load.
		if !set["a-actors"] {
			o.aActors = 10
		}
		if !set["a-read-every"] {
			o.readEvery = 50 * time.Millisecond
		}
		if !set["retries"] {
			o.retries = 1
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ok, err := run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "noisy:", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// run runs the whole measurement; ok is false when a bound was passed.
func run(ctx context.Context, o *options) (ok bool, err error) {
	for _, l := range strings.Split(o.loads, ",") {
		if !slices.Contains(loads, l) {
			return false, fmt.Errorf("-loads: unknown load %q (want %s)", l, strings.Join(loads, ", "))
		}
	}
	dir, err := os.MkdirTemp("", "noisy-")
	if err != nil {
		return false, err
	}
	if o.keep {
		fmt.Println("run directory:", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	fmt.Printf("noisy: load average at start %s\n", loadAvg())
	bin := o.keepnode
	if bin == "" {
		if bin, err = clusterproc.Build(ctx, dir); err != nil {
			return false, err
		}
	}
	help, _ := exec.CommandContext(ctx, bin, "-help").CombinedOutput()
	current := bytes.Contains(help, []byte("-tenant-weight"))
	if !current {
		fmt.Println("noisy: this keepnode has no per-tenant flags: B's rates and the lease's validity are not measured, and B runs at keepnode's own alarm deadline")
	}
	wasm := filepath.Join(dir, "noisy.wasm")
	if err := os.WriteFile(wasm, guestWasm, 0o644); err != nil {
		return false, err
	}
	var s3 clusterproc.S3
	if os.Getenv("AWS_ENDPOINT_URL") != "" {
		s3 = clusterproc.S3{Bucket: fmt.Sprintf("noisy-%d", time.Now().UnixNano())}
	} else {
		gw, err := clusterproc.StartVersitygw(ctx, dir)
		if err != nil {
			return false, err
		}
		defer gw.Stop()
		s3 = gw.S3("noisy")
	}
	flags := []string{"-create-bucket", "-metrics-addr", "127.0.0.1:0"}
	if current {
		flags = append(flags, "-tenant-weight", "a=1,b=1")
		if o.bDeadline > 0 {
			flags = append(flags, "-alarm-deadline", classB+"="+o.bDeadline.String())
		}
	}
	flags = append(flags, strings.Fields(o.keepnodeFlags)...)
	cfg := clusterproc.Config{Binary: bin, S3: s3, Dir: dir, Classes: map[string]string{classA: wasm, classB: wasm}, Flags: flags}
	if o.verbose {
		cfg.Log = os.Stderr
	}
	nodes, err := clusterproc.StartNodes(ctx, cfg, max(1, o.nodes))
	if err != nil {
		return false, err
	}
	defer func() {
		for _, n := range nodes {
			_ = n.Stop()
		}
	}()
	r := newRunner(o, nodes)
	defer r.close()
	return r.measure(ctx)
}

// runner drives the run against the first node.
type runner struct {
	o     *options
	nodes []*clusterproc.Node
	c     *client.Client
	hc    *http.Client

	mu      sync.Mutex
	samples []sample // the first node's metrics, every 250 ms
	stopS   func()
}

// sample is what a scrape of the first node read.
type sample struct {
	at         time.Time
	validity   float64 // wasmkeep_node_lease_validity_seconds
	bDelivered float64 // wasmkeep_tenant_deliveries_total{tenant="b"}
	bGuest     float64 // wasmkeep_tenant_guest_seconds_total{tenant="b"}
	busy       float64 // deliveries running + waiting + guest slots busy
	takeovers  float64 // wasmkeep_hold_takeovers_total, on the other nodes
}

func newRunner(o *options, nodes []*clusterproc.Node) *runner {
	hc := &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 256, MaxConnsPerHost: 0}}
	c, err := client.New(nodes[0].URL, client.WithHTTPClient(hc))
	if err != nil {
		panic(err) // the node's URL is ours
	}
	r := &runner{o: o, nodes: nodes, c: c, hc: hc}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.sampleLoop(ctx) }()
	r.stopS = func() { cancel(); <-done }
	return r
}

func (r *runner) close() { r.stopS() }

func (r *runner) sampleLoop(ctx context.Context) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		s, err := r.scrape(ctx)
		if err == nil {
			r.mu.Lock()
			r.samples = append(r.samples, s)
			r.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// metricsOf reads a node's metrics.
func (r *runner) metricsOf(ctx context.Context, n *clusterproc.Node) (map[string]*familyValues, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.MetricsURL, nil)
	if err != nil {
		return nil, err
	}
	resp, err := r.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, err
	}
	out := map[string]*familyValues{}
	for name, f := range fams {
		fv := &familyValues{}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
			fv.rows = append(fv.rows, row{labels, v})
		}
		out[name] = fv
	}
	return out, nil
}

type row struct {
	labels map[string]string
	v      float64
}

type familyValues struct{ rows []row }

// value sums the rows whose labels include the pairs.
func (f *familyValues) value(pairs ...string) float64 {
	if f == nil {
		return 0
	}
	sum := 0.0
	for _, r := range f.rows {
		match := true
		for i := 0; i+1 < len(pairs); i += 2 {
			if r.labels[pairs[i]] != pairs[i+1] {
				match = false
			}
		}
		if match {
			sum += r.v
		}
	}
	return sum
}

func (r *runner) scrape(ctx context.Context) (sample, error) {
	at := time.Now() // the scrape's start: a scrape of a busy node takes a while
	m, err := r.metricsOf(ctx, r.nodes[0])
	if err != nil {
		return sample{}, err
	}
	s := sample{at: at,
		validity:   m["wasmkeep_node_lease_validity_seconds"].value(),
		bDelivered: m["wasmkeep_tenant_deliveries_total"].value("tenant", "b"),
		bGuest:     m["wasmkeep_tenant_guest_seconds_total"].value("tenant", "b"),
		busy: m["wasmkeep_deliveries_running"].value() + m["wasmkeep_deliveries_waiting"].value() +
			m["wasmkeep_guest_slots_busy"].value(),
	}
	for _, n := range r.nodes[1:] {
		o, err := r.metricsOf(ctx, n)
		if err != nil {
			return sample{}, err
		}
		s.takeovers += o["wasmkeep_hold_takeovers_total"].value()
	}
	return s, nil
}

// window returns the samples taken between from and to.
func (r *runner) window(from, to time.Time) []sample {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []sample
	for _, s := range r.samples {
		if !s.at.Before(from) && !s.at.After(to) {
			out = append(out, s)
		}
	}
	return out
}

// latest returns the newest sample after t, waiting for one.
func (r *runner) latestAfter(ctx context.Context, t time.Time) (sample, error) {
	for {
		r.mu.Lock()
		var s sample
		if n := len(r.samples); n > 0 {
			s = r.samples[n-1]
		}
		r.mu.Unlock()
		if s.at.After(t) {
			return s, nil
		}
		select {
		case <-ctx.Done():
			return sample{}, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// settle waits until the first node runs no delivery and no guest.
func (r *runner) settle(ctx context.Context) error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		s, err := r.latestAfter(ctx, time.Now())
		if err != nil {
			return err
		}
		if s.busy == 0 {
			return nil
		}
	}
	return errors.New("the node did not settle within 60 s: deliveries or guests still running")
}

func id(tenant, name string) abi.ActorID {
	c := classA
	if tenant == "b" {
		c = classB
	}
	return abi.ActorID{Tenant: tenant, Class: c, Name: name}
}

// arm sends "A": the actor's mode and interval, and its alarm at at.
func (r *runner) arm(ctx context.Context, a abi.ActorID, at time.Time, interval time.Duration, mode byte) error {
	req := []byte{'A'}
	req = binary.LittleEndian.AppendUint64(req, uint64(at.UnixMilli()))
	req = binary.LittleEndian.AppendUint64(req, uint64(interval.Milliseconds()))
	req = append(req, mode)
	_, err := r.c.Exec(ctx, a, req)
	return err
}

// parallel runs f for each of n indexes, 16 at once, and returns the
// first error.
func parallel(n int, f func(i int) error) error { return parallelN(16, n, f) }

// parallelN is parallel with conc at once.
func parallelN(conc, n int, f func(i int) error) error {
	var next atomic.Int64
	var first atomic.Pointer[error]
	var wg sync.WaitGroup
	for range min(conc, n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || first.Load() != nil {
					return
				}
				if err := f(i); err != nil {
					first.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	wg.Wait()
	if e := first.Load(); e != nil {
		return *e
	}
	return nil
}

// tenantA is A's light load: its actors' alarms and its reads.
type tenantA struct {
	r     *runner
	mu    sync.Mutex
	reads []timed // latency of each read, when sent
	stop  func()
}

type timed struct {
	at time.Time
	d  time.Duration
}

func (r *runner) actorA(i int) abi.ActorID { return id("a", fmt.Sprintf("a%d", i)) }

// startA arms A's alarms (first due one interval from now) and starts its
// reads; it returns when the alarms are armed.
func (a *tenantA) start(ctx context.Context) (armedAt time.Time, err error) {
	r := a.r
	at := time.Now().Add(r.o.aInterval).Truncate(time.Millisecond) // the alarm's own precision
	if err := parallel(r.o.aActors, func(i int) error {
		return r.arm(ctx, r.actorA(i), at, r.o.aInterval, modeOK)
	}); err != nil {
		return time.Time{}, fmt.Errorf("arming tenant A: %w", err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(r.o.readEvery)
		defer t.Stop()
		for i := 0; ; i++ {
			select {
			case <-rctx.Done():
				return
			case <-t.C:
			}
			sent := time.Now()
			_, err := r.c.Exec(rctx, r.actorA(i%r.o.aActors), []byte{'R'})
			if rctx.Err() != nil {
				return
			}
			d := time.Since(sent)
			if err != nil {
				fmt.Fprintf(os.Stderr, "noisy: tenant A's read failed: %v\n", err)
				d = time.Hour // counts as a read that never came
			}
			a.mu.Lock()
			a.reads = append(a.reads, timed{sent, d})
			a.mu.Unlock()
		}
	}()
	a.stop = func() { cancel(); <-done }
	return at, nil
}

// halt stops A's reads and clears its alarms.
func (a *tenantA) halt(ctx context.Context) error {
	if a.stop != nil {
		a.stop()
		a.stop = nil
	}
	r := a.r
	return parallel(r.o.aActors, func(i int) error {
		_, err := r.c.ClearAlarm(ctx, r.actorA(i))
		return err
	})
}

// readsIn returns the latencies of the reads sent between from and to.
func (a *tenantA) readsIn(from, to time.Time) []time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []time.Duration
	for _, rd := range a.reads {
		if !rd.at.Before(from) && rd.at.Before(to) {
			out = append(out, rd.d)
		}
	}
	return out
}

// firing is one of A's firings from its ledger.
type firing struct{ scheduled, ran time.Time }

// ledgers reads A's firings.
func (r *runner) ledgers(ctx context.Context) ([]firing, error) {
	var actors []abi.ActorID
	for i := range r.o.aActors {
		actors = append(actors, r.actorA(i))
	}
	return r.ledgersOf(ctx, actors)
}

// ledgersOf reads the firings of actors.
func (r *runner) ledgersOf(ctx context.Context, actors []abi.ActorID) ([]firing, error) {
	var mu sync.Mutex
	var out []firing
	err := parallel(len(actors), func(i int) error {
		b, err := r.c.Exec(ctx, actors[i], []byte{'G'})
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for ; len(b) >= 16; b = b[16:] {
			out = append(out, firing{
				scheduled: time.UnixMilli(int64(binary.LittleEndian.Uint64(b))),
				ran:       time.UnixMilli(int64(binary.LittleEndian.Uint64(b[8:]))),
			})
		}
		return nil
	})
	return out, err
}

// loadB is one of B's loads while it runs.
type loadB struct {
	name     string
	actors   []abi.ActorID
	requests atomic.Int64 // the flood's successful requests
	stop     func()
}

// prepare makes the load's actors ready: the burst's and the hostile
// loads' alarms armed for due, the same instant for all.
func (r *runner) prepare(ctx context.Context, name string, due time.Time) (*loadB, error) {
	l := &loadB{name: name}
	n, mode := r.o.hostile, byte(0)
	switch name {
	case "flood":
		for i := range r.o.floodConns {
			l.actors = append(l.actors, id("b", fmt.Sprintf("flood%d", i)))
		}
		return l, nil
	case "burst":
		n, mode = r.o.burst, modeOK
	case "hang":
		mode = modeHang
	case "spin":
		mode = modeSpin
	case "fail":
		mode = modeFail
	}
	for i := range n {
		l.actors = append(l.actors, id("b", fmt.Sprintf("%s%d", name, i)))
	}
	err := parallel(len(l.actors), func(i int) error { return r.arm(ctx, l.actors[i], due, 0, mode) })
	if err != nil {
		return nil, fmt.Errorf("arming load %s: %w", name, err)
	}
	if late := time.Since(due); late > 0 {
		return nil, fmt.Errorf("arming load %s's %d actors ended %v after the instant they were due: the machine is too slow for this run", name, len(l.actors), late.Round(time.Millisecond))
	}
	return l, nil
}

// startFlood starts the flood's clients.
func (r *runner) startFlood(ctx context.Context, l *loadB) {
	fctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	body := append([]byte{'W'}, bytes.Repeat([]byte("x"), 31)...)
	for _, a := range l.actors {
		wg.Go(func() {
			for fctx.Err() == nil {
				if _, err := r.c.Exec(fctx, a, body); err == nil {
					l.requests.Add(1)
				} else if fctx.Err() == nil {
					time.Sleep(10 * time.Millisecond)
				}
			}
		})
	}
	l.stop = func() { cancel(); wg.Wait() }
}

// end stops the load: the flood's clients, or the alarms of its actors.
func (r *runner) end(ctx context.Context, l *loadB) error {
	if l.stop != nil {
		l.stop()
		return nil
	}
	if l.name == "burst" {
		return nil // each fired once, or fires once more and is done
	}
	// Each clear waits for the actor's delivery under way: all at once.
	return parallelN(len(l.actors), len(l.actors), func(i int) error {
		_, err := r.c.ClearAlarm(ctx, l.actors[i])
		return err
	})
}

// prepTime is how long arming n actors (made before the run) may take, for
// the instant they are due: generous, at 125 a second.
func prepTime(n int) time.Duration { return time.Second + time.Duration(n)*8*time.Millisecond }

// createB makes B's actors of the loads to run before the baseline, so
// that arming them for a load is a request to an actor that exists, not
// its creation (arming 1,000 new actors took up to 7 s on two busy cores).
func (r *runner) createB(ctx context.Context) error {
	var actors []abi.ActorID
	for _, name := range strings.Split(r.o.loads, ",") {
		n := r.o.hostile
		switch name {
		case "flood":
			continue
		case "burst":
			n = r.o.burst
		}
		for i := range n {
			actors = append(actors, id("b", fmt.Sprintf("%s%d", name, i)))
		}
	}
	start := time.Now()
	err := parallel(len(actors), func(i int) error {
		_, err := r.c.Exec(ctx, actors[i], []byte{'C'})
		return err
	})
	if err != nil {
		return fmt.Errorf("making B's actors: %w", err)
	}
	fmt.Printf("noisy: made B's %d actors in %v\n", len(actors), time.Since(start).Round(time.Millisecond))
	return nil
}

// runB runs load name for d from its due instant, and returns B's rate
// (the flood's requests, or the deliveries of B's alarms, a second) and
// the window it ran in.
func (r *runner) runB(ctx context.Context, name string, d time.Duration, during func(from time.Time)) (rate float64, from, to time.Time, err error) {
	n := r.o.hostile
	if name == "burst" {
		n = r.o.burst
	}
	due := time.Now().Add(prepTime(n)).Truncate(time.Millisecond)
	l, err := r.prepare(ctx, name, due)
	if err != nil {
		return 0, from, to, err
	}
	if name == "flood" {
		due = time.Now()
	}
	time.Sleep(time.Until(due))
	from = time.Now()
	if during != nil {
		during(from)
	}
	if name == "flood" {
		r.startFlood(ctx, l)
	}
	select {
	case <-ctx.Done():
		return 0, from, to, ctx.Err()
	case <-time.After(d):
	}
	to = time.Now()
	if err := r.end(ctx, l); err != nil {
		return 0, from, to, err
	}
	if name == "flood" {
		return float64(l.requests.Load()) / to.Sub(from).Seconds(), from, to, nil
	}
	// B's deliveries: over the window, or for the burst until its last.
	ss := r.window(from, to)
	if len(ss) < 2 {
		return 0, from, to, errors.New("too few metric samples in the window")
	}
	first, last := ss[0], ss[len(ss)-1]
	span := last.at.Sub(first.at)
	if name == "hang" || name == "spin" {
		// Their deliveries end only at the deadline: B's progress is the
		// guest time it gets, in guest slots held on average.
		if span <= 0 {
			return 0, from, to, nil
		}
		return (last.bGuest - first.bGuest) / span.Seconds(), from, to, nil
	}
	if name == "burst" {
		// The burst drains at its own pace, past the window if it must:
		// its rate is its alarms over the time from their instant to the
		// last one's run, from the actors' ledgers.
		if err := r.settle(ctx); err != nil {
			return 0, from, to, err
		}
		fs, err := r.ledgersOf(ctx, l.actors)
		if err != nil {
			return 0, from, to, err
		}
		var lastRan time.Time
		n := 0
		for _, f := range fs {
			if f.scheduled.Equal(due) {
				n++
				if f.ran.After(lastRan) {
					lastRan = f.ran
				}
			}
		}
		if n < len(l.actors) {
			return 0, from, to, fmt.Errorf("the burst's ledgers hold %d firings of its %d alarms due at %v", n, len(l.actors), due)
		}
		return float64(n) / lastRan.Sub(due).Seconds(), from, to, nil
	}
	if span <= 0 {
		return 0, from, to, nil
	}
	return (last.bDelivered - first.bDelivered) / span.Seconds(), from, to, nil
}

// result is one phase's figures.
type result struct {
	load                 string
	latP50, latP99       time.Duration
	fired, expected      int
	readP50, readP99     time.Duration
	bRate, bAlone        float64
	lapses, lateRenewals int
	minValidity          float64
	takeovers            float64
	failures             []string
	tries                int // the load's runs, the last one's figures kept
}

// logCounter counts lines of the nodes' logs.
type logCounter struct{ nodes []*clusterproc.Node }

func (lc logCounter) count(substr string) int {
	n := 0
	for _, nd := range lc.nodes {
		f, err := os.Open(nd.LogPath)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if strings.Contains(sc.Text(), substr) {
				n++
			}
		}
		f.Close()
	}
	return n
}

const (
	lapseLine       = "lease valid again in a new epoch"
	lateRenewalLine = "lease renewal answered too late"
)

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// lateness returns A's firings scheduled in [from, to) and their lateness.
func lateness(fs []firing, from, to time.Time) []time.Duration {
	var out []time.Duration
	for _, f := range fs {
		if !f.scheduled.Before(from) && f.scheduled.Before(to) {
			out = append(out, max(0, f.ran.Sub(f.scheduled)))
		}
	}
	return out
}

func (r *runner) measure(ctx context.Context) (bool, error) {
	o := r.o
	logs := logCounter{r.nodes}
	a := &tenantA{r: r}
	type window struct {
		load          string
		from, to      time.Time
		armedAt       time.Time
		bRate, bAlone float64
		lapses, late  int
		minValidity   float64
		takeovers     float64
	}
	// phaseStats fills a window's lease and takeover figures.
	stats := func(w *window, lapses0, late0 int) {
		w.lapses, w.late = logs.count(lapseLine)-lapses0, logs.count(lateRenewalLine)-late0
		w.minValidity = math.Inf(1)
		ss := r.window(w.from, w.to)
		for _, s := range ss {
			w.minValidity = min(w.minValidity, s.validity)
		}
		if len(ss) > 1 {
			w.takeovers = ss[len(ss)-1].takeovers - ss[0].takeovers
		}
	}

	if err := r.createB(ctx); err != nil {
		return false, err
	}

	// A's baseline.
	begin := time.Now()
	fmt.Printf("noisy: tenant A alone (%d actors every %v, a read every %v) for %v\n", o.aActors, o.aInterval, o.readEvery, o.phase)
	l0, t0 := logs.count(lapseLine), logs.count(lateRenewalLine)
	armed, err := a.start(ctx)
	if err != nil {
		return false, err
	}
	time.Sleep(time.Until(armed))
	base := window{load: "baseline", from: armed, armedAt: armed}
	time.Sleep(o.phase)
	base.to = time.Now()
	if err := a.halt(ctx); err != nil {
		return false, err
	}
	stats(&base, l0, t0)
	// resultOf reads A's ledgers for a window's figures.
	resultOf := func(w window) (result, error) {
		fs, err := r.ledgers(ctx)
		if err != nil {
			return result{}, err
		}
		lat := lateness(fs, w.armedAt, w.to)
		reads := a.readsIn(w.armedAt, w.to)
		expected := int(float64(o.aActors) * w.to.Sub(w.armedAt).Seconds() / o.aInterval.Seconds())
		return result{
			load: w.load, latP50: percentile(lat, .5), latP99: percentile(lat, .99), fired: len(lat), expected: expected,
			readP50: percentile(reads, .5), readP99: percentile(reads, .99),
			bRate: w.bRate, bAlone: w.bAlone, lapses: w.lapses, lateRenewals: w.late, minValidity: w.minValidity, takeovers: w.takeovers,
		}, nil
	}
	baseResult, err := resultOf(base)
	if err != nil {
		return false, err
	}
	results := []result{baseResult}

	for _, name := range strings.Split(o.loads, ",") {
		for try := 0; ; try++ {
			if err := r.settle(ctx); err != nil {
				return false, err
			}
			fmt.Printf("noisy: %v: load %s: tenant B alone for %v\n", time.Since(begin).Round(time.Second), name, o.alone)
			alone, _, _, err := r.runB(ctx, name, o.alone, nil)
			if err != nil {
				return false, err
			}
			if err := r.settle(ctx); err != nil {
				return false, err
			}
			fmt.Printf("noisy: %v: load %s: tenant A beside B for %v\n", time.Since(begin).Round(time.Second), name, o.phase)
			w := window{load: name, bAlone: alone}
			l0, t0 := logs.count(lapseLine), logs.count(lateRenewalLine)
			var aErr error
			rate, from, to, err := r.runB(ctx, name, o.phase, func(time.Time) { w.armedAt, aErr = a.start(ctx) })
			if err == nil {
				err = aErr
			}
			if err != nil {
				return false, err
			}
			if err := a.halt(ctx); err != nil {
				return false, err
			}
			w.from, w.to, w.bRate = from, to, rate
			stats(&w, l0, t0)
			res, err := resultOf(w)
			if err != nil {
				return false, err
			}
			res.tries = try + 1
			if judged := []result{baseResult, res}; judge(o, judged) || try >= o.retries {
				results = append(results, judged[1])
				break
			} else {
				fmt.Printf("noisy: load %s past its bounds (%s): once more (-retries %d)\n", name, strings.Join(judged[1].failures, "; "), o.retries)
			}
		}
	}
	ok := judge(o, results)
	report(os.Stdout, o, results)
	fmt.Printf("noisy: load average at end %s\n", loadAvg())
	return ok, nil
}

// judge checks each load's figures against the bounds and the baseline
// (results[0]), filling in each result's failures; false if any failed.
func judge(o *options, results []result) bool {
	base := results[0]
	ok := true
	for i := range results {
		r := &results[i]
		r.failures = nil
		if r.lapses > 0 {
			r.failures = append(r.failures, fmt.Sprintf("%d lease lapses", r.lapses))
		}
		if r.takeovers > 0 {
			r.failures = append(r.failures, fmt.Sprintf("%v actors taken over by another node", r.takeovers))
		}
		if r.expected > 0 && float64(r.fired) < o.minFired*float64(r.expected) {
			r.failures = append(r.failures, fmt.Sprintf("A fired %d of %d expected (under %.0f %%)", r.fired, r.expected, 100*o.minFired))
		}
		if i > 0 {
			if bound := time.Duration(o.latenessFactor*float64(base.latP99)) + o.latenessSlack; r.latP99 > bound {
				r.failures = append(r.failures, fmt.Sprintf("A's lateness p99 %v past %v", r.latP99.Round(time.Millisecond), bound.Round(time.Millisecond)))
			}
			if bound := time.Duration(o.readFactor*float64(base.readP99)) + o.readSlack; r.readP99 > bound {
				r.failures = append(r.failures, fmt.Sprintf("A's read p99 %v past %v", r.readP99.Round(time.Millisecond), bound.Round(time.Millisecond)))
			}
			if r.bRate < o.minBRatio*r.bAlone {
				r.failures = append(r.failures, fmt.Sprintf("B's rate %.1f/s beside A under %.0f %% of its %.1f/s alone", r.bRate, 100*o.minBRatio, r.bAlone))
			}
		}
		if len(r.failures) > 0 {
			ok = false
		}
	}
	return ok
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }

func report(w io.Writer, o *options, results []result) {
	bd := "keepnode's default"
	if o.bDeadline > 0 {
		bd = o.bDeadline.String()
	}
	fmt.Fprintf(w, "\n== noisy neighbours (%d node(s); A: %d actors every %v, a read every %v; B: %d alarms in the burst, %d hostile actors, on-alarm deadline %s, %d flood clients; phase %v, B alone %v)\n",
		o.nodes, o.aActors, o.aInterval, o.readEvery, o.burst, o.hostile, bd, o.floodConns, o.phase, o.alone)
	fmt.Fprintf(w, "%-9s %-19s %-13s %-19s %-24s %-7s %-10s %s\n", "B's load", "A late p50 / p99", "A fired", "A read p50 / p99", "B rate with A / alone", "lapses", "lease left", "verdict")
	for _, r := range results {
		brate := "-"
		if r.load != "baseline" {
			unit := "firings/s"
			switch r.load {
			case "flood":
				unit = "requests/s"
			case "hang", "spin":
				unit = "guest s/s"
			}
			brate = fmt.Sprintf("%.1f / %.1f %s", r.bRate, r.bAlone, unit)
		}
		verdict := "ok"
		if len(r.failures) > 0 {
			verdict = "FAIL: " + strings.Join(r.failures, "; ")
		}
		if r.tries > 1 {
			verdict += fmt.Sprintf(" (run %d: the earlier one(s) past a bound)", r.tries)
		}
		fmt.Fprintf(w, "%-9s %-19s %-13s %-19s %-24s %-7d %-10s %s\n", r.load,
			ms(r.latP50)+" / "+ms(r.latP99), fmt.Sprintf("%d / %d", r.fired, r.expected),
			ms(r.readP50)+" / "+ms(r.readP99), brate, r.lapses, fmt.Sprintf("%.1f s", r.minValidity), verdict)
	}
	fmt.Fprintf(w, "bounds: A's lateness and read p99 ≤ %g × baseline + %v; A fired ≥ %.0f %%; no lapse; B beside A ≥ %.0f %% of B alone. \"lease left\": the least validity the node's lease had left (renewals on time: %s)\n",
		o.latenessFactor, o.latenessSlack, 100*o.minFired, 100*o.minBRatio, "5.7 s or more at the default TTL")
}
