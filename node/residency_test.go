package node_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/alarmindex"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/internal/s3test"
	"github.com/wasmkeep/alarms/internal/testguest"
	"github.com/wasmkeep/alarms/node"
)

func oneshot(t testing.TB) map[string][]byte {
	return map[string][]byte{"oneshot": testguest.Fixture(t, "oneshot_alarm")}
}

func atReq(ms int64) []byte {
	var b [8]byte
	for i := range b {
		b[i] = byte(ms >> (8 * i))
	}
	return b[:]
}

// firings counts on-alarm runs that committed, per actor, across node
// restarts; unconfirmed are those whose delivery then failed on the host
// side (in cluster mode: the upload or the hold check after it, as when the
// node crashes in the middle), which the spec lets run again.
type firings struct {
	mu          sync.Mutex
	fired       map[abi.ActorID]int
	unconfirmed map[abi.ActorID]int
	total       int
	// quiet holds the actors settledInBucket saw with no alarm pending and
	// no report, and when: one counts as fired unreported only if no
	// report came for a while after, since a run that just committed on a
	// live node reports after the bucket or its database already shows it.
	quiet map[abi.ActorID]time.Time
}

func newFirings() *firings {
	return &firings{fired: map[abi.ActorID]int{}, unconfirmed: map[abi.ActorID]int{}, quiet: map[abi.ActorID]time.Time{}}
}

func (f *firings) observe(ev node.DeliveryEvent) {
	if !ev.Event.Ran || ev.Event.Err != nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if ev.Err != nil {
		f.unconfirmed[ev.Actor]++
	}
	if f.fired[ev.Actor] == 0 {
		f.total++
	}
	f.fired[ev.Actor]++
}

// settledInBucket records as fired, unreported, each actor of ids that
// no node reported firing but whose replicated state has no alarm pending
// (its only alarm was one-shot, so on-alarm ran and committed) on two calls
// at least half a second apart, and reports whether every actor is now
// accounted for. One look is not enough: a delivery reports after its
// commit, so a look between the two would count its run twice.
func (f *firings) settledInBucket(t *testing.T, n *node.Node, ids []abi.ActorID) bool {
	t.Helper()
	for _, id := range ids {
		f.mu.Lock()
		seen := f.fired[id] > 0
		f.mu.Unlock()
		if seen {
			continue
		}
		p, err := n.Peek(context.Background(), id)
		if err != nil || p.State.Alarm != nil {
			continue
		}
		f.mu.Lock()
		first, seenQuiet := f.quiet[id]
		if !seenQuiet {
			f.quiet[id] = time.Now()
		}
		if f.fired[id] == 0 && seenQuiet && time.Since(first) >= 500*time.Millisecond {
			t.Logf("actor %s: its run on the crashed node landed in the bucket unreported", id)
			f.fired[id]++
			f.total++
		}
		f.mu.Unlock()
	}
	return f.count() >= len(ids)
}

// count is how many actors fired.
func (f *firings) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.total
}

// check fails unless every actor of ids fired exactly once, or, for one
// whose run went unconfirmed, at least once.
func (f *firings) check(t *testing.T, ids []abi.ActorID) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	lost, dup, again := 0, 0, 0
	for _, id := range ids {
		switch n := f.fired[id]; {
		case n == 0:
			if lost < 5 {
				t.Logf("actor %s never fired", id)
			}
			lost++
		case n > 1 && f.unconfirmed[id] == 0:
			if dup < 5 {
				t.Logf("actor %s fired %d times", id, n)
			}
			dup++
		case n > 1:
			again++
		}
	}
	if lost > 0 || dup > 0 {
		t.Fatalf("%d actors: %d lost, %d fired more than once", len(ids), lost, dup)
	}
	if again > 0 {
		t.Logf("%d actors whose run was cut short by the crash ran again", again)
	}
}

func checkBudget(t *testing.T, n *node.Node, dbs, insts int) engine.ResidencyStats {
	t.Helper()
	st, _ := n.Residency()
	if st.PeakOpenDatabases > dbs || st.PeakLiveInstances > insts {
		t.Fatalf("peaks of %d open databases and %d live instances; the budget is %d and %d", st.PeakOpenDatabases, st.PeakLiveInstances, dbs, insts)
	}
	return st
}

// A node with a budget of 50 open actors serves 2,000 actors whose alarms
// are due at once: every alarm fires exactly once, the node's own counters
// never pass the budget, and a crash in the middle loses nothing.
func TestABudgetOf50Serves2000AlarmsDueAtOnce(t *testing.T) {
	t.Parallel()
	const actors, dbs, insts = 2000, 50, 25
	dir := t.TempDir()
	classes := oneshot(t)
	f := newFirings()
	cfg := node.Config{MaxOpenDatabases: dbs, MaxInstances: insts, OnDelivery: f.observe}
	ctx := context.Background()

	n := newNode(t, dir, classes, cfg)
	due := time.Now().Add(-time.Second).UnixMilli()
	ids := make([]abi.ActorID, actors)
	for i := range ids {
		ids[i] = abi.ActorID{Tenant: "t", Class: "oneshot", Name: fmt.Sprintf("a%04d", i)}
		if _, err := n.Exec(ctx, ids[i], atReq(due+int64(i%7)), node.Exec); err != nil {
			t.Fatal(err)
		}
	}
	st := checkBudget(t, n, dbs, insts)
	if st.Slept < actors-dbs {
		t.Fatalf("creating %d actors under a budget of %d put only %d to sleep", actors, dbs, st.Slept)
	}
	n.Start(ctx)
	waitFor(t, "a quarter of the alarms to fire", func() bool { return f.count() >= actors/4 })
	n.Crash() // in the middle: deliveries in flight finish, the rest stay due
	checkBudget(t, n, dbs, insts)
	mid := f.count()
	if mid >= actors {
		t.Fatalf("all %d alarms fired before the crash; the test restarts in the middle", mid)
	}

	n2 := newNode(t, dir, classes, cfg)
	t.Cleanup(func() { n2.Close(ctx) })
	if got := n2.Timer().Len(); got != actors-mid {
		t.Fatalf("after the restart the timer holds %d alarms; %d had not fired", got, actors-mid)
	}
	n2.Start(ctx)
	waitFor(t, "every alarm to fire", func() bool { return f.count() >= actors })
	n2.Close(ctx)
	f.check(t, ids)
	checkBudget(t, n2, dbs, insts)
	t.Logf("%d fired before the crash, %d after", mid, actors-mid)
	for _, id := range ids {
		if _, ok, err := engine.ReadAlarm(node.Path(dir, id)); err != nil || ok {
			t.Fatalf("actor %s: an alarm is left (%v, %v) after it fired", id, ok, err)
		}
	}
}

// In single-node mode too, an actor no event reached for the idle timeout
// is closed, and the node forgets it; its next event opens it again.
func TestIdleActorsCloseOnASingleNode(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	n := newNode(t, dir, oneshot(t), node.Config{IdleTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { n.Close(context.Background()) })
	n.Start(context.Background())
	ctx := context.Background()
	later := time.Now().Add(time.Hour).UnixMilli()
	for i := 0; i < 5; i++ {
		if _, err := n.Exec(ctx, abi.ActorID{Tenant: "t", Class: "oneshot", Name: fmt.Sprint(i)}, atReq(later), node.Exec); err != nil {
			t.Fatal(err)
		}
	}
	if st, known := n.Residency(); st.OpenDatabases != 5 || known != 5 {
		t.Fatalf("after 5 events: %d databases open, %d actors known", st.OpenDatabases, known)
	}
	waitFor(t, "the idle actors to close", func() bool {
		st, known := n.Residency()
		return st.OpenDatabases == 0 && st.LiveInstances == 0 && known == 0
	})
	if n.Timer().Len() != 5 {
		t.Fatalf("the timer holds %d alarms after the actors closed, want 5", n.Timer().Len())
	}
	st, err := n.State(ctx, abi.ActorID{Tenant: "t", Class: "oneshot", Name: "3"})
	if err != nil || st.Alarm == nil || *st.Alarm != later {
		t.Fatalf("a closed actor's state: %+v, %v", st, err)
	}
}

// The same in cluster mode on versitygw, with a budget of 10: 300 actors
// whose alarms are due at once all fire exactly once with the counters
// within the budget, through a crash of the node in the middle (a new node
// on the same data directory takes the alarms back once the crashed node's
// lease has lapsed, through the sweep).
func TestClusterBudgetServesAlarmsDueAtOnce(t *testing.T) {
	t.Parallel()
	const actors, dbs, insts = 300, 10, 5
	b := s3test.Start(t).Bucket
	dir := t.TempDir()
	classes := oneshot(t)
	f := newFirings()
	ctx := context.Background()
	start := func(name string) *node.Node {
		n, err := node.New(ctx, node.Config{
			DataDir: dir, Classes: classes, MaxOpenDatabases: dbs, MaxInstances: insts, OnDelivery: f.observe,
			Logger: hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Error, Output: testWriter{t}}),
			Cluster: &node.ClusterConfig{
				Bucket: b, NodeID: name, Addr: name + ".invalid:1",
				LeaseTTL: 2 * time.Second, LeaseMargin: 400 * time.Millisecond, LeaseGrace: time.Second,
				IdleTimeout: time.Hour, SweepPeriod: 200 * time.Millisecond, Tenants: []string{"t"},
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close(ctx) })
		return n
	}
	n := start("a")
	due := time.Now().Add(-time.Second).UnixMilli()
	ids := make([]abi.ActorID, actors)
	for i := range ids {
		ids[i] = abi.ActorID{Tenant: "t", Class: "oneshot", Name: fmt.Sprintf("c%03d", i)}
		if _, err := n.Exec(ctx, ids[i], atReq(due), node.ExecDurable); err != nil {
			t.Fatal(err)
		}
	}
	checkBudget(t, n, dbs, insts)
	n.Start(ctx)
	waitFor(t, "a third of the alarms to fire", func() bool { return f.count() >= actors/3 })
	n.Crash()
	checkBudget(t, n, dbs, insts)
	mid := f.count()

	n2 := start("b")
	n2.Start(ctx)
	// A run on the crashed node whose upload landed as the node died is
	// committed in the bucket (the one-shot alarm is gone) though the node
	// could not report it; such an actor must not fire again, so it counts
	// as fired once the replicated state shows no alarm pending.
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if f.count() < actors {
			time.Sleep(50 * time.Millisecond)
		}
		if f.count() >= actors || f.settledInBucket(t, n2, ids) {
			break
		}
		time.Sleep(time.Second)
	}
	n2.Close(ctx)
	if f.count() < actors {
		keys, _ := b.List(ctx, ixPrefix+alarmindex.TenantPrefix("t"), "", 1000)
		t.Logf("index entries left: %q", keys)
	}
	f.check(t, ids)
	checkBudget(t, n2, dbs, insts)
	t.Logf("%d fired before the crash, %d after", mid, actors-mid)
	keys, err := b.List(ctx, ixPrefix+alarmindex.TenantPrefix("t"), "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 0 {
		t.Fatalf("%d index entries left after every alarm fired, e.g. %s", len(keys), keys[0])
	}
}

// A database budget the process's file descriptor limit cannot hold is
// refused when the node starts, with the numbers, rather than failing as an
// open inside SQLite under load.
func TestABudgetPastTheFDLimitIsRefused(t *testing.T) {
	_, err := node.New(context.Background(), node.Config{DataDir: t.TempDir(), Classes: oneshot(t), MaxOpenDatabases: 1 << 40})
	if err == nil || !strings.Contains(err.Error(), "file descriptors") || !strings.Contains(err.Error(), "ulimit -n") {
		t.Fatalf("node with a budget of 2^40 open databases: %v; want a refusal naming the fd limit", err)
	}
}
