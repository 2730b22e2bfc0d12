package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

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

// large is a module whose memory starts at pages pages (more than 1 MiB),
// up to 256, whose _initialize leaves k in a global and at the first and
// the last 4 bytes of the memory; value returns the global, load(addr) and
// store(addr, v) an i32 of the memory, grow(pages) is memory.grow;
// on-request stores the request's length at 4096 and returns 0.
func large(k byte, pages uint32) []byte {
	uleb := func(v uint64) []byte {
		var b []byte
		for {
			c := byte(v & 0x7f)
			v >>= 7
			if v != 0 {
				b = append(b, c|0x80)
				continue
			}
			return append(b, c)
		}
	}
	sleb := func(v int64) []byte {
		var b []byte
		for {
			c := byte(v & 0x7f)
			v >>= 7
			if v == 0 && c&0x40 == 0 || v == -1 && c&0x40 != 0 {
				return append(b, c)
			}
			b = append(b, c|0x80)
		}
	}
	vec := func(items ...[]byte) []byte {
		b := uleb(uint64(len(items)))
		for _, it := range items {
			b = append(b, it...)
		}
		return b
	}
	cat := func(parts ...[]byte) []byte {
		var b []byte
		for _, p := range parts {
			b = append(b, p...)
		}
		return b
	}
	section := func(id byte, body []byte) []byte { return cat([]byte{id}, uleb(uint64(len(body))), body) }
	name := func(s string) []byte { return cat(uleb(uint64(len(s))), []byte(s)) }
	fn := func(code ...[]byte) []byte {
		body := cat(append([][]byte{{0}}, code...)...)
		return cat(uleb(uint64(len(body))), body)
	}
	i32 := func(v int64) []byte { return cat([]byte{0x41}, sleb(v)) }
	last := int64(pages)*65536 - 4
	return cat([]byte("\x00asm\x01\x00\x00\x00"),
		section(1, vec([]byte{0x60, 0, 0}, []byte{0x60, 0, 1, 0x7f}, []byte{0x60, 1, 0x7f, 1, 0x7f}, []byte{0x60, 2, 0x7f, 0x7f, 0})),
		section(3, vec([]byte{0}, []byte{1}, []byte{2}, []byte{3}, []byte{2}, []byte{2})),
		section(5, vec(cat([]byte{1}, uleb(uint64(pages)), uleb(256)))),
		section(6, vec([]byte{0x7f, 1, 0x41, 0, 0x0b})),
		section(7, vec(cat(name("memory"), []byte{2, 0}), cat(name("_initialize"), []byte{0, 0}), cat(name("value"), []byte{0, 1}),
			cat(name("load"), []byte{0, 2}), cat(name("store"), []byte{0, 3}), cat(name("grow"), []byte{0, 4}),
			cat(name("on-request"), []byte{0, 5}))),
		section(10, vec(
			fn(i32(int64(k)), []byte{0x24, 0}, i32(0), i32(int64(k)), []byte{0x36, 2, 0}, i32(last), i32(int64(k)), []byte{0x36, 2, 0, 0x0b}),
			fn([]byte{0x23, 0, 0x0b}),
			fn([]byte{0x20, 0, 0x28, 2, 0, 0x0b}),
			fn([]byte{0x20, 0, 0x20, 1, 0x36, 2, 0, 0x0b}),
			fn([]byte{0x20, 0, 0x40, 0, 0x0b}),
			fn(i32(4096), []byte{0x20, 0, 0x36, 2, 0}, i32(0), []byte{0x0b}))))
}

// A class whose image holds more than 1 MiB of memory maps it into each
// instance (on Linux): one class name, two versions of its module, each
// instance sees its own version's image and nothing of another
// instance's, after a memory.grow too.
func TestAMappedImageServesOnlyItsVersionAndEachInstanceAlone(t *testing.T) {
	ctx := context.Background()
	eng, err := engine.NewEngine(ctx, engine.WithPreinit("", engine.PreinitAuto))
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close(ctx)
	const pages = 24
	last := uint64(pages*65536 - 4)
	for _, k := range []byte{1, 2, 1} {
		c, err := eng.Compile(ctx, "large", large(k, pages))
		if err != nil {
			t.Fatal(err)
		}
		if !c.Preinitialised() || c.MappedImage() != (runtime.GOOS == "linux") {
			t.Fatalf("version %d: image %v, mapped %v", k, c.Preinitialised(), c.MappedImage())
		}
		var ms []api.Module
		for i := range 2 {
			m, err := eng.InstantiateClass(ctx, abi.ActorID{Tenant: "t", Class: "large", Name: fmt.Sprint(i)}, c)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close(ctx)
			ms = append(ms, m)
		}
		call := func(m api.Module, f string, args ...uint64) uint64 {
			t.Helper()
			r, err := m.ExportedFunction(f).Call(ctx, args...)
			if err != nil {
				t.Fatal(err)
			}
			if len(r) == 0 {
				return 0
			}
			return r[0]
		}
		for _, m := range ms {
			if call(m, "value") != uint64(k) || call(m, "load", 0) != uint64(k) || call(m, "load", last) != uint64(k) {
				t.Fatalf("version %d: an instance does not start from its image", k)
			}
		}
		a, b := ms[0], ms[1]
		call(a, "store", 0, 100)
		call(a, "store", 4096, 101)
		if call(a, "grow", 8) != pages || call(b, "grow", 8) != pages {
			t.Fatal("the instances did not grow")
		}
		call(a, "store", pages*65536+8, 102)
		if call(b, "load", 0) != uint64(k) || call(b, "load", 4096) != 0 || call(b, "load", pages*65536+8) != 0 {
			t.Fatalf("version %d: an instance sees another's writes", k)
		}
		if call(a, "load", 0) != 100 || call(a, "load", 4096) != 101 || call(a, "load", pages*65536+8) != 102 {
			t.Fatalf("version %d: an instance lost its own writes", k)
		}
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
		{"the Go counter, auto (its runtime's generators reseeded)", testguest.Counter(t, "go"), auto, true},
		{"a clock read at initialisation, auto", testguest.Fixture(t, "init_clock"), auto, false},
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
// start from an image: the AssemblyScript one; and so does the Go one,
// whose runtime reads random numbers (into generators each instance gets
// afresh) and the clock as it starts. The Rust counter has no
// initialisation.
func TestWhichCountersGetAnImageByDefault(t *testing.T) {
	ctx := context.Background()
	want := map[string]bool{"go": true, "rust": false, "as": true}
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

// A class the default leaves without an image says so when it is
// compiled (a node's start), at INFO: what its initialisation read, what
// that run costs each cold start, and the option that turns images on. A
// class with an image, or whose images were turned off by choice, says
// nothing of the kind.
func TestAClassLeftWithoutAnImageSaysWhatItCostsAndHowToChangeIt(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name string
		wasm []byte
		mode engine.Preinit
		want bool
	}{
		{"a clock read at initialisation, auto", testguest.Fixture(t, "init_clock"), engine.PreinitAuto, true},
		{"a clock read at initialisation, on", testguest.Fixture(t, "init_clock"), engine.PreinitOn, false},
		{"a clock read at initialisation, off", testguest.Fixture(t, "init_clock"), engine.PreinitOff, false},
		{"the Go counter, auto", testguest.Counter(t, "go"), engine.PreinitAuto, false},
	} {
		var out bytes.Buffer
		logger := hclog.New(&hclog.LoggerOptions{Output: &out, Level: hclog.Info, JSONFormat: true})
		eng, err := engine.NewEngine(ctx, engine.WithPreinit("counter", c.mode), engine.WithLogger(logger))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := eng.Compile(ctx, "counter", c.wasm); err != nil {
			t.Fatal(err)
		}
		eng.Close(ctx)
		var line map[string]any
		for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil && strings.HasPrefix(fmt.Sprint(m["@message"]), "class runs its initialisation in each new instance") {
				line = m
			}
		}
		if (line != nil) != c.want {
			t.Errorf("%s: said %v, want a line about running without an image: %v\n%s", c.name, line != nil, c.want, out.String())
			continue
		}
		if line == nil {
			continue
		}
		if line["@level"] != "info" || line["class"] != "counter" || !strings.Contains(fmt.Sprint(line["reads"]), "the clock") ||
			!strings.Contains(fmt.Sprint(line["@message"]), "-preinit CLASS=on") || !strings.Contains(fmt.Sprint(line["@message"]), "PreinitOn") {
			t.Errorf("%s: %v; want INFO naming the class, what it read and the option that turns images on", c.name, line)
		}
		if ms, ok := line["init_ms_per_cold_start"].(float64); !ok || ms <= 0 {
			t.Errorf("%s: init_ms_per_cold_start %v, want the initialisation's measured time", c.name, line["init_ms_per_cold_start"])
		}
	}
}

// A Go class starts from an image by default, and each instance draws
// random numbers of its own: math/rand and math/rand/v2 give two
// instances different numbers, and a map, made at initialisation or
// later, iterates in different orders in each, as when every instance ran
// its runtime's start (docs/design.md#images-and-seeds).
func TestEachInstanceOfAGoImageDrawsRandomNumbersOfItsOwn(t *testing.T) {
	ctx := context.Background()
	wasm := testguest.Build(t, testguest.Scripted)
	eng, err := engine.NewEngine(ctx, engine.WithPreinit("", engine.PreinitAuto))
	if err != nil {
		t.Fatal(err)
	}
	c, err := eng.Compile(ctx, "scripted", wasm)
	eng.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Preinitialised() {
		t.Fatal("a Go class has no image by default")
	}
	draw := func(name string) []string {
		g := guesttest.New(t, wasm, guesttest.WithActor(abi.ActorID{Tenant: "t", Class: "scripted", Name: name}),
			guesttest.WithEngineOptions(engine.WithPreinit("", engine.PreinitAuto)))
		resp, err := g.Request([]byte("rand"))
		if err != nil {
			t.Fatal(err)
		}
		return strings.Split(string(resp), "\n")
	}
	a, b := draw("a"), draw("b")
	if len(a) != 4 || len(b) != 4 {
		t.Fatalf("rand answered %q and %q", a, b)
	}
	for i, what := range []string{"math/rand", "math/rand/v2", "a map made at initialisation", "a map made in the request"} {
		if a[i] == b[i] {
			t.Errorf("%s: both instances gave %q", what, a[i])
		}
	}
}
