package node_test

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/internal/clusterproc"
	"github.com/wasmkeep/alarms/internal/s3test"
)

// swDefaults are the design's timings: lease 10 s (margin 1 s), grace 2 s,
// alarm_sweep 10 s.
var swDefaults = swTimings{ttl: 10 * time.Second, margin: time.Second, grace: 2 * time.Second, sweep: 10 * time.Second}

// BenchmarkFailover measures how orphaned alarms are recovered after a
// SIGKILL: three keepnode processes on versitygw (-failover.survivors
// sets how many outlive node0), node0 holds idle oneshot
// actors whose alarms come due after it is killed, the survivors'
// sweeps deliver them. Each iteration is a whole run on a fresh bucket.
//
//   - lateness: 100 alarms due over one sweep period, starting a lease
//     period after the kill. Metrics: late-p50-s, late-p99-s, late-max-s
//     (fired minus due; the design expects about lease + grace + up to one
//     sweep: 12 s to 22 s with the defaults, about 25 s).
//   - drain: -failover.drain alarms (2,000 by default) all due at one
//     instant, a lease period after the kill (1,000 per survivor, four
//     caps' worth of 256). Metrics: drain-alarms/s/node, the alarms each
//     survivor fired divided by the time from when a survivor could first
//     take them (the later of their due time and a lease period and grace
//     after the kill) to its last firing, averaged over the survivors;
//     drain-start-s, the wait from then to each survivor's first firing,
//     and drain-busy-alarms/s/node, the rate from its first firing to its
//     last; the lateness percentiles; and, from the survivors' metrics
//     over the drain, s3-requests/alarm and sweep-lists/alarm (their
//     background traffic included) and relists, the walks of a capped
//     tenant begun before the sweep period was up (docs/design.md#drain:
//     the cap no longer sets the rate); node-cpu-ms/alarm and
//     s3-cpu-ms/alarm, the CPU the survivors (together) and the S3
//     server spent per alarm over the drain; own-late-p99-s and
//     own-late-max-s, the lateness of alarms of the survivors' own actors
//     (another tenant, ownActors each, one a second from the orphans' due
//     time on) during the drain. Before the victim's actors are armed,
//     each survivor fires 256 actors of its own, due at one instant, in
//     three rounds: ceiling-firings/s/node, the median round's rate of
//     replicated firings of open actors on the same nodes in the same
//     run, drain/ceiling, and that round's CPU per firing
//     (ceiling-node-cpu-ms/firing, ceiling-s3-cpu-ms/firing); the same
//     rounds after the drain give ceiling-after-drain-firings/s/node;
//     ceiling-cpu/drain-cpu, the CPU (survivors' and S3 server's) of a
//     firing there over that of a drained alarm, the ratio the rates
//     would have were both bound by the CPU alone;
//     ceiling-cpu/free-take-cpu, the same with the survivors' CPU per
//     drained alarm put at a ceiling firing's (a take that cost them
//     nothing): the bound the S3 server's CPU for a takeover's requests
//     sets on drain/ceiling while it shares the nodes' cores;
//     ceiling-cpu/least-take-cpu, the same were a drained alarm to cost a
//     ceiling firing and only the requests no takeover can do without
//     (the snapshot's GET and the fence's PUT, both sides of them,
//     measured on the run's S3 server before the ceiling's rounds):
//     the machine's own bound on drain/ceiling.
//     -failover.node-flags passes more keepnode flags to every node.
//
// Each at the design's defaults (lease 10 s, margin 1 s, grace 2 s, sweep
// 10 s) and scaled down by five (2 s, 400 ms, 1 s, 1 s: the process tests'
// timings) and by ten (1 s, 200 ms, 500 ms, 500 ms). lost counts alarms
// that never fired (an error if not 0); dups counts duplicate firings.
// -failover.cpuprofile FILE writes a CPU profile of the first survivor
// over the drain (keepnode -pprof; -failover.profile-for long). A
// run at the defaults takes one to two minutes, five with 10,000 alarms:
//
//	go test -run '^$' -bench BenchmarkFailover -benchtime 1x -timeout 30m ./node/
func BenchmarkFailover(b *testing.B) {
	for _, tc := range []struct {
		name    string
		timings swTimings
	}{
		{"scaled-10x", swTimings{ttl: time.Second, margin: 200 * time.Millisecond, grace: 500 * time.Millisecond, sweep: 500 * time.Millisecond}},
		{"scaled-5x", swScaled},
		{"defaults", swDefaults},
	} {
		b.Run(tc.name+"/lateness", func(b *testing.B) {
			benchFailover(b, tc.timings, 100, tc.timings.sweep)
		})
		b.Run(tc.name+"/drain", func(b *testing.B) {
			benchFailover(b, tc.timings, *failoverDrain, 0)
		})
	}
}

var failoverDrain = flag.Int("failover.drain", 2000, "BenchmarkFailover's drain: how many alarms are due at once on the killed node")

var failoverSurvivors = flag.Int("failover.survivors", 2, "BenchmarkFailover: how many nodes survive the one killed")

var failoverNodeFlags = flag.String("failover.node-flags", "", "BenchmarkFailover: more keepnode flags for every node, space-separated (e.g. \"-workers 16\")")

var failoverProfile = flag.String("failover.cpuprofile", "", "BenchmarkFailover's drain: write a CPU profile of the first survivor (keepnode -pprof), from when it could first take the orphans, for -failover.profile-for, to this file")

var failoverProfileFor = flag.Duration("failover.profile-for", 10*time.Second, "BenchmarkFailover: how long -failover.cpuprofile profiles")

// profileSurvivor writes a CPU profile of node n (served by keepnode
// -pprof on its metrics listener) from at, for d, to path.
func profileSurvivor(tb testing.TB, n *clusterproc.Node, at time.Time, d time.Duration, path string) {
	time.Sleep(time.Until(at))
	u := strings.TrimSuffix(n.MetricsURL, "/metrics") + fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(d.Seconds()))
	resp, err := http.Get(u)
	if err != nil {
		tb.Logf("profile of %s: %v", n.Name, err)
		return
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: %s", resp.Status, b)
	}
	if err == nil {
		err = os.WriteFile(path, b, 0o644)
	}
	if err != nil {
		tb.Logf("profile of %s: %v", n.Name, err)
	}
}

func benchFailover(b *testing.B, timings swTimings, actors int, spread time.Duration) {
	var lateness []time.Duration
	var rates []float64
	lost, dups := 0, 0
	var cost drainCost
	for range b.N {
		out, rate, c := failoverRun(b, timings, actors, spread)
		lateness = append(lateness, out.lateness...)
		rates = append(rates, rate)
		lost += len(out.lost)
		dups += out.dups
		cost.add(c)
	}
	slices.Sort(lateness)
	b.ReportMetric(pct(lateness, 50).Seconds(), "late-p50-s")
	b.ReportMetric(pct(lateness, 99).Seconds(), "late-p99-s")
	b.ReportMetric(pct(lateness, 100).Seconds(), "late-max-s")
	if spread == 0 {
		sum := 0.0
		for _, r := range rates {
			sum += r
		}
		b.ReportMetric(sum/float64(len(rates)), "drain-alarms/s/node")
		if cost.ceiling > 0 {
			b.ReportMetric(cost.ceiling/float64(b.N), "ceiling-firings/s/node")
			b.ReportMetric(sum/cost.ceiling, "drain/ceiling")
		}
		if cost.ceilingAfter > 0 {
			b.ReportMetric(cost.ceilingAfter/float64(b.N), "ceiling-after-drain-firings/s/node")
		}
		slices.Sort(cost.ownLate)
		b.ReportMetric(pct(cost.ownLate, 99).Seconds(), "own-late-p99-s")
		b.ReportMetric(pct(cost.ownLate, 100).Seconds(), "own-late-max-s")
		if bound := timings.ttl + timings.grace + timings.sweep; pct(cost.ownLate, 100) > bound {
			b.Errorf("a survivor's own alarm fired %v late during the drain, past lease + grace + a sweep (%v)", pct(cost.ownLate, 100), bound)
		}
		survivors := float64(b.N * *failoverSurvivors)
		b.ReportMetric(cost.start/survivors, "drain-start-s")
		b.ReportMetric(cost.busy/survivors, "drain-busy-alarms/s/node")
		b.ReportMetric(cost.requests/max(cost.fired, 1), "s3-requests/alarm")
		if cost.nodeCPU > 0 {
			b.ReportMetric(cost.nodeCPU*1000/max(cost.fired, 1), "node-cpu-ms/alarm")
			b.ReportMetric(cost.s3CPU*1000/max(cost.fired, 1), "s3-cpu-ms/alarm")
			b.ReportMetric(cost.ceilingNodeCPU*1000/float64(b.N), "ceiling-node-cpu-ms/firing")
			b.ReportMetric(cost.ceilingS3CPU*1000/float64(b.N), "ceiling-s3-cpu-ms/firing")
			if drained := (cost.nodeCPU + cost.s3CPU) / max(cost.fired, 1); drained > 0 {
				b.ReportMetric((cost.ceilingNodeCPU+cost.ceilingS3CPU)/float64(b.N)/drained, "ceiling-cpu/drain-cpu")
			}
			// Were the take free (an orphan cost its survivor only what
			// a firing of an open actor costs it), the S3 server's CPU
			// for the orphan's requests would still bound the ratio:
			// this is that bound.
			ceilNode, ceilS3 := cost.ceilingNodeCPU/float64(b.N), cost.ceilingS3CPU/float64(b.N)
			if freeTake := ceilNode + cost.s3CPU/max(cost.fired, 1); freeTake > 0 {
				b.ReportMetric((ceilNode+ceilS3)/freeTake, "ceiling-cpu/free-take-cpu")
			}
			// Were an orphan to cost a firing and only the requests no
			// takeover can do without (the snapshot's read, the fence),
			// both sides of them measured on this run's S3 server: the
			// machine's own bound on drain/ceiling.
			if cost.leastTake > 0 {
				ceil := ceilNode + ceilS3
				b.ReportMetric(ceil/(ceil+cost.leastTake/float64(b.N)), "ceiling-cpu/least-take-cpu")
			}
		}
		if cost.fsCreate > 0 {
			b.ReportMetric(cost.fsCreate*1e6/float64(b.N), "fs-create-us/file")
		}
		b.ReportMetric(cost.lists/max(cost.fired, 1), "sweep-lists/alarm")
		b.ReportMetric(cost.relists/float64(b.N), "relists")
		b.ReportMetric(cost.stale/max(cost.fired, 1), "stale-deliveries/alarm")
	}
	b.ReportMetric(float64(lost), "lost")
	b.ReportMetric(float64(dups), "dups")
	if lost > 0 {
		b.Errorf("%d alarms lost", lost)
	}
}

// drainCost is what the survivors spent on a failover, from their
// metrics: S3 requests of every kind, the sweeps' LISTs of the index, and
// the sweeps they began early (a capped plan delivered), for the alarms
// fired.
//
// ceiling is the survivors' rate of replicated firings in the same run,
// before the victim's actors are armed (the nodes and the bucket's file
// system quiet): ceilingActors actors of their own each, armed through
// them and due at one instant, each firing an actor open on its node and
// its upload (firings per second per survivor, from the due time to its
// last firing), the median of ceilingRounds rounds. ceilingAfter is the
// same rate measured again once the drain is over, for comparison: what
// a drain leaves (thousands of objects removed, thousands of actors on
// each survivor) moves the rate after it from run to run, more than the
// rate before it (docs/benchmarks.md#drain-bound).
//
// start sums, over the survivors, the seconds from when the orphans could
// first be taken to the survivor's first firing of one; busy sums their
// rates from their first firing to their last, the rate with that wait
// left out.
//
// nodeCPU and s3CPU are the seconds of CPU the survivors and the S3
// server spent over the drain (from its arming's end to the last
// firing); ceilingNodeCPU and ceilingS3CPU the same over the ceiling's
// firings (from their due time until their uploads are done), per firing
// (0 where /proc cannot be read).
//
// fsCreate is the CPU seconds this process spent per file it created on
// the file system of the nodes' data directories before the victim's
// actors were armed (fsCreateCost): what a new file costs there then,
// which a drain pays for each orphan (its database and WAL), the S3
// server on the same disk for each object written, and the ceiling's
// open actors do not.
type drainCost struct {
	requests, lists, relists, stale, fired, ceiling, start, busy float64
	nodeCPU, s3CPU, ceilingNodeCPU, ceilingS3CPU, fsCreate       float64
	ceilingAfter                                                 float64
	// leastTake is the CPU (the S3 server's and the client's, seconds)
	// of the least a takeover must add to a firing: the snapshot's GET
	// and the fence's conditional PUT (takeRequestsCost).
	leastTake float64
	// ownLate is the lateness of the survivors' own alarms during the
	// drain (armOwn).
	ownLate []time.Duration
	// ops are the S3 requests by operation (survivorCounts alone).
	ops map[string]float64
}

// ownActors actors of each survivor's own, of another tenant, come due
// ownEvery apart from the orphans' due time on: their lateness shows
// whether the drain holds up the alarms of the actors a survivor holds.
const (
	ownActors = 60
	ownEvery  = time.Second
)

// armOwn arms ownActors actors of tenant "own" through each survivor (which
// takes them: they are its own), due ownEvery apart from base on.
func armOwn(b *testing.B, ctx context.Context, survivors []*clusterproc.Node, base time.Time) map[abi.ActorID]int64 {
	all := map[abi.ActorID]int64{}
	for _, s := range survivors {
		mine := map[abi.ActorID]int64{}
		for i := range ownActors {
			mine[abi.ActorID{Tenant: "own", Class: swClass, Name: fmt.Sprintf("%s/%02d", s.Name, i)}] = base.Add(time.Duration(i) * ownEvery).UnixMilli()
		}
		swArm(b, ctx, s.URL, mine)
		maps.Copy(all, mine)
	}
	if time.Until(base) < 0 {
		b.Fatalf("arming the survivors' own actors took until %v after the orphans were due", -time.Until(base))
	}
	return all
}

// fsProbeFiles is how many files fsCreateCost creates.
const fsProbeFiles = 4000

// fsCreateCost creates n files of 4 KiB in a new directory on the file
// system of the benchmark's temporary directories (the nodes' data
// directories and the S3 server's) and returns this process's CPU seconds
// per file (0 where /proc cannot be read). On ext4 a new file costs
// little, unless many files were removed in the last minutes (the
// cleanup of an earlier run): the allocator then passes over each inode
// removed lately, and a file can cost ten times more, in the kernel.
func fsCreateCost(tb testing.TB, n int) float64 {
	dir := tb.TempDir()
	data := make([]byte, 4096)
	start := s3test.ProcessCPU(os.Getpid())
	for i := range n {
		if err := os.WriteFile(filepath.Join(dir, strconv.Itoa(i)), data, 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	return (s3test.ProcessCPU(os.Getpid()) - start) / float64(n)
}

// takeProbePairs is how many snapshot GETs and fence PUTs
// takeRequestsCost sends.
const takeProbePairs = 1000

// takeRequestsCost sends n pairs of the requests a takeover cannot do
// without on top of a firing (a 24 KiB snapshot's GET, a 300-byte
// record's PUT If-Match: the fence) to the run's S3 server, one at a time
// from this process, before the ceiling's rounds, and returns the
// CPU seconds a pair cost the server and this process (the node's client,
// the same code) together; 0 where the server's CPU cannot be read.
func takeRequestsCost(tb testing.TB, ctx context.Context, srv *s3test.Server, n int) float64 {
	if srv.Pid == 0 {
		return 0
	}
	c := srv.Bucket
	if _, err := c.Put(ctx, "probe/snapshot", make([]byte, 24<<10), bucket.Cond{}); err != nil {
		tb.Fatal(err)
	}
	record := make([]byte, 300)
	etag, err := c.Put(ctx, "probe/record", record, bucket.Cond{})
	if err != nil {
		tb.Fatal(err)
	}
	s0, c0 := s3test.ProcessCPU(srv.Pid), s3test.ProcessCPU(os.Getpid())
	for i := range n {
		if _, _, err := c.Get(ctx, "probe/snapshot"); err != nil {
			tb.Fatal(err)
		}
		record[i%len(record)]++
		if etag, err = c.Put(ctx, "probe/record", record, bucket.Cond{IfMatch: etag}); err != nil {
			tb.Fatal(err)
		}
	}
	return (s3test.ProcessCPU(srv.Pid) - s0 + s3test.ProcessCPU(os.Getpid()) - c0) / float64(n)
}

// ceilingActors is how many actors of its own each survivor fires for
// drainCost.ceiling: within the default residency budget.
const ceilingActors = 256

func (c *drainCost) add(o drainCost) {
	c.ceiling += o.ceiling
	c.ceilingAfter += o.ceilingAfter
	c.requests += o.requests
	c.lists += o.lists
	c.relists += o.relists
	c.stale += o.stale
	c.fired += o.fired
	c.start += o.start
	c.busy += o.busy
	c.nodeCPU += o.nodeCPU
	c.s3CPU += o.s3CPU
	c.ceilingNodeCPU += o.ceilingNodeCPU
	c.ceilingS3CPU += o.ceilingS3CPU
	c.fsCreate += o.fsCreate
	c.leastTake += o.leastTake
	c.ownLate = append(c.ownLate, o.ownLate...)
}

// cpuMark is the CPU time processes had spent when a phase began.
type cpuMark struct {
	nodes []int // pids
	s3    int
	at    []float64
}

// startCPU notes the CPU time of the survivors and the S3 server (pid 0:
// none of its own) now.
func startCPU(nodes []*clusterproc.Node, s3Pid int) cpuMark {
	m := cpuMark{s3: s3Pid}
	for _, n := range nodes {
		m.nodes = append(m.nodes, n.Pid())
	}
	for _, p := range append(m.nodes, s3Pid) {
		m.at = append(m.at, s3test.ProcessCPU(p))
	}
	return m
}

// since returns the seconds of CPU the survivors, and the S3 server, spent
// since m.
func (m cpuMark) since() (nodes, s3 float64) {
	for i, p := range m.nodes {
		nodes += s3test.ProcessCPU(p) - m.at[i]
	}
	return nodes, s3test.ProcessCPU(m.s3) - m.at[len(m.nodes)]
}

// survivorCounts sums the survivors' counters that drainCost reads.
func survivorCounts(tb testing.TB, nodes []*clusterproc.Node) drainCost {
	c := drainCost{ops: map[string]float64{}}
	for _, n := range nodes {
		m := scrapeMetrics(tb, n.MetricsURL)
		c.requests += m.Value("wasmkeep_s3_requests_total")
		for _, op := range []string{"GetObject", "HeadObject", "PutObject", "DeleteObject", "DeleteObjects", "ListObjectsV2"} {
			c.ops[op] += m.Value("wasmkeep_s3_requests_total", "operation", op)
		}
		c.lists += m.Value("wasmkeep_sweep_lists_total")
		c.relists += m.Value("wasmkeep_sweep_relists_total")
		c.stale += m.Value("wasmkeep_alarm_firings_total", "outcome", "stale")
	}
	return c
}

// failoverRun runs one failover and returns its outcome, the drain rate
// per survivor, and what the survivors spent.
func failoverRun(b *testing.B, timings swTimings, actors int, spread time.Duration) (swOutcome, float64, drainCost) {
	b.StopTimer()
	ctx := context.Background()
	rec := &swFirings{}
	cfg, srv := swProcCluster(b, ctx, rec, timings)
	cfg.Flags = append(cfg.Flags, "-metrics-addr", "127.0.0.1:0")
	cfg.Flags = append(cfg.Flags, strings.Fields(*failoverNodeFlags)...)
	if *failoverProfile != "" {
		cfg.Flags = append(cfg.Flags, "-pprof")
	}
	if *failoverSurvivors < 1 {
		b.Fatalf("-failover.survivors %d: at least one node must survive", *failoverSurvivors)
	}
	nodes, err := clusterproc.StartNodes(ctx, cfg, 1+*failoverSurvivors)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		for _, n := range nodes {
			_ = n.Kill()
		}
	}()
	victim := nodes[0]
	fsCreate := fsCreateCost(b, fsProbeFiles)
	var ceiling, ceilingNodeCPU, ceilingS3CPU, leastTake float64
	if spread == 0 {
		// Only a drain reports the bounds these two make.
		leastTake = takeRequestsCost(b, ctx, srv, takeProbePairs)
		ceiling, ceilingNodeCPU, ceilingS3CPU = ceilingRate(b, ctx, rec, "before the arming", nodes[1:], srv.Pid)
	}
	// The first alarm is due a lease period after the kill at the earliest.
	due, base := swArmAndKill(b, ctx, victim, actors, spread, timings.ttl)
	killed := time.Now()
	var own map[abi.ActorID]int64
	if spread == 0 {
		own = armOwn(b, ctx, nodes[1:], base)
	}
	before := survivorCounts(b, nodes[1:])
	cpu := startCPU(nodes[1:], srv.Pid)
	var profiled sync.WaitGroup
	if *failoverProfile != "" && spread == 0 {
		// The orphans can first be taken a lease period and grace after
		// the kill, once due.
		from := killed.Add(timings.ttl + timings.grace)
		if base.After(from) {
			from = base
		}
		profiled.Go(func() { profileSurvivor(b, nodes[1], from, *failoverProfileFor, *failoverProfile) })
	}
	defer profiled.Wait()
	b.StartTimer()
	out := swCollect(rec, victim.Name, due, base.Add(spread+timings.bound()+time.Duration(actors)*time.Second/5))
	b.StopTimer()
	after := survivorCounts(b, nodes[1:])
	cost := drainCost{requests: after.requests - before.requests, lists: after.lists - before.lists,
		relists: after.relists - before.relists, stale: after.stale - before.stale, fired: float64(len(out.first))}
	cost.nodeCPU, cost.s3CPU = cpu.since()
	cost.fsCreate = fsCreate
	cost.leastTake = leastTake
	if own != nil {
		o := swCollect(rec, "", own, base.Add(ownActors*ownEvery+time.Minute))
		if len(o.lost) > 0 {
			b.Errorf("%d of the survivors' own alarms never fired", len(o.lost))
		}
		cost.ownLate = o.lateness
	}
	var perOp []string
	for op, n := range after.ops {
		if d := n - before.ops[op]; d > 0 {
			perOp = append(perOp, fmt.Sprintf("%s %.2f", op, d/max(cost.fired, 1)))
		}
	}
	slices.Sort(perOp)
	b.Logf("S3 requests per alarm by operation: %s", strings.Join(perOp, ", "))
	cost.ceiling, cost.ceilingNodeCPU, cost.ceilingS3CPU = ceiling, ceilingNodeCPU, ceilingS3CPU
	if spread == 0 {
		cost.ceilingAfter, _, _ = ceilingRate(b, ctx, rec, "after the drain", nodes[1:], srv.Pid)
	}
	b.Logf("%+v: %v; survivors made %.0f S3 requests (%.0f sweep LISTs), %.0f early sweeps, %.0f deliveries of a time already delivered; fired their own actors at %.1f/s each before the arming, %.1f/s after the drain", timings, out, cost.requests, cost.lists, cost.relists, cost.stale, cost.ceiling, cost.ceilingAfter)

	// The earliest a survivor may take the orphans: once due, and once
	// the victim's lease could be judged expired.
	readable := max(base.UnixMilli(), killed.Add(timings.ttl+timings.grace).UnixMilli())
	first, last := map[string]int64{}, map[string]int64{}
	for _, f := range out.first {
		last[f.node] = max(last[f.node], f.fired)
		if v, ok := first[f.node]; !ok || f.fired < v {
			first[f.node] = f.fired
		}
	}
	rate := 0.0
	for n, c := range out.perNode {
		if span := last[n] - readable; span > 0 {
			rate += float64(c) / (float64(span) / 1000)
			cost.start += float64(first[n]-readable) / 1000
			cost.busy += float64(c) / (float64(max(last[n]-first[n], 1)) / 1000)
		}
	}
	if len(out.perNode) > 0 {
		rate /= float64(len(nodes) - 1)
	}
	return out, rate, cost
}

// ceilingRate measures the survivors' rate of replicated firings in
// ceilingRounds rounds and returns the round of the median rate: its rate
// (drainCost.ceiling) and the survivors' and the S3 server's CPU per
// firing. A round fires a quarter of a second's worth on two cores, where
// a collection, a lease renewal or a sweep moves the rate by a third; the
// drain it is set against runs for many seconds.
func ceilingRate(b *testing.B, ctx context.Context, rec *swFirings, when string, survivors []*clusterproc.Node, s3Pid int) (rate, nodeCPU, s3CPU float64) {
	type round struct{ rate, nodeCPU, s3CPU float64 }
	var rounds []round
	for range ceilingRounds {
		var r round
		r.rate, r.nodeCPU, r.s3CPU = ceilingRound(b, ctx, rec, survivors, s3Pid)
		rounds = append(rounds, r)
	}
	slices.SortFunc(rounds, func(x, y round) int { return cmp.Compare(x.rate, y.rate) })
	rates := make([]string, len(rounds))
	for i, r := range rounds {
		rates[i] = fmt.Sprintf("%.1f", r.rate)
	}
	b.Logf("ceiling rounds %s, replicated firings/s per survivor: %s", when, strings.Join(rates, ", "))
	m := rounds[len(rounds)/2]
	return m.rate, m.nodeCPU, m.s3CPU
}

// ceilingRounds is how many rounds ceilingRate fires.
const ceilingRounds = 3

// ceilingRound arms ceilingActors actors of a tenant of their own through
// each survivor (the same actors in every round: open since the first),
// all due at one instant, and returns the survivors' mean rate of firing
// them, and the survivors' and the S3 server's CPU per firing, from the
// due time until the uploads are done.
func ceilingRound(b *testing.B, ctx context.Context, rec *swFirings, survivors []*clusterproc.Node, s3Pid int) (rate, nodeCPU, s3CPU float64) {
	base := swArmBy(b, ctx, survivors[0].URL, ceilingActors*len(survivors))
	due := map[abi.ActorID]int64{}
	for _, s := range survivors {
		mine := map[abi.ActorID]int64{}
		for i := range ceilingActors {
			mine[abi.ActorID{Tenant: "ceiling", Class: swClass, Name: fmt.Sprintf("%s/%04d", s.Name, i)}] = base.UnixMilli()
		}
		swArm(b, ctx, s.URL, mine)
		maps.Copy(due, mine)
	}
	time.Sleep(time.Until(base))
	cpu := startCPU(survivors, s3Pid)
	out := swCollect(rec, "", due, base.Add(2*time.Minute))
	uploaded(b, survivors)
	nodeCPU, s3CPU = cpu.since()
	fired := float64(max(len(out.first), 1))
	nodeCPU, s3CPU = nodeCPU/fired, s3CPU/fired
	if len(out.lost) > 0 {
		b.Errorf("%d of the survivors' own alarms never fired", len(out.lost))
	}
	last := map[string]int64{}
	for _, f := range out.first {
		last[f.node] = max(last[f.node], f.fired)
	}
	for n, c := range out.perNode {
		if span := last[n] - base.UnixMilli(); span > 0 {
			rate += float64(c) / (float64(span) / 1000)
		}
	}
	return rate / float64(len(survivors)), nodeCPU, s3CPU
}

// uploaded waits until the survivors' S3 requests stop for 300 ms (their
// firings' uploads are done), 10 s at most.
func uploaded(tb testing.TB, survivors []*clusterproc.Node) {
	last, still := -1.0, time.Now()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		n := survivorCounts(tb, survivors).requests
		if n != last {
			last, still = n, time.Now()
		} else if time.Since(still) >= 300*time.Millisecond {
			return
		}
	}
}
