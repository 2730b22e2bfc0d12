package engine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/internal/fakeclock"
	"github.com/wasmkeep/alarms/internal/testguest"
)

// BenchmarkCounterGuests runs the same measurements on the counter actor in
// each language (go, rust, as):
//
//   - module-KiB: the module's size;
//   - compile-ms: compiling it with an empty compilation cache;
//   - instantiate-ms: one fresh instance, _initialize included;
//   - mem-KiB/instance: a fresh instance's linear memory (start-up done);
//   - heap-KiB/instance: the host's Go heap per live actor (instance,
//     database, buffers), over 100 actors that each served a request;
//   - rss-KiB/instance: the process's resident memory per live actor,
//     over the same 100 (its heap, its instance's pages of its own, the
//     database's; where the system tells it: Linux);
//   - warm-firings/s: on-alarm deliveries on one actor with a live instance
//     (each re-arms; a fake clock makes the next one due);
//   - cold-firings/s: a delivery on an actor that is not open: open the
//     database, instantiate, deliver and commit, close (over 100 actors).
//
// b.N is the number of warm firings (ns/op is the time of one); the rest
// are fixed counts.
func BenchmarkCounterGuests(b *testing.B) {
	for _, lang := range testguest.Languages {
		b.Run(lang, func(b *testing.B) { benchCounter(b, testguest.Counter(b, lang)) })
	}
}

func benchCounter(b *testing.B, wasm []byte) {
	ctx := context.Background()
	clock := fakeclock.New(time.UnixMilli(1_767_225_600_000))
	// ResetTimer drops metrics reported before it: report them all at the end.
	metrics := map[string]float64{"module-KiB": float64(len(wasm)) / 1024}
	defer func() {
		for unit, v := range metrics {
			b.ReportMetric(v, unit)
		}
	}()

	// Compile, three times, each into a fresh engine with its own cache.
	const compiles = 3
	var compile time.Duration
	for i := 0; i < compiles; i++ {
		eng, err := engine.NewEngine(ctx, engine.WithClock(clock), engine.WithCompilationCache(wazero.NewCompilationCache()))
		if err != nil {
			b.Fatal(err)
		}
		t := time.Now()
		if _, err := eng.Compile(ctx, "counter", wasm); err != nil {
			b.Fatal(err)
		}
		compile += time.Since(t)
		eng.Close(ctx)
	}
	metrics["compile-ms"] = float64(compile.Microseconds()) / 1000 / compiles

	eng, err := engine.NewEngine(ctx, engine.WithClock(clock))
	if err != nil {
		b.Fatal(err)
	}
	defer eng.Close(ctx)
	cl, err := eng.Compile(ctx, "counter", wasm)
	if err != nil {
		b.Fatal(err)
	}

	const instances = 20
	var inst time.Duration
	for i := 0; i < instances; i++ {
		t := time.Now()
		m, err := eng.InstantiateClass(ctx, abi.ActorID{Tenant: "b", Class: "counter", Name: "i"}, cl)
		inst += time.Since(t)
		if err != nil {
			b.Fatal(err)
		}
		m.Close(ctx)
	}
	metrics["instantiate-ms"] = float64(inst.Microseconds()) / 1000 / instances

	m, err := eng.InstantiateClass(ctx, abi.ActorID{Tenant: "b", Class: "counter", Name: "m"}, cl)
	if err != nil {
		b.Fatal(err)
	}
	metrics["mem-KiB/instance"] = float64(m.Memory().Size()) / 1024
	m.Close(ctx)

	// 100 live actors, each started (alarm every ms) and so instantiated.
	dir := b.TempDir()
	const live = 100
	actors := make([]*engine.Actor, live)
	open := func(i int) *engine.Actor {
		a, err := eng.Open(ctx, abi.ActorID{Tenant: "b", Class: "counter", Name: fmt.Sprint(i)}, cl, filepath.Join(dir, fmt.Sprint(i)+".db"))
		if err != nil {
			b.Fatal(err)
		}
		return a
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	rss := residentKiB()
	for i := range actors {
		actors[i] = open(i)
		if _, err := actors[i].Request(ctx, []byte("start 1")); err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	metrics["heap-KiB/instance"] = float64(int64(after.HeapInuse)-int64(before.HeapInuse)) / 1024 / live
	if rss >= 0 {
		metrics["rss-KiB/instance"] = float64(residentKiB()-rss) / live
	}

	// Warm: one actor, b.N firings.
	a := actors[0]
	b.ResetTimer()
	t := time.Now()
	for i := 0; i < b.N; i++ {
		clock.Advance(time.Millisecond)
		d, err := a.DeliverAlarm(ctx)
		if err != nil || !d.Ran || d.Err != nil {
			b.Fatalf("warm firing %d: %+v %v", i, d, err)
		}
	}
	warm := time.Since(t)
	b.StopTimer()
	metrics["warm-firings/s"] = float64(b.N) / warm.Seconds()

	// Cold: close every actor, then fire each once from closed.
	for _, a := range actors {
		a.Close(ctx)
	}
	clock.Advance(time.Second)
	t = time.Now()
	for i := 0; i < live; i++ {
		a := open(i)
		d, err := a.DeliverAlarm(ctx)
		if err != nil || !d.Ran || d.Err != nil {
			b.Fatalf("cold firing %d: %+v %v", i, d, err)
		}
		a.Close(ctx)
	}
	metrics["cold-firings/s"] = live / time.Since(t).Seconds()
}

// residentKiB is the process's resident memory in KiB (VmRSS), or -1
// where /proc/self/status does not tell it.
func residentKiB() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return -1
			}
			return n
		}
	}
	return -1
}
