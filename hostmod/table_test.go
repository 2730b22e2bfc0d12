package hostmod_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ncruces/go-sqlite3"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/hostmod"
	"github.com/wasmkeep/alarms/internal/testguest"
)

const t0 = 1_800_000_000_000 // a fixed "now" in Unix ms

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

// ownHost is a host that owns everything: its runtime, with a
// wasmkeep:alarm module of its own built from hostmod.AlarmFunctions, one
// instance of host_owned, and one SQLite database opened with its own
// settings (a rollback journal, not the engine's WAL), with a table of its
// own beside the alarm's.
type ownHost struct {
	t    testing.TB
	ctx  context.Context
	r    wazero.Runtime
	mod  api.Module
	conn *sqlite3.Conn
	tbl  *hostmod.Table
	path string
	id   abi.ActorID
}

func newOwnHost(t testing.TB, path string) *ownHost {
	t.Helper()
	ctx := context.Background()
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCloseOnContextDone(true))
	t.Cleanup(func() { r.Close(ctx) })
	if err := hostmod.CheckRuntime(ctx, r); err != nil {
		t.Fatal(err)
	}
	b := r.NewHostModuleBuilder(abi.AlarmModule)
	for _, f := range hostmod.AlarmFunctions() {
		call := f.Call
		b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, m api.Module, stack []uint64) {
			call(ctx, m.Memory(), stack)
		}), f.Params, []api.ValueType{api.ValueTypeI32}).Export(f.Name)
	}
	if _, err := b.Instantiate(ctx); err != nil {
		t.Fatal(err)
	}
	h := &ownHost{t: t, ctx: ctx, r: r, path: path, id: abi.ActorID{Tenant: "t", Class: "own", Name: "a"}}
	h.newInstance()
	h.open()
	return h
}

func (h *ownHost) newInstance() {
	h.t.Helper()
	m, err := h.r.InstantiateWithConfig(h.ctx, testguest.Fixture(h.t, "host_owned"), hostmod.GuestConfig(nil, nil))
	if err != nil {
		h.t.Fatal(err)
	}
	h.mod = m
}

func (h *ownHost) open() {
	h.t.Helper()
	conn, err := sqlite3.Open(h.path)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := conn.Exec(`PRAGMA journal_mode=DELETE; CREATE TABLE IF NOT EXISTS notes (n TEXT)`); err != nil {
		h.t.Fatal(err)
	}
	tbl, err := hostmod.NewTable(conn)
	if err != nil {
		h.t.Fatal(err)
	}
	h.conn, h.tbl = conn, tbl
}

func (h *ownHost) close() {
	h.t.Helper()
	if err := h.tbl.Close(); err != nil {
		h.t.Fatal(err)
	}
	if err := h.conn.Close(); err != nil {
		h.t.Fatal(err)
	}
}

// event runs export with params as an event: the host's own write, then
// the guest, in the host's transaction, committed when the guest returned
// 0 and the event has no error, rolled back otherwise.
func (h *ownHost) event(export string, params ...uint64) (errno uint32, ev *hostmod.Event) {
	h.t.Helper()
	if err := h.conn.Exec(`BEGIN; INSERT INTO notes VALUES ('` + export + `')`); err != nil {
		h.t.Fatal(err)
	}
	ev = h.tbl.NewEvent(h.id)
	res, err := h.mod.ExportedFunction(export).Call(hostmod.WithEvent(h.ctx, ev), params...)
	if err != nil {
		h.t.Fatal(err)
	}
	end := `COMMIT`
	if uint32(res[0]) != 0 || ev.Err() != nil { // an i32 result's upper bits are not defined
		end = `ROLLBACK`
	}
	if err := h.conn.Exec(end); err != nil {
		h.t.Fatal(err)
	}
	return uint32(res[0]), ev
}

func (h *ownHost) state() hostmod.State {
	h.t.Helper()
	st, err := h.tbl.State()
	if err != nil {
		h.t.Fatal(err)
	}
	return st
}

func (h *ownHost) notes() int {
	h.t.Helper()
	st, _, err := h.conn.Prepare(`SELECT count(*) FROM notes`)
	if err != nil {
		h.t.Fatal(err)
	}
	defer st.Close()
	st.Step()
	return st.ColumnInt(0)
}

// A host that owns its runtime, instance and database registers the alarm
// functions in a module of its own: set-alarm, get-alarm and clear-alarm
// answer ABI.md's errnos, at its bounds, and write the alarm into the
// host's own transaction, committed or rolled back with the host's own
// writes.
func TestAlarmFunctionsOnAHostsOwnConnection(t *testing.T) {
	h := newOwnHost(t, filepath.Join(t.TempDir(), "a.db"))
	if e, ev := h.event("get", 0); e != uint32(abi.ENOENT) || ev.Err() != nil {
		t.Fatalf("get-alarm with none set: errno %d, want ENOENT", e)
	}
	for _, c := range []struct {
		at   int64
		want abi.Errno
	}{{-1, abi.EINVAL}, {abi.MaxAlarmMillis + 1, abi.EINVAL}, {abi.MaxAlarmMillis, abi.ESUCCESS}, {t0, abi.ESUCCESS}} {
		e, ev := h.event("set", api.EncodeI64(c.at), 0)
		if e != uint32(c.want) {
			t.Fatalf("set-alarm(%d): errno %d, want %d (%v)", c.at, e, c.want, ev.Err())
		}
		r := ev.Result()
		if c.want != 0 && r.AlarmChanged {
			t.Fatalf("set-alarm(%d) failed but the event says the alarm changed", c.at)
		}
		if c.want == 0 && (!r.AlarmChanged || r.Alarm == nil || *r.Alarm != c.at) {
			t.Fatalf("set-alarm(%d): the event reports %+v", c.at, r)
		}
	}
	if st := h.state(); st.Alarm == nil || *st.Alarm != t0 {
		t.Fatalf("committed alarm %+v, want %d", st, int64(t0))
	}
	if e, _ := h.event("get", 16); e != 0 {
		t.Fatalf("get-alarm(16): errno %d", e)
	}
	if got, ok := h.mod.Memory().ReadUint64Le(16); !ok || int64(got) != t0 {
		t.Fatalf("get-alarm wrote %d at 16, want %d", int64(got), int64(t0))
	}
	for _, ptr := range []uint32{65532, 0xffffffff} {
		if e, _ := h.event("get", uint64(ptr)); e != uint32(abi.EFAULT) {
			t.Fatalf("get-alarm(%#x): errno %d, want EFAULT", ptr, e)
		}
	}
	// A failed event rolls the alarm back with the host's own writes.
	notes := h.notes()
	if e, _ := h.event("set", api.EncodeI64(-5), 0); e == 0 || h.notes() != notes {
		t.Fatalf("a failed event: errno %d, notes %d then %d", e, notes, h.notes())
	}
	if e, ev := h.event("clear"); e != 0 || ev.Err() != nil {
		t.Fatalf("clear-alarm: errno %d, %v", e, ev.Err())
	}
	if st := h.state(); st.Alarm != nil {
		t.Fatalf("the alarm is still set after clear-alarm: %+v", st)
	}
	// With no event in the context, the functions answer EPERM and
	// write nothing (TestAlarmFunctionsWithNoEventAnswerEPERM).
	if res, err := h.mod.ExportedFunction("clear").Call(h.ctx); err != nil || abi.Errno(res[0]) != abi.EPERM {
		t.Fatalf("a call without an event: %v, %v; want EPERM", res, err)
	}
}

// A database failure inside an alarm function answers EIO and fails the
// event: Event.Err says so, and the host rolls back.
func TestAlarmFunctionsReportADatabaseFailure(t *testing.T) {
	h := newOwnHost(t, filepath.Join(t.TempDir(), "a.db"))
	if err := h.conn.Exec(`PRAGMA query_only=1`); err != nil {
		t.Fatal(err)
	}
	h.newInstance()
	if err := h.conn.Exec(`BEGIN`); err != nil {
		t.Fatal(err)
	}
	ev := h.tbl.NewEvent(h.id)
	res, err := h.mod.ExportedFunction("set").Call(hostmod.WithEvent(h.ctx, ev), api.EncodeI64(t0), 0)
	if err != nil || uint32(res[0]) != uint32(abi.EIO) {
		t.Fatalf("set-alarm on a read-only connection: %v, %v; want EIO", res, err)
	}
	if err := ev.Err(); err == nil || !strings.Contains(err.Error(), "t/own/a") {
		t.Fatalf("Event.Err: %v, want the database's error naming the actor", err)
	}
	_ = h.conn.Exec(`ROLLBACK`)
}

// An event needs the host's transaction open: without one, the alarm
// functions answer EPERM and write nothing, and Event.Err says why.
// DeliverAlarm needs no transaction open.
func TestTableTransactionsAreChecked(t *testing.T) {
	h := newOwnHost(t, filepath.Join(t.TempDir(), "a.db"))
	ev := h.tbl.NewEvent(h.id)
	res, err := h.mod.ExportedFunction("set").Call(hostmod.WithEvent(h.ctx, ev), api.EncodeI64(t0), 0)
	if err != nil || uint32(res[0]) != uint32(abi.EPERM) || !errors.Is(ev.Err(), hostmod.ErrNoTransaction) {
		t.Fatalf("set-alarm in an event with no transaction: %v, %v, Err %v", res, err, ev.Err())
	}
	if st := h.state(); st.Alarm != nil {
		t.Fatalf("an event with no transaction wrote the alarm: %+v", st)
	}
	if err := h.conn.Exec(`BEGIN`); err != nil {
		t.Fatal(err)
	}
	if _, err := h.tbl.DeliverAlarm(h.ctx, h.id, h.mod.ExportedFunction(abi.ExportOnAlarm).Call, hostmod.DeliverOptions{}); !errors.Is(err, hostmod.ErrInTransaction) {
		t.Fatalf("DeliverAlarm in a transaction: %v", err)
	}
}

// Delivery on the host's own instance runs ABI.md's committed backoff:
// a failing on-alarm rolls back and commits the retry (1 s, then 2 s),
// which survives the host closing and reopening its database; then a run
// that succeeds clears the alarm and the count. Nothing runs before the
// alarm is due.
func TestDeliveryOnAHostsOwnInstanceBacksOff(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.db")
	h := newOwnHost(t, path)
	c := &clock{now: time.UnixMilli(t0)}
	o := hostmod.DeliverOptions{Clock: c}
	if e, _ := h.event("set", api.EncodeI64(t0+500), 2); e != 0 {
		t.Fatal(e)
	}
	deliver := func() hostmod.Delivery {
		t.Helper()
		d, err := h.tbl.DeliverAlarm(h.ctx, h.id, h.mod.ExportedFunction(abi.ExportOnAlarm).Call, o)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if d := deliver(); d.Ran || d.Alarm == nil || *d.Alarm != t0+500 {
		t.Fatalf("an alarm not yet due: %+v", d)
	}
	c.Set(t0 + 500)
	d := deliver()
	var ge *hostmod.GuestError
	if !d.Ran || !errors.As(d.Err, &ge) || ge.Code != 1 || d.Failures != 1 || (d.Alarm == nil || *d.Alarm != t0+1500) {
		t.Fatalf("first failed run: %+v", d)
	}
	// The host restarts: the backoff is in its database.
	h.close()
	h.open()
	if st := h.state(); st.Failures != 1 || (st.Alarm == nil || *st.Alarm != t0+1500) {
		t.Fatalf("after reopening: %+v", st)
	}
	c.Set(t0 + 1500)
	if d := deliver(); d.Failures != 2 || (d.Alarm == nil || *d.Alarm != t0+3500) || d.RetryCount != 1 || d.Scheduled != t0+1500 {
		t.Fatalf("second failed run: %+v", d)
	}
	c.Set(t0 + 3500)
	if d := deliver(); !d.Ran || d.Err != nil || d.Alarm != nil || d.Failures != 0 || d.RetryCount != 2 {
		t.Fatalf("the run that succeeds: %+v", d)
	}
	if st := h.state(); st.Alarm != nil || st.Failures != 0 {
		t.Fatalf("committed after success: %+v", st)
	}
}

// The last attempt the host allows gives the retries up and keeps the dead
// letter; a handler stopped at the deadline is a failure like any other.
func TestDeliveryOnAHostsOwnInstanceGivesUpAndStopsAtTheDeadline(t *testing.T) {
	h := newOwnHost(t, filepath.Join(t.TempDir(), "a.db"))
	c := &clock{now: time.UnixMilli(t0)}
	if e, _ := h.event("set", api.EncodeI64(t0), 0xffffffff); e != 0 {
		t.Fatal(e)
	}
	o := hostmod.DeliverOptions{Clock: c, Deadline: 50 * time.Millisecond, MaxAttempts: 1}
	d, err := h.tbl.DeliverAlarm(h.ctx, h.id, h.mod.ExportedFunction(abi.ExportOnAlarm).Call, o)
	if err != nil {
		t.Fatal(err)
	}
	if d.Err == nil || !strings.Contains(d.Err.Error(), "deadline") || !d.GaveUp || d.Alarm != nil {
		t.Fatalf("a looping handler with one attempt allowed: %+v", d)
	}
	if !h.mod.IsClosed() {
		t.Fatal("the instance stopped at its deadline is still open")
	}
	dl, ok, err := h.tbl.DeadLetter()
	if err != nil || !ok || dl.Attempts != 1 || dl.Scheduled != t0 {
		t.Fatalf("dead letter %+v, %v, %v", dl, ok, err)
	}
}

// A host's cancelled context is not the guest's failure: nothing commits.
func TestDeliveryCancelledByTheHostCommitsNothing(t *testing.T) {
	h := newOwnHost(t, filepath.Join(t.TempDir(), "a.db"))
	c := &clock{now: time.UnixMilli(t0)}
	if e, _ := h.event("set", api.EncodeI64(t0), 0xffffffff); e != 0 {
		t.Fatal(e)
	}
	ctx, cancel := context.WithTimeout(h.ctx, 50*time.Millisecond)
	defer cancel()
	_, err := h.tbl.DeliverAlarm(ctx, h.id, h.mod.ExportedFunction(abi.ExportOnAlarm).Call, hostmod.DeliverOptions{Clock: c})
	if err == nil {
		t.Fatal("a delivery whose context ended returned no error")
	}
	if st := h.state(); st.Alarm == nil || *st.Alarm != t0 || st.Failures != 0 {
		t.Fatalf("committed after a cancelled delivery: %+v", st)
	}
}

// IsAlarmModule tells the package's own wasmkeep:alarm module, functions
// of the host's added or not, from a foreign module under its name, which
// a host given a runtime refuses.
func TestIsAlarmModule(t *testing.T) {
	ctx := context.Background()
	cfg := wazero.NewRuntimeConfig().WithCloseOnContextDone(true)
	foreign := wazero.NewRuntimeWithConfig(ctx, cfg)
	defer foreign.Close(ctx)
	m, err := foreign.NewHostModuleBuilder(abi.AlarmModule).NewFunctionBuilder().
		WithFunc(func(int64) int32 { return 0 }).Export(abi.FuncSetAlarm).Instantiate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if hostmod.IsAlarmModule(m) {
		t.Fatal("a foreign wasmkeep:alarm module was taken for the package's own")
	}

	own := wazero.NewRuntimeWithConfig(ctx, cfg)
	defer own.Close(ctx)
	alarm := hostmod.NewAlarmModuleBuilder(own)
	alarm.NewFunctionBuilder().WithFunc(func() int32 { return 7 }).Export("host-extra")
	m, err = alarm.Instantiate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !hostmod.IsAlarmModule(m) {
		t.Fatal("the package's own module, with a function of the host's added, was not recognised")
	}
}

// A guest instantiated by a host with GuestConfig sees real time: the Go
// runtime's wall clock comes from the host's clock, not wazero's fixed
// time in 2022.
func TestGuestConfigGivesTheWallClock(t *testing.T) {
	ctx := context.Background()
	r := wazero.NewRuntime(ctx)
	defer r.Close(ctx)
	// clock_time_get of WASI: the wall clock the guest's runtime reads.
	var got [2]int64
	for i, mc := range []wazero.ModuleConfig{wazero.NewModuleConfig(), hostmod.GuestConfig(nil, &clock{now: time.UnixMilli(t0)})} {
		got[i] = wasiWalltime(t, ctx, r, mc)
	}
	if y := time.Unix(0, got[0]).UTC().Year(); y != 2022 {
		t.Fatalf("without GuestConfig the guest's clock reads %d; the test's premise (wazero's fixed 2022) changed", y)
	}
	if got[1] != t0*int64(time.Millisecond) {
		t.Fatalf("with GuestConfig the guest's clock reads %v, want the host's %v", time.Unix(0, got[1]), time.UnixMilli(t0))
	}
}

// wasiWalltime instantiates wall_clock with mc in r and returns what its
// now() read.
func wasiWalltime(t *testing.T, ctx context.Context, r wazero.Runtime, mc wazero.ModuleConfig) int64 {
	t.Helper()
	if r.Module(wasi_snapshot_preview1.ModuleName) == nil {
		wasi_snapshot_preview1.MustInstantiate(ctx, r)
	}
	m, err := r.InstantiateWithConfig(ctx, testguest.Fixture(t, "wall_clock"), mc.WithName(""))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(ctx)
	res, err := m.ExportedFunction("now").Call(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return int64(res[0])
}
