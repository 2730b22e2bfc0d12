package sweeper

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/internal/fakeclock"
)

// memBucket is an in-memory index that counts LIST calls.
type memBucket struct {
	mu    sync.Mutex
	keys  []string // sorted
	lists int
	fail  func(call int, prefix, startAfter string) error
	// omit, if set, leaves the keys it names out of the listing numbered
	// call (from 1), as an erasure-coded store may.
	omit func(call int, key string) bool
}

func (b *memBucket) put(keys ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.keys = append(b.keys, keys...)
	slices.Sort(b.keys)
	b.keys = slices.Compact(b.keys)
}

func (b *memBucket) remove(keys ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, k := range keys {
		if i, ok := slices.BinarySearch(b.keys, k); ok {
			b.keys = slices.Delete(b.keys, i, i+1)
		}
	}
}

func (b *memBucket) len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.keys)
}

func (b *memBucket) List(_ context.Context, prefix, startAfter string, limit int) ([]string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lists++
	if b.fail != nil {
		if err := b.fail(b.lists, prefix, startAfter); err != nil {
			return nil, err
		}
	}
	from := max(prefix, startAfter)
	i, found := slices.BinarySearch(b.keys, from)
	if found && from == startAfter {
		i++
	}
	var out []string
	for ; i < len(b.keys) && len(out) < limit && strings.HasPrefix(b.keys[i], prefix); i++ {
		if b.omit != nil && b.omit(b.lists, b.keys[i]) {
			continue
		}
		out = append(out, b.keys[i])
	}
	return out, nil
}

// sweepClock moves only when told (fakeclock.Clock), and says when
// someone starts to wait on it.
type sweepClock struct {
	*fakeclock.Clock
	added chan struct{}
}

func newFakeClock(now time.Time) *sweepClock {
	return &sweepClock{Clock: fakeclock.New(now), added: make(chan struct{}, 100)}
}

func (c *sweepClock) After(d time.Duration) <-chan time.Time {
	ch := c.Clock.After(d)
	if d > 0 {
		c.added <- struct{}{}
	}
	return ch
}

// awaitWaiter blocks until someone calls After with a positive duration.
func (c *sweepClock) awaitWaiter(t *testing.T) {
	t.Helper()
	select {
	case <-c.added:
	case <-time.After(10 * time.Second):
		t.Fatal("nobody waits on the clock")
	}
}

type staticLive []string

func (s staticLive) LiveNodes(context.Context) ([]string, error) { return s, nil }

type liveFunc func() ([]string, error)

func (f liveFunc) LiveNodes(context.Context) ([]string, error) { return f() }

// recorder is a sink that records deliveries and can act on them.
type recorder struct {
	mu   sync.Mutex
	got  []Overdue
	then func(Overdue)
}

func (r *recorder) Offer(d Overdue) {
	r.mu.Lock()
	r.got = append(r.got, d)
	r.mu.Unlock()
	if r.then != nil {
		r.then(d)
	}
}

func (r *recorder) take() []Overdue {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.got
	r.got = nil
	return out
}

// syncBuffer is a log output safe for the loop's goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

const self = "10.0.0.1:7000"

type harness struct {
	bucket *memBucket
	clock  *sweepClock
	sink   *recorder
	logs   *syncBuffer
	loop   *Loop
}

func newHarness(t *testing.T, mod func(*Config)) *harness {
	t.Helper()
	h := &harness{bucket: &memBucket{}, clock: newFakeClock(testNow), sink: &recorder{}, logs: &syncBuffer{}}
	cfg := Config{
		Self:    self,
		Margin:  testMargin,
		Lister:  h.bucket,
		Clock:   h.clock,
		Sink:    h.sink,
		Live:    staticLive{self},
		Tenants: StaticTenants{"t"},
		Rand:    rand.New(rand.NewPCG(1, 1)),
		Logger:  hclog.New(&hclog.LoggerOptions{Output: h.logs, Level: hclog.Debug}),
	}
	if mod != nil {
		mod(&cfg)
	}
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.loop = l
	return h
}

// run starts h's loop (Loop.Run) and returns stop, which ends it and
// checks that it returned the context's error.
func (h *harness) run(t *testing.T) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel) // a test that failed before stop
	done := make(chan error, 1)
	go func() { done <- h.loop.Run(ctx) }()
	return func() {
		t.Helper()
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Run returned %v", err)
		}
	}
}

// keysFrom makes n tagged keys of tenant t for distinct actors, due from
// fromMs one ms apart, with class C.
func keysFrom(tenant, prefix string, fromMs int64, n int) []string {
	out := make([]string, n)
	for i := range n {
		out[i] = tagged(tenant, fromMs+int64(i), "c", fmt.Sprintf("%s%d", prefix, i), 1, "01")
	}
	return out
}

// A sweep over an index of future entries reads one page and stops.
func TestSweepNoneOverdueCostsOneList(t *testing.T) {
	h := newHarness(t, nil)
	h.bucket.put(keysFrom("t", "f", testNow.UnixMilli(), 100_000)...)
	if err := h.loop.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := h.loop.Stats(); st != (Stats{Sweeps: 1, Lists: 1, Last: st.Last}) || !st.Last.Equal(testNow) || h.bucket.lists != 1 {
		t.Fatalf("stats %+v, bucket saw %d LISTs", st, h.bucket.lists)
	}
	if got := h.sink.take(); len(got) != 0 {
		t.Fatalf("delivered %d", len(got))
	}
}

// While this node's lease is not valid, a sweep lists nothing and offers
// nothing (its view of the live nodes is stale, and it could take no
// actor); once it is valid again, the next sweep delivers.
func TestSweepSkippedWhileTheLeaseIsNotValid(t *testing.T) {
	valid := false
	h := newHarness(t, func(c *Config) { c.Valid = func() bool { return valid } })
	h.bucket.put(keysFrom("t", "d", ago(2*testMargin), 3)...)
	if err := h.loop.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := h.sink.take(); len(got) != 0 || h.bucket.lists != 0 {
		t.Fatalf("with the lease not valid: delivered %d, %d LISTs; want none", len(got), h.bucket.lists)
	}
	valid = true
	if err := h.loop.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := h.sink.take(); len(got) != 3 {
		t.Fatalf("with the lease valid again: delivered %d, want 3", len(got))
	}
}

// An entry just overdue by the margin is read; one a millisecond short is
// not.
func TestSweepCutoffIsMargin(t *testing.T) {
	h := newHarness(t, nil)
	due := keysFrom("t", "d", ago(testMargin), 2) // the second is 1 ms short
	h.bucket.put(due...)
	if err := h.loop.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := h.sink.take()
	if len(got) != 1 || !slices.Equal(got[0].Keys, due[:1]) {
		t.Fatalf("delivered %+v, want only %q", got, due[0])
	}
}

// A backlog larger than the walk's and the plan's caps drains over
// consecutive sweeps, each actor delivered exactly once, LIST pages exact.
func TestSweepDrainsBacklog(t *testing.T) {
	h := newHarness(t, nil)
	h.sink.then = func(d Overdue) { h.bucket.remove(d.Keys...) } // the timer ran it
	backlog := keysFrom("t", "b", ago(time.Hour), 5000)
	h.bucket.put(backlog...)
	h.bucket.put(keysFrom("t", "f", testNow.UnixMilli(), 10)...) // future
	delivered := map[string]int{}
	sweeps := 0
	for h.bucket.len() > 10 {
		if sweeps++; sweeps > 40 {
			t.Fatalf("%d entries left after 40 sweeps", h.bucket.len()-10)
		}
		listsBefore := h.bucket.lists
		if err := h.loop.Sweep(context.Background()); err != nil {
			t.Fatal(err)
		}
		if lists := h.bucket.lists - listsBefore; lists > 3 {
			t.Fatalf("sweep %d: %d LISTs, want at most 3 (2,048 keys in pages of 1,000)", sweeps, lists)
		}
		got := h.sink.take()
		if len(got) > DefaultMaxDeliveries {
			t.Fatalf("sweep %d: %d deliveries", sweeps, len(got))
		}
		for _, d := range got {
			delivered[d.Keys[0]]++
		}
	}
	for _, k := range backlog {
		if delivered[k] != 1 {
			t.Fatalf("%s delivered %d times", k, delivered[k])
		}
	}
	// Sweeps fill the cap except where a pass over the index ends (the walk
	// reaches the end with fewer than 256 left and starts over): 20 full
	// sweeps' worth, plus at most one short sweep per pass.
	if least := (5000 + DefaultMaxDeliveries - 1) / DefaultMaxDeliveries; sweeps < least || sweeps > least+2 {
		t.Errorf("drained in %d sweeps, want %d to %d", sweeps, least, least+2)
	}
	if st := h.loop.Stats(); st.Delivered != 5000 || st.Sweeps != int64(sweeps) || st.Lists != int64(h.bucket.lists) {
		t.Errorf("stats %+v after %d sweeps, %d LISTs", st, sweeps, h.bucket.lists)
	}
}

// Entries nobody can act on (here: actors this node already retries, so
// they are never delivered again) cannot hold the rest back: the cursor
// takes the next sweep past them.
func TestSweepCursorPassesStuckEntries(t *testing.T) {
	stuck := keysFrom("t", "s", ago(time.Hour), 3000)
	h := newHarness(t, func(c *Config) {
		c.Busy = func(a abi.ActorID) bool { return strings.HasPrefix(a.Name, "s") }
	})
	h.bucket.put(stuck...)
	good := keysFrom("t", "g", ago(time.Hour)+3000, 100)
	h.bucket.put(good...)

	if err := h.loop.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := h.sink.take(); len(got) != 0 {
		t.Fatalf("first sweep delivered %d; it should read only stuck entries", len(got))
	}
	if c := h.loop.Cursor("t"); c != stuck[2047] {
		t.Fatalf("cursor %q, want %q", c, stuck[2047])
	}
	if err := h.loop.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := h.sink.take()
	var keys []string
	for _, d := range got {
		keys = append(keys, d.Keys...)
	}
	if !slices.Equal(keys, good) {
		t.Fatalf("second sweep delivered %d keys, want the 100 behind the stuck ones", len(keys))
	}
	if c := h.loop.Cursor("t"); c != "" {
		t.Fatalf("cursor %q after reaching the end, want the beginning", c)
	}
}

// Each tenant keeps its own cursor.
func TestSweepCursorPerTenant(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.Tenants = StaticTenants{"a", "b"}
		c.Walk = WalkLimits{MaxEntries: 2, PageSize: 2}
		c.Busy = func(abi.ActorID) bool { return true }
	})
	a := keysFrom("a", "x", ago(time.Hour), 3)
	b := keysFrom("b", "x", ago(time.Hour), 1)
	h.bucket.put(a...)
	h.bucket.put(b...)
	if err := h.loop.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ca, cb := h.loop.Cursor("a"), h.loop.Cursor("b"); ca != a[1] || cb != "" {
		t.Fatalf("cursors a %q b %q, want %q and the beginning", ca, cb, a[1])
	}
	if st := h.loop.Stats(); st.Sweeps != 2 || st.Lists != 2 || st.Entries != 3 {
		t.Fatalf("stats %+v", st)
	}
}

// An unreachable bucket is logged and counted, never skipped silently, and
// the next period retries.
func TestSweepBucketUnreachable(t *testing.T) {
	h := newHarness(t, nil)
	down := errors.New("connection refused")
	h.bucket.fail = func(int, string, string) error { return down }
	keys := keysFrom("t", "x", ago(time.Hour), 3)
	h.bucket.put(keys...)

	if st := h.loop.Stats(); !st.Last.IsZero() || st.LastErr != nil {
		t.Fatalf("Last before any sweep = %v, %v; want zero", st.Last, st.LastErr)
	}
	err := h.loop.Sweep(context.Background())
	if !errors.Is(err, down) || !strings.Contains(err.Error(), `tenant "t"`) {
		t.Fatalf("error %v, want one naming the tenant and the cause", err)
	}
	if st := h.loop.Stats(); st.Last.IsZero() || !errors.Is(st.LastErr, down) {
		t.Fatalf("Last after the failed sweep = %v, %v; want its time and its failure", st.Last, st.LastErr)
	}
	if st := h.loop.Stats(); st.Errors != 1 || st.Lists != 1 || st.Delivered != 0 {
		t.Fatalf("stats %+v", st)
	}
	if logs := h.logs.String(); !strings.Contains(logs, "[ERROR]") || !strings.Contains(logs, "connection refused") {
		t.Fatalf("failure not logged: %s", logs)
	}
	h.bucket.fail = nil
	if err := h.loop.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := h.loop.Stats(); st.Last.IsZero() || st.LastErr != nil {
		t.Fatalf("Last after a good sweep = %v, %v; want its time, no failure", st.Last, st.LastErr)
	}
	if got := h.sink.take(); len(got) != 3 {
		t.Fatalf("retry delivered %d, want 3", len(got))
	}
}

// A LIST failing mid-walk: what was read is delivered, and the next sweep
// resumes after it.
func TestSweepListFailsMidWalk(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Walk = WalkLimits{PageSize: 2} })
	keys := keysFrom("t", "x", ago(time.Hour), 5)
	h.bucket.put(keys...)
	h.bucket.fail = func(call int, _, _ string) error {
		if call == 2 {
			return errors.New("timeout")
		}
		return nil
	}
	if err := h.loop.Sweep(context.Background()); err == nil {
		t.Fatal("no error")
	}
	if got := h.sink.take(); len(got) != 2 || h.loop.Cursor("t") != keys[1] {
		t.Fatalf("delivered %d, cursor %q", len(got), h.loop.Cursor("t"))
	}
	if err := h.loop.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := h.sink.take(); len(got) != 3 || !slices.Equal(got[0].Keys, keys[2:3]) {
		t.Fatalf("resumed sweep delivered %+v", got)
	}
}

func TestSweepLiveNodesUnavailable(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.Live = liveFunc(func() ([]string, error) { return nil, errors.New("heartbeats unreadable") })
	})
	h.bucket.put(keysFrom("t", "x", ago(time.Hour), 3)...)
	if err := h.loop.Sweep(context.Background()); err == nil || !strings.Contains(err.Error(), "heartbeats unreadable") {
		t.Fatalf("error %v", err)
	}
	if st := h.loop.Stats(); st.Errors != 1 || st.Lists != 0 || st.Delivered != 0 {
		t.Fatalf("stats %+v", st)
	}
	if !strings.Contains(h.logs.String(), "heartbeats unreadable") {
		t.Fatal("not logged")
	}
}

func TestSweepCountsMalformed(t *testing.T) {
	h := newHarness(t, nil)
	good := keysFrom("t", "x", ago(time.Hour), 2)
	h.bucket.put(good...)
	h.bucket.put("alarms/t/000000000000001/c/not-hex", "alarms/t/stray")
	if err := h.loop.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := h.loop.Stats(); st.Malformed != 2 || st.Entries != 2 || st.Delivered != 2 {
		t.Fatalf("stats %+v", st)
	}
	if !strings.Contains(h.logs.String(), "alarms/t/000000000000001/c/not-hex") {
		t.Fatalf("malformed key not reported: %s", h.logs.String())
	}
}

// Two nodes share a backlog of a dead third node's actors.
func TestSweepSharesAmongLiveNodes(t *testing.T) {
	other := "10.0.0.2:7000"
	keys := keysFrom("t", "x", ago(2*testMargin), 200) // not three margins overdue
	var seen []string
	for _, node := range []string{self, other} {
		h := newHarness(t, func(c *Config) {
			c.Self = node
			c.Live = staticLive{self, other}
		})
		h.bucket.put(keys...)
		if err := h.loop.Sweep(context.Background()); err != nil {
			t.Fatal(err)
		}
		got := h.sink.take()
		if len(got) < 50 {
			t.Fatalf("node %s took %d of 200", node, len(got))
		}
		for _, d := range got {
			seen = append(seen, d.Keys...)
		}
	}
	slices.Sort(seen)
	if !slices.Equal(seen, keys) {
		t.Fatalf("the two nodes delivered %d keys (with duplicates or gaps), want each of 200 once", len(seen))
	}
}

// Run sweeps at once, then every period; a failed sweep is retried the next
// period; Run ends with its context.
func TestRunSweepsEveryPeriod(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Period = 10 * time.Second })
	h.bucket.fail = func(call int, _, _ string) error {
		if call == 1 {
			return errors.New("unreachable")
		}
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.loop.Run(ctx) }()

	h.clock.awaitWaiter(t) // first sweep (failed) done
	if st := h.loop.Stats(); st.Sweeps != 1 || st.Errors != 1 {
		t.Fatalf("after start: %+v", st)
	}
	h.bucket.put(keysFrom("t", "x", ago(time.Hour), 1)...)
	h.clock.Advance(9 * time.Second)
	if st := h.loop.Stats(); st.Sweeps != 1 {
		t.Fatalf("swept before the period: %+v", st)
	}
	h.clock.Advance(time.Second)
	h.clock.awaitWaiter(t) // second sweep done
	if st := h.loop.Stats(); st.Sweeps != 2 || st.Errors != 1 || st.Delivered != 1 {
		t.Fatalf("after one period: %+v", st)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run returned %v", err)
	}
}

func TestNewChecksConfig(t *testing.T) {
	_, err := New(Config{Self: self})
	if err == nil {
		t.Fatal("no error")
	}
	for _, f := range []string{"Margin", "Lister", "Clock", "Sink", "Live", "Tenants", "Rand"} {
		if !strings.Contains(err.Error(), f) {
			t.Errorf("error %q does not name %s", err, f)
		}
	}
}

// BenchmarkSweepNoneOverdue measures a sweep over 100,000 entries none of
// which is overdue: one LIST of one page.
func BenchmarkSweepNoneOverdue(b *testing.B) {
	bucket := &memBucket{}
	bucket.put(keysFrom("t", "f", testNow.UnixMilli(), 100_000)...)
	l, err := New(Config{Self: self, Margin: testMargin, Lister: bucket, Clock: newFakeClock(testNow),
		Sink: SinkFunc(func(Overdue) {}), Live: staticLive{self}, Tenants: StaticTenants{"t"},
		Rand: rand.New(rand.NewPCG(1, 1))})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := l.Sweep(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	if bucket.lists != int(l.Stats().Sweeps) {
		b.Fatalf("%d LISTs for %d sweeps", bucket.lists, l.Stats().Sweeps)
	}
}

// BenchmarkSweepFullBacklog measures a sweep that reads 2,048 overdue
// entries and plans 256 deliveries.
func BenchmarkSweepFullBacklog(b *testing.B) {
	bucket := &memBucket{}
	bucket.put(keysFrom("t", "b", ago(time.Hour), 2048)...)
	l, err := New(Config{Self: self, Margin: testMargin, Lister: bucket, Clock: newFakeClock(testNow),
		Sink: SinkFunc(func(Overdue) {}), Live: staticLive{self, "10.0.0.2:7000", "10.0.0.3:7000"},
		Tenants: StaticTenants{"t"}, Rand: rand.New(rand.NewPCG(1, 1))})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := l.Sweep(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}

// A tenant whose plan the cap cut short is walked again as soon as the
// node has delivered most of what the sweep offered (Config.Pending at a
// quarter of the cap or less), a poll after the sweep, not a period later;
// while the node still has them pending, or after a sweep whose LIST
// failed, it waits for the period. Each early walk costs the LISTs of one
// walk and nothing else.
func TestRunRelistsACappedTenantOnceItsDeliveriesEnd(t *testing.T) {
	var mu sync.Mutex
	pending := 0
	setPending := func(n int) { mu.Lock(); pending = n; mu.Unlock() }
	h := newHarness(t, func(c *Config) {
		c.Period = 10 * time.Second
		c.Pending = func() int { mu.Lock(); defer mu.Unlock(); return pending }
	})
	h.sink.then = func(Overdue) { mu.Lock(); pending++; mu.Unlock() } // the timer holds it
	h.bucket.put(keysFrom("t", "b", ago(time.Hour), 1000)...)
	deliverAll := func() int { // the node delivers what it was offered
		got := h.sink.take()
		for _, d := range got {
			h.bucket.remove(d.Keys...)
		}
		setPending(0)
		return len(got)
	}
	stop := h.run(t)

	poll := 100 * time.Millisecond // a twentieth of the period, at most 100 ms
	h.clock.awaitWaiter(t)         // the first sweep: the cap cut it short
	if st := h.loop.Stats(); st.Delivered != DefaultMaxDeliveries || st.Relists != 0 {
		t.Fatalf("after the first sweep: %+v", st)
	}
	// The node still has them pending: a poll later, no walk.
	h.clock.Advance(poll)
	h.clock.awaitWaiter(t)
	if st := h.loop.Stats(); st.Sweeps != 1 {
		t.Fatalf("walked again with the cap's deliveries still pending: %+v", st)
	}
	// Delivered: the next poll walks the tenant again and offers 256 more.
	if n := deliverAll(); n != DefaultMaxDeliveries {
		t.Fatalf("offered %d, want the cap", n)
	}
	lists := h.bucket.lists
	h.clock.Advance(poll)
	h.clock.awaitWaiter(t)
	st := h.loop.Stats()
	if st.Sweeps != 2 || st.Relists != 1 || st.Delivered != 2*DefaultMaxDeliveries {
		t.Fatalf("a poll after the cap's deliveries ended, %v after the first sweep: %+v; want a second walk that offered 256 more", 2*poll, st)
	}
	if n := h.bucket.lists - lists; n > 3 {
		t.Fatalf("the early walk made %d LISTs, want at most 3 (2,048 keys in pages of 1,000)", n)
	}
	// With 232 pending, above a quarter of the cap, the loop waits.
	setPending(DefaultMaxDeliveries/4 + 1)
	h.sink.take()
	h.clock.Advance(poll)
	h.clock.awaitWaiter(t)
	if st := h.loop.Stats(); st.Sweeps != 2 {
		t.Fatalf("walked again with %d pending: %+v", DefaultMaxDeliveries/4+1, st)
	}
	// At a quarter of the cap it walks; that walk's LIST fails, and then
	// nothing is walked until the period.
	h.bucket.fail = func(int, string, string) error { return errors.New("503 SlowDown") }
	setPending(DefaultMaxDeliveries / 4)
	h.clock.Advance(poll)
	h.clock.awaitWaiter(t)
	if st := h.loop.Stats(); st.Sweeps != 3 || st.Errors != 1 {
		t.Fatalf("at a quarter of the cap pending: %+v; want a third walk, failed", st)
	}
	h.bucket.fail = nil
	setPending(0)
	now := h.clock.Now()
	h.clock.Advance(poll)
	if st := h.loop.Stats(); st.Sweeps != 3 {
		t.Fatalf("walked again early after a failed LIST: %+v", st)
	}
	// The period comes: a full sweep, which the cap cuts short again.
	h.clock.Advance(testNow.Add(10 * time.Second).Sub(now.Add(poll)))
	h.clock.awaitWaiter(t)
	if st := h.loop.Stats(); st.Sweeps != 4 || st.Relists != 2 {
		t.Fatalf("at the period: %+v; want the fourth walk", st)
	}
	stop()
}

// An early walk is of the tenants whose plans the cap cut short only: a
// tenant walked at every sweep for entries this node does not deliver
// (here: actors it already has in flight) waits for the period.
func TestARelistWalksOnlyTheCappedTenants(t *testing.T) {
	var mu sync.Mutex
	pending := 0
	h := newHarness(t, func(c *Config) {
		c.Period = 10 * time.Second
		c.Tenants = StaticTenants{"t", "u"}
		c.Busy = func(id abi.ActorID) bool { return id.Tenant == "u" }
		c.Pending = func() int { mu.Lock(); defer mu.Unlock(); return pending }
	})
	h.sink.then = func(d Overdue) { h.bucket.remove(d.Keys...) } // delivered at once
	h.bucket.put(keysFrom("t", "b", ago(time.Hour), 300)...)
	h.bucket.put(keysFrom("u", "b", ago(time.Hour), 5)...)
	stop := h.run(t)
	h.clock.awaitWaiter(t)
	if st := h.loop.Stats(); st.Sweeps != 2 || st.Lists != 2 || st.Delivered != DefaultMaxDeliveries {
		t.Fatalf("the first sweep: %+v; want both tenants walked, t's plan capped", st)
	}
	h.clock.Advance(100 * time.Millisecond)
	h.clock.awaitWaiter(t)
	if st := h.loop.Stats(); st.Sweeps != 3 || st.Lists != 3 || st.Relists != 1 || st.Delivered != 300 {
		t.Fatalf("a poll later, nothing pending: %+v; want tenant t walked again (one LIST) and u left for the period", st)
	}
	stop()
}

// A sweep that failed to list a tenant begins no early walk, though another
// tenant's plan was capped: the drain waits for the period while the
// bucket fails.
func TestNoEarlyWalkAfterASweepThatFailed(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.Period = 10 * time.Second
		c.Tenants = StaticTenants{"t", "u"}
		c.Pending = func() int { return 0 }
	})
	h.sink.then = func(d Overdue) { h.bucket.remove(d.Keys...) }
	h.bucket.fail = func(_ int, prefix, _ string) error {
		if strings.HasPrefix(prefix, "alarms/u/") {
			return errors.New("503 SlowDown")
		}
		return nil
	}
	h.bucket.put(keysFrom("t", "b", ago(time.Hour), 600)...)
	h.bucket.put(keysFrom("u", "b", ago(time.Hour), 5)...)
	stop := h.run(t)
	h.clock.awaitWaiter(t)
	if st := h.loop.Stats(); st.Sweeps != 2 || st.Errors != 1 || st.Delivered != DefaultMaxDeliveries {
		t.Fatalf("the first sweep: %+v; want t's plan capped and u's LIST failed", st)
	}
	h.clock.Advance(9 * time.Second)
	// Nothing waits on the clock now but the period's timer: give a loop
	// that would walk early (a poll's timer fired) the time to do it.
	time.Sleep(200 * time.Millisecond)
	if st := h.loop.Stats(); st.Sweeps != 2 || st.Relists != 0 {
		t.Fatalf("9 s after a failed sweep: %+v; want no early walk", st)
	}
	h.clock.Advance(time.Second)
	h.clock.awaitWaiter(t)
	if st := h.loop.Stats(); st.Sweeps != 4 || st.Relists != 0 || st.Delivered != 2*DefaultMaxDeliveries {
		t.Fatalf("at the period: %+v; want both tenants walked again, and no walk before", st)
	}
	stop()
}
