package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/cluster"
	"github.com/wasmkeep/alarms/internal/fakeclock"
	"github.com/wasmkeep/alarms/internal/variant"
)

// LeaseConfig configures one run of the lease simulation ([RunLeases]):
// the production node leases and holds (package cluster) of a few nodes on
// one in-memory bucket whose requests fail, lose their replies, land late
// or are slow, under a virtual clock that each node reads at its own rate.
type LeaseConfig struct {
	Seed uint64
	// Nodes at the start (default 3); a crashed node is replaced by a new
	// one under a new node ID.
	Nodes int
	// Actors whose holds the nodes compete for (default 3).
	Actors int
	// Duration of virtual time (default 10 min).
	Duration time.Duration
	// TTL, Margin and Grace of every node's lease (cluster's defaults when
	// zero). Period is TTL/3.
	TTL, Margin, Grace time.Duration
	// LongTTL, if set, is a second lease TTL: each node started takes TTL
	// or LongTTL at random (Margin and Grace alike), as while a cluster
	// moves to a longer lease, one node at a time (docs/cost.md: a longer
	// lease at scale). Each node's period is its own TTL/3.
	LongTTL time.Duration
	// ObservePeriod is how often each node reads the other nodes' leases
	// (cluster.LeaseConfig.ObservePeriod; zero: its renewal period, TTL/3,
	// and cluster.LeaseConfig.SlowObservePeriod from cluster.LargeCluster
	// live nodes on); after a reading that failed, the next comes sooner,
	// as cluster.Leases.AfterReading says.
	ObservePeriod time.Duration
	// FaultRate is the share of requests that fail in one of four ways
	// (refused, answer lost after the write landed, timed out and landing
	// later, slow); default 0.05.
	FaultRate float64
	// TrustUnconfirmed is the unsafe variant: a lease renewal that failed
	// without landing is reported to the lease as confirmed, so the node
	// believes its validity extended past the last confirmed renewal's
	// window. The simulation must catch it.
	TrustUnconfirmed bool
	// JudgeByOwnTTL is the unsafe variant of judging a lease by the TTL
	// written in it: a node reading another node's lease takes it to name
	// the reader's own TTL, so with LongTTL a node on the shorter lease
	// judges a node on the longer one expired while that node still acts.
	// The simulation must catch it.
	JudgeByOwnTTL bool
	// NoListOmissions turns off the listings' omissions. By default a
	// LIST leaves out a key written within the last second with
	// probability ListOmitRecent (0.3 when zero), and any other key with
	// probability ListOmitAny (0.01 when zero), as an erasure-coded store
	// (MinIO) now and then leaves out a key that is being overwritten: a
	// lease being renewed is such a key.
	NoListOmissions bool
	ListOmitRecent  float64
	ListOmitAny     float64
	// TrustListedAbsence is the unsafe variant: a lease one listing left
	// out is taken for removed (a clean shutdown) without a read of its
	// key, so its node's holds may be taken at once though it still acts.
	// The simulation must catch it.
	TrustListedAbsence bool
	// Trace keeps the whole trace in the result.
	Trace bool
}

// LeaseResult is what one lease simulation saw.
type LeaseResult struct {
	Seed uint64
	// Violation is the first instant at which two nodes each held a valid
	// hold on one actor; empty if none.
	Violation string
	// Counts of what happened, summed over nodes.
	Renewals, RenewalsFailed, LostReplies, LateLandings, SlowRequests int
	// RodeThrough counts failed renewals after which the node was still
	// valid and still had a valid hold (the case this change is about).
	RodeThrough int
	// Omitted counts keys the listings left out though they existed.
	Omitted int
	// Lapses counts the times a node's lease went from valid to not valid
	// while the node was up and not cut off or paused.
	Lapses   int
	Acquired int
	// Takeovers counts holds taken from another node judged expired;
	// TakenOnJudgement those among them that read no lease, the record
	// noting a version of the holder's lease already judged expired.
	Takeovers, TakenOnJudgement int
	Crashes                     int
	// Readings counts the readings of the leases; SlowReadings those after
	// which a node
	// read next a reading period longer than its renewal period later
	// (cluster.LeaseConfig.SlowObservePeriod in a large cluster).
	Readings, SlowReadings int
	// ValidShare is the share of node-time (up, not cut off, not paused)
	// in which the node's lease was valid.
	ValidShare float64
	Tail       []string
}

type leaseNode struct {
	id        string
	ttl       time.Duration // its lease's TTL (LeaseConfig.TTL or LongTTL)
	leases    *cluster.Leases
	holds     *cluster.Holds
	clk       *rateClock
	mine      map[abi.ActorID]cluster.Hold
	crashed   bool
	pausedTil time.Time // real (reference) time
	cutTil    time.Time
	nextRenew time.Time
	nextLook  time.Time
	wasValid  bool
}

// rateClock reads the reference clock at its own rate from its own
// offset: a node's monotonic clock, drifting within cluster.MaxClockDrift.
type rateClock struct {
	ref          *fakeclock.Clock
	origin, base time.Time
	rate         float64
}

func (c *rateClock) Now() time.Time {
	return c.base.Add(time.Duration(float64(c.ref.Now().Sub(c.origin)) * c.rate))
}

func (c *rateClock) After(d time.Duration) <-chan time.Time {
	return c.ref.After(time.Duration(float64(d) / c.rate))
}

type leaseWorld struct {
	cfg     LeaseConfig
	rng     *rand.Rand
	ref     *fakeclock.Clock
	mem     *bucket.Mem
	nodes   []*leaseNode
	actors  []abi.ActorID
	caller  *leaseNode           // the node whose request the bucket is serving
	lostOne bool                 // the request in flight lands, then its reply is lost
	written map[string]time.Time // when each key was last written (reference time)
	res     LeaseResult
	trace   []string
	nextID  int
}

var errLeaseFault = errors.New("injected: 503 Slow Down")

// RunLeases runs one lease simulation. It is deterministic for a seed up to
// the random instance each lease writes, which never steers a decision.
func RunLeases(cfg LeaseConfig) LeaseResult {
	if cfg.Nodes == 0 {
		cfg.Nodes = 3
	}
	if cfg.Actors == 0 {
		cfg.Actors = 3
	}
	if cfg.Duration == 0 {
		cfg.Duration = 10 * time.Minute
	}
	if cfg.TTL == 0 {
		cfg.TTL, cfg.Margin, cfg.Grace = cluster.DefaultTTL, cluster.DefaultMargin, cluster.DefaultGrace
	}
	if cfg.FaultRate == 0 {
		cfg.FaultRate = 0.05
	}
	if cfg.ListOmitRecent == 0 {
		cfg.ListOmitRecent = 0.3
	}
	if cfg.ListOmitAny == 0 {
		cfg.ListOmitAny = 0.01
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w := &leaseWorld{
		cfg: cfg,
		rng: rand.New(rand.NewPCG(cfg.Seed, 0x1ea5e)),
		ref: fakeclock.New(start),
		mem: bucket.NewMem(),
		res: LeaseResult{Seed: cfg.Seed},
	}
	w.mem.Sleep = w.ref.Sleep
	w.mem.Faults = w.fault
	w.written = map[string]time.Time{}
	w.mem.OnChange = func(op bucket.Op) { w.written[op.Key] = w.ref.Now() }
	for i := range cfg.Actors {
		w.actors = append(w.actors, abi.ActorID{Tenant: "t", Class: "c", Name: fmt.Sprintf("a%d", i)})
	}
	for range cfg.Nodes {
		w.startNode()
	}
	end := start.Add(cfg.Duration)
	var upTime, validTime time.Duration
	for w.ref.Now().Before(end) && w.res.Violation == "" {
		// To the next renewal or lease read due, or a random step if
		// that is sooner: renewals go out on their period, as the
		// background loop sends them.
		step := time.Duration(w.rng.IntN(300)) * time.Millisecond
		for _, n := range w.nodes {
			for _, at := range []time.Time{n.nextRenew, n.nextLook} {
				if d := at.Sub(w.ref.Now()); !n.crashed && d > 0 && d < step {
					step = d
				}
			}
		}
		w.ref.Advance(step)
		for _, n := range w.nodes {
			if n.crashed || w.away(n) {
				continue
			}
			upTime += step
			if n.leases.Valid() {
				validTime += step
			}
		}
		w.act()
		w.check()
	}
	if upTime > 0 {
		w.res.ValidShare = float64(validTime) / float64(upTime)
	}
	if len(w.trace) > 40 && !cfg.Trace {
		w.trace = w.trace[len(w.trace)-40:]
	}
	w.res.Tail = w.trace
	return w.res
}

func (w *leaseWorld) logf(format string, args ...any) {
	line := fmt.Sprintf("%8.3fs ", w.ref.Now().Sub(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)).Seconds()) + fmt.Sprintf(format, args...)
	w.trace = append(w.trace, line)
	if !w.cfg.Trace && len(w.trace) > 400 {
		w.trace = append(w.trace[:0], w.trace[len(w.trace)-40:]...)
	}
}

func (w *leaseWorld) startNode() {
	w.nextID++
	id := fmt.Sprintf("n%d", w.nextID)
	rate := 1 + (w.rng.Float64()*2-1)*cluster.MaxClockDrift
	clk := &rateClock{ref: w.ref, origin: w.ref.Now(), base: w.ref.Now().Add(time.Duration(w.rng.IntN(3600)) * time.Second), rate: rate}
	ttl := w.cfg.TTL
	if w.cfg.LongTTL != 0 && w.rng.IntN(2) == 0 {
		ttl = w.cfg.LongTTL
	}
	n := &leaseNode{id: id, ttl: ttl, clk: clk, mine: map[abi.ActorID]cluster.Hold{}}
	b := &nodeBucket{Mem: w.mem, w: w, n: n}
	w.caller = n
	lc := cluster.LeaseConfig{
		Bucket: b, NodeID: id, Addr: id + ":7600", Clock: clk, Manual: true,
		TTL: ttl, Margin: w.cfg.Margin, Grace: w.cfg.Grace, ObservePeriod: w.cfg.ObservePeriod,
	}
	if w.cfg.TrustListedAbsence {
		lc = variant.LeaseConfig(lc, variant.LeaseSet{TrustListedAbsence: true})
	}
	l, err := cluster.StartLeases(context.Background(), lc)
	if err != nil {
		// Its creating PUT failed: it tries again later as a new node.
		w.logf("%s failed to start: %v", id, err)
		return
	}
	n.leases = l
	n.holds = cluster.NewHolds(b, "", l, nil)
	n.wasValid = true
	n.nextRenew = w.ref.Now().Add(ttl / 3)
	w.nodes = append(w.nodes, n)
	w.logf("%s up (lease %v, clock rate %.4f)", id, ttl, rate)
}

// away: paused (does nothing) or cut off (every request fails).
func (w *leaseWorld) away(n *leaseNode) bool {
	now := w.ref.Now()
	return now.Before(n.pausedTil) || now.Before(n.cutTil)
}

// act runs what is due: renewals and lease reads on their period, then one
// random action.
func (w *leaseWorld) act() {
	ctx := context.Background()
	now := w.ref.Now()
	live := 0
	for _, n := range w.nodes {
		if n.crashed {
			continue
		}
		live++
		valid := n.leases.Valid()
		if n.wasValid && !valid && !w.away(n) {
			w.res.Lapses++
			w.logf("%s lapsed", n.id)
		}
		n.wasValid = valid
		if now.Before(n.pausedTil) {
			continue
		}
		if !now.Before(n.nextRenew) {
			w.renew(ctx, n)
			n.nextRenew = w.ref.Now().Add(n.ttl / 3)
		}
		if !now.Before(n.nextLook) {
			w.caller = n
			n.nextLook = w.ref.Now().Add(n.leases.AfterReading(n.leases.RefreshNow(ctx)))
			w.res.Readings++
			if n.leases.ReadPeriod() > n.ttl/3 {
				w.res.SlowReadings++
			}
		}
	}
	if live < w.cfg.Nodes {
		w.startNode()
	}
	// Late writes land at random (or never, after two minutes).
	if late := w.mem.Late(); len(late) > 0 && w.rng.IntN(8) == 0 {
		i := w.rng.IntN(len(late))
		if w.rng.IntN(10) == 0 {
			w.mem.DropLate()
			w.logf("late writes dropped")
		} else if err := w.mem.ApplyLateOne(i); err == nil {
			w.res.LateLandings++
			w.logf("a late %s %s landed", late[i].Kind, late[i].Key)
		}
	}
	n := w.nodes[w.rng.IntN(len(w.nodes))]
	if n.crashed || now.Before(n.pausedTil) {
		return
	}
	w.caller = n
	switch r := w.rng.IntN(1000); {
	case r < 2:
		n.crashed = true
		w.res.Crashes++
		w.logf("%s crashed", n.id)
	case r < 5:
		n.pausedTil = now.Add(time.Duration(w.rng.Int64N(int64(3 * n.ttl))))
		w.logf("%s paused until +%v", n.id, n.pausedTil.Sub(now))
	case r < 8:
		n.cutTil = now.Add(time.Duration(w.rng.Int64N(int64(3 * n.ttl))))
		w.logf("%s cut off from the bucket for %v", n.id, n.cutTil.Sub(now))
	case r < 400:
		a := w.actors[w.rng.IntN(len(w.actors))]
		if h, ok := n.mine[a]; ok && n.holds.Valid(h) {
			return
		}
		before := n.holds.Stats()
		h, err := n.holds.Acquire(ctx, a)
		after := n.holds.Stats()
		w.res.Takeovers += int(after.Takeovers - before.Takeovers)
		w.res.TakenOnJudgement += int(after.LeaseReadsSkipped - before.LeaseReadsSkipped)
		if err != nil {
			return
		}
		if prev, ok := n.mine[a]; !ok || prev.Generation != h.Generation {
			w.res.Acquired++
			w.logf("%s holds %s (generation %d)", n.id, a.Name, h.Generation)
		}
		n.mine[a] = h
	case r < 460:
		for _, a := range w.actors {
			if h, ok := n.mine[a]; ok {
				delete(n.mine, a)
				if n.holds.Valid(h) && n.holds.Release(ctx, h) == nil {
					w.logf("%s released %s", n.id, a.Name)
				}
				break
			}
		}
	}
}

func (w *leaseWorld) renew(ctx context.Context, n *leaseNode) {
	w.caller = n
	w.res.Renewals++
	err := n.leases.RenewNow(ctx)
	if err == nil {
		return
	}
	if errors.Is(err, cluster.ErrLeaseLost) {
		// The node stops, as keepnode does; a new one takes its place.
		n.crashed = true
		w.logf("%s lost its lease and stops: %v", n.id, err)
		return
	}
	w.res.RenewalsFailed++
	if n.leases.Valid() {
		for _, h := range n.mine {
			if n.holds.Valid(h) {
				w.res.RodeThrough++
				break
			}
		}
	}
	w.logf("%s renewal failed (valid %v): %v", n.id, n.leases.Valid(), err)
}

// fault decides the fate of the request the bucket is serving for
// w.caller.
func (w *leaseWorld) fault(op bucket.Op) bucket.Fault {
	n := w.caller
	w.lostOne = false
	if n != nil && w.ref.Now().Before(n.cutTil) {
		return bucket.Fault{Err: errors.New("injected: connection refused")}
	}
	if w.rng.Float64() >= w.cfg.FaultRate {
		return w.omissions(op)
	}
	switch w.rng.IntN(4) {
	case 0:
		return bucket.Fault{Err: errLeaseFault}
	case 1:
		if op.Kind == bucket.OpPut {
			w.lostOne = true
			w.res.LostReplies++
		}
		return bucket.Fault{}
	case 2:
		return bucket.Fault{Late: true}
	default:
		w.res.SlowRequests++
		// Slow, but not so slow that the whole world, which waits for
		// this one request, stops for long.
		return bucket.Fault{Delay: time.Duration(w.rng.Int64N(int64(w.cfg.TTL / 10)))}
	}
}

// omissions is the fault of a request that otherwise goes through: for a
// LIST page, the keys it leaves out (see LeaseConfig.NoListOmissions).
// Each key's fate is drawn once per page, in key order, so a seed stays
// a replayable run.
func (w *leaseWorld) omissions(op bucket.Op) bucket.Fault {
	if op.Kind != bucket.OpList || w.cfg.NoListOmissions {
		return bucket.Fault{}
	}
	now := w.ref.Now()
	return bucket.Fault{Omit: func(key string) bool {
		p := w.cfg.ListOmitAny
		if at, ok := w.written[key]; ok && now.Sub(at) < time.Second {
			p = w.cfg.ListOmitRecent
		}
		if w.rng.Float64() < p {
			w.res.Omitted++
			return true
		}
		return false
	}}
}

// check: no actor has two nodes that each hold a valid hold on it. Validity
// only shrinks while time passes, so checking after every step checks every
// instant.
func (w *leaseWorld) check() {
	for _, a := range w.actors {
		var holders []string
		for _, n := range w.nodes {
			if n.crashed {
				continue
			}
			if h, ok := n.mine[a]; ok && n.holds.Valid(h) {
				holders = append(holders, fmt.Sprintf("%s (generation %d, lease valid until %v on its clock)",
					n.id, h.Generation, n.leases.ValidUntil().Sub(n.clk.Now()).Round(time.Millisecond)))
			}
		}
		if len(holders) > 1 {
			w.res.Violation = fmt.Sprintf("at +%v two nodes act on %s at once: %s",
				w.ref.Now().Sub(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), a, strings.Join(holders, " and "))
			w.logf("VIOLATION: %s", w.res.Violation)
			return
		}
	}
}

// nodeBucket is one node's way to the shared bucket: it tells the fault
// hook whose request it is, loses the reply of a write that landed when
// told to, and in the unsafe variant reports a failed lease renewal as
// confirmed.
type nodeBucket struct {
	*bucket.Mem
	w *leaseWorld
	n *leaseNode
	// made-up ETags of the unsafe variant, and the ETag each stands for
	// (the one the failed renewal was conditioned on), so the chain of
	// renewals goes on past them
	madeUp map[string]string
}

func (b *nodeBucket) Get(ctx context.Context, key string) ([]byte, string, error) {
	b.w.caller = b.n
	body, etag, err := b.Mem.Get(ctx, key)
	if err == nil && b.w.cfg.JudgeByOwnTTL && strings.HasPrefix(key, cluster.DefaultPrefix+"nodes/") && key != cluster.DefaultPrefix+"nodes/"+b.n.id {
		// The unsafe variant: another node's lease read as if it named
		// the reader's own TTL.
		var rec map[string]any
		if json.Unmarshal(body, &rec) == nil {
			rec["ttl_ms"] = b.n.ttl.Milliseconds()
			body, _ = json.Marshal(rec)
		}
	}
	return body, etag, err
}

func (b *nodeBucket) List(ctx context.Context, prefix, startAfter string, limit int) ([]string, error) {
	b.w.caller = b.n
	return b.Mem.List(ctx, prefix, startAfter, limit)
}

func (b *nodeBucket) ListInfo(ctx context.Context, prefix, startAfter string, limit int) ([]bucket.ObjectInfo, error) {
	b.w.caller = b.n
	return b.Mem.ListInfo(ctx, prefix, startAfter, limit)
}

func (b *nodeBucket) Delete(ctx context.Context, key string) error {
	b.w.caller = b.n
	return b.Mem.Delete(ctx, key)
}

func (b *nodeBucket) Put(ctx context.Context, key string, body []byte, cond bucket.Cond) (string, error) {
	b.w.caller = b.n
	if real, ok := b.madeUp[cond.IfMatch]; ok {
		cond.IfMatch = real
	}
	etag, err := b.Mem.Put(ctx, key, body, cond)
	if err == nil && b.w.lostOne {
		b.w.lostOne = false
		return "", fmt.Errorf("put %s: the connection reset after the write landed: %w", key, errLeaseFault)
	}
	if err != nil && b.w.cfg.TrustUnconfirmed && strings.HasPrefix(key, cluster.DefaultPrefix+"nodes/") &&
		!errors.Is(err, bucket.ErrPrecondition) {
		// The unsafe variant: an unconfirmed renewal taken as confirmed.
		madeUp := fmt.Sprintf(`"unconfirmed-%d"`, b.w.rng.Uint64())
		if b.madeUp == nil {
			b.madeUp = map[string]string{}
		}
		b.madeUp[madeUp] = cond.IfMatch
		return madeUp, nil
	}
	return etag, err
}
