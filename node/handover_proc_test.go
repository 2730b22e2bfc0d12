package node_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/internal/clusterproc"
	"github.com/wasmkeep/alarms/internal/s3test"
	"github.com/wasmkeep/alarms/internal/testguest"
)

// A SIGTERMed node hands its alarms over at once: three keepnode processes
// on versitygw at the default timings (lease 10 s, grace 2 s, sweep 10 s);
// node0 holds 60 idle actors whose alarms come due from its SIGTERM on,
// over 20 s. Its shutdown releases them and deletes its lease; the others
// see the lease removed, walk the tenant at once with no margin, and their
// timers take the alarms of their shards. Each alarm fires once, on a
// survivor, within one sweep period and a second of the later of its due
// time and the lease's removal. Before, the survivors found them only a
// margin (lease + grace, 12 s) overdue, at their next sweep: 12 to 22 s
// late.
//
// A request runs on node0 through its SIGTERM (a guest that loops until
// its 8 s event deadline), so its HTTP server's shutdown waits for it
// while alarms come due: none may start on node0 once it was told to stop.
// Before, its timer ran until the server had stopped, and under load 7 of
// the 60 fired there.
func TestASIGTERMedNodesAlarmsFireOnTheOthersAtOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rec := &swFirings{}
	timings := swTimings{ttl: 10 * time.Second, margin: time.Second, grace: 2 * time.Second, sweep: 10 * time.Second}
	cfg, srv := swProcCluster(t, ctx, rec, timings)
	cfg.Flags = append(cfg.Flags, "-metrics-addr", "127.0.0.1:0", "-event-deadline", "hostile=8s")
	hostile := filepath.Join(cfg.Dir, "hostile.wasm")
	if err := os.WriteFile(hostile, testguest.Fixture(t, "hostile"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.Classes["hostile"] = hostile
	nodes := startProcNodes(t, ctx, cfg, 3)
	victim, survivors := nodes[0], nodes[1:]

	const actors = 60
	spread := 20 * time.Second
	base := swArmBy(t, ctx, victim.URL, actors)
	due := map[abi.ActorID]int64{}
	for i := range actors {
		due[swOneshot(i)] = base.UnixMilli() + int64(i)*spread.Milliseconds()/actors
	}
	swArm(t, ctx, victim.URL, due)
	if time.Until(base) < 0 {
		t.Fatalf("arming took until %v after the first alarm was due (is the machine overloaded?)", -time.Until(base))
	}
	// A request in flight through the SIGTERM: the guest loops until its
	// event deadline.
	slow, cancelSlow := context.WithCancel(ctx)
	defer cancelSlow()
	go func() {
		// It fails at its deadline, or as node0 stops.
		_, _ = clusterproc.ClientOf(victim.URL).Exec(slow, abi.ActorID{Tenant: "t", Class: "hostile", Name: "slow"}, []byte("l"))
	}()
	for deadline := time.Now().Add(30 * time.Second); scrapeMetrics(t, victim.MetricsURL).Value("wasmkeep_guest_slots_busy") < 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the looping request never started on node0")
		}
	}
	stopAt := time.Now()
	if err := victim.Stop(); err != nil {
		t.Fatal(err)
	}
	removed := time.Now() // the lease is deleted before the process exits
	t.Logf("SIGTERM %v before the first alarm; the node exited %v after it", base.Sub(stopAt).Round(time.Millisecond), removed.Sub(stopAt).Round(time.Millisecond))

	out := swCollect(rec, victim.Name, due, base.Add(spread+time.Minute))
	checkHandedOver(t, out, removed, timings.sweep+time.Second, "the lease's removal", survivors, srv)
}

// A SIGKILLed node's alarms fire on time once its lease is judged expired:
// three keepnode processes on versitygw at the default timings (lease 10
// s, grace 2 s, sweep 10 s); node0 holds 60 idle actors whose alarms come
// due over 20 s, from at least 25 s after its SIGKILL. The survivors judge
// its lease expired at a reading once the last renewal they saw stood TTL
// + grace (18.7 s after the kill at the latest, with a reading every third
// of the TTL: one to see it, one to judge), walk the tenant at once with
// no margin, and their timers take
// the alarms of their shards at their due times. Each alarm fires once, on
// a survivor, within 3 s of the later of its due time and the latest
// such judgement. Before, the survivors found them only a margin (12 s)
// overdue, at their next sweep: 12 to 22 s late.
func TestASIGKILLedNodesAlarmsFireOnTimeOnceItsLeaseExpired(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rec := &swFirings{}
	timings := swDefaults
	cfg, srv := swProcCluster(t, ctx, rec, timings)
	cfg.Flags = append(cfg.Flags, "-metrics-addr", "127.0.0.1:0")
	nodes := startProcNodes(t, ctx, cfg, 3)
	victim, survivors := nodes[0], nodes[1:]

	const actors = 60
	due, base := swArmAndKill(t, ctx, victim, actors, 20*time.Second, 25*time.Second)
	judged := time.Now().Add(timings.ttl + timings.grace + 2*timings.ttl/3 + time.Second/2)
	out := swCollect(rec, victim.Name, due, base.Add(20*time.Second+time.Minute))
	checkHandedOver(t, out, judged, 3*time.Second, "the latest judgement of the lease's expiry", survivors, srv)
}

// checkHandedOver checks that the alarms of a node that left fired once
// each, on the survivors, each within bound of the later of its due time
// and since (what, in the messages); that the survivors made a handover
// walk; and that the index holds no entry once they fired.
func checkHandedOver(t *testing.T, out swOutcome, since time.Time, bound time.Duration, what string, survivors []*clusterproc.Node, srv *s3test.Server) {
	t.Helper()
	t.Logf("%v", out)
	if len(out.lost) > 0 || len(out.early) > 0 || out.dups > 0 {
		t.Fatalf("%d lost, %d fired on the node that left, %d fired twice", len(out.lost), len(out.early), out.dups)
	}
	var late []time.Duration
	for _, f := range out.first {
		from := max(f.scheduled, since.UnixMilli())
		late = append(late, time.Duration(f.fired-from)*time.Millisecond)
	}
	slices.Sort(late)
	t.Logf("fired after the later of its due time and %s: p50 %v, p99 %v, max %v (bound %v)",
		what, pct(late, 50), pct(late, 99), pct(late, 100), bound)
	if worst := pct(late, 100); worst > bound+out.clockStep {
		t.Errorf("an alarm fired %v after the later of its due time and %s, want at most %v", worst, what, bound)
	}
	handovers := 0.0
	for _, n := range survivors {
		handovers += scrapeMetrics(t, n.MetricsURL).Value("wasmkeep_sweep_handovers_total")
	}
	if handovers < 1 {
		t.Errorf("the survivors made %v handover walks, want at least one", handovers)
	}
	if left := swIndexSettled(t, srv.Bucket, 0); len(left) > 0 {
		t.Errorf("%d index entries left after every alarm fired, such as %v", len(left), left[:min(3, len(left))])
	}
}
