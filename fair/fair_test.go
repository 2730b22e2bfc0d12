package fair

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/internal/variant"
)

// work is one item of a simulated load: its tenant, when it is due and how
// long it holds its slot once started.
type work struct {
	tenant string
	due    time.Duration
	cost   time.Duration
	// started is filled in by run.
	started time.Duration
	ran     bool
}

// run plays loads through a Queue with a fake clock until every item ran
// or until is reached: at each instant the items then due are pushed, the
// items then ending are done with their cost, and free slots are filled.
// It returns the items (started filled in) and the time each tenant was
// charged.
func run(cfg Config, load []*work, until time.Duration) map[string]time.Duration {
	q := New[*work](cfg)
	sort.SliceStable(load, func(i, j int) bool { return load[i].due < load[j].due })
	type end struct {
		at time.Duration
		w  *work
		tk Ticket
	}
	var ends []end
	charged := map[string]time.Duration{}
	next := 0
	for now := time.Duration(0); now <= until; {
		for next < len(load) && load[next].due <= now {
			w := load[next]
			q.Push(w.tenant, int64(w.due), w)
			next++
		}
		kept := ends[:0]
		for _, e := range ends {
			if e.at <= now {
				q.Done(e.tk, int64(e.at))
				charged[e.w.tenant] += e.w.cost
			} else {
				kept = append(kept, e)
			}
		}
		ends = kept
		for {
			w, tk, ok := q.Pop(int64(now))
			if !ok {
				break
			}
			w.started, w.ran = now, true
			ends = append(ends, end{at: now + w.cost, w: w, tk: tk})
		}
		// The next instant: an item due or an item ending.
		at := until + 1
		if next < len(load) {
			at = load[next].due
		}
		for _, e := range ends {
			at = min(at, e.at)
		}
		if at <= now {
			at = now + 1
		}
		now = at
	}
	return charged
}

const (
	workers  = 16
	deadline = 2 * time.Second // a hostile handler holds its slot this long
)

// hostile is tenant B's load: n items due at once at 0, each holding its
// slot until the deadline (handlers that spin or hang).
func hostile(tenant string, n int, at time.Duration) []*work {
	var out []*work
	for range n {
		out = append(out, &work{tenant: tenant, due: at, cost: deadline})
	}
	return out
}

// light is tenant A's load: one item every period from start to end,
// each taking cost.
func light(tenant string, start, end, period, cost time.Duration) []*work {
	var out []*work
	for at := start; at < end; at += period {
		out = append(out, &work{tenant: tenant, due: at, cost: cost})
	}
	return out
}

// lateBeyond returns the items of tenant that started more than bound after
// they were due, or never.
func lateBeyond(load []*work, tenant string, bound time.Duration) []string {
	var late []string
	for _, w := range load {
		if w.tenant != tenant {
			continue
		}
		if !w.ran {
			late = append(late, fmt.Sprintf("due %v: never started", w.due))
		} else if w.started-w.due > bound {
			late = append(late, fmt.Sprintf("due %v: started %v late", w.due, w.started-w.due))
		}
	}
	return late
}

// backlogDelays runs tenant B's backlog (1,000 handlers due at once, each
// holding its slot for the deadline; then another burst mid-way) beside
// tenant A's light load (a 5 ms item every 100 ms), and returns A's items
// that started later than one deadline divided by the workers after they
// were due: the bound a tenant with a backlog may delay another's due
// item by.
func backlogDelays(cfg Config) []string {
	load := append(hostile("b", 1000, 0), hostile("b", 500, 40*time.Second)...)
	load = append(load, light("a", 50*time.Millisecond, 60*time.Second, 100*time.Millisecond, 5*time.Millisecond)...)
	run(cfg, load, 10*time.Minute)
	return lateBeyond(load, "a", deadline/workers)
}

// A tenant with a backlog of handlers that each hold a worker until their
// deadline delays no due alarm of another tenant by more than one
// deadline divided by the workers (docs/operations.md#tenants).
func TestABacklogDelaysAnotherTenantByAtMostADeadlineOverTheWorkers(t *testing.T) {
	cfg := Config{Slots: workers, Headroom: workers / 8}
	if late := backlogDelays(cfg); len(late) > 0 {
		t.Fatalf("%d of tenant a's items started more than %v (deadline %v / %d workers) after due, first: %v",
			len(late), deadline/workers, deadline, workers, late[:min(3, len(late))])
	}
}

// The unsafe variant, one queue in due order for every tenant, fails the
// same check: the fairness test can fail.
func TestTheSharedFIFOVariantIsCaught(t *testing.T) {
	cfg := variant.Fair(Config{Slots: workers, Headroom: workers / 8}, variant.Set{SharedFIFO: true})
	late := backlogDelays(cfg)
	if len(late) == 0 {
		t.Fatal("with one shared FIFO, tenant a's items still started within the bound: the fairness test cannot fail")
	}
	t.Logf("the shared FIFO is caught: %d of tenant a's items late, first: %s", len(late), late[0])
}

// Without headroom a tenant alone may take every slot, and another
// tenant's due item then waits for the first of them to end: turn order,
// not the bound above. Several hostile tenants together: a light tenant
// that comes due is served at the next slot that frees, before any of
// theirs.
func TestALightTenantIsServedAtTheNextFreeSlot(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var load []*work
	for _, b := range []string{"b", "c", "d"} {
		for range 400 {
			load = append(load, &work{tenant: b, due: 0, cost: deadline/2 + time.Duration(rng.Int64N(int64(deadline/2)))})
		}
	}
	load = append(load, light("a", 30*time.Millisecond, 30*time.Second, 250*time.Millisecond, 5*time.Millisecond)...)
	run(Config{Slots: workers, Headroom: 1}, load, 10*time.Minute)
	// For each of a's items, no item of another tenant started while it
	// waited: it took the first slot that freed.
	for _, w := range load {
		if w.tenant != "a" {
			continue
		}
		if !w.ran {
			t.Fatalf("a's item due %v never started", w.due)
		}
		for _, o := range load {
			if o.tenant != "a" && o.ran && o.started > w.due && o.started < w.started {
				t.Fatalf("a's item due %v started at %v, after %s's item started at %v: a waited while another tenant was served", w.due, w.started, o.tenant, o.started)
			}
		}
	}
}

// Two tenants with backlogs share the slots by charged time, each in
// proportion to its weight, whatever their items cost: the one whose items
// take ten times longer starts a tenth as many.
func TestBackloggedTenantsShareTimeByWeight(t *testing.T) {
	for _, tc := range []struct {
		name   string
		weight map[string]int
		want   float64 // a's charged time over b's
	}{
		{"equal", nil, 1},
		{"a weighs 3", map[string]int{"a": 3}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var load []*work
			for range 200000 {
				load = append(load, &work{tenant: "a", due: 0, cost: time.Millisecond})
			}
			for range 20000 {
				load = append(load, &work{tenant: "b", due: 0, cost: 10 * time.Millisecond})
			}
			cfg := Config{Slots: 8, Weight: func(s string) int { return tc.weight[s] }}
			charged := run(cfg, load, 10*time.Second)
			got := float64(charged["a"]) / float64(charged["b"])
			if got < tc.want*0.95 || got > tc.want*1.05 {
				t.Fatalf("a was charged %v, b %v: ratio %.3f, want %.1f (±5%%)", charged["a"], charged["b"], got, tc.want)
			}
		})
	}
}

// A tenant that was idle banks no credit: coming back with a backlog while
// another tenant has had the slots for a long while, it gets its share,
// not every slot until it caught up.
func TestIdleTimeBanksNoCredit(t *testing.T) {
	var load []*work
	for range 100000 {
		load = append(load, &work{tenant: "b", due: 0, cost: 10 * time.Millisecond})
	}
	for range 100000 {
		load = append(load, &work{tenant: "a", due: 20 * time.Second, cost: 10 * time.Millisecond})
	}
	run(Config{Slots: 4}, load, 30*time.Second)
	// Between 20 s and 30 s both have backlogs: each gets about half.
	var a, b int
	for _, w := range load {
		if w.ran && w.started >= 20*time.Second && w.started < 30*time.Second {
			if w.tenant == "a" {
				a++
			} else {
				b++
			}
		}
	}
	if b < a*9/10 {
		t.Fatalf("after tenant a came back from 20 s idle, a started %d items and b %d: a's idle time bought it more than its share", a, b)
	}
	if a < b*9/10 {
		t.Fatalf("after tenant a came back, a started %d items and b %d: a did not get its share", a, b)
	}
}

// No tenant runs more than Slots - Headroom items at once, and alone it
// runs that many; with no headroom it takes every slot.
func TestTheCapLeavesHeadroom(t *testing.T) {
	for _, tc := range []struct{ slots, headroom, want int }{{8, 2, 6}, {8, 0, 8}, {4, 9, 1}} {
		q := New[int](Config{Slots: tc.slots, Headroom: tc.headroom})
		for i := range 20 {
			q.Push("b", int64(i), i)
		}
		n := 0
		for {
			if _, _, ok := q.Pop(0); !ok {
				break
			}
			n++
		}
		if n != tc.want || q.Cap() != tc.want {
			t.Fatalf("slots %d, headroom %d: tenant b alone started %d (cap %d), want %d", tc.slots, tc.headroom, n, q.Cap(), tc.want)
		}
		// Another tenant starts at once beside b's waiting items, which
		// cannot take the free slots.
		_, ok := q.TryStart("a", 0)
		if ok != (tc.want < tc.slots) {
			t.Fatalf("slots %d, headroom %d: tenant a could start an item: %v", tc.slots, tc.headroom, ok)
		}
	}
}

// Items of one tenant start in due order, ties in the order pushed.
func TestATenantsItemsStartInDueOrder(t *testing.T) {
	q := New[string](Config{Slots: 1})
	q.Push("a", 30, "third")
	q.Push("a", 10, "first")
	q.Push("a", 20, "second")
	q.Push("a", 20, "second too")
	var got []string
	for i := range int64(4) {
		v, tk, ok := q.Pop(i)
		if !ok {
			t.Fatalf("nothing to start after %v", got)
		}
		got = append(got, v)
		q.Done(tk, i+1)
	}
	want := []string{"first", "second", "second too", "third"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("started %v, want %v", got, want)
	}
}

// TryStart starts at once only when no one who waits is passed over; a
// cancelled item never starts; Drain empties every queue; and a tenant's
// state is forgotten once it is idle and owes nothing.
func TestTryStartCancelDrainAndForgetting(t *testing.T) {
	q := New[string](Config{Slots: 2})
	tk, ok := q.TryStart("a", 0)
	if !ok {
		t.Fatal("TryStart with every slot free failed")
	}
	if _, ok := q.TryStart("b", 0); !ok {
		t.Fatal("TryStart with a slot free failed")
	}
	if _, ok := q.TryStart("c", 0); ok {
		t.Fatal("TryStart with no slot free succeeded")
	}
	it := q.Push("c", 1, "cancelled")
	q.Push("c", 2, "kept")
	if !q.Cancel(it) || q.Cancel(it) {
		t.Fatal("Cancel of a waiting item: want true once, then false")
	}
	q.Done(tk, 1)
	if _, ok := q.TryStart("d", 1); ok {
		t.Fatal("TryStart for d succeeded while c waits for the free slot")
	}
	v, tk2, ok := q.Pop(1)
	if !ok || v != "kept" {
		t.Fatalf("Pop = %q, %v; want c's item that was not cancelled", v, ok)
	}
	q.Push("e", 3, "e1")
	q.Push("f", 4, "f1")
	if got := q.Drain(); len(got) != 2 || q.Waiting() != 0 {
		t.Fatalf("Drain = %v, waiting %d; want both items and none left", got, q.Waiting())
	}
	q.Done(tk2, 2)
	// Serve a new tenant many times: the idle ones are looked at and
	// forgotten as the floor passes them.
	for i := range int64(100) {
		q.Push("g", i, "g")
		_, tk, _ := q.Pop(10 + 2*i)
		q.Done(tk, 11+2*i)
	}
	if n := q.Tenants(); n > 2 {
		t.Fatalf("%d tenants kept after the others went idle; want the idle ones forgotten", n)
	}
}

// With LongCap, a tenant whose items are short may run up to Slots -
// Headroom at once; once one of its items has run LongAfter, and for
// LongFor after such an item ends, only LongCap.
func TestATenantWhoseItemsRunLongIsHeldToLongCap(t *testing.T) {
	q := New[string](Config{Slots: 4, Headroom: 1, LongCap: 1, LongAfter: 100, LongFor: 1000})
	startAll := func(tenant string, now int64, n int) []Ticket {
		var tks []Ticket
		for range n {
			if tk, ok := q.TryStart(tenant, now); ok {
				tks = append(tks, tk)
			}
		}
		return tks
	}
	// b's short items: 3 of 4 at once, again and again.
	for round := range int64(3) {
		now := round * 10
		bs := startAll("b", now, 5)
		if len(bs) != 3 {
			t.Fatalf("round %d: tenant b with short items started %d, want 3 (4 slots less the headroom)", round, len(bs))
		}
		for _, tk := range bs {
			q.Done(tk, now+5)
		}
	}
	// b starts one at 100 that runs long: from 200 on, b may start no
	// other while it runs, and a still finds a slot.
	long, ok := q.TryStart("b", 100)
	if !ok {
		t.Fatal("tenant b could not start")
	}
	short := startAll("b", 150, 5)
	if len(short) != 2 {
		t.Fatalf("at 150 (its item 50 old) b started %d more, want 2: not long yet", len(short))
	}
	for _, tk := range short {
		q.Done(tk, 160)
	}
	if q.CapOf("b", 199) != 3 || q.CapOf("b", 200) != 1 {
		t.Fatalf("b's cap at 199, 200 = %d, %d; want 3 then 1 (its item long from 200)", q.CapOf("b", 199), q.CapOf("b", 200))
	}
	q.Push("b", 200, "b")
	if _, _, ok := q.Pop(200); ok {
		t.Fatal("b started a fourth item while one of its items ran long")
	}
	// Its long item ends at 300: for LongFor after, b stays at its long
	// cap.
	q.Done(long, 300)
	if q.CapOf("b", 1299) != 1 || q.CapOf("b", 1300) != 3 {
		t.Fatalf("b's cap at 1299, 1300 = %d, %d; want 1 until LongFor after its long item ended, then 3", q.CapOf("b", 1299), q.CapOf("b", 1300))
	}
	if q.CapOf("a", 300) != 3 {
		t.Fatalf("a's cap = %d; a's items never ran long, want 3", q.CapOf("a", 300))
	}
}

// Reserve gives a tenant places in its line: as many as its cap, counting
// its waiting items, and as many more as it could start at once; Unreserve
// gives one back; and a tenant holding a place is not forgotten however
// idle it looks.
func TestReservedPlacesCountAgainstTheCapUntilGivenBack(t *testing.T) {
	q := New[string](Config{Slots: 4, Headroom: 1})
	for range 3 {
		if _, ok := q.TryStart("a", 0); !ok {
			t.Fatal("tenant a could not start 3 items with a cap of 3")
		}
	}
	q.Push("a", 0, "a1")
	for i := range 2 {
		if !q.Reserve("a", 0) {
			t.Fatalf("tenant a could not reserve place %d of 2 with its cap of 3 running and 1 item waiting", i+1)
		}
	}
	if q.Reserve("a", 0) {
		t.Fatal("tenant a reserved a fourth place in a line of 3 (1 waiting, 2 reserved) with its cap running")
	}
	if got := q.Tenant("a"); got.Reserved != 2 || got.Waiting != 1 || got.Running != 3 {
		t.Fatalf("a's stats = %+v; want 3 running, 2 reserved, 1 waiting", got)
	}
	q.Unreserve("a")
	if !q.Reserve("a", 0) {
		t.Fatal("tenant a could not reserve the place it gave back")
	}
	// b runs nothing: 3 places for items it could start at once, 3 more in
	// line.
	for i := range 6 {
		if !q.Reserve("b", 0) {
			t.Fatalf("tenant b, running nothing, was refused its place %d of 6", i+1)
		}
	}
	if q.Reserve("b", 0) {
		t.Fatal("tenant b reserved a seventh place: 3 it could start and 3 in line are all it may hold")
	}
	for range 5 {
		q.Unreserve("b")
	}
	// b holds its place through many other tenants' comings and goings.
	for i := range int64(100) {
		q.Push("g", i, "g")
		_, tk, _ := q.Pop(10 + 2*i)
		q.Done(tk, 11+2*i)
	}
	if q.Tenant("b").Reserved != 1 {
		t.Fatal("tenant b's reserved place was forgotten while it was held")
	}
	q.Unreserve("b")
	for i := range int64(100) {
		q.Push("g", 300+i, "g")
		_, tk, _ := q.Pop(300 + 2*i)
		q.Done(tk, 301+2*i)
	}
	if q.Tenant("b") != (TenantStats{}) {
		t.Fatalf("tenant b = %+v after it gave its place back and stayed idle; want it forgotten", q.Tenant("b"))
	}
}
