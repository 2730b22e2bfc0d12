package cluster_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/cluster"
	"github.com/wasmkeep/alarms/internal/fakeclock"
)

// listLog records when a node listed the leases, and fails the listing
// whose number (from 1) is failAt.
type listLog struct {
	*bucket.Mem
	clk    *fakeclock.Clock
	failAt int

	mu    sync.Mutex
	times []time.Duration // since t0
}

func (b *listLog) ListInfo(ctx context.Context, prefix, startAfter string, limit int) ([]bucket.ObjectInfo, error) {
	if strings.HasSuffix(prefix, "nodes/") {
		b.mu.Lock()
		b.times = append(b.times, b.clk.Now().Sub(t0))
		n := len(b.times)
		b.mu.Unlock()
		if n == b.failAt {
			return nil, errors.New("injected: 503 Slow Down")
		}
	}
	return b.Mem.ListInfo(ctx, prefix, startAfter, limit)
}

func (b *listLog) listed() []time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]time.Duration(nil), b.times...)
}

// TestObservePeriod: a node with ObservePeriod 8 s (lease 10 s, renewed
// every TTL/3) lists the leases every 8 s, and 2 s after a listing that
// failed (half of what 8 s leaves of TTL + Grace); a live node renewing
// every TTL/3 stays in its live nodes throughout, the failed listing
// included. What the longer period costs:
// a node killed just after a listing is first seen in its last version up
// to 8 s later, and leaves the live nodes, and is judged expired, counted
// from that sight (TTL + Grace), never from the renewal itself.
func TestObservePeriod(t *testing.T) {
	ctx := context.Background()
	clk := fakeclock.New(t0)
	mem := bucket.NewMem()
	period := cluster.DefaultTTL / 3
	log := &listLog{Mem: mem, clk: clk, failAt: 5}
	// b first: its lease is written before StartLeases returns, so a's
	// first listing, which a's reading loop sends as it starts, finds it.
	// Started the other way round, that listing races b's first write,
	// and one that wins leaves b out of a's live nodes until a lists
	// again, 8 s later.
	bb := &cutOff{Mem: mem}
	b, err := cluster.StartLeases(ctx, cluster.LeaseConfig{Bucket: bb, NodeID: "b", Addr: "b:1", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Kill()
	a, err := cluster.StartLeases(ctx, cluster.LeaseConfig{Bucket: log, NodeID: "a", Addr: "a:1", Clock: clk, ObservePeriod: 8 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Kill()
	const waiters = 4 // each node's renewal and reading loops
	// step advances the clock to the next instant a loop waits for, once
	// every loop waits.
	step := func() {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			n, next := clk.Waiting()
			if n == waiters {
				clk.Advance(next.Sub(clk.Now()))
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d loops wait on the clock", n, waiters)
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	settle := func() {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for n, _ := clk.Waiting(); n != waiters; n, _ = clk.Waiting() {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d loops wait on the clock", n, waiters)
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	// b's renewals go out at k·Period; cut it off from the bucket after
	// the 30th, at 100 s: its lease stands from then on, as a dead node's.
	kill := 30*period + time.Millisecond
	for clk.Now().Sub(t0) < kill {
		step()
		settle()
		if !containsNode(a.Live(), "b") {
			t.Fatalf("at +%v the live node b dropped out of a's live nodes (a listed at %v)", clk.Now().Sub(t0), log.listed())
		}
	}
	bb.cut.Store(true)
	last := 30 * period // b's last renewal
	// a listed at 0, 8, 16, 24; the listing at 32 failed and the next came
	// 2 s later; then every 8 s: b's last version is first seen at
	// the first of those after it landed.
	var want []time.Duration
	for i := range 5 {
		want = append(want, time.Duration(i)*8*time.Second)
	}
	firstSeen := time.Duration(-1)
	for at := 34 * time.Second; at < 140*time.Second; at += 8 * time.Second {
		want = append(want, at)
		if firstSeen < 0 && at >= last {
			firstSeen = at
		}
	}
	gone := firstSeen + cluster.DefaultTTL + cluster.DefaultGrace
	expired := firstSeen + 2*8*time.Second // the first listing sent at or after gone
	if expired < gone {
		t.Fatal("test setup: expired before gone")
	}
	for clk.Now().Sub(t0) < 140*time.Second {
		now := clk.Now().Sub(t0)
		if live := containsNode(a.Live(), "b"); live != (now < gone) {
			t.Fatalf("at +%v b in a's live nodes: %v; want it there until +%v (its last version, sent at +%v, first listed at +%v, plus TTL + Grace)",
				now, live, gone, last, firstSeen)
		}
		if got := a.Expired("b"); got != (now >= expired) {
			t.Fatalf("at +%v a judges b expired: %v; want from the listing at +%v", now, got, expired)
		}
		step()
		settle()
	}
	if got := log.listed(); !durationsEqual(got, want) {
		t.Errorf("a listed the leases at %v\nwant %v", got, want)
	}
}

// cutOff is a node's way to the bucket that fails every request once cut.
type cutOff struct {
	*bucket.Mem
	cut atomic.Bool
}

func (b *cutOff) Put(ctx context.Context, key string, body []byte, cond bucket.Cond) (string, error) {
	if b.cut.Load() {
		return "", errors.New("injected: connection refused")
	}
	return b.Mem.Put(ctx, key, body, cond)
}

func (b *cutOff) ListInfo(ctx context.Context, prefix, startAfter string, limit int) ([]bucket.ObjectInfo, error) {
	if b.cut.Load() {
		return nil, errors.New("injected: connection refused")
	}
	return b.Mem.ListInfo(ctx, prefix, startAfter, limit)
}

func durationsEqual(a, b []time.Duration) bool {
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

// TestObservePeriodValidation: a reading period must leave room for one
// failed reading, retried a Period later, before a live node could drop
// out of the live nodes (ObservePeriod + Period < TTL + Grace).
func TestObservePeriodValidation(t *testing.T) {
	check := func(observe time.Duration, err error, wantErr string) {
		t.Helper()
		switch {
		case wantErr == "" && err != nil:
			t.Errorf("ObservePeriod %v refused: %v", observe, err)
		case wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)):
			t.Errorf("ObservePeriod %v: got %v, want an error naming %s", observe, err, wantErr)
		}
	}
	for _, tc := range []struct {
		observe time.Duration
		wantErr string
	}{
		{0, ""},
		{8 * time.Second, ""},
		{8*time.Second + 666*time.Millisecond, ""},
		{8*time.Second + 667*time.Millisecond, "ObservePeriod"},
		{-time.Second, "ObservePeriod"},
	} {
		err := cluster.LeaseConfig{Bucket: bucket.NewMem(), NodeID: "n", ObservePeriod: tc.observe}.Validate()
		check(tc.observe, err, tc.wantErr)
	}
	// Unset, it is the renewal period in a small cluster: that period
	// must leave the same room.
	err := cluster.LeaseConfig{Bucket: bucket.NewMem(), NodeID: "n", Period: 6 * time.Second}.Validate()
	check(0, err, "Period 6s")
	err = cluster.LeaseConfig{Bucket: bucket.NewMem(), NodeID: "n", Period: 6 * time.Second, ObservePeriod: 5 * time.Second}.Validate()
	check(5*time.Second, err, "")
}

// TestReadPeriodFollowsTheClusterSize: a node whose ObservePeriod is not
// set reads the leases every renewal period (TTL/3) while fewer than
// LargeCluster nodes are live, and every SlowObservePeriod (8 s at the
// defaults) once LargeCluster are, and back when a node drops out. The
// other nodes here renew by hand every renewal period; the one that stops
// drops out of the live nodes TTL + Grace after its last version was
// first seen.
func TestReadPeriodFollowsTheClusterSize(t *testing.T) {
	ctx := context.Background()
	clk := fakeclock.New(t0)
	mem := bucket.NewMem()
	period := cluster.DefaultTTL / 3
	log := &listLog{Mem: mem, clk: clk}
	a, err := cluster.StartLeases(ctx, cluster.LeaseConfig{Bucket: log, NodeID: "a", Addr: "a:1", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Kill()
	if got := a.ReadPeriod(); got != period {
		t.Fatalf("alone, a reads the leases every %v, want the renewal period %v", got, period)
	}
	var others []*cluster.Leases
	add := func() *cluster.Leases {
		id := string(rune('b' + len(others)))
		l, err := cluster.StartLeases(ctx, cluster.LeaseConfig{Bucket: mem, NodeID: id, Addr: id + ":1", Clock: clk, Manual: true})
		if err != nil {
			t.Fatal(err)
		}
		others = append(others, l)
		return l
	}
	for range cluster.LargeCluster - 2 {
		add()
	}
	stopped := map[*cluster.Leases]bool{}
	nextRenewal := t0.Add(period)
	// run advances the clock to end, one instant a's loops wait for at a
	// time, renewing the others (but the stopped) every renewal period.
	run := func(end time.Duration) {
		t.Helper()
		for {
			deadline := time.Now().Add(10 * time.Second)
			n, next := clk.Waiting()
			for ; n != 2; n, next = clk.Waiting() {
				if time.Now().After(deadline) {
					t.Fatalf("%d of a's 2 loops wait on the clock", n)
				}
				time.Sleep(100 * time.Microsecond)
			}
			if nextRenewal.Before(next) {
				next = nextRenewal
			}
			if next.Sub(t0) > end {
				return
			}
			clk.Advance(next.Sub(clk.Now()))
			if !clk.Now().Before(nextRenewal) {
				for _, l := range others {
					if !stopped[l] {
						if err := l.RenewNow(ctx); err != nil {
							t.Fatal(err)
						}
					}
				}
				nextRenewal = nextRenewal.Add(period)
			}
		}
	}
	gaps := func(from, to time.Duration) []time.Duration {
		var out []time.Duration
		times := log.listed()
		for i := 1; i < len(times); i++ {
			if times[i-1] >= from && times[i] <= to {
				out = append(out, times[i]-times[i-1])
			}
		}
		return out
	}
	allEqual := func(what string, got []time.Duration, want time.Duration) {
		t.Helper()
		if len(got) < 3 {
			t.Fatalf("%s: only %d readings to judge: %v", what, len(got), log.listed())
		}
		for _, g := range got {
			if g != want {
				t.Fatalf("%s: a read the leases %v apart, want every %v (readings at %v)", what, got, want, log.listed())
			}
		}
	}
	// 15 live nodes: every renewal period.
	run(30 * time.Second)
	if n := len(a.Live()); n != cluster.LargeCluster-1 {
		t.Fatalf("a sees %d live nodes, want %d", n, cluster.LargeCluster-1)
	}
	allEqual("15 live nodes", gaps(0, 30*time.Second), period)
	// 16: every 8 s, from the first reading that sees the 16th.
	last := add()
	run(40 * time.Second)
	if got, want := a.ReadPeriod(), 8*time.Second; got != want {
		t.Fatalf("with %d live nodes a reads every %v, want %v", len(a.Live()), got, want)
	}
	run(100 * time.Second)
	allEqual("16 live nodes", gaps(40*time.Second, 100*time.Second), 8*time.Second)
	// One stops renewing: it leaves a's live nodes TTL + Grace after its
	// last version was first seen, and a reads every renewal period again.
	stopped[last] = true
	run(140 * time.Second)
	if n := len(a.Live()); n != cluster.LargeCluster-1 {
		t.Fatalf("a sees %d live nodes after one stopped, want %d", n, cluster.LargeCluster-1)
	}
	allEqual("15 live nodes again", gaps(125*time.Second, 140*time.Second), period)
}

// TestSlowObservePeriod: a large cluster's reading period is 4/5 of the
// TTL, shortened so that it leaves 6/5 of a renewal period of TTL + Grace,
// and never shorter than the renewal period.
func TestSlowObservePeriod(t *testing.T) {
	for _, tc := range []struct {
		ttl, grace, period, want time.Duration
	}{
		{0, 0, 0, 8 * time.Second}, // the defaults
		{2 * time.Second, time.Second, 0, 1600 * time.Millisecond},
		{20 * time.Second, 2 * time.Second, 0, 14 * time.Second},
		{10 * time.Second, 2 * time.Second, 5 * time.Second, 6 * time.Second},
		{10 * time.Second, 2 * time.Second, 5500 * time.Millisecond, 5500 * time.Millisecond},
	} {
		c := cluster.LeaseConfig{Bucket: bucket.NewMem(), NodeID: "n", TTL: tc.ttl, Grace: tc.grace, Period: tc.period}
		if tc.ttl != 0 {
			c.Margin = tc.ttl / 10
		}
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: %v", tc, err)
		}
		if got := c.SlowObservePeriod(); (got - tc.want).Abs() > time.Microsecond { // TTL/3 rounds down
			t.Errorf("TTL %v, grace %v, period %v: slow reading period %v, want %v", tc.ttl, tc.grace, tc.period, got, tc.want)
		}
	}
}
