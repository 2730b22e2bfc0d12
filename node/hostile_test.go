package node_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/alarms"
	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/alarmindex"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/hostmod"
	"github.com/wasmkeep/alarms/internal/fakeclock"
	"github.com/wasmkeep/alarms/internal/testguest"
	"github.com/wasmkeep/alarms/node"
)

// awaitDeliveries waits for one delivery of each actor a clock advance made
// due, and returns them by actor.
func awaitDeliveries(t *testing.T, n *node.Node, deliveries <-chan node.DeliveryEvent, ids ...abi.ActorID) map[abi.ActorID]node.DeliveryEvent {
	t.Helper()
	got := map[abi.ActorID]node.DeliveryEvent{}
	woken := false
	bound := time.After(20 * time.Second) // a bound for a hung test, not a speed requirement
	for len(got) < len(ids) {
		select {
		case ev := <-deliveries:
			got[ev.Actor] = ev
		case <-time.After(2 * time.Second):
			if woken {
				continue
			}
			// The timer loop may have read the fake clock just before it
			// moved: setting each entry to its time makes it read it again.
			woken = true
			for _, id := range ids {
				if at, ok := n.Timer().Get(alarms.TimerKey(id)); ok {
					n.Timer().Set(alarms.TimerKey(id), at)
				}
			}
		case <-bound:
			t.Fatalf("deliveries after advancing the clock: %d of %d", len(got), len(ids))
		}
	}
	return got
}

// A guest that loops forever, in on-alarm and in on-request, is stopped at
// its deadline each time; its alarm backs off by the committed rule (1 s,
// 2 s, 4 s from each failed attempt), a looping request fails and changes
// nothing, and meanwhile another actor's alarms fire and its requests are
// served.
func TestALoopingGuestAffectsOnlyItself(t *testing.T) {
	ctx := context.Background()
	t0 := time.UnixMilli(1_800_000_000_000)
	clock := fakeclock.New(t0)
	deliveries := make(chan node.DeliveryEvent, 16)
	n := newNode(t, t.TempDir(), map[string][]byte{
		"hostile": testguest.Fixture(t, "hostile"),
		"oneshot": testguest.Fixture(t, "oneshot_alarm"),
	}, node.Config{
		Clock: clock,
		EngineOptions: []engine.Option{
			engine.WithAlarmDeadline(300 * time.Millisecond), engine.WithEventDeadline(300 * time.Millisecond),
			engine.WithBackoff(time.Second, time.Minute)},
		OnDelivery: func(ev node.DeliveryEvent) { deliveries <- ev },
	})
	defer n.Close(ctx)
	n.Start(ctx)
	loop := abi.ActorID{Tenant: "t", Class: "hostile", Name: "loop"}
	other := abi.ActorID{Tenant: "t", Class: "oneshot", Name: "other"}
	ms := func(d time.Duration) int64 { return t0.Add(d).UnixMilli() }
	setOther := func(at int64) {
		t.Helper()
		if _, err := n.Request(ctx, other, binary.LittleEndian.AppendUint64(nil, uint64(at))); err != nil {
			t.Fatalf("the other actor's request: %v", err)
		}
	}
	if _, err := n.Request(ctx, loop, binary.LittleEndian.AppendUint64([]byte("a"), uint64(ms(time.Second)))); err != nil {
		t.Fatal(err)
	}

	at := time.Second // the looping actor's alarm, from t0
	for failures := 1; failures <= 3; failures++ {
		setOther(ms(at))
		clock.Advance(at - clock.Now().Sub(t0))
		got := awaitDeliveries(t, n, deliveries, loop, other)
		l, o := got[loop], got[other]
		if o.Err != nil || !o.Event.Ran || o.Event.Err != nil {
			t.Fatalf("failure %d: the other actor's delivery %+v", failures, o)
		}
		var ge *hostmod.GuestError
		if l.Err != nil || !l.Event.Ran || !errors.As(l.Event.Err, &ge) || !strings.Contains(l.Event.Err.Error(), "deadline") {
			t.Fatalf("failure %d: the looping actor's delivery %+v, want on-alarm stopped at its deadline", failures, l)
		}
		// The retry is committed from the failed attempt's time.
		at += alarmindex.RetryDelay(failures, time.Second, time.Minute)
		s, err := n.State(ctx, loop)
		if err != nil || s.Alarm == nil || *s.Alarm != ms(at) || s.Failures != failures {
			t.Fatalf("after failure %d: %+v %v, want the alarm at +%v with %d failures", failures, s, err, at, failures)
		}
	}
	if at != 8*time.Second {
		t.Fatalf("the alarm at +1s, retried 1 s, 2 s and 4 s after each failure, should end at +8s, not +%v", at)
	}

	// A looping request fails at the event deadline and changes nothing.
	_, err := n.Request(ctx, loop, []byte("l"))
	if err == nil || !strings.Contains(err.Error(), "deadline") || !strings.Contains(err.Error(), loop.String()) {
		t.Fatalf("a looping request: %v, want an error naming the actor and the deadline", err)
	}
	if s, err := n.State(ctx, loop); err != nil || (s.Alarm == nil || *s.Alarm != ms(at)) || s.Failures != 3 {
		t.Fatalf("after the looping request: %+v %v", s, err)
	}
	// The node serves the other actor, and the looping one's next event.
	setOther(ms(time.Hour))
	if r, err := n.Request(ctx, loop, binary.LittleEndian.AppendUint64([]byte("a"), uint64(ms(time.Hour)))); err != nil || binary.LittleEndian.Uint32(r.Response) != 0 {
		t.Fatalf("the looping actor's next request: %v", err)
	}
}

// A guest that needs memory while busy instances hold the node's budget is
// answered 503 with Retry-After (the memory frees when their events end),
// naming the actor and the budget; one that asks for more than the whole
// budget is answered 422, which a retry cannot change.
func TestTheMemoryBudgetOverHTTP(t *testing.T) {
	ctx := context.Background()
	n := newNode(t, t.TempDir(), map[string][]byte{
		"hostile": testguest.Fixture(t, "hostile"),
		"grow":    testguest.Fixture(t, "grow_pages"),
	}, node.Config{EngineOptions: []engine.Option{
		engine.WithMaxTotalMemory(2 << 20), engine.WithEventDeadline(5 * time.Second)}})
	defer n.Close(ctx)
	srv := httptest.NewServer(n.Handler())
	defer srv.Close()
	post := func(name string, pages uint32) (int, http.Header, string) {
		t.Helper()
		resp, err := http.Post(srv.URL+"/v1/actors/t/grow/"+name, "", bytes.NewReader(binary.LittleEndian.AppendUint32(nil, pages)))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	if code, _, body := post("whole", 32); code != http.StatusUnprocessableEntity || !strings.Contains(body, "t/grow/whole") || !strings.Contains(body, "budget of 2 MiB") {
		t.Fatalf("33 pages under a budget of 2 MiB: %d %s, want 422 naming the actor and the budget", code, body)
	}
	// A looping request holds a 17-page instance (1.06 MiB) for up to 5 s.
	looped := make(chan error, 1)
	go func() {
		_, err := n.Request(ctx, abi.ActorID{Tenant: "t", Class: "hostile", Name: "loop"}, []byte("l"))
		looped <- err
	}()
	waitFor(t, "the looping instance to start", func() bool { return n.Memory().InUse >= 17*65536 })
	code, h, body := post("g", 15) // 16 pages: 1 MiB more
	if code != http.StatusServiceUnavailable || h.Get("Retry-After") == "" || !strings.Contains(body, "t/grow/g") || !strings.Contains(body, "budget of 2 MiB") {
		t.Fatalf("growing while a busy instance holds the budget: %d %q %s, want 503 with Retry-After naming the actor and the budget", code, h.Get("Retry-After"), body)
	}
	if err := <-looped; err == nil {
		t.Fatal("the looping request succeeded")
	}
	if code, _, body := post("g", 15); code != http.StatusOK {
		t.Fatalf("the same growth once the looping event ended: %d %s", code, body)
	}
	if m := n.Memory(); m.Peak > m.Budget || m.Refused != 2 {
		t.Fatalf("memory counters %+v: want the peak within the budget and 2 refusals", m)
	}
}
