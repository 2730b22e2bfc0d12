package node_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/internal/metricstest"
	"github.com/wasmkeep/alarms/internal/s3test"
	"github.com/wasmkeep/alarms/internal/testguest"
	"github.com/wasmkeep/alarms/node"
)

// jsonLines are the JSON log lines s holds so far; each must be one.
func jsonLines(t *testing.T, s *syncBuffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(s.String()), "\n") {
		if l == "" {
			continue
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatalf("log line not JSON: %q", l)
		}
		out = append(out, v)
	}
	return out
}

// A cluster node on versitygw, its API served over HTTP: each request is
// counted under its route's pattern and status, the build and the live
// nodes are reported, the on-alarm runs are counted by class, and at INFO
// the log has one summary of the firings rather than a line for each.
func TestHTTPAndClassMetricsAndTheLogSummary(t *testing.T) {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	srv := s3test.Start(t)
	logs := &syncBuffer{}
	var ran atomic.Int64
	n, err := node.New(ctx, node.Config{
		DataDir: t.TempDir(), Classes: map[string][]byte{"oneshot": testguest.Fixture(t, "oneshot_alarm")},
		Logger:          hclog.New(&hclog.LoggerOptions{Name: "o", Level: hclog.Info, Output: logs, JSONFormat: true}),
		Registerer:      reg,
		LogSummaryEvery: 300 * time.Millisecond,
		OnDelivery: func(ev node.DeliveryEvent) {
			if ev.Err == nil && ev.Event.Ran {
				ran.Add(1)
			}
		},
		Cluster: &node.ClusterConfig{
			Bucket: srv.NewClient(t), NodeID: "o1", Addr: "o1.invalid:1",
			LeaseTTL: 2 * time.Second, LeaseMargin: 300 * time.Millisecond, LeaseGrace: time.Second,
			SweepPeriod: 200 * time.Millisecond, IdleTimeout: time.Minute,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close(ctx)
	n.Start(ctx)
	api := httptest.NewServer(n.Handler())
	defer api.Close()

	const actors = 4
	const execRoute = "POST /v1/actors/{tenant}/{class}/{name}"
	due := time.Now().Add(time.Second).UnixMilli()
	do := func(method, path string, body []byte) int {
		req, _ := http.NewRequest(method, api.URL+path, bytes.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for i := 0; i < actors; i++ {
		if code := do("POST", "/v1/actors/t/oneshot/"+string(rune('a'+i))+"?kind=exec-durable", alarmAt(due)); code != http.StatusOK {
			t.Fatalf("exec: %d", code)
		}
	}
	if code := do("GET", "/v1/actors/t/oneshot/a/alarm", nil); code != http.StatusOK {
		t.Fatalf("alarm state: %d", code)
	}
	if code := do("GET", "/v1/nothing/here", nil); code != http.StatusNotFound {
		t.Fatalf("an unknown path: %d", code)
	}
	if code := do("POST", "/v1/actors/t/nosuchclass/a", nil); code/100 != 4 {
		t.Fatalf("a class not served: %d", code)
	}
	waitFor(t, "every alarm fired", func() bool { return ran.Load() == actors })

	m := metricstest.Gather(reg)
	if got := m.Value("wasmkeep_http_requests_total", "route", execRoute, "code", "200"); got != actors {
		t.Errorf("requests of %s answered 200 = %v, want %d", execRoute, got, actors)
	}
	if got := m.Value("wasmkeep_http_request_duration_seconds", "route", execRoute, "code", "200"); got != actors {
		t.Errorf("durations of %s = %v observations, want %d", execRoute, got, actors)
	}
	if got := m.Value("wasmkeep_http_requests_total", "route", "GET /v1/actors/{tenant}/{class}/{name}/alarm", "code", "200"); got != 1 {
		t.Errorf("alarm state requests = %v, want 1", got)
	}
	if got := m.Value("wasmkeep_http_requests_total", "route", "unmatched", "code", "404"); got != 1 {
		t.Errorf("unmatched 404s = %v, want 1", got)
	}
	if got := m.Value("wasmkeep_http_requests_total"); got != actors+3 {
		t.Errorf("requests counted = %v, want %d", got, actors+3)
	}
	for _, mf := range m["wasmkeep_http_requests_total"].GetMetric() {
		for _, l := range mf.GetLabel() {
			if l.GetName() == "route" && strings.Contains(l.GetValue(), "nosuchclass") {
				t.Errorf("a route label holds a path: %q", l.GetValue())
			}
		}
	}
	if got := m.Value("wasmkeep_build_info", "goversion", runtime.Version()); got != 1 {
		t.Errorf("wasmkeep_build_info{goversion=%q} = %v, want 1", runtime.Version(), got)
	}
	if got := m.Value("wasmkeep_cluster_nodes_live"); got != 1 {
		t.Errorf("live nodes = %v, want 1 (this one)", got)
	}
	if got := m.Value("wasmkeep_class_alarm_runs_total", "class", "oneshot", "result", "ok"); got != actors {
		t.Errorf("runs of class oneshot ok = %v, want %d", got, actors)
	}
	if got := m.Value("wasmkeep_class_alarm_runs_total", "class", "nosuchclass"); got != 0 || len(m["wasmkeep_class_alarm_runs_total"].GetMetric()) != 3 {
		t.Errorf("the class label has other values than the node's one class: %v", m["wasmkeep_class_alarm_runs_total"].GetMetric())
	}

	// At INFO: no line per firing, and summaries that add up to them.
	var summed float64
	waitFor(t, "the summary of the firings", func() bool {
		summed = 0
		for _, l := range jsonLines(t, logs) {
			if msg, _ := l["@message"].(string); strings.HasPrefix(msg, "alarms in the last ") {
				f, _ := l["fired"].(float64)
				summed += f
			}
		}
		return summed == actors
	})
	for _, l := range jsonLines(t, logs) {
		if l["@message"] == "alarm fired" {
			t.Fatalf("a firing logged at INFO: %v", l)
		}
	}
	// Nothing fires any more: no summary of nothing.
	before := len(jsonLines(t, logs))
	time.Sleep(time.Second)
	for _, l := range jsonLines(t, logs)[before:] {
		if msg, _ := l["@message"].(string); strings.HasPrefix(msg, "alarms in the last ") {
			t.Errorf("a summary with nothing fired: %v", l)
		}
	}
}

// Run at DEBUG, a node logs each firing.
func TestFiringsAtDebug(t *testing.T) {
	ctx := context.Background()
	logs := &syncBuffer{}
	n := newNode(t, t.TempDir(), map[string][]byte{"oneshot": testguest.Fixture(t, "oneshot_alarm")}, node.Config{
		Logger: hclog.New(&hclog.LoggerOptions{Name: "d", Level: hclog.Debug, Output: logs, JSONFormat: true}),
	})
	defer n.Close(ctx)
	n.Start(ctx)
	id := abi.ActorID{Tenant: "t", Class: "oneshot", Name: "a"}
	if _, err := n.Exec(ctx, id, alarmAt(time.Now().Add(100*time.Millisecond).UnixMilli()), node.ExecDurable); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the firing's debug line", func() bool {
		for _, l := range jsonLines(t, logs) {
			if l["@message"] == "alarm fired" && l["@level"] == "debug" && l["actor"] == id.String() {
				return true
			}
		}
		return false
	})
}
