// Command keepnode runs one node of the reference host: actor classes in
// wazero, one SQLite database per actor, durable alarms, and an HTTP API
// for events. With -bucket it joins a cluster that shares that S3 bucket
// (configured from AWS_ENDPOINT_URL and the usual AWS_* variables).
//
//	keepnode -data ./data -class counter=counter-actor.wasm -listen 127.0.0.1:7601 -bucket wasmkeep
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/tetratelabs/wazero"

	"github.com/wasmkeep/alarms"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/bucket/s3"
	"github.com/wasmkeep/alarms/cluster"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/hostmod"
	"github.com/wasmkeep/alarms/node"
	"github.com/wasmkeep/alarms/sweeper"
)

type classFlags map[string]string

func (c classFlags) String() string { return fmt.Sprint(map[string]string(c)) }
func (c classFlags) Set(v string) error {
	name, path, ok := strings.Cut(v, "=")
	if !ok || name == "" || path == "" {
		return fmt.Errorf("want name=path.wasm, got %q", v)
	}
	c[name] = path
	return nil
}

// options are keepnode's settings: one field for each flag.
type options struct {
	config                                    string
	dataDir, cacheDir, listen, advertise      string
	bucketName, prefix, nodeID, tenants       string
	createBucket                              bool
	classes                                   classFlags
	leaseTTL, leaseMargin, leaseGrace, idle   time.Duration
	sweep, retryBase, retryMax                time.Duration
	failoverWait, logSummary, sweepSafety     time.Duration
	leaseRead                                 time.Duration
	maxDBs, maxInsts, sweepConc, sweepWalkers int
	sweepMax                                  int
	idemKeys, idemBytes                       int
	guestSlots, tenantGuestSlots, workers     int
	longGuestCall, drain                      time.Duration
	tenant                                    *tenantFlags
	attempts                                  *attemptsFlag
	alarmDeadline, eventDeadline              *deadlineFlag
	preinit                                   *preinitFlag
	logLevel                                  string
	logJSON, showVersion, ui, compileOnly     bool
	probe                                     string
	metrics                                   metricsFlags
	sec                                       *securityFlags
	mem                                       *memoryFlags
	trace                                     *tracingFlags
}

// newFlags defines keepnode's flags on a new flag set.
func newFlags(errorHandling flag.ErrorHandling) (*flag.FlagSet, *options) {
	o := &options{classes: classFlags{}, attempts: &attemptsFlag{}, preinit: &preinitFlag{}, tenant: newTenantFlags(),
		alarmDeadline: newDeadlineFlag("alarm-deadline", hostmod.DefaultAlarmDeadline, engine.WithAlarmDeadline, engine.WithClassAlarmDeadline),
		eventDeadline: newDeadlineFlag("event-deadline", engine.DefaultEventDeadline, engine.WithEventDeadline, engine.WithClassEventDeadline)}
	fs := flag.NewFlagSet("keepnode", errorHandling)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: keepnode -data DIR -class NAME=FILE.wasm [flags]\n\n"+
			"Runs one node of the wasmkeep reference host. With -bucket, the node joins the\n"+
			"cluster that shares the bucket; S3 is configured from AWS_ENDPOINT_URL,\n"+
			"AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_REGION.\n\n"+
			"Every flag may also come from the environment, as "+envPrefix+"NAME (the flag's\n"+
			"name in capitals, '-' as '_': -lease-ttl is "+envPrefix+"LEASE_TTL), or from the\n"+
			"TOML file -config names, whose keys are the flags' names. A flag on the\n"+
			"command line wins over the environment, which wins over the file.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	fs.StringVar(&o.config, configFlag, "", "TOML file of settings, its keys the flags' names (or $"+envName(configFlag)+"); flags and environment variables override it")
	fs.StringVar(&o.dataDir, "data", "", "data directory: one SQLite file per actor (required)")
	fs.Var(o.classes, "class", "an actor class: NAME=FILE.wasm (repeatable; in the environment or the file, a list)")
	fs.StringVar(&o.listen, "listen", "127.0.0.1:7600", "HTTP listen address")
	fs.StringVar(&o.advertise, "advertise", "", "address other nodes reach this one at (default: the listen address, which must then name a host: with -bucket, a -listen of :PORT, 0.0.0.0 or [::] needs -advertise)")
	fs.StringVar(&o.bucketName, "bucket", "", "S3 bucket shared by the cluster (empty: run alone); it must exist, unless -create-bucket")
	fs.BoolVar(&o.createBucket, "create-bucket", false, "create the -bucket if it does not exist (without it, a missing bucket is an error, so a mistyped name cannot start a second, empty cluster)")
	fs.StringVar(&o.cacheDir, "cache-dir", "", "directory where compiled classes are kept across restarts, so a restart does not compile them again (default: DATA/"+defaultCacheDir+"; \"off\": compile at every start)")
	fs.StringVar(&o.prefix, "prefix", "cluster/", "key prefix of all the cluster's objects in the bucket (leases, holds, state, alarm index)")
	fs.StringVar(&o.nodeID, "node-id", "", "node name in the cluster (default: random); a node started under the name of one that crashed takes it back once that one's lease has expired")
	fs.DurationVar(&o.leaseTTL, "lease-ttl", 10*time.Second, "node lease period")
	fs.DurationVar(&o.leaseMargin, "lease-margin", time.Second, "how long before its lease runs out a node stops acting")
	fs.DurationVar(&o.leaseGrace, "lease-grace", 2*time.Second, "how much longer than the lease period another node waits before taking over")
	fs.DurationVar(&o.leaseRead, "lease-read-period", 0, fmt.Sprintf("how often the node reads the other nodes' leases (default: lease TTL/3 while fewer than %d nodes are live, 4/5 of the lease TTL from then on); longer costs fewer requests and puts a dead node's takeover off by as much (docs/cost.md)", cluster.LargeCluster))
	fs.DurationVar(&o.idle, "idle", node.DefaultIdleTimeout, "close (in a cluster: upload, close and release) an actor no event reached for this long")
	fs.IntVar(&o.maxDBs, "max-open-dbs", engine.DefaultMaxOpenDatabases, "residency budget: actor databases open at once (2 file descriptors each); past it the least recently used idle actor sleeps")
	fs.IntVar(&o.maxInsts, "max-instances", engine.DefaultMaxInstances, "residency budget: guest instances live at once (each holds its linear memory)")
	fs.StringVar(&o.tenants, "tenants", "", "comma-separated tenants whose alarm index this node sweeps (default: every tenant with entries in the index)")
	fs.DurationVar(&o.sweep, "sweep", 10*time.Second, "alarm_sweep: how often the node sweeps the alarm index")
	fs.IntVar(&o.sweepConc, "sweep-concurrency", sweeper.DefaultConcurrency, "how many tenants' alarm indexes a sweep lists at once")
	fs.IntVar(&o.sweepMax, "sweep-max-deliveries", sweeper.DefaultMaxDeliveries, "how many overdue alarms one sweep of a tenant hands to the node's timer at most; a tenant it cut short is swept again once the node has delivered most of them")
	fs.IntVar(&o.sweepWalkers, "sweep-walkers", sweeper.DefaultWalkers, "how many live nodes walk each tenant's alarm index, per class they serve")
	fs.DurationVar(&o.sweepSafety, "sweep-safety", sweeper.DefaultSafetyPeriod, "the longest a walker leaves a tenant's alarm index unlisted when nothing in it can be overdue")
	fs.Var(o.alarmDeadline, "alarm-deadline", "longest on-alarm run, after which it is stopped and counts as a failure (its retry committed): D for every class, CLASS=D for one, comma-separated")
	fs.IntVar(&o.guestSlots, "guest-slots", 0, "how many guest calls (requests, alarm handlers, instance starts) run at once, shared fairly between tenants; while calls run long GOMAXPROCS is raised above them (default: GOMAXPROCS-1, at least 4)")
	fs.IntVar(&o.tenantGuestSlots, "tenant-guest-slots", 0, "how many of the guest slots one tenant may hold at once while its calls run long (-long-guest-call): a tenant whose guests spin burns that many CPUs at most (default: half the CPUs, at least 1); a tenant whose calls are short holds all but one")
	fs.DurationVar(&o.longGuestCall, "long-guest-call", engine.DefaultLongGuestCall, "how long a guest call runs before its tenant is held to -tenant-guest-slots (for 30 s after its last such call)")
	fs.DurationVar(&o.drain, "drain-timeout", alarms.DefaultDrainTimeout, "on SIGTERM, how long alarm deliveries under way may run to their end before they are cut (a cut one runs again where its actor is taken next); the process then replicates and releases its actors, so give its supervisor a stop timeout longer than this")
	fs.IntVar(&o.workers, "workers", 0, "delivery workers: how many alarm deliveries run at once, shared fairly between tenants (default: 16 per CPU, at least 64)")
	fs.Var(o.tenant.weight, "tenant-weight", "a tenant's weight in the shares of the delivery workers and the guest slots: TENANT=W, comma-separated (default 1 each); the tenants named by any -tenant-* flag get their own series in the per-tenant metrics, the others are counted as \"other\"")
	fs.Var(o.tenant.rate, "tenant-rate", "requests a second each tenant may start on this node's HTTP API, on average (a token bucket; past it: 429 throttled with Retry-After): R for every tenant, TENANT=R for one, comma-separated (0: no limit, the default)")
	fs.Var(o.tenant.burst, "tenant-burst", "the bursts -tenant-rate allows: N for every tenant, TENANT=N for one, comma-separated (0: the rate, at least 1)")
	fs.Var(o.tenant.concurrency, "tenant-concurrency", "requests of each tenant this node serves at once (past it: 429 throttled): N for every tenant, TENANT=N for one, comma-separated (0: no limit, the default)")
	fs.Var(o.eventDeadline, "event-deadline", "longest on-request, on-init or instance start, after which it is stopped and the event fails: D for every class, CLASS=D for one, comma-separated")
	fs.DurationVar(&o.retryBase, "retry-base", hostmod.DefaultRetryBase, "first retry delay of a failing on-alarm")
	fs.DurationVar(&o.retryMax, "retry-max", hostmod.DefaultRetryMax, "longest retry delay")
	fs.DurationVar(&o.failoverWait, "failover-wait", 0, "how long a client request waits inside the node for an actor whose holder cannot be reached, or while this node's lease is being renewed, before a 503 (default: lease TTL + grace + the leases' reading period, about a takeover; negative: no waiting)")
	fs.IntVar(&o.idemKeys, "idempotency-keys", engine.DefaultIdempotencyKeys, "how many Idempotency-Key keys each actor keeps, with their replies, in its own database (the oldest go first; a request under a key no longer kept runs again)")
	fs.IntVar(&o.idemBytes, "idempotency-bytes", engine.DefaultIdempotencyBytes, "how many bytes of replies each actor keeps for its idempotency keys (the oldest keys go first; the newest is always kept)")
	fs.Var(o.attempts, "max-attempts", "runs of a failing on-alarm after which its retries are given up, the alarm cleared and a dead letter kept (keepctl alarms failed): N for every class, CLASS=N for one, comma-separated (0: retry for ever, the default)")
	fs.Var(o.preinit, "preinit", "start each class's instances from a pre-initialised image, its _initialize run once at start-up (ABI.md, Pre-initialised images): auto (the default: a class whose initialisation read no clock, no random numbers and wrote no output, and a Go class, each instance given its runtime's random seeds afresh), on (any class that can be captured, its instances then sharing what its initialisation read) or off; MODE for every class, CLASS=MODE for one, comma-separated")
	fs.StringVar(&o.logLevel, "log-level", "info", "trace, debug, info, warn or error (each alarm fired is a debug line; info has a summary of the firings each minute)")
	fs.DurationVar(&o.logSummary, "log-summary", node.DefaultLogSummaryEvery, "how often to log at info the count of alarms fired, failed and given up since the last such line, when any (negative: never)")
	fs.BoolVar(&o.logJSON, "log-json", false, "log one JSON object per line, the start-up lines included")
	fs.BoolVar(&o.showVersion, "version", false, "print the version and exit")
	fs.BoolVar(&o.compileOnly, "compile-only", false, "compile every -class into the compilation cache (-cache-dir) and exit, taking no lease and opening no database, so that it may run beside the node on the same data directory: run a new build so before it replaces the running one, and its start finds its classes compiled (docs/upgrading.md)")
	fs.StringVar(&o.probe, probeFlag, "", "health check: GET this URL (such as http://127.0.0.1:7600/v1/readyz) and exit 0 if the answer is 2xx, else 1 saying why on standard error; an https URL is verified against -tls-ca (command line only: no variable, no key in the file)")
	fs.BoolVar(&o.ui, "ui", false, "serve the operator console, read-only HTML pages (nodes, a tenant's alarms and dead letters with a redrive button, the last sweeps), at /ui on the -listen address, behind the API's tokens (docs/operations.md#console)")
	fs.StringVar(&o.metrics.addr, "metrics-addr", "", "serve Prometheus metrics at http://ADDR/metrics, on a listener of its own without tokens (empty: none); e.g. 127.0.0.1:9100")
	fs.BoolVar(&o.metrics.pprof, "pprof", false, "also serve net/http/pprof under /debug/pprof/ on the -metrics-addr listener")
	o.sec = addSecurityFlags(fs)
	o.mem = addMemoryFlags(fs)
	o.trace = addTracingFlags(fs)
	fs.BoolVar(&o.mem.durable, "durable-commits", true, "acknowledge an event (a request's reply) only once its commit is on stable storage, and show a delivery's writes to no one (a later call, an upload) before they are, so they survive a power loss, not only a crash of the process: every actor's commit goes to one journal in the data directory, and the commits waiting at once share one sync of it; false acknowledges once the commit is written, which a crash of the process keeps and a power loss may not (docs/design.md#journal)")
	fs.BoolVar(&o.mem.syncedDeliveries, "synced-deliveries", false, "with -durable-commits, make each alarm delivery wait for its commit's sync before it ends, rather than have the actor's next call wait for it (docs/design.md#output-gate): a power cut then never undoes a delivery that ran, at the cost of a sync's wait in every delivery")
	return fs, o
}

func main() {
	// With -log-json on the command line or in the environment, even a
	// flag the parser refuses is reported as a JSON line: the parser
	// prints nothing and the error is logged below. (Set only in the
	// -config file, which is read once the command line parses, it
	// cannot apply to the command line's own errors.)
	jsonErrors := logJSONRequested(os.Args[1:], os.LookupEnv)
	probing := probeRequested(os.Args[1:])
	handling := flag.ExitOnError
	if jsonErrors || probing {
		handling = flag.ContinueOnError
	}
	fs, o := newFlags(handling)
	if jsonErrors || probing {
		fs.SetOutput(io.Discard)
	}
	cfgErr := configure(fs, os.Args[1:], os.LookupEnv)
	if cfgErr == nil {
		cfgErr = checkEnvNames(fs, os.Environ())
	}
	if probing {
		// A health check: exit 0 or 1 (never 2, which Docker reserves),
		// with one line saying why on failure. The node's settings (the
		// environment, -config, flags) give it -tls-ca.
		if cfgErr == nil {
			cfgErr = probe(context.Background(), o.probe, o.sec)
		}
		if cfgErr != nil {
			fmt.Fprintf(os.Stderr, "keepnode -probe %s: %s\n", o.probe, oneLine(cfgErr))
			os.Exit(1)
		}
		return
	}
	if cfgErr == nil {
		cfgErr = checkRequired(o)
	}
	if errors.Is(cfgErr, flag.ErrHelp) {
		fs.SetOutput(os.Stderr)
		fs.Usage()
		return
	}
	if jsonErrors && cfgErr != nil {
		o.logJSON = true // the parse may have stopped before -log-json
	}
	if o.showVersion && cfgErr == nil {
		bi, ok := debug.ReadBuildInfo()
		fmt.Println(versionLine(bi, ok))
		return
	}
	if hclog.LevelFromString(o.logLevel) == hclog.NoLevel {
		o.logLevel = "info" // to report the error
	}
	logger := newLogger(o, os.Stderr)
	if cfgErr != nil {
		logger.Error("bad configuration", "error", cfgErr)
		os.Exit(2)
	}
	if err := run(logger, o); err != nil {
		logger.Error("exiting", "error", err)
		os.Exit(1)
	}
}

// logJSONRequested reports whether args (the last -log-json among them,
// up to the first argument that is not a flag) or else the environment's
// KEEPNODE_LOG_JSON ask for -log-json, read before the flags are parsed.
func logJSONRequested(args []string, getenv func(string) (string, bool)) bool {
	on, seen := false, false
	for _, a := range args {
		if a == "--" || !strings.HasPrefix(a, "-") {
			break
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name != "log-json" {
			continue
		}
		seen, on = true, true
		if hasVal {
			b, err := strconv.ParseBool(val)
			on = err == nil && b
		}
	}
	if seen {
		return on
	}
	if v, ok := getenv(envName("log-json")); ok {
		b, err := strconv.ParseBool(v)
		return err == nil && b
	}
	return false
}

// newLogger is the node's logger as -log-level and -log-json ask.
func newLogger(o *options, w io.Writer) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "keepnode", Level: hclog.LevelFromString(o.logLevel), Output: w, JSONFormat: o.logJSON})
}

// checkRequired refuses, as a usage error (exit 2, as a bad flag is),
// settings without which keepnode cannot start, and values no flag may
// take or combinations that cannot work. -version needs none.
func checkRequired(o *options) error {
	switch {
	case o.showVersion:
		return nil
	case o.dataDir == "":
		return errors.New("-data is required (or $" + envName("data") + ", or data in the -config file)")
	case len(o.classes) == 0:
		return errors.New("at least one -class NAME=FILE.wasm is required (or $" + envName("class") + ", or class in the -config file)")
	case o.drain <= 0:
		return fmt.Errorf("-drain-timeout %s: must be positive", o.drain)
	case o.sweepMax < 1:
		return fmt.Errorf("-sweep-max-deliveries %d: must be at least 1", o.sweepMax)
	case o.maxDBs < 1 || o.maxInsts < 1:
		return fmt.Errorf("-max-open-dbs %d and -max-instances %d: each must be at least 1", o.maxDBs, o.maxInsts)
	case o.idemKeys < 1 || o.idemBytes < 1:
		return fmt.Errorf("-idempotency-keys %d and -idempotency-bytes %d: each must be at least 1", o.idemKeys, o.idemBytes)
	case o.metrics.pprof && o.metrics.addr == "":
		return errors.New("-pprof needs -metrics-addr: profiles are served only on the metrics listener")
	case o.compileOnly && o.cacheDir == cacheDirOff:
		return errors.New("-compile-only with -cache-dir off: nothing compiled would be kept")
	}
	return nil
}

// metricsFlags are -metrics-addr and -pprof.
type metricsFlags struct {
	addr  string
	pprof bool
}

// defaultCacheDir is the compilation cache's directory under the data
// directory: a name no tenant can have (tenants start with a letter or a
// digit), so it never mixes with the actors' databases.
const defaultCacheDir = ".compilation-cache"

// cacheDirOff is the -cache-dir value that turns the cache off.
const cacheDirOff = "off"

func run(logger hclog.Logger, o *options) error {
	secFlags, memFlags, mf, dataDir, cacheDir, classes := o.sec, o.mem, o.metrics, o.dataDir, o.cacheDir, o.classes
	listen, advertise, bucketName, createBucket, prefix, nodeID := o.listen, o.advertise, o.bucketName, o.createBucket, o.prefix, o.nodeID
	leaseTTL, leaseMargin, leaseGrace, idle, retryBase, retryMax := o.leaseTTL, o.leaseMargin, o.leaseGrace, o.idle, o.retryBase, o.retryMax
	attempts, tenants, sweep, sweepConc, failoverWait, maxDBs, maxInsts := o.attempts, splitList(o.tenants), o.sweep, o.sweepConc, o.failoverWait, o.maxDBs, o.maxInsts
	if bucketName != "" && advertise == "" {
		if err := checkAdvertisable(listen); err != nil {
			return err
		}
	}
	wasm := map[string][]byte{}
	for name, path := range classes {
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("class %s: %w", name, err)
		}
		wasm[name] = b
	}
	security, serverTLS, err := secFlags.load()
	if err != nil {
		return err
	}
	if o.compileOnly {
		// The journal is the running node's: this process opens none.
		memFlags.durable = false
	}
	memOpts, err := memFlags.options(dataDir)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	attemptOpts, err := attempts.options(classes)
	if err != nil {
		return err
	}
	engineOpts := append([]engine.Option{engine.WithBackoff(retryBase, retryMax), engine.WithGuestSlots(o.guestSlots), engine.WithTenantGuestSlots(o.tenantGuestSlots), engine.WithLongGuestCall(o.longGuestCall)}, memOpts...)
	engineOpts = append(engineOpts, attemptOpts...)
	for _, f := range []*deadlineFlag{o.alarmDeadline, o.eventDeadline} {
		opts, err := f.options(classes)
		if err != nil {
			return err
		}
		engineOpts = append(engineOpts, opts...)
	}
	preinitOpts, err := o.preinit.options(classes)
	if err != nil {
		return err
	}
	engineOpts = append(engineOpts, preinitOpts...)
	engineOpts = append(engineOpts, engine.WithIdempotencyRetention(o.idemKeys, int64(o.idemBytes)))
	if cacheDir == "" {
		// The data directory as node.New makes it, before the cache's
		// directory inside it.
		if err := os.MkdirAll(dataDir, 0o755); err != nil {
			return fmt.Errorf("-data %s: %w", dataDir, err)
		}
		cacheDir = filepath.Join(dataDir, defaultCacheDir)
	}
	if cacheDir != cacheDirOff {
		cache, err := wazero.NewCompilationCacheWithDir(cacheDir)
		if err != nil {
			return fmt.Errorf("-cache-dir %s: %w", cacheDir, err)
		}
		// Closed after the node, whose engine compiled into it.
		defer cache.Close(context.Background())
		engineOpts = append(engineOpts, engine.WithCompilationCache(cache))
	}

	if o.compileOnly {
		return compileClasses(ctx, logger, engineOpts, wasm)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	if advertise == "" {
		advertise = ln.Addr().String()
	}
	// One registry for the process: the Go runtime and the process, the
	// node, its engine and plugin, and the S3 client.
	var reg *prometheus.Registry
	var metricsLn net.Listener
	if mf.addr != "" {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		if metricsLn, err = net.Listen("tcp", mf.addr); err != nil {
			ln.Close()
			return fmt.Errorf("-metrics-addr: %w", err)
		}
		defer metricsLn.Close()
	}
	scheme := "http"
	if serverTLS != nil {
		ln = tls.NewListener(ln, serverTLS)
		scheme = "https"
	}
	cfg := node.Config{
		DataDir:          dataDir,
		Classes:          wasm,
		Logger:           logger,
		LogSummaryEvery:  o.logSummary,
		Security:         security,
		RetryMax:         retryMax,
		IdleTimeout:      idle,
		MaxOpenDatabases: maxDBs,
		MaxInstances:     maxInsts,
		EngineOptions:    engineOpts,

		MaxConcurrentDeliveries: o.workers,
		DrainTimeout:            o.drain,
		TenantWeights:           o.tenant.weights(),
		Admission:               o.tenant.admission(),
		Console:                 o.ui,
	}
	var s3opts []s3.Option
	if reg != nil {
		cfg.Registerer = reg
		s3opts = append(s3opts, s3.WithRegisterer(reg))
	}
	tp, err := o.trace.provider(ctx, os.LookupEnv, "keepnode", moduleVersion())
	if err != nil {
		ln.Close()
		return err
	}
	if tp != nil {
		cfg.TracerProvider = tp
		s3opts = append(s3opts, s3.WithTracerProvider(tp))
		// After the node's Close: its last spans are sent.
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := tp.Shutdown(sctx); err != nil {
				logger.Warn("sending the last traces at shutdown", "error", err)
			}
		}()
	}
	if bucketName != "" {
		b, err := s3.New(ctx, bucketName, s3opts...)
		if err != nil {
			return err
		}
		if err := openBucket(ctx, b, createBucket); err != nil {
			return err
		}
		if err := bucket.CheckConditional(ctx, b); err != nil {
			return fmt.Errorf("bucket %s: %w", bucketName, err)
		}
		cfg.Cluster = &node.ClusterConfig{
			Bucket: b, Prefix: prefix, NodeID: nodeID, Addr: advertise,
			LeaseTTL: leaseTTL, LeaseMargin: leaseMargin, LeaseGrace: leaseGrace, LeaseReadPeriod: o.leaseRead,
			Tenants: tenants, SweepPeriod: sweep, SweepConcurrency: sweepConc, FailoverWait: failoverWait,
			SweepWalkers: o.sweepWalkers, SweepSafetyPeriod: o.sweepSafety, SweepMaxDeliveries: o.sweepMax,
		}
	}
	n, err := node.New(ctx, cfg)
	if err != nil {
		// wazero refuses a cached class it cannot read back (such as a
		// checksum that does not match) rather than compile it again.
		if cacheDir != cacheDirOff && strings.Contains(err.Error(), "compilationcache:") {
			return fmt.Errorf("%w: the compilation cache in %s is damaged: remove that directory (the next start compiles the classes again and refills it), or pass -cache-dir off", err, cacheDir)
		}
		return err
	}
	n.Start(ctx)
	// The start-up lines go to standard output: plain text, or with
	// -log-json a JSON log line whose message is that text.
	announce := func(line string, fields ...any) { fmt.Println(line) }
	if o.logJSON {
		out := newLogger(o, os.Stdout)
		announce = func(line string, fields ...any) { out.Info(line, fields...) }
	}
	srv := &http.Server{Handler: n.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(node.ProblemListener(ln)) // after TLS: net/http's own refusals as problems too
	if metricsLn != nil {
		msrv := &http.Server{Handler: node.MetricsHandler(reg, mf.pprof), ReadHeaderTimeout: 10 * time.Second}
		go msrv.Serve(metricsLn)
		defer msrv.Close()
		announce("keepnode metrics on http://"+metricsLn.Addr().String()+"/metrics", "metrics_addr", metricsLn.Addr().String())
	}
	id := ""
	if l := n.Leases(); l != nil {
		id = l.NodeID()
	}
	announce(fmt.Sprintf("keepnode listening on %s://%s node=%s", scheme, ln.Addr(), id), "url", scheme+"://"+ln.Addr().String(), "node", id)

	var lost <-chan struct{}
	if l := n.Leases(); l != nil {
		lost = l.Lost()
	}
	select {
	case <-ctx.Done():
	case <-lost:
		// Not valid again in this process: exit, so that the supervisor
		// starts a new one, which takes the name back once the other
		// process's lease has expired, or says the name is in use.
		logger.Error("this node's lease object was replaced or removed by someone else; exiting", "node", id)
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
		if err := n.Close(sctx); err != nil {
			logger.Warn("closing after the lease was lost", "error", err)
		}
		return fmt.Errorf("node %s: its lease object in the bucket was replaced or removed by someone else: is another process running as node %s? A restart takes the name back once that process's lease has expired", id, id)
	}
	stop() // a second signal ends the process at once, without the clean shutdown
	logger.Info("shutting down: finishing deliveries under way, then releasing actors (signal again to exit at once)", "drain_timeout", o.drain)
	sctx, cancel := context.WithTimeout(context.Background(), o.drain+30*time.Second)
	defer cancel()
	// No alarm starts here from now: the HTTP server's shutdown below
	// waits for the requests in flight (up to their event deadline).
	n.StopDeliveries()
	srv.Shutdown(sctx)
	return n.Close(sctx)
}

// openBucket checks that the cluster's bucket exists, or creates it when
// asked to (-create-bucket). A node never creates a bucket unasked: a
// mistyped -bucket would otherwise start a second, empty cluster beside
// the real one.
func openBucket(ctx context.Context, b *s3.Bucket, create bool) error {
	if create {
		if err := b.EnsureBucket(ctx); err != nil {
			return fmt.Errorf("bucket %s at %s: creating it: %w", b.Name(), b.Endpoint(), err)
		}
		return nil
	}
	ok, err := b.Exists(ctx)
	if err != nil {
		return fmt.Errorf("bucket %s at %s unreachable: %w", b.Name(), b.Endpoint(), err)
	}
	if !ok {
		return fmt.Errorf("bucket %s does not exist at %s: check -bucket and AWS_ENDPOINT_URL, or pass -create-bucket to create it", b.Name(), b.Endpoint())
	}
	return nil
}

// checkAdvertisable refuses a listen address that names no host (":7600")
// or every host ("0.0.0.0:7600", "[::]:7600") when it would be advertised
// to the other nodes as it is: they could not forward requests to it.
func checkAdvertisable(listen string) error {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return fmt.Errorf("-listen %s: %w", listen, err)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		return fmt.Errorf("-listen %s names no host other nodes can reach, and without -advertise it is the address this node gives them: "+
			"pass -advertise HOST:%s with the host name or address they reach this machine at", listen, port)
	}
	return nil
}

// versionLine describes the binary: its module version, the commit it was
// built from (with "+dirty" for uncommitted changes) and its Go version.
func versionLine(bi *debug.BuildInfo, ok bool) string {
	if !ok || bi == nil {
		return "keepnode (unknown version: no build information)"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, at string
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	v, rev = node.Stamped(v, rev) // -ldflags -X, where the build recorded none
	line := "keepnode " + v
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if dirty {
			rev += "+dirty"
		}
		line += " commit " + rev
		if at != "" {
			line += " (" + at + ")"
		}
	}
	return line + " " + bi.GoVersion
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
