package bucket_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/bucket"
)

// faultsOn returns a Faults hook that applies f to the requests with these
// sequence numbers and lets the rest through, recording every Op it saw.
func faultsOn(seen *[]bucket.Op, f bucket.Fault, seqs ...uint64) func(bucket.Op) bucket.Fault {
	return func(op bucket.Op) bucket.Fault {
		*seen = append(*seen, op)
		if slices.Contains(seqs, op.Seq) {
			return f
		}
		return bucket.Fault{}
	}
}

func TestMemErrFaultIsNotApplied(t *testing.T) {
	injected := errors.New("injected")
	var seen []bucket.Op
	m := bucket.NewMem()
	m.Faults = faultsOn(&seen, bucket.Fault{Err: injected}, 2, 3)
	var changes []bucket.Op
	m.OnChange = func(op bucket.Op) { changes = append(changes, op) }

	mustPut(t, m, "a", []byte("1"), bucket.Cond{}) // seq 1
	if _, err := m.Put(ctx(t), "a", []byte("2"), bucket.Cond{}); !errors.Is(err, injected) {
		t.Fatalf("faulted PUT: err = %v, want the injected error", err)
	}
	if err := m.Delete(ctx(t), "a"); !errors.Is(err, injected) { // seq 3
		t.Fatalf("faulted DELETE: err = %v, want the injected error", err)
	}
	if body, _, _ := m.Object("a"); string(body) != "1" {
		t.Fatalf("body = %q, want 1: a failed request was applied", body)
	}
	if len(changes) != 1 || changes[0].Seq != 1 {
		t.Fatalf("OnChange saw %+v, want only the first PUT", changes)
	}
	want := []bucket.Op{
		{Seq: 1, Kind: bucket.OpPut, Key: "a", Body: []byte("1")},
		{Seq: 2, Kind: bucket.OpPut, Key: "a", Body: []byte("2")},
		{Seq: 3, Kind: bucket.OpDelete, Key: "a"},
	}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("the hook saw %+v, want %+v", seen, want)
	}
}

func TestMemLatePutLandsAfterTheCallerGaveUp(t *testing.T) {
	var seen []bucket.Op
	m := bucket.NewMem()
	m.Faults = faultsOn(&seen, bucket.Fault{Late: true}, 1)
	var changes []bucket.Op
	m.OnChange = func(op bucket.Op) {
		changes = append(changes, op)
		if !slices.Contains(m.Keys(), op.Key) { // reading from OnChange must not deadlock
			t.Errorf("OnChange for %q runs before the key is visible", op.Key)
		}
	}

	_, err := m.Put(ctx(t), "entry", nil, bucket.Cond{})
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("late PUT: err = %v, want a timeout", err)
	}
	if keys := m.Keys(); len(keys) != 0 {
		t.Fatalf("a late PUT is visible before it lands: %q", keys)
	}
	if late := m.Late(); len(late) != 1 || late[0].Key != "entry" || late[0].Kind != bucket.OpPut {
		t.Fatalf("Late() = %+v, want the held PUT", late)
	}
	if n := m.ApplyLate(); n != 1 {
		t.Fatalf("ApplyLate applied %d, want 1", n)
	}
	if keys := m.Keys(); !slices.Equal(keys, []string{"entry"}) {
		t.Fatalf("keys after ApplyLate = %q", keys)
	}
	if len(changes) != 1 || !changes[0].Late {
		t.Fatalf("OnChange saw %+v, want one late PUT", changes)
	}
	if n := m.ApplyLate(); n != 0 || len(m.Late()) != 0 {
		t.Fatalf("a late operation was applied twice")
	}
}

func TestMemLateDeleteRemovesWhatIsThereWhenItLands(t *testing.T) {
	m := bucket.NewMem()
	var seen []bucket.Op
	m.Faults = faultsOn(&seen, bucket.Fault{Late: true}, 2)
	mustPut(t, m, "old", nil, bucket.Cond{})
	if err := m.Delete(ctx(t), "old"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("late DELETE: err = %v, want a timeout", err)
	}
	// The caller, believing the DELETE failed, moves on; the entry is
	// written again meanwhile.
	mustPut(t, m, "old", []byte("again"), bucket.Cond{})
	mustPut(t, m, "new", nil, bucket.Cond{})
	if err := m.ApplyLateOne(0); err != nil {
		t.Fatalf("ApplyLateOne: %v", err)
	}
	if keys := m.Keys(); !slices.Equal(keys, []string{"new"}) {
		t.Fatalf("keys = %q, want the late DELETE to have removed old", keys)
	}
}

func TestMemLateDeleteBatchLandsKeyByKey(t *testing.T) {
	m := bucket.NewMem()
	var seen []bucket.Op
	m.Faults = faultsOn(&seen, bucket.Fault{Late: true}, 3)
	var changes []bucket.Op
	m.OnChange = func(op bucket.Op) { changes = append(changes, op) }
	mustPut(t, m, "a", nil, bucket.Cond{})
	mustPut(t, m, "b", nil, bucket.Cond{})
	deleted, err := m.DeleteBatch(ctx(t), []string{"a", "b", "c"})
	if !errors.Is(err, context.DeadlineExceeded) || len(deleted) != 0 {
		t.Fatalf("late DELETE-BATCH: %q, %v; want nothing deleted and a timeout", deleted, err)
	}
	if op := seen[2]; op.Kind != bucket.OpDeleteBatch || !slices.Equal(op.Keys, []string{"a", "b", "c"}) {
		t.Fatalf("the fault hook saw %+v, want one DELETE-BATCH of a, b, c", op)
	}
	if keys := m.Keys(); len(keys) != 2 {
		t.Fatalf("a held batch changed the bucket: %q", keys)
	}
	mustPut(t, m, "c", nil, bucket.Cond{})
	changes = nil
	if n := m.ApplyLate(); n != 1 {
		t.Fatalf("ApplyLate applied %d, want 1", n)
	}
	if keys := m.Keys(); len(keys) != 0 {
		t.Fatalf("keys = %q after the late batch landed, want none", keys)
	}
	var got []string
	for _, op := range changes {
		if op.Kind != bucket.OpDeleteBatch || !op.Late {
			t.Fatalf("OnChange got %+v, want late DELETE-BATCH changes", op)
		}
		got = append(got, op.Key)
	}
	if !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("OnChange saw %q removed, want a, b, c in order", got)
	}
}

func TestMemDeleteBatchErrFaultIsNotApplied(t *testing.T) {
	injected := errors.New("injected")
	m := bucket.NewMem()
	var seen []bucket.Op
	m.Faults = faultsOn(&seen, bucket.Fault{Err: injected}, 2)
	mustPut(t, m, "a", nil, bucket.Cond{})
	if _, err := m.DeleteBatch(ctx(t), []string{"a"}); !errors.Is(err, injected) {
		t.Fatalf("faulted DELETE-BATCH: err = %v, want the injected error", err)
	}
	if keys := m.Keys(); !slices.Equal(keys, []string{"a"}) {
		t.Fatalf("a failed batch removed keys: %q", keys)
	}
}

func TestMemLateConditionIsCheckedWhenItLands(t *testing.T) {
	m := bucket.NewMem()
	var seen []bucket.Op
	m.Faults = faultsOn(&seen, bucket.Fault{Late: true}, 1, 2)
	_, err1 := m.Put(ctx(t), "hold", []byte("late-1"), bucket.Cond{IfNoneMatch: true})
	_, err2 := m.Put(ctx(t), "other", []byte("late-2"), bucket.Cond{})
	if err1 == nil || err2 == nil {
		t.Fatal("late PUTs reported success")
	}
	mustPut(t, m, "hold", []byte("winner"), bucket.Cond{IfNoneMatch: true})

	if err := m.ApplyLateOne(5); err == nil {
		t.Fatal("ApplyLateOne out of range succeeded")
	}
	if err := m.ApplyLateOne(0); !errors.Is(err, bucket.ErrPrecondition) {
		t.Fatalf("late If-None-Match PUT on a taken key: err = %v, want ErrPrecondition", err)
	}
	if body, _, _ := m.Object("hold"); string(body) != "winner" {
		t.Fatalf("body = %q, want the winner's", body)
	}
	if late := m.Late(); len(late) != 1 || late[0].Key != "other" {
		t.Fatalf("Late() = %+v, want only the PUT of other", late)
	}
	m.DropLate()
	if n := m.ApplyLate(); n != 0 {
		t.Fatalf("ApplyLate after DropLate applied %d", n)
	}
	if _, _, ok := m.Object("other"); ok {
		t.Fatal("a dropped request landed")
	}
}

func TestMemLateReadsOnlyFail(t *testing.T) {
	m := bucket.NewMem()
	mustPut(t, m, "k", []byte("v"), bucket.Cond{})
	m.Faults = func(op bucket.Op) bucket.Fault {
		return bucket.Fault{Late: op.Kind == bucket.OpGet || op.Kind == bucket.OpList}
	}
	if _, _, err := m.Get(ctx(t), "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("late GET: err = %v", err)
	}
	if _, err := m.List(ctx(t), "", "", 10); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("late LIST: err = %v", err)
	}
	if late := m.Late(); len(late) != 0 {
		t.Fatalf("reads were held: %+v", late)
	}
}

func TestMemDelayUsesTheInjectedSleep(t *testing.T) {
	m := bucket.NewMem()
	var slept []time.Duration
	m.Sleep = func(_ context.Context, d time.Duration) error {
		slept = append(slept, d)
		if d == time.Hour {
			return context.DeadlineExceeded // the caller gives up during the delay
		}
		return nil
	}
	m.Faults = func(op bucket.Op) bucket.Fault {
		switch op.Key {
		case "slow":
			return bucket.Fault{Delay: 3 * time.Second}
		case "stuck":
			return bucket.Fault{Delay: time.Hour}
		}
		return bucket.Fault{}
	}
	mustPut(t, m, "slow", []byte("x"), bucket.Cond{})
	if _, err := m.Put(ctx(t), "stuck", []byte("x"), bucket.Cond{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("PUT whose delay outlived its caller: err = %v", err)
	}
	if keys := m.Keys(); !slices.Equal(keys, []string{"slow"}) {
		t.Fatalf("keys = %q, want only slow", keys)
	}
	if !slices.Equal(slept, []time.Duration{3 * time.Second, time.Hour}) {
		t.Fatalf("slept %v", slept)
	}
}

func TestMemRealDelayStopsWithTheContext(t *testing.T) {
	m := bucket.NewMem()
	m.Faults = func(bucket.Op) bucket.Fault { return bucket.Fault{Delay: time.Hour} }
	c, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := m.Put(c, "k", nil, bucket.Cond{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if len(m.Keys()) != 0 {
		t.Fatal("a cancelled PUT was applied")
	}
}

func TestMemEveryListPageMeetsTheFaultHook(t *testing.T) {
	m := bucket.NewMem()
	keys := make([]string, 2500)
	for i := range keys {
		keys[i] = fmt.Sprintf("k/%04d", i)
	}
	putAll(t, m, keys)
	injected := errors.New("page 3 fails")
	var pages []bucket.Op
	m.Faults = func(op bucket.Op) bucket.Fault {
		pages = append(pages, op)
		if len(pages) == 3 {
			return bucket.Fault{Err: injected}
		}
		return bucket.Fault{}
	}
	before := m.ListPagesSent()
	if got, err := m.List(ctx(t), "k/", "", 3000); !errors.Is(err, injected) || got != nil {
		t.Fatalf("List with a failing third page = %d keys, %v", len(got), err)
	}
	if len(pages) != 3 || pages[1].StartAfter != "k/0999" || pages[2].StartAfter != "k/1999" {
		t.Fatalf("pages seen by the hook: %+v", pages)
	}
	if n := m.ListPagesSent() - before; n != 3 {
		t.Fatalf("ListPagesSent grew by %d, want 3", n)
	}
}

func TestMemETagsTellSameBodyWritesApart(t *testing.T) {
	m := bucket.NewMem()
	e1 := mustPut(t, m, "rec", []byte("same"), bucket.Cond{})
	e2 := mustPut(t, m, "rec", []byte("same"), bucket.Cond{})
	if e1 == e2 {
		t.Fatalf("two writes of the same body share ETag %s", e1)
	}
	if _, err := m.Put(ctx(t), "rec", []byte("same"), bucket.Cond{IfMatch: e1}); !errors.Is(err, bucket.ErrPrecondition) {
		t.Fatalf("If-Match with the first write's ETag: err = %v, want ErrPrecondition", err)
	}
	mustPut(t, m, "rec", []byte("same"), bucket.Cond{IfMatch: e2})
}

func TestMemOnChangeOnlyForChanges(t *testing.T) {
	m := bucket.NewMem()
	n := 0
	m.OnChange = func(bucket.Op) { n++ }
	mustPut(t, m, "a", nil, bucket.Cond{IfNoneMatch: true})
	_, _ = m.Put(ctx(t), "a", nil, bucket.Cond{IfNoneMatch: true}) // fails
	_ = m.Delete(ctx(t), "missing")
	_, _, _ = m.Get(ctx(t), "a")
	_, _ = m.List(ctx(t), "", "", 5)
	_ = m.Delete(ctx(t), "a")
	if n != 2 {
		t.Fatalf("OnChange called %d times, want 2 (the PUT and the DELETE that removed a)", n)
	}
}

// ignoring is a store that drops PUT conditions.
type ignoring struct{ bucket.Bucket }

func (i ignoring) Put(ctx context.Context, key string, body []byte, _ bucket.Cond) (string, error) {
	return i.Bucket.Put(ctx, key, body, bucket.Cond{})
}

func TestCheckConditionalRejectsAStoreThatIgnoresConditions(t *testing.T) {
	m := bucket.NewMem()
	err := bucket.CheckConditional(ctx(t), ignoring{m})
	if err == nil {
		t.Fatal("CheckConditional accepted a store that ignores If-None-Match")
	}
	if keys := m.Keys(); len(keys) != 0 {
		t.Fatalf("the probe was left behind: %q", keys)
	}
	t.Log(err)
}

// TestMemOmitLeavesKeysOutOfListings: a LIST fault with Omit leaves out
// the keys it names from List and ListInfo, across pages, and lists the
// rest; a GET and a HEAD of an omitted key still find it.
func TestMemOmitLeavesKeysOutOfListings(t *testing.T) {
	m := bucket.NewMem()
	var keys []string
	for i := range 2100 {
		keys = append(keys, fmt.Sprintf("o/%05d", i))
	}
	for _, k := range keys {
		if _, err := m.Put(context.Background(), k, []byte("x"), bucket.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	omit := map[string]bool{"o/00000": true, "o/00999": true, "o/01000": true, "o/02099": true}
	m.Faults = func(op bucket.Op) bucket.Fault {
		if op.Kind != bucket.OpList {
			return bucket.Fault{}
		}
		return bucket.Fault{Omit: func(k string) bool { return omit[k] }}
	}
	want := slices.DeleteFunc(slices.Clone(keys), func(k string) bool { return omit[k] })
	got, err := m.List(context.Background(), "o/", "", 5000)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("List = %d keys, %v; want the %d not omitted", len(got), err, len(want))
	}
	infos, err := m.ListInfo(context.Background(), "o/", "", 5000)
	if err != nil || len(infos) != len(want) || infos[0].Key != want[0] {
		t.Fatalf("ListInfo = %d objects, %v; want %d", len(infos), err, len(want))
	}
	if _, _, err := m.Get(context.Background(), "o/00999"); err != nil {
		t.Fatalf("GET of a key a listing left out: %v", err)
	}
	if _, err := m.Head(context.Background(), "o/01000"); err != nil {
		t.Fatalf("HEAD of a key a listing left out: %v", err)
	}
}
