package core_test

import (
	"math/rand/v2"
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
// a delivery here, or forgetting the actor, drops what was listed.
func TestForwardOnlyWhatASweepListed(t *testing.T) {
	s := core.New(cfg())
	if _, ok := s.Forward(actor, t0); ok {
		t.Fatal("forwarded a time no sweep listed")
	}
	s.Listed(actor, t0)
	s.OfferedLegacy(actor, t0)
	if _, ok := s.Forward(actor, t0+1); ok {
		t.Error("forwarded another time than the one listed")
	}
	if e, ok := s.Forward(actor, t0); !ok || e != (alarmindex.Key{Actor: actor, DueMs: t0, Legacy: true}) {
		t.Errorf("got %v %t; want the listed legacy entry", e, ok)
	}
	if _, ok := s.Forward(actor, t0); ok {
		t.Error("forwarded twice")
	}
	s.Listed(actor, t0)
	s.Entry(actor, t0+5)
	if _, ok := s.Forward(actor, t0); ok {
		t.Error("forwarded after a delivery here")
	}
	s.Listed(actor, t0)
	s.Forget(actor)
	if _, ok := s.Forward(actor, t0); ok {
		t.Error("forwarded after the actor was forgotten")
	}
}

func TestStaleStepOf(t *testing.T) {
	for o, want := range map[alarmindex.Outcome]core.StaleStep{
		alarmindex.OutcomeStale:   core.StaleRemove,
		alarmindex.OutcomeNoState: core.StaleRemove,
		alarmindex.OutcomeRun:     core.StaleArm,
		alarmindex.OutcomeKeep:    core.StaleLetGo,
	} {
		if got := core.StaleStepOf(o); got != want {
			t.Errorf("%v: %v, want %v", o, got, want)
		}
	}
}

// One delivery of an actor at a time: a time the timer pops meanwhile is
// kept (the earliest) and handed back when the delivery ends; a removal of
// stale entries waits for a delivery, and a delivery for a removal.
func TestOneDeliveryOfAnActorAtATime(t *testing.T) {
	s := core.New(cfg())
	if !s.Start(timerKey, t0) {
		t.Fatal("the first delivery did not start")
	}
	if !s.InFlight(timerKey) || s.Claim(timerKey) {
		t.Fatal("a removal of stale entries claimed an actor being delivered")
	}
	if s.Start(timerKey, t0+500) || s.Start(timerKey, t0+200) || s.Start(timerKey, t0+900) {
		t.Fatal("a second delivery started while one is under way")
	}
	if at, again := s.Release(timerKey); !again || at != t0+200 {
		t.Fatalf("released with %d, %t; want the earliest time popped meanwhile, %d", at, again, t0+200)
	}
	if _, again := s.Release(timerKey); again {
		t.Fatal("a time handed back twice")
	}
	if !s.Claim(timerKey) || s.Start(timerKey, t0) {
		t.Fatal("a delivery started during a removal of stale entries")
	}
	s.Release(timerKey)
	if s.InFlight(timerKey) {
		t.Fatal("still in flight after Release")
	}
}

// A failed delivery's retry delivers its entry time, not the retry's; an
// event that arms the actor drops the retry; a legacy entry a sweep offered
// is named by the delivery of its time only.
func TestTheEntryADeliveryNames(t *testing.T) {
	s := core.New(cfg())
	if got := s.Delivering(timerKey, t0); got != t0 {
		t.Fatalf("Delivering = %d, want %d", got, t0)
	}
	s.Failed(timerKey, t0)
	if !s.Waiting(timerKey) {
		t.Fatal("a failed delivery does not wait to deliver again")
	}
	if got := s.Delivering(timerKey, t0+5000); got != t0 {
		t.Fatalf("the retry delivers %d, want the failed entry time %d", got, t0)
	}
	if s.Waiting(timerKey) || s.Delivering(timerKey, t0+5000) != t0+5000 {
		t.Fatal("the failed entry time delivered twice")
	}
	s.Failed(timerKey, t0)
	due := t0 + 60_000
	s.Armed(actor, timerKey, &due)
	if s.Waiting(timerKey) {
		t.Fatal("an event that armed the actor left a failed delivery's retry")
	}

	if k := s.Entry(actor, t0); k.Legacy || k.DueMs != t0 || k.Actor != actor {
		t.Fatalf("Entry = %v; want the tagged entries at %d", k, t0)
	}
	legacy := alarmindex.Key{Actor: actor, DueMs: t0, Legacy: true}.String()
	tagged := key(t0, 1).String()
	if core.LegacyAmong([]string{tagged}) || !core.LegacyAmong([]string{tagged, legacy}) {
		t.Fatal("LegacyAmong is wrong")
	}
	s.OfferedLegacy(actor, t0)
	if k := s.Entry(actor, t0+1); k.Legacy {
		t.Fatal("a legacy entry named by the delivery of another time")
	}
	if k := s.Entry(actor, t0); !k.Legacy {
		t.Fatal("the legacy entry a sweep offered is not named by its time's delivery")
	}
	if k := s.Entry(actor, t0); k.Legacy {
		t.Fatal("the legacy entry named twice")
	}
}

// A removal of stale entries waits for a delivery under way and for a
// failed one waiting to deliver its entry time again.
func TestStaleWaitsForDeliveries(t *testing.T) {
	s := core.New(cfg())
	named := key(t0+10_000, 3)
	s.Uploaded(actor, &named)
	stale := sweeper.Overdue{Actor: actor, DueMs: t0}
	kept := core.Kept{Now: t0 + 1000, TimerAt: t0 + 10_000, TimerHeld: true, Key: timerKey}
	s.Start(timerKey, t0+10_000)
	if _, ok := s.Stale(stale, kept); ok {
		t.Fatal("a removal decided during a delivery")
	}
	s.Release(timerKey)
	s.Failed(timerKey, t0+10_000)
	if _, ok := s.Stale(stale, kept); ok {
		t.Fatal("a removal decided while a failed delivery waits")
	}
	s.Delivering(timerKey, t0+15_000)
	if _, ok := s.Stale(stale, kept); !ok {
		t.Fatal("no removal once the deliveries ended")
	}
}
