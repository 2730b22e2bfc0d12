package alarms_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wasmkeep/alarms"
	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/internal/metricstest"
	"github.com/wasmkeep/alarms/internal/variant"
	"github.com/wasmkeep/alarms/sweeper"
)

// hangingTenant is a host whose takes of tenant b's actors hang (as a
// handler that hangs until its deadline holds its worker) until released,
// and which reports each take of another tenant's actor.
type hangingTenant struct {
	mu      sync.Mutex
	inB     int
	release chan struct{}
	others  chan abi.ActorID
}

func (h *hangingTenant) Take(ctx context.Context, id abi.ActorID) (alarms.Actor, func(error), error) {
	if id.Tenant == "b" {
		h.mu.Lock()
		h.inB++
		h.mu.Unlock()
		select {
		case <-h.release:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	} else {
		h.others <- id
	}
	return &fakeActor{id: id, j: &journal{}, meta: map[string]string{}}, func(error) {}, nil
}

func (h *hangingTenant) hanging() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.inB
}

// await waits until n of tenant b's deliveries hang in Take.
func (h *hangingTenant) await(t *testing.T, n int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); h.hanging() < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of tenant b's deliveries reached Take in 30 s, want %d", h.hanging(), n)
		}
	}
}

// runTimer runs p's timer loop until the returned stop is called.
func runTimer(p *alarms.Plugin) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.RunTimer(ctx); close(done) }()
	return func() {
		cancel()
		<-done
	}
}

// runHanging runs the timer loop of a plugin with 8 workers (variants v)
// with 50 of tenant b's alarms due and hanging, waits until they hold the
// workers they may, then makes tenant a's alarm due. It reports whether
// a's actor was taken while b's still hung, and how many of b's hung.
func runHanging(t *testing.T, v variant.Set) (aServed bool, bHanging int) {
	const workers = 8
	host := &tickingHost{fakeHost: fakeHost{now: time.UnixMilli(t1)}}
	h := &hangingTenant{release: make(chan struct{}), others: make(chan abi.ActorID, 1)}
	host.tk = h
	timer := sweeper.NewTimer(retryMax)
	p, err := alarms.Register(alarms.WithVariants(alarms.Config{SingleNode: true, Host: host, Timer: timer, MaxConcurrentDeliveries: workers}, v))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		timer.Set(alarms.TimerKey(abi.ActorID{Tenant: "b", Class: "c", Name: fmt.Sprintf("b%02d", i)}), t1)
	}
	defer runTimer(p)()
	h.await(t, workers-1)
	time.Sleep(50 * time.Millisecond) // room for an eighth, if one could start
	timer.Set(alarms.TimerKey(abi.ActorID{Tenant: "a", Class: "c", Name: "a"}), t1)
	select {
	case <-h.others:
		return true, h.hanging()
	case <-time.After(2 * time.Second):
		return false, h.hanging()
	}
}

// A tenant whose deliveries hang holds at most all but an eighth of the
// delivery workers; another tenant's alarm that comes due meanwhile gets
// a worker at once, not after the backlog.
func TestATenantWhoseDeliveriesHangLeavesWorkersToTheOthers(t *testing.T) {
	served, hanging := runHanging(t, variant.Set{})
	if !served {
		t.Fatal("tenant a's due alarm got no worker while tenant b's deliveries hung")
	}
	if hanging != 7 {
		t.Fatalf("tenant b's deliveries held %d workers, want 7: all but an eighth of 8", hanging)
	}
}

// With the unsafe variant, one shared FIFO, the same test fails: tenant
// b's backlog takes every worker and a's alarm waits behind it.
func TestTheSharedFIFOVariantStarvesTheOtherTenant(t *testing.T) {
	served, hanging := runHanging(t, variant.Set{SharedFIFO: true})
	if served {
		t.Fatal("with one shared FIFO tenant a was still served beside b's backlog: the test cannot catch the variant")
	}
	if hanging != 8 {
		t.Fatalf("with one shared FIFO tenant b held %d workers, want all 8", hanging)
	}
}

// The per-tenant metrics name only the tenants the configuration names
// (Config.TenantWeights); every other tenant is counted as "other", so a
// tenant that shows up adds no series.
func TestPerTenantMetricsAreBoundedByTheConfiguration(t *testing.T) {
	host := &tickingHost{fakeHost: fakeHost{now: time.UnixMilli(t1)}}
	var wg sync.WaitGroup
	host.tk = takerFunc(func(ctx context.Context, id abi.ActorID) (alarms.Actor, func(error), error) {
		return &fakeActor{id: id, j: &journal{}, meta: map[string]string{}}, func(error) {}, nil
	})
	timer := sweeper.NewTimer(retryMax)
	reg := prometheus.NewRegistry()
	p, err := alarms.Register(alarms.Config{SingleNode: true, Host: host, Timer: timer, Registerer: reg,
		TenantWeights: map[string]int{"acme": 2}, OnDelivery: func(alarms.Delivery) { wg.Done() }})
	if err != nil {
		t.Fatal(err)
	}
	tenants := []string{"acme", "acme", "b", "c", "d"}
	wg.Add(len(tenants))
	for i, tn := range tenants {
		timer.Set(alarms.TimerKey(abi.ActorID{Tenant: tn, Class: "c", Name: fmt.Sprint(i)}), t1)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.RunTimer(ctx); close(done) }()
	wg.Wait()
	cancel()
	<-done
	fams := metricstest.Gather(reg)
	if got := fams.Value("wasmkeep_tenant_deliveries_total", "tenant", "acme"); got != 2 {
		t.Errorf("tenant acme: %v deliveries counted, want 2", got)
	}
	if got := fams.Value("wasmkeep_tenant_deliveries_total", "tenant", alarms.OtherTenants); got != 3 {
		t.Errorf("tenants b, c, d: %v deliveries counted under %q, want 3", got, alarms.OtherTenants)
	}
	if got := fams.Value("wasmkeep_tenant_deliveries_total"); got != 5 {
		t.Errorf("%v deliveries counted in all, want 5: a tenant has a series of its own that the configuration does not name", got)
	}
	if _, err := alarms.Register(alarms.Config{SingleNode: true, Host: host, Timer: timer, TenantWeights: map[string]int{"acme": 0}}); err == nil {
		t.Error("Register took a weight of 0")
	}
}

// takerFunc is a Take as a function.
type takerFunc func(ctx context.Context, id abi.ActorID) (alarms.Actor, func(error), error)

func (f takerFunc) Take(ctx context.Context, id abi.ActorID) (alarms.Actor, func(error), error) {
	return f(ctx, id)
}

// syncingTenant is hangingTenant whose hanging takes are deliveries
// waiting for the disk, and says so (alarms.SyncHost).
type syncingTenant struct {
	*tickingHost
	h *hangingTenant
}

func (s syncingTenant) Syncing() int { return s.h.hanging() }

// Deliveries that wait for the disk (a durable commit's sync, as the host
// reports) leave their processors to others: the workers grow past the
// processors by as many, at once, up to the tenant's cap, where workers
// merely busy grow only after growAfter without a take.
func TestDeliveriesWaitingForTheDiskLeaveTheirProcessorsToOthers(t *testing.T) {
	t.Cleanup(alarms.SetGrowAfter(time.Hour)) // no growth but the syncs'
	procs := runtime.GOMAXPROCS(0)
	max := 16 * procs
	run := func(t *testing.T, syncing bool) (workers, hanging int) {
		host := &tickingHost{fakeHost: fakeHost{now: time.UnixMilli(t1)}}
		h := &hangingTenant{release: make(chan struct{}), others: make(chan abi.ActorID, 1)}
		host.tk = h
		var hh alarms.Host = host
		if syncing {
			hh = syncingTenant{host, h}
		}
		timer := sweeper.NewTimer(retryMax)
		p, err := alarms.Register(alarms.Config{SingleNode: true, Host: hh, Timer: timer, MaxConcurrentDeliveries: max})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 4 * max {
			timer.Set(alarms.TimerKey(abi.ActorID{Tenant: "b", Class: "c", Name: fmt.Sprintf("b%03d", i)}), t1)
		}
		defer runTimer(p)()
		want := procs
		if syncing {
			want = max - max/8 // all but an eighth: the tenant's cap
		}
		h.await(t, want)
		time.Sleep(100 * time.Millisecond) // room for more, if more could start
		return p.Workers(), h.hanging()
	}
	if w, n := run(t, false); w != procs || n != procs {
		t.Fatalf("without syncs reported, %d workers ran %d deliveries at once, want %d: the processors", w, n, procs)
	}
	if w, n := run(t, true); n != max-max/8 {
		t.Fatalf("with every delivery waiting for the disk, %d workers ran %d deliveries at once, want %d: the tenant's cap of %d workers", w, n, max-max/8, max)
	}
}

// shareHost is a host whose takes of tenant b's actors hang until gate
// closes, which reports syncing deliveries waiting for the disk
// (alarms.SyncHost), and whose takes, with share set, say that they
// waited for a share of the host's that more workers do not add
// (alarms.NoteWaitedForShare), as the reference host's wait for a room
// among its tenant's guest calls does.
type shareHost struct {
	*tickingHost
	gate    chan struct{}
	syncing atomic.Int64
	share   atomic.Bool
	inTake  atomic.Int64
}

func (h *shareHost) Syncing() int { return int(h.syncing.Load()) }

func (h *shareHost) Take(ctx context.Context, id abi.ActorID) (alarms.Actor, func(error), error) {
	h.inTake.Add(1)
	defer h.inTake.Add(-1)
	select {
	case <-h.gate:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	if h.share.Load() {
		alarms.NoteWaitedForShare(ctx)
	}
	return &fakeActor{id: id, j: &journal{}, meta: map[string]string{}}, func(error) {}, nil
}

// The workers grown while deliveries waited for the disk shrink back to
// the processors once their deliveries wait for a share of the host's
// that more workers do not add (alarms.NoteWaitedForShare): each would
// otherwise take the next due alarm only to wait for that share again.
// Without the note, the workers stay.
func TestWorkersWhoseDeliveriesWaitForAShareEnd(t *testing.T) {
	t.Cleanup(alarms.SetGrowAfter(time.Hour)) // no growth but the syncs'
	procs := runtime.GOMAXPROCS(0)
	const grown, alarmsDue = 16, 200
	run := func(t *testing.T, share bool) (before, after int) {
		host := &shareHost{tickingHost: &tickingHost{fakeHost: fakeHost{now: time.UnixMilli(t1)}}, gate: make(chan struct{})}
		host.syncing.Store(grown)
		var delivered atomic.Int64
		all := make(chan struct{})
		timer := sweeper.NewTimer(retryMax)
		p, err := alarms.Register(alarms.Config{SingleNode: true, Host: host, Timer: timer, MaxConcurrentDeliveries: 64,
			OnDelivery: func(d alarms.Delivery) {
				if d.Err != nil {
					t.Errorf("delivery of %s: %v", d.Actor, d.Err)
				}
				if delivered.Add(1) == alarmsDue {
					close(all)
				}
			}})
		if err != nil {
			t.Fatal(err)
		}
		for i := range alarmsDue {
			timer.Set(alarms.TimerKey(abi.ActorID{Tenant: "b", Class: "c", Name: fmt.Sprintf("b%03d", i)}), t1)
		}
		defer runTimer(p)()
		for deadline := time.Now().Add(30 * time.Second); host.inTake.Load() < int64(procs+grown); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d deliveries reached Take in 30 s, want %d: the processors and the deliveries waiting for the disk", host.inTake.Load(), procs+grown)
			}
		}
		time.Sleep(50 * time.Millisecond) // room for more, if more could start
		before = p.Workers()
		host.syncing.Store(0)
		host.share.Store(share)
		close(host.gate)
		select {
		case <-all:
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d alarms delivered in 30 s", delivered.Load(), alarmsDue)
		}
		// The last workers end once their deliveries have: OnDelivery
		// runs before.
		for deadline := time.Now().Add(5 * time.Second); share && p.Workers() > procs && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		}
		return before, p.Workers()
	}
	if before, after := run(t, true); before != procs+grown || after != procs {
		t.Fatalf("with every delivery waiting for a share: %d workers while %d deliveries waited for the disk, %d after, want %d and %d: the processors", before, grown, after, procs+grown, procs)
	}
	if before, after := run(t, false); before != procs+grown || after != procs+grown {
		t.Fatalf("with no delivery waiting for a share: %d workers while %d deliveries waited for the disk, %d after, want %d and %d", before, grown, after, procs+grown, procs+grown)
	}
}
