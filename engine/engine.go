package engine

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/clock"
	"github.com/wasmkeep/alarms/hostmod"
	"github.com/wasmkeep/alarms/internal/preinit"
)

// DefaultEventDeadline bounds one request or on-init run (WithEventDeadline).
// On-alarm's default deadline and backoff are hostmod's
// (hostmod.DefaultAlarmDeadline, DefaultRetryBase, DefaultRetryMax).
const DefaultEventDeadline = 30 * time.Second

type config struct {
	clock         clock.Clock
	logger        hclog.Logger
	alarmDeadline time.Duration
	eventDeadline time.Duration
	retryBase     time.Duration
	retryMax      time.Duration
	maxAttempts   int
	classAttempts map[string]int
	stdout        io.Writer
	stderr        io.Writer
	cache         wazero.CompilationCache
	memoryPages   uint32
	runtime       wazero.Runtime
	moduleConfig  func(abi.ActorID) wazero.ModuleConfig
	maxDBs        int
	maxInsts      int
	resWait       time.Duration
	registerer    prometheus.Registerer
	maxMemory     uint64
	durable       bool
	journal       string
	// syncedDeliveries: a delivery waits for its commit's sync
	// (WithSyncedDeliveries).
	syncedDeliveries bool
	preinit          map[string]Preinit
	idemKeys         int
	idemBytes        int64
	guestSlots       int
	// tenantGuestSlots: how many of them one tenant whose calls run long
	// (longGuestCall) may hold.
	tenantGuestSlots int
	longGuestCall    time.Duration
	tenantWeights    map[string]int
	// Deadlines of single classes (WithClassAlarmDeadline,
	// WithClassEventDeadline).
	classAlarmDeadline map[string]time.Duration
	classEventDeadline map[string]time.Duration
}

// Option configures an Engine.
type Option func(*config)

// WithClock sets the clock (default: the system clock).
func WithClock(c clock.Clock) Option { return func(o *config) { o.clock = c } }

// WithDurableCommits makes every event's commit durable before the event
// returns: a request's response, a delivery's outcome and a host's
// SetAlarm are reported only once the commit is on stable storage, so an
// acknowledged event and the alarm it set survive a power loss or an OS
// crash, not only a crash of the process. Each commit syncs its database's
// WAL (synchronous=FULL), and a new actor's database file is synced before
// it is named. The actors' syncs run at the same time, each on its own
// goroutine, and the system merges them: measured against a group commit,
// which holds commits back for a round of syncs, this was the faster, at
// every concurrency (docs/benchmarks.md). Off by default: it costs a sync
// per event.
func WithDurableCommits(on bool) Option { return func(o *config) { o.durable = on } }

// WithJournal makes commits durable (WithDurableCommits) through one node
// journal for the actor databases under root, kept in a directory of
// root's (".wasmkeep-journal"): each commit's WAL frames are appended to
// it as well as written to the WAL, and the commits waiting at once share
// one sync of it (group commit), where each would otherwise sync its own
// WAL. NewEngine first writes again into their WALs the frames a power
// cut may have kept from them; Close leaves nothing to write again. A
// database outside root syncs its own WAL. Only one engine may have a
// journal for a root, and the databases under it must be opened by that
// engine alone. On platforms other than Linux, it is WithDurableCommits.
// docs/design.md#journal says why an acknowledged event survives a power
// cut with it.
func WithJournal(root string) Option { return func(o *config) { o.journal = root } }

// WithSyncedDeliveries makes a successful alarm delivery wait for its
// commit to be durable before it returns, as a request does. Without it
// (the default), with the node journal (WithJournal), a delivery whose
// handler succeeded returns once its commit is in the WAL and in the
// journal's next batch, and the actor's next call (a request, a read of
// its state, a snapshot for an upload, an index update), its database's
// close and any checkpoint wait for that batch first: nothing outside
// the actor learns of the delivery before its writes are durable (an
// output gate, as Cloudflare's Durable Objects hold a response). A power
// cut before the batch is durable undoes the delivery, its writes with
// it, and the alarm fires again at the next start. A failed delivery
// (the committed retry, a dead letter) always waits. Without the journal
// it changes nothing. docs/design.md#output-gate says why it is safe.
func WithSyncedDeliveries(on bool) Option { return func(o *config) { o.syncedDeliveries = on } }

// WithLogger sets the logger (default: a null logger).
func WithLogger(l hclog.Logger) Option { return func(o *config) { o.logger = l } }

// WithAlarmDeadline bounds how long on-alarm may run; past it the run is
// stopped and counted as a failure, its retry committed (default
// hostmod.DefaultAlarmDeadline, 5 s). WithClassAlarmDeadline overrides it
// for one class.
func WithAlarmDeadline(d time.Duration) Option { return func(o *config) { o.alarmDeadline = d } }

// WithEventDeadline bounds how long on-request, on-init and an instance's
// _initialize may run (default 30 s). WithClassEventDeadline overrides it
// for one class.
func WithEventDeadline(d time.Duration) Option { return func(o *config) { o.eventDeadline = d } }

// WithClassAlarmDeadline is WithAlarmDeadline for the actors of one class.
func WithClassAlarmDeadline(class string, d time.Duration) Option {
	return func(o *config) {
		if o.classAlarmDeadline == nil {
			o.classAlarmDeadline = map[string]time.Duration{}
		}
		o.classAlarmDeadline[class] = d
	}
}

// WithClassEventDeadline is WithEventDeadline for the actors of one class.
func WithClassEventDeadline(class string, d time.Duration) Option {
	return func(o *config) {
		if o.classEventDeadline == nil {
			o.classEventDeadline = map[string]time.Duration{}
		}
		o.classEventDeadline[class] = d
	}
}

// alarmDeadlineOf is the on-alarm deadline of a class.
func (c *config) alarmDeadlineOf(class string) time.Duration {
	if d, ok := c.classAlarmDeadline[class]; ok {
		return d
	}
	return c.alarmDeadline
}

// eventDeadlineOf is the event deadline of a class.
func (c *config) eventDeadlineOf(class string) time.Duration {
	if d, ok := c.classEventDeadline[class]; ok {
		return d
	}
	return c.eventDeadline
}

// WithBackoff sets the retry delay after the first failure and its cap
// (default 1 s doubling to 5 min).
func WithBackoff(base, max time.Duration) Option {
	return func(o *config) { o.retryBase, o.retryMax = base, max }
}

// WithMaxAttempts ends the committed retries of an alarm: once n runs of
// on-alarm in a row have failed (the alarm's first run included), the
// retry is given up. The alarm is cleared (an alarm the handler set for
// later than the retry would have been stands), the failure count goes
// back to 0, and the actor keeps a dead letter of the alarm given up
// (Actor.DeadLetter; Delivery.GaveUp reports it). The default, 0, is the
// design's: the backoff goes on for ever (docs/design.md#retries).
// WithClassMaxAttempts overrides it for one class.
func WithMaxAttempts(n int) Option { return func(o *config) { o.maxAttempts = n } }

// WithClassMaxAttempts is WithMaxAttempts for the actors of one class; 0
// there means no limit for that class whatever WithMaxAttempts says.
func WithClassMaxAttempts(class string, n int) Option {
	return func(o *config) {
		if o.classAttempts == nil {
			o.classAttempts = map[string]int{}
		}
		o.classAttempts[class] = n
	}
}

// maxAttemptsOf is the retry limit of a class (0: none).
func (c *config) maxAttemptsOf(class string) int {
	if n, ok := c.classAttempts[class]; ok {
		return n
	}
	return c.maxAttempts
}

// WithGuestOutput sets where guests' stdout and stderr go besides the
// engine's logger, which gets each line (rate limited, with the actor's
// name; default: the logger only).
func WithGuestOutput(stdout, stderr io.Writer) Option {
	return func(o *config) { o.stdout, o.stderr = stdout, stderr }
}

// DefaultMemoryLimit bounds each instance's linear memory.
const DefaultMemoryLimit = 256 << 20

// WithMemoryLimit bounds each guest instance's linear memory (default
// 256 MiB, rounded down to 64 KiB pages): a guest that asks for more sees
// memory.grow fail, and the host is unharmed.
func WithMemoryLimit(bytes uint64) Option {
	return func(o *config) { o.memoryPages = uint32(min(bytes/65536, 65536)) }
}

// sharedCache lets every engine in the process compile a class once.
var sharedCache = wazero.NewCompilationCache()

// WithCompilationCache sets the wazero compilation cache (default: one
// in-memory cache shared by every engine in the process, so each class is
// compiled once). Pass wazero.NewCompilationCacheWithDir to keep compiled
// classes across restarts.
func WithCompilationCache(c wazero.CompilationCache) Option {
	return func(o *config) { o.cache = c }
}

// WithRuntime runs the guests in r, a runtime the embedder owns, next to
// its own host modules and its own WASI set-up, instead of a runtime of the
// engine's own. NewEngine instantiates wasmkeep:alarm and wasmkeep:actor in
// r unless they are there already (Instantiate), and
// wasi_snapshot_preview1 unless r has a module of that name. Close does not
// close r. The runtime's own configuration then applies:
// WithCompilationCache, WithMemoryLimit and WithMaxTotalMemory are ignored.
//
// NewEngine refuses a runtime that cannot stop a guest at its deadline
// (CheckRuntime: r must be created with
// wazero.RuntimeConfig.WithCloseOnContextDone(true)), and one that already
// has a module named wasmkeep:alarm or wasmkeep:actor which Instantiate
// did not make (ErrForeignModule).
func WithRuntime(r wazero.Runtime) Option { return func(o *config) { o.runtime = r } }

// WithModuleConfig gives the base configuration of each actor's instance
// (environment, files, standard streams: the embedder's own WASI
// configuration), called for every instance. The engine then sets what
// the contract needs on it: an anonymous name, the _initialize start
// function, and the wall clock from the engine's clock.
func WithModuleConfig(f func(abi.ActorID) wazero.ModuleConfig) Option {
	return func(o *config) { o.moduleConfig = f }
}

// Engine runs actor guests: one wazero runtime with the wasmkeep host modules
// and WASI, the compiled classes, and the event and delivery logic. It is
// safe for concurrent use; each Actor runs one event at a time.
type Engine struct {
	r   wazero.Runtime
	cfg config
	// owned: the engine made r and closes it; otherwise Close closes the
	// classes it compiled.
	owned bool

	mu       sync.Mutex
	compiled []wazero.CompiledModule

	res   *residency
	mem   *memBudget
	slots *guestSlots
	// stopWatch ends the watch of the long guest calls (watchProcs).
	stopWatch chan struct{}
	closeOnce sync.Once
	// modCfg is the configuration every instance starts from when the
	// embedder gives none (WithModuleConfig): built once, since each With
	// copies it; an instance adds only its actor's stdout and stderr.
	modCfg wazero.ModuleConfig
	// collectors are the metrics registered (WithRegisterer); Close takes
	// them out.
	collectors []prometheus.Collector
	// journal is the node journal (WithJournal), or nil.
	journal *journal
}

// NewEngine creates an engine. Close it to free the runtime.
func NewEngine(ctx context.Context, opts ...Option) (*Engine, error) {
	cfg := config{
		clock:         clock.System{},
		logger:        hclog.NewNullLogger(),
		alarmDeadline: hostmod.DefaultAlarmDeadline,
		eventDeadline: DefaultEventDeadline,
		retryBase:     hostmod.DefaultRetryBase,
		retryMax:      hostmod.DefaultRetryMax,
		idemKeys:      DefaultIdempotencyKeys,
		idemBytes:     DefaultIdempotencyBytes,
		stdout:        io.Discard,
		stderr:        io.Discard,
		memoryPages:   DefaultMemoryLimit / 65536,
		maxDBs:        DefaultMaxOpenDatabases,
		maxInsts:      DefaultMaxInstances,
		resWait:       DefaultResidencyWait,
		maxMemory:     DefaultMaxTotalMemory,
	}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.retryBase <= 0 || cfg.retryMax < cfg.retryBase {
		return nil, fmt.Errorf("engine: backoff base %v and max %v: need 0 < base <= max", cfg.retryBase, cfg.retryMax)
	}
	if cfg.maxAttempts < 0 {
		return nil, fmt.Errorf("engine: max attempts %d: want 0 (no limit) or more", cfg.maxAttempts)
	}
	for class, n := range cfg.classAttempts {
		if n < 0 {
			return nil, fmt.Errorf("engine: max attempts %d for class %q: want 0 (no limit) or more", n, class)
		}
	}
	if cfg.memoryPages == 0 {
		return nil, fmt.Errorf("engine: the memory limit must be at least one 64 KiB page")
	}
	if cfg.alarmDeadline <= 0 || cfg.eventDeadline <= 0 {
		return nil, fmt.Errorf("engine: deadlines must be positive")
	}
	for _, m := range []map[string]time.Duration{cfg.classAlarmDeadline, cfg.classEventDeadline} {
		for class, d := range m {
			if d <= 0 {
				return nil, fmt.Errorf("engine: deadline %v for class %q: deadlines must be positive", d, class)
			}
		}
	}
	if cfg.maxDBs < 1 || cfg.maxInsts < 1 || cfg.resWait <= 0 {
		return nil, fmt.Errorf("engine: residency budget of %d databases and %d instances, wait %v: each must be positive", cfg.maxDBs, cfg.maxInsts, cfg.resWait)
	}
	if cfg.guestSlots == 0 {
		cfg.guestSlots = DefaultGuestSlots()
	}
	if cfg.tenantGuestSlots == 0 {
		cfg.tenantGuestSlots = DefaultTenantGuestSlots()
	}
	if cfg.longGuestCall == 0 {
		cfg.longGuestCall = DefaultLongGuestCall
	}
	if cfg.guestSlots < 1 || cfg.tenantGuestSlots < 1 || cfg.longGuestCall < 0 {
		return nil, fmt.Errorf("engine: %d guest slots, %d for one tenant, long guest call %v: want at least 1 slot each and a call that is not negative", cfg.guestSlots, cfg.tenantGuestSlots, cfg.longGuestCall)
	}
	for t, w := range cfg.tenantWeights {
		if w < 1 {
			return nil, fmt.Errorf("engine: weight %d for tenant %q: want 1 or more", w, t)
		}
	}
	if cfg.maxMemory < 65536 {
		return nil, fmt.Errorf("engine: the memory budget for all instances must be at least one 64 KiB page, not %d bytes", cfg.maxMemory)
	}
	var j *journal
	if cfg.journal != "" {
		cfg.durable = true
		var err error
		if j, err = openJournal(cfg.journal); err != nil {
			return nil, fmt.Errorf("engine: %w", err)
		}
	}
	e, err := newEngine(ctx, cfg, j)
	if err != nil {
		if j != nil {
			_ = j.close()
		}
		return nil, err
	}
	return e, nil
}

// newEngine is NewEngine once the configuration is checked and the
// journal, if any, open.
func newEngine(ctx context.Context, cfg config, j *journal) (*Engine, error) {
	if r := cfg.runtime; r != nil {
		if err := hostmod.CheckRuntime(ctx, r); err != nil {
			return nil, err
		}
		if err := checkForeign(r); err != nil {
			return nil, err
		}
		if r.Module(wasi_snapshot_preview1.ModuleName) == nil {
			if _, err := wasi_snapshot_preview1.Instantiate(ctx, r); err != nil {
				return nil, fmt.Errorf("engine: instantiate WASI in the embedder's runtime: %w", err)
			}
		}
		if r.Module(abi.AlarmModule) == nil || r.Module(abi.ActorModule) == nil {
			if err := Instantiate(ctx, r); err != nil {
				return nil, fmt.Errorf("engine: instantiate host modules in the embedder's runtime: %w", err)
			}
		}
		e := &Engine{r: r, cfg: cfg, journal: j, res: newResidency(cfg.maxDBs, cfg.maxInsts, cfg.resWait, cfg.clock), mem: &memBudget{max: cfg.maxMemory},
			slots: newGuestSlots(cfg.guestSlots, cfg.tenantGuestSlots, cfg.longGuestCall, cfg.tenantWeights)}
		e.modCfg = e.contract(nil)
		if err := e.register(); err != nil {
			return nil, err
		}
		e.watch()
		return e, nil
	}
	cache := cfg.cache
	if cache == nil {
		cache = sharedCache
	}
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().
		WithCloseOnContextDone(true).
		WithCompilationCache(cache).
		WithMemoryLimitPages(cfg.memoryPages))
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, r); err != nil {
		r.Close(ctx)
		return nil, fmt.Errorf("engine: instantiate WASI: %w", err)
	}
	if err := Instantiate(ctx, r); err != nil {
		r.Close(ctx)
		return nil, fmt.Errorf("engine: instantiate host modules: %w", err)
	}
	e := &Engine{r: r, cfg: cfg, journal: j, owned: true, res: newResidency(cfg.maxDBs, cfg.maxInsts, cfg.resWait, cfg.clock), mem: newMemBudget(cfg.maxMemory),
		slots: newGuestSlots(cfg.guestSlots, cfg.tenantGuestSlots, cfg.longGuestCall, cfg.tenantWeights)}
	e.modCfg = e.contract(nil)
	if err := e.register(); err != nil {
		r.Close(ctx)
		return nil, err
	}
	e.watch()
	return e, nil
}

// watch starts the watch of the engine's long guest calls, which raises
// GOMAXPROCS while they run (guestslots.go).
func (e *Engine) watch() {
	e.stopWatch = make(chan struct{})
	go e.slots.watchProcs(e.stopWatch, func(before, after, long int) {
		if after > before {
			e.cfg.logger.Info("raised GOMAXPROCS so that the guest calls running long leave the Go runtime a processor (a spinning guest cannot be preempted)",
				"long_guest_calls", long, "gomaxprocs_before", before, "gomaxprocs", after)
		} else {
			e.cfg.logger.Info("lowered GOMAXPROCS: no guest call has run long lately", "gomaxprocs_before", before, "gomaxprocs", after)
		}
	})
}

// Close closes the runtime and every instance in it; with WithRuntime, it
// closes only the classes the engine compiled and leaves the embedder's
// runtime open. It does not close the actors' databases: close each
// actor first (Actor.Close), or its files stay open. Its metrics leave
// the registerer (WithRegisterer), so a new engine may register there.
func (e *Engine) Close(ctx context.Context) error {
	e.closeOnce.Do(func() {
		if e.stopWatch != nil {
			close(e.stopWatch)
		}
	})
	e.mu.Lock()
	e.unregister()
	e.mu.Unlock()
	var jerr error
	if e.journal != nil {
		jerr = e.journal.close()
	}
	if e.owned {
		err := e.r.Close(ctx)
		for _, r := range e.mem.shut() {
			r.release()
		}
		return errors.Join(err, jerr)
	}
	e.mu.Lock()
	list := e.compiled
	e.compiled = nil
	e.mu.Unlock()
	var errs []error
	for _, cm := range list {
		errs = append(errs, cm.Close(ctx))
	}
	return errors.Join(append(errs, jerr)...)
}

// Journal returns the node journal's counters (WithJournal; zero without
// one).
func (e *Engine) Journal() JournalStats { return e.journal.stats() }

// Syncing reports how many commits wait for the disk now: for the node
// journal's sync (WithJournal), or for a sync of a database's own file
// (without a journal, and a checkpoint's sync of a database; these are
// counted for every engine of the process together). A host that runs
// events on a few workers, one per processor, may run this many more at
// once: the events waiting for a sync leave their processors to others,
// and with a journal their commits share its next sync
// (alarms.SyncHost).
func (e *Engine) Syncing() int { return e.journal.syncing() + int(fileSyncing.Load()) }

// fileSyncing is how many syncs of a database's own file are under way
// in the process.
var fileSyncing atomic.Int64

// Residency returns the residency counters: what is open now, the budgets,
// the peaks, and how often room was made or refused.
func (e *Engine) Residency() ResidencyStats { return e.res.stats() }

// SleepIdle puts to sleep (closes the instance and the database of) every
// actor whose last event ended before cutoff, by the engine's clock, and
// that is in no event now. It returns how many it put to sleep. A sleeping
// actor wakes on its next call.
func (e *Engine) SleepIdle(cutoff time.Time) int { return e.res.sleepIdle(cutoff) }

// Clock returns the engine's clock.
func (e *Engine) Clock() clock.Clock { return e.cfg.clock }

// Class is a compiled actor class whose exports were checked.
type Class struct {
	Name     string
	compiled wazero.CompiledModule
	// image, when set, is the memory every instance must start on:
	// compiled is then a pre-initialised image without its data.
	image *imageMemory
	// generators are the image's random number generators, given fresh
	// seeds in each instance (preinit.Reseed).
	generators []preinit.Generator
	onAlarm    bool
	onRequest  bool
	onInit     bool
}

// HasAlarmHandler reports whether the class exports on-alarm.
func (c *Class) HasAlarmHandler() bool { return c.onAlarm }

// Compile compiles a guest and checks its contract: every import from the
// wasmkeep modules must be a known function with its exact signature; a guest
// that imports wasmkeep:alarm must export on-alarm with the exact signature;
// on-request and on-init, when exported, must have theirs.
func (e *Engine) Compile(ctx context.Context, class string, wasm []byte) (*Class, error) {
	cm, err := e.r.CompileModule(ctx, wasm)
	if err != nil {
		return nil, fmt.Errorf("class %s: compile: %w", class, err)
	}
	c := &Class{Name: class, compiled: cm}
	if err := c.check(); err != nil {
		cm.Close(ctx)
		return nil, fmt.Errorf("class %s: %w", class, err)
	}
	if im, mem, gens := e.image(ctx, class, wasm); im != nil {
		cm.Close(ctx)
		c.compiled, c.image, c.generators = im, mem, gens
		if mem != nil {
			e.mem.addImage(mem)
		}
	}
	if !e.owned {
		e.mu.Lock()
		e.compiled = append(e.compiled, cm)
		e.mu.Unlock()
	}
	return c, nil
}

func (c *Class) check() error {
	importsAlarm := false
	for _, f := range c.compiled.ImportedFunctions() {
		mod, name, _ := f.Import()
		if mod != abi.AlarmModule && mod != abi.ActorModule {
			continue
		}
		if mod == abi.AlarmModule {
			importsAlarm = true
		}
		params, known := lookupFunc(mod, name)
		if !known {
			return fmt.Errorf("imports %s %q, which the host does not provide", mod, name)
		}
		results := []api.ValueType{i32}
		if !sameTypes(f.ParamTypes(), params) || !sameTypes(f.ResultTypes(), results) {
			return fmt.Errorf("imports %s %q with signature %s, want %s", mod, name, sig(f.ParamTypes(), f.ResultTypes()), sig(params, results))
		}
	}
	exports := c.compiled.ExportedFunctions()
	checkExport := func(name string, params, results []byte, wat string) (bool, error) {
		f, ok := exports[name]
		if !ok {
			return false, nil
		}
		if !sameTypes(f.ParamTypes(), params) || !sameTypes(f.ResultTypes(), results) {
			return false, fmt.Errorf("export %q has signature %s, want %s", name, sig(f.ParamTypes(), f.ResultTypes()), wat)
		}
		return true, nil
	}
	var err error
	if c.onAlarm, err = checkExport(abi.ExportOnAlarm, abi.OnAlarmParams, abi.OnAlarmResults, abi.OnAlarmSignature); err != nil {
		return err
	}
	if importsAlarm && !c.onAlarm {
		return fmt.Errorf("imports %s but does not export %q %s", abi.AlarmModule, abi.ExportOnAlarm, abi.OnAlarmSignature)
	}
	if c.onRequest, err = checkExport(abi.ExportOnRequest, abi.OnRequestParams, abi.OnRequestResults, abi.OnRequestSignature); err != nil {
		return err
	}
	if c.onInit, err = checkExport(abi.ExportOnInit, abi.OnInitParams, abi.OnInitResults, abi.OnInitSignature); err != nil {
		return err
	}
	return nil
}

func sameTypes(a []api.ValueType, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func sig(params, results []api.ValueType) string {
	s := "(func"
	for _, p := range params {
		s += " (param " + api.ValueTypeName(p) + ")"
	}
	for _, r := range results {
		s += " (result " + api.ValueTypeName(r) + ")"
	}
	return s + ")"
}

// contract sets on mc what the contract needs of every instance
// (GuestConfig): an anonymous name, the _initialize start function, and the
// wall clock from the engine's clock.
func (e *Engine) contract(mc wazero.ModuleConfig) wazero.ModuleConfig {
	return hostmod.GuestConfig(mc, e.cfg.clock)
}

// instantiate makes a fresh instance of the class for the actor. Its
// _initialize runs with the actor in context but outside any event, so the
// imports answer EPERM there.
//
// The instance's memory is counted in the engine's memory budget until the
// instance closes; the guestMemory returned tells of a growth it refused.
func (e *Engine) instantiate(ctx context.Context, id abi.ActorID, c *Class, stdout, stderr io.Writer) (api.Module, *guestMemory, error) {
	var mc wazero.ModuleConfig
	if e.cfg.moduleConfig != nil {
		mc = e.contract(e.cfg.moduleConfig(id))
	} else {
		mc = e.modCfg.WithStdout(stdout).WithStderr(stderr)
	}
	gm, err := e.newGuestMemory(id, c)
	if err == nil && gm == nil && c.image != nil {
		err = errors.New("an image without its data, in a runtime whose memories the engine does not supply") // never: such an engine makes no image
	}
	if err != nil {
		return nil, nil, &abi.ActorError{ID: id, Err: fmt.Errorf("instantiate class %s: %w", c.Name, err)}
	}
	ctx, cancel := context.WithTimeout(withCall(gm.with(ctx), &call{actor: id}), e.cfg.eventDeadlineOf(c.Name))
	defer cancel()
	gm.enter()
	m, err := e.r.InstantiateModule(ctx, c.compiled, mc)
	gm.exit()
	if err != nil {
		gm.Free() // wazero does not free it on every failure
		if r := gm.takeRefusal(); r != nil {
			err = fmt.Errorf("%w; then: %w", r, err)
		}
		return nil, nil, &abi.ActorError{ID: id, Err: fmt.Errorf("instantiate class %s: %w", c.Name, err)}
	}
	if len(c.generators) > 0 {
		// Before any of the instance's code runs: the image has no start
		// function and no _initialize.
		if err := preinit.Reseed(m.Memory(), c.generators, rand.Reader); err != nil {
			m.Close(ctx)
			return nil, nil, &abi.ActorError{ID: id, Err: fmt.Errorf("instantiate class %s: %w", c.Name, err)}
		}
	}
	return m, gm, nil
}
