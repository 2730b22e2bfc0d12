package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/clock"
	"github.com/wasmkeep/alarms/format"
	"github.com/wasmkeep/alarms/internal/variant"
)

// Lease defaults; see "The margins" in the package documentation.
const (
	// DefaultPrefix is where the cluster keeps node leases and holds.
	DefaultPrefix = "cluster/"
	// DefaultTTL is how long a lease lasts after a renewal is sent.
	DefaultTTL = 10 * time.Second
	// DefaultMargin is how much earlier than TTL the holder stops trusting
	// its lease.
	DefaultMargin = 1 * time.Second
	// DefaultGrace is how much longer than TTL another node watches an
	// unchanged lease before it treats it as expired.
	DefaultGrace = 2 * time.Second
	// MaxClockDrift is the largest difference between the rate of a node's
	// clock and the rate of real time that the margins must absorb (1%).
	// Offsets between clocks do not matter.
	MaxClockDrift = 0.01
)

// ErrLeaseLost is wrapped by renewal errors once the node's lease object was
// replaced or removed by someone else: the node is no longer a member of the
// cluster and never valid again under this node ID.
var ErrLeaseLost = errors.New("node lease lost")

// LeaseConfig configures [StartLeases]. Durations left zero take their
// defaults; negative ones are refused.
type LeaseConfig struct {
	// Bucket is the shared bucket. Required.
	Bucket bucket.Bucket
	// Prefix is prepended to every key (default DefaultPrefix). The lease
	// lives at <Prefix>nodes/<NodeID>.
	Prefix string
	// NodeID names this node, without '/'. Required. It may be stable
	// (one per machine or pod): a process started under the name of one
	// that crashed takes it back once that one's lease has expired (see
	// [StartLeases]).
	NodeID string
	// Addr is where other nodes reach this one (for request routing).
	Addr string
	// Classes are the actor classes this node serves, written in its
	// lease so that the sweep can choose the walkers of each tenant among
	// the nodes that serve its classes (see NodeInfo.Classes). Nil: every
	// class.
	Classes []string
	// Build is the build this process runs, written in its lease so that
	// an operator sees which nodes run which build during a rolling
	// upgrade (keepctl nodes, ReadLease). The package reads no build
	// information of its own: the host supplies it (keepnode its module
	// version and commit). Zero: written as unknown.
	Build Build
	// TTL, Margin and Grace are the margins (default DefaultTTL,
	// DefaultMargin, DefaultGrace). See the package documentation.
	TTL, Margin, Grace time.Duration
	// Period is how often the lease is renewed (default TTL/3), and how
	// often other nodes' leases are read unless ObservePeriod says
	// otherwise. It must be shorter than TTL - Margin.
	Period time.Duration
	// ObservePeriod is how often the other nodes' leases are read. Zero
	// (the default) reads them every Period while fewer than LargeCluster
	// nodes are live, and every SlowObservePeriod (8 s at the default
	// TTL) from LargeCluster on, where the readings would be a large part
	// of the cluster's requests (docs/cost.md). After a reading that
	// failed, the next comes sooner: a Period later, or half of what the
	// reading period leaves of TTL + Grace if that is less (see
	// retryReading).
	// A longer one sends fewer requests and puts off, by as much, the
	// first sight of a dead node's last lease version, from which its
	// leaving the live nodes and the takeover of its holds are counted
	// (see "Reading leases less often" in the package documentation). It
	// must leave room for one failed reading before a live node could
	// drop out of the live nodes: ObservePeriod + Period < TTL + Grace.
	ObservePeriod time.Duration
	// Clock defaults to clock.System.
	Clock clock.Clock
	// Logger defaults to a null logger.
	Logger hclog.Logger
	// Manual starts no background work: the caller renews with RenewNow
	// and observes with RefreshNow (tests and simulators).
	Manual bool

	// variants turn safety rules off, for the lease simulation's unsafe
	// variants only (package internal/variant sets them; production
	// never does).
	variants variant.LeaseSet
}

func init() {
	variant.RegisterLeases(func(cfg any, s variant.LeaseSet) any {
		c := cfg.(LeaseConfig)
		c.variants = s
		return c
	})
}

// LargeCluster is the number of live nodes (this one included) from which
// a node whose LeaseConfig.ObservePeriod is zero reads the other nodes'
// leases every SlowObservePeriod instead of every renewal period. Below
// it the readings cost little (18 requests a minute per node at the
// default TTL), and reading every renewal period sees a dead node's last
// lease version soonest; from it on, the readings of 100 nodes would be
// 30 requests a second of an idle cluster's bill.
const LargeCluster = 16

// SlowObservePeriod is the reading period of a large cluster when
// ObservePeriod is zero: 4/5 of the TTL, or TTL + Grace less 6/5 of a
// renewal period if that is shorter (so that a failed reading is tried
// again with room to spare before a live node could drop out of the live
// nodes), and never shorter than Period. 8 s at the defaults.
func (c LeaseConfig) SlowObservePeriod() time.Duration {
	c = c.withDefaults()
	slow := min(c.TTL*4/5, c.TTL+c.Grace-c.Period*6/5)
	return max(slow, c.Period)
}

// readPeriod is the reading period with live nodes live: ObservePeriod
// if set, else Period below LargeCluster and SlowObservePeriod from it on.
func (c LeaseConfig) readPeriod(live int) time.Duration {
	switch {
	case c.ObservePeriod > 0:
		return c.ObservePeriod
	case live >= LargeCluster:
		return c.SlowObservePeriod()
	}
	return c.Period
}

func (c LeaseConfig) withDefaults() LeaseConfig {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.Margin == 0 {
		c.Margin = DefaultMargin
	}
	if c.Grace == 0 {
		c.Grace = DefaultGrace
	}
	if c.Period == 0 && c.TTL > 0 {
		c.Period = c.TTL / 3
	}
	if c.Clock == nil {
		c.Clock = clock.System{}
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	return c
}

// Validate reports whether the configuration, with its defaults filled in,
// is usable and safe: a bucket and a node ID are given, no duration is
// negative, TTL - Margin leaves room for a renewal period, and the margins
// absorb MaxClockDrift (see "The margins" in the package documentation).
func (c LeaseConfig) Validate() error {
	c = c.withDefaults()
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("lease config of node %q: %s", c.NodeID, fmt.Sprintf(format, args...))
	}
	switch {
	case c.Bucket == nil:
		return invalid("no bucket")
	case c.NodeID == "":
		return invalid("empty node ID")
	case strings.Contains(c.NodeID, "/"):
		return invalid("node ID contains '/'")
	case c.TTL < 0:
		return invalid("TTL %v is negative", c.TTL)
	case c.Margin < 0:
		return invalid("Margin %v is negative", c.Margin)
	case c.Grace < 0:
		return invalid("Grace %v is negative", c.Grace)
	case c.Period < 0:
		return invalid("Period %v is negative", c.Period)
	case c.Margin >= c.TTL:
		return invalid("Margin %v leaves nothing of TTL %v", c.Margin, c.TTL)
	case c.Period >= c.TTL-c.Margin:
		return invalid("Period %v is not shorter than TTL - Margin (%v): the lease would lapse between renewals", c.Period, c.TTL-c.Margin)
	case c.ObservePeriod < 0:
		return invalid("ObservePeriod %v is negative", c.ObservePeriod)
	case c.ObservePeriod+c.Period >= c.TTL+c.Grace:
		return invalid("ObservePeriod %v + Period %v is not shorter than TTL + Grace (%v): one failed reading of the leases would drop live nodes out of the live nodes", c.ObservePeriod, c.Period, c.TTL+c.Grace)
	case c.ObservePeriod == 0 && c.Period+c.Period >= c.TTL+c.Grace:
		return invalid("Period %v, at which a small cluster reads the leases, is not shorter than (TTL + Grace) / 2 (%v): one failed reading of the leases would drop live nodes out of the live nodes", c.Period, (c.TTL+c.Grace)/2)
	}
	taker := float64(c.TTL+c.Grace) * (1 - MaxClockDrift)
	holder := float64(c.TTL-c.Margin) * (1 + MaxClockDrift)
	if taker <= holder {
		return invalid("Margin %v + Grace %v too small for TTL %v: with %.0f%% clock drift a node could take holds while their holder still acts", c.Margin, c.Grace, c.TTL, MaxClockDrift*100)
	}
	return nil
}

// NodeInfo names a node and where to reach it.
type NodeInfo struct {
	ID   string
	Addr string
	// Classes are the classes the node serves, as its lease says; with
	// AllClasses, every class (its lease names none: nil Classes, or a
	// lease from before leases named classes).
	Classes    []string
	AllClasses bool
}

// Build names the build of a node's process, as its lease says it
// (LeaseConfig.Build). It is for operators: nothing in the cluster judges
// by it. The zero Build is unknown, as in a lease of a build from before
// leases named theirs.
type Build struct {
	// Version is the version of the build (keepnode: the module's, as
	// keepnode -version prints it).
	Version string
	// Revision is the commit it was built from; "" if it recorded none.
	Revision string
}

// LeaseInfo is what a node's lease says of the node, as ReadLease reads it.
type LeaseInfo struct {
	NodeInfo
	// Build is the build of the process that wrote the lease; zero in a
	// lease of a build from before leases named theirs.
	Build Build
	// ClusterVersion is the newest cluster version the node's build
	// supports (format.ClusterVersion); 0 in a lease of a build from
	// before cluster versions.
	ClusterVersion int
}

// ReadLease reads node nodeID's lease under prefix ("" means
// DefaultPrefix) with one GET, writing nothing and judging nothing (not
// whether the node is live: Leases does, from its own watch); ok is false
// when the node has no lease (it shut down cleanly, or never ran). A lease
// of a format newer than this build reads is an error wrapping a
// *format.NewerError. Unlike what Leases.Live tells of a node, which is
// what its lease said when last read, possibly by an earlier process of
// the node ID (see "Reading leases from a listing" in the package
// documentation), it is the lease as it is now: a node restarted on
// another build shows that build.
func ReadLease(ctx context.Context, b bucket.Bucket, prefix, nodeID string) (info LeaseInfo, ok bool, err error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if nodeID == "" || strings.Contains(nodeID, "/") {
		return LeaseInfo{}, false, fmt.Errorf("reading the lease of node %q: not a node ID", nodeID)
	}
	key := prefix + "nodes/" + nodeID
	body, _, err := b.Get(ctx, key)
	if errors.Is(err, bucket.ErrNotFound) {
		return LeaseInfo{}, false, nil
	}
	if err != nil {
		return LeaseInfo{}, false, fmt.Errorf("reading the lease of node %s: %w", nodeID, err)
	}
	if err := format.CheckJSON(format.Lease, body); err != nil {
		return LeaseInfo{}, false, fmt.Errorf("the lease of node %s (%s): %w", nodeID, key, err)
	}
	var rec leaseRecord
	if err := json.Unmarshal(body, &rec); err != nil {
		return LeaseInfo{}, false, fmt.Errorf("the lease of node %s (%s) is not a lease record: %w", nodeID, key, err)
	}
	if rec.NodeID != nodeID {
		return LeaseInfo{}, false, fmt.Errorf("the lease of node %s (%s) names node %q", nodeID, key, rec.NodeID)
	}
	return LeaseInfo{
		NodeInfo:       NodeInfo{ID: nodeID, Addr: rec.Addr, Classes: rec.Classes, AllClasses: rec.Classes == nil},
		Build:          Build{Version: rec.Version, Revision: rec.Revision},
		ClusterVersion: rec.ClusterVersion,
	}, true, nil
}

// leaseRecord is the body of a lease object.
type leaseRecord struct {
	// Format is the record's format version (format.LeaseVersion); none
	// (0) in leases written before versions: version 1. A reader checks
	// it before any other field (format.CheckJSON).
	Format    int    `json:"format"`
	NodeID    string `json:"node_id"`
	Addr      string `json:"addr"`
	TTLms     int64  `json:"ttl_ms"`
	RenewedMs int64  `json:"renewed_ms"`
	Seq       uint64 `json:"seq"`
	// Instance is random per Leases value: it tells this process's writes
	// from those of another process started with the same node ID by
	// mistake.
	Instance string `json:"instance"`
	// Classes are the classes the node serves; null: every class.
	Classes []string `json:"classes"`
	// Version and Revision are the writer's build (LeaseConfig.Build),
	// for operators; a lease of an earlier build has neither, which reads
	// as "" (unknown). Adding them took no new format version
	// (format.LeaseVersion stays 1): a reader of an earlier build ignores
	// them, as encoding/json ignores fields it does not know, and nothing
	// it judges changed. Only a change an earlier reader would misread
	// takes a new version.
	Version  string `json:"version,omitempty"`
	Revision string `json:"revision,omitempty"`
	// ClusterVersion is the newest cluster version the writer's build
	// supports (format.ClusterVersion), which keepctl cluster finalize
	// reads; a lease of a build from before cluster versions has none,
	// which reads as 0. Optional as Version is: the lease format stays 1.
	ClusterVersion int `json:"cluster_version,omitempty"`
}

// observed is what this node knows of another node's lease.
type observed struct {
	// etag names the version seen last, by a GET or a listing.
	etag string
	// read: seq, ttl, addr and instance were read (GET) from this very
	// version. A version known only from a listing keeps the fields of the
	// last version read, which judge nothing about its expiry (see
	// expiredLocked).
	read bool
	seq  uint64
	ttl  time.Duration
	addr string
	// firstSeen is when the first read showing this version was received;
	// confirmed is when the latest read showing it was sent.
	firstSeen, confirmed time.Time
	// presentTick orders the latest read that found the lease against
	// LISTs (see Leases.ticks).
	presentTick uint64
	// gone: the lease was seen and then found deleted. Only a lease of a
	// later process under the same ID (another instance) ends it.
	gone bool
	// instance is the lease's leaseRecord.Instance: which process of the
	// node ID wrote it.
	instance string
	// classes are the lease's leaseRecord.Classes (nil: every class), as
	// last read.
	classes []string
	// stood: the version was read (GET) because it stood unchanged for
	// half its TTL, so the node may be gone; the version that replaces it
	// is read too, since it may be a later process's under the same ID
	// (which may serve other classes).
	stood bool
	// member: a read found a lease naming this very node ID (a store may
	// list a temporary key of a PUT in progress, which names another): only
	// such a node's coming and going changes the live nodes.
	member bool
	// newer is the format version of the version read last when it is
	// one this build does not read (0 otherwise): only its ETag is
	// watched (see readLease).
	newer int
	// expiryNoted: this version was judged expired and its node sent to
	// Departures (noteExpiriesLocked), once.
	expiryNoted bool
}

// Leases is this node's lease in the bucket and its view of the other
// nodes' leases. Create it with StartLeases. It is safe for concurrent use.
type Leases struct {
	cfg LeaseConfig
	b   bucket.Bucket
	clk clock.Clock
	log hclog.Logger
	key string
	// instance is written in every lease body (leaseRecord.Instance).
	instance string

	renewMu   sync.Mutex // one renewal at a time
	observeMu sync.Mutex // one observation round at a time

	// ticks orders requests of concurrent observations: a LIST that does
	// not show a lease makes it a candidate for a read of its key only if
	// no read that found it completed after the LIST was sent.
	ticks atomic.Uint64
	// readPeriod is ReadPeriod, set by the reading loop after each round.
	readPeriod atomic.Int64

	mu         sync.Mutex
	etag       string    // ETag of our last write known to have landed
	seq        uint64    // highest sequence number sent
	confirmed  uint64    // sequence number of the write etag belongs to
	validUntil time.Time // zero: not valid; else the last confirmed renewal's send + TTL - Margin
	epoch      uint64    // grows with every new chain of renewals
	epochStart time.Time // when the renewal that began the current chain was sent
	lastSent   time.Time // when the last PUT was sent
	failing    error     // the latest renewal's error, nil once one succeeds
	failSince  time.Time // when the first of the renewals failing in a row was sent
	halted     bool      // Kill or Close: no more renewals
	// members grows when this node sees the set of live nodes change in a
	// way Live alone may not show: a node first seen, seen removed, back
	// after it had been out of Live, or another process under its ID.
	members uint64
	closed  bool          // Close: not valid
	lost    bool          // someone replaced or removed our lease object
	lostCh  chan struct{} // closed when lost is set
	others  map[string]*observed
	// departed receives the ID of each node whose lease this node saw
	// removed (Departures); a full buffer drops the newest.
	departed chan string
	// newerReads counts the reads of leases of a format newer than this
	// build reads (NewerFormatReads).
	newerReads atomic.Int64

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// StartLeases validates cfg, creates this node's lease object (a PUT with
// If-None-Match) and, unless cfg.Manual, starts renewing it every period
// and reading the other nodes' leases every ReadPeriod (the first round at
// once). Valid is true from the moment the creating PUT was sent, for
// TTL - Margin, if it was answered in time.
//
// If a lease of another process with the same node ID exists (the node
// crashed and was restarted under its name), StartLeases takes the name
// back only once that lease has expired by the rule every other node uses:
// it watches the lease and must see the same version for the TTL the lease
// names plus Grace, then replaces it with If-Match on that version. If the
// lease changes meanwhile, a live process has the name and StartLeases
// fails. Holds the earlier process took are then void: they name its
// instance, and every node takes them over (see Holds.Acquire).
func StartLeases(ctx context.Context, cfg LeaseConfig) (*Leases, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	l := &Leases{
		cfg:      cfg,
		b:        cfg.Bucket,
		clk:      cfg.Clock,
		log:      cfg.Logger.Named("lease").With("node", cfg.NodeID),
		key:      cfg.Prefix + "nodes/" + cfg.NodeID,
		others:   map[string]*observed{},
		lostCh:   make(chan struct{}),
		departed: make(chan string, 16),
	}
	l.readPeriod.Store(int64(cfg.readPeriod(1)))
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	l.instance = hex.EncodeToString(nonce[:])
	err := l.write(ctx, bucket.Cond{IfNoneMatch: true})
	if errors.Is(err, errNameTaken) {
		err = l.takeBack(ctx)
	}
	if err != nil {
		return nil, err
	}
	if !cfg.Manual {
		lctx, cancel := context.WithCancel(context.Background())
		l.cancel = cancel
		l.wg.Add(2)
		go l.renewLoop(lctx)
		go l.observeLoop(lctx)
	}
	return l, nil
}

// NodeID returns this node's ID.
func (l *Leases) NodeID() string { return l.cfg.NodeID }

// Instance returns this process's lease instance: random hex, new for each
// StartLeases, written in the lease and in every hold this process takes.
func (l *Leases) Instance() string { return l.instance }

// Valid reports whether this node may act on its holds now: the lease was
// renewed in time and has not lapsed, was not replaced, and the node was not
// closed.
func (l *Leases) Valid() bool {
	_, ok := l.validEpoch()
	return ok
}

// ValidUntil returns the instant (on this node's clock) at which the lease
// stops being valid unless renewed, or the zero time if it is not valid now.
func (l *Leases) ValidUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.validLocked() {
		return time.Time{}
	}
	return l.validUntil
}

// ValidAgainSince returns when the lease became valid again after its
// latest lapse (the send time of the renewal that began its current
// epoch, on this node's clock); the zero time if it has not lapsed since
// the process started, or is not valid now. After a lapse (a bucket
// outage, a partition), a node counts the overdue time of other nodes'
// alarms only from then (sweeper.PlanInput.Since): it could deliver none
// before, and the nodes cut off with it are back too.
func (l *Leases) ValidAgainSince() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.validLocked() || l.epoch <= 1 {
		return time.Time{}
	}
	return l.epochStart
}

// Lost is closed once this node's lease object was replaced or removed by
// someone else (a renewal then fails with ErrLeaseLost): the node is not
// valid again in this process, and renews no more. A process with the
// same node ID has taken the name, or an operator removed the object;
// keepnode exits with an error then, so that its supervisor restarts it
// and the new process takes the name back by the rule of StartLeases, or
// finds it in use. (A failed precondition on a version of our own is not
// a loss: a write of ours was still being applied.)
func (l *Leases) Lost() <-chan struct{} { return l.lostCh }

// RenewalsFailing returns the error of the latest renewal and when the
// first of the renewals failing in a row was sent (this node's clock), or
// a nil error when the latest renewal succeeded: how long the bucket has
// not taken this node's renewals, during an outage.
func (l *Leases) RenewalsFailing() (since time.Time, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failSince, l.failing
}

// validEpoch returns the current lease epoch and whether the lease is valid.
func (l *Leases) validEpoch() (uint64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.epoch, l.validLocked()
}

// validEpochSeq is validEpoch with the sequence number of this node's
// lease version that last landed, to its knowledge (Leases.confirmed),
// read under the same lock: an ownership record written in this epoch
// notes it (holdRecord.LeaseSeq).
func (l *Leases) validEpochSeq() (epoch, seq uint64, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.epoch, l.confirmed, l.validLocked()
}

func (l *Leases) validLocked() bool {
	return !l.closed && !l.lost && !l.validUntil.IsZero() && l.clk.Now().Before(l.validUntil)
}

// RenewNow renews the lease once, now. It returns the error of a failed
// renewal, an error wrapping ErrLeaseLost once the lease object was
// replaced or removed by someone else, or an error if the node was closed
// or killed. A renewal that fails, times out or whose answer is lost does
// not end validity: the node stays valid until the window of the last
// confirmed renewal ends (its send time + TTL - Margin), and a later
// renewal answered before then continues the chain, so no hold is lost
// (see "Renewals that fail" in the package documentation). The background
// loop calls it every period; tests with Manual call it directly.
func (l *Leases) RenewNow(ctx context.Context) error {
	return l.write(ctx, bucket.Cond{})
}

// write sends one version of the lease: the creating PUT (cond.IfNoneMatch)
// or a renewal (If-Match the last ETag known to have landed).
func (l *Leases) write(ctx context.Context, cond bucket.Cond) error {
	l.renewMu.Lock()
	defer l.renewMu.Unlock()
	for attempt := 0; ; attempt++ {
		retry, err := l.writeOnce(ctx, cond)
		if !retry || attempt > 0 {
			return err
		}
	}
}

// writeOnce sends one PUT. retry is true when the PUT failed only because an
// earlier write of ours landed late, so one more PUT on its ETag may succeed.
func (l *Leases) writeOnce(ctx context.Context, cond bucket.Cond) (retry bool, err error) {
	l.mu.Lock()
	switch {
	case l.lost:
		l.mu.Unlock()
		return false, fmt.Errorf("renewing the lease of node %s: %w", l.cfg.NodeID, ErrLeaseLost)
	case l.halted:
		l.mu.Unlock()
		return false, fmt.Errorf("renewing the lease of node %s: the node was stopped", l.cfg.NodeID)
	}
	if !cond.IfNoneMatch {
		cond.IfMatch = l.etag
	}
	l.seq++
	seq := l.seq
	prevEpoch := l.epoch
	prevUntil := l.validUntil
	if l.closed || l.lost || l.validUntil.IsZero() {
		prevUntil = time.Time{}
	}
	l.mu.Unlock()

	sent := l.clk.Now()
	l.mu.Lock()
	l.lastSent = sent
	l.mu.Unlock()
	body, _ := json.Marshal(leaseRecord{
		Format:    format.LeaseVersion,
		NodeID:    l.cfg.NodeID,
		Addr:      l.cfg.Addr,
		TTLms:     l.cfg.TTL.Milliseconds(),
		RenewedMs: sent.UnixMilli(),
		Seq:       seq,
		Instance:  l.instance,
		Classes:   l.cfg.Classes,
		Version:   l.cfg.Build.Version,
		Revision:  l.cfg.Build.Revision,

		ClusterVersion: format.ClusterVersion,
	})
	// An answer after the validity this renewal would extend cannot
	// continue the chain, and one after its own TTL - Margin cannot start
	// a new one: give up then (at least a period), so that the next
	// renewal goes out.
	timeout := l.cfg.TTL - l.cfg.Margin
	if !prevUntil.IsZero() {
		timeout = min(timeout, max(l.cfg.Period, prevUntil.Sub(sent)))
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	etag, err := l.b.Put(rctx, l.key, body, cond)
	if errors.Is(err, bucket.ErrPrecondition) {
		// A retried PUT whose first attempt landed, an earlier renewal of
		// ours landing late, or someone else's write: read back to know.
		gbody, getag, gerr := l.b.Get(rctx, l.key)
		var rec leaseRecord
		own := gerr == nil && format.CheckJSON(format.Lease, gbody) == nil && json.Unmarshal(gbody, &rec) == nil && rec.NodeID == l.cfg.NodeID && rec.Instance == l.instance
		l.mu.Lock()
		switch {
		case own && rec.Seq == seq:
			etag, err = getag, nil // this very PUT landed
			l.mu.Unlock()
		case own && rec.Seq > l.confirmed && rec.Seq < seq:
			// Validity stays where the last confirmed renewal put it:
			// this write's landing only restarts others' watch.
			l.etag, l.confirmed = getag, rec.Seq
			l.mu.Unlock()
			l.log.Warn("an earlier renewal landed late; renewing on top of it", "seq", rec.Seq)
			return true, fmt.Errorf("renewing the lease of node %s: an earlier renewal (seq %d) landed late: %w", l.cfg.NodeID, rec.Seq, err)
		case gerr != nil && !errors.Is(gerr, bucket.ErrNotFound):
			// Ambiguous: validity rides through on the last confirmed
			// renewal, as for any failed one.
			l.mu.Unlock()
			return false, fmt.Errorf("renewing the lease of node %s: precondition failed and reading it back failed (%v): %w", l.cfg.NodeID, gerr, err)
		case own && !cond.IfNoneMatch:
			// Our own version, one we know (or an older one): no one
			// else wrote the object. A write of ours still being applied
			// (one that timed out here, on a server that is slow) fails
			// the precondition before the read shows it; an
			// erasure-coded server does so. Ambiguous, as a failed
			// renewal: the next one renews on top of whatever landed.
			// (The ETag of the version we confirmed, as the server
			// gives it now, is the one to match.)
			if rec.Seq == l.confirmed {
				l.etag = getag
			}
			l.mu.Unlock()
			if !errors.Is(err, bucket.ErrNotFound) {
				err = fmt.Errorf("precondition failed on our own version (seq %d) of the object: a write of ours not yet applied: %w", rec.Seq, err)
				break
			}
			// The store's writes find no object where its reads find
			// our version: an erasure-coded MinIO whose write of ours
			// failed part way keeps the object so, for reads on some
			// drives and for writes on none, and every If-Match fails
			// from then on. Create it anew (If-None-Match, which one
			// write alone passes, as it makes the object whole): the
			// next version of the chain, from this renewal's send time
			// (package documentation, "Renewals that fail").
			l.log.Warn("the store reads our lease but finds no object to write; creating it anew", "seq", rec.Seq)
			if etag, err = l.b.Put(rctx, l.key, body, bucket.Cond{IfNoneMatch: true}); err != nil {
				err = fmt.Errorf("the store reads our version (seq %d) of the object but finds none to write, and creating it anew failed: %w", rec.Seq, err)
			}
		case cond.IfNoneMatch && gerr == nil:
			// Another process's lease under this node ID: takeBack
			// decides whether it is a crashed one's.
			l.mu.Unlock()
			return false, fmt.Errorf("creating the lease of node %s: another process's lease exists: %w (%w)", l.cfg.NodeID, errNameTaken, err)
		default:
			if !l.lost {
				close(l.lostCh)
			}
			l.lost = true
			l.validUntil = time.Time{}
			l.mu.Unlock()
			what := "replaced by another writer"
			if gerr != nil {
				what = "removed"
			}
			if cond.IfNoneMatch {
				l.log.Error("node ID already in use")
				return false, fmt.Errorf("creating the lease of node %s: the node ID is already in use: %w", l.cfg.NodeID, err)
			}
			l.log.Error("lease object "+what+"; this node stops", "key", l.key)
			return false, fmt.Errorf("renewing the lease of node %s: the lease object was %s: %w (%w)", l.cfg.NodeID, what, ErrLeaseLost, err)
		}
	}
	recv := l.clk.Now()

	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		if l.failing == nil {
			l.failSince = sent
		}
		l.failing = err
		// The PUT may have landed or may land later: either way it is a
		// new version that only restarts others' watch, and it extends
		// nothing here. Validity rides through on the last confirmed
		// renewal's window.
		l.log.Warn("lease renewal failed; valid until the last confirmed renewal's window ends", "error", err, "valid_until", prevUntil)
		return false, fmt.Errorf("renewing the lease of node %s: %w", l.cfg.NodeID, err)
	}
	l.etag, l.confirmed = etag, seq
	l.failing = nil
	until := sent.Add(l.cfg.TTL - l.cfg.Margin)
	switch {
	case l.closed || l.lost:
		// Close raced with this renewal; the lease stays not valid.
	case !prevUntil.IsZero() && recv.Before(prevUntil) && prevEpoch == l.epoch:
		l.validUntil = until // the chain continues
	case recv.Before(until):
		l.epoch++ // a new chain: holds of earlier epochs stay invalid
		l.epochStart = sent
		l.validUntil = until
		if prevEpoch != 0 {
			l.log.Info("lease valid again in a new epoch; earlier holds are void", "epoch", l.epoch)
			l.restartWatchesLocked(recv)
		}
	default:
		l.validUntil = time.Time{}
		l.log.Warn("lease renewal answered too late to extend validity", "took", recv.Sub(sent))
		return false, fmt.Errorf("renewing the lease of node %s: the renewal took %v, past its own validity", l.cfg.NodeID, recv.Sub(sent))
	}
	return false, nil
}

// errNameTaken: the creating PUT found another process's lease under this
// node ID.
var errNameTaken = errors.New("the node ID has a lease of another process")

// takeBack takes this node ID back from an earlier process whose lease is
// in the bucket (see StartLeases): it reads the lease every period until
// it has seen the same version for that lease's TTL + Grace (from
// receiving the first read to sending the last, as Expired judges), then
// replaces it, If-Match that version. A version that changes means a live
// process holds the name: an error, nothing written.
func (l *Leases) takeBack(ctx context.Context) error {
	var (
		first     leaseRecord
		firstETag string
		firstSeen time.Time
	)
	for round := 0; ; round++ {
		sent := l.clk.Now()
		body, etag, err := l.b.Get(ctx, l.key)
		recv := l.clk.Now()
		if errors.Is(err, bucket.ErrNotFound) {
			// Removed meanwhile (a clean shutdown): create it as usual.
			if err := l.write(ctx, bucket.Cond{IfNoneMatch: true}); err != nil {
				return fmt.Errorf("creating the lease of node %s after the earlier one was removed: %w", l.cfg.NodeID, err)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("node %s: reading the lease of an earlier process under this node ID: %w", l.cfg.NodeID, err)
		}
		ferr := format.CheckJSON(format.Lease, body)
		if newer, ok := format.As(ferr); ok {
			// A later build's process under this node ID (a rollback):
			// its TTL cannot be read, so nothing says when it expired.
			l.newerReads.Add(1)
			l.log.Error("the lease under this node ID is of a format newer than this build reads; not taking the node ID back",
				"format", newer.Version, "known", newer.Known)
			return fmt.Errorf("node %s: the lease of an earlier process under this node ID cannot be read, so it cannot be taken back: %w; start this node under another node ID, or once that process is gone for good remove %s", l.cfg.NodeID, ferr, l.key)
		}
		var rec leaseRecord
		if ferr != nil || json.Unmarshal(body, &rec) != nil {
			rec = leaseRecord{} // unreadable: the ETag alone tells versions apart
		}
		ttl := time.Duration(rec.TTLms) * time.Millisecond
		if ttl <= 0 {
			ttl = l.cfg.TTL
		}
		if round == 0 {
			first, firstETag, firstSeen = rec, etag, recv
			l.log.Warn("the node ID has the lease of an earlier process; taking it back once it has expired",
				"instance", rec.Instance, "addr", rec.Addr, "wait", ttl+l.cfg.Grace)
		} else if etag != firstETag || rec.Seq != first.Seq || rec.Instance != first.Instance {
			return fmt.Errorf("creating the lease of node %s: the node ID is in use by a live process (its lease, instance %s at %s, was renewed while this one waited for it to expire); stop that process or start this one under another node ID",
				l.cfg.NodeID, rec.Instance, rec.Addr)
		}
		if sent.Sub(firstSeen) >= ttl+l.cfg.Grace {
			l.mu.Lock()
			l.etag = firstETag
			l.mu.Unlock()
			if err := l.write(ctx, bucket.Cond{}); err != nil {
				return fmt.Errorf("taking back node ID %s: %w", l.cfg.NodeID, err)
			}
			l.log.Info("took the node ID back; the earlier process's holds are void", "earlier_instance", first.Instance)
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s: waiting for the lease of an earlier process to expire: %w", l.cfg.NodeID, ctx.Err())
		case <-l.clk.After(min(l.cfg.Period, firstSeen.Add(ttl+l.cfg.Grace).Sub(sent))):
		}
	}
}

// RefreshNow reads every node's lease once, updating Live, Expired and
// Addr: one LIST of <prefix>nodes/, whose ETags tell which leases were
// renewed since the last round, and a GET only of a lease whose contents
// are needed: one not seen before (or seen removed), and one whose version
// has stood unchanged for half its TTL, so that its own TTL judges its
// expiry (see "Reading leases from a listing" in the package
// documentation). An idle round of a healthy cluster is the LIST alone. On
// a bucket whose listings carry no ETags (see bucket.InfoLister) it GETs
// every other node's lease. The background loop calls it every
// ReadPeriod (sooner after a failed round: AfterReading); tests with
// Manual call it directly.
func (l *Leases) RefreshNow(ctx context.Context) error {
	l.observeMu.Lock()
	defer l.observeMu.Unlock()
	defer func() {
		l.mu.Lock()
		l.noteExpiriesLocked()
		l.mu.Unlock()
	}()
	prefix := l.cfg.Prefix + "nodes/"
	listTick := l.ticks.Add(1)
	sent := l.clk.Now()
	infos, err := bucket.ListInfo(ctx, l.b, prefix, "", 1<<20)
	if errors.Is(err, errors.ErrUnsupported) {
		return l.refreshByGets(ctx, prefix, listTick)
	}
	recv := l.clk.Now()
	if err != nil {
		return fmt.Errorf("node %s reading the node leases: %w", l.cfg.NodeID, err)
	}
	foundTick := l.ticks.Add(1)
	listed := map[string]bool{}
	var fetch []string
	l.mu.Lock()
	for _, info := range infos {
		id := strings.TrimPrefix(info.Key, prefix)
		if id == "" || strings.Contains(id, "/") || id == l.cfg.NodeID {
			continue
		}
		listed[id] = true
		if l.listedLocked(id, info.ETag, sent, recv, foundTick) {
			fetch = append(fetch, id)
		}
	}
	fetch = append(fetch, l.unlistedLocked(listed, listTick)...)
	l.mu.Unlock()
	var errs []error
	for _, id := range fetch {
		if _, err := l.readLease(ctx, id); err != nil && !errors.Is(err, format.ErrNewer) {
			errs = append(errs, err) // a newer format is no failed reading: readLease logged it
		}
	}
	return errors.Join(errs...)
}

// noteExpiriesLocked sends to Departures each node whose lease this node
// now judges expired by a read (expiredLocked) and had not before: a node
// that died or was cut off. It holds nothing it can still act on (its
// holds are void once its lease expired, and a take of one judges by this
// very expiry: expiredThrough), so its actors' alarms need not wait for
// the margin (docs/design.md#handover). Once per version seen.
func (l *Leases) noteExpiriesLocked() {
	ids := make([]string, 0, 1)
	for id, o := range l.others {
		if o.member && !o.gone && !o.expiryNoted && l.expiredLocked(o) {
			o.expiryNoted = true
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		l.log.Info("node lease expired", "other", id)
		select {
		case l.departed <- id:
		default: // one pending is enough to wake a reader; it reads Live
		}
	}
}

// listedLocked records that a listing sent at sent and received at recv
// showed node id's lease at version etag. It reports whether the lease
// must be read (GET): a node not seen before or seen removed (its address,
// instance and TTL are needed), or a version that has stood unchanged for
// half the TTL last read while its own contents are unknown.
func (l *Leases) listedLocked(id, etag string, sent, recv time.Time, tick uint64) (get bool) {
	o := l.others[id]
	if o == nil || o.gone {
		return true
	}
	if tick > o.presentTick {
		o.presentTick = tick
	}
	if o.etag != etag {
		// A new version: a renewal, or a later process's lease under the
		// same ID, which a GET tells apart when it matters (Acquire and
		// Lookup read the lease before judging a record's instance). A
		// version after one that stood half a TTL, or after the node had
		// dropped out of Live, is read: it may be a later process's, whose
		// classes the sweep needs (and a return is a change of the live
		// nodes).
		lapsed := recv.Sub(o.firstSeen) >= o.ttl+l.cfg.Grace
		if lapsed && o.member {
			l.members++
		}
		get = o.stood || lapsed
		o.etag, o.read, o.stood, o.expiryNoted = etag, false, false, false
		o.firstSeen, o.confirmed = recv, sent
		return get
	}
	if sent.After(o.confirmed) {
		o.confirmed = sent
	}
	// A lease of a newer format (o.newer) is not read again, neither on a
	// new version nor when one stands: it would judge nothing. Its process
	// writes no other format, and a process of another build under the
	// same ID replaces it only once it has stood for TTL + Grace (lapsed,
	// above: read then) or was removed (StartLeases).
	if !o.read && o.newer == 0 && o.confirmed.Sub(o.firstSeen) >= o.ttl/2 {
		o.stood = true
		return true
	}
	return false
}

// unlistedLocked returns the leases a LIST did not show, unless a read
// that found them completed after the LIST was sent (listTick): each is
// to be read by its key (readLease), which alone marks it removed, on a
// 404. A listing's word is not enough: an erasure-coded store (MinIO)
// may leave out of a LIST a key that is being overwritten, and a lease
// being renewed is exactly that; taking such a lease for removed would
// hand a live node's actors to others at once (docs/design.md#lists).
// A node that removed its lease costs one GET more, once.
func (l *Leases) unlistedLocked(listed map[string]bool, listTick uint64) (confirm []string) {
	for id, o := range l.others {
		if !listed[id] && !o.gone && o.presentTick < listTick {
			if l.cfg.variants.TrustListedAbsence {
				l.markGoneLocked(id, o)
				continue
			}
			confirm = append(confirm, id)
		}
	}
	sort.Strings(confirm)
	return confirm
}

// markGoneLocked marks o, node id's lease, removed: a read of its key
// found nothing.
func (l *Leases) markGoneLocked(id string, o *observed) {
	if o.gone {
		return
	}
	o.gone = true
	if o.member {
		l.members++
		select {
		case l.departed <- id:
		default: // one pending is enough to wake a reader; it reads Live
		}
	}
	l.log.Info("node lease removed", "other", id)
}

// Departures receives the ID of each node whose lease this node saw
// removed: a node that shut down cleanly after it released its holds (or
// one whose lease someone else removed, which then stops); and of each
// node whose lease it judged expired by a read (a node that died or was
// cut off from the bucket: its holds are void, and a take of one judges by
// that very expiry, reading no lease). Either way its actors are anyone's
// to take now, so a reader need not wait for the margin: the alarm sweep
// walks their alarms at once (docs/design.md#handover). A reader that
// falls behind misses names, not the news: the channel holds 16, and Live
// no longer lists the nodes gone.
func (l *Leases) Departures() <-chan string { return l.departed }

// refreshByGets is RefreshNow on a bucket whose listings carry no ETags:
// the LIST's keys, and a GET of each other node's lease.
func (l *Leases) refreshByGets(ctx context.Context, prefix string, listTick uint64) error {
	keys, err := l.b.List(ctx, prefix, "", 1<<20)
	if err != nil {
		return fmt.Errorf("node %s reading the node leases: %w", l.cfg.NodeID, err)
	}
	listed := map[string]bool{}
	var ids []string
	for _, k := range keys {
		id := strings.TrimPrefix(k, prefix)
		if id == "" || strings.Contains(id, "/") || id == l.cfg.NodeID {
			continue
		}
		listed[id] = true
		ids = append(ids, id)
	}
	l.mu.Lock()
	ids = append(ids, l.unlistedLocked(listed, listTick)...)
	l.mu.Unlock()
	var errs []error
	for _, id := range ids {
		if _, err := l.readLease(ctx, id); err != nil && !errors.Is(err, format.ErrNewer) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// readLease GETs another node's lease and records the observation. It
// reports whether that lease counts as expired afterwards. Only call it for
// a node ID learned from a LIST or a hold record read before: then a missing
// object means the node removed its lease on a clean shutdown.
func (l *Leases) readLease(ctx context.Context, id string) (expired bool, err error) {
	sent := l.clk.Now()
	body, etag, err := l.b.Get(ctx, l.cfg.Prefix+"nodes/"+id)
	recv := l.clk.Now()
	tick := l.ticks.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	o := l.others[id]
	if errors.Is(err, bucket.ErrNotFound) {
		if o == nil {
			// Never seen live (a key the store listed, gone by the GET):
			// no change of the live nodes.
			l.others[id] = &observed{gone: true}
			return true, nil
		}
		l.markGoneLocked(id, o)
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("node %s reading the lease of node %s: %w", l.cfg.NodeID, id, err)
	}
	if o == nil {
		o = &observed{}
		l.others[id] = o
	}
	ferr := format.CheckJSON(format.Lease, body)
	if newer, ok := format.As(ferr); ok {
		l.newerLocked(id, o, newer, etag, sent, recv, tick)
		return false, fmt.Errorf("node %s reading the lease of node %s: %w", l.cfg.NodeID, id, ferr)
	}
	var rec leaseRecord
	if ferr != nil || json.Unmarshal(body, &rec) != nil {
		rec = leaseRecord{} // unreadable: the ETag alone tells versions apart
	}
	if o.gone && (rec.Instance == "" || rec.Instance == o.instance) {
		return true, nil
	}
	// A lease seen gone and found again is a later process's under the
	// same node ID: a node of its own, watched from now on.
	if o.gone {
		*o = observed{}
		l.log.Info("node ID back with a new process", "other", id, "instance", rec.Instance)
	}
	member := rec.NodeID == id || rec.NodeID == "" // "": unreadable, judged by its ETag as before
	if member && (!o.member || rec.Instance != o.instance) {
		l.members++ // a node first seen, or another process under its ID
	}
	ttl := time.Duration(rec.TTLms) * time.Millisecond
	if ttl <= 0 {
		ttl = l.cfg.TTL
	}
	switch {
	case o.etag != etag || (o.read && (o.seq != rec.Seq || o.instance != rec.Instance)):
		*o = observed{etag: etag, read: true, seq: rec.Seq, ttl: ttl, addr: rec.Addr, instance: rec.Instance, classes: rec.Classes, member: member, firstSeen: recv, confirmed: sent}
	case !o.read:
		// The version a listing showed: its watch goes on from that
		// listing, now with its own TTL.
		o.read, o.seq, o.ttl, o.addr, o.instance, o.classes, o.member = true, rec.Seq, ttl, rec.Addr, rec.Instance, rec.Classes, member
		fallthrough
	default:
		if sent.After(o.confirmed) {
			o.confirmed = sent
		}
	}
	if tick > o.presentTick {
		o.presentTick = tick
	}
	return l.expiredLocked(o), nil
}

// newerLocked records a read of node id's lease (o) that found a format
// newer than this build reads: nothing in it is read, neither its TTL nor
// its address, instance or classes. Its ETag alone is watched (listings
// follow its versions, and one that replaces a version that stood TTL +
// Grace is read again: listedLocked), but it is never judged expired,
// since that takes the TTL it names (its holds are not taken over: a take
// refuses, retryably), and it is not among the live nodes (a node that
// leaves the others walks more of the index, never less:
// docs/design.md#walkers). A node that was live leaves the live nodes.
func (l *Leases) newerLocked(id string, o *observed, newer *format.NewerError, etag string, sent, recv time.Time, tick uint64) {
	if o.member && !o.gone {
		l.members++
	}
	seen := o.etag == etag && !o.read && !o.gone && o.newer == newer.Version
	if seen {
		if sent.After(o.confirmed) {
			o.confirmed = sent
		}
	} else {
		*o = observed{etag: etag, ttl: l.cfg.TTL, firstSeen: recv, confirmed: sent, newer: newer.Version}
	}
	if tick > o.presentTick {
		o.presentTick = tick
	}
	l.newerReads.Add(1)
	if !seen { // once per version, not per take that reads it
		l.log.Warn("the lease of another node is of a format newer than this build reads; that node is not judged live or expired, and its actors are refused until this node is upgraded",
			"other", id, "format", newer.Version, "known", newer.Known)
	}
}

// NewerFormatReads counts the reads of other nodes' leases (and of a lease
// under this node's own ID, at start) that found a format newer than this
// build reads.
func (l *Leases) NewerFormatReads() int64 { return l.newerReads.Load() }

// restartWatchesLocked starts the watch of every lease this node has seen
// afresh at now, when its own lease becomes valid again after a lapse (a
// bucket outage, a partition): as if it saw each version for the first
// time now, so that every node it saw counts as live again (Live) and is
// judged expired only once a read shows its lease unchanged for TTL +
// Grace from now.
//
// Judging from its sight before the lapse would be safe (the version did
// stand all along), but after a bucket outage every lease a node watched
// looks expired at its first read, though their holders, cut off too,
// renew as soon as the bucket answers: every node took over every other
// node's actors at once, each take downloading what the holder still had
// (after a 60 s outage, over a thousand takeovers among three nodes); and
// until its next reading a node saw itself alone, so that its first sweep
// took every actor as its own. A later first sight only puts the
// judgement off: the version landed before the read that showed it, so
// before now, which is all a first sight needs (see "The taker" in the
// package documentation). A node back in Live this way counts as a change
// of the live nodes, as a version seen after it dropped out does.
func (l *Leases) restartWatchesLocked(now time.Time) {
	for _, o := range l.others {
		if o.gone {
			continue
		}
		if o.member && now.Sub(o.firstSeen) >= o.ttl+l.cfg.Grace {
			l.members++
		}
		o.firstSeen, o.expiryNoted = now, false
	}
}

// expiredLocked judges a version only by the TTL written in it: one seen
// only in listings is not expired however long it stood (RefreshNow reads
// it once it has stood for half a TTL).
func (l *Leases) expiredLocked(o *observed) bool {
	return o.gone || (o.read && o.confirmed.Sub(o.firstSeen) >= o.ttl+l.cfg.Grace)
}

// Expired reports whether this node may treat the node's lease as expired,
// and so take its holds: it saw the node's lease removed, or saw the same
// version of it, unchanged, for at least the holder's TTL + Grace of its own
// clock (from receiving the first read showing it to sending the latest).
// It is false for nodes it has not observed and for this node itself.
func (l *Leases) Expired(nodeID string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	o := l.others[nodeID]
	if nodeID == l.cfg.NodeID || o == nil {
		return false
	}
	return l.expiredLocked(o)
}

// expiredThrough reports whether this node has judged expired, by a read
// (GET) of it, a version of node nodeID's lease that process instance
// wrote with sequence number seq or later: then every epoch of that
// process in which it knew of no version later than seq has ended (see
// "Taking over on a judgement already made" in the package
// documentation), and a hold record it wrote noting seq
// (holdRecord.LeaseSeq) may be taken over without reading the lease
// again. It is false for a seq or instance of 0 or "" (records from
// before either was noted), for this node, for a lease seen removed (the
// take reads it, as before), and for a version known only from a listing.
func (l *Leases) expiredThrough(nodeID, instance string, seq uint64) bool {
	if seq == 0 || instance == "" || nodeID == l.cfg.NodeID {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	o := l.others[nodeID]
	return o != nil && !o.gone && o.read && o.newer == 0 && o.instance == instance && seq <= o.seq && l.expiredLocked(o)
}

// renewedLately reports whether this node's readings of the leases showed
// a new version of node nodeID's lease less than the TTL it last read ago,
// with instance the last instance read: a read of the lease now could not
// judge it expired (that takes a version unchanged for TTL + Grace), and
// a later process under the ID, which takes it back only once this
// instance's lease has expired, would have been read (a version after one
// that stood half a TTL, or after TTL + Grace without a new one, is read:
// listedLocked). So a take may be refused on it without reading the lease.
// It never takes anything: the refusal it allows is safe whatever it says.
// It is false for an instance of "" (a record from before instances), for
// this node, and for a lease seen removed or of a newer format.
func (l *Leases) renewedLately(nodeID, instance string) bool {
	if instance == "" || nodeID == l.cfg.NodeID {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	o := l.others[nodeID]
	return o != nil && !o.gone && o.newer == 0 && o.instance == instance && o.ttl > 0 && l.clk.Now().Sub(o.firstSeen) < o.ttl
}

// earlierInstance reports whether the lease this node last read for
// nodeID belongs to a process other than instance (a hold record's): then,
// if that read was made after the record was read, the record's process
// is gone for good, since a process takes a node ID back only once the
// earlier one's lease has expired. An empty instance (a record from before
// instances were recorded) is never judged earlier.
func (l *Leases) earlierInstance(nodeID, instance string) bool {
	if instance == "" {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	o := l.others[nodeID]
	return o != nil && !o.gone && o.instance != "" && o.instance != instance
}

// Live returns the nodes with a fresh heartbeat, sorted by ID: this node
// while its lease is valid, and every other node whose lease this node saw
// change within the holder's TTL + Grace of its own clock (so a node that
// stopped renewing drops out when it could be judged expired; a key whose
// lease names another node, such as a store's temporary key of a PUT in
// progress, is no node). Wall-clock
// times in lease bodies are not compared: clocks may be far apart.
func (l *Leases) Live() []NodeInfo {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []NodeInfo
	if l.validLocked() {
		out = append(out, NodeInfo{ID: l.cfg.NodeID, Addr: l.cfg.Addr, Classes: l.cfg.Classes, AllClasses: l.cfg.Classes == nil})
	}
	now := l.clk.Now()
	for id, o := range l.others {
		if o.member && !o.gone && now.Sub(o.firstSeen) < o.ttl+l.cfg.Grace {
			out = append(out, NodeInfo{ID: id, Addr: o.addr, Classes: o.classes, AllClasses: o.classes == nil})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// MembersEpoch grows whenever this node saw the set of live nodes change
// in a way Live, read now and then, may not show: a node first seen, a
// lease seen removed, a node back after it had dropped out of Live, or a
// later process under a node's ID. A sweep that relists on a change of
// the live nodes compares it as well as Live.
func (l *Leases) MembersEpoch() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.members
}

// Addr returns the address a node announced in its lease, if this node has
// seen that lease and not seen it removed, and could read it (not of a
// newer format), or if nodeID is this node.
func (l *Leases) Addr(nodeID string) (string, bool) {
	if nodeID == l.cfg.NodeID {
		return l.cfg.Addr, true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	o := l.others[nodeID]
	if o == nil || o.gone || o.newer != 0 {
		return "", false
	}
	return o.addr, true
}

// Close is a clean shutdown: Valid turns false, background work stops, and
// the lease object is deleted, so other nodes may take this node's holds at
// once. Stop acting on holds (finish events) before calling it.
func (l *Leases) Close(ctx context.Context) error {
	l.mu.Lock()
	l.closed = true
	l.halted = true
	l.mu.Unlock()
	l.stopLoops()
	l.renewMu.Lock() // wait for a renewal in flight
	defer l.renewMu.Unlock()
	if err := l.b.Delete(ctx, l.key); err != nil {
		return fmt.Errorf("closing node %s: deleting its lease: %w", l.cfg.NodeID, err)
	}
	l.log.Info("lease removed on shutdown")
	return nil
}

// Kill stops renewing and observing without deleting the lease, as if the
// process had crashed; for tests. Valid stays true until the last renewal's
// validity runs out.
func (l *Leases) Kill() {
	l.mu.Lock()
	l.halted = true
	l.mu.Unlock()
	l.stopLoops()
}

func (l *Leases) stopLoops() {
	if l.cancel != nil {
		l.cancel()
	}
	l.wg.Wait()
}

func (l *Leases) renewLoop(ctx context.Context) {
	defer l.wg.Done()
	for {
		// A period after the last PUT was sent, so slow requests do not
		// stretch the period.
		l.mu.Lock()
		wait := l.cfg.Period - l.clk.Now().Sub(l.lastSent)
		l.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-l.clk.After(wait):
		}
		if err := l.RenewNow(ctx); errors.Is(err, ErrLeaseLost) {
			return
		}
	}
}

// retryReading is how soon a reading of the leases that failed is tried
// again: a renewal period later, or sooner when the reading period read
// leaves less of TTL + Grace (half of what is left, the other half for the requests'
// own time), so that one failed reading drops no live node out of Live,
// which keeps a node for TTL + Grace after the reading that showed its
// latest version.
func (l *Leases) retryReading(read time.Duration) time.Duration {
	return min(l.cfg.Period, (l.cfg.TTL+l.cfg.Grace-read)/2)
}

// ReadPeriod is how often this node reads the other nodes' leases now:
// LeaseConfig.ObservePeriod if set, else the renewal period while fewer
// than LargeCluster nodes are live and SlowObservePeriod from then on. A
// dead node's last lease version is first seen up to a reading period
// after it landed, and its takeover counts from that sight.
func (l *Leases) ReadPeriod() time.Duration {
	return time.Duration(l.readPeriod.Load())
}

// AfterReading is how long after a reading of the leases (RefreshNow)
// that returned err the next one is due: the reading period (ReadPeriod,
// which it updates from the live nodes), or retryReading after a failed
// reading. The background loop waits for it; a caller that reads the
// leases itself (Manual) can too.
func (l *Leases) AfterReading(err error) time.Duration {
	wait := l.cfg.readPeriod(len(l.Live()))
	l.readPeriod.Store(int64(wait))
	if err != nil {
		wait = min(wait, l.retryReading(wait))
	}
	return wait
}

func (l *Leases) observeLoop(ctx context.Context) {
	defer l.wg.Done()
	for {
		err := l.RefreshNow(ctx)
		if err != nil && ctx.Err() == nil {
			l.log.Warn("reading node leases failed", "error", err)
		}
		wait := l.AfterReading(err)
		select {
		case <-ctx.Done():
			return
		case <-l.clk.After(wait):
		}
	}
}
