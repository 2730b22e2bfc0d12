package node_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/wasmkeep/alarms"
	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/internal/fakeclock"
	"github.com/wasmkeep/alarms/internal/testguest"
	"github.com/wasmkeep/alarms/node"
)

// TestCounterInEveryLanguage runs one scenario against the counter actor in
// Go, Rust and AssemblyScript on a node with a fake clock: the same requests
// must give the same answers, byte for byte, and the alarm must behave the
// same (fire and re-arm, skip missed firings when late, back off while the
// handler fails, keep the committed retry across a restart, stop).
func TestCounterInEveryLanguage(t *testing.T) {
	transcripts := map[string][]string{}
	for _, lang := range testguest.Languages {
		t.Run(lang, func(t *testing.T) {
			transcripts[lang] = counterScenario(t, testguest.Counter(t, lang))
		})
	}
	want := transcripts["go"]
	for _, lang := range testguest.Languages[1:] {
		got, ok := transcripts[lang]
		if !ok || want == nil {
			continue // skipped or already failed
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("the %s counter's transcript differs from the Go one's:\n%s\nwant\n%s",
				lang, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}

// counterScenario runs the scenario and returns its transcript: each
// request with its answer or "error", and each delivery and committed state.
func counterScenario(t *testing.T, wasm []byte) []string {
	ctx := context.Background()
	t0 := time.UnixMilli(1_767_225_600_000).UTC() // 2026-01-01T00:00:00Z
	clock := fakeclock.New(t0)
	ms := func(d time.Duration) int64 { return t0.Add(d).UnixMilli() }
	dir := t.TempDir()
	id := abi.ActorID{Tenant: "t", Class: "counter", Name: "c1"}
	deliveries := make(chan node.DeliveryEvent, 16)
	start := func() *node.Node {
		n := newNode(t, dir, map[string][]byte{"counter": wasm}, node.Config{
			Clock:      clock,
			OnDelivery: func(ev node.DeliveryEvent) { deliveries <- ev },
		})
		n.Start(ctx)
		return n
	}
	var transcript []string
	n := start()
	defer func() { n.Close(ctx) }()

	request := func(req, want string) {
		t.Helper()
		r, err := n.Request(ctx, id, []byte(req))
		got := "error"
		if err == nil {
			got = string(r.Response)
		}
		transcript = append(transcript, fmt.Sprintf("%q -> %s", req, got))
		if got != want {
			t.Fatalf("request %q: got %s (%v), want %s", req, got, err, want)
		}
	}
	answer := func(requests, fired int, alarm *int64, interval int64) string {
		a := "null"
		if alarm != nil {
			a = fmt.Sprint(*alarm)
		}
		return fmt.Sprintf(`{"requests":%d,"fired":%d,"alarm_ms":%s,"interval_ms":%d}`, requests, fired, a, interval)
	}
	at := func(d time.Duration) *int64 { v := ms(d); return &v }
	// advance moves the clock and waits for the delivery it makes due.
	advance := func(d time.Duration, wantOK bool) {
		t.Helper()
		clock.Advance(d)
		ev := awaitDelivery(t, n, id, deliveries)
		dl := ev.Event
		transcript = append(transcript, fmt.Sprintf("delivery at +%v: ran %v scheduled %d retry %d failed %v",
			clock.Now().Sub(t0), dl.Ran, dl.Scheduled-t0.UnixMilli(), dl.RetryCount, dl.Err != nil))
		if ev.Err != nil || !dl.Ran || (dl.Err == nil) != wantOK {
			t.Fatalf("delivery at +%v: %+v, want ran and ok=%v", clock.Now().Sub(t0), ev, wantOK)
		}
	}
	state := func(alarm *int64, failures int) {
		t.Helper()
		s, err := n.State(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		var at int64 // 0 for none, as the transcripts have it
		if s.Alarm != nil {
			at = *s.Alarm
		}
		transcript = append(transcript, fmt.Sprintf("state: alarm %v at %d failures %d", s.Alarm != nil, at-t0.UnixMilli(), s.Failures))
		if (s.Alarm != nil) != (alarm != nil) || (alarm != nil && *s.Alarm != *alarm) || s.Failures != failures {
			t.Fatalf("state %+v, want alarm %v failures %d", s, alarm, failures)
		}
	}
	restart := func(fired string) {
		t.Helper()
		if err := n.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if fired != "" {
			setCounter(t, node.Path(dir, id), "fired", fired)
		}
		n = start()
	}

	request("get", answer(1, 0, nil, 0))
	request("start 1000", answer(2, 0, at(time.Second), 1000))
	for _, bad := range []string{"bogus", "start", "start 0", "start -5", "start 1_000", "start 12x", "start\t1000"} {
		request(bad, "error") // not counted
	}
	request("  get \n", answer(3, 0, at(time.Second), 1000))

	advance(time.Second, true) // fires at +1s and re-arms for +2s
	request("", answer(4, 1, at(2*time.Second), 1000))
	advance(3500*time.Millisecond, true) // at +4.5s, late: re-arms for now + interval
	request("get", answer(5, 2, at(5500*time.Millisecond), 1000))

	// A counter the handler cannot read makes it fail: it backs off, 1 s then
	// 2 s, and the retry is committed, so it survives a restart.
	restart("not a number")
	request("get", "error")
	advance(time.Second, false)
	state(at(6500*time.Millisecond), 1)
	advance(time.Second, false)
	state(at(8500*time.Millisecond), 2)
	restart("2")
	state(at(8500*time.Millisecond), 2)
	advance(2*time.Second, true) // the retry succeeds and re-arms from its own time
	state(at(9500*time.Millisecond), 0)
	request("get", answer(6, 3, at(9500*time.Millisecond), 1000))

	request("stop", answer(7, 3, nil, 0))
	state(nil, 0)
	clock.Advance(10 * time.Second)
	restart("")
	request("get", answer(8, 3, nil, 0))
	select {
	case ev := <-deliveries:
		t.Fatalf("a delivery after stop: %+v", ev)
	default:
	}
	return transcript
}

// awaitDelivery waits for the delivery a clock advance made due.
func awaitDelivery(t *testing.T, n *node.Node, id abi.ActorID, deliveries <-chan node.DeliveryEvent) node.DeliveryEvent {
	t.Helper()
	select {
	case ev := <-deliveries:
		return ev
	case <-time.After(2 * time.Second):
	}
	// fakeclock.Clock.After counts from when it is called: a timer loop that read
	// the clock just before Advance waits a period too long. Waking it
	// (setting its entry to the time it holds) makes it read the clock again.
	key := alarms.TimerKey(id)
	if at, ok := n.Timer().Get(key); ok {
		t.Logf("no delivery yet for actor %s: waking the node timer", id)
		n.Timer().Set(key, at)
	}
	select {
	case ev := <-deliveries:
		return ev
	case <-time.After(20 * time.Second): // a bound for a hung test, not a speed requirement
		t.Fatalf("no delivery for actor %s after advancing the clock", id)
		return node.DeliveryEvent{}
	}
}

// setCounter writes a counter straight into a closed actor's database.
func setCounter(t *testing.T, path, key, value string) {
	t.Helper()
	st, err := engine.OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Begin(); err != nil {
		t.Fatal(err)
	}
	if err := st.KVPut([]byte(key), []byte(value)); err != nil {
		t.Fatal(err)
	}
	if err := st.Commit(); err != nil {
		t.Fatal(err)
	}
}

// TestCExampleActor runs the C example (examples/c-actor, built with clang
// and wasi-libc against abi/wasmkeep.h) on a node: a reminder fires once and
// is counted in the actor's table.
func TestCExampleActor(t *testing.T) {
	ctx := context.Background()
	wasm := testguest.BuildC(t, testguest.ReminderC)
	clock := fakeclock.New(time.UnixMilli(1_767_225_600_000))
	deliveries := make(chan node.DeliveryEvent, 4)
	n := newNode(t, t.TempDir(), map[string][]byte{"reminder": wasm}, node.Config{
		Clock:      clock,
		OnDelivery: func(ev node.DeliveryEvent) { deliveries <- ev },
	})
	defer n.Close(ctx)
	n.Start(ctx)
	id := abi.ActorID{Tenant: "t", Class: "reminder", Name: "r"}
	for _, s := range []struct{ req, want string }{{"get", "0"}, {"in 1000", "ok"}, {"in -1", "error"}, {"bogus", "error"}} {
		r, err := n.Request(ctx, id, []byte(s.req))
		got := "error"
		if err == nil {
			got = string(r.Response)
		}
		if got != s.want {
			t.Fatalf("request %q: got %q (%v), want %q", s.req, got, err, s.want)
		}
	}
	if s, err := n.State(ctx, id); err != nil || s.Alarm == nil || *s.Alarm != clock.Now().UnixMilli()+1000 {
		t.Fatalf("state after in 1000: %+v %v", s, err)
	}
	clock.Advance(time.Second)
	if ev := awaitDelivery(t, n, id, deliveries); ev.Err != nil || !ev.Event.Ran || ev.Event.Err != nil {
		t.Fatalf("delivery: %+v", ev)
	}
	if r, err := n.Request(ctx, id, []byte("get")); err != nil || string(r.Response) != "1" || r.Alarm != nil {
		t.Fatalf("get after the firing: %q %+v %v, want 1 and no alarm", r.Response, r, err)
	}
}
