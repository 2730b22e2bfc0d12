package sweeper

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/alarmindex"
)

const other = "10.0.0.3:7000"

// handoverIndex is tenant t's index after a node left: for 40 actors each,
// entries due 5 s ago (inside the margin), 30 s ahead, and 2 h ahead
// (beyond HandoverHorizon).
func handoverIndex() (keys []string, ago5, ahead30, ahead2h []abi.ActorID) {
	for i := range 40 {
		for _, at := range []struct {
			due  int64
			list *[]abi.ActorID
		}{{ago(5 * time.Second), &ago5}, {testNow.Add(30 * time.Second).UnixMilli(), &ahead30}, {testNow.Add(2 * time.Hour).UnixMilli(), &ahead2h}} {
			name := fmt.Sprintf("a%d-%d", i, at.due)
			keys = append(keys, tagged("t", at.due, "c", name, 1, "01"))
			*at.list = append(*at.list, abi.ActorID{Tenant: "t", Class: "c", Name: name})
		}
	}
	return keys, ago5, ahead30, ahead2h
}

// The shard of ids among nodes that is self's.
func mine(ids []abi.ActorID, nodes []string) []abi.ActorID {
	var out []abi.ActorID
	for _, id := range ids {
		if Shard(id, nodes) == self {
			out = append(out, id)
		}
	}
	return out
}

func actorsOf(ds []Overdue) []abi.ActorID {
	out := make([]abi.ActorID, 0, len(ds))
	for _, d := range ds {
		out = append(out, d.Actor)
	}
	slices.SortFunc(out, func(a, b abi.ActorID) int { return strings.Compare(a.String(), b.String()) })
	return out
}

// When a node leaves cleanly, Run walks at once, with no margin: it offers
// the timer each actor of its shard among the live nodes, due or due
// within HandoverHorizon, at its due time; not the other live node's
// actors, and not entries beyond the horizon. Without the departure the
// same index offers nothing before the margin.
func TestADepartureHandsTheTimerTheAlarmsOfItsShardAtOnce(t *testing.T) {
	departures := make(chan string, 1)
	h := newHarness(t, func(c *Config) {
		c.Period = 10 * time.Second
		c.Live = staticLive{self, other}
		c.Departures = departures
	})
	keys, ago5, ahead30, _ := handoverIndex()
	h.bucket.put(keys...)
	stop := h.run(t)
	defer stop()
	h.clock.awaitWaiter(t) // the first sweep: nothing is a margin overdue
	if got := h.sink.take(); len(got) != 0 {
		t.Fatalf("the sweep offered %d entries inside the margin", len(got))
	}
	lists := h.bucket.lists
	departures <- "10.0.0.2:7000"
	for deadline := time.Now().Add(10 * time.Second); h.loop.Stats().Handovers == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no handover walk 10 s after a node left (on the fake clock: none at all)")
		}
	}
	h.clock.awaitWaiter(t)
	got := h.sink.take()
	nodes := []string{self, other}
	want := append(mine(ago5, nodes), mine(ahead30, nodes)...)
	slices.SortFunc(want, func(a, b abi.ActorID) int { return strings.Compare(a.String(), b.String()) })
	if !slices.Equal(actorsOf(got), want) {
		t.Fatalf("handed over %d actors %v, want the %d of this node's shard due by the horizon %v", len(got), actorsOf(got), len(want), want)
	}
	for _, d := range got {
		if d.DueMs > testNow.Add(time.Minute).UnixMilli() {
			t.Fatalf("handed over %v due %v, beyond the horizon", d.Actor, d.Due())
		}
	}
	if n := h.bucket.lists - lists; n != 1 {
		t.Errorf("the handover walk made %d LISTs, want 1 (120 keys)", n)
	}
	if st := h.loop.Stats(); st.Sweeps != 2 || st.Handovers != 1 {
		t.Errorf("stats %+v: want one sweep and one handover walk", st)
	}
}

// PlanHandover plans the entries due by Now as a sweep does (the cap, the
// busy left out) and adds, after them, the earliest later entry of each
// actor of this node's shard with nothing due: all of them, whatever the
// cap.
func TestPlanHandover(t *testing.T) {
	keys, ago5, ahead30, _ := handoverIndex()
	var entries []Entry
	for _, k := range keys {
		if strings.Contains(k, fmt.Sprint(testNow.Add(2*time.Hour).UnixMilli())) {
			continue // the walk reads up to the horizon
		}
		key, err := alarmindex.ParseKey(k)
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, Entry{Object: k, Key: key})
	}
	busy := ahead30[0]
	nodes := []string{self, other}
	plan := PlanHandover(PlanInput{
		Entries: entries, Now: testNow, Margin: testMargin, Self: self, Live: []string{other},
		Busy:          func(id abi.ActorID) bool { return id == busy },
		MaxDeliveries: 4,
	})
	due := mine(ago5, nodes)
	var later []abi.ActorID
	for _, id := range mine(ahead30, nodes) {
		if id != busy {
			later = append(later, id)
		}
	}
	if len(due) <= 4 || len(later) <= 4 {
		t.Fatalf("the fixture needs more than the cap of each: %d due, %d later", len(due), len(later))
	}
	if n := len(plan.Deliveries); n != 4+len(later) {
		t.Fatalf("planned %d, want the cap of 4 due and the %d later ones", n, len(later))
	}
	for i, d := range plan.Deliveries {
		if (i < 4) != (d.DueMs <= testNow.UnixMilli()) {
			t.Fatalf("delivery %d due %v: the due ones first, then the later ones", i, d.Due())
		}
		if d.Actor == busy {
			t.Fatalf("planned the busy actor %v", busy)
		}
	}
	if plan.Stats.Deferred != len(due)-4 || plan.Stats.Ahead != len(later) {
		t.Errorf("stats %+v: want %d deferred, %d ahead", plan.Stats, len(due)-4, len(later))
	}
}
