package core_test

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/alarmindex"
	"github.com/wasmkeep/alarms/core"
	"github.com/wasmkeep/alarms/sweeper"
)

var actor = abi.ActorID{Tenant: "t", Class: "c", Name: "n"}

// timerKey is the actor's key in a node timer (any string the host uses).
const timerKey = "t/c/6e"

const t0 = int64(1_700_000_000_000)

func rules(t *testing.T) alarmindex.Rules {
	src, err := alarmindex.NewNonceSource(rand.NewChaCha8([32]byte{7}))
	if err != nil {
		t.Fatal(err)
	}
	return alarmindex.Rules{Nonces: src}
}

func key(due int64, gen uint64) alarmindex.Key {
	return alarmindex.Key{Actor: actor, DueMs: due, Tag: alarmindex.Tag{Generation: gen, Nonce: "1"}}
}

// Each replication point takes its own plan: a first upload PUTs and
// records the entry before the upload (R4), the others after an event; and
// the entry the uploaded state names is the one the plan records.
func TestPlanTakesTheReplicationPointsRules(t *testing.T) {
	r := rules(t)
	due := t0 + 60_000
	f := alarmindex.EventFacts{Actor: actor, Alarm: &due, Generation: 2, HoldValid: true}
	for _, kind := range []core.UploadKind{core.AfterEvent, core.MidEvent, core.FirstUpload} {
		plan, named, err := core.Plan(r, kind, f)
		if err != nil {
			t.Fatalf("kind %d: %v", kind, err)
		}
		if !plan.Record || named == nil || named.DueMs != due || named != plan.Recorded {
			t.Fatalf("kind %d: plan %+v names %v; want the new entry at the alarm recorded and named", kind, plan, named)
		}
	}
	// The plans differ where the rules do: a hold that is not valid
	// gives the actor up after an event.
	f.HoldValid = false
	if _, _, err := core.Plan(r, core.AfterEvent, f); err == nil {
		t.Fatal("an upload after an event under a lapsed hold was planned")
	}
	// An unchanged alarm: nothing recorded, the recorded entry is named.
	rec := key(due, 2)
	f = alarmindex.EventFacts{Actor: actor, Alarm: &due, Recorded: &rec, Generation: 2, HoldValid: true}
	plan, named, err := core.Plan(r, core.AfterEvent, f)
	if err != nil || plan.Record || named == nil || *named != rec {
		t.Fatalf("unchanged alarm: plan %+v named %v err %v; want the recorded entry named", plan, named, err)
	}
}

func cfg() core.Config {
	return core.Config{RetryAfterError: 5 * time.Second, RetryMax: 5 * time.Minute}
}

// A sweep's overdue entry of an actor the timer keeps later is removed by
// the node, whether or not it uploaded the actor (one that restarted has
// not), only for an entry time other than the one its latest upload named,
// only while the timer holds the actor later, never while busy; a failed
// removal waits RetryAfterError, one that removed nothing RetryMax, one
// that removed something not at all.
func TestStaleDecidesWhichKeptEntriesToRemove(t *testing.T) {
	named := key(t0+10_000, 3)
	stale := sweeper.Overdue{Actor: actor, DueMs: t0, Keys: []string{key(t0, 2).String()}}
	kept := core.Kept{Now: t0 + 1000, TimerAt: t0 + 10_000, TimerHeld: true, Key: timerKey}

	s := core.New(cfg())
	if e, ok := s.Stale(stale, kept); !ok || e.DueMs != t0 {
		t.Fatalf("an actor this node has not uploaded: got %v %t; want the entry time %d delivered (the fence covers it)", e, ok, t0)
	}
	s.Uploaded(actor, &named)
	e, ok := s.Stale(stale, kept)
	if !ok || e.Actor != actor || e.DueMs != t0 || e.Legacy {
		t.Fatalf("got %v %t; want the entry time %d delivered", e, ok, t0)
	}
	for name, k := range map[string]core.Kept{
		"busy":                   {Now: kept.Now, Busy: true, TimerAt: kept.TimerAt, TimerHeld: true},
		"timer does not hold it": {Now: kept.Now},
		"timer holds it earlier": {Now: kept.Now, TimerAt: t0, TimerHeld: true},
	} {
		if _, ok := s.Stale(stale, k); ok {
			t.Errorf("%s: removal decided", name)
		}
	}
	if _, ok := s.Stale(sweeper.Overdue{Actor: actor, DueMs: named.DueMs}, core.Kept{Now: kept.Now, TimerAt: t0 + 20_000, TimerHeld: true, Key: timerKey}); ok {
		t.Error("removal decided for the entry time the upload named")
	}
	legacy := alarmindex.Key{Actor: actor, DueMs: t0, Legacy: true}
	if e, ok := s.Stale(sweeper.Overdue{Actor: actor, DueMs: t0, Keys: []string{key(t0, 2).String(), legacy.String()}}, kept); !ok || !e.Legacy {
		t.Errorf("a legacy key among the keys: got %v %t; want the legacy entry delivered", e, ok)
	}

	// The waits after a removal.
	s.StaleDone(actor, t0, kept.Now, false, true)
	if _, ok := s.Stale(stale, core.Kept{Now: kept.Now + 4999, TimerAt: kept.TimerAt, TimerHeld: true, Key: timerKey}); ok {
		t.Error("a failed removal tried again before RetryAfterError")
	}
	if _, ok := s.Stale(stale, core.Kept{Now: kept.Now + 5000, TimerAt: kept.TimerAt, TimerHeld: true, Key: timerKey}); !ok {
		t.Error("a failed removal not tried again after RetryAfterError")
	}
	s.StaleDone(actor, t0, kept.Now, false, false)
	if _, ok := s.Stale(stale, core.Kept{Now: kept.Now + 299_999, TimerAt: kept.TimerAt, TimerHeld: true, Key: timerKey}); ok {
		t.Error("a removal that removed nothing tried again before RetryMax")
	}
	other := sweeper.Overdue{Actor: actor, DueMs: t0 + 1, Keys: stale.Keys}
	if _, ok := s.Stale(other, kept); !ok {
		t.Error("the wait of one entry time held back another")
	}
	s.StaleDone(actor, t0, kept.Now, true, false)
	if _, ok := s.Stale(stale, kept); !ok {
		t.Error("a removal that removed something held back the next")
	}

	// Forgotten (another node's, or its alarm cleared), or an upload that
	// named nothing: the named time is no longer left to the timer.
	at := sweeper.Overdue{Actor: actor, DueMs: named.DueMs}
	later := core.Kept{Now: kept.Now, TimerAt: t0 + 20_000, TimerHeld: true, Key: timerKey}
	s.Forget(actor)
	if _, ok := s.Stale(at, later); !ok {
		t.Error("the time of an upload forgotten is still left alone")
	}
	s.Uploaded(actor, &named)
	s.Uploaded(actor, nil)
	if _, ok := s.Stale(at, later); !ok {
		t.Error("the time of an upload that an upload naming nothing replaced is still left alone")
	}
}

// An entry another node's sweep listed and forwarded here, the holder:
// removed whether or not the timer holds the actor (an actor with no alarm
// has only stale entries), but not while the timer holds it at that time
// or earlier, nor for the time the node's latest upload named, nor while
// busy, nor again before a failed removal's wait.
func TestForwardedDecidesWhichForwardedEntriesToRemove(t *testing.T) {
	s := core.New(cfg())
	entry := alarmindex.Key{Actor: actor, DueMs: t0, Legacy: true}
	now := t0 + 60_000
	for name, k := range map[string]core.Kept{
		"the timer holds the actor later": {Now: now, TimerAt: t0 + 10_000, TimerHeld: true, Key: timerKey},
		"the timer does not hold it":      {Now: now, Key: timerKey},
	} {
		if e, ok := s.Forwarded(entry, k); !ok || e != entry {
			t.Errorf("%s: got %v %t; want %v delivered", name, e, ok, entry)
		}
	}
	for name, k := range map[string]core.Kept{
		"the timer holds that time":  {Now: now, TimerAt: t0, TimerHeld: true, Key: timerKey},
		"the timer holds it earlier": {Now: now, TimerAt: t0 - 1, TimerHeld: true, Key: timerKey},
		"the host cannot take it":    {Now: now, Busy: true, Key: timerKey},
	} {
		if _, ok := s.Forwarded(entry, k); ok {
			t.Errorf("%s: removal decided", name)
		}
	}
	free := core.Kept{Now: now, Key: timerKey}
	if !s.Claim(timerKey) {
		t.Fatal("claim")
	}
	if _, ok := s.Forwarded(entry, free); ok {
		t.Error("removal decided while a delivery of the actor is under way")
	}
	s.Release(timerKey)
	named := key(t0, 4)
	s.Uploaded(actor, &named)
	if _, ok := s.Forwarded(entry, free); ok {
		t.Error("removal decided for the time this node's latest upload named")
	}
	s.Forget(actor)
	s.StaleDone(actor, t0, now, false, true)
	if _, ok := s.Forwarded(entry, free); ok {
		t.Error("a failed removal tried again at once")
	}
}

// A delivery that finds the actor held elsewhere forwards an entry only
// for the time a sweep of this node listed (with its legacy key), once;
// a delivery here, or forgetting the actor, drops what was listed; and the
// same entry time is not forwarded again within RetryAfterError.
func TestForwardOnlyWhatASweepListed(t *testing.T) {
	s := core.New(cfg())
	now := t0 + 60_000
	if _, ok := s.Forward(actor, t0, now); ok {
		t.Fatal("forwarded a time no sweep listed")
	}
	s.Listed(actor, t0)
	s.OfferedLegacy(actor, t0)
	if _, ok := s.Forward(actor, t0+1, now); ok {
		t.Error("forwarded another time than the one listed")
	}
	if e, ok := s.Forward(actor, t0, now); !ok || e != (alarmindex.Key{Actor: actor, DueMs: t0, Legacy: true}) {
		t.Errorf("got %v %t; want the listed legacy entry", e, ok)
	}
	if _, ok := s.Forward(actor, t0, now); ok {
		t.Error("forwarded twice")
	}
	s.Listed(actor, t0+5)
	s.Entry(actor, t0+6)
	if _, ok := s.Forward(actor, t0+5, now); ok {
		t.Error("forwarded after a delivery here")
	}
	s.Listed(actor, t0+5)
	s.Forget(actor)
	if _, ok := s.Forward(actor, t0+5, now); ok {
		t.Error("forwarded after the actor was forgotten")
	}

	// Listed again by the next sweeps: once per RetryAfterError (5 s).
	s.Listed(actor, t0)
	if _, ok := s.Forward(actor, t0, now+4999); ok {
		t.Error("the same entry time forwarded again before RetryAfterError")
	}
	s.Listed(actor, t0+7)
	if _, ok := s.Forward(actor, t0+7, now+4999); !ok {
		t.Error("another entry time held back by the wait of the last")
	}
	s.Listed(actor, t0)
	if _, ok := s.Forward(actor, t0, now+4999+5000); !ok {
		t.Error("the same entry time not forwarded again after RetryAfterError")
	}
	// The records of many actors are pruned once expired.
	for i := range 5000 {
		s.Forwarding(alarmindex.Key{Actor: abi.ActorID{Tenant: "t", Class: "c", Name: strconv.Itoa(i)}, DueMs: t0}, now+int64(i)*10_000)
	}
	if n := s.ForwardedLen(); n > 1024 {
		t.Errorf("%d forward records kept; want the expired ones pruned", n)
	}
}

// An actor whose entry was forwarded to its holder is held elsewhere
// lately, for a sweep to leave out, until RetryAfterError has passed; an
// actor never forwarded, or forwarded long enough ago, is not.
func TestHeldElsewhereLately(t *testing.T) {
	s := core.New(cfg())
	now := t0 + 60_000
	if s.HeldElsewhereLately(actor, now) {
		t.Fatal("an actor never found held elsewhere is held elsewhere lately")
	}
	s.Listed(actor, t0)
	if _, ok := s.Forward(actor, t0, now); !ok {
		t.Fatal("the listed entry was not forwarded")
	}
	if !s.HeldElsewhereLately(actor, now+4999) {
		t.Error("not held elsewhere lately within RetryAfterError of the forward")
	}
	if s.HeldElsewhereLately(actor, now+5000) {
		t.Error("still held elsewhere lately RetryAfterError after the forward: a holder that died would never be taken over")
	}
	other := abi.ActorID{Tenant: "t", Class: "c", Name: "other"}
	if s.HeldElsewhereLately(other, now) {
		t.Error("another actor is held elsewhere lately")
	}
}

// A time the node ran is left out for a lease period, that time only, and
// for the actor only.
func TestRanLatelyLastsALeasePeriodForThatTime(t *testing.T) {
	s := core.New(core.Config{RetryAfterError: 10 * time.Second, RetryMax: time.Minute})
	a := abi.ActorID{Tenant: "t", Class: "c", Name: "a"}
	b := abi.ActorID{Tenant: "t", Class: "c", Name: "b"}
	s.Ran(a, 5000, 100_000)
	switch {
	case !s.RanLately(a, 5000, 100_000), !s.RanLately(a, 5000, 109_999):
		t.Error("a time it ran is not left out within the lease period")
	case s.RanLately(a, 5000, 110_000):
		t.Error("a time it ran is still left out a lease period later")
	case s.RanLately(a, 6000, 100_001):
		t.Error("another time of the actor is left out")
	case s.RanLately(b, 5000, 100_001):
		t.Error("another actor is left out")
	}
	for i := range 3000 { // pruned of expired records as it grows
		s.Ran(abi.ActorID{Tenant: "t", Class: "c", Name: strconv.Itoa(i)}, 1, int64(200_000+i*20_000))
	}
	if n := s.RanLen(); n > 2048 {
		t.Errorf("%d records kept, want expired ones pruned", n)
	}
}

// A time popped while a delivery of that very time is under way (the host
// armed the committed alarm as it took the actor) is the same alarm and is
// not delivered again; once the delivery settled, the time popped is an
// alarm committed for it again and is kept; another time always is.
func TestAPopOfTheTimeBeingDeliveredIsTheSameAlarm(t *testing.T) {
	s := core.New(core.Config{RetryAfterError: 10 * time.Second, RetryMax: time.Minute})
	const k = "t/c/61"
	if !s.Start(k, 5000) || s.Delivering(k, 5000) != 5000 {
		t.Fatal("the first pop does not start a delivery of its time")
	}
	if s.Start(k, 5000) {
		t.Fatal("a second delivery started while one is under way")
	}
	if at, again := s.Release(k); again {
		t.Fatalf("the time being delivered, popped again as the actor was taken, is delivered again (%d)", at)
	}
	s.Start(k, 5000)
	s.Delivering(k, 5000)
	s.Start(k, 7000)
	if at, again := s.Release(k); !again || at != 7000 {
		t.Fatalf("another time popped during the delivery: kept %d, %t; want 7000", at, again)
	}
	s.Start(k, 5000)
	s.Delivering(k, 5000)
	s.Settled(k)
	s.Start(k, 5000)
	if at, again := s.Release(k); !again || at != 5000 {
		t.Fatalf("the same time committed again after the delivery settled: kept %d, %t; want 5000", at, again)
	}
}
