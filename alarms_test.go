package alarms_test

// Tests of the plugin against a fake host and actor on the in-memory bucket:
// the order in which it carries out the index rules (PUT, record, upload,
// DELETE), what it costs, and what it does when a step fails. The reference
// host's tests (package node) run the same paths end to end.

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/alarms"
	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/alarmindex"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/hostmod"
	"github.com/wasmkeep/alarms/sweeper"
)

// journal records, in order, the index requests the plugin makes and the
// calls it makes on the actor.
type journal struct {
	mu  sync.Mutex
	log []string
}

func (j *journal) add(format string, args ...any) {
	j.mu.Lock()
	j.log = append(j.log, fmt.Sprintf(format, args...))
	j.mu.Unlock()
}

// take returns the journal so far and empties it.
func (j *journal) take() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := j.log
	j.log = nil
	return out
}

// journaled is a bucket that writes each request into the journal.
type journaled struct {
	bucket.Bucket
	j *journal
}

func (b journaled) Put(ctx context.Context, key string, body []byte, cond bucket.Cond) (string, error) {
	if cond.IfNoneMatch {
		b.j.add("PUT-IF-NONE-MATCH %s", key)
	} else {
		b.j.add("PUT %s", key)
	}
	return b.Bucket.Put(ctx, key, body, cond)
}

func (b journaled) Delete(ctx context.Context, key string) error {
	b.j.add("DELETE %s", key)
	return b.Bucket.Delete(ctx, key)
}

func (b journaled) DeleteBatch(ctx context.Context, keys []string) ([]string, error) {
	b.j.add("DELETE-BATCH %s", strings.Join(keys, " "))
	return b.Bucket.DeleteBatch(ctx, keys)
}

func (b journaled) List(ctx context.Context, prefix, startAfter string, limit int) ([]string, error) {
	b.j.add("LIST %s", prefix)
	return b.Bucket.List(ctx, prefix, startAfter, limit)
}

// taking is what a test's host does to take an actor (alarms.Host.Take).
type taking interface {
	Take(context.Context, abi.ActorID) (alarms.Actor, func(error), error)
}

// takes is the Take of the tests' hosts: tk takes the actors (none: every
// Take fails).
type takes struct{ tk taking }

func (h takes) Take(ctx context.Context, id abi.ActorID) (alarms.Actor, func(error), error) {
	if h.tk == nil {
		return nil, nil, errors.New("this host takes no actors")
	}
	return h.tk.Take(ctx, id)
}

// fakeHost is a host whose clock stands still.
type fakeHost struct {
	now time.Time
	takes
}

func (h *fakeHost) Now() time.Time                              { return h.now }
func (h *fakeHost) After(time.Duration) <-chan time.Time        { return nil }
func (h *fakeHost) Self() string                                { return "n1" }
func (h *fakeHost) LiveNodes(context.Context) ([]string, error) { return []string{"n1"}, nil }

// counterNonces hands out 1, 2, 3... in hex.
type counterNonces struct {
	mu sync.Mutex
	n  int
}

func (c *counterNonces) Next() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	return fmt.Sprintf("%x", c.n)
}

// fakeActor is an actor the fake host holds: its committed state in
// memory, every call journaled.
type fakeActor struct {
	p *alarms.Plugin
	j *journal

	id        abi.ActorID
	gen       uint64
	holdValid bool
	uploaded  bool
	bucketHad bool

	alarm        *int64
	meta         map[string]string
	initRecorded bool

	writeMetaErr, uploadErr error
	released                bool
	// lapseOnUpload: the hold lapses while an upload is on its way.
	lapseOnUpload bool
}

func (a *fakeActor) ID() abi.ActorID { return a.id }
func (a *fakeActor) Hold() alarms.Hold {
	return alarms.Hold{Generation: a.gen, Valid: a.holdValid, Uploaded: a.uploaded, BucketHad: a.bucketHad}
}

func (a *fakeActor) State(context.Context) (hostmod.State, error) {
	return hostmod.State{Alarm: a.alarm, Indexed: a.meta[alarmindex.MetaAlarmIndexed], InitRecorded: a.initRecorded}, nil
}

func (a *fakeActor) SetMeta(_ context.Context, key, value string) error {
	a.j.add("META %s=%s", key, value)
	if a.writeMetaErr != nil {
		return a.writeMetaErr
	}
	a.meta[key] = value
	return nil
}

// Upload is the host's upload alone: the plugin brings the index in line
// around it.
func (a *fakeActor) Upload(ctx context.Context) error {
	a.j.add("UPLOAD")
	if a.uploadErr != nil {
		return a.uploadErr
	}
	a.uploaded = true
	if a.lapseOnUpload {
		a.holdValid = false
	}
	return nil
}

func (a *fakeActor) RunAlarm(context.Context) (hostmod.Delivery, error) {
	a.j.add("RUN-ALARM")
	return hostmod.Delivery{Ran: true}, nil
}

func (a *fakeActor) Release(context.Context) {
	a.j.add("RELEASE")
	a.released = true
}

// deliverDue delivers the alarm at at of the actor of key (a TimerKey) as
// the timer loop does, taking the actor with tk.
func (f *fixture) deliverDue(tk taking, key string, at int64) alarms.Delivery {
	f.host.tk = tk
	return f.p.DeliverDue(context.Background(), key, at)
}

// fixture is a plugin on an in-memory bucket with a fake host.
type fixture struct {
	mem   *bucket.Mem
	j     *journal
	host  *fakeHost
	timer *sweeper.Timer
	p     *alarms.Plugin
	del   *bucket.Deleter // the plugin's, sending only on FlushDeletes
}

const retryMax = 5 * time.Minute

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{mem: bucket.NewMem(), j: &journal{}, host: &fakeHost{now: time.UnixMilli(1_800_000_000_000)}, timer: sweeper.NewTimer(retryMax)}
	b := journaled{Bucket: f.mem, j: f.j}
	f.del = bucket.NewDeleter(b, time.Hour, nil)
	p, err := alarms.Register(alarms.Config{
		Bucket: b, Host: f.host, Timer: f.timer,
		Margin: 15 * time.Second, RetryMax: retryMax, Nonces: &counterNonces{},
		// Queued DELETEs go out on FlushDeletes only.
		Deletes: f.del,
	})
	if err != nil {
		t.Fatal(err)
	}
	f.p = p
	return f
}

// actor returns a valid hold of t/c/x at generation gen that has uploaded
// and whose bucket had it.
func (f *fixture) actor(gen uint64) *fakeActor {
	return &fakeActor{
		p: f.p, j: f.j, id: xid,
		gen: gen, holdValid: true, uploaded: true, bucketHad: true,
		meta: map[string]string{}, initRecorded: true,
	}
}

// xid is the actor of the tests.
var xid = abi.ActorID{Tenant: "t", Class: "c", Name: "x"}

// tagged is the key of the actor's entry at due with the given tag.
func tagged(due int64, gen uint64, nonce string) alarmindex.Key {
	return alarmindex.Key{Actor: xid, DueMs: due, Tag: alarmindex.Tag{Generation: gen, Nonce: nonce}}
}

// put stores an entry directly (not journaled).
func (f *fixture) put(t *testing.T, k alarmindex.Key) {
	t.Helper()
	if _, err := f.mem.Put(context.Background(), k.String(), nil, bucket.Cond{}); err != nil {
		t.Fatal(err)
	}
}

// record makes the actor's database name k.
func record(a *fakeActor, k *alarmindex.Key) {
	a.meta[alarmindex.MetaAlarmIndexed] = alarmindex.FormatRecorded(k)
}

func ptr(v int64) *int64 { return &v }

func wantJournal(t *testing.T, got []string, want ...string) {
	t.Helper()
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("requests and calls:\n got  %q\n want %q", got, want)
	}
}

// beforeUpload runs BeforeUpload, the upload and what it returned, as a
// host does, journaling the upload.
func (f *fixture) beforeUpload(t *testing.T, a *fakeActor, kind alarms.UploadKind) error {
	t.Helper()
	after, err := f.p.BeforeUpload(context.Background(), a, kind)
	if err != nil {
		return err
	}
	// A DELETE queued before the upload could leave before it, whatever
	// order the journal shows once the batch is sent.
	if n := f.del.Pending(); n != 0 {
		t.Fatalf("%d DELETEs queued before the upload", n)
	}
	f.j.add("UPLOAD")
	err = after(context.Background())
	f.p.FlushDeletes(context.Background())
	return err
}

const (
	t1 = int64(1_800_000_100_000)
	t2 = int64(1_800_000_200_000)
)

func TestBeforeUploadListsTheAlarmAndRecordsItBeforeTheUploadThenDeletesTheReplacedEntry(t *testing.T) {
	f := newFixture(t)
	a := f.actor(3)
	a.alarm = ptr(t1)
	if err := f.beforeUpload(t, a, alarms.AfterEvent); err != nil {
		t.Fatal(err)
	}
	e1 := tagged(t1, 3, "1")
	wantJournal(t, f.j.take(),
		"PUT-IF-NONE-MATCH "+e1.String(),
		"META alarm_indexed="+alarmindex.FormatRecorded(&e1),
		"UPLOAD")

	a.alarm = ptr(t2)
	if err := f.beforeUpload(t, a, alarms.AfterEvent); err != nil {
		t.Fatal(err)
	}
	e2 := tagged(t2, 3, "2")
	wantJournal(t, f.j.take(),
		"PUT-IF-NONE-MATCH "+e2.String(),
		"META alarm_indexed="+alarmindex.FormatRecorded(&e2),
		"UPLOAD",
		"DELETE-BATCH "+e1.String())

	a.alarm = nil
	if err := f.beforeUpload(t, a, alarms.AfterEvent); err != nil {
		t.Fatal(err)
	}
	wantJournal(t, f.j.take(), "META alarm_indexed=", "UPLOAD", "DELETE-BATCH "+e2.String())
	if keys := f.mem.Keys(); len(keys) != 0 {
		t.Fatalf("bucket holds %v after the alarm was cleared, want nothing", keys)
	}
}

func TestBeforeUploadCostsNothingForAnUnchangedAlarmWhoeverListedIt(t *testing.T) {
	f := newFixture(t)
	a := f.actor(9) // a new owner; generation 2 wrote the entry
	a.alarm = ptr(t1)
	e := tagged(t1, 2, "ab")
	f.put(t, e)
	record(a, &e)
	for _, kind := range []alarms.UploadKind{alarms.AfterEvent, alarms.MidEvent} {
		if err := f.beforeUpload(t, a, kind); err != nil {
			t.Fatal(err)
		}
		wantJournal(t, f.j.take(), "UPLOAD")
	}
}

func TestBeforeUploadReplacesALegacyEntryByATaggedOne(t *testing.T) {
	f := newFixture(t)
	a := f.actor(4)
	a.alarm = ptr(t1)
	legacy := alarmindex.Key{Actor: a.id, DueMs: t1, Legacy: true}
	f.put(t, legacy)
	record(a, &legacy)
	if err := f.beforeUpload(t, a, alarms.AfterEvent); err != nil {
		t.Fatal(err)
	}
	e := tagged(t1, 4, "1")
	wantJournal(t, f.j.take(),
		"PUT-IF-NONE-MATCH "+e.String(),
		"META alarm_indexed="+alarmindex.FormatRecorded(&e),
		"UPLOAD",
		"DELETE-BATCH "+legacy.String())
}

func TestMidEventUploadListsUnderTheReplicasGeneration(t *testing.T) {
	f := newFixture(t)
	a := f.actor(7)
	a.alarm = ptr(t1)
	if err := f.beforeUpload(t, a, alarms.MidEvent); err != nil {
		t.Fatal(err)
	}
	e := tagged(t1, 7, "1")
	wantJournal(t, f.j.take(), "PUT-IF-NONE-MATCH "+e.String(), "META alarm_indexed="+alarmindex.FormatRecorded(&e), "UPLOAD")
}

func TestAFirstUploadListsAFreshEntryAndDeletesNothing(t *testing.T) {
	f := newFixture(t)
	a := f.actor(1)
	a.uploaded, a.bucketHad = false, false
	a.alarm = ptr(t1)
	// The database names an entry from before joining, which this bucket
	// is not trusted to have.
	old := tagged(t1, 5, "99")
	record(a, &old)
	if err := f.beforeUpload(t, a, alarms.FirstUpload); err != nil {
		t.Fatal(err)
	}
	e := tagged(t1, 1, "1")
	wantJournal(t, f.j.take(), "PUT-IF-NONE-MATCH "+e.String(), "META alarm_indexed="+alarmindex.FormatRecorded(&e), "UPLOAD")
}

func TestAnEntryThatAlreadyExistsIsTakenAsListed(t *testing.T) {
	// The retry of a PUT whose first attempt landed answers "precondition
	// failed": the entry exists, which is what the PUT wanted.
	f := newFixture(t)
	a := f.actor(3)
	a.alarm = ptr(t1)
	e := tagged(t1, 3, "1")
	f.put(t, e)
	if err := f.beforeUpload(t, a, alarms.AfterEvent); err != nil {
		t.Fatalf("BeforeUpload: %v; want success when the entry exists", err)
	}
	wantJournal(t, f.j.take(), "PUT-IF-NONE-MATCH "+e.String(), "META alarm_indexed="+alarmindex.FormatRecorded(&e), "UPLOAD")
}

func TestBeforeUploadGivesUp(t *testing.T) {
	errDisk := errors.New("disk full")
	for _, tc := range []struct {
		name  string
		setup func(f *fixture, a *fakeActor)
		want  []string // requests and calls before the error
		cause string   // in the error
	}{{
		name: "the PUT fails",
		setup: func(f *fixture, a *fakeActor) {
			f.mem.Faults = func(op bucket.Op) bucket.Fault { return bucket.Fault{Err: errDisk} }
		},
		want:  []string{"PUT-IF-NONE-MATCH " + tagged(t2, 3, "1").String()},
		cause: "list the alarm in the index",
	}, {
		name:  "recording the entry fails",
		setup: func(f *fixture, a *fakeActor) { a.writeMetaErr = errDisk },
		want:  []string{"PUT-IF-NONE-MATCH " + tagged(t2, 3, "1").String(), "META alarm_indexed=" + alarmindex.FormatRecorded(ptrKey(tagged(t2, 3, "1")))},
		cause: "record the index entry",
	}, {
		name:  "the hold is not valid",
		setup: func(f *fixture, a *fakeActor) { a.holdValid = false },
		cause: "hold is not valid",
	}, {
		name:  "the recorded entry cannot be read",
		setup: func(f *fixture, a *fakeActor) { a.meta[alarmindex.MetaAlarmIndexed] = "not-a-time" },
		cause: "recorded index entry cannot be read",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			a := f.actor(3)
			a.alarm = ptr(t1)
			e := tagged(t1, 2, "ab")
			f.put(t, e)
			record(a, &e)
			a.alarm = ptr(t2)
			tc.setup(f, a)
			err := f.beforeUpload(t, a, alarms.AfterEvent)
			if err == nil {
				t.Fatal("BeforeUpload succeeded")
			}
			if !strings.Contains(err.Error(), a.id.String()) || !strings.Contains(err.Error(), tc.cause) {
				t.Errorf("error %q, want one naming actor %s and %q", err, a.id, tc.cause)
			}
			// Nothing uploaded, nothing deleted: the entry the database
			// names stays.
			wantJournal(t, f.j.take(), tc.want...)
			if _, _, ok := f.mem.Object(e.String()); !ok {
				t.Errorf("the recorded entry %s is gone", e)
			}
		})
	}
}

func ptrKey(k alarmindex.Key) *alarmindex.Key { return &k }

// ---------------------------------------------------------------------
// Deliver.

func TestDeliverRunsTheCommittedAlarm(t *testing.T) {
	f := newFixture(t)
	a := f.actor(3)
	a.alarm = ptr(t1)
	d, err := f.p.Deliver(context.Background(), a, t1)
	if err != nil {
		t.Fatal(err)
	}
	if d.Outcome != alarmindex.OutcomeRun {
		t.Errorf("outcome %v, want run", d.Outcome)
	}
	wantJournal(t, f.j.take(), "RUN-ALARM")
}

func TestDeliverRemovesStaleEntriesButNotTheNamedOneOrANewerOwners(t *testing.T) {
	f := newFixture(t)
	a := f.actor(3)
	a.alarm = ptr(t2)
	named := tagged(t2, 3, "5")
	f.put(t, named)
	record(a, &named)
	old := tagged(t1, 2, "1")   // an earlier owner's, at the delivered time
	mine := tagged(t1, 3, "2")  // this owner's, left by a failed DELETE
	newer := tagged(t1, 4, "3") // a newer owner wrote it (R3)
	for _, k := range []alarmindex.Key{old, mine, newer} {
		f.put(t, k)
	}
	d, err := f.p.Deliver(context.Background(), a, t1)
	if err != nil {
		t.Fatal(err)
	}
	if d.Outcome != alarmindex.OutcomeStale {
		t.Errorf("outcome %v, want stale", d.Outcome)
	}
	prefix := alarmindex.TaggedPrefix(a.id, t1)
	wantJournal(t, f.j.take(), "LIST "+prefix, "DELETE "+old.String(), "DELETE "+mine.String())
	if want := []string{old.String(), mine.String()}; !reflect.DeepEqual(d.Deleted, want) {
		t.Errorf("Deleted %v, want %v", d.Deleted, want)
	}
	for _, k := range []alarmindex.Key{named, newer} {
		if _, _, ok := f.mem.Object(k.String()); !ok {
			t.Errorf("%s was removed", k)
		}
	}
}

func TestDeliverFencesBeforeRemovingWhenThisHoldUploadedNothing(t *testing.T) {
	f := newFixture(t)
	a := f.actor(6)
	a.uploaded = false
	a.alarm = ptr(t2)
	named := tagged(t2, 5, "5")
	f.put(t, named)
	record(a, &named)
	stale := tagged(t1, 5, "1")
	f.put(t, stale)
	if _, err := f.p.Deliver(context.Background(), a, t1); err != nil {
		t.Fatal(err)
	}
	wantJournal(t, f.j.take(),
		"META owner_fence=6", "UPLOAD",
		"LIST "+alarmindex.TaggedPrefix(a.id, t1), "DELETE "+stale.String())
}

func TestDeliverIndexesTheCommittedAlarmBeforeRemovingAnything(t *testing.T) {
	// The committed alarm has no entry (set before the index existed): it
	// is listed and replicated first, and that upload is the fence.
	f := newFixture(t)
	a := f.actor(6)
	a.uploaded = false
	a.alarm = ptr(t2)
	stale := tagged(t1, 5, "1")
	f.put(t, stale)
	if _, err := f.p.Deliver(context.Background(), a, t1); err != nil {
		t.Fatal(err)
	}
	e := tagged(t2, 6, "1")
	wantJournal(t, f.j.take(),
		"PUT-IF-NONE-MATCH "+e.String(), "META alarm_indexed="+alarmindex.FormatRecorded(&e), "UPLOAD",
		"LIST "+alarmindex.TaggedPrefix(a.id, t1), "DELETE "+stale.String())
}

func TestDeliverKeepsAnEntryWhileTheBucketNeverHadTheActor(t *testing.T) {
	f := newFixture(t)
	a := f.actor(2)
	a.uploaded, a.bucketHad, a.initRecorded = false, false, false
	e := tagged(t1, 1, "1")
	f.put(t, e)
	d, err := f.p.Deliver(context.Background(), a, t1)
	if err != nil {
		t.Fatal(err)
	}
	if d.Outcome != alarmindex.OutcomeKeep {
		t.Errorf("outcome %v, want keep", d.Outcome)
	}
	wantJournal(t, f.j.take(), "RELEASE")
	wantRetry := f.host.now.Add(retryMax).UnixMilli()
	if at, ok := f.timer.Get(alarms.TimerKey(a.id)); d.RetryAt != wantRetry || !ok || at != wantRetry {
		t.Errorf("retry at %d, timer holds %d (%v); want both retry_max from now, %d", d.RetryAt, at, ok, wantRetry)
	}
	// A sweep that meets the entry again does not cut retry_max short.
	f.host.now = f.host.now.Add(time.Minute)
	if f.timer.Offer(alarms.TimerKey(a.id), t1, f.host.now.UnixMilli()) {
		t.Error("the timer took the entry's time over the retry")
	}
}

func TestDeliverRemovesTheEntriesOfAnActorWithNoStateWithoutRunningIt(t *testing.T) {
	f := newFixture(t)
	a := f.actor(4)
	a.initRecorded = false // deleted since: a tombstone restored, nothing committed
	e := tagged(t1, 3, "1")
	f.put(t, e)
	d, err := f.p.Deliver(context.Background(), a, t1)
	if err != nil {
		t.Fatal(err)
	}
	if d.Outcome != alarmindex.OutcomeNoState {
		t.Errorf("outcome %v, want no-state", d.Outcome)
	}
	wantJournal(t, f.j.take(), "LIST "+alarmindex.TaggedPrefix(a.id, t1), "DELETE "+e.String())
}

func TestDeliverGivesUpWhenTheListingFailsAndDeletesNothing(t *testing.T) {
	f := newFixture(t)
	a := f.actor(3)
	a.alarm = ptr(t2)
	named := tagged(t2, 3, "5")
	f.put(t, named)
	record(a, &named)
	stale := tagged(t1, 3, "1")
	f.put(t, stale)
	f.mem.Faults = func(op bucket.Op) bucket.Fault {
		if op.Kind == bucket.OpList {
			return bucket.Fault{Err: errors.New("connection reset")}
		}
		return bucket.Fault{}
	}
	d, err := f.p.Deliver(context.Background(), a, t1)
	if err == nil || !strings.Contains(err.Error(), a.id.String()) || !strings.Contains(err.Error(), "list") {
		t.Fatalf("Deliver: %v; want an error naming the actor and the failed listing", err)
	}
	if len(d.Deleted) != 0 {
		t.Errorf("deleted %v", d.Deleted)
	}
	wantJournal(t, f.j.take(), "LIST "+alarmindex.TaggedPrefix(a.id, t1))
	if _, _, ok := f.mem.Object(stale.String()); !ok {
		t.Error("the stale entry was removed though the listing failed")
	}
}

func TestDeliverGivesUpWithoutAValidHold(t *testing.T) {
	f := newFixture(t)
	a := f.actor(3)
	a.holdValid = false
	a.alarm = ptr(t2)
	if _, err := f.p.Deliver(context.Background(), a, t1); !errors.Is(err, alarmindex.ErrGiveUp) {
		t.Fatalf("Deliver: %v, want an error wrapping ErrGiveUp", err)
	}
	wantJournal(t, f.j.take())
}

func TestALegacyEntryASweepOfferedIsDeletedByItsExactName(t *testing.T) {
	f := newFixture(t)
	a := f.actor(3)
	a.alarm = ptr(t2)
	named := tagged(t2, 3, "5")
	f.put(t, named)
	record(a, &named)
	legacy := alarmindex.Key{Actor: a.id, DueMs: t1, Legacy: true}
	beside := tagged(t1, 2, "7")
	f.put(t, legacy)
	f.put(t, beside)
	// The sweep meets both entries at t1 (overdue) and offers the time.
	f.host.now = time.UnixMilli(t1).Add(time.Minute)
	f.p.Sweep(context.Background())
	if at, ok := f.timer.Get(alarms.TimerKey(a.id)); !ok || at != t1 {
		t.Fatalf("the timer holds %d (%v), want the swept time %d", at, ok, t1)
	}
	f.j.take()
	d, err := f.p.Deliver(context.Background(), a, t1)
	if err != nil {
		t.Fatal(err)
	}
	wantJournal(t, f.j.take(),
		"LIST "+alarmindex.TaggedPrefix(a.id, t1),
		"DELETE "+beside.String(), "DELETE "+legacy.String())
	if want := []string{beside.String(), legacy.String()}; !reflect.DeepEqual(d.Deleted, want) {
		t.Errorf("Deleted %v, want %v", d.Deleted, want)
	}
	// A timer delivery of the same time, not from a sweep, does not know
	// of a legacy key and deletes only tagged ones.
	f.put(t, legacy)
	if _, err := f.p.Deliver(context.Background(), a, t1); err != nil {
		t.Fatal(err)
	}
	wantJournal(t, f.j.take(), "LIST "+alarmindex.TaggedPrefix(a.id, t1))
}

func TestTimerKeysRoundTrip(t *testing.T) {
	for _, id := range []abi.ActorID{
		{Tenant: "t", Class: "c", Name: "x"},
		{Tenant: "acme", Class: "room", Name: "a/b c\x00\xff"},
	} {
		got, err := alarms.ParseTimerKey(alarms.TimerKey(id))
		if err != nil || got != id {
			t.Errorf("ParseTimerKey(TimerKey(%q)) = %q, %v", id, got, err)
		}
	}
	for _, bad := range []string{"", "t/c", "t/c/zz"} {
		if _, err := alarms.ParseTimerKey(bad); err == nil {
			t.Errorf("ParseTimerKey(%q) succeeded", bad)
		}
	}
}

func TestRegisterRefusesAnIncompleteConfig(t *testing.T) {
	h := &fakeHost{}
	m := bucket.NewMem()
	tm := sweeper.NewTimer(retryMax)
	for name, cfg := range map[string]alarms.Config{
		"no bucket": {Host: h, Timer: tm, Margin: time.Second},
		"no host":   {Bucket: m, Timer: tm, Margin: time.Second},
		"no timer":  {Bucket: m, Host: h, Margin: time.Second},
		"no margin": {Bucket: m, Host: h, Timer: tm},
	} {
		if _, err := alarms.Register(cfg); err == nil {
			t.Errorf("%s: Register succeeded", name)
		}
	}
}

// The replaced entries' DELETEs are gathered: after each upload the entry
// it replaced is queued, nothing is sent until the deleter's window ends
// (here: FlushDeletes), and then one multi-object request removes them all.
func TestReplacedEntriesAreDeletedTogetherInOneRequest(t *testing.T) {
	f := newFixture(t)
	a := f.actor(3)
	ctx := context.Background()
	var entries []alarmindex.Key
	for i, at := range []int64{t1, t2, t2 + 1000} {
		a.alarm = ptr(at)
		after, err := f.p.BeforeUpload(ctx, a, alarms.AfterEvent)
		if err != nil {
			t.Fatal(err)
		}
		f.j.add("UPLOAD")
		after(ctx)
		entries = append(entries, tagged(at, 3, fmt.Sprint(i+1)))
	}
	for _, line := range f.j.take() {
		if strings.HasPrefix(line, "DELETE") {
			t.Fatalf("%q sent before the window ended", line)
		}
	}
	if keys := f.mem.Keys(); len(keys) != 3 {
		t.Fatalf("bucket holds %q, want the three entries until the DELETEs go", keys)
	}
	f.p.FlushDeletes(ctx)
	wantJournal(t, f.j.take(), "DELETE-BATCH "+entries[0].String()+" "+entries[1].String())
	if keys := f.mem.Keys(); len(keys) != 1 || keys[0] != entries[2].String() {
		t.Fatalf("bucket holds %q, want only %s", keys, entries[2])
	}
}

// A sweep that lists the entry of a time this node just ran, before the
// DELETE the run queued lands, does not offer it again: the delivery
// would take the actor only to find its alarm moved and LIST its entries
// at that time for nothing (in a drain, 2,194 such deliveries beside
// 3,040 firings on one survivor). A node that did not run it offers it.
func TestASweepDoesNotOfferATimeThisNodeJustRan(t *testing.T) {
	for _, ran := range []bool{true, false} {
		t.Run(fmt.Sprintf("ran=%t", ran), func(t *testing.T) {
			ctx := context.Background()
			f := newFixture(t)
			e := tagged(t1, 3, "0a")
			f.put(t, e)
			// A margin (15 s) and a second after it was due: the sweep
			// lists it, and the run was less than a lease period ago.
			f.host.now = time.UnixMilli(t1).Add(16 * time.Second)
			if ran {
				a := f.actor(3)
				a.alarm = ptr(t1)
				if d, err := f.p.Deliver(ctx, a, t1); err != nil || d.Outcome != alarmindex.OutcomeRun {
					t.Fatalf("delivery: %v, %v", d.Outcome, err)
				}
				// The handler cleared the alarm (the fake's state does not
				// change): the timer holds nothing for the actor.
				f.timer.Remove(alarms.TimerKey(xid))
			}
			f.p.Sweep(ctx)
			_, offered := f.timer.Get(alarms.TimerKey(xid))
			if offered == ran {
				t.Fatalf("the sweep offered the entry: %t, want %t", offered, !ran)
			}
		})
	}
}
