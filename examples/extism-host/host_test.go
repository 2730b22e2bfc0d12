package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	extism "github.com/extism/go-sdk"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/wasmkeep/alarms"
	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/alarmstest"
	"github.com/wasmkeep/alarms/bucket"
	"github.com/wasmkeep/alarms/hostmod"
	"github.com/wasmkeep/alarms/internal/testguest"
)

// The Extism host passes the plugin's conformance kit (a single node).
func TestConformance(t *testing.T) {
	alarmstest.Run(t, alarmstest.Host{Start: func(t testing.TB, cfg alarmstest.NodeConfig) alarmstest.Node {
		h, err := New(context.Background(), cfg.Bucket, t.TempDir(), alarmstest.Class, alarmstest.Guest,
			[]string{alarmstest.Tenant}, cfg.LeaseTTL+cfg.LeaseGrace, cfg.Sweep, cfg.SweepSafety, cfg.OnDelivery)
		if err != nil {
			t.Fatal(err)
		}
		return kitNode{h}
	}})
}

type kitNode struct{ *Host }

func (k kitNode) Request(ctx context.Context, id abi.ActorID, body []byte) error {
	_, err := k.Host.Request(ctx, id, body)
	return err
}

func (k kitNode) Crash() { _ = k.Close(context.Background()) }

// deliveries records what the plugin's timer delivered.
type deliveries struct {
	mu  sync.Mutex
	got []alarms.Delivery
}

func (d *deliveries) add(x alarms.Delivery) {
	d.mu.Lock()
	d.got = append(d.got, x)
	d.mu.Unlock()
}

// waitRan waits for the n-th delivery that ran on-alarm and returns it;
// 30 s bounds a hung test, it is no speed requirement.
func (d *deliveries) waitRan(t *testing.T, n int) alarms.Delivery {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		d.mu.Lock()
		var ran []alarms.Delivery
		for _, x := range d.got {
			if x.Err == nil && x.Event.Ran {
				ran = append(ran, x)
			}
		}
		d.mu.Unlock()
		if len(ran) >= n {
			return ran[n-1]
		}
	}
	t.Fatalf("timed out waiting for delivery %d", n)
	return alarms.Delivery{}
}

func start(t *testing.T, b bucket.Bucket, dir string, wasm []byte, d *deliveries) *Host {
	t.Helper()
	h, err := New(context.Background(), b, dir, "c", wasm, []string{"t"}, 100*time.Millisecond, 50*time.Millisecond, time.Second, d.add)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// The counter actor, a Go guest built with the repository's SDK, runs
// under Extism: its Go runtime starts (_initialize), its requests count in
// its own table, the alarm it sets from time.Now is real time (GuestConfig's
// wall clock), get-alarm reads it back through the guest's memory, and
// the alarm fires and re-arms itself.
func TestCounterActor(t *testing.T) {
	ctx := context.Background()
	d := &deliveries{}
	h := start(t, bucket.NewMem(), t.TempDir(), testguest.Build(t, testguest.CounterActor), d)
	defer h.Close(ctx)
	id := abi.ActorID{Tenant: "t", Class: "c", Name: "counter"}
	type state struct {
		Requests, Fired int
		Alarm           *int64 `json:"alarm_ms"`
		Interval        int64  `json:"interval_ms"`
	}
	request := func(body string) state {
		t.Helper()
		resp, err := h.Request(ctx, id, []byte(body))
		if err != nil {
			t.Fatalf("%q: %v", body, err)
		}
		var s state
		if err := json.Unmarshal(resp, &s); err != nil {
			t.Fatalf("%q: %q: %v", body, resp, err)
		}
		return s
	}
	before := time.Now().UnixMilli()
	s := request("start 200")
	if s.Requests != 1 || s.Interval != 200 || s.Alarm == nil || *s.Alarm < before+200 || *s.Alarm > time.Now().UnixMilli()+200 {
		t.Fatalf("after start 200: %+v (alarm %v); want the alarm 200 ms from now", s, s.Alarm)
	}
	first := d.waitRan(t, 1)
	if first.Actor != id || first.Event.Err != nil || first.Event.Scheduled != *s.Alarm {
		t.Fatalf("first firing: %+v", first)
	}
	d.waitRan(t, 2) // it re-armed itself
	if s := request("stop"); s.Fired < 2 || s.Alarm != nil {
		t.Fatalf("after two firings and stop: %+v", s)
	}
}

// get-alarm and the host's own imports write into the guest's memory, not
// into Extism's kernel's, which is larger: 8 bytes from 65532 pass the end
// of bad_pointer's one page, and each call answers EFAULT.
func TestGuestMemoryIsTheGuests(t *testing.T) {
	ctx := context.Background()
	h := start(t, bucket.NewMem(), t.TempDir(), testguest.Fixture(t, "bad_pointer"), &deliveries{})
	defer h.Close(ctx)
	resp, err := h.Request(ctx, abi.ActorID{Tenant: "t", Class: "c", Name: "a"}, []byte("a request longer than six bytes"))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp) != 16 {
		t.Fatalf("response %v", resp)
	}
	for i, name := range []string{"get-alarm(65532)", "get-alarm(-1)", "request-read(65530, 100)", "response-write(65530, 100)"} {
		if e := binary.LittleEndian.Uint32(resp[4*i:]); e != uint32(abi.EFAULT) {
			t.Errorf("%s answered %d, want EFAULT", name, e)
		}
	}
}

// A guest whose _initialize calls the alarm functions opens (Extism runs
// no start function: the host runs it, outside any event), and they answer
// EPERM there.
func TestInitializeCallsAnswerEPERM(t *testing.T) {
	ctx := context.Background()
	h := start(t, bucket.NewMem(), t.TempDir(), testguest.Fixture(t, "init_calls"), &deliveries{})
	defer h.Close(ctx)
	resp, err := h.Request(ctx, abi.ActorID{Tenant: "t", Class: "c", Name: "a"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if len(resp) != 12 || binary.LittleEndian.Uint32(resp[4*i:]) != uint32(abi.EPERM) {
			t.Fatalf("the errnos of _initialize's calls: %v, want EPERM three times", resp)
		}
	}
}

// A class without on-alarm, or with a mistyped one, is refused as it
// loads, naming the export and the signature it must have.
func TestGuestCheck(t *testing.T) {
	for _, name := range []string{"missing_on_alarm", "wrong_signature"} {
		_, err := newHost(context.Background(), t.TempDir(), testguest.Fixture(t, name))
		if !errors.Is(err, hostmod.ErrGuestABI) || !strings.Contains(err.Error(), abi.OnAlarmSignature) {
			t.Errorf("%s: %v; want the class refused, naming on-alarm's signature", name, err)
		}
	}
}

// The committed backoff survives the host closing and reopening the
// actor's database: the kit's guest fails its first two runs; the first
// fails on one host; a second host, on the same files and bucket, finds
// the retry through the index and runs it with retry count 1, then the
// third run succeeds and the alarm is gone.
func TestBackoffSurvivesAReopen(t *testing.T) {
	ctx := context.Background()
	b, dir := bucket.NewMem(), t.TempDir()
	id := abi.ActorID{Tenant: "t", Class: "c", Name: "retry"}
	d1 := &deliveries{}
	h := start(t, b, dir, alarmstest.Guest, d1)
	if _, err := h.Request(ctx, id, alarmstest.Body(time.Now().UnixMilli(), 2)); err != nil {
		t.Fatal(err)
	}
	if first := d1.waitRan(t, 1); first.Event.Err == nil || first.Event.RetryCount != 0 || first.Event.Failures != 1 {
		t.Fatalf("first run: %+v", first.Event)
	}
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	d2 := &deliveries{}
	h = start(t, b, dir, alarmstest.Guest, d2)
	defer h.Close(ctx)
	if second := d2.waitRan(t, 1); second.Event.Err == nil || second.Event.RetryCount != 1 || second.Event.Failures != 2 {
		t.Fatalf("the run after the reopen: %+v; want the retry count the first host committed", second.Event)
	}
	if third := d2.waitRan(t, 2); third.Event.Err != nil || third.Event.RetryCount != 2 || third.Event.Alarm != nil {
		t.Fatalf("third run: %+v", third.Event)
	}
}

// A looping on-alarm stops at the delivery's deadline, because the host's
// Extism runtime closes a module whose context is done
// (RuntimeConfig.WithCloseOnContextDone(true)); the run is a failure with
// its retry committed, and the actor's next event gets a new instance.
func TestALoopingHandlerStopsAtItsDeadline(t *testing.T) {
	ctx := context.Background()
	h := start(t, bucket.NewMem(), t.TempDir(), testguest.Fixture(t, "hang_on_alarm"), &deliveries{})
	defer h.Close(ctx)
	id := abi.ActorID{Tenant: "t", Class: "c", Name: "loop"}
	if _, err := h.Request(ctx, id, nil); err != nil { // sets the alarm at 1000 ms: due
		t.Fatal(err)
	}
	h.alarms.stop() // deliver by hand, with a short deadline
	a, err := h.take(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var d hostmod.Delivery
	err = stopped(func() (err error) {
		d, err = a.Table.DeliverAlarm(ctx, id, a.onAlarm, hostmod.DeliverOptions{Deadline: 100 * time.Millisecond})
		return err
	})
	a.mu.Unlock()
	if errors.Is(err, errNotStopped) {
		t.Fatal(err)
	}
	if err != nil || d.Err == nil || !strings.Contains(d.Err.Error(), "deadline") || d.Failures != 1 || d.Alarm == nil {
		t.Fatalf("a looping on-alarm: %+v, %v; want a failure at the deadline and its retry committed", d, err)
	}
	if _, err := h.Request(ctx, id, nil); err != nil {
		t.Fatalf("the event after the stopped run: %v", err)
	}
}

// Extism's other way to make deadlines stop guests: a Manifest.Timeout
// turns on closing modules at a context's deadline for the whole runtime,
// so a deadline shorter than the timeout, such as a delivery's, stops a
// looping export too.
func TestAManifestTimeoutAlsoStopsGuestsAtADeadline(t *testing.T) {
	ctx := context.Background()
	p, err := extism.NewCompiledPlugin(ctx, extism.Manifest{Wasm: []extism.Wasm{extism.WasmData{Data: testguest.Fixture(t, "hang_on_alarm")}}, Timeout: 60_000},
		extism.PluginConfig{RuntimeConfig: wazero.NewRuntimeConfig()}, hostFunctions())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	inst, err := p.Instance(ctx, extism.PluginInstanceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	mod, err := guestOf(inst)
	if err != nil {
		t.Fatal(err)
	}
	dctx, cancel := context.WithTimeout(context.WithValue(ctx, extism.PluginCtxKey("plugin"), inst), 100*time.Millisecond)
	defer cancel()
	err = stopped(func() error {
		_, err := mod.ExportedFunction(abi.ExportOnAlarm).Call(dctx, api.EncodeI64(1000), 0)
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "deadline") {
		t.Fatalf("a looping export under a 100 ms deadline: %v", err)
	}
}

// stopped runs run, which calls a looping guest under a short deadline,
// and returns its error. In a runtime that does not stop guests at a
// deadline, run never returns: after 30 s (a bound for a hung test, not a
// speed requirement) stopped returns errNotStopped, the guest still
// spinning.
func stopped(run func() error) error {
	done := make(chan error, 1)
	go func() { done <- run() }()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		return errNotStopped
	}
}

var errNotStopped = errors.New("the looping guest was not stopped at its deadline: the runtime does not close modules when their context is done")
