package cluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/bucket/s3"
	"github.com/wasmkeep/alarms/clock"
	"github.com/wasmkeep/alarms/cluster"
	"github.com/wasmkeep/alarms/format"
	"github.com/wasmkeep/alarms/internal/fakeclock"
	"github.com/wasmkeep/alarms/internal/s3test"
)

func TestMain(m *testing.M) { os.Exit(s3test.Run(m)) }

var t0 = time.Date(2026, 11, 7, 12, 0, 0, 0, time.UTC)

// startManual starts a lease driven by hand (RenewNow, RefreshNow).
func startManual(t *testing.T, b bucket.Bucket, clk clock.Clock, id string, tweak ...func(*cluster.LeaseConfig)) *cluster.Leases {
	t.Helper()
	cfg := cluster.LeaseConfig{Bucket: b, NodeID: id, Addr: id + ".example:7000", Clock: clk, Manual: true}
	for _, f := range tweak {
		f(&cfg)
	}
	l, err := cluster.StartLeases(context.Background(), cfg)
	if err != nil {
		t.Fatalf("StartLeases(%s): %v", id, err)
	}
	return l
}

// onBoth runs a scenario on the in-memory bucket and on a real S3 server.
func onBoth(t *testing.T, f func(t *testing.T, b bucket.Bucket)) {
	t.Run("mem", func(t *testing.T) { f(t, bucket.NewMem()) })
	t.Run("s3", func(t *testing.T) { f(t, s3test.Start(t).Bucket) })
}

// nodeClock is one machine's view of the test's real time (a fakeclock.Clock):
// offset by an arbitrary wall-clock error and running at its own rate.
type nodeClock struct {
	ref    *fakeclock.Clock
	origin time.Time // ref's reading when the clock was made
	base   time.Time // this clock's reading then
	rate   float64
}

func newNodeClock(ref *fakeclock.Clock, offset time.Duration, rate float64) nodeClock {
	return nodeClock{ref: ref, origin: ref.Now(), base: ref.Now().Add(offset), rate: rate}
}

func (c nodeClock) Now() time.Time {
	return c.base.Add(time.Duration(float64(c.ref.Now().Sub(c.origin)) * c.rate))
}

func (c nodeClock) After(d time.Duration) <-chan time.Time {
	return c.ref.After(time.Duration(float64(d) / c.rate))
}

func containsNode(nodes []cluster.NodeInfo, id string) bool {
	return slices.ContainsFunc(nodes, func(n cluster.NodeInfo) bool { return n.ID == id })
}

// TestMarginsKilledHolderStopsBeforeTakerMayTake runs the margins with a
// killed holder and a taker that first sees the holder's last renewal the
// instant it lands (the worst case), with clocks hours apart and drifting in
// the unsafe direction by up to MaxClockDrift. At every step the holder is
// valid exactly until its last renewal's send time + TTL - Margin on its own
// clock, the taker judges it expired exactly from first sight + TTL + Grace on
// its own clock, and the two are never true at once.
func TestMarginsKilledHolderStopsBeforeTakerMayTake(t *testing.T) {
	const d = cluster.MaxClockDrift
	cases := []struct {
		name                      string
		ttl, margin, grace        time.Duration
		holderRate, takerRate     float64
		holderOffset, takerOffset time.Duration
	}{
		{name: "defaults, same clock", holderRate: 1, takerRate: 1},
		{name: "defaults, offsets, holder slow, taker fast", holderRate: 1 - d, takerRate: 1 + d, holderOffset: 5 * time.Hour, takerOffset: -3 * time.Hour},
		{name: "defaults, holder fast, taker slow", holderRate: 1 + d, takerRate: 1 - d, holderOffset: -time.Minute},
		{name: "tight margins at the drift bound", ttl: 10 * time.Second, margin: 150 * time.Millisecond, grace: 100 * time.Millisecond, holderRate: 1 - d, takerRate: 1 + d, takerOffset: time.Hour},
		{name: "large margin, tiny grace", ttl: 10 * time.Second, margin: 3 * time.Second, grace: time.Millisecond, holderRate: 1 - d, takerRate: 1 + d},
		{name: "short ttl", ttl: 300 * time.Millisecond, margin: 30 * time.Millisecond, grace: 60 * time.Millisecond, holderRate: 1 - d, takerRate: 1 + d, holderOffset: 24 * time.Hour},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ttl, margin, grace := tc.ttl, tc.margin, tc.grace
			if ttl == 0 {
				ttl, margin, grace = cluster.DefaultTTL, cluster.DefaultMargin, cluster.DefaultGrace
			}
			set := func(c *cluster.LeaseConfig) { c.TTL, c.Margin, c.Grace = ttl, margin, grace }
			ref := fakeclock.New(t0)
			hc := newNodeClock(ref, tc.holderOffset, tc.holderRate)
			tk := newNodeClock(ref, tc.takerOffset, tc.takerRate)
			b := bucket.NewMem()
			ctx := context.Background()
			a := startManual(t, b, hc, "a", set)
			taker := startManual(t, b, tk, "b", set)
			if err := taker.RefreshNow(ctx); err != nil {
				t.Fatal(err)
			}

			ref.Advance(ttl / 3)
			sent := hc.Now()
			if err := a.RenewNow(ctx); err != nil {
				t.Fatal(err)
			}
			invalidAt := sent.Add(ttl - margin) // holder's clock
			if got := a.ValidUntil(); !got.Equal(invalidAt) {
				t.Fatalf("ValidUntil = %v, want last send + TTL - Margin = %v", got, invalidAt)
			}
			a.Kill()
			if err := taker.RefreshNow(ctx); err != nil {
				t.Fatal(err)
			}
			expiredAt := tk.Now().Add(ttl + grace) // taker's clock, from first sight

			step := ttl / 2000
			var invalidRef, expiredRef time.Time
			for i := 0; expiredRef.IsZero(); i++ {
				if i > 4000 {
					t.Fatal("the taker never judged the killed holder expired")
				}
				ref.Advance(step)
				if err := taker.RefreshNow(ctx); err != nil {
					t.Fatal(err)
				}
				valid, expired := a.Valid(), taker.Expired("a")
				if valid && expired {
					t.Fatalf("at %v after the kill the holder is still valid and the taker judges it expired", ref.Now().Sub(t0))
				}
				if want := hc.Now().Before(invalidAt); valid != want {
					t.Fatalf("holder Valid() = %v at its %v, want %v (until %v)", valid, hc.Now(), want, invalidAt)
				}
				if want := !tk.Now().Before(expiredAt); expired != want {
					t.Fatalf("taker Expired = %v at its %v, want %v (from %v)", expired, tk.Now(), want, expiredAt)
				}
				if live := containsNode(taker.Live(), "a"); live == expired {
					t.Fatalf("taker Live() lists the holder = %v while Expired = %v", live, expired)
				}
				if !valid && invalidRef.IsZero() {
					invalidRef = ref.Now()
				}
				if expired {
					expiredRef = ref.Now()
				}
			}
			if invalidRef.IsZero() || !invalidRef.Before(expiredRef) {
				t.Fatalf("holder stopped at %v, taker may take at %v: not strictly before", invalidRef, expiredRef)
			}
			t.Logf("holder stopped %v before the taker may take", expiredRef.Sub(invalidRef))
		})
	}
}

// TestLeaseConfigValidation: unsafe or unusable margins are refused before
// anything is written.
func TestLeaseConfigValidation(t *testing.T) {
	s := time.Second
	ms := time.Millisecond
	cases := []struct {
		name                       string
		ttl, margin, grace, period time.Duration
		noID                       bool
		id                         string
		wantErr                    string // "" = accepted
	}{
		{name: "defaults"},
		{name: "negative grace", grace: -ms, wantErr: "Grace"},
		{name: "negative margin", margin: -ms, wantErr: "Margin"},
		{name: "negative ttl", ttl: -s, wantErr: "TTL"},
		{name: "negative period", period: -s, wantErr: "Period"},
		{name: "margin eats the ttl", ttl: s, margin: s, wantErr: "Margin"},
		{name: "period too long", ttl: 3 * s, margin: s, period: 2 * s, wantErr: "Period"},
		{name: "margins below the drift bound", ttl: 10 * s, margin: 100 * ms, grace: 99 * ms, wantErr: "drift"},
		{name: "margins just above the drift bound", ttl: 10 * s, margin: 150 * ms, grace: 100 * ms},
		{name: "short ttl", ttl: 300 * ms, margin: 30 * ms, grace: 60 * ms},
		{name: "no node ID", noID: true, wantErr: "node ID"},
		{name: "slash in node ID", id: "a/b", wantErr: "'/'"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := bucket.NewMem()
			cfg := cluster.LeaseConfig{Bucket: b, NodeID: "n1", TTL: tc.ttl, Margin: tc.margin, Grace: tc.grace, Period: tc.period,
				Clock: fakeclock.New(t0), Manual: true}
			if tc.noID {
				cfg.NodeID = ""
			}
			if tc.id != "" {
				cfg.NodeID = tc.id
			}
			l, err := cluster.StartLeases(context.Background(), cfg)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if !l.Valid() {
					t.Fatal("a fresh lease is not valid")
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want one mentioning %q", err, tc.wantErr)
			}
			if keys := b.Keys(); len(keys) != 0 {
				t.Fatalf("a refused config wrote %v", keys)
			}
		})
	}
}

// TestNewNodeWatchesTTLPlusGrace: a node that starts long after another
// died still watches that node's lease for TTL + Grace before judging it.
func TestNewNodeWatchesTTLPlusGrace(t *testing.T) {
	onBoth(t, func(t *testing.T, b bucket.Bucket) {
		ctx := context.Background()
		clk := fakeclock.New(t0)
		a := startManual(t, b, clk, "a")
		a.Kill()
		clk.Advance(time.Hour)
		if a.Valid() {
			t.Fatal("a killed node is valid an hour later")
		}
		c := startManual(t, b, clk, "c")
		if err := c.RefreshNow(ctx); err != nil {
			t.Fatal(err)
		}
		watch := cluster.DefaultTTL + cluster.DefaultGrace
		clk.Advance(watch - time.Millisecond)
		if err := c.RefreshNow(ctx); err != nil {
			t.Fatal(err)
		}
		if c.Expired("a") {
			t.Fatal("expired after watching less than TTL + Grace")
		}
		if !containsNode(c.Live(), "a") {
			t.Fatal("Live() dropped a node before TTL + Grace of watching")
		}
		clk.Advance(time.Millisecond)
		if err := c.RefreshNow(ctx); err != nil {
			t.Fatal(err)
		}
		if !c.Expired("a") {
			t.Fatal("not expired after watching TTL + Grace")
		}
		if containsNode(c.Live(), "a") {
			t.Fatal("Live() still lists an expired node")
		}
		if c.Expired("never-seen") {
			t.Fatal("a node never observed counts as expired")
		}
	})
}

// TestADeadNodeDepartsOnceJudgedExpired: a node that stopped renewing is
// sent to Departures when a reading first judges its lease expired (so the
// sweep walks its alarms at once, not a margin late), not before, and once.
func TestADeadNodeDepartsOnceJudgedExpired(t *testing.T) {
	onBoth(t, func(t *testing.T, b bucket.Bucket) {
		ctx := context.Background()
		clk := fakeclock.New(t0)
		a := startManual(t, b, clk, "a")
		o := startManual(t, b, clk, "o")
		departed := func() []string {
			var ids []string
			for {
				select {
				case id := <-o.Departures():
					ids = append(ids, id)
				default:
					return ids
				}
			}
		}
		refresh := func() {
			t.Helper()
			if err := o.RefreshNow(ctx); err != nil {
				t.Fatal(err)
			}
		}
		refresh()
		a.Kill()
		watch := cluster.DefaultTTL + cluster.DefaultGrace
		for range 4 { // up to just short of TTL + Grace, a reading each quarter
			clk.Advance(watch/4 - time.Millisecond)
			refresh()
			if ids := departed(); len(ids) != 0 || o.Expired("a") {
				t.Fatalf("at %v: departures %v, expired %v; want none before TTL + Grace", clk.Now().Sub(t0), ids, o.Expired("a"))
			}
		}
		clk.Advance(4 * time.Millisecond)
		refresh()
		if !o.Expired("a") {
			t.Fatal("not expired after TTL + Grace")
		}
		if ids := departed(); !slices.Equal(ids, []string{"a"}) {
			t.Fatalf("departures once judged expired: %v, want [a]", ids)
		}
		clk.Advance(watch)
		refresh()
		if ids := departed(); len(ids) != 0 {
			t.Fatalf("departures at the next readings of the same version: %v, want none", ids)
		}
	})
}

// TestCloseFreesAtOnce: a clean shutdown removes the lease, so others judge
// the node expired at the next read, without waiting.
func TestCloseFreesAtOnce(t *testing.T) {
	onBoth(t, func(t *testing.T, b bucket.Bucket) {
		ctx := context.Background()
		clk := fakeclock.New(t0)
		a := startManual(t, b, clk, "a")
		o := startManual(t, b, clk, "o")
		if err := o.RefreshNow(ctx); err != nil {
			t.Fatal(err)
		}
		if got := o.Live(); !containsNode(got, "a") || !containsNode(got, "o") {
			t.Fatalf("Live() = %v, want a and o", got)
		}
		if addr, ok := o.Addr("a"); !ok || addr != "a.example:7000" {
			t.Fatalf("Addr(a) = %q, %v", addr, ok)
		}
		select {
		case id := <-o.Departures():
			t.Fatalf("departure of %q while every node is live", id)
		default:
		}
		if err := a.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if a.Valid() {
			t.Fatal("a closed node is valid")
		}
		if _, _, err := b.Get(ctx, "cluster/nodes/a"); !errors.Is(err, bucket.ErrNotFound) {
			t.Fatalf("lease object after Close: err = %v, want not found", err)
		}
		if err := o.RefreshNow(ctx); err != nil {
			t.Fatal(err)
		}
		if !o.Expired("a") || containsNode(o.Live(), "a") {
			t.Fatalf("after a's Close: Expired = %v, Live = %v", o.Expired("a"), o.Live())
		}
		// The sweep learns of it at once (a handover walk), once.
		select {
		case id := <-o.Departures():
			if id != "a" {
				t.Fatalf("departure of %q, want a", id)
			}
		default:
			t.Fatal("no departure after a's lease was seen removed")
		}
		if err := o.RefreshNow(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case id := <-o.Departures():
			t.Fatalf("a second departure (%q) for one removed lease", id)
		default:
		}
		if _, ok := o.Addr("a"); ok {
			t.Fatal("Addr still known for a closed node")
		}
		if err := a.RenewNow(ctx); err == nil {
			t.Fatal("a closed node renewed")
		}
	})
}

// faultyMem is a Mem whose PUTs to one key can be made to fail, be slow or
// land late, on the fake clock.
type faultyMem struct {
	*bucket.Mem
	key   string
	mode  atomic.Int32 // 0 none, 1 error, 2 delay, 3 late, 4 precondition failed, not applied
	delay atomic.Int64
}

func newFaultyMem(clk *fakeclock.Clock, key string) *faultyMem {
	f := &faultyMem{Mem: bucket.NewMem(), key: key}
	f.Mem.Sleep = clk.Sleep
	f.Mem.Faults = func(op bucket.Op) bucket.Fault {
		if op.Kind != bucket.OpPut || op.Key != f.key {
			return bucket.Fault{}
		}
		switch f.mode.Load() {
		case 1:
			return bucket.Fault{Err: errors.New("injected: connection reset")}
		case 2:
			return bucket.Fault{Delay: time.Duration(f.delay.Load())}
		case 3:
			return bucket.Fault{Late: true}
		case 4:
			return bucket.Fault{Err: fmt.Errorf("injected: %w", bucket.ErrPrecondition)}
		}
		return bucket.Fault{}
	}
	return f
}

// TestFailedRenewalRidesThrough: a failed renewal does not end validity:
// the node stays valid, its holds with it, until the window of the last
// confirmed renewal ends, and a success before then continues the chain
// (same epoch, the hold still valid). Failures until the window ends make
// it lapse; a success after that starts a new epoch, in which the old hold
// is void.
func TestFailedRenewalRidesThrough(t *testing.T) {
	ctx := context.Background()
	clk := fakeclock.New(t0)
	b := newFaultyMem(clk, "cluster/nodes/a")
	a := startNode(t, b, clk, "a") // created at t0: valid until t0 + 9 s
	h := acquire(t, a, actorX)
	b.mode.Store(1)
	for _, at := range []time.Duration{time.Second, 4 * time.Second, 7 * time.Second} {
		clk.Advance(at - clk.Now().Sub(t0))
		if err := a.RenewNow(ctx); err == nil || !strings.Contains(err.Error(), "node a") {
			t.Fatalf("renewal at +%v with a failing PUT: err = %v, want an error naming node a", at, err)
		}
		if !a.Valid() || !a.ValidUntil().Equal(t0.Add(9*time.Second)) || !a.holds.Valid(h) {
			t.Fatalf("after a failed renewal at +%v: Valid = %v, ValidUntil = %v (want t0 + 9 s), hold valid = %v",
				at, a.Valid(), a.ValidUntil(), a.holds.Valid(h))
		}
	}
	b.mode.Store(0)
	clk.Advance(time.Second) // t0 + 8 s, before the window ends
	if err := a.RenewNow(ctx); err != nil {
		t.Fatal(err)
	}
	if want := t0.Add(17 * time.Second); !a.ValidUntil().Equal(want) || !a.holds.Valid(h) {
		t.Fatalf("after a success within the window: ValidUntil = %v (want %v), hold valid = %v", a.ValidUntil(), want, a.holds.Valid(h))
	}

	// Failures until that window ends: the lease lapses at t0 + 17 s.
	b.mode.Store(1)
	for clk.Now().Before(t0.Add(17 * time.Second)) {
		if !a.Valid() || !a.holds.Valid(h) {
			t.Fatalf("not valid at %v, before the confirmed window ends", clk.Now().Sub(t0))
		}
		_ = a.RenewNow(ctx)
		clk.Advance(3 * time.Second)
	}
	if a.Valid() || a.holds.Valid(h) {
		t.Fatalf("at +%v, past the last confirmed window: Valid = %v, hold valid = %v", clk.Now().Sub(t0), a.Valid(), a.holds.Valid(h))
	}
	b.mode.Store(0)
	if err := a.RenewNow(ctx); err != nil {
		t.Fatal(err)
	}
	if !a.Valid() || a.holds.Valid(h) {
		t.Fatalf("renewed after lapsing: Valid = %v (want true), old hold valid = %v (want false: a new epoch)", a.Valid(), a.holds.Valid(h))
	}
}

// TestSlowRenewal: validity counts from when the renewal was sent, and a
// renewal answered after the validity it would extend ran out extends
// nothing.
func TestSlowRenewal(t *testing.T) {
	ctx := context.Background()
	clk := fakeclock.New(t0)
	b := newFaultyMem(clk, "cluster/nodes/a")
	a := startManual(t, b, clk, "a")
	clk.Advance(3 * time.Second)
	b.mode.Store(2)
	b.delay.Store(int64(2 * time.Second))
	sent := clk.Now()
	if err := a.RenewNow(ctx); err != nil {
		t.Fatal(err)
	}
	if want := sent.Add(9 * time.Second); !a.ValidUntil().Equal(want) {
		t.Fatalf("ValidUntil = %v, want send time + TTL - Margin = %v", a.ValidUntil(), want)
	}
	// Now a renewal that takes 9.5 s: answered after validity ran out (at
	// sent + 9 s), so the chain is broken and it cannot revive the lease
	// either (it would last only until its own send + 9 s).
	b.delay.Store(int64(9500 * time.Millisecond))
	if err := a.RenewNow(ctx); err == nil {
		t.Fatal("a renewal answered after its own validity succeeded")
	}
	if a.Valid() {
		t.Fatal("valid after a renewal answered too late")
	}
}

// TestLateRenewalIsAdopted: a renewal that failed to its caller but landed
// later makes the next renewal's If-Match fail; the node recognises its own
// write, renews on top of it and stays a member.
func TestLateRenewalIsAdopted(t *testing.T) {
	ctx := context.Background()
	clk := fakeclock.New(t0)
	m := newFaultyMem(clk, "cluster/nodes/a")
	b := bucket.NewCounting(m)
	a := startManual(t, b, clk, "a")
	clk.Advance(time.Second)
	m.mode.Store(3)
	if err := a.RenewNow(ctx); err == nil {
		t.Fatal("a timed-out renewal succeeded")
	}
	if !a.Valid() || !a.ValidUntil().Equal(t0.Add(9*time.Second)) {
		t.Fatalf("after a timed-out renewal: Valid = %v, ValidUntil = %v; want the creating PUT's window (t0 + 9 s)", a.Valid(), a.ValidUntil())
	}
	m.mode.Store(0)
	if n := m.ApplyLate(); n != 1 {
		t.Fatalf("ApplyLate applied %d", n)
	}
	b.Reset()
	clk.Advance(time.Second)
	if err := a.RenewNow(ctx); err != nil {
		t.Fatalf("renewal after our own late write landed: %v", err)
	}
	if want := t0.Add(11 * time.Second); !a.Valid() || !a.ValidUntil().Equal(want) {
		t.Fatalf("after renewing on top of our own late write: Valid = %v, ValidUntil = %v, want %v", a.Valid(), a.ValidUntil(), want)
	}
	if got, want := b.Counts(), (bucket.Counts{Put: 2, Get: 1}); got != want {
		t.Fatalf("requests = %+v, want %+v (failed PUT, read back, PUT)", got, want)
	}
}

// TestAPreconditionFailedOnOurOwnVersionKeepsTheLease: an erasure-coded
// server (MinIO) fails a renewal's If-Match while a write of ours that
// timed out is still being applied, and the read back shows the version
// we last confirmed. No one else wrote the object: the renewal failed,
// the node stays valid on its last confirmed window, and the next renewal
// continues the chain. (Taking it for another writer stopped the node for
// good, and under load every node of a cluster.)
func TestAPreconditionFailedOnOurOwnVersionKeepsTheLease(t *testing.T) {
	ctx := context.Background()
	clk := fakeclock.New(t0)
	m := newFaultyMem(clk, "cluster/nodes/a")
	b := bucket.NewCounting(m)
	a := startManual(t, b, clk, "a") // valid until t0 + 9 s
	clk.Advance(time.Second)
	m.mode.Store(4)
	b.Reset()
	err := a.RenewNow(ctx)
	if err == nil || errors.Is(err, cluster.ErrLeaseLost) || !strings.Contains(err.Error(), "node a") {
		t.Fatalf("renewal failing its precondition on our own version: err = %v, want a failed renewal naming node a, not ErrLeaseLost", err)
	}
	if !a.Valid() || !a.ValidUntil().Equal(t0.Add(9*time.Second)) {
		t.Fatalf("after it: Valid = %v, ValidUntil = %v; want the creating PUT's window (t0 + 9 s)", a.Valid(), a.ValidUntil())
	}
	if got, want := b.Counts(), (bucket.Counts{Put: 1, Get: 1}); got != want {
		t.Fatalf("requests = %+v, want %+v (the PUT, the read back)", got, want)
	}
	m.mode.Store(0)
	clk.Advance(time.Second)
	if err := a.RenewNow(ctx); err != nil {
		t.Fatalf("the next renewal: %v", err)
	}
	if want := t0.Add(11 * time.Second); !a.Valid() || !a.ValidUntil().Equal(want) {
		t.Fatalf("after the next renewal: Valid = %v, ValidUntil = %v, want %v (the chain goes on)", a.Valid(), a.ValidUntil(), want)
	}
}

// splitStore is a store whose writes find no object at one key where its
// reads find one, as an erasure-coded MinIO keeps a key after a write
// failed part way: every If-Match on it fails as on a missing key, and an
// If-None-Match passes.
type splitStore struct {
	bucket.Bucket
	key   string
	split atomic.Bool
}

func (s *splitStore) Put(ctx context.Context, key string, body []byte, cond bucket.Cond) (string, error) {
	if key == s.key && s.split.Load() {
		if cond.IfMatch != "" {
			return "", fmt.Errorf("%w: If-Match on a missing key: %w", bucket.ErrPrecondition, bucket.ErrNotFound)
		}
		if cond.IfNoneMatch {
			s.split.Store(false) // written on every drive again
			cond = bucket.Cond{}
		}
	}
	return s.Bucket.Put(ctx, key, body, cond)
}

// TestALeaseTheStoreReadsButCannotWriteIsCreatedAnew: when the store's
// writes find no lease object where its reads find our own version, the
// node creates it anew with If-None-Match and its lease goes on; it does
// not stay stuck with every renewal failing.
func TestALeaseTheStoreReadsButCannotWriteIsCreatedAnew(t *testing.T) {
	ctx := context.Background()
	clk := fakeclock.New(t0)
	s := &splitStore{Bucket: bucket.NewMem(), key: "cluster/nodes/a"}
	a := startManual(t, s, clk, "a") // valid until t0 + 9 s
	s.split.Store(true)
	clk.Advance(time.Second)
	if err := a.RenewNow(ctx); err != nil {
		t.Fatalf("renewal on a store whose writes do not find the lease: %v", err)
	}
	if want := t0.Add(10 * time.Second); !a.Valid() || !a.ValidUntil().Equal(want) {
		t.Fatalf("after it: Valid = %v, ValidUntil = %v, want %v", a.Valid(), a.ValidUntil(), want)
	}
	clk.Advance(time.Second)
	if err := a.RenewNow(ctx); err != nil {
		t.Fatalf("the next renewal, If-Match the version created anew: %v", err)
	}
}

// TestReplacedLeaseStops: when someone else writes or removes a node's lease
// object, the node stops for good.
func TestReplacedLeaseStops(t *testing.T) {
	for _, how := range []string{"replaced", "removed"} {
		t.Run(how, func(t *testing.T) {
			onBoth(t, func(t *testing.T, b bucket.Bucket) {
				ctx := context.Background()
				clk := fakeclock.New(t0)
				a := startManual(t, b, clk, "a")
				var err error
				if how == "replaced" {
					_, err = b.Put(ctx, "cluster/nodes/a", []byte(`{"node_id":"intruder","seq":1}`), bucket.Cond{})
				} else {
					err = b.Delete(ctx, "cluster/nodes/a")
				}
				if err != nil {
					t.Fatal(err)
				}
				for i := 0; i < 2; i++ {
					if err := a.RenewNow(ctx); !errors.Is(err, cluster.ErrLeaseLost) {
						t.Fatalf("renewal %d: err = %v, want ErrLeaseLost", i, err)
					}
					if a.Valid() {
						t.Fatal("valid after losing the lease object")
					}
				}
			})
		})
	}
}

// TestRequestCounts: a renewal is one PUT; the first observation round is
// one LIST and one GET per other node, and a round after the others renewed
// is the LIST alone: their new ETags say they are alive. On memory and on
// the S3 server.
func TestRequestCounts(t *testing.T) {
	onBoth(t, func(t *testing.T, inner bucket.Bucket) { requestCounts(t, bucket.NewCounting(inner)) })
}

func requestCounts(t *testing.T, b *bucket.Counting) {
	ctx := context.Background()
	clk := fakeclock.New(t0)
	a := startManual(t, b, clk, "a")
	others := []*cluster.Leases{startManual(t, b, clk, "b"), startManual(t, b, clk, "c")}
	b.Reset()
	if err := a.RenewNow(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := b.Counts(), (bucket.Counts{Put: 1}); got != want {
		t.Fatalf("renewal: %+v, want %+v", got, want)
	}
	b.Reset()
	if err := a.RefreshNow(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := b.Counts(), (bucket.Counts{List: 1, ListPages: 1, Get: 2}); got != want {
		t.Fatalf("first observation round: %+v, want %+v", got, want)
	}
	if got := a.Live(); len(got) != 3 {
		t.Fatalf("Live() = %v, want a, b, c", got)
	}
	for round := range 10 {
		clk.Advance(cluster.DefaultTTL / 3)
		for _, l := range append(others, a) {
			if err := l.RenewNow(ctx); err != nil {
				t.Fatal(err)
			}
		}
		b.Reset()
		if err := a.RefreshNow(ctx); err != nil {
			t.Fatal(err)
		}
		if got, want := b.Counts(), (bucket.Counts{List: 1, ListPages: 1}); got != want {
			t.Fatalf("observation round %d after renewals: %+v, want %+v", round+2, got, want)
		}
		if got := a.Live(); len(got) != 3 {
			t.Fatalf("round %d: Live() = %v, want a, b, c", round+2, got)
		}
	}
}

// TestRetriedRenewalThatLanded: on a real server, a renewal whose reply is
// lost after it was applied is retried by the client and fails its
// If-Match; the node reads its own write back and counts it as renewed.
func TestRetriedRenewalThatLanded(t *testing.T) {
	srv := s3test.Start(t)
	p := s3test.NewProxy(t, srv.Endpoint)
	b := srv.NewClient(t, s3.WithEndpoint(p.URL))
	ctx := context.Background()
	clk := fakeclock.New(t0)
	a := startManual(t, b, clk, "a")
	clk.Advance(time.Second)
	p.FailNext("PUT", 1, s3test.DropAfterForward)
	before := p.Count("PUT")
	sent := clk.Now()
	if err := a.RenewNow(ctx); err != nil {
		t.Fatalf("renewal whose first attempt landed: %v", err)
	}
	if want := sent.Add(9 * time.Second); !a.ValidUntil().Equal(want) {
		t.Fatalf("ValidUntil = %v, want %v", a.ValidUntil(), want)
	}
	if n := p.Count("PUT") - before; n != 2 {
		t.Fatalf("PUTs through the proxy = %d, want 2 (the dropped one and its retry)", n)
	}
	if err := a.RenewNow(ctx); err != nil {
		t.Fatalf("the next renewal: %v", err)
	}
}

// TestBackgroundLeases: with the real clock and a 300 ms TTL on a real
// server, leases renew and observe on their own; after a kill, the holder's
// validity has run out before the observer judges it expired.
func TestBackgroundLeases(t *testing.T) {
	srv := s3test.Start(t)
	ctx := context.Background()
	start := func(id string) *cluster.Leases {
		l, err := cluster.StartLeases(ctx, cluster.LeaseConfig{Bucket: srv.NewClient(t), NodeID: id, Addr: id + ":1",
			TTL: 300 * time.Millisecond, Margin: 30 * time.Millisecond, Grace: 60 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	a, o := start("a"), start("o")
	defer func() { _ = o.Close(ctx) }()
	waitFor(t, 5*time.Second, "both nodes to see each other", func() bool {
		return containsNode(o.Live(), "a") && containsNode(a.Live(), "o")
	})
	first := a.ValidUntil()
	waitFor(t, 5*time.Second, "a renewal", func() bool { return a.ValidUntil().After(first) })

	a.Kill()
	until := a.ValidUntil()
	waitFor(t, 5*time.Second, "the observer to judge the killed node expired", func() bool { return o.Expired("a") })
	if a.Valid() {
		t.Fatal("the killed node is still valid when the observer judges it expired")
	}
	if !until.IsZero() && !time.Now().After(until) {
		t.Fatalf("judged expired before the killed node's validity (until %v) ran out", until)
	}
	if containsNode(o.Live(), "a") {
		t.Fatal("Live() lists the expired node")
	}
}

func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSlowReadsCountConservatively: the watch starts when the first read
// showing a version is received and ends when the confirming read (here a
// listing) is sent, so slow reads never shorten it.
func TestSlowReadsCountConservatively(t *testing.T) {
	ctx := context.Background()
	clk := fakeclock.New(t0)
	m := bucket.NewMem()
	m.Sleep = clk.Sleep
	m.Faults = func(op bucket.Op) bucket.Fault {
		if (op.Kind == bucket.OpGet && op.Key == "cluster/nodes/a") || (op.Kind == bucket.OpList && op.Prefix == "cluster/nodes/") {
			return bucket.Fault{Delay: time.Second}
		}
		return bucket.Fault{}
	}
	a := startManual(t, m, clk, "a")
	a.Kill()
	o := startManual(t, m, clk, "o")
	if err := o.RefreshNow(ctx); err != nil { // LIST 0 to 1 s; GET sent at 1 s, received at 2 s
		t.Fatal(err)
	}
	watch := cluster.DefaultTTL + cluster.DefaultGrace
	clk.Advance(watch - time.Millisecond) // LIST sent at 2 s + watch - 1 ms
	if err := o.RefreshNow(ctx); err != nil {
		t.Fatal(err)
	}
	if o.Expired("a") {
		t.Fatal("expired by a confirming read sent less than TTL + Grace after the first read was received")
	}
	if err := o.RefreshNow(ctx); err != nil { // LIST sent at 3 s + watch - 1 ms
		t.Fatal(err)
	}
	if !o.Expired("a") {
		t.Fatal("not expired by a confirming read sent TTL + Grace after the first read was received")
	}
}

// TestListedVersionJudgedByItsOwnTTL: a version seen only in listings is
// judged by the TTL written in it, never by the TTL of an earlier version
// read before. Here a later process takes node a's ID with a 40 s TTL
// while the observer, which read a's 10 s lease, cannot GET it: the new
// version stands unchanged for longer than 10 s + Grace and is still not
// expired; once read, it expires after its own 40 s + Grace.
func TestListedVersionJudgedByItsOwnTTL(t *testing.T) {
	ctx := context.Background()
	clk := fakeclock.New(t0)
	m := bucket.NewMem()
	var failGets atomic.Bool
	m.Faults = func(op bucket.Op) bucket.Fault {
		if failGets.Load() && op.Kind == bucket.OpGet && op.Key == "cluster/nodes/a" {
			return bucket.Fault{Err: errors.New("injected: connection reset")}
		}
		return bucket.Fault{}
	}
	a := startManual(t, m, clk, "a")
	o := startManual(t, m, clk, "o")
	if err := o.RefreshNow(ctx); err != nil {
		t.Fatal(err)
	}
	a.Kill()
	body := `{"node_id":"a","addr":"a2.example:7000","ttl_ms":40000,"renewed_ms":0,"seq":1,"instance":"later"}`
	if _, err := m.Put(ctx, "cluster/nodes/a", []byte(body), bucket.Cond{}); err != nil {
		t.Fatal(err)
	}
	failGets.Store(true)
	watch := cluster.DefaultTTL + cluster.DefaultGrace
	for range 2 * int(watch/time.Second) {
		_ = o.RefreshNow(ctx) // the GET of the unchanged version fails
		if o.Expired("a") {
			t.Fatalf("at %v: a version seen only in listings judged expired by an earlier version's TTL", clk.Now().Sub(t0))
		}
		clk.Advance(time.Second)
	}
	failGets.Store(false)
	if err := o.RefreshNow(ctx); err != nil {
		t.Fatal(err)
	}
	if o.Expired("a") {
		t.Fatal("expired before its own TTL + Grace")
	}
	if addr, _ := o.Addr("a"); addr != "a2.example:7000" {
		t.Fatalf("Addr(a) = %q after reading the later process's lease", addr)
	}
	clk.Advance(40*time.Second + cluster.DefaultGrace)
	if err := o.RefreshNow(ctx); err != nil {
		t.Fatal(err)
	}
	if !o.Expired("a") {
		t.Fatal("not expired after its own TTL + Grace")
	}
}

// TestListingJudgesExpiry: with listings only (no GET after the first),
// a killed node is judged expired exactly TTL + Grace after the listing that
// first showed its last renewal, at the cost of one GET of that version;
// a renewing node is never read again.
func TestListingJudgesExpiry(t *testing.T) {
	ctx := context.Background()
	clk := fakeclock.New(t0)
	b := bucket.NewCounting(bucket.NewMem())
	a := startManual(t, b, clk, "a")
	r := startManual(t, b, clk, "r")
	o := startManual(t, b, clk, "o")
	if err := o.RefreshNow(ctx); err != nil {
		t.Fatal(err)
	}
	clk.Advance(cluster.DefaultTTL / 3)
	for _, l := range []*cluster.Leases{a, r} {
		if err := l.RenewNow(ctx); err != nil {
			t.Fatal(err)
		}
	}
	a.Kill()
	b.Reset()
	if err := o.RefreshNow(ctx); err != nil { // first shows a's last renewal
		t.Fatal(err)
	}
	expiredAt := clk.Now().Add(cluster.DefaultTTL + cluster.DefaultGrace)
	step := 100 * time.Millisecond
	for clk.Now().Before(expiredAt.Add(time.Second)) {
		clk.Advance(step)
		if err := r.RenewNow(ctx); err != nil {
			t.Fatal(err)
		}
		if err := o.RefreshNow(ctx); err != nil {
			t.Fatal(err)
		}
		if want := !clk.Now().Before(expiredAt); o.Expired("a") != want {
			t.Fatalf("at %v: Expired(a) = %v, want %v", clk.Now().Sub(t0), !want, want)
		}
		if o.Expired("r") || !containsNode(o.Live(), "r") {
			t.Fatalf("at %v: the renewing node judged expired or not live", clk.Now().Sub(t0))
		}
	}
	if got := b.Counts().Get; got != 1 {
		t.Fatalf("GETs while watching = %d, want 1 (a's last version, once it stood half a TTL)", got)
	}
}

// TestLeasesPublishClassesAndMembershipChanges: each node's lease names
// the classes it serves, which Live reports to the others (nil: every
// class); and MembersEpoch grows when a node joins, when one drops out of
// Live and comes back between two looks (a pause longer than TTL + Grace,
// which Live read before and after does not show), and when one leaves.
// On memory and on the S3 server.
func TestLeasesPublishClassesAndMembershipChanges(t *testing.T) {
	onBoth(t, func(t *testing.T, b bucket.Bucket) {
		ctx := context.Background()
		clk := fakeclock.New(t0)
		a := startManual(t, b, clk, "a", func(c *cluster.LeaseConfig) { c.Classes = []string{"counter"} })
		bb := startManual(t, b, clk, "b")
		gw := startManual(t, b, clk, "gw", func(c *cluster.LeaseConfig) { c.Classes = []string{} })
		e0 := a.MembersEpoch()
		if err := a.RefreshNow(ctx); err != nil {
			t.Fatal(err)
		}
		e1 := a.MembersEpoch()
		if e1 != e0+2 {
			t.Errorf("two nodes first seen: epoch %d -> %d, want +2", e0, e1)
		}
		got := map[string]cluster.NodeInfo{}
		for _, n := range a.Live() {
			got[n.ID] = n
		}
		if n := got["a"]; !slices.Equal(n.Classes, []string{"counter"}) || n.AllClasses {
			t.Errorf("a itself: %+v", n)
		}
		if n := got["b"]; !n.AllClasses {
			t.Errorf("b, which names no classes, as a sees it: %+v, want every class", n)
		}
		if n := got["gw"]; n.AllClasses || len(n.Classes) != 0 {
			t.Errorf("gw, which serves none, as a sees it: %+v", n)
		}
		renewAll := func() {
			for _, l := range []*cluster.Leases{a, bb, gw} {
				_ = l.RenewNow(ctx)
			}
		}
		// Healthy periods: no change.
		for range 6 {
			clk.Advance(cluster.DefaultTTL / 3)
			renewAll()
			if err := a.RefreshNow(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if e := a.MembersEpoch(); e != e1 {
			t.Errorf("healthy periods changed the epoch: %d -> %d", e1, e)
		}
		// b pauses for longer than TTL + Grace while a does not look, then
		// renews: Live before and after holds b; the epoch shows it.
		clk.Advance(cluster.DefaultTTL + cluster.DefaultGrace + time.Second)
		_ = a.RenewNow(ctx)
		_ = bb.RenewNow(ctx)
		_ = gw.RenewNow(ctx)
		if err := a.RefreshNow(ctx); err != nil {
			t.Fatal(err)
		}
		if !containsNode(a.Live(), "b") {
			t.Fatal("b renewed yet is not live")
		}
		e2 := a.MembersEpoch()
		if e2 <= e1 {
			t.Errorf("b (and gw) were out of Live and came back: epoch stayed %d", e2)
		}
		if err := bb.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if err := a.RefreshNow(ctx); err != nil {
			t.Fatal(err)
		}
		if e := a.MembersEpoch(); e != e2+1 {
			t.Errorf("b left: epoch %d -> %d, want +1", e2, e)
		}
	})
}

// TestAListingThatLeavesALeaseOutTakesNothingOver: an erasure-coded store
// (MinIO) may leave out of a LIST a key being overwritten, and a lease
// being renewed is one. A node whose reading of the leases misses a live
// node's lease reads that lease's own key before it believes anything:
// the live node stays live, its lease is not expired, and its holds stay
// its own. Only a read of the key that finds nothing (a clean shutdown)
// frees them at once. On a real S3 server too, with the omission injected
// in front of it.
func TestAListingThatLeavesALeaseOutTakesNothingOver(t *testing.T) {
	onBoth(t, func(t *testing.T, b bucket.Bucket) {
		ctx := context.Background()
		clk := fakeclock.New(t0)
		a := startManual(t, b, clk, "a")
		o := startManual(t, b, clk, "o")
		if err := o.RefreshNow(ctx); err != nil {
			t.Fatal(err)
		}
		id := abi.ActorID{Tenant: "t", Class: "c", Name: "x"}
		ha := cluster.NewHolds(b, "", a, nil)
		if _, err := ha.Acquire(ctx, id); err != nil {
			t.Fatal(err)
		}
		om := &omitting{Bucket: b, key: "cluster/nodes/a"}
		counted := bucket.NewCounting(om)
		o2 := startManual(t, counted, clk, "o2")
		if err := o2.RefreshNow(ctx); err != nil {
			t.Fatal(err)
		}
		// Every listing from now on leaves a's lease out, as MinIO's may
		// while it is renewed.
		om.on.Store(true)
		for round := range 3 {
			if err := a.RenewNow(ctx); err != nil {
				t.Fatal(err)
			}
			before := counted.Counts()
			if err := o2.RefreshNow(ctx); err != nil {
				t.Fatal(err)
			}
			after := counted.Counts()
			if o2.Expired("a") {
				t.Fatalf("round %d: a live node's lease, left out of a listing, is taken for expired", round)
			}
			if !containsNode(o2.Live(), "a") {
				t.Fatalf("round %d: Live() = %v lacks a", round, o2.Live())
			}
			if got := after.Get - before.Get; got != 1 {
				t.Fatalf("round %d: the reading sent %d GETs, want 1 (the lease the listing left out)", round, got)
			}
			h2 := cluster.NewHolds(counted, "", o2, nil)
			var held *cluster.HeldElsewhereError
			if _, err := h2.Acquire(ctx, id); !errors.As(err, &held) || held.NodeID != "a" {
				t.Fatalf("round %d: Acquire of a's actor = %v, want held by a", round, err)
			}
		}
		// a shuts down cleanly: its lease object is gone, which the read
		// of its key (not the listing) shows.
		if err := a.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if err := o2.RefreshNow(ctx); err != nil {
			t.Fatal(err)
		}
		if !o2.Expired("a") || containsNode(o2.Live(), "a") {
			t.Fatalf("after a's Close: Expired = %v, Live = %v", o2.Expired("a"), o2.Live())
		}
		if _, err := cluster.NewHolds(counted, "", o2, nil).Acquire(ctx, id); err != nil {
			t.Fatalf("taking the actor of a closed node: %v", err)
		}
	})
}

// omitting is a bucket whose listings leave one key out once on.
type omitting struct {
	bucket.Bucket
	key string
	on  atomic.Bool
}

func (b *omitting) List(ctx context.Context, prefix, startAfter string, limit int) ([]string, error) {
	keys, err := b.Bucket.List(ctx, prefix, startAfter, limit)
	return slices.DeleteFunc(keys, func(k string) bool { return b.on.Load() && k == b.key }), err
}

func (b *omitting) ListInfo(ctx context.Context, prefix, startAfter string, limit int) ([]bucket.ObjectInfo, error) {
	infos, err := bucket.ListInfo(ctx, b.Bucket, prefix, startAfter, limit)
	return slices.DeleteFunc(infos, func(o bucket.ObjectInfo) bool { return b.on.Load() && o.Key == b.key }), err
}

// A lease names the build of the process that wrote it
// (LeaseConfig.Build), in every version of it, for operators: the object
// in the bucket says it (version, revision), ReadLease gives it, and
// another node reads such a lease as before (its format is still 1, and
// the node is live to it). A lease without a build (one of an earlier
// build, or a writer that gave none) reads as an unknown build; a lease
// gone reads as none; one of a newer format is refused.
func TestALeaseNamesItsWritersBuild(t *testing.T) {
	onBoth(t, func(t *testing.T, b bucket.Bucket) {
		ctx := context.Background()
		clk := fakeclock.New(t0)
		build := cluster.Build{Version: "v0.5.0-3-gabcdef0", Revision: "abcdef0123456789abcdef0123456789abcdef01"}
		a := startManual(t, b, clk, "a", func(c *cluster.LeaseConfig) { c.Build = build; c.Classes = []string{"counter"} })
		other := startManual(t, b, clk, "other")
		check := func(when string) {
			t.Helper()
			body, _, err := b.Get(ctx, "cluster/nodes/a")
			if err != nil {
				t.Fatal(err)
			}
			var rec map[string]any
			if err := json.Unmarshal(body, &rec); err != nil {
				t.Fatalf("%s: the lease %s: %v", when, body, err)
			}
			if rec["version"] != build.Version || rec["revision"] != build.Revision || rec["format"] != float64(1) {
				t.Fatalf("%s: the lease in the bucket is %s; want version %q, revision %q, format 1", when, body, build.Version, build.Revision)
			}
			info, ok, err := cluster.ReadLease(ctx, b, "", "a")
			if err != nil || !ok || info.Build != build || info.ID != "a" || info.Addr != "a.example:7000" || !slices.Equal(info.Classes, []string{"counter"}) || info.AllClasses {
				t.Fatalf("%s: ReadLease(a) = %+v, %v, %v; want its build %+v", when, info, ok, err, build)
			}
		}
		check("created")
		clk.Advance(cluster.DefaultTTL / 3)
		if err := a.RenewNow(ctx); err != nil {
			t.Fatal(err)
		}
		check("renewed")
		if err := other.RefreshNow(ctx); err != nil {
			t.Fatal(err)
		}
		if !containsNode(other.Live(), "a") || other.NewerFormatReads() != 0 {
			t.Fatalf("a lease naming its build, to another node: live %v, newer-format reads %d", other.Live(), other.NewerFormatReads())
		}

		// A writer that gives no build writes none; a lease of an earlier
		// build has none: both read as unknown.
		if body, _, _ := b.Get(ctx, "cluster/nodes/other"); strings.Contains(string(body), `"version"`) || strings.Contains(string(body), `"revision"`) {
			t.Errorf("a lease without a build: %s", body)
		}
		if info, ok, err := cluster.ReadLease(ctx, b, "cluster/", "other"); err != nil || !ok || info.Build != (cluster.Build{}) || !info.AllClasses {
			t.Errorf("ReadLease(other), no build given: %+v, %v, %v", info, ok, err)
		}
		if _, err := b.Put(ctx, "cluster/nodes/old", []byte(`{"node_id":"old","addr":"old.example:7000","ttl_ms":10000,"renewed_ms":1,"seq":1,"instance":"i1","classes":null}`), bucket.Cond{}); err != nil {
			t.Fatal(err)
		}
		if info, ok, err := cluster.ReadLease(ctx, b, "", "old"); err != nil || !ok || info.Build != (cluster.Build{}) || info.Addr != "old.example:7000" {
			t.Errorf("ReadLease(old), a lease of an earlier build: %+v, %v, %v", info, ok, err)
		}
		if _, err := b.Put(ctx, "cluster/nodes/later", []byte(`{"format":2,"node_id":"later","version":"v9"}`), bucket.Cond{}); err != nil {
			t.Fatal(err)
		}
		if info, ok, err := cluster.ReadLease(ctx, b, "", "later"); !errors.Is(err, format.ErrNewer) || ok || info.Build != (cluster.Build{}) {
			t.Errorf("ReadLease(later), a lease of format 2: %+v, %v, %v; want a newer-format error", info, ok, err)
		}
		if err := a.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if info, ok, err := cluster.ReadLease(ctx, b, "", "a"); err != nil || ok {
			t.Errorf("ReadLease(a) after a closed: %+v, %v, %v; want no lease", info, ok, err)
		}
	})
}
