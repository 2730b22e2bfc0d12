package sweeper

import (
	"context"
	"fmt"
	"math/rand"
	"runtime"
	"sort"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/internal/fakeclock"
)

func TestTimerPopsInTimeOrder(t *testing.T) {
	tm := NewTimer(5 * time.Minute)
	rng := rand.New(rand.NewSource(1))
	want := map[string]int64{}
	for i := 0; i < 5000; i++ {
		k := fmt.Sprintf("a%d", rng.Intn(2000))
		at := rng.Int63n(1_000_000)
		tm.Set(k, at)
		want[k] = at
		if rng.Intn(10) == 0 {
			tm.Remove(k)
			delete(want, k)
		}
	}
	if tm.Len() != len(want) {
		t.Fatalf("Len = %d, want %d", tm.Len(), len(want))
	}
	type kv struct {
		k  string
		at int64
	}
	var exp []kv
	for k, at := range want {
		exp = append(exp, kv{k, at})
	}
	sort.Slice(exp, func(i, j int) bool {
		if exp[i].at != exp[j].at {
			return exp[i].at < exp[j].at
		}
		return exp[i].k < exp[j].k
	})
	for i, e := range exp {
		k, at, ok := tm.PopDue(1 << 62)
		if !ok || k != e.k || at != e.at {
			t.Fatalf("pop %d = %q@%d %v, want %q@%d", i, k, at, ok, e.k, e.at)
		}
	}
	if _, _, ok := tm.PopDue(1 << 62); ok {
		t.Fatal("timer not empty after popping everything")
	}
}

func TestTimerPopDueOnlyWhenDue(t *testing.T) {
	tm := NewTimer(time.Minute)
	tm.Set("a", 100)
	if _, _, ok := tm.PopDue(99); ok {
		t.Fatal("popped an alarm before its time")
	}
	if k, at, ok := tm.PopDue(100); !ok || k != "a" || at != 100 {
		t.Fatalf("PopDue(100) = %q %d %v", k, at, ok)
	}
}

func TestTimerSetReplacesEitherWay(t *testing.T) {
	tm := NewTimer(time.Minute)
	tm.Set("a", 100)
	tm.Set("a", 500) // the actor moved its alarm later: the later time stands
	if at, _ := tm.Get("a"); at != 500 {
		t.Fatalf("after a later Set, held %d, want 500", at)
	}
	tm.Set("a", 50)
	if at, _ := tm.Get("a"); at != 50 {
		t.Fatalf("after an earlier Set, held %d, want 50", at)
	}
	if tm.Len() != 1 {
		t.Fatalf("one actor, Len = %d", tm.Len())
	}
}

func TestTimerOffer(t *testing.T) {
	const now = 1_000_000
	horizon := 5 * time.Minute
	h := horizon.Milliseconds()
	cases := []struct {
		name      string
		held      int64 // 0: nothing held
		offer     int64
		wantTaken bool
		wantHeld  int64
	}{
		{"nothing held: taken", 0, now - 20_000, true, now - 20_000},
		{"held earlier wins", now - 30_000, now - 20_000, false, now - 30_000},
		{"held equal wins", now - 20_000, now - 20_000, false, now - 20_000},
		{"a retry within the horizon wins over an overdue entry", now + 60_000, now - 20_000, false, now + 60_000},
		{"a retry at the horizon's edge still wins", now + h, now - 20_000, false, now + h},
		{"a time past the horizon loses to an earlier offer", now + h + 1, now - 20_000, true, now - 20_000},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tm := NewTimer(horizon)
			if c.held != 0 {
				tm.Set("a", c.held)
			}
			if got := tm.Offer("a", c.offer, now); got != c.wantTaken {
				t.Fatalf("Offer taken = %v, want %v", got, c.wantTaken)
			}
			if at, _ := tm.Get("a"); at != c.wantHeld {
				t.Fatalf("held %d, want %d", at, c.wantHeld)
			}
		})
	}
}

// signalClock reports each wait of the timer loop on the loop's own
// channel of events, so a test knows when the loop has delivered all that
// is due and is waiting (no sleeping to give it time).
type signalClock struct {
	*fakeclock.Clock
	ev chan string
}

func (c signalClock) After(d time.Duration) <-chan time.Time {
	c.ev <- "wait"
	return c.Clock.After(d)
}

func TestTimerRunDeliversWhenDue(t *testing.T) {
	ev := make(chan string, 100)
	clock := signalClock{fakeclock.New(time.UnixMilli(10_000)), ev}
	tm := NewTimer(time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		tm.Run(ctx, clock, func(key string, at int64) { ev <- fmt.Sprintf("%s@%d", key, at) })
		close(done)
	}()
	// next returns the loop's next delivery, skipping its waits.
	next := func() string {
		for e := range ev {
			if e != "wait" {
				return e
			}
		}
		return ""
	}
	tm.Set("late", 12_000)
	tm.Set("early", 11_000)
	tm.Set("past", 5_000) // already due: fires at once
	if g := next(); g != "past@5000" {
		t.Fatalf("first delivery %q, want past@5000", g)
	}
	// The loop delivers everything due, then waits: the event after
	// past's delivery must be a wait, not another delivery.
	if e := <-ev; e != "wait" {
		t.Fatalf("delivered %q before its time", e)
	}
	clock.Advance(time.Second)
	if g := next(); g != "early@11000" {
		t.Fatalf("delivery %q, want early@11000", g)
	}
	clock.Advance(time.Second)
	if g := next(); g != "late@12000" {
		t.Fatalf("delivery %q, want late@12000", g)
	}
	cancel()
	<-done
	if tm.Len() != 0 {
		t.Fatalf("Len = %d after all delivered", tm.Len())
	}
}

// BenchmarkTimer1M measures the timer holding 1,000,000 alarms: bytes per
// alarm held, ns per insert (Set) and ns per pop (PopDue).
func BenchmarkTimer1M(b *testing.B) {
	const n = 1_000_000
	keys := make([]string, n)
	ats := make([]int64, n)
	rng := rand.New(rand.NewSource(1))
	for i := range keys {
		keys[i] = fmt.Sprintf("tenant-1/counter/%016x", rng.Uint64())
		ats[i] = 1_700_000_000_000 + rng.Int63n(86_400_000)
	}
	var insertNs, popNs, bytesPer float64
	for it := 0; it < b.N; it++ {
		runtime.GC()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		tm := NewTimer(5 * time.Minute)
		t0 := time.Now()
		for i := 0; i < n; i++ {
			tm.Set(keys[i], ats[i])
		}
		insertNs += float64(time.Since(t0).Nanoseconds()) / n
		runtime.GC()
		runtime.ReadMemStats(&m1)
		bytesPer += float64(m1.HeapAlloc-m0.HeapAlloc) / n
		t1 := time.Now()
		for i := 0; i < n; i++ {
			if _, _, ok := tm.PopDue(1 << 62); !ok {
				b.Fatal("timer ran dry")
			}
		}
		popNs += float64(time.Since(t1).Nanoseconds()) / n
		runtime.KeepAlive(tm)
	}
	b.ReportMetric(insertNs/float64(b.N), "ns/insert")
	b.ReportMetric(popNs/float64(b.N), "ns/pop")
	b.ReportMetric(bytesPer/float64(b.N), "B/alarm")
	b.ReportMetric(0, "ns/op")
}
