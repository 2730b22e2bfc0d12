package engine_test

import (
	"context"
	"encoding/binary"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/hostmod"
	"github.com/wasmkeep/alarms/internal/testguest"
)

// logWriter sends guest output to the test log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// clock is a settable clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After is never called: the host module and the engine wait on no clock.
func (c *clock) After(d time.Duration) <-chan time.Time { return time.After(d) }

func (c *clock) Set(ms int64) {
	c.mu.Lock()
	c.now = time.UnixMilli(ms)
	c.mu.Unlock()
}

const t0 = 1_800_000_000_000 // a fixed "now" in Unix ms

type env struct {
	t     *testing.T
	ctx   context.Context
	clock *clock
	eng   *engine.Engine
	dir   string
}

func newEnv(t *testing.T, opts ...engine.Option) *env {
	t.Helper()
	c := &clock{now: time.UnixMilli(t0)}
	ctx := context.Background()
	eng, err := engine.NewEngine(ctx, append([]engine.Option{engine.WithClock(c), engine.WithGuestOutput(logWriter{t}, logWriter{t})}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close(ctx) })
	return &env{t: t, ctx: ctx, clock: c, eng: eng, dir: t.TempDir()}
}

func (e *env) class(name string, wasm []byte) *engine.Class {
	e.t.Helper()
	c, err := e.eng.Compile(e.ctx, name, wasm)
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

func (e *env) scripted() *engine.Class {
	return e.class("scripted", testguest.Build(e.t, "testdata/guests/scripted"))
}

func (e *env) open(c *engine.Class, name string) *engine.Actor {
	e.t.Helper()
	id := abi.ActorID{Tenant: "t1", Class: c.Name, Name: name}
	a, err := e.eng.Open(e.ctx, id, c, filepath.Join(e.dir, name+".db"))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { a.Close(e.ctx) })
	return a
}

func (e *env) req(a *engine.Actor, body string) string {
	e.t.Helper()
	r, err := a.Request(e.ctx, []byte(body))
	if err != nil {
		e.t.Fatalf("request %q: %v", body, err)
	}
	return string(r.Response)
}

func (e *env) state(a *engine.Actor) hostmod.State {
	e.t.Helper()
	s, err := a.State(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

func (e *env) deliver(a *engine.Actor) hostmod.Delivery {
	e.t.Helper()
	d, err := a.DeliverAlarm(e.ctx)
	if err != nil {
		e.t.Fatalf("deliver: %v", err)
	}
	return d
}

func errnos(b []byte) []uint32 {
	var out []uint32
	for len(b) >= 4 {
		out = append(out, binary.LittleEndian.Uint32(b))
		b = b[4:]
	}
	return out
}

func eq(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestSetGetClearCommitWithTheEvent(t *testing.T) {
	e := newEnv(t)
	a := e.open(e.scripted(), "a")
	if got := e.req(a, "get"); got != "none" {
		t.Fatalf("get on a new actor = %q, want none", got)
	}
	r, err := a.Request(e.ctx, []byte("set 1800000005000"))
	if err != nil || !r.AlarmChanged || r.Alarm == nil || *r.Alarm != t0+5000 {
		t.Fatalf("set: result %+v err %v", r, err)
	}
	if got := e.req(a, "get"); got != "1800000005000" {
		t.Fatalf("get = %q", got)
	}
	r, _ = a.Request(e.ctx, []byte("get"))
	if r.AlarmChanged {
		t.Fatal("an event that leaves the alarm alone reports it changed")
	}
	e.req(a, "clear")
	if s := e.state(a); s.Alarm != nil {
		t.Fatalf("after clear the alarm is still %d", *s.Alarm)
	}
}

func TestAFailedEventRollsBackItsAlarmAndData(t *testing.T) {
	e := newEnv(t)
	a := e.open(e.class("trap_on_request", testguest.Fixture(t, "trap_on_request")), "a")
	_, err := a.Request(e.ctx, nil)
	var ge *hostmod.GuestError
	if !errors.As(err, &ge) || ge.Export != abi.ExportOnRequest || !strings.Contains(err.Error(), "t1/trap_on_request/a") {
		t.Fatalf("trap in on-request: err %v, want a GuestError naming the actor", err)
	}
	if s := e.state(a); s.Alarm != nil {
		t.Fatalf("the trapped event's set-alarm(%d) was committed", *s.Alarm)
	}

	s := e.open(e.scripted(), "s")
	e.req(s, "put x before")
	if _, err := s.Request(e.ctx, []byte("fail")); err == nil {
		t.Fatal("a failing on-request reported success")
	}
	if got := e.req(s, "getkv x"); got != "before" {
		t.Fatalf("the failed event's write committed: x = %q", got)
	}
}

func TestGuestDataCannotReachHostTables(t *testing.T) {
	e := newEnv(t)
	a := e.open(e.scripted(), "a")
	e.req(a, "set 1800000005000")
	for _, k := range []string{"_wasmkeep_alarm", "_wasmkeep_meta", "alarm_failures", "alarm_indexed"} {
		e.req(a, "put "+k+" 1")
	}
	s := e.state(a)
	if s.Alarm == nil || *s.Alarm != t0+5000 || s.Failures != 0 {
		t.Fatalf("guest KV writes changed the host's state: %+v", s)
	}
	err := a.Lock(func(st *engine.Store) error {
		v, ok, err := st.Meta(hostmod.MetaAlarmIndexed)
		if err != nil || ok {
			t.Fatalf("meta alarm_indexed = %q %v %v, want none", v, ok, err)
		}
		v2, ok, err := st.KVGet([]byte("_wasmkeep_alarm"))
		if err != nil || !ok || string(v2) != "1" {
			t.Fatalf("the guest's own key is not in its table: %q %v %v", v2, ok, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestBadPointerGetsEFAULT(t *testing.T) {
	e := newEnv(t)
	a := e.open(e.class("bad_pointer", testguest.Fixture(t, "bad_pointer")), "a")
	got := errnos([]byte(e.req(a, "0123456789")))
	want := []uint32{abi.EFAULT, abi.EFAULT, abi.EFAULT, abi.EFAULT}
	if !eq(got, want) {
		t.Fatalf("errnos %v, want %v", got, want)
	}
	if s := e.state(a); s.Alarm == nil || *s.Alarm != 5000 {
		t.Fatalf("the event's valid set-alarm(5000) did not commit: %+v", s)
	}
}

func TestOutOfRangeTimeGetsEINVAL(t *testing.T) {
	e := newEnv(t)
	a := e.open(e.class("bad_time", testguest.Fixture(t, "bad_time")), "a")
	got := errnos([]byte(e.req(a, "")))
	want := []uint32{abi.EINVAL, abi.EINVAL, 0, 0}
	if !eq(got, want) {
		t.Fatalf("errnos %v, want %v", got, want)
	}
	if s := e.state(a); s.Alarm == nil || *s.Alarm != 7000 {
		t.Fatalf("committed alarm %+v, want 7000 (the last valid set)", s)
	}
}

func TestImportsFromInitializeGetEPERM(t *testing.T) {
	e := newEnv(t)
	a := e.open(e.class("init_calls", testguest.Fixture(t, "init_calls")), "a")
	got := errnos([]byte(e.req(a, "")))
	want := []uint32{abi.EPERM, abi.EPERM, abi.EPERM}
	if !eq(got, want) {
		t.Fatalf("errnos from _initialize %v, want %v", got, want)
	}
	if s := e.state(a); s.Alarm != nil {
		t.Fatalf("set-alarm from _initialize committed %d", *s.Alarm)
	}
}

func TestGuestsBreakingTheContractAreRefusedAtLoad(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		fixture string
		want    []string
	}{
		{"wrong_signature", []string{"wrong_signature", `"on-alarm"`, abi.OnAlarmSignature}},
		{"missing_on_alarm", []string{"missing_on_alarm", `"on-alarm"`, abi.OnAlarmSignature}},
	} {
		_, err := e.eng.Compile(e.ctx, c.fixture, testguest.Fixture(t, c.fixture))
		if err == nil {
			t.Fatalf("%s: loaded, want refused", c.fixture)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not name %s", c.fixture, err, w)
			}
		}
	}
}

func TestDeliverySuccessClearsTheAlarm(t *testing.T) {
	e := newEnv(t)
	a := e.open(e.scripted(), "a")
	e.req(a, "set 1800000001000")
	if d := e.deliver(a); d.Ran {
		t.Fatal("delivered an alarm that is not due")
	}
	e.clock.Set(t0 + 1000)
	d := e.deliver(a)
	if !d.Ran || d.Err != nil || d.Scheduled != t0+1000 || d.RetryCount != 0 || d.Alarm != nil {
		t.Fatalf("delivery %+v", d)
	}
	if got := e.req(a, "getkv log"); got != "1800000001000:0" {
		t.Fatalf("handler log %q", got)
	}
	if d := e.deliver(a); d.Ran {
		t.Fatal("delivered twice")
	}
}

func TestDeliveryKeepsAnAlarmTheHandlerSet(t *testing.T) {
	e := newEnv(t)
	a := e.open(e.scripted(), "a")
	e.req(a, "mode set:1800000060000")
	e.req(a, "set 1800000000000")
	d := e.deliver(a)
	if !d.Ran || d.Err != nil || d.Alarm == nil || *d.Alarm != t0+60_000 || d.Failures != 0 {
		t.Fatalf("delivery %+v, want the handler's alarm at +60s", d)
	}
}

// TestCommittedBackoff walks a handler that keeps failing through the
// design's schedule (docs/design.md#retries): 1 s doubling to the cap, the count committed and passed
// to the handler, then success resets it.
func TestCommittedBackoff(t *testing.T) {
	e := newEnv(t, engine.WithBackoff(time.Second, 8*time.Second))
	a := e.open(e.scripted(), "a")
	e.req(a, "mode fail")
	e.req(a, "set 1800000000000")
	now := int64(t0)
	for i, wantDelay := range []int64{1000, 2000, 4000, 8000, 8000} {
		d := e.deliver(a)
		if !d.Ran || d.Err == nil || d.RetryCount != i {
			t.Fatalf("attempt %d: %+v, want a failed run with retry count %d", i, d, i)
		}
		if d.Alarm == nil || *d.Alarm != now+wantDelay || d.Failures != i+1 {
			t.Fatalf("attempt %d: %+v, want the next attempt at +%d and %d failures", i, d, wantDelay, i+1)
		}
		if got := e.req(a, "get"); got != itoa(*d.Alarm) {
			t.Fatalf("get-alarm during retries = %s, want the next attempt %d", got, *d.Alarm)
		}
		e.clock.Set(now + wantDelay - 1)
		if d := e.deliver(a); d.Ran {
			t.Fatalf("attempt %d ran before its committed retry time", i+1)
		}
		now += wantDelay
		e.clock.Set(now)
	}
	e.req(a, "mode ok")
	d := e.deliver(a)
	if !d.Ran || d.Err != nil || d.RetryCount != 5 || d.Alarm != nil || d.Failures != 0 {
		t.Fatalf("final success %+v", d)
	}
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

func TestFailedHandlerThatReschedules(t *testing.T) {
	cases := []struct {
		name         string
		mode         string
		wantAlarm    int64 // 0: none
		wantFailures int
	}{
		{"set for now, then fail: moves to the retry time", "set:1800000000000,fail", t0 + 1000, 1},
		{"set in the past, then fail: moves to the retry time", "set:5,fail", t0 + 1000, 1},
		{"set later than the retry, then fail: stands", "set:1800000600000,fail", t0 + 600_000, 1},
		{"clear, then fail: the clear stands", "clear,fail", 0, 0},
		{"trap: retried", "panic", t0 + 1000, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			a := e.open(e.scripted(), "a")
			e.req(a, "mode "+c.mode)
			e.req(a, "set 1800000000000")
			d := e.deliver(a)
			if !d.Ran || d.Err == nil {
				t.Fatalf("delivery %+v, want a failed run", d)
			}
			s := e.state(a)
			if c.wantAlarm == 0 {
				if s.Alarm != nil {
					t.Fatalf("alarm %d stands, want none", *s.Alarm)
				}
			} else if s.Alarm == nil || *s.Alarm != c.wantAlarm {
				t.Fatalf("alarm %+v, want %d", s, c.wantAlarm)
			}
			if s.Failures != c.wantFailures {
				t.Fatalf("failures %d, want %d", s.Failures, c.wantFailures)
			}
		})
	}
}

func TestSettingOutsideAFailedRunResetsTheCount(t *testing.T) {
	e := newEnv(t)
	a := e.open(e.scripted(), "a")
	e.req(a, "mode fail")
	e.req(a, "set 1800000000000")
	e.deliver(a)
	e.clock.Set(t0 + 1000)
	e.deliver(a)
	if s := e.state(a); s.Failures != 2 {
		t.Fatalf("failures %d, want 2", s.Failures)
	}
	e.req(a, "set 1800000100000")
	if s := e.state(a); s.Failures != 0 || (s.Alarm == nil || *s.Alarm != t0+100_000) {
		t.Fatalf("after a set outside a failed run: %+v, want count 0", s)
	}
}

func TestBackoffSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	c := &clock{now: time.UnixMilli(t0)}
	wasm := testguest.Build(t, "testdata/guests/scripted")
	id := abi.ActorID{Tenant: "t1", Class: "scripted", Name: "a"}
	path := filepath.Join(dir, "a.db")
	open := func() (*engine.Engine, *engine.Actor) {
		eng, err := engine.NewEngine(ctx, engine.WithClock(c))
		if err != nil {
			t.Fatal(err)
		}
		cl, err := eng.Compile(ctx, "scripted", wasm)
		if err != nil {
			t.Fatal(err)
		}
		a, err := eng.Open(ctx, id, cl, path)
		if err != nil {
			t.Fatal(err)
		}
		return eng, a
	}
	eng, a := open()
	if _, err := a.Request(ctx, []byte("mode fail")); err != nil {
		t.Fatal(err)
	}
	a.Request(ctx, []byte("set 1800000000000"))
	for i := 0; i < 3; i++ { // failures at +0, +1s, +3s: next at +7s, count 3
		d, err := a.DeliverAlarm(ctx)
		if err != nil || !d.Ran {
			t.Fatal(d, err)
		}
		c.Set(*d.Alarm)
	}
	committed, _ := a.State(ctx)
	a.Close(ctx)
	eng.Close(ctx)
	if (committed.Alarm == nil || *committed.Alarm != t0+7000) || committed.Failures != 3 {
		t.Fatalf("before restart: %+v", committed)
	}

	c.Set(t0 + 6999)
	eng, a = open()
	defer eng.Close(ctx)
	defer a.Close(ctx)
	if d, _ := a.DeliverAlarm(ctx); d.Ran {
		t.Fatal("after restart an attempt ran before the committed retry time")
	}
	a.Request(ctx, []byte("mode ok"))
	c.Set(t0 + 7000)
	d, err := a.DeliverAlarm(ctx)
	if err != nil || !d.Ran || d.Scheduled != t0+7000 || d.RetryCount != 3 {
		t.Fatalf("after restart: %+v %v, want scheduled +7000 with retry count 3", d, err)
	}
}

func TestFailingHandlersDoNotHarmTheHost(t *testing.T) {
	e := newEnv(t, engine.WithAlarmDeadline(300*time.Millisecond))
	for _, fx := range []string{"trap_on_alarm", "fail_on_alarm", "hang_on_alarm"} {
		t.Run(fx, func(t *testing.T) {
			a := e.open(e.class(fx, testguest.Fixture(t, fx)), fx)
			e.req(a, "")
			d := e.deliver(a)
			var ge *hostmod.GuestError
			if !d.Ran || !errors.As(d.Err, &ge) || ge.Export != abi.ExportOnAlarm {
				t.Fatalf("delivery %+v, want a failed on-alarm", d)
			}
			if fx == "hang_on_alarm" && !strings.Contains(d.Err.Error(), "deadline") {
				t.Fatalf("a hung handler's error does not say deadline: %v", d.Err)
			}
			if d.Alarm == nil || *d.Alarm != t0+1000 || d.Failures != 1 {
				t.Fatalf("committed %+v, want a retry at +1s with count 1", d.Result)
			}
			// The instance was discarded or kept as needed: the actor
			// still serves events.
			if _, err := a.Request(e.ctx, nil); err != nil {
				t.Fatalf("the actor no longer serves requests: %v", err)
			}
			// Another actor is served meanwhile.
			s := e.open(e.scripted(), "other-"+fx)
			if got := e.req(s, "get"); got != "none" {
				t.Fatalf("another actor: %q", got)
			}
		})
	}
}

func TestAGuestCannotGrowPastTheMemoryLimit(t *testing.T) {
	e := newEnv(t, engine.WithMemoryLimit(64<<20))
	a := e.open(e.class("grow_memory", testguest.Fixture(t, "grow_memory")), "a")
	if got := errnos([]byte(e.req(a, ""))); len(got) != 1 || got[0] != 0xffffffff {
		t.Fatalf("memory.grow past a 64 MiB limit returned %v, want -1", got)
	}
	// Within the default limit the same growth succeeds (returns the old size, 1 page).
	e2 := newEnv(t, engine.WithMemoryLimit(1<<30))
	b := e2.open(e2.class("grow_memory", testguest.Fixture(t, "grow_memory")), "b")
	if got := errnos([]byte(e2.req(b, ""))); len(got) != 1 || got[0] != 1 {
		t.Fatalf("memory.grow within a 1 GiB limit returned %v, want 1", got)
	}
}

// An actor opens with the committed state its database holds, a failure
// count with no alarm included; a malformed count fails the open with an
// error that names the actor and the row.
func TestOpenReadsTheCommittedState(t *testing.T) {
	e := newEnv(t)
	c := e.class("oneshot", testguest.Fixture(t, "oneshot_alarm"))
	write := func(name string, f func(*engine.Store) error) string {
		path := filepath.Join(e.dir, name+".db")
		s, err := engine.OpenStore(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := f(s); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		return path
	}
	write("failing", func(s *engine.Store) error { return s.SetFailures(4) })
	if st := e.state(e.open(c, "failing")); st.Alarm != nil || st.Failures != 4 || st.Indexed != "" {
		t.Fatalf("failures without an alarm: state %+v", st)
	}
	write("indexed", func(s *engine.Store) error {
		if err := s.SetAlarm(t0 + 5); err != nil {
			return err
		}
		return s.SetMeta(hostmod.MetaAlarmIndexed, "1800000000005/1-ab")
	})
	if st := e.state(e.open(c, "indexed")); st.Alarm == nil || *st.Alarm != t0+5 || st.Failures != 0 || st.Indexed != "1800000000005/1-ab" {
		t.Fatalf("an indexed alarm: state %+v", st)
	}
	path := write("bad", func(s *engine.Store) error { return s.SetMeta(hostmod.MetaAlarmFailures, "two") })
	id := abi.ActorID{Tenant: "t1", Class: c.Name, Name: "bad"}
	a, err := e.eng.Open(e.ctx, id, c, path)
	if err == nil {
		a.Close(e.ctx)
		t.Fatal("an actor with a malformed failure count opened")
	}
	if msg := err.Error(); !strings.Contains(msg, id.String()) || !strings.Contains(msg, `alarm_failures: malformed value "two"`) {
		t.Fatalf("open error %q, want the actor and the row named", msg)
	}
}

// actor-id gives each actor its own identity, a name with '/' and any
// bytes included, through the real engine and the Go SDK's Self; and its
// errnos: E2BIG for a short buffer (the length written, nothing copied),
// EFAULT for either pointer outside memory, EPERM from _initialize.
func TestActorIDGivesTheActorItsOwnIdentity(t *testing.T) {
	e := newEnv(t)
	scripted := e.scripted()
	open := func(c *engine.Class, name string) *engine.Actor {
		id := abi.ActorID{Tenant: "t1", Class: c.Name, Name: name}
		a, err := e.eng.Open(e.ctx, id, c, filepath.Join(e.dir, id.Class+"-"+id.NameHex()+".db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close(e.ctx) })
		return a
	}
	for _, name := range []string{"a", "orders/42", "\xff\x00/x", strings.Repeat("n", abi.MaxNameLen)} {
		if got, want := e.req(open(scripted, name), "self"), "t1/scripted/"+name; got != want {
			t.Errorf("actor %q answered self with %q, want %q", name, got, want)
		}
	}

	c := e.class("actor_id", testguest.Fixture(t, "actor_id"))
	name := "orders/42"
	resp := []byte(e.req(open(c, name), ""))
	ident := "t1/actor_id/" + name
	if len(resp) != 24+12+3+len(ident) {
		t.Fatalf("response of %d bytes, want %d: %q", len(resp), 24+12+3+len(ident), resp)
	}
	if got, want := errnos(resp[:24]), []uint32{abi.ESUCCESS, abi.E2BIG, abi.EFAULT, abi.EFAULT, abi.EFAULT, abi.EPERM}; !eq(got, want) {
		t.Errorf("errnos %v, want %v (fits, short, buf outside, out_len_ptr at 65533, at 0xffffffff, from _initialize)", got, want)
	}
	n := uint32(len(ident))
	if got := errnos(resp[24:36]); !eq(got, []uint32{n, n, n}) {
		t.Errorf("lengths written %v, want %d each (a short buffer and a bad buf still get the length)", got, n)
	}
	if string(resp[36:39]) != "\x00\x00\x00" {
		t.Errorf("a buffer too short got %q, want nothing copied", resp[36:39])
	}
	if got := string(resp[39:]); got != ident {
		t.Errorf("identity %q, want %q", got, ident)
	}
}
