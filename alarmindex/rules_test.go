package alarmindex

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/internal/variant"
)

var actorA = abi.ActorID{Tenant: "acme", Class: "counter", Name: "a/1"}

const (
	t1 = int64(1_700_000_000_000)
	t2 = int64(1_700_000_060_000)
	t3 = int64(1_700_000_120_000)
)

func ms(v int64) *int64 { return &v }

func rulesWith(m variant.Set) Rules {
	src, err := NewNonceSource(rand.NewChaCha8([32]byte{9}))
	if err != nil {
		panic(err)
	}
	return Rules{Nonces: src, variants: m}
}

func tagged(due int64, gen uint64, nonce string) *Key {
	return &Key{Actor: actorA, DueMs: due, Tag: Tag{Generation: gen, Nonce: nonce}}
}

func legacy(due int64) *Key {
	return &Key{Actor: actorA, DueMs: due, Legacy: true}
}

// short names a key by due time and generation ("t1@g5", "t2@legacy").
func short(k *Key) string {
	if k == nil {
		return "-"
	}
	name := map[int64]string{t1: "t1", t2: "t2", t3: "t3"}[k.DueMs]
	if name == "" {
		name = fmt.Sprint(k.DueMs)
	}
	if k.Legacy {
		return name + "@legacy"
	}
	return fmt.Sprintf("%s@g%d", name, k.Tag.Generation)
}

// describe renders the decisions of an index plan for table tests.
func describe(p IndexPlan) string {
	if p.Empty() && !p.UploadBeforePut {
		return "nothing"
	}
	var parts []string
	if p.UploadBeforePut {
		parts = append(parts, "upload-first")
	}
	if p.Put != nil {
		parts = append(parts, "put "+short(p.Put))
	}
	if p.Record {
		parts = append(parts, "record "+short(p.Recorded))
	}
	if p.DeleteAfterReplicate != nil {
		parts = append(parts, "delete "+short(p.DeleteAfterReplicate))
	}
	return strings.Join(parts, "; ")
}

func describeDelivery(p DeliveryPlan, listed []Key) string {
	parts := []string{p.Outcome.String()}
	if !p.Index.Empty() {
		parts = append(parts, "index("+describe(p.Index)+")")
	}
	if p.Fence {
		parts = append(parts, "fence")
	}
	if p.List {
		var ds []string
		for _, k := range p.StaleDeletes(listed) {
			ds = append(ds, short(&k))
		}
		parts = append(parts, "delete ["+strings.Join(ds, " ")+"]")
	}
	if p.RetryAfter > 0 {
		parts = append(parts, "retry after "+p.RetryAfter.String())
	}
	if p.Release {
		parts = append(parts, "release")
	}
	return strings.Join(parts, "; ")
}

func eventFacts(alarm *int64, rec *Key, gen uint64) EventFacts {
	return EventFacts{Actor: actorA, Alarm: alarm, Recorded: rec, Generation: gen, HoldValid: true}
}

// checkFresh asserts a plan's PUT is a new tagged key of the given
// generation and is what it records.
func checkFresh(t *testing.T, p IndexPlan, gen uint64) {
	t.Helper()
	if p.Put == nil {
		return
	}
	if p.Put.Legacy || p.Put.Tag.Generation != gen || p.Put.Tag.Nonce == "" {
		t.Fatalf("PUT %v is not a fresh tagged key of generation %d", p.Put, gen)
	}
	if err := p.Put.Validate(); err != nil {
		t.Fatalf("PUT key invalid: %v", err)
	}
	if !p.Record || p.Recorded == nil || *p.Recorded != *p.Put {
		t.Fatalf("plan PUTs %v but records %v", p.Put, p.Recorded)
	}
}

func TestAfterEvent(t *testing.T) {
	const own = 5
	cases := []struct {
		name  string
		alarm *int64
		rec   *Key
		want  string
	}{
		{"no alarm, none listed", nil, nil, "nothing"},
		{"new alarm is listed before replicating", ms(t1), nil, "put t1@g5; record t1@g5"},
		{"unchanged alarm keeps its entry", ms(t1), tagged(t1, own, "aa"), "nothing"},
		{"moved alarm: fresh entry, old one deleted after replicating", ms(t2), tagged(t1, 3, "aa"), "put t2@g5; record t2@g5; delete t1@g3"},
		{"moved alarm over own generation's entry", ms(t2), tagged(t1, own, "aa"), "put t2@g5; record t2@g5; delete t1@g5"},
		{"cleared alarm: record none, delete after replicating", nil, tagged(t1, 4, "aa"), "record -; delete t1@g4"},
		{"moved alarm over a newer generation's entry keeps it (R3)", ms(t2), tagged(t1, own+1, "aa"), "put t2@g5; record t2@g5"},
		{"cleared alarm over a newer generation's entry keeps it (R3)", nil, tagged(t1, own+1, "aa"), "record -"},
		{"legacy at the same time is migrated", ms(t1), legacy(t1), "put t1@g5; record t1@g5; delete t1@legacy"},
		{"legacy at another time is replaced", ms(t2), legacy(t1), "put t2@g5; record t2@g5; delete t1@legacy"},
		{"legacy cleared", nil, legacy(t1), "record -; delete t1@legacy"},
		{"alarm at time zero", ms(0), nil, "put 0@g5; record 0@g5"},
		{"alarm at the last indexable time", ms(MaxDueMs), nil, fmt.Sprintf("put %d@g5; record %d@g5", int64(MaxDueMs), int64(MaxDueMs))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := rulesWith(variant.Set{})
			p, err := r.AfterEvent(eventFacts(c.alarm, c.rec, own))
			if err != nil {
				t.Fatal(err)
			}
			if got := describe(p); got != c.want {
				t.Fatalf("plan %q, want %q", got, c.want)
			}
			checkFresh(t, p, own)
			if p.UploadBeforePut {
				t.Fatal("an event's upload must follow its PUT")
			}
		})
	}
}

func TestUnchangedAlarmCostsNoRequestUnderNewGeneration(t *testing.T) {
	// docs/design.md: one extra PUT per event that changes the alarm (plus a DELETE
	// of the old entry); none for events that leave it alone, even under a
	// new lease generation."
	for _, writer := range []uint64{1, 8, 9, 10} {
		w := newWorld()
		rec := tagged(t1, writer, "0f")
		w.entries[*rec] = true
		db := &database{alarm: ms(t1), recorded: rec}
		p, err := rulesWith(variant.Set{}).AfterEvent(eventFacts(db.alarm, db.recorded, 9))
		if err != nil {
			t.Fatal(err)
		}
		w.runEvent(t, p, db)
		if w.requests() != 0 {
			t.Fatalf("entry written by generation %d, own 9: %d requests (%v), want none", writer, w.requests(), w.log)
		}
		if db.recorded != rec {
			t.Fatal("the recorded entry changed")
		}
	}
}

func TestLegacyReplacedByTaggedOnNextEvent(t *testing.T) {
	w := newWorld()
	old := legacy(t1)
	w.entries[*old] = true
	db := &database{alarm: ms(t1), recorded: old}
	p, err := rulesWith(variant.Set{}).AfterEvent(eventFacts(db.alarm, db.recorded, 2))
	if err != nil {
		t.Fatal(err)
	}
	w.runEvent(t, p, db)
	if db.recorded == nil || db.recorded.Legacy || db.recorded.DueMs != t1 {
		t.Fatalf("recorded %v, want a tagged entry at t1", db.recorded)
	}
	if !w.entries[*db.recorded] || w.entries[*old] {
		t.Fatalf("bucket %v: want the tagged entry and no legacy one", w.keys())
	}
	if want := []string{"PUT", "RECORD", "UPLOAD", "DELETE"}; !slices.Equal(w.ops(), want) {
		t.Fatalf("order %v, want %v", w.ops(), want)
	}
	// The next event leaves it alone.
	p, _ = rulesWith(variant.Set{}).AfterEvent(eventFacts(db.alarm, db.recorded, 3))
	if !p.Empty() {
		t.Fatalf("second event %q, want nothing", describe(p))
	}
}

func TestMidEventUploadListsUnderReplicaGeneration(t *testing.T) {
	r := rulesWith(variant.Set{})
	const replicaGen = 12
	p, err := r.MidEventUpload(eventFacts(ms(t2), tagged(t1, 11, "aa"), replicaGen))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := describe(p), "put t2@g12; record t2@g12; delete t1@g11"; got != want {
		t.Fatalf("plan %q, want %q", got, want)
	}
	checkFresh(t, p, replicaGen)
	if _, err := r.MidEventUpload(EventFacts{Actor: actorA, Alarm: ms(t1), Generation: replicaGen, HoldValid: false}); !errors.Is(err, ErrGiveUp) {
		t.Fatalf("mid-event upload without a valid hold: %v, want give up", err)
	}
}

func TestEveryPutUsesAFreshKey(t *testing.T) {
	// R1: even the same alarm, set again after a move, gets a new key.
	r := rulesWith(variant.Set{})
	seen := map[Key]bool{}
	var rec *Key
	for i, at := range []int64{t1, t2, t1, t2, t1} {
		p, err := r.AfterEvent(eventFacts(ms(at), rec, 4))
		if err != nil {
			t.Fatal(err)
		}
		if p.Put == nil {
			t.Fatalf("step %d: no PUT for a changed alarm", i)
		}
		if seen[*p.Put] {
			t.Fatalf("step %d: key %v written again", i, p.Put)
		}
		seen[*p.Put] = true
		rec = p.Recorded
	}
}

func TestRulesGiveUp(t *testing.T) {
	other := abi.ActorID{Tenant: "acme", Class: "counter", Name: "b"}
	cases := []struct {
		name  string
		rules Rules
		facts EventFacts
		cause string
	}{
		{"hold not valid", rulesWith(variant.Set{}), EventFacts{Actor: actorA, Alarm: ms(t1), Generation: 1}, "hold is not valid"},
		{"hold not valid, unchanged alarm", rulesWith(variant.Set{}), EventFacts{Actor: actorA, Alarm: ms(t1), Recorded: tagged(t1, 1, "a"), Generation: 1}, "hold is not valid"},
		{"invalid actor", rulesWith(variant.Set{}), EventFacts{Actor: abi.ActorID{Tenant: "acme", Class: "a.b", Name: "n"}, Alarm: ms(t1), Generation: 1, HoldValid: true}, `class "a.b" holds '.'`},
		{"alarm out of range", rulesWith(variant.Set{}), eventFacts(ms(MaxDueMs+1), nil, 1), "outside"},
		{"negative alarm", rulesWith(variant.Set{}), eventFacts(ms(-1), nil, 1), "outside"},
		{"recorded entry of another actor", rulesWith(variant.Set{}), eventFacts(ms(t1), &Key{Actor: other, DueMs: t1, Legacy: true}, 1), "belongs to actor"},
		{"recorded entry unreadable", rulesWith(variant.Set{}), eventFacts(ms(t1), &Key{Actor: actorA, DueMs: t1, Tag: Tag{1, "XY"}}, 1), "cannot be read"},
		{"no nonce source", Rules{}, eventFacts(ms(t1), nil, 1), "no nonce source"},
		{"name too long to index", rulesWith(variant.Set{}), EventFacts{Actor: abi.ActorID{Tenant: "acme", Class: "c", Name: strings.Repeat("n", 480)}, Alarm: ms(t1), Generation: 1, HoldValid: true}, "the name is 480 bytes, over the limit of 100 bytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for name, plan := range map[string]func(EventFacts) (IndexPlan, error){
				"AfterEvent": c.rules.AfterEvent, "FirstUpload": c.rules.FirstUpload,
			} {
				p, err := plan(c.facts)
				if !errors.Is(err, ErrGiveUp) {
					t.Fatalf("%s: %q, %v: want give up", name, describe(p), err)
				}
				var g *GiveUpError
				if !errors.As(err, &g) || g.Actor != c.facts.Actor {
					t.Fatalf("%s: error %v does not name the actor", name, err)
				}
				if !strings.Contains(err.Error(), c.cause) || !strings.Contains(err.Error(), c.facts.Actor.String()) {
					t.Fatalf("%s: error %q should name the actor and %q", name, err, c.cause)
				}
			}
		})
	}
}

func TestR4ListsBeforeFirstUpload(t *testing.T) {
	t.Run("an alarm from before joining gets a fresh entry before the snapshot", func(t *testing.T) {
		w := newWorld()
		// Recorded while on its own: this bucket never had that entry.
		db := &database{alarm: ms(t1), recorded: tagged(t1, 1, "01")}
		p, err := rulesWith(variant.Set{}).FirstUpload(eventFacts(db.alarm, db.recorded, 7))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := describe(p), "put t1@g7; record t1@g7"; got != want {
			t.Fatalf("plan %q, want %q", got, want)
		}
		checkFresh(t, p, 7)
		w.runEvent(t, p, db)
		if want := []string{"PUT", "RECORD", "UPLOAD"}; !slices.Equal(w.ops(), want) {
			t.Fatalf("order %v, want %v", w.ops(), want)
		}
		if w.snapshot == nil || w.snapshot.recorded == nil || !w.entries[*w.snapshot.recorded] {
			t.Fatalf("first snapshot %+v names no entry in the bucket %v", w.snapshot, w.keys())
		}
	})
	t.Run("no alarm: the snapshot names nothing", func(t *testing.T) {
		p, err := rulesWith(variant.Set{}).FirstUpload(eventFacts(nil, tagged(t1, 1, "01"), 7))
		if err != nil {
			t.Fatal(err)
		}
		if got := describe(p); got != "record -" {
			t.Fatalf("plan %q, want record -", got)
		}
		p, _ = rulesWith(variant.Set{}).FirstUpload(eventFacts(nil, nil, 7))
		if !p.Empty() {
			t.Fatalf("plan %q, want nothing", describe(p))
		}
	})
	t.Run("if the entry cannot be listed nothing is uploaded", func(t *testing.T) {
		f := eventFacts(ms(t1), nil, 7)
		f.HoldValid = false
		if _, err := rulesWith(variant.Set{}).FirstUpload(f); !errors.Is(err, ErrGiveUp) {
			t.Fatalf("err %v, want give up", err)
		}
		w := newWorld()
		db := &database{alarm: ms(t1)}
		w.failPuts = true
		p, _ := rulesWith(variant.Set{}).FirstUpload(eventFacts(db.alarm, nil, 7))
		w.runEvent(t, p, db)
		if w.uploads != 0 || w.snapshot != nil {
			t.Fatalf("uploaded after a failed PUT: %v", w.log)
		}
	})
	t.Run("mutation: first upload before its entry names nothing that exists", func(t *testing.T) {
		w := newWorld()
		db := &database{alarm: ms(t1)}
		p, _ := rulesWith(variant.Set{FirstUploadBeforeEntry: true}).FirstUpload(eventFacts(db.alarm, nil, 7))
		w.runEvent(t, p, db)
		if want := []string{"UPLOAD", "PUT", "RECORD"}; !slices.Equal(w.ops(), want) {
			t.Fatalf("order %v, want %v", w.ops(), want)
		}
		if w.snapshot.recorded != nil {
			t.Fatalf("snapshot names %v", w.snapshot.recorded)
		}
	})
}

func deliveryFacts(delivered *Key, alarm *int64, rec *Key, gen uint64) DeliveryFacts {
	return DeliveryFacts{
		Delivered: *delivered, Alarm: alarm, Recorded: rec, InitRecorded: true,
		Generation: gen, HoldValid: true,
		Uploaded: true, BucketHadActor: true,
	}
}

func TestDeliver(t *testing.T) {
	const own = 6
	keys := func(ks ...*Key) []Key {
		var out []Key
		for _, k := range ks {
			out = append(out, *k)
		}
		return out
	}
	d := tagged(t2, 4, "d1")
	cases := []struct {
		name   string
		facts  DeliveryFacts
		listed []Key
		want   string
	}{
		{
			"committed alarm at the delivered time runs on-alarm",
			deliveryFacts(d, ms(t2), d, own), nil,
			"run",
		},
		{
			"runs even when the bucket had nothing (the node's own data)",
			func() DeliveryFacts {
				f := deliveryFacts(d, ms(t2), d, own)
				f.BucketHadActor, f.Uploaded = false, false
				return f
			}(), nil,
			"run",
		},
		{
			"alarm moved and indexed: stale entries at the time go, the named one stays",
			deliveryFacts(d, ms(t3), tagged(t3, 5, "c3"), own), keys(d, tagged(t2, 5, "e2"), tagged(t2, own, "e3")),
			"stale; delete [t2@g4 t2@g5 t2@g6]",
		},
		{
			"alarm moved but the database names the delivered entry: index first, then remove it",
			deliveryFacts(d, ms(t3), d, own), keys(d),
			"stale; index(put t3@g6; record t3@g6); delete [t2@g4]",
		},
		{
			"database names an entry at a third time: index first, the replaced one goes after replicating",
			deliveryFacts(d, ms(t3), tagged(t1, 5, "c1"), own), keys(d),
			"stale; index(put t3@g6; record t3@g6; delete t1@g5); delete [t2@g4]",
		},
		{
			"database names a legacy entry at the delivered time: index first, delete it by name",
			deliveryFacts(d, ms(t3), legacy(t2), own), keys(d),
			"stale; index(put t3@g6; record t3@g6; delete t2@legacy); delete [t2@g4]",
		},
		{
			"alarm cleared but still named: record none first",
			deliveryFacts(d, nil, d, own), keys(d),
			"stale; index(record -); delete [t2@g4]",
		},
		{
			"alarm cleared, nothing named",
			deliveryFacts(d, nil, nil, own), keys(d),
			"stale; delete [t2@g4]",
		},
		{
			"legacy entry at the alarm's time counts as indexed",
			deliveryFacts(d, ms(t3), legacy(t3), own), keys(d),
			"stale; delete [t2@g4]",
		},
		{
			"delivered legacy key is deleted by its exact name after the listing",
			deliveryFacts(legacy(t2), ms(t3), tagged(t3, 5, "c3"), own), keys(tagged(t2, 2, "e1")),
			"stale; delete [t2@g2 t2@legacy]",
		},
		{
			"an entry of a newer generation stays (R3)",
			deliveryFacts(d, ms(t3), tagged(t3, 5, "c3"), own), keys(d, tagged(t2, own+1, "f1")),
			"stale; delete [t2@g4]",
		},
		{
			"a delivered entry of a newer generation stays (R3)",
			deliveryFacts(tagged(t2, own+2, "f2"), nil, nil, own), keys(tagged(t2, own+2, "f2")),
			"stale; delete []",
		},
		{
			"listing keys of other actors or times are ignored",
			deliveryFacts(d, ms(t3), tagged(t3, 5, "c3"), own),
			append(keys(d, d, tagged(t1, 1, "01")), Key{Actor: abi.ActorID{Tenant: "acme", Class: "counter", Name: "b"}, DueMs: t2, Tag: Tag{1, "02"}}),
			"stale; delete [t2@g4]",
		},
		{
			"no state: removed without running",
			func() DeliveryFacts { f := deliveryFacts(d, nil, nil, own); f.InitRecorded = false; return f }(), keys(d),
			"no-state; delete [t2@g4]",
		},
		{
			"no state, nothing uploaded yet: fence first",
			func() DeliveryFacts {
				f := deliveryFacts(d, nil, nil, own)
				f.InitRecorded, f.Uploaded = false, false
				return f
			}(), keys(d),
			"no-state; fence; delete [t2@g4]",
		},
		{
			"stale, nothing uploaded yet: fence before deleting",
			func() DeliveryFacts {
				f := deliveryFacts(d, ms(t3), tagged(t3, 5, "c3"), own)
				f.Uploaded = false
				return f
			}(), keys(d),
			"stale; fence; delete [t2@g4]",
		},
		{
			"stale, nothing uploaded yet, index step uploads: no separate fence",
			func() DeliveryFacts { f := deliveryFacts(d, ms(t3), nil, own); f.Uploaded = false; return f }(), keys(d),
			"stale; index(put t3@g6; record t3@g6); delete [t2@g4]",
		},
		{
			"bucket had nothing, nothing uploaded: keep, retry after retry_max, release",
			func() DeliveryFacts {
				f := deliveryFacts(d, ms(t3), tagged(t3, 5, "c3"), own)
				f.BucketHadActor, f.Uploaded = false, false
				return f
			}(), keys(d),
			"keep; retry after 5m0s; release",
		},
		{
			"bucket had nothing but this hold uploaded since: ordinary cleanup",
			func() DeliveryFacts {
				f := deliveryFacts(d, ms(t3), tagged(t3, 5, "c3"), own)
				f.BucketHadActor = false
				return f
			}(), keys(d),
			"stale; delete [t2@g4]",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := rulesWith(variant.Set{}).Deliver(c.facts)
			if err != nil {
				t.Fatal(err)
			}
			if got := describeDelivery(p, c.listed); got != c.want {
				t.Fatalf("plan %q, want %q", got, c.want)
			}
			checkFresh(t, p.Index, c.facts.Generation)
			if p.Outcome == OutcomeRun && (p.List || p.Fence || !p.Index.Empty()) {
				t.Fatal("a run touches the index only through its event's plan")
			}
		})
	}
}

func TestDeliverGivesUp(t *testing.T) {
	d := tagged(t2, 4, "d1")
	for name, mod := range map[string]func(*DeliveryFacts){
		"hold not valid":        func(f *DeliveryFacts) { f.HoldValid = false },
		"delivered key invalid": func(f *DeliveryFacts) { f.Delivered.Tag.Nonce = "" },
	} {
		f := deliveryFacts(d, ms(t3), nil, 6)
		mod(&f)
		p, err := rulesWith(variant.Set{}).Deliver(f)
		if !errors.Is(err, ErrGiveUp) || !strings.Contains(err.Error(), actorA.String()) {
			t.Errorf("%s: %q, %v: want a give-up naming the actor", name, describeDelivery(p, nil), err)
		}
		if p.StaleDeletes([]Key{*d}) != nil {
			t.Errorf("%s: a refused plan deletes", name)
		}
	}
}

func TestR3NeverDeletesNewerGeneration(t *testing.T) {
	const own = 10
	r := rulesWith(variant.Set{})
	// After an event.
	for _, alarm := range []*int64{nil, ms(t2)} {
		p, err := r.AfterEvent(eventFacts(alarm, tagged(t1, own+1, "ab"), own))
		if err != nil {
			t.Fatal(err)
		}
		if p.DeleteAfterReplicate != nil {
			t.Fatalf("event plan %q deletes a newer generation's entry", describe(p))
		}
	}
	// On delivery, over every generation around own.
	var listed []Key
	for g := uint64(own - 2); g <= own+2; g++ {
		listed = append(listed, *tagged(t2, g, "0"+fmt.Sprint(g%10)))
	}
	for _, uploaded := range []bool{true, false} {
		f := deliveryFacts(tagged(t2, own-1, "01"), ms(t3), tagged(t3, own, "03"), own)
		f.Uploaded = uploaded
		p, err := r.Deliver(f)
		if err != nil {
			t.Fatal(err)
		}
		del := p.StaleDeletes(listed)
		if len(del) != 3 {
			t.Fatalf("deleted %d entries, want the 3 of generation <= %d", len(del), own)
		}
		for _, k := range del {
			if k.Tag.Generation > own {
				t.Fatalf("deleted %v of generation %d above own %d", k, k.Tag.Generation, own)
			}
		}
	}
}

func TestFenceBeforeFirstStaleDelete(t *testing.T) {
	stale := tagged(t2, 3, "a1")
	run := func(m variant.Set, uploaded bool) *world {
		w := newWorld()
		w.entries[*stale] = true
		named := tagged(t3, 3, "a3")
		w.entries[*named] = true
		db := &database{alarm: ms(t3), recorded: named}
		f := deliveryFacts(stale, db.alarm, db.recorded, 4)
		f.Uploaded = uploaded
		p, err := rulesWith(m).Deliver(f)
		if err != nil {
			t.Fatal(err)
		}
		w.runDelivery(t, p, db)
		if w.entries[*stale] || !w.entries[*named] {
			t.Fatalf("bucket after cleanup %v", w.keys())
		}
		return w
	}
	if got, want := run(variant.Set{}, false).ops(), []string{"FENCE", "LIST", "DELETE"}; !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
	// At most one extra upload per hold: once it uploaded, no fence.
	if got, want := run(variant.Set{}, true).ops(), []string{"LIST", "DELETE"}; !slices.Equal(got, want) {
		t.Fatalf("after an upload: order %v, want %v", got, want)
	}
	if got, want := run(variant.Set{NoFence: true}, false).ops(), []string{"LIST", "DELETE"}; !slices.Equal(got, want) {
		t.Fatalf("NoFence: order %v, want %v", got, want)
	}
}

func TestBucketHadNothingRemovesNothingAndReleases(t *testing.T) {
	stale := tagged(t2, 3, "a1")
	for _, alarm := range []*int64{nil, ms(t3)} {
		w := newWorld()
		w.entries[*stale] = true
		db := &database{alarm: alarm, init: true}
		f := deliveryFacts(stale, alarm, nil, 4)
		f.BucketHadActor, f.Uploaded = false, false
		p, err := rulesWith(variant.Set{}).Deliver(f)
		if err != nil {
			t.Fatal(err)
		}
		w.runDelivery(t, p, db)
		if w.requests() != 0 || w.uploads != 0 {
			t.Fatalf("alarm %v: requests %v, want none", deref(alarm), w.log)
		}
		if p.Outcome != OutcomeKeep || !p.Release || p.RetryAfter != DefaultRetryMax {
			t.Fatalf("alarm %v: plan %q", deref(alarm), describeDelivery(p, nil))
		}
	}
	r := rulesWith(variant.Set{})
	r.RetryMax = time.Minute
	f := deliveryFacts(stale, nil, nil, 4)
	f.BucketHadActor, f.Uploaded = false, false
	if p, _ := r.Deliver(f); p.RetryAfter != time.Minute {
		t.Fatalf("RetryAfter %v, want the configured retry_max", p.RetryAfter)
	}
}

func TestAnEntryForAnActorTheBucketNeverHadStaysWithoutCreatingIt(t *testing.T) {
	entry := tagged(t2, 3, "a1")
	w := newWorld()
	w.entries[*entry] = true
	db := &database{} // restored nothing: no alarm, no on-init
	f := deliveryFacts(entry, nil, nil, 4)
	f.InitRecorded, f.BucketHadActor, f.Uploaded = false, false, false
	p, err := rulesWith(variant.Set{}).Deliver(f)
	if err != nil {
		t.Fatal(err)
	}
	w.runDelivery(t, p, db)
	if !w.entries[*entry] {
		t.Fatal("the entry was removed")
	}
	if w.uploads != 0 || w.snapshot != nil {
		t.Fatalf("uploaded %d times: the actor would be created empty", w.uploads)
	}
	if p.Outcome != OutcomeKeep || !p.Release || p.RetryAfter != DefaultRetryMax {
		t.Fatalf("plan %q", describeDelivery(p, nil))
	}
}

// docs/design.md#r1: no delete sent earlier can remove a newer entry. Owner A moves an
// alarm away from t1 and its delete of the t1 entry lands late, after a new
// owner B (and, separately, A itself) set the alarm back to t1.
func TestLateDeleteAfterTakeoverRemovesNothingNamed(t *testing.T) {
	scenario := func(m variant.Set, takeover bool) (named Key, exists bool) {
		r := rulesWith(m)
		w := newWorld()
		db := &database{}
		step := func(gen uint64, alarm *int64) {
			db.alarm = alarm
			p, err := r.AfterEvent(eventFacts(db.alarm, db.recorded, gen))
			if err != nil {
				t.Fatal(err)
			}
			w.runEvent(t, p, db)
		}
		w.holdDeletes = true
		step(1, ms(t1)) // A lists t1
		step(1, ms(t2)) // A moves to t2; its delete of the t1 entry is in flight
		late := w.pending
		w.pending, w.holdDeletes = nil, false
		gen := uint64(1)
		if takeover {
			gen = 2 // B restores A's state (the database names t2) and takes over
		}
		step(gen, ms(t1)) // back to t1: a new entry; t2's delete is immediate
		for _, k := range late {
			delete(w.entries, k) // A's delete lands late
		}
		return *db.recorded, w.entries[*db.recorded]
	}
	for _, takeover := range []bool{true, false} {
		named, ok := scenario(variant.Set{}, takeover)
		if !ok {
			t.Fatalf("takeover=%v: the named entry %v was removed by a late delete", takeover, named)
		}
		if _, ok := scenario(variant.Set{UntaggedKeys: true}, takeover); ok {
			t.Fatalf("takeover=%v: untagged keys survived the late delete; the test cannot tell R1 from its absence", takeover)
		}
	}
}

// Each mutation turns one safety feature off; each must change a decision.
func TestMutationsEachChangeADecision(t *testing.T) {
	newer := tagged(t2, 9, "99")
	stale := tagged(t2, 3, "33")
	cases := []struct {
		name           string
		m              variant.Set
		decide         func(Rules) string
		safe, mutation string
	}{
		{
			"UntaggedKeys", variant.Set{UntaggedKeys: true},
			func(r Rules) string { p, _ := r.AfterEvent(eventFacts(ms(t1), nil, 5)); return describe(p) },
			"put t1@g5; record t1@g5", "put t1@legacy; record t1@legacy",
		},
		{
			"NoGenerationCheck", variant.Set{NoGenerationCheck: true},
			func(r Rules) string {
				p, _ := r.Deliver(deliveryFacts(stale, ms(t3), tagged(t3, 5, "c3"), 5))
				return describeDelivery(p, []Key{*stale, *newer})
			},
			"stale; delete [t2@g3]", "stale; delete [t2@g3 t2@g9]",
		},
		{
			"NoGenerationCheck after an event", variant.Set{NoGenerationCheck: true},
			func(r Rules) string { p, _ := r.AfterEvent(eventFacts(nil, newer, 5)); return describe(p) },
			"record -", "record -; delete t2@g9",
		},
		{
			"NoFence", variant.Set{NoFence: true},
			func(r Rules) string {
				f := deliveryFacts(stale, ms(t3), tagged(t3, 5, "c3"), 5)
				f.Uploaded = false
				p, _ := r.Deliver(f)
				return describeDelivery(p, []Key{*stale})
			},
			"stale; fence; delete [t2@g3]", "stale; delete [t2@g3]",
		},
		{
			"FirstUploadBeforeEntry", variant.Set{FirstUploadBeforeEntry: true},
			func(r Rules) string { p, _ := r.FirstUpload(eventFacts(ms(t1), nil, 5)); return describe(p) },
			"put t1@g5; record t1@g5", "upload-first; put t1@g5; record t1@g5",
		},
		{
			"ClearWhileBucketEmpty", variant.Set{ClearWhileBucketEmpty: true},
			func(r Rules) string {
				f := deliveryFacts(stale, nil, nil, 5)
				f.InitRecorded, f.BucketHadActor, f.Uploaded = false, false, false
				p, _ := r.Deliver(f)
				return describeDelivery(p, []Key{*stale})
			},
			"keep; retry after 5m0s; release", "no-state; delete [t2@g3]",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := c.decide(rulesWith(variant.Set{})); got != c.safe {
				t.Fatalf("safe rules: %q, want %q", got, c.safe)
			}
			if got := c.decide(rulesWith(c.m)); got != c.mutation {
				t.Fatalf("with the mutation: %q, want %q", got, c.mutation)
			}
		})
	}
}

func TestClearWhileBucketEmptyStillSparesTheNamedEntry(t *testing.T) {
	// The mutation drops only the bucket-had-nothing rule: R2 still spares
	// what the database names, and nothing is uploaded.
	named := tagged(t2, 3, "a1")
	other := tagged(t2, 3, "a2")
	f := deliveryFacts(other, ms(t3), named, 4)
	f.BucketHadActor, f.Uploaded = false, false
	p, err := rulesWith(variant.Set{ClearWhileBucketEmpty: true}).Deliver(f)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := describeDelivery(p, []Key{*named, *other}), "stale; delete [t2@g3]"; got != want {
		t.Fatalf("plan %q, want %q", got, want)
	}
	if del := p.StaleDeletes([]Key{*named, *other}); len(del) != 1 || del[0] != *other {
		t.Fatalf("deletes %v, want only the unnamed entry", del)
	}
}

// database is the part of an actor's database the rules speak about.
type database struct {
	alarm    *int64
	recorded *Key
	init     bool
}

// world executes plans against an in-memory bucket, logging each request
// and upload in order.
type world struct {
	entries     map[Key]bool
	log         []string
	puts        int
	deletes     int
	lists       int
	uploads     int
	snapshot    *database // the last uploaded state
	failPuts    bool
	holdDeletes bool  // DELETEs are sent but land later (in pending)
	pending     []Key // deletes in flight
}

func newWorld() *world { return &world{entries: map[Key]bool{}} }

func (w *world) requests() int { return w.puts + w.deletes + w.lists }

func (w *world) ops() []string {
	var out []string
	for _, l := range w.log {
		out = append(out, strings.Fields(l)[0])
	}
	return out
}

func (w *world) keys() []string {
	var out []string
	for k := range w.entries {
		out = append(out, short(&k))
	}
	slices.Sort(out)
	return out
}

func (w *world) put(k Key) bool {
	w.puts++
	w.log = append(w.log, "PUT "+k.String())
	if w.failPuts {
		return false
	}
	w.entries[k] = true
	return true
}

func (w *world) del(k Key) {
	w.deletes++
	w.log = append(w.log, "DELETE "+k.String())
	if w.holdDeletes {
		w.pending = append(w.pending, k)
		return
	}
	delete(w.entries, k)
}

func (w *world) upload(db *database, what string) {
	w.uploads++
	w.log = append(w.log, what)
	snap := *db
	w.snapshot = &snap
}

// runEvent executes an index plan around an upload, as the host does.
func (w *world) runEvent(t *testing.T, p IndexPlan, db *database) {
	t.Helper()
	if p.UploadBeforePut {
		w.upload(db, "UPLOAD")
	}
	if p.Put != nil && !w.put(*p.Put) {
		return // give up: nothing uploaded
	}
	if p.Record {
		w.log = append(w.log, "RECORD "+FormatRecorded(p.Recorded))
		db.recorded = p.Recorded
	}
	if !p.UploadBeforePut && !p.Empty() {
		w.upload(db, "UPLOAD")
	}
	if p.DeleteAfterReplicate != nil {
		w.del(*p.DeleteAfterReplicate)
	}
}

// runDelivery executes a delivery plan (not the on-alarm run itself).
func (w *world) runDelivery(t *testing.T, p DeliveryPlan, db *database) {
	t.Helper()
	if !p.Index.Empty() {
		w.runEvent(t, p.Index, db)
	}
	if p.Fence {
		w.upload(db, "FENCE")
	}
	if p.List {
		w.lists++
		w.log = append(w.log, "LIST "+TaggedPrefix(p.delivered.Actor, p.delivered.DueMs))
		var listed []Key
		for k := range w.entries {
			if !k.Legacy && strings.HasPrefix(k.String(), TaggedPrefix(p.delivered.Actor, p.delivered.DueMs)) {
				listed = append(listed, k)
			}
		}
		slices.SortFunc(listed, func(a, b Key) int { return strings.Compare(a.String(), b.String()) })
		for _, k := range p.StaleDeletes(listed) {
			w.del(k)
		}
	}
}

// TestDeliverAcceptsATimeWithoutATag: the node timer delivers an actor at a
// time, without knowing which tagged entry a sweep saw there.
func TestDeliverAcceptsATimeWithoutATag(t *testing.T) {
	a := abi.ActorID{Tenant: "t", Class: "c", Name: "n"}
	at := int64(5000)
	r := rulesWith(variant.Set{})
	p, err := r.Deliver(DeliveryFacts{
		Delivered: Key{Actor: a, DueMs: at}, Alarm: &at, Generation: 2,
		HoldValid: true, BucketHadActor: true,
	})
	if err != nil || p.Outcome != OutcomeRun {
		t.Fatalf("Deliver of an untagged time = %v, %v; want OutcomeRun", p.Outcome, err)
	}
}
