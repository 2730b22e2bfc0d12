package engine_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/engine"
	"github.com/wasmkeep/alarms/guesttest"
	"github.com/wasmkeep/alarms/internal/testguest"
)

// versioned is a module whose _initialize leaves k in a global and at
// address 0 of its memory; value returns the global.
func versioned(k byte) []byte {
	return []byte{
		0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00,
		0x01, 0x08, 0x02, 0x60, 0x00, 0x00, 0x60, 0x00, 0x01, 0x7f, // types: () -> (), () -> i32
		0x03, 0x03, 0x02, 0x00, 0x01, // functions
		0x05, 0x03, 0x01, 0x00, 0x01, // memory: 1 page
		0x06, 0x06, 0x01, 0x7f, 0x01, 0x41, 0x00, 0x0b, // global (mut i32) 0
		0x07, 0x20, 0x03, // exports
		0x06, 'm', 'e', 'm', 'o', 'r', 'y', 0x02, 0x00,
		0x0b, '_', 'i', 'n', 'i', 't', 'i', 'a', 'l', 'i', 'z', 'e', 0x00, 0x00,
		0x05, 'v', 'a', 'l', 'u', 'e', 0x00, 0x01,
		0x0a, 0x14, 0x02, // code
		0x0d, 0x00, 0x41, k, 0x24, 0x00, 0x41, 0x00, 0x41, k, 0x36, 0x02, 0x00, 0x0b,
		0x04, 0x00, 0x23, 0x00, 0x0b,
	}
}

func TestAnImageServesOnlyTheVersionItWasMadeFrom(t *testing.T) {
	ctx := context.Background()
	eng, err := engine.NewEngine(ctx, engine.WithPreinit("", engine.PreinitAuto))
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close(ctx)
	// One class name, three compiles, two versions; the second image of
	// version 1 comes from the images already made.
	for _, k := range []byte{1, 2, 1} {
		c, err := eng.Compile(ctx, "versioned", versioned(k))
		if err != nil {
			t.Fatal(err)
		}
		if !c.Preinitialised() {
			t.Fatalf("version %d: no image", k)
		}
		m, err := eng.InstantiateClass(ctx, abi.ActorID{Tenant: "t", Class: "versioned", Name: "a"}, c)
		if err != nil {
			t.Fatal(err)
		}
		res, err := m.ExportedFunction("value").Call(ctx)
		mem, _ := m.Memory().ReadUint32Le(0)
		if err != nil || res[0] != uint64(k) || mem != uint32(k) {
			t.Errorf("version %d: value %v %v, memory %d", k, res, err, mem)
		}
		m.Close(ctx)
	}
}

func TestWhichClassesGetAnImage(t *testing.T) {
	ctx := context.Background()
	// PreinitAuto, the default, named for a run of the tests with -preinit.
	auto := []engine.Option{engine.WithPreinit("", engine.PreinitAuto)}
	for _, c := range []struct {
		name string
		wasm []byte
		opts []engine.Option
		want bool
	}{
		{"deterministic, auto", versioned(3), auto, true},
		{"off for the class", versioned(3), []engine.Option{engine.WithPreinit("c", engine.PreinitOff)}, false},
		{"off for every class", versioned(3), []engine.Option{engine.WithPreinit("", engine.PreinitOff)}, false},
		{"off for all, on for the class", versioned(3), []engine.Option{engine.WithPreinit("", engine.PreinitOff), engine.WithPreinit("c", engine.PreinitOn)}, true},
		{"with a module config", versioned(3), []engine.Option{engine.WithPreinit("c", engine.PreinitOn),
			engine.WithModuleConfig(func(abi.ActorID) wazero.ModuleConfig { return wazero.NewModuleConfig() })}, false},
		{"a host call in _initialize", testguest.Fixture(t, "actor_id"), []engine.Option{engine.WithPreinit("c", engine.PreinitOn)}, false},
		{"the Go counter, auto", testguest.Counter(t, "go"), auto, false},
		{"the Go counter, on", testguest.Counter(t, "go"), []engine.Option{engine.WithPreinit("c", engine.PreinitOn)}, true},
	} {
		eng, err := engine.NewEngine(ctx, c.opts...)
		if err != nil {
			t.Fatal(err)
		}
		cl, err := eng.Compile(ctx, "c", c.wasm)
		if err != nil {
			t.Fatal(err)
		}
		if got := cl.Preinitialised(); got != c.want {
			t.Errorf("%s: image %v, want %v", c.name, got, c.want)
		}
		eng.Close(ctx)
	}
}

// The actor_id fixture's _initialize keeps the EPERM actor-id answered it:
// with images on, the class falls back to running it.
func TestARefusedImageFallsBackToInitialisation(t *testing.T) {
	g := guesttest.New(t, testguest.Fixture(t, "actor_id"), guesttest.WithEngineOptions(engine.WithPreinit("", engine.PreinitOn)))
	resp, err := g.Request(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp) < 24 || resp[20] != byte(abi.EPERM) {
		t.Errorf("_initialize's errno %v, want EPERM", resp[20:24])
	}
}

// The counter actor in each language does the same, event for event, with
// images on as with images off.
func TestTheCounterActorIsTheSameFromAnImage(t *testing.T) {
	for _, lang := range testguest.Languages {
		t.Run(lang, func(t *testing.T) {
			wasm := testguest.Counter(t, lang)
			run := func(p engine.Preinit) []string {
				g := guesttest.New(t, wasm, guesttest.WithEngineOptions(engine.WithPreinit("", p)))
				var out []string
				req := func(body string) {
					resp, err := g.Request([]byte(body))
					out = append(out, fmt.Sprintf("%q: %s %v", body, resp, err != nil))
				}
				req("")
				req("start 60000")
				for _, f := range g.Advance(5 * time.Minute) {
					out = append(out, fmt.Sprintf("fired %v %d %v", f.Scheduled, f.RetryCount, f.Err))
				}
				req("get")
				g.Restart()
				g.Down(3 * time.Minute)
				out = append(out, fmt.Sprint(len(g.Advance(0)), " late"))
				req("jump")
				req("stop")
				req("get")
				return out
			}
			off, on := run(engine.PreinitOff), run(engine.PreinitOn)
			if fmt.Sprint(off) != fmt.Sprint(on) {
				t.Errorf("images off:\n%q\nimages on:\n%q", off, on)
			}
		})
	}
}

// By default, the counters whose initialisation reads nothing from outside
// start from an image: the AssemblyScript one. The Go runtime reads random
// numbers and the clock as it starts; the Rust counter has no
// initialisation.
func TestWhichCountersGetAnImageByDefault(t *testing.T) {
	ctx := context.Background()
	want := map[string]bool{"go": false, "rust": false, "as": true}
	for _, lang := range testguest.Languages {
		t.Run(lang, func(t *testing.T) {
			wasm := testguest.Counter(t, lang)
			eng, err := engine.NewEngine(ctx, engine.WithPreinit("", engine.PreinitAuto))
			if err != nil {
				t.Fatal(err)
			}
			defer eng.Close(ctx)
			c, err := eng.Compile(ctx, "counter", wasm)
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Preinitialised() && lang != "rust"; got != want[lang] {
				t.Errorf("image %v, want %v", got, want[lang])
			}
		})
	}
}
