package engine_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/ncruces/go-sqlite3"

	"github.com/wasmkeep/alarms/abi"
	clocks "github.com/wasmkeep/alarms/clock"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/hostmod"
	"github.com/wasmkeep/alarms/internal/testguest"
)

func benchEngine(b *testing.B, c clocks.Clock) (*engine.Engine, *engine.Class) {
	b.Helper()
	ctx := context.Background()
	eng, err := engine.NewEngine(ctx, engine.WithClock(c))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { eng.Close(ctx) })
	cl, err := eng.Compile(ctx, "bench", testguest.Fixture(b, "bench_alarm"))
	if err != nil {
		b.Fatal(err)
	}
	return eng, cl
}

func openBench(b *testing.B, eng *engine.Engine, cl *engine.Class, dir, name string) *engine.Actor {
	b.Helper()
	ctx := context.Background()
	a, err := eng.Open(ctx, abi.ActorID{Tenant: "b", Class: "bench", Name: name}, cl, filepath.Join(dir, name+".db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { a.Close(ctx) })
	return a
}

func timeReq(ms int64) []byte {
	var req [8]byte
	binary.LittleEndian.PutUint64(req[:], uint64(ms))
	return req[:]
}

// bareUpsert is the same row written the same way with SQLite alone: a
// transaction around one upsert, on a database with the same settings.
type bareUpsert struct {
	conn              *sqlite3.Conn
	begin, st, commit *sqlite3.Stmt
}

func newBareUpsert(b *testing.B, path string) *bareUpsert {
	conn, err := sqlite3.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	// The store's own settings, its WAL's checkpoint threshold and size
	// limit included, so the two differ only by the event.
	if err := conn.Exec(fmt.Sprintf(`PRAGMA locking_mode=EXCLUSIVE; PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;
		PRAGMA wal_autocheckpoint=%d; PRAGMA journal_size_limit=%d;
		CREATE TABLE a (id INTEGER PRIMARY KEY CHECK (id = 1), at_ms INTEGER NOT NULL)`,
		engine.WALCheckpointPages, engine.WALSizeLimit)); err != nil {
		b.Fatal(err)
	}
	u := &bareUpsert{conn: conn}
	// Prepared once, as the store prepares its statements.
	for _, p := range []struct {
		st  **sqlite3.Stmt
		sql string
	}{
		{&u.begin, `BEGIN`},
		{&u.st, `INSERT INTO a (id, at_ms) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET at_ms = excluded.at_ms`},
		{&u.commit, `COMMIT`},
	} {
		if *p.st, _, err = conn.Prepare(p.sql); err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() { u.begin.Close(); u.st.Close(); u.commit.Close(); conn.Close() })
	return u
}

func (u *bareUpsert) do(b *testing.B, ms int64) {
	if err := u.begin.Exec(); err != nil {
		b.Fatal(err)
	}
	u.st.BindInt64(1, ms)
	if err := u.st.Exec(); err != nil {
		b.Fatal(err)
	}
	if err := u.commit.Exec(); err != nil {
		b.Fatal(err)
	}
}

// setAlarmBase is the alarm time the set-alarm benchmarks start from.
const setAlarmBase = 4_000_000_000_000

// setAlarmVsUpsert opens an actor of the bench class, its instance made
// and on-init run, and a bare upsert's database beside it.
func setAlarmVsUpsert(b *testing.B) (*engine.Actor, *bareUpsert) {
	eng, cl := benchEngine(b, clocks.System{})
	dir := b.TempDir()
	a := openBench(b, eng, cl, dir, "a")
	u := newBareUpsert(b, filepath.Join(dir, "bare.db"))
	if _, err := a.Request(context.Background(), timeReq(setAlarmBase)); err != nil {
		b.Fatal(err)
	}
	return a, u
}

// BenchmarkSetAlarmVsUpsert measures one set-alarm from a guest inside an
// event, end to end with its commit, against a bare SQLite upsert of the
// same row, interleaved in the same run; "ratio" is event / upsert by the
// wall clock.
//
// "cpu-ratio" is the same by the CPU time of the thread that runs both
// (cpu-ns/event and cpu-ns/upsert): on a busy machine a time slice lost to
// another process lands more often in the longer of the two, which the CPU
// time does not count. It leaves out what the event makes other threads
// do: wazero's goroutine that watches each call's context, and the idle
// thread the runtime wakes to run it. "all-threads-cpu-ratio" counts that
// too: the CPU time of the whole process during the loop less the thread's
// own, all of it charged to the events (the bare upsert starts no
// goroutine), so it errs against the event (the runtime's own background
// work lands there too).
func BenchmarkSetAlarmVsUpsert(b *testing.B) {
	ctx := context.Background()
	a, u := setAlarmVsUpsert(b)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var evNs, upNs, evCPU, upCPU time.Duration
	b.ResetTimer()
	proc0, thread0 := processCPU(), threadCPU()
	for i := 0; i < b.N; i++ {
		t, c := time.Now(), threadCPU()
		if _, err := a.Request(ctx, timeReq(setAlarmBase+int64(i))); err != nil {
			b.Fatal(err)
		}
		evNs += time.Since(t)
		evCPU += threadCPU() - c
		t, c = time.Now(), threadCPU()
		u.do(b, setAlarmBase+int64(i))
		upNs += time.Since(t)
		upCPU += threadCPU() - c
	}
	others := (processCPU() - proc0) - (threadCPU() - thread0)
	b.ReportMetric(float64(evNs.Nanoseconds())/float64(b.N), "ns/event")
	b.ReportMetric(float64(upNs.Nanoseconds())/float64(b.N), "ns/upsert")
	b.ReportMetric(float64(evNs)/float64(upNs), "ratio")
	if evCPU > 0 && upCPU > 0 {
		b.ReportMetric(float64(evCPU.Nanoseconds())/float64(b.N), "cpu-ns/event")
		b.ReportMetric(float64(upCPU.Nanoseconds())/float64(b.N), "cpu-ns/upsert")
		b.ReportMetric(float64(evCPU)/float64(upCPU), "cpu-ratio")
		if others >= 0 && proc0 > 0 {
			b.ReportMetric(float64(evCPU+others)/float64(upCPU), "all-threads-cpu-ratio")
		}
	}
}

// BenchmarkSetAlarmVsUpsertInBlocks is BenchmarkSetAlarmVsUpsert with the
// two run in turns of 256 rather than one each in turn: each then runs with
// its own code and data in the caches, as a host running only events, or a
// program running only upserts, would. The other threads' CPU time is
// charged to the events' turns only (all-threads-cpu-ratio), where it is
// taken.
func BenchmarkSetAlarmVsUpsertInBlocks(b *testing.B) {
	ctx := context.Background()
	a, u := setAlarmVsUpsert(b)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	const turn = 256
	var evCPU, upCPU, evOthers time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i += turn {
		n := min(turn, b.N-i)
		p, c := processCPU(), threadCPU()
		for j := i; j < i+n; j++ {
			if _, err := a.Request(ctx, timeReq(setAlarmBase+int64(j))); err != nil {
				b.Fatal(err)
			}
		}
		p1, c1 := processCPU(), threadCPU()
		evCPU += c1 - c
		evOthers += (p1 - p) - (c1 - c)
		for j := i; j < i+n; j++ {
			u.do(b, setAlarmBase+int64(j))
		}
		upCPU += threadCPU() - c1
	}
	if evCPU > 0 && upCPU > 0 {
		b.ReportMetric(float64(evCPU.Nanoseconds())/float64(b.N), "cpu-ns/event")
		b.ReportMetric(float64(upCPU.Nanoseconds())/float64(b.N), "cpu-ns/upsert")
		b.ReportMetric(float64(evCPU)/float64(upCPU), "cpu-ratio")
		b.ReportMetric(float64(evCPU+evOthers)/float64(upCPU), "all-threads-cpu-ratio")
	}
}

// BenchmarkDeliveryOneActor measures on-alarm deliveries per second on one
// actor: each delivery reads the committed alarm, runs the handler (which
// sets it again) and commits.
func BenchmarkDeliveryOneActor(b *testing.B) {
	ctx := context.Background()
	eng, cl := benchEngine(b, clocks.System{})
	a := openBench(b, eng, cl, b.TempDir(), "a")
	if _, err := a.Request(ctx, timeReq(1000)); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	t := time.Now()
	for i := 0; i < b.N; i++ {
		d, err := a.DeliverAlarm(ctx)
		if err != nil || !d.Ran || d.Err != nil {
			b.Fatal(d, err)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(t).Seconds(), "deliveries/s")
}

// BenchmarkDelivery1000Actors measures on-alarm deliveries per second
// across 1,000 actors, each with its own database and instance, in turn.
func BenchmarkDelivery1000Actors(b *testing.B) {
	ctx := context.Background()
	eng, cl := benchEngine(b, clocks.System{})
	dir := b.TempDir()
	actors := make([]*engine.Actor, 1000)
	for i := range actors {
		actors[i] = openBench(b, eng, cl, dir, fmt.Sprintf("a%04d", i))
		if _, err := actors[i].Request(ctx, timeReq(1000)); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	t := time.Now()
	for i := 0; i < b.N; i++ {
		d, err := actors[i%len(actors)].DeliverAlarm(ctx)
		if err != nil || !d.Ran || d.Err != nil {
			b.Fatal(d, err)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(t).Seconds(), "deliveries/s")
}

// BenchmarkSetMeta measures recording one meta row in a transaction of its
// own (Actor.SetMeta), as an index updater records the entry of each
// replicated firing.
func BenchmarkSetMeta(b *testing.B) {
	ctx := context.Background()
	eng, cl := benchEngine(b, clocks.System{})
	a := openBench(b, eng, cl, b.TempDir(), "a")
	if _, err := a.Request(ctx, timeReq(1000)); err != nil {
		b.Fatal(err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ReportAllocs()
	b.ResetTimer()
	c := threadCPU()
	for i := 0; i < b.N; i++ {
		if err := a.SetMeta(ctx, hostmod.MetaAlarmIndexed, fmt.Sprintf("entry-%012d", i)); err != nil {
			b.Fatal(err)
		}
	}
	if cpu := threadCPU() - c; cpu > 0 {
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}
