package sim

import (
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/cluster"
)

var flagLeaseSeeds = flag.Int("sim.leaseseeds", 200, "how many seeds TestLeaseSim runs (-short: at most 40)")

// leaseSettings are the lease timings the simulation runs under: the
// design's defaults, the soak's 2 s lease, a cluster moving from the
// default lease to a longer one, its nodes on either (10 s or 20 s, margin
// 1 s and grace 2 s alike), the default lease read every 8 s, and a
// cluster of cluster.LargeCluster nodes at the defaults, whose nodes read
// the leases every TTL/3 or every 8 s as crashes take the count below 16
// or bring it back.
var leaseSettings = []struct {
	name               string
	ttl, margin, grace time.Duration
	long, observe      time.Duration
	nodes              int
}{
	{"defaults", 0, 0, 0, 0, 0, 0},
	{"ttl2s", 2 * time.Second, 400 * time.Millisecond, time.Second, 0, 0, 0},
	{"rolling10to20s", 10 * time.Second, time.Second, 2 * time.Second, 20 * time.Second, 0, 0},
	{"reads8s", 10 * time.Second, time.Second, 2 * time.Second, 0, 8 * time.Second, 0},
	{"large", 0, 0, 0, 0, 0, cluster.LargeCluster},
}

func leaseSeeds(t *testing.T) int {
	n := *flagLeaseSeeds
	if testing.Short() && n > 40 {
		n = 40
	}
	return n
}

// TestLeaseSim: under failed, lost-reply, late-landing and slow requests,
// pauses, partitions and crashes, no two nodes ever each hold a valid hold
// on one actor at the same instant; and the simulation reaches the cases
// the lease rides through (failed renewals with a hold still valid, late
// landings, lost replies, takeovers), so it cannot pass for want of them.
func TestLeaseSim(t *testing.T) {
	for _, set := range leaseSettings {
		t.Run(set.name, func(t *testing.T) {
			var sum LeaseResult
			var share float64
			n := leaseSeeds(t)
			if *flagSeed != 0 {
				r := RunLeases(LeaseConfig{Seed: *flagSeed, TTL: set.ttl, Margin: set.margin, Grace: set.grace, LongTTL: set.long, ObservePeriod: set.observe, Nodes: set.nodes, Trace: *flagTrace})
				t.Logf("seed %d: %+v\n%s", *flagSeed, r, strings.Join(r.Tail, "\n"))
				if r.Violation != "" {
					t.Fatal(r.Violation)
				}
				return
			}
			for seed := uint64(1); seed <= uint64(n); seed++ {
				r := RunLeases(LeaseConfig{Seed: seed, TTL: set.ttl, Margin: set.margin, Grace: set.grace, LongTTL: set.long, ObservePeriod: set.observe, Nodes: set.nodes})
				if r.Violation != "" {
					t.Fatalf("seed %d: %s (replay: go test ./sim -run 'TestLeaseSim/%s$' -sim.seed=%d -sim.trace -v)\n%s",
						seed, r.Violation, set.name, seed, strings.Join(r.Tail, "\n"))
				}
				sum.Renewals += r.Renewals
				sum.RenewalsFailed += r.RenewalsFailed
				sum.RodeThrough += r.RodeThrough
				sum.LostReplies += r.LostReplies
				sum.LateLandings += r.LateLandings
				sum.Takeovers += r.Takeovers
				sum.TakenOnJudgement += r.TakenOnJudgement
				sum.Acquired += r.Acquired
				sum.Lapses += r.Lapses
				sum.Crashes += r.Crashes
				sum.Readings += r.Readings
				sum.SlowReadings += r.SlowReadings
				sum.Omitted += r.Omitted
				share += r.ValidShare
			}
			t.Logf("%d seeds: %d renewals, %d failed (%d rode through with a valid hold), %d lost replies, %d late landings, %d holds taken (%d takeovers, %d of them on a judgement already made), %d lapses, %d crashes, %d of %d readings slow, %d keys left out of listings; lease valid %.2f%% of node time",
				n, sum.Renewals, sum.RenewalsFailed, sum.RodeThrough, sum.LostReplies, sum.LateLandings, sum.Acquired, sum.Takeovers, sum.TakenOnJudgement, sum.Lapses, sum.Crashes, sum.SlowReadings, sum.Readings, sum.Omitted, 100*share/float64(n))
			if sum.RodeThrough == 0 || sum.LostReplies == 0 || sum.LateLandings == 0 || sum.Acquired < n || sum.Omitted == 0 || sum.TakenOnJudgement == 0 {
				t.Fatalf("the simulation did not reach the cases it is for: %+v", sum)
			}
			if set.nodes >= cluster.LargeCluster && (sum.SlowReadings == 0 || sum.SlowReadings == sum.Readings) {
				t.Fatalf("the large cluster's nodes did not read the leases both ways (every renewal period, and every 8 s): %d slow readings of %d", sum.SlowReadings, sum.Readings)
			}
		})
	}
}

// TestLeaseSimCatchesTrustingUnconfirmedRenewals: the unsafe variant, in
// which a renewal that failed without landing extends validity as if it
// had been confirmed, lets a node act past the last confirmed window; the
// simulation catches it within a few seeds.
func TestLeaseSimCatchesTrustingUnconfirmedRenewals(t *testing.T) {
	for _, set := range leaseSettings {
		t.Run(set.name, func(t *testing.T) {
			for seed := uint64(1); seed <= 20; seed++ {
				r := RunLeases(LeaseConfig{Seed: seed, TTL: set.ttl, Margin: set.margin, Grace: set.grace, LongTTL: set.long, ObservePeriod: set.observe, Nodes: set.nodes, TrustUnconfirmed: true})
				if r.Violation != "" {
					t.Logf("seed %d caught it: %s", seed, r.Violation)
					return
				}
			}
			t.Fatal("20 seeds did not catch a node trusting unconfirmed renewals")
		})
	}
}

// TestLeaseSimCatchesTrustingListedAbsence: the unsafe variant, in which
// a node lease that one listing left out is taken for removed without a
// read of its key, lets a node take the holds of a node that still acts
// (its lease was being renewed, and an erasure-coded store's listing left
// it out); the simulation catches it within a few seeds.
func TestLeaseSimCatchesTrustingListedAbsence(t *testing.T) {
	for _, set := range leaseSettings {
		t.Run(set.name, func(t *testing.T) {
			for seed := uint64(1); seed <= 20; seed++ {
				r := RunLeases(LeaseConfig{Seed: seed, TTL: set.ttl, Margin: set.margin, Grace: set.grace, LongTTL: set.long, ObservePeriod: set.observe, Nodes: set.nodes, TrustListedAbsence: true})
				if r.Violation != "" {
					t.Logf("seed %d caught it: %s", seed, r.Violation)
					return
				}
			}
			t.Fatal("20 seeds did not catch a node taking a lease a listing left out for removed")
		})
	}
}

// TestLeaseSimCatchesJudgingByOwnTTL: while nodes run on leases of
// different TTLs (a cluster moving to a longer lease at scale), a node
// must judge another node's lease by the TTL written in it. The unsafe
// variant, a reader that takes every lease to name its own TTL, lets a
// node on the 10 s lease take the holds of a node on the 20 s lease while
// that node still acts; the simulation catches it within a few seeds.
func TestLeaseSimCatchesJudgingByOwnTTL(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		r := RunLeases(LeaseConfig{Seed: seed, TTL: 10 * time.Second, Margin: time.Second, Grace: 2 * time.Second,
			LongTTL: 20 * time.Second, JudgeByOwnTTL: true})
		if r.Violation != "" {
			t.Logf("seed %d caught it: %s", seed, r.Violation)
			return
		}
	}
	t.Fatal("20 seeds did not catch a node judging other leases by its own TTL")
}
