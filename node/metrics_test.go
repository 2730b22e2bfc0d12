package node_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/bucket/s3"
	"github.com/wasmkeep/alarms/cluster"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/internal/fakeclock"
	"github.com/wasmkeep/alarms/internal/metricstest"
	"github.com/wasmkeep/alarms/internal/s3test"
	"github.com/wasmkeep/alarms/internal/testguest"
	"github.com/wasmkeep/alarms/node"
)

// scrapeMetrics GETs a metrics endpoint over HTTP and parses the text
// format.
func scrapeMetrics(t testing.TB, url string) metricstest.Families {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("scraping %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("scraping %s: %s %s", url, resp.Status, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing %s: %v", url, err)
	}
	return fams
}

func alarmAt(ms int64) []byte {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(ms))
	return b[:]
}

// A node in cluster mode on versitygw, its metrics served over HTTP on a
// listener of their own: scraped before and after its alarms fire, the
// figures move as they must.
func TestMetricsMoveAsAlarmsFire(t *testing.T) {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	srv := s3test.Start(t)
	b := srv.NewClient(t, s3.WithRegisterer(reg))
	var fired atomic.Int64
	dir := t.TempDir()
	n, err := node.New(ctx, node.Config{
		DataDir: dir, Classes: map[string][]byte{"oneshot": testguest.Fixture(t, "oneshot_alarm")},
		Logger:     hclog.New(&hclog.LoggerOptions{Name: "m", Level: hclog.Warn, Output: testWriter{t}}),
		Registerer: reg,
		// Durable commits through the node journal, as keepnode runs.
		EngineOptions: []engine.Option{engine.WithJournal(dir)},
		OnDelivery: func(ev node.DeliveryEvent) {
			if ev.Err == nil && ev.Event.Ran {
				fired.Add(1)
			}
		},
		Cluster: &node.ClusterConfig{
			Bucket: b, NodeID: "m1", Addr: "m1.invalid:1",
			LeaseTTL: 2 * time.Second, LeaseMargin: 300 * time.Millisecond, LeaseGrace: time.Second,
			SweepPeriod: 200 * time.Millisecond, IdleTimeout: time.Minute,
			SweepSafetyPeriod: 200 * time.Millisecond, // every sweep lists, so its metrics move
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			n.Close(ctx)
		}
	}()
	n.Start(ctx)
	hs := httptest.NewServer(node.MetricsHandler(reg, true))
	defer hs.Close()
	url := hs.URL + "/metrics"

	before := scrapeMetrics(t, url)
	if got := before.Value("wasmkeep_alarms_pending"); got != 0 {
		t.Fatalf("pending before any alarm = %v", got)
	}
	if got := before.Value("wasmkeep_node_lease_valid"); got != 1 {
		t.Fatalf("lease_valid = %v, want 1", got)
	}

	const actors = 5
	due := time.Now().Add(time.Second).UnixMilli()
	for i := 0; i < actors; i++ {
		id := abi.ActorID{Tenant: "t", Class: "oneshot", Name: string(rune('a' + i))}
		if _, err := n.Exec(ctx, id, alarmAt(due), node.ExecDurable); err != nil {
			t.Fatal(err)
		}
	}
	armed := scrapeMetrics(t, url)
	if fired.Load() == 0 {
		if got := armed.Value("wasmkeep_alarms_pending"); got != actors {
			t.Errorf("pending after arming %d actors = %v", actors, got)
		}
	}
	if got := armed.Value("wasmkeep_holds_taken_total"); got != actors {
		t.Errorf("holds taken = %v, want %d", got, actors)
	}
	if got := armed.Value("wasmkeep_actor_databases_open"); got != actors {
		t.Errorf("databases open = %v, want %d", got, actors)
	}
	if got := armed.Value("wasmkeep_index_puts_total", "result", "ok"); got != actors {
		t.Errorf("index PUTs = %v, want one per actor, %d", got, actors)
	}
	// Each actor: its hold, its index entry, its snapshot.
	if got := armed.Value("wasmkeep_s3_requests_total", "operation", "PutObject", "result", "ok") - before.Value("wasmkeep_s3_requests_total", "operation", "PutObject", "result", "ok"); got < 3*actors {
		t.Errorf("PutObject ok went up by %v, want at least %d", got, 3*actors)
	}

	waitFor(t, "every alarm fired", func() bool { return fired.Load() == actors })
	n.FlushDeletes(ctx)
	// One request of the HTTP API, so its metrics have a series.
	api := httptest.NewServer(n.Handler())
	defer api.Close()
	if resp, err := http.Get(api.URL + "/v1/healthz"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/healthz: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	// A replicated actor's delivery asks the journal for its sync within
	// 20 ms, its upload having made it durable in the bucket first.
	waitFor(t, "the journal's sync of the firings' commits", func() bool {
		return scrapeMetrics(t, url).Value("wasmkeep_journal_syncs_total") > armed.Value("wasmkeep_journal_syncs_total")
	})
	after := scrapeMetrics(t, url)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"wasmkeep_alarms_pending", nil, 0},
		{"wasmkeep_alarm_firings_total", []string{"outcome", "ok"}, actors},
		{"wasmkeep_alarm_firings_total", []string{"outcome", "failed"}, 0},
		{"wasmkeep_alarm_lateness_seconds", nil, actors},
		{"wasmkeep_alarm_failing_actors", nil, 0},
		{"wasmkeep_index_deletes_total", []string{"reason", "replaced"}, actors},
	} {
		if got := after.Value(c.name, c.labels...); got != c.want {
			t.Errorf("after the firings: %s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	// S3 requests by operation and result moved, through the SDK's
	// middleware: the snapshot PUTs of the firings, the index's batched
	// deletes, the sweeps' LISTs.
	for _, op := range []string{"PutObject", "GetObject", "DeleteObjects", "ListObjectsV2"} {
		if got := after.Value("wasmkeep_s3_requests_total", "operation", op) - armed.Value("wasmkeep_s3_requests_total", "operation", op); got <= 0 && op != "GetObject" {
			t.Errorf("wasmkeep_s3_requests_total{operation=%q} did not go up while the alarms fired", op)
		}
		if after.Value("wasmkeep_s3_request_duration_seconds", "operation", op) == 0 {
			t.Errorf("no latency recorded for %s", op)
		}
	}
	// Each firing's commit waited for the node journal, whose syncs
	// each made one or more durable.
	if c, sy := after.Value("wasmkeep_journal_commits_total")-armed.Value("wasmkeep_journal_commits_total"), after.Value("wasmkeep_journal_syncs_total")-armed.Value("wasmkeep_journal_syncs_total"); c < actors || sy < 1 || sy > c {
		t.Errorf("while %d alarms fired: %v commits through the journal in %v syncs, want at least one commit each and at most a sync each", actors, c, sy)
	}
	if after.Value("wasmkeep_journal_bytes_total") <= armed.Value("wasmkeep_journal_bytes_total") {
		t.Error("wasmkeep_journal_bytes_total did not go up while the alarms fired")
	}
	if after.Value("wasmkeep_sweep_duration_seconds") <= armed.Value("wasmkeep_sweep_duration_seconds") || after.Value("wasmkeep_sweep_lists_total") == 0 {
		t.Errorf("the sweeps did not move: %v sweeps, %v LISTs", after.Value("wasmkeep_sweep_duration_seconds"), after.Value("wasmkeep_sweep_lists_total"))
	}
	// The histogram's sum is the lateness in seconds: each fired after its
	// time, and within the test's bound.
	if h := after["wasmkeep_alarm_lateness_seconds"].GetMetric()[0].GetHistogram(); h.GetSampleSum() < 0 || h.GetSampleSum() > 20*actors {
		t.Errorf("lateness sum %v s for %d firings", h.GetSampleSum(), actors)
	}

	// pprof is served on the same listener, only when asked for.
	if resp, err := http.Get(hs.URL + "/debug/pprof/cmdline"); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("pprof on the metrics listener: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	plain := httptest.NewServer(node.MetricsHandler(reg, false))
	defer plain.Close()
	if resp, err := http.Get(plain.URL + "/debug/pprof/cmdline"); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("pprof without asking for it: %v %v, want 404", resp, err)
	} else {
		resp.Body.Close()
	}

	// A clean shutdown releases every hold.
	if err := n.Close(ctx); err != nil {
		t.Fatal(err)
	}
	closed = true
	final := scrapeMetrics(t, url)
	if got := final.Value("wasmkeep_hold_releases_total"); got != actors {
		t.Errorf("hold releases after a clean shutdown = %v, want %d", got, actors)
	}
	// The running node's metrics, each in docs/operations.md and each row there
	// served (a closed node's engine has taken its own out).
	checkDocumented(t, after)
}

// checkDocumented holds the table of metrics in docs/operations.md to what
// a node in cluster mode registers: every wasmkeep_ metric it serves is
// documented, and every one documented is served.
func checkDocumented(t *testing.T, s metricstest.Families) {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join(testguest.Root(t), "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile(`\bwasmkeep_[a-z0-9_]+`).FindAllString(string(readme), -1) {
		documented[m] = true
	}
	for name := range s {
		if strings.HasPrefix(name, "wasmkeep_") && !documented[name] {
			t.Errorf("%s is served but not in docs/operations.md", name)
		}
	}
	for name := range documented {
		if !s.Has(name) {
			t.Errorf("docs/operations.md lists %s, which the node does not serve", name)
		}
	}
	// The observability guide, the alert rules and the dashboard name only
	// metrics a node serves (a histogram's by its series' names too).
	for _, f := range []string{"docs/observability.md", "deploy/prometheus/alerts.yml", "deploy/prometheus/alerts_test.yml", "deploy/grafana/wasmkeep.json"} {
		b, err := os.ReadFile(filepath.Join(testguest.Root(t), f))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`\bwasmkeep_[a-z0-9_]+`).FindAllString(string(b), -1) {
			base := m
			for _, suffix := range []string{"_bucket", "_count", "_sum"} {
				if b, ok := strings.CutSuffix(m, suffix); ok && s.Has(b) {
					base = b
				}
			}
			if !s.Has(base) {
				t.Errorf("%s names %s, which the node does not serve", f, m)
			}
		}
	}
}

// Two nodes in one process with registries of their own do not collide,
// and a node without a registerer registers nothing.
func TestNodesWithTheirOwnRegistries(t *testing.T) {
	ctx := context.Background()
	classes := map[string][]byte{"oneshot": testguest.Fixture(t, "oneshot_alarm")}
	before, _ := prometheus.DefaultGatherer.Gather()
	plain := newNode(t, t.TempDir(), classes, node.Config{})
	defer plain.Close(ctx)
	after, _ := prometheus.DefaultGatherer.Gather()
	if len(after) != len(before) {
		t.Fatalf("a node without a registerer added %d families to the default registry", len(after)-len(before))
	}
	r1, r2 := prometheus.NewRegistry(), prometheus.NewRegistry()
	n1 := newNode(t, t.TempDir(), classes, node.Config{Registerer: r1})
	defer n1.Close(ctx)
	n2 := newNode(t, t.TempDir(), classes, node.Config{Registerer: r2})
	defer n2.Close(ctx)
	id := abi.ActorID{Tenant: "t", Class: "oneshot", Name: "x"}
	if _, err := n1.Request(ctx, id, alarmAt(time.Now().Add(time.Hour).UnixMilli())); err != nil {
		t.Fatal(err)
	}
	s1 := httptest.NewServer(node.MetricsHandler(r1, false))
	defer s1.Close()
	s2 := httptest.NewServer(node.MetricsHandler(r2, false))
	defer s2.Close()
	if p1, p2 := scrapeMetrics(t, s1.URL+"/metrics").Value("wasmkeep_alarms_pending"), scrapeMetrics(t, s2.URL+"/metrics").Value("wasmkeep_alarms_pending"); p1 != 1 || p2 != 0 {
		t.Fatalf("pending %v and %v, want 1 and 0", p1, p2)
	}
	if _, err := node.New(ctx, node.Config{DataDir: t.TempDir(), Classes: classes, Registerer: r1}); err == nil || !strings.Contains(err.Error(), "registering") {
		t.Fatalf("a second node on the same registry: err = %v, want a registration error", err)
	}
}

// keepnode -metrics-addr serves the metrics of a running node (and, with
// -pprof, its profiles) on a listener of its own; scraped as its alarms
// fire on versitygw, the figures move.
func TestKeepnodeServesMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := procCluster(t, ctx, "-sweep", "200ms", "-log-level", "warn", "-metrics-addr", "127.0.0.1:0", "-pprof")
	wasm := filepath.Join(cfg.Dir, "oneshot.wasm")
	if err := os.WriteFile(wasm, testguest.Fixture(t, "oneshot_alarm"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.Classes = map[string]string{"oneshot": wasm}
	nd := startProcNodes(t, ctx, cfg, 1)[0]
	if !strings.HasPrefix(nd.MetricsURL, "http://127.0.0.1:") || !strings.HasSuffix(nd.MetricsURL, "/metrics") {
		t.Fatalf("metrics URL %q, want one on 127.0.0.1", nd.MetricsURL)
	}
	first := scrapeMetrics(t, nd.MetricsURL)
	for _, name := range []string{"go_goroutines", "process_cpu_seconds_total", "wasmkeep_alarms_pending", "wasmkeep_actor_databases_max", "wasmkeep_node_lease_valid", "wasmkeep_s3_requests_total"} {
		if !first.Has(name) {
			t.Errorf("the first scrape lacks %s", name)
		}
	}

	const actors = 3
	due := time.Now().Add(1500 * time.Millisecond).UnixMilli()
	for i := 0; i < actors; i++ {
		id := abi.ActorID{Tenant: "t", Class: "oneshot", Name: string(rune('a' + i))}
		if _, err := nd.Client().ExecDurable(ctx, id, alarmAt(due)); err != nil {
			t.Fatal(err)
		}
	}
	armed := scrapeMetrics(t, nd.MetricsURL)
	if time.Now().UnixMilli() < due {
		if got := armed.Value("wasmkeep_alarms_pending"); got != actors {
			t.Errorf("pending after arming = %v, want %d", got, actors)
		}
	}
	var last metricstest.Families
	waitFor(t, "the firings in the metrics", func() bool {
		last = scrapeMetrics(t, nd.MetricsURL)
		return last.Value("wasmkeep_alarm_firings_total", "outcome", "ok") == actors
	})
	waitFor(t, "the replaced entries' batched delete in the metrics", func() bool {
		last = scrapeMetrics(t, nd.MetricsURL)
		return last.Value("wasmkeep_s3_requests_total", "operation", "DeleteObjects", "result", "ok") > 0
	})
	if got := last.Value("wasmkeep_alarms_pending"); got != 0 {
		t.Errorf("pending after the firings = %v", got)
	}
	if got := last.Value("wasmkeep_alarm_lateness_seconds"); got != actors {
		t.Errorf("lateness observations = %v, want %d", got, actors)
	}
	for _, op := range []string{"PutObject", "DeleteObjects"} {
		if got := last.Value("wasmkeep_s3_requests_total", "operation", op, "result", "ok") - first.Value("wasmkeep_s3_requests_total", "operation", op, "result", "ok"); got <= 0 {
			t.Errorf("%s ok did not go up (%v)", op, got)
		}
	}
	if got := last.Value("wasmkeep_sweep_duration_seconds"); got <= first.Value("wasmkeep_sweep_duration_seconds") {
		t.Errorf("no sweep counted (%v)", got)
	}
	pprofURL := strings.TrimSuffix(nd.MetricsURL, "/metrics") + "/debug/pprof/cmdline"
	resp, err := http.Get(pprofURL)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %v %v", pprofURL, resp, err)
	}
	resp.Body.Close()
	// The HTTP API does not serve them.
	resp, err = http.Get(nd.URL + "/metrics")
	if err != nil || resp.StatusCode == http.StatusOK {
		t.Fatalf("GET /metrics on the API listener: %v %v, want no metrics there", resp, err)
	}
	resp.Body.Close()
}

// gathered reads the one series of a counter or gauge from reg.
func gathered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no %s in the registry", name)
	return 0
}

// A PUT of an alarm at 1,000 ms (1970), as an import of an old export
// sends, runs at once and counts as late from the PUT, not from 1970: on a
// clock that does not move, it adds nothing to either lateness histogram's
// sum (before, it added 57 years and held WasmkeepAlarmsLate on).
func TestAnAlarmPutInThePastIsNotLateFromItsTime(t *testing.T) {
	ctx := context.Background()
	clk := fakeclock.New(time.UnixMilli(1_800_000_000_000))
	reg := prometheus.NewRegistry()
	var fired atomic.Int64
	n := newNode(t, t.TempDir(), map[string][]byte{"c": testguest.Fixture(t, "oneshot_alarm")}, node.Config{
		Clock: clk, Registerer: reg,
		OnDelivery: func(ev node.DeliveryEvent) {
			if ev.Err == nil && ev.Event.Ran {
				fired.Add(1)
			}
		},
	})
	defer n.Close(ctx)
	n.Start(ctx)
	srv := httptest.NewServer(n.Handler())
	defer srv.Close()
	id := abi.ActorID{Tenant: "t", Class: "c", Name: "old"}
	if _, err := n.Exec(ctx, id, alarmAt(1_900_000_000_000), node.Exec); err != nil {
		t.Fatal(err)
	}
	if st, code, _ := sendTo(t, srv.URL, "PUT", "/v1/actors/t/c/old/alarm", `{"at_ms": 1000}`); st != 200 {
		t.Fatalf("PUT at_ms 1000: %d %s", st, code)
	}
	waitFor(t, "the alarm put at 1000 ms to fire", func() bool { return fired.Load() == 1 })
	s := metricstest.Gather(reg)
	for _, name := range []string{"wasmkeep_alarm_lateness_seconds", "wasmkeep_tenant_alarm_lateness_seconds"} {
		h := s[name].GetMetric()[0].GetHistogram()
		if h.GetSampleCount() != 1 || h.GetSampleSum() != 0 {
			t.Errorf("%s: %d runs, sum %v s; want 1 run, 0 s late (the clock did not move after the PUT)", name, h.GetSampleCount(), h.GetSampleSum())
		}
	}
}

// wasmkeep_build_info names the version and revision -ldflags -X stamped
// into node.Version and node.Revision when the build recorded none (the
// image's -buildvcs=false build, a tree without .git); a build's own
// win over them.
func TestBuildInfoFallsBackToTheStamp(t *testing.T) {
	defer func(v, r string) { node.Version, node.Revision = v, r }(node.Version, node.Revision)
	node.Version, node.Revision = "v0.5.0", "abcdef0123"
	unstamped := &debug.BuildInfo{Main: debug.Module{Path: "github.com/wasmkeep/alarms", Version: "(devel)"}}
	if v, r := node.ModuleVersion(unstamped); v != "v0.5.0" || r != "abcdef0123" {
		t.Errorf("a build with no VCS information: version %q, revision %q; want the stamp's v0.5.0, abcdef0123", v, r)
	}
	recorded := &debug.BuildInfo{Main: debug.Module{Path: "github.com/wasmkeep/alarms", Version: "v0.4.0"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123"}}}
	if v, r := node.ModuleVersion(recorded); v != "v0.4.0" || r != "0123" {
		t.Errorf("a build that recorded its own: version %q, revision %q; want v0.4.0, 0123", v, r)
	}
	node.Version, node.Revision = "", ""
	if v, r := node.ModuleVersion(unstamped); v != "(devel)" || r != "" {
		t.Errorf("no stamp and nothing recorded: version %q, revision %q; want (devel) and none", v, r)
	}
}

// A cluster node's lease names the build wasmkeep_build_info names (here
// the stamp, since a test binary records no version or commit of its
// own), so that keepctl nodes and the other nodes' consoles show it.
func TestTheLeaseNamesTheNodesBuild(t *testing.T) {
	defer func(v, r string) { node.Version, node.Revision = v, r }(node.Version, node.Revision)
	node.Version, node.Revision = "v0.5.0-3-gabcdef0", "abcdef0123456789abcdef0123456789abcdef01"
	want := cluster.Build{Version: node.Version, Revision: node.Revision}
	if bi, ok := debug.ReadBuildInfo(); ok {
		want.Version, want.Revision = node.ModuleVersion(bi)
	}
	if want.Revision == "" || want.Version == "" {
		t.Fatalf("the build names no version or revision even stamped: %+v", want)
	}
	b := bucket.NewMem()
	n := startHost(t, b, "a", t.TempDir(), map[string][]byte{}, hostConfig{})
	body, _, err := b.Get(context.Background(), "cluster/nodes/a")
	if err != nil {
		t.Fatal(err)
	}
	var rec struct{ Version, Revision string }
	if err := json.Unmarshal(body, &rec); err != nil || rec.Version != want.Version || rec.Revision != want.Revision {
		t.Fatalf("the node's lease %s (%v); want version %q, revision %q", body, err, want.Version, want.Revision)
	}
	if info, ok, err := cluster.ReadLease(context.Background(), b, "", "a"); err != nil || !ok || info.Build != want {
		t.Fatalf("ReadLease(a) = %+v, %v, %v; want build %+v", info, ok, err, want)
	}
	n.Close(context.Background())
}
