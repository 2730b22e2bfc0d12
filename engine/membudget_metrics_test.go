package engine_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

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
