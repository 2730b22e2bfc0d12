package alarms_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/wasmkeep/alarms"
	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/alarmindex"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/hostmod"
	"github.com/wasmkeep/alarms/internal/metricstest"
	"github.com/wasmkeep/alarms/sweeper"
)

// metricValue reads reg's series of name whose labels include the given
// pairs: a counter's or a gauge's value, or a histogram's count (summed over
// the matching series; 0 when there is none).
func metricValue(t *testing.T, reg prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	return metricstest.Gather(reg).Value(name, labels...)
}

func histogramSum(t *testing.T, reg prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetHistogram().GetSampleSum()
		}
	}
	t.Fatalf("no histogram %s", name)
	return 0
}

// scriptedTaker hands out the actor; its alarm event does what run says.
type scriptedTaker struct {
	a       *fakeActor
	takeErr error
	run     func(a *fakeActor) hostmod.Delivery
}

type scriptedTaken struct {
	*fakeActor
	run func(a *fakeActor) hostmod.Delivery
}

func (s scriptedTaken) RunAlarm(context.Context) (hostmod.Delivery, error) {
	return s.run(s.fakeActor), nil
}

func (tk *scriptedTaker) Take(context.Context, abi.ActorID) (alarms.Actor, func(error), error) {
	if tk.takeErr != nil {
		return nil, nil, tk.takeErr
	}
	return scriptedTaken{fakeActor: tk.a, run: tk.run}, func(error) {}, nil
}

// failList fails the next LIST of a tenant's index in a metrics fixture's
// bucket.
var failList atomic.Bool

func newMetricsFixture(t *testing.T, reg prometheus.Registerer) *fixture {
	t.Helper()
	f := &fixture{mem: bucket.NewMem(), j: &journal{}, host: &fakeHost{now: time.UnixMilli(t1)}, timer: sweeper.NewTimer(retryMax)}
	f.mem.Faults = func(op bucket.Op) bucket.Fault {
		if op.Kind == bucket.OpList && op.Delimiter == "" && failList.CompareAndSwap(true, false) {
			return bucket.Fault{Err: errors.New("injected")}
		}
		return bucket.Fault{}
	}
	b := journaled{Bucket: f.mem, j: f.j}
	f.del = bucket.NewDeleter(b, time.Hour, nil)
	p, err := alarms.Register(alarms.Config{
		Bucket: b, Host: f.host, Timer: f.timer,
		Margin: 15 * time.Second, RetryMax: retryMax, Nonces: &counterNonces{},
		Deletes: f.del, Registerer: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	f.p = p
	return f
}

// The plugin's metrics move with what it does: the timer's pending alarms,
// each delivery's outcome, lateness, retries and failing actors, the
// index's PUTs and DELETEs, and the sweeps.
func TestPluginMetricsFollowDeliveriesIndexAndSweeps(t *testing.T) {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	f := newMetricsFixture(t, reg)
	a := f.actor(3)
	key := alarms.TimerKey(a.id)
	v := func(name string, labels ...string) float64 { t.Helper(); return metricValue(t, reg, name, labels...) }
	want := func(got, want float64, what string) {
		t.Helper()
		if got != want {
			t.Fatalf("%s = %v, want %v", what, got, want)
		}
	}

	// Pending: what the timer holds.
	f.timer.Set(key, t1)
	f.timer.Set("t/c/"+"6f74686572", t2)
	want(v("wasmkeep_alarms_pending"), 2, "pending")
	f.timer.Remove("t/c/6f74686572")
	want(v("wasmkeep_alarms_pending"), 1, "pending after a removal")

	// A run 1.5 s late that succeeds.
	a.alarm = ptr(t1)
	f.host.now = time.UnixMilli(t1 + 1500)
	ok := func(a *fakeActor) hostmod.Delivery {
		a.alarm = nil
		return hostmod.Delivery{Ran: true, Scheduled: t1}
	}
	f.timer.Remove(key)
	f.deliverDue(&scriptedTaker{a: a, run: ok}, key, t1)
	want(v("wasmkeep_alarm_firings_total", "outcome", "ok"), 1, "firings ok")
	want(v("wasmkeep_alarm_lateness_seconds"), 1, "lateness count")
	want(histogramSum(t, reg, "wasmkeep_alarm_lateness_seconds"), 1.5, "lateness sum")
	want(v("wasmkeep_alarms_pending"), 0, "pending after the run")
	want(v("wasmkeep_alarm_retries_total"), 0, "retries")

	// A third try that fails: failed, a retry, one failing actor with 3
	// failures.
	a.alarm = ptr(t1)
	fail := func(a *fakeActor) hostmod.Delivery {
		a.alarm = ptr(t1 + 4000)
		return hostmod.Delivery{Ran: true, Scheduled: t1, RetryCount: 2, Err: errors.New("on-alarm returned 1")}
	}
	f.deliverDue(&scriptedTaker{a: a, run: fail}, key, t1)
	want(v("wasmkeep_alarm_firings_total", "outcome", "failed"), 1, "firings failed")
	want(v("wasmkeep_alarm_retries_total"), 1, "retries")
	want(v("wasmkeep_alarm_failing_actors"), 1, "failing actors")
	want(v("wasmkeep_alarm_retry_count_max"), 3, "highest retry count")
	want(v("wasmkeep_alarm_lateness_seconds"), 2, "lateness count")
	// An event that sets the alarm resets the failure count.
	f.p.Arm(a.id, ptr(t2))
	want(v("wasmkeep_alarm_failing_actors"), 0, "failing actors after an event set the alarm")
	want(v("wasmkeep_alarm_retry_count_max"), 0, "highest retry count after an event set the alarm")
	// Its last allowed attempt fails again: the alarm is cleared and a
	// dead letter kept; the actor is failing no more (nothing is left to
	// retry), so the gauges, and the alert on them, clear.
	a.alarm = ptr(t1)
	f.deliverDue(&scriptedTaker{a: a, run: fail}, key, t1)
	want(v("wasmkeep_alarm_failing_actors"), 1, "failing actors after a failed attempt")
	deadLetter := func(a *fakeActor) hostmod.Delivery {
		a.alarm = nil
		return hostmod.Delivery{Ran: true, Scheduled: t1, RetryCount: 3, Err: errors.New("on-alarm returned 1"), GaveUp: true}
	}
	a.alarm = ptr(t1)
	f.deliverDue(&scriptedTaker{a: a, run: deadLetter}, key, t1)
	want(v("wasmkeep_alarms_dead_lettered_total"), 1, "dead letters")
	want(v("wasmkeep_alarm_failing_actors"), 0, "failing actors after the dead letter")
	want(v("wasmkeep_alarm_retry_count_max"), 0, "highest retry count after the dead letter")
	f.p.Arm(a.id, ptr(t2))

	// A stale delivery: the committed alarm is elsewhere; the entry at
	// the delivered time is removed.
	a.alarm = ptr(t2)
	f.put(t, tagged(t1, 3, "5"))
	f.deliverDue(&scriptedTaker{a: a, run: ok}, key, t1)
	want(v("wasmkeep_alarm_firings_total", "outcome", "stale"), 1, "firings stale")
	want(v("wasmkeep_index_deletes_total", "reason", "stale"), 1, "index deletes stale")
	want(v("wasmkeep_index_unmatched_entries_total", "reason", "stale"), 1, "unmatched entries, stale")
	// Index drift: an entry of an actor with no state is removed; one of an
	// actor the bucket has no state of is kept, and counted at each try.
	gone := f.actor(3)
	gone.initRecorded = false
	f.put(t, tagged(t1, 3, "6"))
	f.deliverDue(&scriptedTaker{a: gone, run: ok}, key, t1)
	want(v("wasmkeep_index_unmatched_entries_total", "reason", "no_state"), 1, "unmatched entries, no state")
	want(v("wasmkeep_index_deletes_total", "reason", "stale"), 2, "index deletes stale")
	absent := f.actor(3)
	absent.initRecorded, absent.bucketHad, absent.uploaded = false, false, false
	f.put(t, tagged(t1, 3, "7"))
	for range 2 {
		f.deliverDue(&scriptedTaker{a: absent, run: ok}, key, t1)
	}
	want(v("wasmkeep_index_unmatched_entries_total", "reason", "not_in_bucket"), 2, "unmatched entries, not in the bucket, after two tries")
	want(v("wasmkeep_index_deletes_total", "reason", "stale"), 2, "index deletes stale (the kept entry stays)")
	want(v("wasmkeep_index_unmatched_entries_total", "reason", "stale"), 1, "unmatched entries, stale (unchanged)")
	// Not this node's, and a host-side failure.
	f.deliverDue(&scriptedTaker{a: a, takeErr: alarms.NotHere(errors.New("held by n2"))}, key, t2)
	want(v("wasmkeep_alarm_firings_total", "outcome", "not_here"), 1, "firings not_here")
	f.deliverDue(&scriptedTaker{a: a, takeErr: errors.New("bucket unreachable")}, key, t2)
	want(v("wasmkeep_alarm_firings_total", "outcome", "gave_up"), 1, "firings gave_up")
	want(v("wasmkeep_alarm_firings_total", "outcome", "ok"), 1, "firings ok (unchanged)")
	want(v("wasmkeep_alarm_lateness_seconds"), 4, "lateness count (runs only)")

	// The index: a changed alarm PUTs a fresh entry and replaces the
	// recorded one.
	b := f.actor(3)
	e1 := tagged(t1, 3, "9")
	f.put(t, e1)
	record(b, &e1)
	b.alarm = ptr(t2)
	puts, dels := v("wasmkeep_index_puts_total", "result", "ok"), v("wasmkeep_index_deletes_total", "reason", "replaced")
	f.j.take()
	if err := f.p.Replicate(ctx, b, alarms.AfterEvent); err != nil {
		t.Fatal(err)
	}
	want(v("wasmkeep_index_puts_total", "result", "ok")-puts, 1, "index PUTs ok of one replication")
	want(v("wasmkeep_index_deletes_total", "reason", "replaced")-dels, 1, "index deletes replaced of one replication")
	want(v("wasmkeep_index_puts_total", "result", "error"), 0, "index PUTs failed")

	// A sweep over one overdue entry of another actor.
	other := abi.ActorID{Tenant: "t", Class: "c", Name: "y"}
	k := alarmindex.Key{Actor: other, DueMs: t1 - 60_000, Tag: alarmindex.Tag{Generation: 1, Nonce: "1"}}
	if _, err := f.mem.Put(ctx, k.String(), nil, bucket.Cond{}); err != nil {
		t.Fatal(err)
	}
	f.host.now = time.UnixMilli(t1)
	f.p.Sweep(ctx)
	want(v("wasmkeep_sweep_duration_seconds"), 1, "sweeps")
	want(v("wasmkeep_sweep_tenants_total"), 1, "tenants swept")
	want(v("wasmkeep_sweep_lists_total"), 1, "sweep LISTs")
	want(v("wasmkeep_sweep_entries_total"), 1, "overdue entries read")
	want(v("wasmkeep_sweep_offered_total"), 1, "deliveries offered")
	want(v("wasmkeep_sweep_errors_total"), 0, "sweep errors")
	failList.Store(true)
	f.p.Sweep(ctx)
	want(v("wasmkeep_sweep_errors_total"), 1, "sweep errors after a failed LIST")
	want(v("wasmkeep_sweep_duration_seconds"), 2, "sweeps")

	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Fatalf("metric lint: %v %v", problems, err)
	}
}

// A plugin without a registerer registers nothing (not in the default
// registry either); two plugins with registries of their own do not
// collide; two on one registry are refused with a clear error.
func TestPluginMetricsRegistries(t *testing.T) {
	before, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	newFixture(t)
	after, _ := prometheus.DefaultGatherer.Gather()
	if len(after) != len(before) {
		t.Fatalf("a plugin without a registerer added %d families to the default registry", len(after)-len(before))
	}
	r1, r2 := prometheus.NewRegistry(), prometheus.NewRegistry()
	f1, f2 := newMetricsFixture(t, r1), newMetricsFixture(t, r2)
	f1.timer.Set("t/c/78", t1)
	if p1, p2 := metricValue(t, r1, "wasmkeep_alarms_pending"), metricValue(t, r2, "wasmkeep_alarms_pending"); p1 != 1 || p2 != 0 {
		t.Fatalf("pending %v and %v, want 1 and 0: each registry shows its own plugin", p1, p2)
	}
	_ = f2
	_, err = alarms.Register(alarms.Config{Bucket: bucket.NewMem(), Host: f1.host, Timer: sweeper.NewTimer(retryMax), Margin: time.Second, Registerer: r1})
	if err == nil || !strings.Contains(err.Error(), "registering the plugin's metrics") {
		t.Fatalf("a second plugin on the same registry: err = %v, want a registration error", err)
	}
	// Single node: the timer and delivery metrics, no sweep or index ones.
	r3 := prometheus.NewRegistry()
	if _, err := alarms.Register(alarms.Config{SingleNode: true, Host: f1.host, Timer: sweeper.NewTimer(retryMax), Registerer: r3}); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(r3, "wasmkeep_alarms_pending", "wasmkeep_sweep_lists_total", "wasmkeep_index_puts_total"); n != 1 {
		t.Fatalf("single node: %d series of pending, sweep LISTs and index PUTs, want 1 (pending only)", n)
	}
}

// Failed index writes are counted: a PUT the bucket refuses, and the keys
// of a batched delete that failed (through the plugin's own Deleter).
func TestPluginMetricsCountIndexFailures(t *testing.T) {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	mem := bucket.NewMem()
	var failPut, failBatch atomic.Bool
	mem.Faults = func(op bucket.Op) bucket.Fault {
		if (op.Kind == bucket.OpPut && failPut.Load()) || (op.Kind == bucket.OpDeleteBatch && failBatch.Load()) {
			return bucket.Fault{Err: errors.New("injected")}
		}
		return bucket.Fault{}
	}
	f := &fixture{mem: mem, j: &journal{}, host: &fakeHost{now: time.UnixMilli(t1)}, timer: sweeper.NewTimer(retryMax)}
	p, err := alarms.Register(alarms.Config{
		Bucket: mem, Host: f.host, Timer: f.timer, Margin: 15 * time.Second, RetryMax: retryMax,
		Nonces: &counterNonces{}, Registerer: reg, // the plugin's own Deleter
	})
	if err != nil {
		t.Fatal(err)
	}
	f.p = p
	a := f.actor(3)
	e1 := tagged(t1, 3, "9")
	f.put(t, e1)
	record(a, &e1)

	failPut.Store(true)
	a.alarm = ptr(t2)
	if err := p.Replicate(ctx, a, alarms.AfterEvent); err == nil {
		t.Fatal("Replicate with the index PUT failing succeeded")
	}
	failPut.Store(false)
	if got := metricValue(t, reg, "wasmkeep_index_puts_total", "result", "error"); got != 1 {
		t.Fatalf("failed index PUTs = %v, want 1", got)
	}

	failBatch.Store(true)
	if err := p.Replicate(ctx, a, alarms.AfterEvent); err != nil {
		t.Fatal(err)
	}
	p.FlushDeletes(ctx)
	if got := metricValue(t, reg, "wasmkeep_index_deletes_total", "reason", "replaced"); got != 1 {
		t.Fatalf("replaced entries queued = %v, want 1", got)
	}
	// The failed key waits for a retry; each Flush sends it at once. It
	// counts as failed only when the last retry fails.
	if got := metricValue(t, reg, "wasmkeep_index_delete_errors_total", "reason", "replaced"); got != 0 {
		t.Fatalf("replaced entries whose delete failed = %v before any retry, want 0", got)
	}
	for range bucket.DefaultDeleteRetries {
		p.FlushDeletes(ctx)
	}
	if got := metricValue(t, reg, "wasmkeep_index_delete_errors_total", "reason", "replaced"); got != 1 {
		t.Fatalf("replaced entries whose delete failed = %v, want 1", got)
	}
	if got := metricValue(t, reg, "wasmkeep_index_puts_total", "result", "ok"); got != 1 {
		t.Fatalf("index PUTs ok = %v, want 1", got)
	}
}

// An alarm an event commits already due (a guest that sets "now" from a
// stale time, an import of an old export, a PUT of a time in 1970) is
// late from when it was committed, not from the time it names: set at
// 1,000 ms, it runs 2 ms after the event and adds 0.002 s to the
// lateness, not 57 years, which would hold the late-alarms alert on. An
// alarm set ahead and run late still counts from its own time, and so
// does one a run's handler left due.
func TestLatenessOfAnAlarmSetInThePastCountsFromItsEvent(t *testing.T) {
	reg := prometheus.NewRegistry()
	f := newMetricsFixture(t, reg)
	a := f.actor(3)
	key := alarms.TimerKey(a.id)
	sum := func() float64 { t.Helper(); return histogramSum(t, reg, "wasmkeep_alarm_lateness_seconds") }
	ran := func(at int64) func(a *fakeActor) hostmod.Delivery {
		return func(a *fakeActor) hostmod.Delivery {
			a.alarm = nil
			return hostmod.Delivery{Ran: true, Scheduled: at}
		}
	}

	const past = 1000
	a.alarm = ptr(past)
	f.p.Arm(a.id, ptr(past)) // the event, at t1
	f.host.now = time.UnixMilli(t1 + 2)
	f.timer.Remove(key)
	f.deliverDue(&scriptedTaker{a: a, run: ran(past)}, key, past)
	if got := metricValue(t, reg, "wasmkeep_alarm_lateness_seconds"); got != 1 {
		t.Fatalf("lateness count = %v, want 1", got)
	}
	if got := sum(); got != 0.002 {
		t.Fatalf("lateness sum after an alarm set at %d ms ran 2 ms after its event = %v s, want 0.002", past, got)
	}

	// Set ahead, run 1.5 s late: 1.5 s.
	a.alarm = ptr(t1 + 10)
	f.p.Arm(a.id, ptr(t1+10))
	f.host.now = time.UnixMilli(t1 + 1510)
	f.deliverDue(&scriptedTaker{a: a, run: ran(t1 + 10)}, key, t1+10)
	if got := sum() - 0.002; got < 1.4999 || got > 1.5001 {
		t.Fatalf("lateness of an alarm set ahead and run 1.5 s late = %v s, want 1.5", got)
	}

	// The past alarm's note went with its run: the same time delivered
	// again without an event (taken over, say) counts from that time.
	a.alarm = ptr(past)
	before := sum()
	f.deliverDue(&scriptedTaker{a: a, run: ran(past)}, key, past)
	if got, want := sum()-before, float64(t1+1510-past)/1000; got != want {
		t.Fatalf("lateness of the same time delivered with no event = %v s, want %v", got, want)
	}
}
