package engine_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/internal/testguest"
)

// The residency metrics follow the engine's counters as actors open and
// sleep under the budget.
func TestEngineMetricsFollowResidency(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := newEnv(t, engine.WithMaxOpenDatabases(3), engine.WithMaxInstances(2), engine.WithRegisterer(reg))
	c := e.class("oneshot", testguest.Fixture(t, "oneshot_alarm"))
	want := func(when, text string) {
		t.Helper()
		names := []string{"wasmkeep_actor_databases_open", "wasmkeep_actor_instances_live", "wasmkeep_actor_databases_max", "wasmkeep_actor_instances_max", "wasmkeep_actors_slept_total"}
		if err := testutil.GatherAndCompare(reg, strings.NewReader(text), names...); err != nil {
			t.Fatalf("%s: %v", when, err)
		}
	}
	want("before any actor", metricsText(0, 0, 0))
	actors := e.openN(c, 5)
	for i, a := range actors {
		if _, err := a.Request(e.ctx, reqAt(t0+int64(i))); err != nil {
			t.Fatal(err)
		}
	}
	// Five actors through a budget of 3 databases: some slept.
	slept := int(e.eng.Residency().Slept)
	if slept == 0 {
		t.Fatal("no actor slept under the budget")
	}
	want("after five events", metricsText(3, 2, slept))
	for _, a := range actors {
		a.Close(e.ctx)
	}
	want("after closing them", metricsText(0, 0, slept))
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Fatalf("metric lint: %v %v", problems, err)
	}
}

func metricsText(dbs, insts, slept int) string {
	return strings.NewReplacer("DBS", strconv.Itoa(dbs), "INSTS", strconv.Itoa(insts), "SLEPT", strconv.Itoa(slept)).Replace(`
# HELP wasmkeep_actor_databases_max The residency budget of actor databases open at once.
# TYPE wasmkeep_actor_databases_max gauge
wasmkeep_actor_databases_max 3
# HELP wasmkeep_actor_databases_open Actor databases open now (counted from before the open until after the close).
# TYPE wasmkeep_actor_databases_open gauge
wasmkeep_actor_databases_open DBS
# HELP wasmkeep_actor_instances_live Guest instances live now.
# TYPE wasmkeep_actor_instances_live gauge
wasmkeep_actor_instances_live INSTS
# HELP wasmkeep_actor_instances_max The residency budget of guest instances live at once.
# TYPE wasmkeep_actor_instances_max gauge
wasmkeep_actor_instances_max 2
# HELP wasmkeep_actors_slept_total Actors put to sleep (instance and database closed) to make room under the residency budget.
# TYPE wasmkeep_actors_slept_total counter
wasmkeep_actors_slept_total SLEPT
`)
}

// Without a registerer an engine registers nothing anywhere (the default
// registry included); two engines with registries of their own do not
// collide; two in one registry are refused with a clear error, unless each
// has a label of its own.
func TestEngineMetricsRegistries(t *testing.T) {
	ctx := context.Background()
	before, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	plain, err := engine.NewEngine(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close(ctx)
	after, _ := prometheus.DefaultGatherer.Gather()
	if len(after) != len(before) {
		t.Fatalf("an engine without a registerer added %d families to the default registry", len(after)-len(before))
	}
	r1, r2 := prometheus.NewRegistry(), prometheus.NewRegistry()
	for _, reg := range []*prometheus.Registry{r1, r2} {
		eng, err := engine.NewEngine(ctx, engine.WithRegisterer(reg), engine.WithMaxOpenDatabases(7))
		if err != nil {
			t.Fatalf("an engine on a registry of its own: %v", err)
		}
		defer eng.Close(ctx)
		if got := gauge(t, reg, "wasmkeep_actor_databases_max"); got != 7 {
			t.Fatalf("databases_max = %v, want 7", got)
		}
	}
	if _, err := engine.NewEngine(ctx, engine.WithRegisterer(r1)); err == nil || !strings.Contains(err.Error(), "registering the engine's metrics") {
		t.Fatalf("a second engine on the same registry: err = %v, want a registration error", err)
	}
	// When the registry refuses the second of the engine's collectors (a
	// gauge of that name is there already), the first leaves again: the
	// failed engine leaves nothing behind.
	r5 := prometheus.NewRegistry()
	r5.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "wasmkeep_instance_memory_bytes", Help: "taken"}))
	if _, err := engine.NewEngine(ctx, engine.WithRegisterer(r5)); err == nil {
		t.Fatal("an engine whose memory gauge is taken registered")
	}
	if n := testutil.CollectAndCount(r5); n != 1 {
		t.Fatalf("%d series in the registry after a failed engine, want the 1 that was there", n)
	}
	// A closed engine's metrics leave the registry, and a new engine (a
	// host restarting its engine in the same process) registers there.
	r4 := prometheus.NewRegistry()
	old, err := engine.NewEngine(ctx, engine.WithRegisterer(r4))
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(r4); n != 0 {
		t.Fatalf("%d series left in the registry by a closed engine, want none", n)
	}
	renewed, err := engine.NewEngine(ctx, engine.WithRegisterer(r4), engine.WithMaxOpenDatabases(9))
	if err != nil {
		t.Fatalf("an engine on the registry of a closed one: %v", err)
	}
	defer renewed.Close(ctx)
	if got := gauge(t, r4, "wasmkeep_actor_databases_max"); got != 9 {
		t.Fatalf("databases_max = %v, want 9", got)
	}
	// Engines that share a registry each get a label of their own.
	r3 := prometheus.NewRegistry()
	for _, name := range []string{"a", "b"} {
		wrapped := prometheus.WrapRegistererWith(prometheus.Labels{"engine": name}, r3)
		eng, err := engine.NewEngine(ctx, engine.WithRegisterer(wrapped))
		if err != nil {
			t.Fatalf("engine %s on a shared registry under a label of its own: %v", name, err)
		}
		defer eng.Close(ctx)
	}
	if n := testutil.CollectAndCount(r3, "wasmkeep_actor_databases_max"); n != 2 {
		t.Fatalf("%d series of databases_max for two labelled engines, want 2", n)
	}
}

// gauge reads the one series of the gauge name in reg.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no single series %s in the registry", name)
	return 0
}
