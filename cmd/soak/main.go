// Command soak is the chaos soak: 3 to 5 keepnode processes share one S3
// bucket (versitygw, started here, or the endpoint AWS_ENDPOINT_URL names),
// each reaching it through a fault proxy of its own (latency, 503s, reset
// connections, replies lost after the request was applied, requests that
// land late, and cuts that refuse every request of one node). At least
// 1,000 actors of the soak actor (examples/soak-actor) re-arm, fire once,
// fail a few times and then succeed, clear, and get deleted, while exec and
// exec-durable requests arrive throughout and a random node is SIGKILLed
// every few seconds and restarted, under its old name or a new one.
//
// Each actor keeps a ledger of its firings and requests in its own
// committed state; the soak records from outside what it sent and what the
// nodes logged. At the end, with faults off and the cluster settled, it
// reads every ledger and checks the whole history (see check.go): every
// committed alarm fired within its bound, none early, retries no earlier
// than their committed time, no firing after a delete, every acknowledged
// exec-durable request committed, and the index doctor (inspect.Verify)
// finds an entry for every alarm and none left overdue. A violation prints
// the actor's whole history and the command exits 1.
package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	s3bucket "github.com/wasmkeep/alarms/bucket/s3"
	"github.com/wasmkeep/alarms/client"
	"github.com/wasmkeep/alarms/inspect"
	"github.com/wasmkeep/alarms/internal/clusterproc"
	"github.com/wasmkeep/alarms/internal/faultproxy"
)

// options are the soak's knobs, one flag each.
type options struct {
	nodes, actors    int
	duration         time.Duration
	kills            int
	killEvery        time.Duration
	restartPause     time.Duration
	sameName         float64
	partition        float64
	partitionFor     time.Duration
	faults           map[faultproxy.FailMode]*float64
	latency          float64
	maxLatency       time.Duration
	lateDelay        time.Duration
	leaseTTL, margin time.Duration
	grace, sweep     time.Duration
	retryBase        time.Duration
	retryMax         time.Duration
	minInt, maxInt   time.Duration
	rate             float64
	quiet            time.Duration
	slack            time.Duration
	boundInFaults    bool
	outage           time.Duration
	writeOutage      time.Duration
	seed             uint64
	wasm             string
	keep             bool
	progressEvery    time.Duration
	maxInstances     int
	requestTimeout   time.Duration
	retryFor         time.Duration
	verifyAttempts   int
	upgradeFrom      string
	out              io.Writer
	tty              bool
}

func defaults() options {
	o := options{
		nodes: 3, actors: 1000, kills: 100, killEvery: 4 * time.Second, restartPause: time.Second,
		sameName: 0.5, partition: 0.15, partitionFor: 4 * time.Second,
		faults:  map[faultproxy.FailMode]*float64{},
		latency: 0.05, maxLatency: 300 * time.Millisecond, lateDelay: 2 * time.Second,
		leaseTTL: 2 * time.Second, margin: 400 * time.Millisecond, grace: time.Second, sweep: time.Second, boundInFaults: true,
		retryBase: 500 * time.Millisecond, retryMax: 4 * time.Second,
		minInt: 20 * time.Second, maxInt: 60 * time.Second, rate: 30, quiet: 20 * time.Second, slack: 2 * time.Second,
		progressEvery: 5 * time.Second, maxInstances: 256, requestTimeout: 10 * time.Second, retryFor: 20 * time.Second, verifyAttempts: 4,
		out: os.Stdout,
	}
	// 5 % of the S3 requests fail, 1 % in each of the five ways.
	rates := map[faultproxy.FailMode]float64{
		faultproxy.Respond503: 0.01, faultproxy.Drop: 0.01, faultproxy.DropAfterForward: 0.01,
		faultproxy.Reset: 0.01, faultproxy.LandLate: 0.01,
	}
	for m, r := range rates {
		r := r
		o.faults[m] = &r
	}
	return o
}

func main() {
	o := defaults()
	flag.IntVar(&o.nodes, "nodes", o.nodes, "keepnode processes (3 to 5)")
	flag.IntVar(&o.actors, "actors", o.actors, "soak actors")
	flag.DurationVar(&o.duration, "duration", 0, "how long the faults last (0: until -kills kills)")
	flag.IntVar(&o.kills, "kills", o.kills, "SIGKILLs before the faults stop (0: run for -duration)")
	flag.DurationVar(&o.killEvery, "kill-every", o.killEvery, "mean time between kills or cuts (each ±50%)")
	flag.DurationVar(&o.restartPause, "restart-pause", o.restartPause, "longest pause before a killed node restarts")
	flag.Float64Var(&o.sameName, "same-name", o.sameName, "probability that a killed node restarts under its old name (and data directory)")
	flag.Float64Var(&o.partition, "partition", o.partition, "probability that a chaos step cuts a node off from the bucket instead of killing one")
	flag.DurationVar(&o.partitionFor, "partition-for", o.partitionFor, "how long a node stays cut off")
	flag.Float64Var(o.faults[faultproxy.Respond503], "fault-503", *o.faults[faultproxy.Respond503], "rate of S3 requests answered 503 unforwarded")
	flag.Float64Var(o.faults[faultproxy.Drop], "fault-drop", *o.faults[faultproxy.Drop], "rate of S3 requests whose connection is closed unforwarded")
	flag.Float64Var(o.faults[faultproxy.Reset], "fault-reset", *o.faults[faultproxy.Reset], "rate of S3 requests whose connection is reset unforwarded")
	flag.Float64Var(o.faults[faultproxy.DropAfterForward], "fault-lost-reply", *o.faults[faultproxy.DropAfterForward], "rate of S3 requests applied whose reply is lost")
	flag.Float64Var(o.faults[faultproxy.LandLate], "fault-late", *o.faults[faultproxy.LandLate], "rate of S3 requests failed at once and applied -late-delay later")
	flag.Float64Var(&o.latency, "latency", o.latency, "rate of S3 requests delayed by up to -max-latency")
	flag.DurationVar(&o.maxLatency, "max-latency", o.maxLatency, "longest injected latency")
	flag.DurationVar(&o.lateDelay, "late-delay", o.lateDelay, "how late a request that lands late lands")
	flag.DurationVar(&o.leaseTTL, "lease-ttl", o.leaseTTL, "node lease period (the design's default is 10s)")
	flag.DurationVar(&o.margin, "lease-margin", o.margin, "lease margin")
	flag.DurationVar(&o.grace, "lease-grace", o.grace, "lease grace")
	flag.DurationVar(&o.sweep, "sweep", o.sweep, "alarm_sweep")
	flag.DurationVar(&o.retryBase, "retry-base", o.retryBase, "first retry delay of a failing on-alarm")
	flag.DurationVar(&o.retryMax, "retry-max", o.retryMax, "longest retry delay")
	flag.DurationVar(&o.minInt, "min-interval", o.minInt, "shortest alarm interval")
	flag.DurationVar(&o.maxInt, "max-interval", o.maxInt, "longest alarm interval")
	flag.Float64Var(&o.rate, "rate", o.rate, "client requests per second (exec, exec-durable and deletes)")
	flag.DurationVar(&o.retryFor, "retry-for", o.retryFor, "how long after its first try the client sends a request whose outcome is unknown (no answer, a 503) again, under its idempotency key (0: never)")
	flag.DurationVar(&o.quiet, "quiet", o.quiet, "how long the cluster runs, faults off and settled, before the check")
	flag.DurationVar(&o.slack, "slack", o.slack, "slack added to the alarm bound for a busy machine")
	flag.BoolVar(&o.boundInFaults, "bound-during-faults", o.boundInFaults, "hold firings due while the faults are on to the bound too (false: from the quiet phase on only)")
	flag.DurationVar(&o.outage, "outage", 0, "once, in the middle of the faults, every node's proxy fails every S3 request for this long (a third each: hung, connections reset, 503), kills and faults paused from before it to the end of the recovery after it; 0: none")
	flag.DurationVar(&o.writeOutage, "write-outage", 0, "once, in the middle of the faults, every node's proxy answers every write (PUT, POST, DELETE) 503 for this long and lets reads through, as an erasure-coded store that lost its write quorum; kills and faults go on; 0: none")
	flag.Uint64Var(&o.seed, "seed", 0, "random seed (0: pick one and print it)")
	flag.StringVar(&o.wasm, "wasm", "", "the soak actor (default examples/soak-actor/soak_actor.wasm)")
	flag.IntVar(&o.maxInstances, "max-instances", o.maxInstances, "each node's -max-instances")
	flag.BoolVar(&o.keep, "keep", false, "keep the working directory (node logs and data)")
	flag.StringVar(&o.upgradeFrom, "upgrade-from", "", "a rolling upgrade instead of the chaos: the nodes start on keepnode as it was at this git commit, are replaced one at a time by this tree's build (the last SIGKILLed), then rolled back the same way; no S3 faults (see upgrade.go)")
	flag.Parse()
	o.tty = isTerminal(os.Stdout)
	if o.seed == 0 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		o.seed = binary.LittleEndian.Uint64(b[:])
	}
	sum, err := run(context.Background(), o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "\nsoak:", err)
		os.Exit(1)
	}
	if sum.Violations > 0 {
		os.Exit(1)
	}
}

// actor is one soak actor and the soak's record of it.
type actor struct {
	id   abi.ActorID
	plan plan
	mu   sync.Mutex // one request at a time
	ops  []op
	// deleted is when its delete was acknowledged.
	deleted  int64
	deleteAt int64 // when the soak deletes it (deleted actors)
	attempts []attempt
	runs     []guestRun // as the guest said them
	expect   int64      // the alarm the soak last knew of, for the live overdue count (-1 none)
	readAt   int64      // when its ledger was read at the end
}

// soak is a run's state.
type soak struct {
	o        options
	rng      *mrand.Rand
	rngMu    sync.Mutex
	chaosRng *mrand.Rand    // the chaos loop's own, so a seed repeats its choices
	restarts sync.WaitGroup // nodes starting in place of killed ones
	start    time.Time
	actors   []*actor
	byName   map[string]*actor
	slots    []*slot
	cfg      clusterproc.Config
	reqID    atomic.Int64
	kills    atomic.Int64
	same     atomic.Int64
	cuts     atomic.Int64
	sent     atomic.Int64
	acked    atomic.Int64
	failed   atomic.Int64
	retries  atomic.Int64 // requests sent again (each try after the first)
	mu       sync.Mutex   // attempts, lates
	lates    []int64
	fires    int
	fails    int
	runs     map[string]int // actor@scheduled -> runs logged
	dups     int
	said     map[string]int // actor@scheduled/retry -> runs the guests said
	saidDups int
	dropped  int    // guest stdout lines dropped over the rate limit
	killLog  []kill // under mu
	cutLog   []cut  // under mu
	// lapses are the nodes' lease lapses their logs showed, validUntil
	// each node's latest failed renewal's valid_until (leaseLine), under
	// mu.
	lapses     []cut
	validUntil map[string]int64
	faultMu    sync.Mutex
	faultLog   []fault // under faultMu: the faults the proxies injected
	gen        int
	lineBuf    []byte
	// outageRep is the outage's measurements (-outage), once it ran.
	outageRep *outageReport
	// probe is the bucket's rate through the proxies, measured before the
	// nodes started (-outage only).
	probe probeResult
	// writeOut is the write outage (-write-outage): when it began and
	// ended (ms; 0 before), under mu; failedStarts counts node starts
	// that gave up.
	writeOutFrom, writeOutTo int64
	failedStarts             atomic.Int64
	// up is the rolling upgrade's builds (-upgrade-from; nil: none),
	// upgradeLog its steps, under mu.
	up         *upgradeBuilds
	upgradeLog []upgradeStart
	bucket     bucket.Bucket // the bucket, reached directly (not through a proxy)
	// serverErrors counts answers with a 5xx status other than 503 (an
	// error the node did not say was temporary), serverSample the first.
	serverErrors atomic.Int64
	serverSample atomic.Value
	// replays counts acknowledged requests sent again under their key
	// through another node (-upgrade-from), replayBad those not answered
	// with the recorded reply, replaySample the first.
	replays, replayBad atomic.Int64
	replaySample       atomic.Value
	// selfExits counts nodes that exited though the soak neither killed
	// nor stopped them (a lost lease, a crash): violations, each
	// restarted as a supervisor would.
	selfExits atomic.Int64
	// oldestExtra is the age of the oldest extra entry (not of an actor
	// without state) at the index doctor's last run, from when it was a
	// margin overdue or the cluster quiet (ms).
	oldestExtra int64
}

// slot is one node's place: its proxy (kept across restarts) and the node
// running there now.
type slot struct {
	i           int
	proxy       *faultproxy.Proxy
	mu          sync.Mutex
	node        *clusterproc.Node
	name        string
	starting    bool // a start is under way (startNode)
	partitioned bool
	cutAt       int    // the open cut's index in cutLog, under the soak's mu
	bin         string // the keepnode build the slot starts ("": the soak's)
}

func (s *soak) intn(n int) int {
	s.rngMu.Lock()
	defer s.rngMu.Unlock()
	return s.rng.IntN(n)
}

func (s *soak) float() float64 {
	s.rngMu.Lock()
	defer s.rngMu.Unlock()
	return s.rng.Float64()
}

func (s *soak) say(format string, args ...any) {
	if s.o.tty {
		fmt.Fprint(s.o.out, "\r\033[K")
	}
	fmt.Fprintf(s.o.out, "%6.1fs  %s\n", time.Since(s.start).Seconds(), fmt.Sprintf(format, args...))
}

// summary is what a run found, for the caller (the test) and the table.
type summary struct {
	Kills, SameName, Cuts       int
	FailedStarts                int
	SelfExits                   int
	Lapses                      int
	WriteOutFrom, WriteOutTo    int64 // the write outage (ms; 0: none)
	Requests, Acked, Failed     int
	Retries, DupRows            int
	Committed, Logged, FailRuns int
	Duplicates, Uncommitted     int
	LedgerOnly, ExecLost        int
	BeyondQuiet, Lost, Late     int
	Violations                  int
	// ServerErrors are answers with a 5xx status other than 503; Upgrade
	// the rolling upgrade's steps (-upgrade-from).
	ServerErrors          int
	Replays, ReplayBad    int
	Upgrade               []upgradeStart
	SwapOnTime            onTime
	Lateness              []int64 // sorted, ms
	Injected              map[string]int
	S3Requests            int
	Bound                 int64
	Report                inspect.Report
	Missing, OverdueExtra int
	// Runs as the guests said them: how many, the duplicates (an attempt
	// run again) by cause and those after the quiet phase began, committed
	// firings whose run no guest line showed, and lines dropped over the
	// guest output rate limit.
	Runs, RunDups, QuietDups int
	DupCauses                map[string]int
	// Unexplained are the duplicates no failure explains (dupCause), one
	// line each: violations.
	Unexplained     []string
	Unseen, Dropped int
	// The phases: the faults (from the storm's start to the faults off)
	// and the quiet phase (settled, to the check), in ms; the firings
	// committed in each (by their run time) and the lateness of those in
	// the faults (sorted).
	FaultMs, QuietMs           int64
	FaultFirings, QuietFirings int
	FaultLateness              []int64
	// DueFromMs is how far into the faults the first alarm fell due (the
	// actors are armed minInt or more ahead, and the faults wait for the
	// first to fall due, so it is 0 unless the outage moves them), and
	// DueMs and DueFirings the faults' span from then on and its firings:
	// a rate that does not count the seconds no alarm was due.
	DueFromMs, DueMs int64
	DueFirings       int
	// Client requests sent while the faults were on, by event kind (exec,
	// exec-durable, delete): how many, how many failed, and how many of
	// those failures were a reply with Retry-After.
	FaultRequests map[string]*requestCount
	// The bucket outage (-outage): what the soak measured around it, the
	// client requests sent during it by kind, and how long after the
	// bucket returned each firing it held up ran (sorted, ms).
	Outage          *outageReport
	OutageRequests  map[string]*requestCount
	AfterOutage     []int64
	LateAfterOutage int
}

// requestCount counts client requests of one kind, and their failures by
// cause (failureCause).
type requestCount struct {
	Sent, Failed, RetryAfter, NoReply int
	Causes                            map[string]int
	// Retried counts the requests sent more than once (under their
	// idempotency key), Retries the tries after the first, Replayed the
	// requests answered from their key's record (an earlier try had run
	// the event), and RetryCauses why tries were sent again.
	Retried, Retries, Replayed int
	RetryCauses                map[string]int
	// FailedMs are the failed requests' latencies (sent to the last
	// answer, ms) and FirstMs every request's first try's (sent to
	// answered), kept for the outage's requests only.
	FailedMs, FirstMs []int64
}

var (
	causeURL   = regexp.MustCompile(`^[A-Z]+ https?://[^ ]+: `)
	causeActor = regexp.MustCompile(`actor [a-z]+/[a-z]+/a[0-9]+: `)
	causeNode  = regexp.MustCompile(`\bn[0-9]+(-[0-9]+)?\b`)
	causeNums  = regexp.MustCompile(`[0-9]+(\.[0-9]+)?(ms|s|µs)?`)
)

// failureCause is a failed request's error without what differs from one
// request to the next (the URL, the actor, node names, numbers).
func failureCause(err string) string {
	c := causeURL.ReplaceAllString(err, "")
	c = causeActor.ReplaceAllString(c, "")
	c = causeNode.ReplaceAllString(c, "N")
	c = causeNums.ReplaceAllString(c, "#")
	if len(c) > 110 {
		c = c[:110] + "..."
	}
	return c
}

func run(ctx context.Context, o options) (summary, error) {
	var sum summary
	if o.nodes < 3 || o.nodes > 5 {
		return sum, fmt.Errorf("-nodes %d: want 3 to 5", o.nodes)
	}
	if o.actors < 10 {
		return sum, fmt.Errorf("-actors %d: want at least 10", o.actors)
	}
	if o.upgradeFrom != "" {
		o = noFaults(o)
		o.kills, o.duration = 0, time.Duration(upgradeSteps(o.nodes))*o.killEvery
	}
	if o.kills <= 0 && o.duration <= 0 {
		return sum, errors.New("give -kills or -duration")
	}
	if o.outage < 0 || o.outage > 0 && o.outage < 3*time.Second {
		return sum, fmt.Errorf("-outage %v: want 0 or at least 3s", o.outage)
	}
	s := &soak{o: o, rng: mrand.New(mrand.NewPCG(o.seed, o.seed>>1|1)), chaosRng: mrand.New(mrand.NewPCG(o.seed^0xc4a05, o.seed)), start: time.Now(), byName: map[string]*actor{}, runs: map[string]int{}, said: map[string]int{}}
	s.say("seed %d (go run ./cmd/soak -seed %d ... repeats the run's choices; the machine's timing does not repeat)", o.seed, o.seed)
	root, err := clusterproc.ModuleRoot()
	if err != nil {
		return sum, err
	}
	if o.wasm == "" {
		o.wasm = filepath.Join(root, "examples", "soak-actor", "soak_actor.wasm")
	}
	if _, err := os.Stat(o.wasm); err != nil {
		return sum, fmt.Errorf("the soak actor: %w", err)
	}
	dir, err := os.MkdirTemp("", "wasmkeep-soak-")
	if err != nil {
		return sum, err
	}
	if o.keep {
		s.say("working directory: %s", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	s.say("building keepnode")
	head := ""
	if o.upgradeFrom != "" {
		// Stamped, so that its lease names this tree's commit even where
		// Go records no VCS information.
		head = clusterproc.HeadRevision(ctx)
	}
	bin, err := clusterproc.BuildStamped(ctx, dir, "", head)
	if err != nil {
		return sum, err
	}
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	bucketName := "wasmkeep-soak-" + hex.EncodeToString(suffix[:])
	var s3 clusterproc.S3
	direct := []s3bucket.Option{}
	if ep := os.Getenv("AWS_ENDPOINT_URL"); ep != "" {
		s3 = clusterproc.S3{Endpoint: ep, Bucket: bucketName}
		s.say("S3 endpoint %s, bucket %s", ep, bucketName)
	} else {
		gw, err := clusterproc.StartVersitygw(ctx, dir)
		if err != nil {
			return sum, fmt.Errorf("start the S3 endpoint: %w (run `make tools`, or set AWS_ENDPOINT_URL)", err)
		}
		defer gw.Stop()
		s3 = gw.S3(bucketName)
		direct = append(direct, s3bucket.WithEndpoint(gw.Endpoint), s3bucket.WithCredentials(gw.AccessKey, gw.SecretKey), s3bucket.WithRegion(s3bucket.DefaultRegion))
		s.say("S3 endpoint (versitygw) %s, bucket %s", gw.Endpoint, bucketName)
	}
	b, err := s3bucket.New(ctx, bucketName, direct...)
	if err != nil {
		return sum, err
	}
	if err := b.EnsureBucket(ctx); err != nil {
		return sum, fmt.Errorf("create bucket %s: %w", bucketName, err)
	}

	s.cfg = clusterproc.Config{
		Binary: bin, S3: s3, Dir: dir, Log: s,
		Classes:      map[string]string{"soak": o.wasm},
		ReadyTimeout: time.Minute,
		Flags: []string{
			"-lease-ttl", o.leaseTTL.String(), "-lease-margin", o.margin.String(), "-lease-grace", o.grace.String(),
			"-sweep", o.sweep.String(), "-retry-base", o.retryBase.String(), "-retry-max", o.retryMax.String(),
			"-tenants", "soak", "-idle", "10m", "-max-instances", fmt.Sprint(o.maxInstances), "-log-json",
			"-log-level", "debug", // each firing is a debug line
		},
	}
	if o.outage > 0 {
		// The restores after the outage are read from the nodes' metrics.
		s.cfg.Flags = append(s.cfg.Flags, "-metrics-addr", "127.0.0.1:0")
	}
	for i := 0; i < o.nodes; i++ {
		p, err := faultproxy.Start(s3.Endpoint, o.seed+uint64(i))
		if err != nil {
			return sum, err
		}
		defer p.Close()
		p.SetLateDelay(o.lateDelay)
		sl := &slot{i: i, proxy: p}
		p.SetFaultHook(func(f faultproxy.Fault) {
			sl.mu.Lock()
			name := sl.name
			sl.mu.Unlock()
			s.faultMu.Lock()
			s.faultLog = append(s.faultLog, fault{Node: name, At: f.At.UnixMilli(), Path: f.Path, Kind: f.Kind})
			s.faultMu.Unlock()
		})
		s.slots = append(s.slots, sl)
	}
	defer func() {
		for _, sl := range s.slots {
			sl.mu.Lock()
			nd := sl.node
			sl.node = nil // killed by the soak, not exited on its own (watchExit)
			sl.mu.Unlock()
			if nd != nil {
				_ = nd.Kill()
			}
		}
	}()
	if o.upgradeFrom != "" {
		s.bucket = b
		if err := s.prepareUpgrade(ctx, dir, bin, head); err != nil {
			return sum, err
		}
	}
	if o.outage > 0 {
		s.probe = s.probeBucket(ctx, bucketName, direct, 3*time.Second)
		s.say("bucket probe: %.1f requests/s through the proxies (%d failed)%s", s.probe.rate(), s.probe.Errors, s.probe.Err)
	}
	for _, sl := range s.slots {
		if err := s.startNode(ctx, sl, fmt.Sprintf("n%d", sl.i)); err != nil {
			return sum, err
		}
	}

	// The actors and their behaviours.
	kinds := []string{"rearm", "rearm", "rearm", "oneshot", "failing", "clearing", "deleted"}
	for i := 0; i < o.actors; i++ {
		a := &actor{id: abi.ActorID{Tenant: "soak", Class: "soak", Name: fmt.Sprintf("a%05d", i)}, expect: -1}
		a.plan = plan{Name: a.id.String(), Kind: kinds[i%len(kinds)]}
		if a.plan.Kind != "oneshot" {
			a.plan.Interval = (o.minInt + time.Duration(s.intn(int(o.maxInt-o.minInt)+1))).Milliseconds()
		}
		if a.plan.Kind == "failing" {
			a.plan.Fails = 1 + s.intn(3)
		}
		s.actors = append(s.actors, a)
		s.byName[a.id.String()] = a
	}
	s.say("%d nodes up; arming %d actors (%s)", o.nodes, o.actors, mix(s.actors))
	armStart := time.Now()
	if err := s.armAll(ctx); err != nil {
		return sum, err
	}
	// The faults start when the first alarms fall due (each actor is armed
	// -min-interval or more ahead), so that the firings per second during
	// the faults compare with the quiet phase's over a span in which
	// alarms were due throughout, not one that began with seconds of none.
	if wait := time.Until(armStart.Add(o.minInt)); wait > 0 {
		s.say("waiting %v for the first alarms to fall due", wait.Round(100*time.Millisecond))
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return sum, ctx.Err()
		}
	}

	// The storm.
	s.setFaults(true)
	stormStart := time.Now()
	for _, a := range s.actors {
		if a.plan.Kind == "deleted" {
			span := o.duration
			if span <= 0 {
				span = time.Duration(o.kills) * o.killEvery
			}
			a.deleteAt = stormStart.Add(time.Duration(s.float() * float64(span))).UnixMilli()
		}
	}
	if s.up == nil {
		s.say("faults on: %s; a kill or cut every %v", s.faultText(), o.killEvery)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); s.load(ctx, stop) }()
	go func() { defer wg.Done(); s.progress(stop) }()
	if s.up != nil {
		s.rollingUpgrade(ctx)
	} else {
		s.chaos(ctx, stormStart)
	}
	if err := s.calm(ctx); err != nil {
		close(stop)
		wg.Wait()
		return sum, err
	}
	for _, sl := range s.slots {
		sl.proxy.WaitLate()
	}
	faultsOff := time.Now()
	settle := o.leaseTTL + o.grace + 2*o.sweep
	quietAt := faultsOff.Add(settle)
	s.say("faults off, every node up; %d kills (%d under the same name), %d cuts; quiet from +%v, checking after %v more",
		s.kills.Load(), s.same.Load(), s.cuts.Load(), settle, o.quiet)
	time.Sleep(settle + o.quiet)
	close(stop)
	wg.Wait()
	if o.tty {
		fmt.Fprintln(o.out)
	}

	// The check.
	bd := bounds{
		Alarm:     (2*o.leaseTTL + o.grace + 2*o.sweep + o.slack).Milliseconds(),
		RetryBase: o.retryBase, RetryMax: o.retryMax,
		Quiet: quietAt.UnixMilli(), DuringFaults: o.boundInFaults,
		FaultAlarm: (4*(o.leaseTTL+o.grace) + 2*o.sweep + o.slack).Milliseconds(),
		Stale:      (2*(o.leaseTTL+o.grace) + 2*o.sweep + o.leaseTTL + o.slack).Milliseconds(),
		Margin:     (o.leaseTTL + o.grace).Milliseconds(),
	}
	if ou := s.outageRep; ou != nil {
		bd.OutageStart, bd.OutageEnd = ou.StartMs, ou.EndMs
		bd.OutageAlarm = (o.leaseTTL + o.grace + 2*o.sweep + o.slack).Milliseconds()
		bd.OutageBacklog = ou.backlogMs()
	} else if s.writeOutTo != 0 {
		// Alarms the write outage held up are bounded from its end, each
		// attempt as during the faults (kills and faults went on).
		bd.OutageStart, bd.OutageEnd, bd.OutageAlarm = s.writeOutFrom, s.writeOutTo, bd.FaultAlarm
	}
	bd.End = time.Now().UnixMilli()
	s.say("reading every ledger")
	s.mu.Lock()
	sum.Logged, sum.FailRuns = s.fires, s.fails
	ev := evidence{Kills: append([]kill(nil), s.killLog...), Cuts: append([]cut(nil), s.cutLog...), Lapses: append([]cut(nil), s.lapses...)}
	sum.Lapses = len(s.lapses)
	s.mu.Unlock()
	s.faultMu.Lock()
	ev.Faults = append([]fault(nil), s.faultLog...)
	s.faultMu.Unlock()
	if ou := s.outageRep; ou != nil {
		ev.Cuts = append(ev.Cuts, cut{From: ou.StartMs, To: ou.EndMs})
	} else if from, to := bd.OutageStart, bd.OutageEnd; to != 0 {
		// Every node's uploads failed through the write outage, as
		// through a cut.
		ev.Cuts = append(ev.Cuts, cut{From: from, To: to})
	}
	bd.Failures, bd.Lease = &ev, o.leaseTTL.Milliseconds()
	hist, err := s.readAll(ctx)
	if err != nil {
		return sum, err
	}
	s.say("the index doctor")
	rep, missing, overdueExtra, err := s.verify(ctx, b, bd)
	if err != nil {
		return sum, err
	}
	sum.Report = rep
	sum.Missing = len(missing)
	// A key both an object and a folder: on MinIO the keys under it are
	// hidden from every sweep.
	sum.Violations += len(rep.Nested)
	for _, xs := range overdueExtra {
		sum.OverdueExtra += len(xs)
	}
	sum.Bound = bd.Alarm
	sum.DupCauses = map[string]int{}
	sum.FaultRequests = map[string]*requestCount{}
	sum.FaultMs, sum.QuietMs = faultsOff.UnixMilli()-stormStart.UnixMilli(), bd.End-bd.Quiet
	dueFrom := max(stormStart.UnixMilli(), armStart.Add(o.minInt).UnixMilli())
	sum.DueFromMs, sum.DueMs = dueFrom-stormStart.UnixMilli(), faultsOff.UnixMilli()-dueFrom
	// The outage and the recovery after it (faults and kills paused) are
	// not the faults' phase: their figures are the outage's own.
	inOutage := func(int64) bool { return false }
	if ou := s.outageRep; ou != nil {
		sum.Outage = ou
		sum.OutageRequests = map[string]*requestCount{}
		sum.FaultMs -= ou.ResumedMs - ou.PausedMs
		sum.DueMs -= max(0, min(ou.ResumedMs, faultsOff.UnixMilli())-max(ou.PausedMs, dueFrom))
		inOutage = func(t int64) bool { return t >= ou.PausedMs && t < ou.ResumedMs }
	}
	var bad []string
	var windows [][2]int64
	var swapLate, quietLate []int64
	if s.up != nil {
		s.mu.Lock()
		windows = sigtermWindows(s.upgradeLog)
		s.mu.Unlock()
	}
	for i, h := range hist {
		v := check(h, bd)
		if s.up != nil && h.Plan.Fails == 0 {
			for j, at := range v.FiredAt {
				due := at - v.Fired[j]
				if due >= bd.Quiet {
					quietLate = append(quietLate, v.Fired[j])
				}
				for _, w := range windows {
					if due >= w[0] && due < w[1] {
						swapLate = append(swapLate, v.Fired[j])
					}
				}
			}
		}
		sum.Runs += v.Runs
		sum.RunDups += len(v.Dups)
		sum.Unseen += v.Unseen
		for c, n := range v.DupCauses {
			sum.DupCauses[c] += n
		}
		sum.Unexplained = append(sum.Unexplained, v.Unexplained...)
		for _, d := range v.Dups {
			if d.First.At >= bd.Quiet {
				sum.QuietDups++
			}
		}
		sum.Lateness = append(sum.Lateness, v.Fired...)
		sum.AfterOutage = append(sum.AfterOutage, v.AfterOutage...)
		sum.LateAfterOutage += v.LateAfterOutage
		for j, at := range v.FiredAt {
			switch {
			case inOutage(at):
			case at >= stormStart.UnixMilli() && at < faultsOff.UnixMilli():
				sum.FaultFirings++
				sum.FaultLateness = append(sum.FaultLateness, v.Fired[j])
				if at >= dueFrom {
					sum.DueFirings++
				}
			case at >= bd.Quiet && at <= bd.End:
				sum.QuietFirings++
			}
		}
		for _, o := range h.Ops {
			if o.Sent < stormStart.UnixMilli() || o.Sent >= faultsOff.UnixMilli() {
				continue
			}
			kind := o.Event
			if kind == "" {
				kind = o.Kind
			}
			counts := sum.FaultRequests
			if ou := sum.Outage; ou != nil && o.Sent >= ou.StartMs && o.Sent < ou.EndMs {
				counts = sum.OutageRequests
			} else if inOutage(o.Sent) {
				continue
			}
			c := counts[kind]
			if c == nil {
				c = &requestCount{}
				counts[kind] = c
			}
			c.Sent++
			if o.Tries > 1 {
				c.Retried++
				c.Retries += o.Tries - 1
				if c.RetryCauses == nil {
					c.RetryCauses = map[string]int{}
				}
				for _, rc := range o.Retried {
					c.RetryCauses[rc]++
				}
			}
			if o.Replayed {
				c.Replayed++
			}
			if sum.Outage != nil {
				c.FirstMs = append(c.FirstMs, o.FirstMs)
			}
			if o.Err != "" {
				c.Failed++
				if c.Causes == nil {
					c.Causes = map[string]int{}
				}
				c.Causes[failureCause(o.Err)]++
				if o.RetryAfter != "" {
					c.RetryAfter++
				}
				if o.Status == 0 {
					c.NoReply++
				}
				if sum.Outage != nil {
					c.FailedMs = append(c.FailedMs, o.Done-o.Sent)
				}
			}
		}
		sum.Committed += len(v.Fired)
		sum.Duplicates += v.Duplicates
		sum.Uncommitted += v.Uncommitted
		sum.LedgerOnly += v.LedgerOnly
		sum.ExecLost += v.ExecLost
		sum.DupRows += v.DupRows
		sum.BeyondQuiet += v.BeyondQuietBound
		sum.Lost += v.Lost
		sum.Late += v.Late
		for _, m := range missing {
			if m.Actor == s.actors[i].id {
				v.fail("the index doctor: committed alarm at %s has no entry in the index (named %q)", ms(m.AlarmMs), m.Named)
			}
		}
		for _, x := range overdueExtra[s.actors[i].id] {
			// A stale entry of an actor due again within the retry
			// horizon, too, wherever it is held: the holder removes it
			// (alarms/stale.go), forwarded by a walker if it walks no
			// tenant of its own (docs/design.md#stale-forward).
			v.fail("the index still holds %s (%s, due %s), past the stale-entry bound at the end", x.Object, x.Reason, ms(x.DueMs))
		}
		if len(v.Violations) > 0 {
			sum.Violations += len(v.Violations)
			bad = append(bad, h.report(v))
		}
	}
	if s.up != nil {
		slices.Sort(quietLate)
		// A stopping node takes no alarm while it drains and releases
		// its actors, and hands them over once the others read its lease
		// gone: within a third of the lease period after its stop.
		var stop int64
		s.mu.Lock()
		for _, st := range s.upgradeLog {
			if !st.Kill {
				stop = max(stop, st.StopMs)
			}
		}
		s.mu.Unlock()
		sum.SwapOnTime.Bound = 1000 + stop + (o.leaseTTL / 3).Milliseconds()
		if n := len(quietLate); n > 0 {
			sum.SwapOnTime.Bound += quietLate[(n-1)*99/100]
		}
		slices.Sort(swapLate)
		sum.SwapOnTime.Due = len(swapLate)
		if n := len(swapLate); n > 0 {
			sum.SwapOnTime.P99 = swapLate[(n-1)*99/100]
		}
		for _, l := range swapLate {
			if l <= sum.SwapOnTime.Bound {
				sum.SwapOnTime.OnTime++
			}
		}
	}
	sort.Slice(sum.Lateness, func(i, j int) bool { return sum.Lateness[i] < sum.Lateness[j] })
	sort.Slice(sum.FaultLateness, func(i, j int) bool { return sum.FaultLateness[i] < sum.FaultLateness[j] })
	slices.Sort(sum.AfterOutage)
	for _, c := range sum.OutageRequests {
		slices.Sort(c.FailedMs)
		slices.Sort(c.FirstMs)
	}
	sum.Kills, sum.SameName, sum.Cuts = int(s.kills.Load()), int(s.same.Load()), int(s.cuts.Load())
	sum.FailedStarts = int(s.failedStarts.Load())
	sum.SelfExits = int(s.selfExits.Load())
	sum.Violations += sum.SelfExits
	sum.ServerErrors = int(s.serverErrors.Load())
	sum.Replays, sum.ReplayBad = int(s.replays.Load()), int(s.replayBad.Load())
	if s.up != nil {
		sum.Violations += sum.ReplayBad
		// A rolling upgrade answers no request with an error it does not
		// call temporary, and each swap starts its node.
		sum.Violations += sum.ServerErrors
		s.mu.Lock()
		sum.Upgrade = append([]upgradeStart(nil), s.upgradeLog...)
		s.mu.Unlock()
		for _, st := range sum.Upgrade {
			if st.Err != "" {
				sum.Violations++
			}
		}
	}
	s.mu.Lock()
	sum.WriteOutFrom, sum.WriteOutTo = s.writeOutFrom, s.writeOutTo
	s.mu.Unlock()
	s.mu.Lock()
	sum.Dropped = s.dropped
	s.mu.Unlock()
	sum.Requests, sum.Acked, sum.Failed, sum.Retries = int(s.sent.Load()), int(s.acked.Load()), int(s.failed.Load()), int(s.retries.Load())
	sum.Injected = map[string]int{}
	for _, sl := range s.slots {
		for k, n := range sl.proxy.Injected() {
			sum.Injected[k] += n
		}
		sum.S3Requests += sl.proxy.Count("")
	}
	for _, r := range bad {
		fmt.Fprint(o.out, "\n", r)
	}
	s.table(sum, bd)
	return sum, nil
}

// startNode starts a node in the slot under name (its -node-id too),
// retrying while the start fails (a name whose earlier lease has not yet
// expired, a bucket that takes no writes), for at most startFor: then it
// says so and gives up, the slot staying down until the next start (a
// kill finding too few nodes up, or the calm before the quiet phase).
func (s *soak) startNode(ctx context.Context, sl *slot, name string) error {
	sl.mu.Lock()
	sl.starting = true
	sl.mu.Unlock()
	defer func() {
		sl.mu.Lock()
		sl.starting = false
		sl.mu.Unlock()
	}()
	var err error
	deadline := time.Now().Add(s.startFor())
	for try := 1; ; try++ {
		cfg := s.cfg
		cfg.S3.Endpoint = sl.proxy.URL
		sl.mu.Lock()
		if sl.bin != "" {
			cfg.Binary = sl.bin
		}
		sl.mu.Unlock()
		var nd *clusterproc.Node
		nd, err = clusterproc.StartNode(ctx, cfg, name, "-node-id", name)
		if err == nil {
			sl.mu.Lock()
			sl.node, sl.name = nd, name
			sl.mu.Unlock()
			go s.watchExit(ctx, sl, nd, name)
			if try > 1 {
				s.say("node %s started after %d tries", name, try)
			}
			return nil
		}
		if try == 1 {
			s.say("node %s cannot start yet (%s); trying again for up to %v", name, shortErr(err), s.startFor())
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(s.o.leaseTTL)
	}
	sl.mu.Lock()
	sl.name = name
	sl.mu.Unlock()
	s.failedStarts.Add(1)
	return fmt.Errorf("node %s would not start in %v: %w", name, s.startFor(), err)
}

// watchExit waits for nd to exit. A node the soak did not kill or stop
// (the slot still holds it) exited on its own: a lost lease or a crash, a
// violation. It is restarted under its name, as a supervisor would.
func (s *soak) watchExit(ctx context.Context, sl *slot, nd *clusterproc.Node, name string) {
	<-nd.Exited()
	sl.mu.Lock()
	own := sl.node == nd
	if own {
		sl.node = nil
	}
	sl.mu.Unlock()
	if !own || ctx.Err() != nil {
		return
	}
	s.selfExits.Add(1)
	err := nd.Stop() // its exit status, at once
	s.say("node %s exited on its own (%v); its log ends:\n%s", name, err, clusterproc.Tail(nd.LogPath, 5))
	time.Sleep(s.o.leaseTTL)
	if err := s.startNode(ctx, sl, name); err != nil {
		s.say("%v", err)
	}
}

// startFor is how long startNode tries: long enough for a lease of the
// same name to expire, a write outage to end, or a restart of the bucket.
func (s *soak) startFor() time.Duration {
	return max(90*time.Second, 10*(s.o.leaseTTL+s.o.grace), s.o.writeOutage+30*time.Second)
}

// calm waits for the restarts under way, turns the faults off, ends every
// cut and brings every node up; it returns the first node that would not
// start (the others are still brought up).
func (s *soak) calm(ctx context.Context) error {
	s.restarts.Wait()
	s.setFaults(false)
	s.endWriteOutage()
	var first error
	up := 0
	for _, sl := range s.slots {
		sl.mu.Lock()
		if sl.partitioned {
			s.heal(sl)
		}
		sl.mu.Unlock()
		if err := s.ensureUp(ctx, sl); err != nil {
			s.say("%v; the run goes on without it", err)
			if first == nil {
				first = err
			}
			continue
		}
		up++
	}
	if up == 0 {
		return fmt.Errorf("no node would start: %w", first)
	}
	return nil
}

func (s *soak) ensureUp(ctx context.Context, sl *slot) error {
	sl.mu.Lock()
	up := sl.node != nil
	name := sl.name
	sl.mu.Unlock()
	if up {
		return nil
	}
	return s.startNode(ctx, sl, name)
}

// liveURL is a random node that runs and is not cut off ("" if none),
// other than the node named not when there is another.
func (s *soak) liveURL(not string) (string, string) {
	var urls, names []string
	for _, sl := range s.slots {
		sl.mu.Lock()
		if sl.node != nil && !sl.partitioned {
			urls, names = append(urls, sl.node.URL), append(names, sl.name)
		}
		sl.mu.Unlock()
	}
	if i := slices.Index(names, not); i >= 0 && len(names) > 1 {
		urls, names = slices.Delete(urls, i, i+1), slices.Delete(names, i, i+1)
	}
	if len(urls) == 0 {
		return "", ""
	}
	i := s.intn(len(urls))
	return urls[i], names[i]
}

func (s *soak) setFaults(on bool) {
	for _, sl := range s.slots {
		if !on {
			sl.proxy.SetFaults(faultproxy.Faults{})
			continue
		}
		f := faultproxy.Faults{Fail: map[faultproxy.FailMode]float64{}, Latency: s.o.latency, MaxLatency: s.o.maxLatency}
		for m, r := range s.o.faults {
			f.Fail[m] = *r
		}
		sl.proxy.SetFaults(f)
	}
}

func (s *soak) faultText() string {
	var parts []string
	for _, m := range faultproxy.Modes {
		parts = append(parts, fmt.Sprintf("%s %.1f%%", m, 100**s.o.faults[m]))
	}
	parts = append(parts, fmt.Sprintf("latency %.0f%% up to %v", 100*s.o.latency, s.o.maxLatency))
	return strings.Join(parts, ", ")
}

func mix(as []*actor) string {
	n := map[string]int{}
	for _, a := range as {
		n[a.plan.Kind]++
	}
	return fmt.Sprintf("%d re-arming, %d one-shot, %d failing then succeeding, %d clearing, %d to be deleted",
		n["rearm"], n["oneshot"], n["failing"], n["clearing"], n["deleted"])
}

// request encodes a soak actor request.
func request(opcode, at, id, interval int64, fails int) []byte {
	b := make([]byte, 40)
	for i, v := range []int64{opcode, at, id, interval, int64(fails)} {
		binary.LittleEndian.PutUint64(b[8*i:], uint64(v))
	}
	return b
}

// The kinds of a request event (the API's ?kind=), as a history records
// them.
const (
	kindExec        = "exec"         // committed, answered, then replicated
	kindExecDurable = "exec-durable" // replicated before the answer
)

// send sends one request to the actor (its lock held) and records it. A
// request event goes under an idempotency key, the run's seed and the
// request's id; one whose outcome is unknown (no answer: the node was
// killed or the connection cut; a 503, with its Retry-After: an upload that
// failed, a failover that did not end in the node's wait) is sent again,
// to another live node after no answer, for up to -retry-for from the
// first try. A delete is idempotent as it is, and is retried alike.
func (s *soak) send(ctx context.Context, a *actor, kind, event string, at int64) op {
	o := op{Kind: kind, Event: event, ID: s.reqID.Add(1), At: at, Sent: time.Now().UnixMilli()}
	var body []byte
	switch kind {
	case "arm":
		body = request(1, at, o.ID, a.plan.Interval, a.plan.Fails)
	case "clear":
		body = request(2, 0, o.ID, 0, 0)
	case "note":
		body = request(3, 0, o.ID, 0, 0)
	}
	key := fmt.Sprintf("soak-%d-%d", s.o.seed, o.ID)
	give := time.Now().Add(s.o.retryFor)
	wait := 200 * time.Millisecond // after no answer, doubling to 2 s
	var err error
	var reply []byte            // the answer's body
	var last string             // the node tried last
	var problem *client.Problem // the last answer's, nil for none
	for {
		url, name := s.liveURL(last)
		o.Node = name
		o.Tries++
		replayed := false
		t0 := time.Now()
		if url == "" {
			err = errors.New("no live node")
		} else {
			rctx, cancel := context.WithTimeout(ctx, s.o.requestTimeout)
			c := clusterproc.ClientOf(url)
			exec := c.Exec
			if event == kindExecDurable {
				exec = c.ExecDurable
			}
			if kind == "delete" {
				err = c.Delete(rctx, a.id)
			} else {
				reply, err = exec(rctx, a.id, body, client.WithIdempotencyKey(key), client.Replayed(&replayed))
			}
			cancel()
		}
		if o.Tries == 1 {
			o.FirstMs = time.Since(t0).Milliseconds()
		}
		problem = nil
		if err == nil {
			o.Replayed = replayed
			break
		}
		errors.As(err, &problem)
		if problem != nil && problem.Status >= 500 && problem.Status != 503 {
			if s.serverErrors.Add(1) == 1 {
				s.serverSample.Store(fmt.Sprintf("(%s on %s: %s)", a.id, name, shortErr(err)))
			}
		}
		if problem != nil && !problem.Temporary() || url == "" && ctx.Err() != nil || time.Now().After(give) || s.o.retryFor <= 0 {
			break // refused (retrying cannot help), or out of time
		}
		o.Retried = append(o.Retried, failureCause(shortErr(err)))
		pause := wait
		if problem != nil {
			pause = max(problem.RetryAfter, 100*time.Millisecond) // a 503: the node says when
		} else {
			last = name // no answer: another node next
			wait = min(2*wait, 2*time.Second)
		}
		time.Sleep(max(0, min(pause, time.Until(give))))
	}
	o.Done = time.Now().UnixMilli()
	if err == nil && s.up != nil && event == kindExecDurable && kind != "delete" && s.intn(8) == 0 {
		s.sendAgain(ctx, a, o.Node, body, key, reply)
	}
	s.sent.Add(1)
	s.retries.Add(int64(o.Tries - 1))
	if err != nil {
		o.Err = shortErr(err)
		if problem != nil {
			o.Status = problem.Status
			if problem.RetryAfter > 0 {
				o.RetryAfter = strconv.Itoa(int(problem.RetryAfter / time.Second))
			}
		}
		s.failed.Add(1)
	} else {
		s.acked.Add(1)
		s.mu.Lock()
		defer s.mu.Unlock()
		switch kind {
		case "arm":
			a.expect = at
		case "clear":
			a.expect = -1
		case "delete":
			a.deleted = o.Done
			a.expect = -1
		}
	}
	a.ops = append(a.ops, o)
	return o
}

// shortErr is an error's text, cut at 200 bytes.
func shortErr(err error) string {
	e := err.Error()
	if len(e) > 200 {
		e = e[:200] + "..."
	}
	return e
}

// armAll arms every actor once, exec-durable, before the faults start.
func (s *soak) armAll(ctx context.Context) error {
	work := make(chan *actor)
	errc := make(chan error, 1)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for a := range work {
				a.mu.Lock()
				var o op
				// A node whose lease lapsed on a busy machine answers 503
				// until it renews: try the nodes for up to two minutes.
				for give := time.Now().Add(2 * time.Minute); time.Now().Before(give); {
					at := time.Now().Add(s.o.minInt + time.Duration(s.float()*float64(s.o.maxInt-s.o.minInt))).UnixMilli()
					if o = s.send(ctx, a, "arm", kindExecDurable, at); o.Err == "" {
						break
					}
					time.Sleep(500 * time.Millisecond)
				}
				a.mu.Unlock()
				if o.Err != "" {
					select {
					case errc <- fmt.Errorf("arming %s: %s", a.id, o.Err):
					default:
					}
				}
			}
		}()
	}
	for _, a := range s.actors {
		work <- a
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

// load sends client requests at the configured rate until stop.
func (s *soak) load(ctx context.Context, stop <-chan struct{}) {
	tick := time.NewTicker(time.Duration(float64(time.Second) / s.o.rate))
	defer tick.Stop()
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		a := s.actors[s.intn(len(s.actors))]
		if !a.mu.TryLock() {
			continue
		}
		if a.deleted > 0 {
			a.mu.Unlock()
			continue
		}
		select {
		case sem <- struct{}{}:
		default:
			a.mu.Unlock()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			defer a.mu.Unlock()
			s.step(ctx, a)
		}()
	}
}

// step sends the actor one request its behaviour calls for.
func (s *soak) step(ctx context.Context, a *actor) {
	event := kindExec
	if s.intn(2) == 0 {
		event = kindExecDurable
	}
	later := func() int64 {
		return time.Now().Add(s.o.minInt/2 + time.Duration(s.float()*float64(s.o.maxInt))).UnixMilli()
	}
	r := s.float()
	switch a.plan.Kind {
	case "deleted":
		if time.Now().UnixMilli() >= a.deleteAt {
			s.send(ctx, a, "delete", "", 0)
			return
		}
	case "oneshot":
		if r < 0.6 {
			s.send(ctx, a, "arm", event, later())
			return
		}
	case "clearing":
		if r < 0.35 {
			s.send(ctx, a, "clear", event, 0)
			return
		}
		if r < 0.7 {
			s.send(ctx, a, "arm", event, later())
			return
		}
	default:
		if r < 0.1 {
			s.send(ctx, a, "arm", event, later())
			return
		}
	}
	s.send(ctx, a, "note", event, 0)
}

// chaos kills and cuts nodes until the kill count or the duration is
// reached.
func (s *soak) chaos(ctx context.Context, from time.Time) {
	var paused time.Duration // the outage's, not counted in -duration
	lastKills, lastKill := s.kills.Load(), time.Now()
	for {
		half := s.o.kills > 0 && int(s.kills.Load()) >= s.o.kills/2 || s.o.kills <= 0 && time.Since(from)-paused >= s.o.duration/2
		if s.o.outage > 0 && s.outageRep == nil && half {
			t := time.Now()
			s.outageRun(ctx)
			paused += time.Since(t)
		}
		if s.o.writeOutage > 0 && half {
			s.startWriteOutage()
		}
		if s.o.kills > 0 && int(s.kills.Load()) >= s.o.kills {
			return
		}
		if k := s.kills.Load(); k != lastKills {
			lastKills, lastKill = k, time.Now()
		} else if stall := s.startFor() + 10*s.o.killEvery; s.o.kills > 0 && time.Since(lastKill) > stall {
			s.say("chaos ends after %d of %d kills: none possible for %v (fewer than two nodes up)", k, s.o.kills, stall.Round(time.Second))
			return
		}
		if s.o.duration > 0 && time.Since(from)-paused >= s.o.duration {
			return
		}
		time.Sleep(time.Duration((0.5 + s.chaosRng.Float64()) * float64(s.o.killEvery)))
		if s.chaosRng.Float64() < s.o.partition {
			s.cut()
			continue
		}
		s.killOne(ctx)
	}
}

// cut cuts a running node off from the bucket for partitionFor.
func (s *soak) cut() {
	sl := s.slots[s.chaosRng.IntN(len(s.slots))]
	sl.mu.Lock()
	if sl.partitioned || sl.node == nil {
		sl.mu.Unlock()
		return
	}
	sl.partitioned = true
	sl.proxy.SetPartitioned(true)
	name := sl.name
	s.mu.Lock()
	sl.cutAt = len(s.cutLog)
	s.cutLog = append(s.cutLog, cut{Node: name, From: time.Now().UnixMilli(), To: -1})
	s.mu.Unlock()
	sl.mu.Unlock()
	s.cuts.Add(1)
	s.say("cut %s off from the bucket for %v", name, s.o.partitionFor)
	time.AfterFunc(s.o.partitionFor, func() {
		sl.mu.Lock()
		defer sl.mu.Unlock()
		if sl.partitioned {
			s.heal(sl)
		}
	})
}

// heal ends the slot's cut (sl.mu held).
func (s *soak) heal(sl *slot) {
	sl.partitioned = false
	sl.proxy.SetPartitioned(false)
	s.mu.Lock()
	s.cutLog[sl.cutAt].To = time.Now().UnixMilli()
	s.mu.Unlock()
}

// killOne SIGKILLs a random node, while another runs, and starts one in
// its place, under its old name or a new one, in the background (a start
// under the old name waits for that name's lease to expire).
func (s *soak) killOne(ctx context.Context) {
	var up []*slot
	for _, sl := range s.slots {
		sl.mu.Lock()
		if sl.node != nil {
			up = append(up, sl)
		}
		sl.mu.Unlock()
	}
	if len(up) < 2 {
		// Nodes that would not start (a bucket that takes no writes)
		// are started again, in the background, each once at a time.
		for _, sl := range s.slots {
			sl.mu.Lock()
			down, name := sl.node == nil && !sl.starting, sl.name
			if down {
				sl.starting = true
			}
			sl.mu.Unlock()
			if !down {
				continue
			}
			s.restarts.Add(1)
			go func() {
				defer s.restarts.Done()
				if err := s.startNode(ctx, sl, name); err != nil {
					s.say("%v", err)
				}
			}()
		}
		return
	}
	sl := up[s.chaosRng.IntN(len(up))]
	sl.mu.Lock()
	nd, name := sl.node, sl.name
	sl.node = nil
	sl.mu.Unlock()
	_ = nd.Kill()
	s.mu.Lock()
	s.killLog = append(s.killLog, kill{Node: name, At: time.Now().UnixMilli()})
	s.mu.Unlock()
	n := s.kills.Add(1)
	pause := time.Duration(s.chaosRng.Float64() * float64(s.o.restartPause))
	next := name
	if s.chaosRng.Float64() < s.o.sameName {
		s.same.Add(1)
	} else {
		s.gen++
		next = fmt.Sprintf("n%d-%d", sl.i, s.gen)
	}
	s.restarts.Add(1)
	go func() {
		defer s.restarts.Done()
		time.Sleep(pause)
		if err := s.startNode(ctx, sl, next); err != nil {
			s.say("kill %d: %v", n, err)
			return
		}
		if s.o.tty {
			s.say("kill %d: %s SIGKILLed, restarted as %s", n, name, next)
		}
	}()
}

// startWriteOutage begins the write outage (-write-outage), once: every
// proxy answers every write 503 and lets the reads through, until
// endWriteOutage, which a timer calls when it has lasted -write-outage.
func (s *soak) startWriteOutage() {
	s.mu.Lock()
	if s.writeOutFrom != 0 {
		s.mu.Unlock()
		return
	}
	s.writeOutFrom = time.Now().UnixMilli()
	s.mu.Unlock()
	for _, sl := range s.slots {
		sl.proxy.SetOutage(faultproxy.OutageWrites)
	}
	s.say("write outage: every write fails (503) for %v, reads go on (a lost write quorum); kills and faults go on", s.o.writeOutage)
	time.AfterFunc(s.o.writeOutage, s.endWriteOutage)
}

// endWriteOutage ends the write outage if it is on.
func (s *soak) endWriteOutage() {
	s.mu.Lock()
	if s.writeOutFrom == 0 || s.writeOutTo != 0 {
		s.mu.Unlock()
		return
	}
	s.writeOutTo = time.Now().UnixMilli()
	s.mu.Unlock()
	for _, sl := range s.slots {
		sl.proxy.SetOutage(faultproxy.NoOutage)
	}
	s.say("write outage over: the bucket takes writes again")
}

// Write receives the nodes' log lines ("<node>: <json>").
func (s *soak) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lineBuf = append(s.lineBuf, p...)
	for {
		i := strings.IndexByte(string(s.lineBuf), '\n')
		if i < 0 {
			break
		}
		s.line(string(s.lineBuf[:i]))
		s.lineBuf = s.lineBuf[i+1:]
	}
	return len(p), nil
}

func (s *soak) line(l string) {
	node, rest, ok := strings.Cut(l, ": ")
	if ok && strings.Contains(rest, `"keepnode.lease.lease"`) {
		s.leaseLine(node, rest)
		return
	}
	if !ok || !strings.Contains(rest, "on-alarm failed") && !strings.Contains(rest, `"alarm fired"`) &&
		!strings.Contains(rest, `"guest stdout"`) && !strings.Contains(rest, "guest output dropped") {
		return
	}
	var v struct {
		Msg       string `json:"@message"`
		Level     string `json:"@level"`
		Time      string `json:"@timestamp"`
		Actor     string `json:"actor"`
		Scheduled int64  `json:"scheduled_ms"`
		Fired     int64  `json:"fired_ms"`
		Retry     int    `json:"retry_count"`
		Next      int64  `json:"next_ms"`
		Line      string `json:"line"`
		Stream    string `json:"stream"`
		Lines     int    `json:"lines"`
	}
	if json.Unmarshal([]byte(rest), &v) != nil {
		return
	}
	a := s.byName[v.Actor]
	if a == nil {
		return
	}
	switch v.Msg {
	case "guest stdout":
		// The soak actor's "run <scheduled> <retry>", said before the run
		// commits.
		var r guestRun
		t, err := time.Parse(time.RFC3339Nano, v.Time)
		if _, serr := fmt.Sscanf(v.Line, "run %d %d", &r.Scheduled, &r.Retry); err != nil || serr != nil {
			return
		}
		r.Node, r.At = node, t.UnixMilli()
		a.runs = append(a.runs, r)
		key := fmt.Sprintf("%s@%d/%d", v.Actor, r.Scheduled, r.Retry)
		if s.said[key]++; s.said[key] > 1 {
			s.saidDups++
		}
		return
	case "guest output dropped over the rate limit":
		if v.Stream == "stdout" {
			s.dropped += v.Lines
		}
		return
	}
	at := attempt{Node: node, Scheduled: v.Scheduled, At: v.Fired, Retry: v.Retry}
	switch v.Msg {
	case "alarm fired":
		s.fires++
		s.lates = append(s.lates, v.Fired-v.Scheduled)
		key := fmt.Sprintf("%s@%d", v.Actor, v.Scheduled)
		if s.runs[key]++; s.runs[key] > 1 {
			s.dups++
		}
		if a.plan.Interval > 0 {
			a.expect = v.Fired + a.plan.Interval
		} else if a.expect == v.Scheduled {
			a.expect = -1
		}
	case "on-alarm failed; retry committed":
		t, err := time.Parse(time.RFC3339Nano, v.Time)
		if err != nil || v.Level == "debug" {
			// At debug the engine logs each failure too, under the same
			// message; the plugin's warn line is the one counted.
			return
		}
		s.fails++
		at.Failed, at.At, at.Next = true, t.UnixMilli(), v.Next
		a.expect = v.Next
	default:
		return
	}
	a.attempts = append(a.attempts, at)
}

// leaseLine notes the lapses of a node's lease its log shows (s.mu held):
// from the end of the validity a failed renewal left (valid_until) to the
// renewal that began a new epoch. A lapse voids the node's holds, as a cut
// does, so it explains a duplicate run as a cut would (dupCause): the
// bucket answered its renewals too slowly, a failure though no fault was
// injected.
func (s *soak) leaseLine(node, rest string) {
	var v struct {
		Msg        string `json:"@message"`
		Time       string `json:"@timestamp"`
		ValidUntil string `json:"valid_until"`
	}
	if json.Unmarshal([]byte(rest), &v) != nil {
		return
	}
	switch v.Msg {
	case "lease renewal failed; valid until the last confirmed renewal's window ends":
		if t, err := time.Parse(time.RFC3339Nano, v.ValidUntil); err == nil {
			if s.validUntil == nil {
				s.validUntil = map[string]int64{}
			}
			s.validUntil[node] = t.UnixMilli()
		}
	case "lease valid again in a new epoch; earlier holds are void":
		t, err := time.Parse(time.RFC3339Nano, v.Time)
		if err != nil {
			return
		}
		from, ok := s.validUntil[node]
		if !ok || from > t.UnixMilli() {
			from = t.UnixMilli()
		}
		s.lapses = append(s.lapses, cut{Node: node, From: from, To: t.UnixMilli()})
	}
}

// progress prints the live line until stop.
func (s *soak) progress(stop <-chan struct{}) {
	every := time.Second
	if !s.o.tty {
		every = s.o.progressEvery
	}
	t := time.NewTicker(every)
	defer t.Stop()
	allowance := (3 * (2*s.o.leaseTTL + s.o.grace + 2*s.o.sweep + s.o.slack)).Milliseconds()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		now := time.Now().UnixMilli()
		s.mu.Lock()
		lates := append([]int64(nil), s.lates...)
		fires, dups := s.fires, s.saidDups
		overdue := 0
		for _, a := range s.actors {
			if a.expect >= 0 && a.deleted == 0 && now > a.expect+allowance {
				overdue++
			}
		}
		s.mu.Unlock()
		sort.Slice(lates, func(i, j int) bool { return lates[i] < lates[j] })
		live := 0
		for _, sl := range s.slots {
			sl.mu.Lock()
			if sl.node != nil && !sl.partitioned {
				live++
			}
			sl.mu.Unlock()
		}
		line := fmt.Sprintf("kills %d, cuts %d, nodes up %d/%d | requests %d (%d failed) | fired %d, late p50 %s p99 %s | duplicates %d | overdue %d",
			s.kills.Load(), s.cuts.Load(), live, len(s.slots), s.sent.Load(), s.failed.Load(), fires,
			pctText(lates, 50), pctText(lates, 99), dups, overdue)
		if s.o.tty {
			fmt.Fprintf(s.o.out, "\r\033[K%6.1fs  %s", time.Since(s.start).Seconds(), line)
		} else {
			fmt.Fprintf(s.o.out, "%6.1fs  %s\n", time.Since(s.start).Seconds(), line)
		}
	}
}

// readAll reads every actor's ledger (exec-durable "get") and, for the
// deleted ones, the alarm the cluster reports.
func (s *soak) readAll(ctx context.Context) ([]history, error) {
	out := make([]history, len(s.actors))
	errc := make(chan error, 1)
	work := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				h, err := s.readOne(ctx, s.actors[i])
				if err != nil {
					select {
					case errc <- err:
					default:
					}
				}
				out[i] = h
			}
		}()
	}
	for i := range s.actors {
		work <- i
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errc:
		return nil, err
	default:
	}
	// The runs the nodes logged up to each ledger's read (a line is
	// written after its run committed, so wait for the last ones).
	time.Sleep(time.Second)
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, a := range s.actors {
		fired := map[int64]bool{}
		for _, r := range out[i].Ledger {
			if r.Kind == recFire {
				fired[r.A] = true
			}
		}
		for _, at := range a.attempts {
			// A run's line can come after the read that found its commit.
			if at.At <= a.readAt || !at.Failed && fired[at.Scheduled] {
				out[i].Attempts = append(out[i].Attempts, at)
			}
		}
		for _, r := range a.runs {
			// A guest says its run before the run commits.
			if a.readAt == 0 || r.At <= a.readAt {
				out[i].Runs = append(out[i].Runs, r)
			}
		}
	}
	return out, nil
}

func (s *soak) readOne(ctx context.Context, a *actor) (history, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	// A delete whose answer was lost may have happened: reading the ledger
	// would create the actor again, so delete it until a delete is
	// acknowledged (deleting a deleted actor succeeds).
	tried := false
	for _, o := range a.ops {
		tried = tried || o.Kind == "delete"
	}
	for try := 0; tried && a.deleted == 0 && try < 30; try++ {
		if s.send(ctx, a, "delete", "", 0).Err != "" {
			time.Sleep(time.Second)
		}
	}
	h := history{Plan: a.plan, Ops: append([]op(nil), a.ops...), DeletedAt: a.deleted, PendingAtEnd: -1}
	var err error
	for try := 0; try < 30; try++ {
		url, _ := s.liveURL("")
		rctx, cancel := context.WithTimeout(ctx, s.o.requestTimeout)
		if a.deleted > 0 {
			var st client.AlarmState
			if st, err = clusterproc.ClientOf(url).Alarm(rctx, a.id); err == nil && st.AlarmMs != nil {
				h.PendingAtEnd = *st.AlarmMs
			}
		} else {
			var b []byte
			if b, err = clusterproc.ClientOf(url).ExecDurable(rctx, a.id, request(4, 0, 0, 0, 0)); err == nil {
				h.Ledger, err = parseLedger(b)
				h.HasLedger = true
			}
		}
		cancel()
		if err == nil {
			a.readAt = time.Now().UnixMilli()
			return h, nil
		}
		time.Sleep(time.Second)
	}
	return h, fmt.Errorf("reading %s at the end: %w", a.id, err)
}

// verify runs the index doctor beside the live cluster. An alarm that
// moves during a run shows up as missing (its new entry was not in the
// run's LIST), so a finding counts only if the next run finds the same:
// the same alarm without an entry, or the same entry no state names still
// there past the stale-entry bound (bounds.Stale; for an actor the bucket
// has no state of, three attempts' bound). It runs until two runs agree or verifyAttempts runs, and
// returns the last report with the findings both of the last two runs
// made.
func (s *soak) verify(ctx context.Context, b bucket.Bucket, bd bounds) (inspect.Report, []inspect.Missing, map[abi.ActorID][]inspect.Extra, error) {
	c := inspect.New(b, "cluster/")
	var (
		rep         inspect.Report
		prevMissing map[string]bool
		prevExtra   map[string]bool
		missing     []inspect.Missing
		overdue     map[abi.ActorID][]inspect.Extra
	)
	for try := 0; try < s.o.verifyAttempts; try++ {
		r, err := c.Verify(ctx, inspect.VerifyOptions{})
		if err != nil {
			return rep, nil, nil, fmt.Errorf("the index doctor: %w", err)
		}
		rep = r
		now := time.Now().UnixMilli()
		curMissing, curExtra := map[string]bool{}, map[string]bool{}
		missing, overdue = nil, map[abi.ActorID][]inspect.Extra{}
		s.oldestExtra = 0
		for _, m := range rep.Missing {
			k := fmt.Sprintf("%s@%d", m.Name, m.AlarmMs)
			curMissing[k] = true
			if prevMissing[k] {
				missing = append(missing, m)
			}
		}
		for _, x := range rep.Extra {
			if x.Reason == inspect.ReasonNoState {
				// Kept while the bucket has no state of the actor
				// (docs/design.md#bucket-empty), tried again every
				// retry_max.
				if x.DueMs >= now-bd.within(3) {
					continue
				}
			} else {
				s.oldestExtra = max(s.oldestExtra, now-max(x.DueMs+bd.Margin, bd.Quiet))
				if !bd.staleTooLong(x.DueMs, now) {
					continue
				}
			}
			curExtra[x.Object] = true
			if prevExtra[x.Object] {
				overdue[x.Actor] = append(overdue[x.Actor], x)
			}
		}
		n := 0
		for _, xs := range overdue {
			n += len(xs)
		}
		if len(missing) == len(curMissing) && n == len(curExtra) {
			break // nothing found, or the two runs agree
		}
		prevMissing, prevExtra = curMissing, curExtra
		time.Sleep(time.Second)
	}
	return rep, missing, overdue, nil
}

// table prints the closing summary.
func (s *soak) table(sum summary, bd bounds) {
	w := s.o.out
	o := s.o
	fmt.Fprintln(w)
	fmt.Fprintln(w, "== summary")
	fmt.Fprintf(w, "  cluster:               %d nodes, lease %v, grace %v, sweep %v, retries %v doubling to %v\n", o.nodes, o.leaseTTL, o.grace, o.sweep, o.retryBase, o.retryMax)
	fmt.Fprintf(w, "  actors:                %d (%s)\n", o.actors, mix(s.actors))
	fmt.Fprintf(w, "  chaos:                 %d SIGKILLs (%d restarted under the same name), %d cuts from the bucket of %v\n", sum.Kills, sum.SameName, sum.Cuts, o.partitionFor)
	fmt.Fprintf(w, "  lease lapses:          %d (the nodes' logs: a lease valid again in a new epoch, its holds void)\n", sum.Lapses)
	if sum.WriteOutFrom != 0 {
		fmt.Fprintf(w, "  write outage:          every write refused (503) for %v, reads on, kills and faults on; node starts that gave up: %d\n",
			time.Duration(sum.WriteOutTo-sum.WriteOutFrom)*time.Millisecond, sum.FailedStarts)
		held := "-"
		if n := len(sum.AfterOutage); n > 0 {
			held = fmt.Sprintf("p50 %s, p99 %s, max %s", pctText(sum.AfterOutage, 50), pctText(sum.AfterOutage, 99), msText(sum.AfterOutage[n-1]))
		}
		fmt.Fprintf(w, "                         %d firings it held up ran %s after writes returned; %d past their bound (%s per attempt, as during the faults)\n",
			len(sum.AfterOutage), held, sum.LateAfterOutage, msText(bd.OutageAlarm))
	} else if sum.FailedStarts > 0 {
		fmt.Fprintf(w, "  node starts that gave up: %d\n", sum.FailedStarts)
	}
	if sum.SelfExits > 0 {
		fmt.Fprintf(w, "  nodes that exited on their own: %d (neither killed nor stopped: a lost lease or a crash; violations)\n", sum.SelfExits)
	}
	fmt.Fprintf(w, "  client requests:       %d (%d acknowledged, %d failed or unknown after retries); %d tries sent again under their idempotency key, for up to %v\n",
		sum.Requests, sum.Acked, sum.Failed, sum.Retries, o.retryFor)
	var kinds []string
	for _, m := range faultproxy.Modes {
		kinds = append(kinds, fmt.Sprintf("%s %d", m, sum.Injected[m.String()]))
	}
	kinds = append(kinds, fmt.Sprintf("latency %d", sum.Injected["latency"]), fmt.Sprintf("refused while cut off %d", sum.Injected["partitioned"]))
	fmt.Fprintf(w, "  S3 requests:           %d through the proxies; faults injected: %s\n", sum.S3Requests, strings.Join(kinds, ", "))
	s.outageTable(w, sum, bd)
	if s.up != nil {
		sample, _ := s.serverSample.Load().(string)
		replaySample, _ := s.replaySample.Load().(string)
		upgradeTable(w, s.up, sum, sample, replaySample)
		fmt.Fprintf(w, "                         alarms due while nodes were swapped with SIGTERM (each phase until its SIGKILL): %d of %d fired within %s (the quiet phase's p99, the longest SIGTERM's stop, a third of the lease and 1s): %.1f%%; lateness p99 %s\n",
			sum.SwapOnTime.OnTime, sum.SwapOnTime.Due, msText(sum.SwapOnTime.Bound), 100*sum.SwapOnTime.ratio(), msText(sum.SwapOnTime.P99))
	} else if sum.ServerErrors > 0 {
		sample, _ := s.serverSample.Load().(string)
		fmt.Fprintf(w, "  5xx answers other than 503: %d %s\n", sum.ServerErrors, sample)
	}
	fmt.Fprintf(w, "  firings:               %d committed (in the actors' ledgers), %d logged by the nodes, %d failed runs retried\n", sum.Committed, sum.Logged, sum.FailRuns)
	if n := len(sum.Lateness); n > 0 {
		fmt.Fprintf(w, "  lateness:              p50 %s, p99 %s, max %s (committed firings, from each one's due or retry time)\n",
			pctText(sum.Lateness, 50), pctText(sum.Lateness, 99), msText(sum.Lateness[n-1]))
	}
	held := "not held during the faults (-bound-during-faults=false)"
	if bd.DuringFaults {
		held = fmt.Sprintf("during the faults %s per attempt (4 x (lease + grace) + 2 x sweep + slack: an entry anyone's, taken by a node that may have just restarted), held too", msText(bd.FaultAlarm))
	}
	fmt.Fprintf(w, "  bound:                 %s per attempt (2 x lease + grace + 2 x sweep + slack %v), plus the committed backoff, from the quiet phase on;\n"+
		"                         %s; %d firings during the faults came later than the quiet bound\n", msText(bd.Alarm), o.slack, held, sum.BeyondQuiet)
	faultRate, quietRate := perSecond(sum.FaultFirings, sum.FaultMs), perSecond(sum.QuietFirings, sum.QuietMs)
	ratio := 0.0
	if quietRate > 0 {
		ratio = 100 * faultRate / quietRate
	}
	phase := "the faults"
	if s.up != nil {
		phase = "the swaps"
	}
	fmt.Fprintf(w, "  firings per second:    %.1f during %s (%d in %s), %.1f in the quiet phase (%d in %s): %.0f%%\n",
		faultRate, phase, sum.FaultFirings, msText(sum.FaultMs), quietRate, sum.QuietFirings, msText(sum.QuietMs), ratio)
	if sum.DueFromMs > 0 && quietRate > 0 {
		dueRate := perSecond(sum.DueFirings, sum.DueMs)
		fmt.Fprintf(w, "                         from the first alarm due, %s into the faults: %.1f (%d in %s): %.0f%%\n",
			msText(sum.DueFromMs), dueRate, sum.DueFirings, msText(sum.DueMs), 100*dueRate/quietRate)
	}
	if n := len(sum.FaultLateness); n > 0 {
		fmt.Fprintf(w, "  lateness in %-11sp50 %s, p99 %s, max %s\n", strings.TrimPrefix(phase, "the ")+":", pctText(sum.FaultLateness, 50), pctText(sum.FaultLateness, 99), msText(sum.FaultLateness[n-1]))
	}
	for _, kind := range []string{kindExecDurable, kindExec, "delete"} {
		c := sum.FaultRequests[kind]
		if c == nil {
			continue
		}
		fmt.Fprintf(w, "  %-22s %d sent during the faults, %d failed (%.2f%%) in the end: %d with Retry-After, %d without a reply\n",
			kind+" requests:", c.Sent, c.Failed, 100*float64(c.Failed)/float64(max(c.Sent, 1)), c.RetryAfter, c.NoReply)
		printCauses(w, c.Causes, 4)
		fmt.Fprintf(w, "                         retried: %d requests (%.2f%%), %d tries again; %d answered from their key's record (an earlier try had run the event); tries sent again after:\n",
			c.Retried, 100*float64(c.Retried)/float64(max(c.Sent, 1)), c.Retries, c.Replayed)
		printCauses(w, c.RetryCauses, 4)
	}
	rate := 0.0
	if sum.Runs > 0 {
		rate = 100 * float64(sum.RunDups) / float64(sum.Runs)
	}
	fmt.Fprintf(w, "  on-alarm runs:         %d, as the guests said them on stdout before each run committed (failed runs and runs whose commit was lost included)\n", sum.Runs)
	fmt.Fprintf(w, "  duplicates:            %d runs of an attempt (scheduled time, retry count) that had already run: %.2f%% of runs; at least once allows them, each from a failure:\n", sum.RunDups, rate)
	for _, c := range []string{causeKill, causeCut, causeFault, causeLapse} {
		fmt.Fprintf(w, "                           %d %s\n", sum.DupCauses[c], c)
	}
	fmt.Fprintf(w, "                           %d explained by no failure (violations)\n", len(sum.Unexplained))
	for _, line := range sum.Unexplained {
		fmt.Fprintf(w, "                             %s\n", line)
	}
	fmt.Fprintf(w, "                         %d of them first ran after the faults stopped and the cluster settled\n", sum.QuietDups)
	fmt.Fprintf(w, "                         %d committed firings whose run no guest line showed (%d lines dropped over the guest output rate limit)\n", sum.Unseen, sum.Dropped)
	fmt.Fprintf(w, "                         replicated twice: %d successful runs the nodes logged as fired (after replicating) twice for the same time\n", sum.Duplicates)
	fmt.Fprintf(w, "                         %d runs logged whose commit was lost and whose alarm a later event replaced; %d committed runs no node logged\n", sum.Uncommitted, sum.LedgerOnly)
	fmt.Fprintf(w, "  exec acks lost:        %d (exec replies before it replicates; every acknowledged exec-durable request is checked)\n", sum.ExecLost)
	fmt.Fprintf(w, "  ledger rows twice:     %d requests whose record is in the ledger more than once (each sent under one idempotency key, however many tries; violations)\n", sum.DupRows)
	r := sum.Report
	fmt.Fprintf(w, "  index doctor:          %d actors, %d alarms, %d entries: %d named, %d covered, %d missing in two runs in a row, %d extra (%d of them past the stale-entry bound in two runs in a row: %s once a margin overdue or quiet, 2 x (lease + grace) + 2 x sweep + lease + slack); %d keys both an object and a folder\n",
		r.Actors, r.Alarms, r.Entries, r.Named, r.Covered, sum.Missing, len(r.Extra), sum.OverdueExtra, msText(bd.Stale), len(r.Nested))
	if s.oldestExtra > 0 {
		fmt.Fprintf(w, "                         the oldest entry no state names: %s past a margin overdue or quiet\n", msText(s.oldestExtra))
	}
	for _, n := range r.Nested {
		fmt.Fprintf(w, "                         VIOLATION: %s is an object and the folder of %s\n", n.Object, n.Under)
	}
	fmt.Fprintf(w, "  late past their bound: %d (fired, after the bound)\n", sum.Late)
	fmt.Fprintf(w, "  lost:                  %d (never fired)\n", sum.Lost)
	fmt.Fprintf(w, "  violations:            %d\n", sum.Violations)
}

// printCauses prints the most frequent causes, at most most of them.
func printCauses(w io.Writer, causes map[string]int, most int) {
	keys := slices.Collect(maps.Keys(causes))
	sort.Slice(keys, func(i, j int) bool {
		if causes[keys[i]] != causes[keys[j]] {
			return causes[keys[i]] > causes[keys[j]]
		}
		return keys[i] < keys[j]
	})
	for i, cause := range keys {
		if i == most {
			fmt.Fprintf(w, "                           ... %d more causes\n", len(keys)-i)
			break
		}
		fmt.Fprintf(w, "                           %d: %s\n", causes[cause], cause)
	}
}

func perSecond(n int, ms int64) float64 {
	if ms <= 0 {
		return 0
	}
	return float64(n) * 1000 / float64(ms)
}

func pctText(sorted []int64, p float64) string {
	if len(sorted) == 0 {
		return "-"
	}
	return msText(sorted[int(float64(len(sorted)-1)*p/100)])
}

func msText(v int64) string {
	if v < 1000 && v > -1000 {
		return fmt.Sprintf("%dms", v)
	}
	return fmt.Sprintf("%.1fs", float64(v)/1000)
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
