// Package node is the reference host: a node that runs actor classes in
// wazero, one SQLite database per actor under its data directory, with the
// wasmkeep alarm host module, the node timer and delivery with committed
// backoff. It is what the demo and the tests run on.
package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/wasmkeep/alarms"
	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/clock"
	"github.com/wasmkeep/alarms/cluster"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/format"
	"github.com/wasmkeep/alarms/hostmod"
	"github.com/wasmkeep/alarms/sweeper"
)

// DeliveryEvent tells an observer what one alarm delivery did: the
// plugin's one delivery type, alarms.Delivery (the actor, the entry time
// the timer held, what the rules made of the entry, what on-alarm did in
// Event, the committed alarm the timer was re-armed with, when it ended,
// and Err, a host error: the delivery is retried later).
type DeliveryEvent = alarms.Delivery

// Config configures a Node.
type Config struct {
	// DataDir holds one SQLite file per actor: <tenant>/<class>/<hex name>.db.
	DataDir string
	// Classes maps a class name to its compiled guest (.wasm bytes).
	Classes map[string][]byte
	// Clock defaults to the system clock.
	Clock clock.Clock
	// Logger defaults to a null logger.
	Logger hclog.Logger
	// Engine options (deadlines, backoff, guest output). The clock and the
	// logger are passed on by the node.
	EngineOptions []engine.Option
	// RetryMax is the longest backoff; the timer keeps a retry within it
	// against earlier offers from a sweep (default 5 min).
	RetryMax time.Duration
	// RetryAfterError is how long after a host-side failure (the database)
	// a delivery is tried again on a node running alone (default 5 s); in
	// cluster mode it is the lease period, as docs/design.md#delivery says.
	RetryAfterError time.Duration
	// MaxConcurrentDeliveries is the delivery workers: how many alarm
	// deliveries run at once (default alarms.DefaultDeliveryWorkers(), 16
	// per CPU and at least 64), shared fairly between tenants
	// (alarms.Config.MaxConcurrentDeliveries).
	MaxConcurrentDeliveries int
	// DrainTimeout is how long Close lets the alarm deliveries under way
	// finish before it cuts them (default alarms.DefaultDrainTimeout,
	// alarms.Config.DrainTimeout).
	DrainTimeout time.Duration
	// TenantWeights gives tenants their weights in the shares of the
	// delivery workers and the engine's guest slots (default 1 each). The
	// tenants named here or in Admission.Tenants are the ones the
	// per-tenant metrics name; the others are counted together as
	// "other".
	TenantWeights map[string]int
	// Admission limits each tenant's requests to the HTTP API: how many
	// at once and how many a second (default: no limit). A request past a
	// limit is answered 429 with Retry-After, and nothing runs.
	Admission Admission
	// MaxOpenDatabases and MaxInstances are the residency budget: at most
	// this many actor databases open and guest instances live at once
	// (defaults engine.DefaultMaxOpenDatabases and DefaultMaxInstances);
	// past either, the least recently used idle actor sleeps.
	MaxOpenDatabases, MaxInstances int
	// IdleTimeout closes (in cluster mode: uploads, closes and releases) an
	// actor no event reached for this long (default 1 min).
	IdleTimeout time.Duration
	// OnDelivery, if set, is called after each delivery.
	OnDelivery func(DeliveryEvent)
	// Cluster, if set, makes the node one of a cluster sharing a bucket:
	// actors are held by one node at a time and replicated to the bucket.
	// Without it the node runs alone on its data directory.
	Cluster *ClusterConfig
	// Security: tokens for the HTTP API and TLS for forwarding (see
	// Security). The zero value is an open API, logged as such.
	Security Security
	// Registerer, if set, is where the node, its engine and its alarm
	// plugin register their metrics (nil: none). The bucket's S3 metrics
	// come from the bucket's own option (s3.WithRegisterer). Serve
	// them with MetricsHandler.
	Registerer prometheus.Registerer
	// LogSummaryEvery is how often the node logs at INFO what its alarms'
	// firings came to, when any fired (default DefaultLogSummaryEvery;
	// negative: never). Each firing is logged at DEBUG.
	LogSummaryEvery time.Duration
	// TracerProvider, if set, traces the node (docs/operations.md#tracing):
	// a span for each request of the HTTP API and each alarm delivery,
	// the traceparent of a forward carried to the holder. Nil: nothing is
	// traced (no spans, no exporter). The bucket's S3 spans come from the
	// bucket's own option (s3.WithTracerProvider).
	TracerProvider trace.TracerProvider
	// Console serves the operator console, a read-only set of HTML pages,
	// at /ui on the API's handler (console.go); off by default (404). Its
	// sign-in sessions are kept by the handler: serve one Handler's
	// answer, or each keeps its own.
	Console bool
}

// Node runs actors on one machine.
type Node struct {
	cfg     Config
	log     hclog.Logger
	sec     *security
	engine  *engine.Engine
	classes map[string]*engine.Class
	timer   *sweeper.Timer

	// Cluster mode only.
	leases  *cluster.Leases
	holds   *cluster.Holds
	replica *cluster.Replica
	plugin  *alarms.Plugin
	deletes *bucket.Deleter // replaced snapshots, batched (the plugin batches the index's)

	givenUp  atomic.Int64 // actors given up, for the metrics
	restored atomic.Int64 // actors restored from the bucket (a snapshot downloaded), for the metrics
	// newerSnapshots and newerSchemas count the snapshots a restore
	// refused for a container or a schema of a format newer than this
	// build reads, and newerSchemas the local databases of such a schema
	// refused too, for the metrics (wasmkeep_newer_format_total).
	newerSnapshots, newerSchemas atomic.Int64
	// newerLetters counts the dead-letter records of a newer format read
	// (and skipped).
	newerLetters atomic.Int64
	// finalized is the cluster version the cluster was finalized at, read
	// as the node started (FinalizedClusterVersion); set before New
	// returns, never changed after.
	finalized int

	obs       observability // HTTP and per-class metrics, the firings' log summary (logsummary.go)
	tracer    trace.Tracer  // nil: not traced (tracing.go)
	admission *admission    // the tenants' limits on the HTTP API (admission.go)

	mu      sync.Mutex
	entries map[abi.ActorID]*entry
	closed  bool
	// unreleased are holds given up whose release failed, tried again
	// every lease period (cluster mode; see releaseHold).
	unreleased map[abi.ActorID]cluster.Hold

	wg     sync.WaitGroup
	cancel context.CancelFunc
	loop   chan struct{}
}

// New creates a node: it compiles the classes (refusing a guest that breaks
// the ABI) and fills the timer from the alarms found in the data directory.
// Call Start to deliver alarms.
func New(ctx context.Context, cfg Config) (*Node, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("node: DataDir is required")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.System{}
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.RetryMax <= 0 {
		cfg.RetryMax = hostmod.DefaultRetryMax
	}
	if cfg.RetryAfterError <= 0 {
		cfg.RetryAfterError = 5 * time.Second
	}
	if cfg.MaxConcurrentDeliveries <= 0 {
		cfg.MaxConcurrentDeliveries = alarms.DefaultDeliveryWorkers()
	}
	// The tenants with limits of their own have their metrics' series too.
	weights := maps.Clone(cfg.TenantWeights)
	for t := range cfg.Admission.Tenants {
		if _, ok := weights[t]; !ok {
			if weights == nil {
				weights = map[string]int{}
			}
			weights[t] = 1
		}
	}
	cfg.TenantWeights = weights
	adm, err := newAdmission(cfg.Admission, cfg.Clock.Now, func(t string) string {
		if _, ok := weights[t]; ok {
			return t
		}
		return alarms.OtherTenants
	})
	if err != nil {
		return nil, err
	}
	sec, err := newSecurity(cfg.Security)
	if err != nil {
		return nil, err
	}
	if sec.open {
		cfg.Logger.Warn("the HTTP API has no tokens: anyone who reaches it runs and deletes any tenant's actors (see node.Security)")
	}
	if cfg.MaxOpenDatabases <= 0 {
		cfg.MaxOpenDatabases = engine.DefaultMaxOpenDatabases
	}
	if cfg.MaxInstances <= 0 {
		cfg.MaxInstances = engine.DefaultMaxInstances
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if err := checkFDs(cfg.MaxOpenDatabases); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("node: data directory: %w", err)
	}
	opts := engineOptions(cfg, []engine.Option{engine.WithClock(cfg.Clock), engine.WithLogger(cfg.Logger),
		engine.WithMaxOpenDatabases(cfg.MaxOpenDatabases), engine.WithMaxInstances(cfg.MaxInstances),
		engine.WithTenantWeights(cfg.TenantWeights)})
	eng, err := engine.NewEngine(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	n := &Node{
		cfg:     cfg,
		log:     cfg.Logger,
		sec:     sec,
		engine:  eng,
		classes: map[string]*engine.Class{},
		timer:   sweeper.NewTimer(cfg.RetryMax),
		entries: map[abi.ActorID]*entry{},
		tracer:  newTracer(cfg.TracerProvider),

		admission: adm,
		// Alone, no other build shares the data: the cluster is this
		// node's build (a cluster node reads it: checkClusterVersion).
		finalized: format.ClusterVersion,
	}
	for name, wasm := range cfg.Classes {
		if err := abi.ValidateClass(name); err != nil {
			eng.Close(ctx)
			return nil, fmt.Errorf("node: %w", err)
		}
		c, err := eng.Compile(ctx, name, wasm)
		if err != nil {
			eng.Close(ctx)
			return nil, fmt.Errorf("node: %w", err)
		}
		n.classes[name] = c
	}
	local, err := n.scan(ctx)
	if err != nil {
		eng.Close(ctx)
		return nil, err
	}
	if cfg.Cluster != nil {
		if err := n.joinCluster(ctx, local); err != nil {
			n.Close(ctx)
			return nil, err
		}
		if err := n.registerMetrics(); err != nil {
			n.Close(ctx)
			return nil, err
		}
		return n, nil
	}
	n.plugin, err = alarms.Register(alarms.Config{
		SingleNode:              true,
		Host:                    clusterHost{n},
		Timer:                   n.timer,
		RetryMax:                cfg.RetryMax,
		RetryAfterError:         cfg.RetryAfterError,
		MaxConcurrentDeliveries: cfg.MaxConcurrentDeliveries,
		DrainTimeout:            cfg.DrainTimeout,
		TenantWeights:           cfg.TenantWeights,
		OnDelivery:              n.delivered,
		StartDelivery:           n.deliveryTracing(),
		Logger:                  n.log.Named("alarms"),
		Registerer:              cfg.Registerer,
	})
	if err != nil {
		eng.Close(ctx)
		return nil, fmt.Errorf("node: %w", err)
	}
	if err := n.registerMetrics(); err != nil {
		eng.Close(ctx)
		return nil, err
	}
	return n, nil
}

// Path is where the actor's database lives under dataDir.
func Path(dataDir string, id abi.ActorID) string {
	return filepath.Join(dataDir, filepath.FromSlash(id.Path())+".db")
}

func timerKey(id abi.ActorID) string { return alarms.TimerKey(id) }

// scan fills the timer from the actor databases in the data directory and
// returns the actors it found. It walks the directory, then reads the
// alarms in parallel (engine.ReadAlarm reads a cleanly closed database's
// alarm row from its file, and goes through SQLite only after a crash).
// A database of a schema newer than this build reads is skipped with a
// WARN naming its actor, and left as it is.
func (n *Node) scan(ctx context.Context) ([]abi.ActorID, error) {
	var found []abi.ActorID
	var paths []string
	err := filepath.WalkDir(n.cfg.DataDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !strings.HasSuffix(path, ".db") || strings.Contains(d.Name(), ".replaced") {
			return nil
		}
		rel, _ := filepath.Rel(n.cfg.DataDir, path)
		id, err := abi.ParsePath(strings.TrimSuffix(filepath.ToSlash(rel), ".db"))
		if err != nil {
			n.log.Warn("scan: not an actor's database (<tenant>/<class>/<name as hex>.db), skipped", "path", path, "error", err)
			return nil
		}
		found = append(found, id)
		paths = append(paths, path)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("node: scan %s: %w", n.cfg.DataDir, err)
	}
	type alarm struct {
		at  int64
		ok  bool
		err error
	}
	alarms := make([]alarm, len(found))
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < min(scanWorkers(), len(found)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(found) || ctx.Err() != nil {
					return
				}
				at, ok, err := engine.ReadAlarm(paths[i])
				alarms[i] = alarm{at, ok, err}
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("node: scan %s: %w", n.cfg.DataDir, err)
	}
	count := 0
	local := found[:0]
	for i, a := range alarms {
		if newer, ok := format.As(a.err); ok {
			// A later build's database: skipped, not read, left as it
			// is; the node serves the others (a request for this one is
			// answered 503 newer_format).
			n.noteNewerLocal(found[i], paths[i], newer, "skipped by the start-up scan")
			continue
		}
		if a.err != nil {
			return nil, fmt.Errorf("node: scan: %w", &abi.ActorError{ID: found[i], Op: "read alarm", Err: a.err})
		}
		if a.ok {
			n.timer.Set(timerKey(found[i]), a.at)
			count++
		}
		local = append(local, found[i])
	}
	n.log.Info("scanned data directory", "dir", n.cfg.DataDir, "actors", len(local), "alarms", count, "newer_schema", len(found)-len(local))
	return local, nil
}

// scanWorkers is how many files the start-up scan reads at once: reads of
// the page cache or the disk overlap well beyond the cores.
func scanWorkers() int { return 4 * runtime.GOMAXPROCS(0) }

// Timer exposes the node timer (for sweeps and inspection).
func (n *Node) Timer() *sweeper.Timer { return n.timer }
