package alarms_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wasmkeep/alarms"
	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/alarmindex"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/hostmod"
	"github.com/wasmkeep/alarms/internal/testguest"
	"github.com/wasmkeep/alarms/sweeper"
)

// A firing run through engine.RunAlarm PUTs the entry for the alarm its
// handler set before the event commits, and records it in the event's own
// transaction. So an index PUT that fails leaves the event uncommitted
// (the alarm still due, the handler's writes gone, nothing uploaded), and
// the next try runs it again; one that succeeds is followed by the upload
// of a state that names the entry, then the DELETE of the one it replaced.
func TestAFiringRecordsItsEntryInTheEventsCommit(t *testing.T) {
	ctx := context.Background()
	const t0 = 1_800_000_000_000
	now := time.UnixMilli(t0)
	mem := bucket.NewMem()
	var failIndexPuts atomic.Bool
	var indexPuts, statePuts atomic.Int64
	mem.Faults = func(op bucket.Op) bucket.Fault {
		if op.Kind != bucket.OpPut {
			return bucket.Fault{}
		}
		if strings.HasPrefix(op.Key, "state/") {
			statePuts.Add(1)
			return bucket.Fault{}
		}
		indexPuts.Add(1)
		if failIndexPuts.Load() {
			return bucket.Fault{Err: errors.New("injected: the index PUT failed")}
		}
		return bucket.Fault{}
	}
	p, err := alarms.Register(alarms.Config{
		Bucket: mem, Host: &fakeHost{now: now}, Timer: sweeper.NewTimer(5 * time.Minute), Margin: 12 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.NewEngine(ctx, engine.WithClock(&fakeHost{now: now}))
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close(ctx)
	class, err := eng.Compile(ctx, "scripted", testguest.Build(t, "testdata/guests/scripted"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := eng.Open(ctx, abi.ActorID{Tenant: "t", Class: "scripted", Name: "a"}, class, filepath.Join(t.TempDir(), "a.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	actor := &exampleActor{Actor: a, p: p, b: mem}
	req := func(body string) string {
		t.Helper()
		r, err := a.Request(ctx, []byte(body))
		if err != nil {
			t.Fatalf("request %q: %v", body, err)
		}
		return string(r.Response)
	}
	req("mode set:1800000060000") // on-alarm moves the alarm a minute on
	req("set 1800000000000")
	if err := p.Replicate(ctx, actor, alarms.AfterEvent); err != nil {
		t.Fatal(err)
	}
	entries := func() []string {
		t.Helper()
		keys, err := mem.List(ctx, alarmindex.TenantPrefix("t"), "", 10)
		if err != nil {
			t.Fatal(err)
		}
		return keys
	}
	first := entries()
	if len(first) != 1 || !strings.Contains(first[0], "1800000000000") {
		t.Fatalf("entries after the first upload: %q", first)
	}

	failIndexPuts.Store(true)
	indexPuts.Store(0)
	statePuts.Store(0)
	if _, err := p.Deliver(ctx, actor, t0); err == nil || !strings.Contains(err.Error(), "t/scripted/a") {
		t.Fatalf("delivery with the index PUT failing: %v, want an error naming the actor", err)
	}
	st, err := a.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Alarm == nil || *st.Alarm != t0 || st.Indexed != alarmindex.FormatRecorded(mustParse(t, first[0])) {
		t.Fatalf("state after the failed index PUT: %+v, want the event rolled back (alarm still due, the first entry recorded)", st)
	}
	if got := req("getkv log"); got != "none" {
		t.Fatalf("handler log %q after the failed index PUT, want the run rolled back", got)
	}
	if indexPuts.Load() == 0 || statePuts.Load() != 0 {
		t.Fatalf("%d index PUTs tried and %d states uploaded, want the PUT tried and nothing uploaded", indexPuts.Load(), statePuts.Load())
	}

	failIndexPuts.Store(false)
	indexPuts.Store(0)
	statePuts.Store(0)
	d, err := p.Deliver(ctx, actor, t0)
	if err != nil || !d.Event.Ran || d.Event.Alarm == nil || *d.Event.Alarm != t0+60_000 {
		t.Fatalf("delivery: %+v, %v", d, err)
	}
	if indexPuts.Load() != 1 || statePuts.Load() != 1 {
		t.Fatalf("%d index PUTs and %d state PUTs for the firing, want 1 and 1", indexPuts.Load(), statePuts.Load())
	}
	p.FlushDeletes(ctx)
	after := entries()
	if len(after) != 1 || !strings.Contains(after[0], "1800000060000") {
		t.Fatalf("entries after the firing: %q, want only the new alarm's", after)
	}
	// The uploaded state names the new entry.
	body, _, err := mem.Get(ctx, "state/"+alarms.TimerKey(actor.ID()))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "uploaded.db")
	if err := os.WriteFile(path, body, 0o600); err != nil {
		t.Fatal(err)
	}
	up, err := engine.OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	named, _, err := up.Meta(hostmod.MetaAlarmIndexed)
	if err != nil {
		t.Fatal(err)
	}
	if named != alarmindex.FormatRecorded(mustParse(t, after[0])) {
		t.Fatalf("the uploaded state names %q, want the new entry %q", named, after[0])
	}
	if got := req("getkv log"); got != "1800000000000:0" {
		t.Fatalf("handler log %q, want one run", got)
	}
}

func mustParse(t *testing.T, key string) *alarmindex.Key {
	t.Helper()
	k, err := alarmindex.ParseKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return &k
}
