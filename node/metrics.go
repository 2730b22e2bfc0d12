package node

import (
	"fmt"
	"maps"
	"net/http"
	"net/http/pprof"
	"runtime"
	"runtime/debug"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/wasmkeep/alarms"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/format"
)

// nodeCollector exposes the node's own counters: its actors, what it gave
// up, and in cluster mode its lease and holds.
type nodeCollector struct {
	n                                  *Node
	actors, givenUp, leaseValid        *prometheus.Desc
	restored                           *prometheus.Desc
	taken, takeovers, released, relErr *prometheus.Desc
	retaken, remembered, refused       *prometheus.Desc
	liveNodes, validity                *prometheus.Desc
	newerFormat, clusterVersion        *prometheus.Desc
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
		remembered: d("wasmkeep_hold_refusals_remembered_total", "Requests sent on to the node that held their actor within a lease TTL, without reading its record and its lease again (cluster mode)."),
		refused: prometheus.NewDesc("wasmkeep_hold_takes_refused_total",
			"Takes of an actor refused because its ownership record named another node whose lease is live, and the event sent on to the holder, by how the lease was known: lease=\"read\" read by the take (two GETs each), lease=\"watched\" renewed within a TTL by this node's readings of the leases (one GET each) (cluster mode).",
			[]string{"lease"}, nil),
		retaken:   d("wasmkeep_hold_retakes_total", "Holds among those taken that the node took again after a lapse of its lease, with one conditional write, keeping the open actor (cluster mode)."),
		released:  d("wasmkeep_hold_releases_total", "Holds the node released (idle actors, shutdown, failures) (cluster mode)."),
		relErr:    d("wasmkeep_hold_release_errors_total", "Releases whose record could not be written back: taken over meanwhile, or the bucket failed (cluster mode)."),
		validity:  d("wasmkeep_node_lease_validity_seconds", "How long the node's lease stays valid unless renewed: between TTL - margin - a renewal period and TTL - margin while renewals are on time, less as a renewal is late; 0 when not valid (cluster mode)."),
		liveNodes: d("wasmkeep_cluster_nodes_live", "Nodes of the cluster this node sees live: itself while its lease is valid, and each other whose lease it saw renewed within a lease period and grace (cluster mode)."),
		newerFormat: prometheus.NewDesc("wasmkeep_newer_format_total",
			"Records in the bucket refused as of a format newer than this build reads, by kind: other nodes' leases read, ownership records read, index entries a sweep skipped, snapshots and schemas a restore refused, dead-letter records read (cluster mode); and local databases of such a schema that the start-up scan skipped or an event refused to open (either mode). Each is left as it is.",
			[]string{"kind"}, nil),
		clusterVersion: prometheus.NewDesc("wasmkeep_cluster_version",
			"The cluster version the cluster was finalized at, as the node read it when it started (state=\"finalized\"; 0: never), and the newest this build supports (state=\"supported\") (cluster mode).",
			[]string{"state"}, nil),
	}
}

func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.actors, c.givenUp, c.restored, c.leaseValid, c.validity, c.taken, c.takeovers, c.retaken, c.remembered, c.refused, c.released, c.relErr, c.liveNodes, c.newerFormat, c.clusterVersion} {
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
		// A node running alone reads only its local databases' schemas.
		for _, k := range format.Kinds {
			var v int64
			if k == format.Schema {
				v = n.newerSchemas.Load()
			}
			ch <- prometheus.MustNewConstMetric(c.newerFormat, prometheus.CounterValue, float64(v), string(k))
		}
		return
	}
	valid := 0.0
	if n.leases.Valid() {
		valid = 1
	}
	ch <- prometheus.MustNewConstMetric(c.leaseValid, prometheus.GaugeValue, valid)
	left := 0.0
	if until := n.leases.ValidUntil(); !until.IsZero() {
		left = max(0, until.Sub(n.cfg.Clock.Now()).Seconds())
	}
	ch <- prometheus.MustNewConstMetric(c.validity, prometheus.GaugeValue, left)
	ch <- prometheus.MustNewConstMetric(c.liveNodes, prometheus.GaugeValue, float64(len(n.leases.Live())))
	ch <- prometheus.MustNewConstMetric(c.clusterVersion, prometheus.GaugeValue, float64(n.finalized), "finalized")
	ch <- prometheus.MustNewConstMetric(c.clusterVersion, prometheus.GaugeValue, float64(format.ClusterVersion), "supported")
	ch <- prometheus.MustNewConstMetric(c.restored, prometheus.CounterValue, float64(n.restored.Load()))
	s := n.holds.Stats()
	ch <- prometheus.MustNewConstMetric(c.taken, prometheus.CounterValue, float64(s.Taken))
	ch <- prometheus.MustNewConstMetric(c.takeovers, prometheus.CounterValue, float64(s.Takeovers))
	ch <- prometheus.MustNewConstMetric(c.retaken, prometheus.CounterValue, float64(s.Retaken))
	ch <- prometheus.MustNewConstMetric(c.remembered, prometheus.CounterValue, float64(s.RefusedFromMemory))
	ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(s.Refused), "read")
	ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(s.RefusedWatched), "watched")
	ch <- prometheus.MustNewConstMetric(c.released, prometheus.CounterValue, float64(s.Released))
	ch <- prometheus.MustNewConstMetric(c.relErr, prometheus.CounterValue, float64(s.ReleaseErrors))
	for _, k := range format.Kinds {
		var v int64
		switch k {
		case format.Lease:
			v = n.leases.NewerFormatReads()
		case format.Hold:
			v = s.NewerFormat
		case format.IndexEntry:
			v = n.plugin.SweepStats().NewerFormat
		case format.Snapshot:
			v = n.newerSnapshots.Load()
		case format.Schema:
			v = n.newerSchemas.Load()
		case format.DeadLetter:
			v = n.newerLetters.Load()
		}
		ch <- prometheus.MustNewConstMetric(c.newerFormat, prometheus.CounterValue, float64(v), string(k))
	}
}

// engineOptions puts the node's registerer in front of the embedder's
// engine options (which may replace it).
func engineOptions(cfg Config, opts []engine.Option) []engine.Option {
	if cfg.Registerer == nil {
		return append(opts, cfg.EngineOptions...)
	}
	return append(append(opts, engine.WithRegisterer(cfg.Registerer)), cfg.EngineOptions...)
}

// registerMetrics registers the node's own collector, the build's
// information, and the HTTP API's and the classes' metrics.
func (n *Node) registerMetrics() error {
	reg := n.cfg.Registerer
	if reg == nil {
		return nil
	}
	if err := reg.Register(newNodeCollector(n)); err != nil {
		return fmt.Errorf("node: registering the node's metrics: %w", err)
	}
	if err := reg.Register(buildInfo()); err != nil {
		return fmt.Errorf("node: registering the node's metrics: %w", err)
	}
	if err := n.registerObservability(reg); err != nil {
		return fmt.Errorf("node: registering the node's metrics: %w", err)
	}
	// Every series the tenant label allows, from the start.
	for _, l := range append(slices.Collect(maps.Keys(n.cfg.TenantWeights)), alarms.OtherTenants) {
		for _, r := range []string{throttledConcurrency, throttledRate} {
			n.admission.throttled.WithLabelValues(l, r)
		}
	}
	if err := reg.Register(n.admission.throttled); err != nil {
		return fmt.Errorf("node: registering the node's metrics: %w", err)
	}
	return nil
}

// modulePath is this module's: its version is the one build_info gives,
// whether it is the main module (keepnode) or a host's dependency.
const modulePath = "github.com/wasmkeep/alarms"

// buildInfo is wasmkeep_build_info: 1, with the module's version, the
// commit it was built from (when the build recorded it) and the Go version.
func buildInfo() prometheus.Collector {
	version, revision := buildVersion()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "wasmkeep_build_info",
		Help:        "1, labelled with the wasmkeep alarms module's version, the commit of the build (when it recorded one) and the Go version.",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision, "goversion": runtime.Version()},
	})
	g.Set(1)
	return g
}

// buildVersion is the module's version and the commit of the build ("" when
// it recorded none): what wasmkeep_build_info and the console show, and
// what the node's lease names (cluster.LeaseConfig.Build).
func buildVersion() (version, revision string) {
	version = "(unknown)"
	if bi, ok := debug.ReadBuildInfo(); ok {
		version, revision = moduleVersion(bi)
	} else if Version != "" {
		version, revision = Stamped("", "")
	}
	return version, revision
}

// Version and Revision stamp a build that recorded no module version or
// VCS revision: go build -buildvcs=false, or a tree without .git, as in the
// image (deploy/Dockerfile's VERSION and REVISION build arguments, make
// keepnode). Set them with
//
//	-ldflags "-X github.com/wasmkeep/alarms/node.Version=v0.5.0 -X github.com/wasmkeep/alarms/node.Revision=$(git rev-parse HEAD)"
//
// What the build recorded wins over them. keepnode -version and
// wasmkeep_build_info read them.
var Version, Revision string

// Stamped is the version and revision a build gives (version "(devel)"
// and revision "" where it recorded none), with Version and Revision
// where it recorded none.
func Stamped(version, revision string) (string, string) {
	if (version == "" || version == "(devel)") && Version != "" {
		version = Version
	}
	if revision == "" {
		revision = Revision
	}
	return version, revision
}

// moduleVersion finds this module in the build: the main module's version
// and VCS revision when it is the main one, else the dependency's version;
// Version and Revision where the build recorded none.
func moduleVersion(bi *debug.BuildInfo) (version, revision string) {
	defer func() { version, revision = Stamped(version, revision) }()
	if bi.Main.Path == modulePath {
		version = bi.Main.Version
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				revision = s.Value
			}
		}
	}
	for _, d := range bi.Deps {
		if d.Path == modulePath {
			version = d.Version
			if d.Replace != nil && d.Replace.Version != "" {
				version = d.Replace.Version
			}
		}
	}
	if version == "" {
		version = "(devel)"
	}
	return version, revision
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
