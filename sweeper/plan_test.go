package sweeper

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/alarmindex"

	"github.com/wasmkeep/alarms/abi"
)

const testMargin = 15 * time.Second

var testNow = time.UnixMilli(1_800_000_000_000)

// ago is a due time d before testNow, in Unix ms.
func ago(d time.Duration) int64 { return testNow.Add(-d).UnixMilli() }

// entry makes an overdue entry for actor name of tenant t, class C.
func entry(name string, dueMs int64) Entry {
	obj := tagged("t", dueMs, "c", name, 1, "01")
	k, err := alarmindex.ParseKey(obj)
	if err != nil {
		panic(err)
	}
	return Entry{Object: obj, Key: k}
}

func actor(name string) abi.ActorID {
	return abi.ActorID{Tenant: "t", Class: "c", Name: name}
}

var nodes3 = []string{"10.0.0.1:7000", "10.0.0.2:7000", "10.0.0.3:7000"}

// namesFor returns n actor names (with prefix) whose shard among nodes is
// node.
func namesFor(prefix, node string, nodes []string, n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		name := fmt.Sprintf("%s%d", prefix, i)
		if Shard(actor(name), nodes) == node {
			out = append(out, name)
		}
	}
	return out
}

func names(ds []Overdue) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.Actor.Name)
	}
	return out
}

func TestShardOneNodePerActor(t *testing.T) {
	counts := map[string]int{}
	for i := range 3000 {
		a := actor(fmt.Sprint(i))
		owner := Shard(a, nodes3)
		// Same answer whatever order the nodes are listed in.
		rev := slices.Clone(nodes3)
		slices.Reverse(rev)
		if got := Shard(a, rev); got != owner {
			t.Fatalf("actor %v: shard %q, reversed list %q", a, owner, got)
		}
		counts[owner]++
		// Exactly one node plans it as its own.
		own := 0
		for _, self := range nodes3 {
			p := PlanSweep(PlanInput{Entries: []Entry{entry(a.Name, ago(testMargin))}, Now: testNow,
				Margin: testMargin, Self: self, Live: nodes3})
			own += len(p.Deliveries)
		}
		if own != 1 {
			t.Fatalf("actor %v delivered by %d nodes", a, own)
		}
	}
	for _, n := range nodes3 {
		if counts[n] < 800 {
			t.Errorf("node %s got %d of 3000 actors: %v", n, counts[n], counts)
		}
	}
	if Shard(actor("x"), nil) != "" {
		t.Error("shard among no nodes")
	}
}

// When a node dies, its actors spread over every survivor and no other actor
// moves; when it comes back, only its actors move back.
func TestShardDeadNodeSpreads(t *testing.T) {
	all := []string{"a:1", "b:1", "c:1", "d:1", "e:1"}
	survivors := []string{"a:1", "b:1", "d:1", "e:1"}
	spread := map[string]int{}
	orphans := 0
	for i := range 5000 {
		a := actor(fmt.Sprint(i))
		before, after := Shard(a, all), Shard(a, survivors)
		if before != "c:1" {
			if after != before {
				t.Fatalf("actor %v moved from live %s to %s", a, before, after)
			}
			continue
		}
		orphans++
		spread[after]++
	}
	for _, n := range survivors {
		if spread[n] < orphans/8 {
			t.Errorf("survivor %s took %d of %d orphans: %v", n, spread[n], orphans, spread)
		}
	}
}

// Nodes that disagree about who is alive: one still sees the heartbeat of a
// node that died, another does not, a third misses a live node. Some actors
// are then nobody's shard in the view of any live node; once their entries
// are three margins overdue, they are delivered all the same.
func TestShardDisagreementWithinThreeMargins(t *testing.T) {
	dead := "10.0.0.4:7000"
	views := map[string][]string{
		nodes3[0]: {nodes3[0], nodes3[1], nodes3[2], dead}, // still sees the dead node
		nodes3[1]: {nodes3[1], nodes3[2]},                  // misses node 1 and the dead one
		nodes3[2]: {nodes3[0], nodes3[2], dead},            // misses node 2
	}
	var actors []string
	for i := range 600 {
		actors = append(actors, fmt.Sprint(i))
	}
	delivered := func(overdue time.Duration) map[string]bool {
		got := map[string]bool{}
		var entries []Entry
		for _, n := range actors {
			entries = append(entries, entry(n, ago(overdue)))
		}
		for self, live := range views {
			p := PlanSweep(PlanInput{Entries: entries, Now: testNow, Margin: testMargin, Self: self,
				Live: live, Rand: rand.New(rand.NewPCG(1, 2)), MaxDeliveries: 10_000})
			for _, d := range p.Deliveries {
				got[d.Actor.Name] = true
			}
		}
		return got
	}
	// Before three margins some actors are nobody's shard in any view.
	if got := delivered(3*testMargin - time.Millisecond); len(got) == len(actors) {
		t.Fatalf("disagreeing views delivered all %d actors before three margins; the test shows nothing", len(actors))
	}
	if got := delivered(3 * testMargin); len(got) != len(actors) {
		t.Fatalf("three margins overdue: %d of %d actors delivered", len(got), len(actors))
	}
}

// Rendezvous hashing with each node counting itself: nodes that only miss
// live nodes (no dead node in any view) still cover every actor at once,
// because an actor's winner among all live nodes also wins in its own view.
func TestShardMissingLiveNodesStillCovers(t *testing.T) {
	views := map[string][]string{
		nodes3[0]: {nodes3[0]},
		nodes3[1]: {nodes3[0], nodes3[1]},
		nodes3[2]: {nodes3[1]},
	}
	var entries []Entry
	for i := range 600 {
		entries = append(entries, entry(fmt.Sprint(i), ago(testMargin)))
	}
	got := map[string]bool{}
	for self, live := range views {
		p := PlanSweep(PlanInput{Entries: entries, Now: testNow, Margin: testMargin, Self: self, Live: live,
			MaxDeliveries: 10_000})
		for _, d := range p.Deliveries {
			got[d.Actor.Name] = true
		}
	}
	if len(got) != len(entries) {
		t.Fatalf("%d of %d actors delivered", len(got), len(entries))
	}
}

func TestPlanAnyonesAfterThreeMargins(t *testing.T) {
	self, other := nodes3[0], nodes3[1]
	name := namesFor("x", other, nodes3, 1)[0]
	tests := []struct {
		overdue time.Duration
		want    bool
	}{
		{testMargin, false},
		{2 * testMargin, false},
		{3*testMargin - time.Millisecond, false},
		{3 * testMargin, true},
		{10 * testMargin, true},
	}
	for _, tc := range tests {
		p := PlanSweep(PlanInput{Entries: []Entry{entry(name, ago(tc.overdue))}, Now: testNow, Margin: testMargin,
			Self: self, Live: nodes3})
		if got := len(p.Deliveries) == 1; got != tc.want {
			t.Errorf("another node's entry %v overdue: delivered %v, want %v", tc.overdue, got, tc.want)
		}
		if tc.want && !p.Deliveries[0].Anyone {
			t.Errorf("%v overdue: delivery not marked anyone's", tc.overdue)
		}
	}
}

// Back from a lapse of its lease (a bucket outage), a node counts another
// node's entry as anyone's only three margins past its return, however
// long overdue the entry is: the entry's holder, cut off too, is back
// and delivers it from its own timer. Its own shard's entries it delivers
// a margin past its return (their holders' timers first), and those of
// actors it let go of at once.
func TestPlanAnyonesCountFromTheEndOfALapse(t *testing.T) {
	self, other := nodes3[0], nodes3[1]
	theirs := namesFor("x", other, nodes3, 1)[0]
	mine := namesFor("y", self, nodes3, 1)[0]
	entries := []Entry{entry(theirs, ago(20*testMargin)), entry(mine, ago(20*testMargin))}
	tests := []struct {
		back time.Duration // how long ago the lease became valid again (0: no lapse)
		want []string
	}{
		{0, []string{theirs, mine}},
		{time.Millisecond, nil},
		{testMargin - time.Millisecond, nil},
		{testMargin, []string{mine}},
		{3*testMargin - time.Millisecond, []string{mine}},
		{3 * testMargin, []string{theirs, mine}},
	}
	for _, tc := range tests {
		in := PlanInput{Entries: entries, Now: testNow, Margin: testMargin, Self: self, Live: nodes3}
		if tc.back > 0 {
			in.Since = testNow.Add(-tc.back)
		}
		got := names(PlanSweep(in).Deliveries)
		slices.Sort(got)
		want := slices.Clone(tc.want)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("back from a lapse %v ago: delivered %v, want %v", tc.back, got, want)
		}
		// An actor this node let go of is its own at once.
		in.Own = func(a abi.ActorID) bool { return a.Name == mine }
		if got := names(PlanSweep(in).Deliveries); !slices.Contains(got, mine) {
			t.Errorf("back from a lapse %v ago: an actor this node let go of was not delivered (%v)", tc.back, got)
		}
	}
}

// The node counts itself live even when its own heartbeat is not seen.
func TestPlanSelfCountsAsLive(t *testing.T) {
	self := "10.0.0.9:7000"
	withSelf := append(slices.Clone(nodes3), self)
	name := namesFor("s", self, withSelf, 1)[0]
	p := PlanSweep(PlanInput{Entries: []Entry{entry(name, ago(testMargin))}, Now: testNow, Margin: testMargin,
		Self: self, Live: nodes3})
	if len(p.Deliveries) != 1 || p.Deliveries[0].Anyone {
		t.Fatalf("own entry with self missing from live: %+v", p.Deliveries)
	}
}

// Own entries first, anyone's keep an eighth of the cap and take what own
// leave.
func TestPlanCapsAndShares(t *testing.T) {
	self, other := nodes3[0], nodes3[1]
	tests := []struct {
		name              string
		own, anyone       int
		max               int
		wantOwn, wantAny  int
		wantDeferred      int
		anyoneEarlierThan bool
	}{
		{"own fill the cap", 1000, 0, 0, 256, 0, 744, false},
		{"anyone's keep an eighth", 1000, 100, 0, 224, 32, 844, true},
		{"fewer anyone's than the eighth give the rest to own", 1000, 10, 0, 246, 10, 754, false},
		{"anyone's take what own leave", 100, 1000, 0, 100, 156, 844, false},
		{"all fit", 100, 100, 0, 100, 100, 0, false},
		{"nothing", 0, 0, 0, 0, 0, 0, false},
		{"a smaller cap keeps an eighth too", 100, 100, 16, 14, 2, 184, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var entries []Entry
			anyDue, ownDue := ago(3*testMargin), ago(testMargin)
			if tc.anyoneEarlierThan {
				anyDue, ownDue = ago(5*testMargin), ago(4*testMargin)
			}
			for _, n := range namesFor("o", self, nodes3, tc.own) {
				entries = append(entries, entry(n, ownDue))
			}
			for _, n := range namesFor("a", other, nodes3, tc.anyone) {
				entries = append(entries, entry(n, anyDue))
			}
			// Entries of a third node not yet anyone's are never taken.
			for _, n := range namesFor("z", nodes3[2], nodes3, 50) {
				entries = append(entries, entry(n, ago(2*testMargin)))
			}
			slices.SortFunc(entries, func(a, b Entry) int { return compareStrings(a.Object, b.Object) })
			p := PlanSweep(PlanInput{Entries: entries, Now: testNow, Margin: testMargin, Self: self, Live: nodes3,
				Rand: rand.New(rand.NewPCG(7, 7)), MaxDeliveries: tc.max})
			gotOwn, gotAny := 0, 0
			for i, d := range p.Deliveries {
				if d.Anyone {
					gotAny++
					continue
				}
				gotOwn++
				if gotAny > 0 {
					t.Fatalf("own delivery %d after an anyone's", i)
				}
				if Shard(d.Actor, nodes3) != self {
					t.Fatalf("own delivery %v not in this node's shard", d.Actor)
				}
			}
			if gotOwn != tc.wantOwn || gotAny != tc.wantAny {
				t.Errorf("own %d anyone %d, want %d %d", gotOwn, gotAny, tc.wantOwn, tc.wantAny)
			}
			if p.Stats.Deferred != tc.wantDeferred || p.Stats.Others != 50 {
				t.Errorf("stats %+v, want deferred %d, others 50", p.Stats, tc.wantDeferred)
			}
			// Own are taken earliest first.
			for i := 1; i < gotOwn; i++ {
				if p.Deliveries[i].DueMs < p.Deliveries[i-1].DueMs {
					t.Fatalf("own deliveries out of due order at %d", i)
				}
			}
		})
	}
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Actors in flight or retrying are not delivered again and leave their
// place in the cap to others.
func TestPlanBusyNotCounted(t *testing.T) {
	self := nodes3[0]
	own := namesFor("o", self, nodes3, 300)
	busy := map[abi.ActorID]bool{}
	var entries []Entry
	for i, n := range own {
		entries = append(entries, entry(n, ago(testMargin)-int64(i)))
		if i%3 == 0 {
			busy[actor(n)] = true // 100 busy
		}
	}
	slices.SortFunc(entries, func(a, b Entry) int { return compareStrings(a.Object, b.Object) })
	p := PlanSweep(PlanInput{Entries: entries, Now: testNow, Margin: testMargin, Self: self, Live: nodes3,
		Busy: func(a abi.ActorID) bool { return busy[a] }})
	if len(p.Deliveries) != 200 || p.Stats.Busy != 100 || p.Stats.Deferred != 0 {
		t.Fatalf("delivered %d, busy %d, deferred %d; want 200, 100, 0", len(p.Deliveries), p.Stats.Busy, p.Stats.Deferred)
	}
	for _, d := range p.Deliveries {
		if busy[d.Actor] {
			t.Fatalf("busy actor %v delivered", d.Actor)
		}
	}
	// The plan names the actors it left out, for a caller that tends to
	// them otherwise, each with its entry's time and key.
	if len(p.Busy) != 100 {
		t.Fatalf("plan names %d busy actors, want 100", len(p.Busy))
	}
	for _, d := range p.Busy {
		if !busy[d.Actor] || len(d.Keys) != 1 || d.DueMs > ago(testMargin) {
			t.Fatalf("busy candidate %+v: not a busy actor's overdue entry", d)
		}
	}
}

// One delivery per actor: all its keys at its earliest time.
func TestPlanOneDeliveryPerActor(t *testing.T) {
	self := nodes3[0]
	n := namesFor("o", self, nodes3, 2)
	early, late := ago(2*testMargin), ago(testMargin)
	leg := legacy("t", early, "c", n[0])
	lk, _ := alarmindex.ParseKey(leg)
	second := tagged("t", early, "c", n[0], 2, "02")
	sk, _ := alarmindex.ParseKey(second)
	entries := []Entry{
		entry(n[1], early),
		entry(n[0], early),
		{Object: leg, Key: lk},
		{Object: second, Key: sk},
		entry(n[0], late),
		entry(n[1], late),
	}
	slices.SortFunc(entries, func(a, b Entry) int { return compareStrings(a.Object, b.Object) })
	p := PlanSweep(PlanInput{Entries: entries, Now: testNow, Margin: testMargin, Self: self, Live: nodes3})
	if len(p.Deliveries) != 2 || p.Stats.Later != 2 {
		t.Fatalf("deliveries %+v, stats %+v", p.Deliveries, p.Stats)
	}
	for _, d := range p.Deliveries {
		if d.DueMs != early {
			t.Errorf("%v delivered at %d, want the earliest %d", d.Actor, d.DueMs, early)
		}
		want := []string{entry(d.Actor.Name, early).Object}
		if d.Actor.Name == n[0] {
			want = sortedKeys(entry(n[0], early).Object, leg, second)
		}
		if !slices.Equal(d.Keys, want) {
			t.Errorf("%v keys %q, want %q", d.Actor, d.Keys, want)
		}
	}
	// Entries out of order: the earliest still wins.
	slices.Reverse(entries)
	p = PlanSweep(PlanInput{Entries: entries, Now: testNow, Margin: testMargin, Self: self, Live: nodes3})
	for _, d := range p.Deliveries {
		if d.DueMs != early {
			t.Errorf("reversed: %v delivered at %d, want %d", d.Actor, d.DueMs, early)
		}
	}
}

// Anyone's are taken from a seeded rotation: the same seed gives the same
// plan, other seeds start elsewhere, and what is taken is a run of the
// anyone's list in due order.
func TestPlanRotationSeeded(t *testing.T) {
	self, other := nodes3[0], nodes3[1]
	var entries []Entry
	anyone := namesFor("a", other, nodes3, 100)
	for i, n := range anyone {
		entries = append(entries, entry(n, ago(3*testMargin)-int64(100-i))) // due order = anyone order
	}
	for _, n := range namesFor("o", self, nodes3, 300) {
		entries = append(entries, entry(n, ago(testMargin)))
	}
	slices.SortFunc(entries, func(a, b Entry) int { return compareStrings(a.Object, b.Object) })
	plan := func(seed uint64) []string {
		p := PlanSweep(PlanInput{Entries: entries, Now: testNow, Margin: testMargin, Self: self, Live: nodes3,
			Rand: rand.New(rand.NewPCG(seed, 0))})
		got := names(p.Deliveries)
		if len(got) != 256 {
			t.Fatalf("seed %d: %d deliveries", seed, len(got))
		}
		return got[224:]
	}
	first := plan(1)
	if !slices.Equal(first, plan(1)) {
		t.Fatal("same seed, different plans")
	}
	starts := map[string]bool{}
	for seed := range uint64(20) {
		got := plan(seed)
		starts[got[0]] = true
		start := slices.Index(anyone, got[0])
		for i, n := range got {
			if want := anyone[(start+i)%len(anyone)]; n != want {
				t.Fatalf("seed %d: anyone's %d is %s, want %s (a rotation)", seed, i, n, want)
			}
		}
	}
	if len(starts) < 10 {
		t.Fatalf("20 seeds started the rotation at only %d places", len(starts))
	}
}

// Resuming after the delivery cap: a backlog larger than the cap drains over
// consecutive sweeps, each actor delivered once, own shard only until the
// rest become anyone's.
func TestPlanDrainsAcrossSweeps(t *testing.T) {
	self := nodes3[0]
	own := namesFor("o", self, nodes3, 1000)
	pending := map[string]Entry{}
	for _, n := range own {
		pending[n] = entry(n, ago(testMargin))
	}
	delivered := map[string]int{}
	rng := rand.New(rand.NewPCG(3, 3))
	sweeps := 0
	for len(pending) > 0 {
		if sweeps++; sweeps > 10 {
			t.Fatalf("%d entries left after 10 sweeps", len(pending))
		}
		var entries []Entry
		for _, e := range pending {
			entries = append(entries, e)
		}
		slices.SortFunc(entries, func(a, b Entry) int { return compareStrings(a.Object, b.Object) })
		p := PlanSweep(PlanInput{Entries: entries, Now: testNow, Margin: testMargin, Self: self, Live: nodes3, Rand: rng})
		if len(p.Deliveries) > DefaultMaxDeliveries {
			t.Fatalf("sweep %d: %d deliveries", sweeps, len(p.Deliveries))
		}
		for _, d := range p.Deliveries {
			delivered[d.Actor.Name]++
			delete(pending, d.Actor.Name) // the timer ran it; its entry is gone
		}
	}
	if sweeps != 4 {
		t.Errorf("1,000 entries drained in %d sweeps, want 4 (256 a sweep)", sweeps)
	}
	for _, n := range own {
		if delivered[n] != 1 {
			t.Fatalf("actor %s delivered %d times", n, delivered[n])
		}
	}
}

// Own entries go earliest first whatever order the entries come in.
func TestPlanOwnEarliestFirst(t *testing.T) {
	self := nodes3[0]
	var entries []Entry
	for i, n := range namesFor("o", self, nodes3, 50) {
		entries = append(entries, entry(n, ago(testMargin)-int64(i)))
	}
	rand.New(rand.NewPCG(5, 5)).Shuffle(len(entries), func(i, j int) { entries[i], entries[j] = entries[j], entries[i] })
	p := PlanSweep(PlanInput{Entries: entries, Now: testNow, Margin: testMargin, Self: self, Live: nodes3,
		MaxDeliveries: 16})
	if len(p.Deliveries) != 16 {
		t.Fatalf("%d deliveries", len(p.Deliveries))
	}
	for i, d := range p.Deliveries {
		if want := ago(testMargin) - 49 + int64(i); d.DueMs != want {
			t.Fatalf("delivery %d due %d, want %d (the earliest first)", i, d.DueMs, want)
		}
	}
}

// An entry time the node ran lately (its DELETE on its way) is left out of
// a plan: not delivered again, not counted against the cap, not among the
// busy candidates the plugin tends to; the actor's other times and the
// other actors are planned as before.
func TestPlanLeavesOutEntryTimesDeliveredLately(t *testing.T) {
	self := "10.0.0.1:7000"
	ran := entry("ran", ago(time.Minute))
	later := entry("ran-later", ago(time.Minute))
	other := entry("other", ago(time.Minute))
	plan := PlanSweep(PlanInput{
		Entries: []Entry{ran, later, other}, Now: testNow, Margin: testMargin, Self: self,
		Live:          []string{self},
		MaxDeliveries: 2,
		Delivered: func(id abi.ActorID, due int64) bool {
			return id == ran.Key.Actor && due == ran.Key.DueMs || id == later.Key.Actor && due != later.Key.DueMs
		},
	})
	var got []string
	for _, d := range plan.Deliveries {
		got = append(got, d.Actor.Name)
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"other", "ran-later"}) || len(plan.Busy) != 0 {
		t.Fatalf("delivered %v, busy %v; want other and ran-later (another time than the one it ran), none busy", got, plan.Busy)
	}
	if plan.Stats.Delivered != 1 || plan.Stats.Deferred != 0 {
		t.Errorf("stats %+v: want 1 left out as delivered lately, none deferred (it does not count against the cap)", plan.Stats)
	}
}
