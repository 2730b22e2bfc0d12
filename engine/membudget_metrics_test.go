package engine_test

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/internal/testguest"
)

// The memory metrics are the engine's memory counters.
func TestEngineMemoryMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := newEnv(t, engine.WithMaxTotalMemory(1<<20), engine.WithRegisterer(reg))
	c := e.class("grow", testguest.Fixture(t, "grow_pages"))
	for _, a := range e.openN(c, 6) {
		if _, err := grow(e.ctx, a, 3); err != nil {
			t.Fatal(err)
		}
	}
	greedy := e.open(c, "greedy")
	if _, err := grow(e.ctx, greedy, 0); err != nil { // its instance starts
		t.Fatal(err)
	}
	before := e.eng.Memory()
	// More than the whole budget: refused without closing anything for it
	// (its own instance, discarded after the trap, frees its one page).
	if _, err := grow(e.ctx, greedy, 20); err == nil {
		t.Fatal("growing one instance past the whole budget succeeded")
	}
	m := e.eng.Memory()
	if m.Closed == 0 || m.Closed != before.Closed || m.Refused != 1 || m.InUse != before.InUse-65536 {
		t.Fatalf("counters %+v, before the refusal %+v: want instances closed before it, none for it, one refusal", m, before)
	}
	want := fmt.Sprintf(`
# HELP wasmkeep_instance_memory_bytes Linear memory the live guest instances hold, in bytes.
# TYPE wasmkeep_instance_memory_bytes gauge
wasmkeep_instance_memory_bytes %d
# HELP wasmkeep_instance_memory_closed_total Idle guest instances closed to make room for another's memory.
# TYPE wasmkeep_instance_memory_closed_total counter
wasmkeep_instance_memory_closed_total %d
# HELP wasmkeep_instance_memory_max_bytes The budget of linear memory for all guest instances together, in bytes.
# TYPE wasmkeep_instance_memory_max_bytes gauge
wasmkeep_instance_memory_max_bytes 1.048576e+06
# HELP wasmkeep_instance_memory_refusals_total Instances not created and memory.grow calls refused: the memory budget was held by busy instances.
# TYPE wasmkeep_instance_memory_refusals_total counter
wasmkeep_instance_memory_refusals_total 1
`, m.InUse, m.Closed)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "wasmkeep_instance_memory_bytes", "wasmkeep_instance_memory_closed_total",
		"wasmkeep_instance_memory_max_bytes", "wasmkeep_instance_memory_refusals_total"); err != nil {
		t.Fatal(err)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Fatalf("metric lint: %v %v", problems, err)
	}
}

// The images mapped into the instances are counted once each, whichever
// class and compile they serve, and the pooled memory is the engine's.
func TestEngineImageMetrics(t *testing.T) {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	eng, err := engine.NewEngine(ctx, engine.WithPreinit("", engine.PreinitAuto), engine.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close(ctx)
	const pages = 20
	for _, c := range []struct {
		class string
		k     byte
	}{{"a", 1}, {"a", 1}, {"b", 1}, {"a", 2}} {
		if _, err := eng.Compile(ctx, c.class, large(c.k, pages)); err != nil {
			t.Fatal(err)
		}
	}
	var want uint64
	if runtime.GOOS == "linux" {
		want = 2 * pages * 65536 // two versions, one image each
	}
	m := eng.Memory()
	if m.Images != want {
		t.Fatalf("Images %d, want %d", m.Images, want)
	}
	// An actor's instance, closed idle, is pooled with the pages it wrote.
	c, err := eng.Compile(ctx, "a", large(1, pages))
	if err != nil {
		t.Fatal(err)
	}
	a, err := eng.Open(ctx, abi.ActorID{Tenant: "t", Class: "a", Name: "x"}, c, filepath.Join(t.TempDir(), "x.db"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Request(ctx, make([]byte, 8)); err != nil {
		t.Fatal(err)
	}
	if n := eng.SleepIdle(eng.Clock().Now().Add(time.Hour)); n != 1 {
		t.Fatalf("%d actors put to sleep, want 1", n)
	}
	defer a.Close(ctx)
	if m = eng.Memory(); runtime.GOOS == "linux" && (m.Pooled == 0 || m.Pooled >= pages*65536) {
		t.Fatalf("Pooled %d after an instance of the image closed: want the pages it wrote", m.Pooled)
	}
	exp := fmt.Sprintf(`
# HELP wasmkeep_instance_memory_image_bytes Memory of the pre-initialised images mapped copy-on-write into the instances, each image once, in bytes: the pages the instances of an image share.
# TYPE wasmkeep_instance_memory_image_bytes gauge
wasmkeep_instance_memory_image_bytes %d
# HELP wasmkeep_instance_memory_pooled_bytes Memory of closed instances kept, zeroed or reset to their pre-initialised image, for the next instances: what it holds of its own, in bytes (counted in the budget).
# TYPE wasmkeep_instance_memory_pooled_bytes gauge
wasmkeep_instance_memory_pooled_bytes %d
`, m.Images, m.Pooled)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(exp), "wasmkeep_instance_memory_image_bytes", "wasmkeep_instance_memory_pooled_bytes"); err != nil {
		t.Fatal(err)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Fatalf("metric lint: %v %v", problems, err)
	}
}
