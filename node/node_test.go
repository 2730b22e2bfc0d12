package node_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/alarms"
	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/internal/testguest"
	"github.com/wasmkeep/alarms/node"
)

type counts struct {
	Requests   int    `json:"requests"`
	Fired      int    `json:"fired"`
	AlarmMs    *int64 `json:"alarm_ms"`
	IntervalMs int64  `json:"interval_ms"`
}

func newNode(t testing.TB, dir string, classes map[string][]byte, cfg node.Config) *node.Node {
	t.Helper()
	cfg.DataDir = dir
	cfg.Classes = classes
	cfg.EngineOptions = append(append(cfg.EngineOptions, preinitOptions()...), durableOptions(dir)...)
	n, err := node.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func counter(t testing.TB) map[string][]byte {
	return map[string][]byte{"counter": testguest.Build(t, "examples/counter-actor")}
}

func get(t *testing.T, n *node.Node, id abi.ActorID) counts {
	t.Helper()
	r, err := n.Request(context.Background(), id, []byte("get"))
	if err != nil {
		t.Fatal(err)
	}
	var c counts
	if err := json.Unmarshal(r.Response, &c); err != nil {
		t.Fatalf("reply %q: %v", r.Response, err)
	}
	return c
}

// waitFor polls cond for up to 20 s: a bound for a hung test, not a speed
// requirement.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestCounterFiresAndRearms(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	var fired []node.DeliveryEvent
	n := newNode(t, t.TempDir(), counter(t), node.Config{OnDelivery: func(ev node.DeliveryEvent) {
		mu.Lock()
		fired = append(fired, ev)
		mu.Unlock()
	}})
	defer n.Close(ctx)
	n.Start(ctx)
	id := abi.ActorID{Tenant: "t", Class: "counter", Name: "c1"}
	if _, err := n.Request(ctx, id, []byte("start 100")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "three firings", func() bool { mu.Lock(); defer mu.Unlock(); return len(fired) >= 3 })
	mu.Lock()
	for i, ev := range fired[:3] {
		d := ev.Event
		if ev.Err != nil || !d.Ran || d.Err != nil || d.Alarm == nil {
			t.Fatalf("firing %d: %+v", i, ev)
		}
		if ev.At.UnixMilli() < d.Scheduled {
			t.Fatalf("firing %d ran at %d, before its time %d", i, ev.At.UnixMilli(), d.Scheduled)
		}
		if i > 0 && d.Scheduled <= fired[i-1].Event.Scheduled {
			t.Fatalf("firing %d scheduled %d, not after the previous %d", i, d.Scheduled, fired[i-1].Event.Scheduled)
		}
	}
	mu.Unlock()
	c := get(t, n, id)
	if c.Fired < 3 || c.AlarmMs == nil || c.IntervalMs != 100 {
		t.Fatalf("counts %+v: want >= 3 firings committed and the alarm re-armed", c)
	}
}

func TestRestartFindsAlarmsInTheDataDirectory(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	classes := counter(t)
	n := newNode(t, dir, classes, node.Config{})
	want := map[abi.ActorID]int64{}
	for i := 0; i < 5; i++ {
		id := abi.ActorID{Tenant: "t", Class: "counter", Name: fmt.Sprintf("name/with/slashes-%d", i)}
		r, err := n.Request(ctx, id, []byte("start 3600000"))
		if err != nil {
			t.Fatal(err)
		}
		want[id] = *r.Alarm
	}
	if _, err := n.Request(ctx, abi.ActorID{Tenant: "t", Class: "counter", Name: "idle"}, []byte("get")); err != nil {
		t.Fatal(err)
	}
	n.Close(ctx)

	n2 := newNode(t, dir, classes, node.Config{})
	defer n2.Close(ctx)
	if got := n2.Timer().Len(); got != len(want) {
		t.Fatalf("after restart the timer holds %d alarms, want %d", got, len(want))
	}
	for id, at := range want {
		s, err := n2.State(ctx, id)
		if err != nil || s.Alarm == nil || *s.Alarm != at {
			t.Fatalf("actor %s after restart: %+v %v, want alarm %d", id, s, err, at)
		}
	}
}

func TestOneEventAtATimePerActor(t *testing.T) {
	ctx := context.Background()
	n := newNode(t, t.TempDir(), counter(t), node.Config{})
	defer n.Close(ctx)
	id := abi.ActorID{Tenant: "t", Class: "counter", Name: "busy"}
	const N = 40
	var wg sync.WaitGroup
	errs := make(chan error, N)
	for i := 0; i < N; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := n.Request(ctx, id, []byte("get")); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if c := get(t, n, id); c.Requests != N+1 {
		t.Fatalf("requests %d, want %d: concurrent events lost updates", c.Requests, N+1)
	}
}

func TestAHungHandlerDoesNotHoldUpOtherActors(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	var events []node.DeliveryEvent
	classes := map[string][]byte{
		"hang":  testguest.Fixture(t, "hang_on_alarm"),
		"bench": testguest.Fixture(t, "oneshot_alarm"),
	}
	n := newNode(t, t.TempDir(), classes, node.Config{
		EngineOptions: []engine.Option{engine.WithAlarmDeadline(2 * time.Second)},
		OnDelivery: func(ev node.DeliveryEvent) {
			mu.Lock()
			events = append(events, ev)
			mu.Unlock()
		},
	})
	defer n.Close(ctx)
	n.Start(ctx)
	hang := abi.ActorID{Tenant: "t", Class: "hang", Name: "h"}
	if _, err := n.Request(ctx, hang, nil); err != nil { // alarm at 1000 ms: due
		t.Fatal(err)
	}
	// The hung handler's delivery has begun: the timer popped it.
	waitFor(t, "the hung actor's delivery to start", func() bool {
		_, held := n.Timer().Get(alarms.TimerKey(hang))
		return !held
	})
	other := abi.ActorID{Tenant: "t", Class: "bench", Name: "o"}
	var req [8]byte
	binary.LittleEndian.PutUint64(req[:], uint64(time.Now().UnixMilli()))
	if _, err := n.Request(ctx, other, req[:]); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the other actor's delivery and the hung one's failure", func() bool {
		mu.Lock()
		defer mu.Unlock()
		var otherFirst, hangFailed bool
		for _, ev := range events {
			if ev.Actor == other && !hangFailed {
				otherFirst = true
			}
			if ev.Actor == hang && ev.Event.Err != nil {
				hangFailed = true
			}
		}
		if hangFailed && !otherFirst {
			t.Fatal("the other actor's alarm waited for the hung handler's deadline")
		}
		return otherFirst && hangFailed
	})
	s, err := n.State(ctx, hang)
	if err != nil || s.Alarm == nil || s.Failures < 1 {
		t.Fatalf("hung actor after its deadline: %+v %v, want a committed retry", s, err)
	}
}

// BenchmarkIdleLateness measures how late a due alarm fires on an idle node:
// 200 alarms spread over the next second, each fired by the node timer;
// lateness is the delivery's start minus the alarm time.
func BenchmarkIdleLateness(b *testing.B) {
	ctx := context.Background()
	var all []float64
	for it := 0; it < b.N; it++ {
		var mu sync.Mutex
		var late []float64
		done := make(chan struct{})
		const N = 200
		n := newNode(b, b.TempDir(), map[string][]byte{"bench": testguest.Fixture(b, "oneshot_alarm")}, node.Config{
			OnDelivery: func(ev node.DeliveryEvent) {
				if !ev.Event.Ran {
					return
				}
				mu.Lock()
				late = append(late, float64(ev.At.Sub(time.UnixMilli(ev.Event.Scheduled)).Microseconds())/1000)
				if len(late) == N {
					close(done)
				}
				mu.Unlock()
			},
		})
		n.Start(ctx)
		set := func(i int, at int64) {
			var req [8]byte
			binary.LittleEndian.PutUint64(req[:], uint64(at))
			if _, err := n.Request(ctx, abi.ActorID{Tenant: "b", Class: "bench", Name: fmt.Sprint(i)}, req[:]); err != nil {
				b.Fatal(err)
			}
		}
		for i := 0; i < N; i++ { // open each actor first, its alarm far off
			set(i, abi.MaxAlarmMillis)
		}
		base := time.Now().UnixMilli() + 200
		for i := 0; i < N; i++ {
			set(i, base+int64(i*5))
		}
		if late := time.Now().UnixMilli() - base; late > 0 {
			b.Fatalf("setting the alarms took past the first one's time (%d ms late)", late)
		}
		<-done
		n.Close(ctx)
		all = append(all, late...)
	}
	sort.Float64s(all)
	b.ReportMetric(all[len(all)/2], "p50-ms")
	b.ReportMetric(all[len(all)*99/100], "p99-ms")
	b.ReportMetric(0, "ns/op")
}

// An alarm re-armed for (almost) now is due while its own delivery is
// still finishing: the timer hands it over while the actor is in flight.
// It must fire once that delivery ends, not wait for a sweep (without a
// cluster, for ever). The observer's pause widens the window in which the
// re-armed time falls due.
func TestAnAlarmDueWhileItsDeliveryFinishesStillFires(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	fired := 0
	n := newNode(t, t.TempDir(), counter(t), node.Config{
		OnDelivery: func(ev node.DeliveryEvent) {
			if ev.Event.Ran {
				mu.Lock()
				fired++
				mu.Unlock()
			}
			time.Sleep(20 * time.Millisecond) // the re-armed alarm (1 ms) falls due meanwhile
		},
	})
	n.Start(context.Background())
	t.Cleanup(func() { n.Close(context.Background()) })
	id := abi.ActorID{Tenant: "t", Class: "counter", Name: "soon"}
	if _, err := n.Request(context.Background(), id, []byte("start 1")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		f := fired
		mu.Unlock()
		if f >= 5 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d firings in 30 s of an alarm re-armed every 1 ms, want 5", f)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestASingleNodeHasAPlugin: outside cluster mode the node still offers its
// plugin (a SingleNode one), so a host can read its delivery state the same
// way in both modes; it never sweeps.
func TestASingleNodeHasAPlugin(t *testing.T) {
	ctx := context.Background()
	n := newNode(t, t.TempDir(), counter(t), node.Config{})
	defer n.Close(ctx)
	n.Start(ctx)
	p := n.Plugin()
	if p == nil {
		t.Fatal("Plugin() is nil on a single node")
	}
	p.Sweep(ctx)
	if st := p.SweepStats(); !st.Last.IsZero() || st.LastErr != nil {
		t.Fatalf("a single node's plugin reports a sweep at %v (err %v)", st.Last, st.LastErr)
	}
	if st := p.SweepStats(); st.Sweeps != 0 || st.Lists != 0 {
		t.Fatalf("a single node's plugin swept: %+v", st)
	}
}
