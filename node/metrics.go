package node

import (
	"fmt"
	"net/http"
	"net/http/pprof"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/wasmkeep/alarms/hostmod"
)

// nodeCollector exposes the node's own counters: its actors, what it gave
// up, and in cluster mode its lease and holds.
type nodeCollector struct {
	n                                  *Node
	actors, givenUp, leaseValid        *prometheus.Desc
	restored                           *prometheus.Desc
	taken, takeovers, released, relErr *prometheus.Desc
}

func newNodeCollector(n *Node) *nodeCollector {
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }
	return &nodeCollector{
		n:          n,
		actors:     d("wasmkeep_node_actors", "Actors the node keeps a record of (open, or reached since the idle reaper last ran)."),
		givenUp:    d("wasmkeep_node_actors_given_up_total", "Actors given up after a failure (closed, their hold let go; the next event takes them afresh)."),
		restored:   d("wasmkeep_actor_restores_total", "Actors restored from the bucket: taken with a local database that was not the bucket's newest state, so the snapshot was downloaded (cluster mode)."),
		leaseValid: d("wasmkeep_node_lease_valid", "1 while the node's lease is valid, 0 otherwise (cluster mode)."),
		taken:      d("wasmkeep_holds_taken_total", "Holds the node took: ownership records naming it with a new generation (cluster mode)."),
		takeovers:  d("wasmkeep_hold_takeovers_total", "Holds taken from a node whose lease had expired or ended (cluster mode)."),
		released:   d("wasmkeep_hold_releases_total", "Holds the node released (idle actors, shutdown, failures) (cluster mode)."),
		relErr:     d("wasmkeep_hold_release_errors_total", "Releases whose record could not be written back: taken over meanwhile, or the bucket failed (cluster mode)."),
	}
}

func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.actors, c.givenUp, c.restored, c.leaseValid, c.taken, c.takeovers, c.released, c.relErr} {
		ch <- d
	}
}

func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.n
	n.mu.Lock()
	known := len(n.entries)
	n.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(c.actors, prometheus.GaugeValue, float64(known))
	ch <- prometheus.MustNewConstMetric(c.givenUp, prometheus.CounterValue, float64(n.givenUp.Load()))
	if n.leases == nil {
		return
	}
	valid := 0.0
	if n.leases.Valid() {
		valid = 1
	}
	ch <- prometheus.MustNewConstMetric(c.leaseValid, prometheus.GaugeValue, valid)
	ch <- prometheus.MustNewConstMetric(c.restored, prometheus.CounterValue, float64(n.restored.Load()))
	s := n.holds.Stats()
	ch <- prometheus.MustNewConstMetric(c.taken, prometheus.CounterValue, float64(s.Taken))
	ch <- prometheus.MustNewConstMetric(c.takeovers, prometheus.CounterValue, float64(s.Takeovers))
	ch <- prometheus.MustNewConstMetric(c.released, prometheus.CounterValue, float64(s.Released))
	ch <- prometheus.MustNewConstMetric(c.relErr, prometheus.CounterValue, float64(s.ReleaseErrors))
}

// engineOptions puts the node's registerer in front of the embedder's
// engine options (which may replace it).
func engineOptions(cfg Config, opts []hostmod.Option) []hostmod.Option {
	if cfg.Registerer == nil {
		return append(opts, cfg.EngineOptions...)
	}
	return append(append(opts, hostmod.WithRegisterer(cfg.Registerer)), cfg.EngineOptions...)
}

// registerMetrics registers the node's own collector.
func (n *Node) registerMetrics() error {
	if n.cfg.Registerer == nil {
		return nil
	}
	if err := n.cfg.Registerer.Register(newNodeCollector(n)); err != nil {
		return fmt.Errorf("node: registering the node's metrics: %w", err)
	}
	return nil
}

// MetricsHandler serves the metrics g gathers at GET /metrics (the
// Prometheus text format, or OpenMetrics when asked), and with pprof the
// runtime profiles of net/http/pprof under /debug/pprof/. Serve it on a
// listener of its own, apart from the HTTP API: it has no tokens, and a
// profile can be requested by anyone who reaches it.
func MetricsHandler(g prometheus.Gatherer, withPprof bool) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{EnableOpenMetrics: true}))
	if withPprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}
