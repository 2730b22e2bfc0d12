package preinit

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// The fixtures are testdata/<name>.wat compiled with wabt's
// wat2wasm --enable-multi-memory.
func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name+".wasm"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func build(t *testing.T, name string) *Image {
	t.Helper()
	im, err := Build(context.Background(), fixture(t, name), Config{})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return im
}

// newRuntime is a runtime with WASI, as an engine's.
func newRuntime(t *testing.T) wazero.Runtime {
	t.Helper()
	ctx := context.Background()
	r := wazero.NewRuntime(ctx)
	t.Cleanup(func() { r.Close(ctx) })
	wasi_snapshot_preview1.MustInstantiate(ctx, r)
	return r
}

// instances compiles wasm and starts n instances of it the way an engine
// does: _initialize as the start function (absent from an image).
func instances(t *testing.T, r wazero.Runtime, wasm []byte, n int) []api.Module {
	t.Helper()
	ctx := context.Background()
	cm, err := r.CompileModule(ctx, wasm)
	if err != nil {
		t.Fatal(err)
	}
	var out []api.Module
	for range n {
		m, err := r.InstantiateModule(ctx, cm, wazero.NewModuleConfig().WithName("").WithStartFunctions(Initialize))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

func call(t *testing.T, m api.Module, name string, args ...uint64) uint64 {
	t.Helper()
	res, err := m.ExportedFunction(name).Call(context.Background(), args...)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if len(res) == 0 {
		return 0
	}
	return res[0]
}

func TestImageStartsWhereInitialisationLeft(t *testing.T) {
	wasm := fixture(t, "state")
	im := build(t, "state")
	if !im.For(wasm) || im.For(append(bytes.Clone(wasm), 0, 0)) {
		t.Error("For does not tell the module it was made from")
	}
	if im.Pages != 2 || im.Reads.Any() {
		t.Errorf("pages %d, reads %v; want 2, nothing", im.Pages, im.Reads)
	}
	r := newRuntime(t)
	orig := instances(t, r, wasm, 1)[0]
	img := instances(t, r, im.Wasm, 1)[0]
	if img.ExportedFunction(Initialize) != nil {
		t.Error("the image still exports _initialize")
	}
	for _, m := range []api.Module{orig, img} {
		if got := call(t, m, "count"); got != 41 {
			t.Errorf("count = %d", got)
		}
		if got := int64(call(t, m, "big")); got != -5000000000 {
			t.Errorf("big = %d", got)
		}
		if got := math.Float32frombits(uint32(call(t, m, "f"))); got != 1.5 {
			t.Errorf("f = %v", got)
		}
		if got := math.Float64frombits(call(t, m, "d")); got != -2.25 {
			t.Errorf("d = %v", got)
		}
		// The start function ran once, in the image run, not again.
		if got := call(t, m, "starts"); got != 1 {
			t.Errorf("starts = %d", got)
		}
		if m.Memory().Size() != 2*65536 {
			t.Errorf("memory size %d", m.Memory().Size())
		}
	}
	mo, mi := orig.Memory(), img.Memory()
	a, _ := mo.Read(0, mo.Size())
	b, _ := mi.Read(0, mi.Size())
	if !bytes.Equal(a, b) {
		t.Error("the image's memory differs from the initialised original's")
	}
	if got, _ := mi.Read(16, 8); string(got) != "initinal" {
		t.Errorf("memory at 16 = %q", got)
	}
	if got, _ := mi.Read(1024, 14); !bytes.Equal(got, make([]byte, 14)) {
		t.Errorf("memory the initialisation zeroed = %q", got)
	}
}

// sliceMemory is a wazero linear memory in a Go slice that starts with
// init's bytes, as a host supplies Memory to an instance of Bare.
type sliceMemory struct{ buf []byte }

func (m *sliceMemory) Reallocate(size uint64) []byte {
	if m.buf == nil {
		return m.buf
	}
	if size > uint64(cap(m.buf)) {
		m.buf = append(m.buf[:cap(m.buf)], make([]byte, size-uint64(cap(m.buf)))...)
	}
	m.buf = m.buf[:size]
	return m.buf
}

func (m *sliceMemory) Free() {}

// The bare image has no data segments and a memory of the image's size;
// started on a memory that holds Memory, it is the image; started on a
// zeroed memory, it is not (why the host must supply Memory).
func TestTheBareImageStartsFromTheMemoryItIsGiven(t *testing.T) {
	wasm := fixture(t, "state")
	im := build(t, "state")
	m, err := parse(im.Bare)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.data) != 0 || m.dataCount || m.hasStart || len(m.memories) != 1 || m.memories[0].min != im.Pages {
		t.Fatalf("bare image: %d data segments, data count %v, start %v, memories %+v", len(m.data), m.dataCount, m.hasStart, m.memories)
	}
	if len(im.Memory) != int(im.Pages)*65536 {
		t.Fatalf("Memory is %d bytes, want %d pages", len(im.Memory), im.Pages)
	}
	ctx := context.Background()
	r := newRuntime(t)
	orig := instances(t, r, wasm, 1)[0]
	want, _ := orig.Memory().Read(0, orig.Memory().Size())
	if !bytes.Equal(im.Memory, want) {
		t.Fatal("Memory is not the initialised original's memory")
	}
	cm, err := r.CompileModule(ctx, im.Bare)
	if err != nil {
		t.Fatal(err)
	}
	start := func(init []byte) api.Module {
		mem := &sliceMemory{buf: append(make([]byte, 0, len(init)), init...)}
		if init == nil {
			mem.buf = make([]byte, 0, im.Pages*65536)
		}
		ctx := experimental.WithMemoryAllocator(ctx, experimental.MemoryAllocatorFunc(func(_, _ uint64) experimental.LinearMemory { return mem }))
		m, err := r.InstantiateModule(ctx, cm, wazero.NewModuleConfig().WithName(""))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	given := start(im.Memory)
	got, _ := given.Memory().Read(0, given.Memory().Size())
	if !bytes.Equal(got, want) || call(t, given, "count") != 41 || call(t, given, "starts") != 1 {
		t.Error("the bare image on the image's memory is not the image")
	}
	zeroed := start(nil)
	if got, _ := zeroed.Memory().Read(16, 8); string(got) == "initinal" {
		t.Error("the bare image on a zeroed memory holds the image's data")
	}
}

func TestInstancesOfAnImageShareNothing(t *testing.T) {
	im := build(t, "state")
	r := newRuntime(t)
	ms := instances(t, r, im.Wasm, 2)
	a, b := ms[0], ms[1]
	call(t, a, "bump")
	call(t, a, "store", 16, 0xdead)
	call(t, a, "store", 70000, 1)
	if got := call(t, b, "count"); got != 41 {
		t.Errorf("b sees count %d after a's bump", got)
	}
	if got := call(t, b, "load", 16); got != 0x74696e69 {
		t.Errorf("b sees %#x at 16 after a's store", got)
	}
	if got := call(t, b, "load", 70000); got != 99 {
		t.Errorf("b sees %d at 70000 after a's store", got)
	}
	// a grows and writes to the new page; b neither grows nor sees it.
	if got := call(t, a, "grow", 1); got != 2 {
		t.Fatalf("grow = %d, want the old size 2", got)
	}
	call(t, a, "store", 2*65536+8, 7)
	call(t, a, "store", 70000, 2)
	if b.Memory().Size() != 2*65536 {
		t.Errorf("b's memory is %d bytes after a grew", b.Memory().Size())
	}
	if got := call(t, b, "load", 70000); got != 99 {
		t.Errorf("b sees %d at 70000 after a grew", got)
	}
	// b grows too: its new page is zero, not a's.
	if got := call(t, b, "grow", 1); got != 2 {
		t.Fatalf("b grow = %d", got)
	}
	if got := call(t, b, "load", 2*65536+8); got != 0 {
		t.Errorf("b's new page holds %d", got)
	}
	call(t, b, "store", 2*65536+8, 5)
	if got := call(t, a, "load", 2*65536+8); got != 7 {
		t.Errorf("a sees %d on its grown page after b's store", got)
	}
	// A third instance starts from the image, untouched by both.
	c := instances(t, r, im.Wasm, 1)[0]
	if call(t, c, "count") != 41 || call(t, c, "load", 70000) != 99 || c.Memory().Size() != 2*65536 {
		t.Error("a new instance does not start from the image")
	}
}

func TestAModuleWithoutMemoryOrExports(t *testing.T) {
	im := build(t, "no_memory")
	m, err := parse(im.Wasm)
	if err != nil {
		t.Fatal(err)
	}
	if m.hasStart || len(m.exports) != 0 || len(m.memories) != 0 {
		t.Errorf("image: start %v, exports %v, memories %v", m.hasStart, m.exports, m.memories)
	}
	if want := constOf(valI64, 12345); !bytes.Equal(m.globals[0].init, want) {
		t.Errorf("global initialiser % x, want % x", m.globals[0].init, want)
	}
	if _, err := wazero.NewRuntime(context.Background()).CompileModule(context.Background(), im.Wasm); err != nil {
		t.Error(err)
	}
}

func TestReadsAreReported(t *testing.T) {
	im := build(t, "reads")
	if !im.Reads.Random || !im.Reads.Clock || im.Reads.Output {
		t.Errorf("reads %v, want random numbers and the clock", im.Reads)
	}
	// Every instance sees the values of the image run.
	ms := instances(t, newRuntime(t), im.Wasm, 2)
	if call(t, ms[0], "random") != call(t, ms[1], "random") || call(t, ms[0], "clock") != call(t, ms[1], "clock") {
		t.Error("instances of one image read different values at initialisation")
	}
	if im := build(t, "state"); im.Reads.Any() {
		t.Errorf("state reads %v", im.Reads)
	}
}

func TestRefusals(t *testing.T) {
	for _, c := range []struct{ fixture, reason string }{
		{"host_call", `calls wasmkeep:alarm "set-alarm"`},
		{"trap", "_initialize failed"},
		{"exit", "_initialize exited"},
		{"imported_memory", "imports its memory"},
		{"imported_global", "imports a mutable global"},
		{"passive", "data segment 0 is passive"},
		{"data_drop", "uses data.drop"},
		{"two_memories", "defines 2 memories"},
		{"table_set", "uses table.set"},
	} {
		_, err := Build(context.Background(), fixture(t, c.fixture), Config{})
		var ref *Refusal
		if !errors.Is(err, ErrRefused) || !errors.As(err, &ref) || !strings.Contains(err.Error(), c.reason) {
			t.Errorf("%s: %v, want a refusal that says %q", c.fixture, err, c.reason)
		}
	}
	if _, err := Build(context.Background(), fixture(t, "nothing"), Config{}); !errors.Is(err, ErrNothingToRun) {
		t.Errorf("nothing: %v, want ErrNothingToRun", err)
	}
	for _, bad := range [][]byte{nil, []byte("\x00asm\x01\x00\x00\x00\x05\x10"), []byte("\x00asm\x02\x00\x00\x00")} {
		if _, err := Build(context.Background(), bad, Config{}); err == nil || errors.Is(err, ErrRefused) {
			t.Errorf("% x: %v, want a decoding error", bad, err)
		}
	}
}

func TestAnInitialisationThatNeverEndsIsStopped(t *testing.T) {
	// A loop in the start function of a module built here.
	wasm := encode([]section{
		{secType, []byte{1, 0x60, 0, 0}},
		{secFunction, []byte{1, 0}},
		{secStart, []byte{0}},
		{secCode, []byte{1, 7, 0, 0x03, 0x40, 0x0c, 0, 0x0b, 0x0b}},
	})
	_, err := Build(context.Background(), wasm, Config{Timeout: 50e6})
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "start function did not return in time") {
		t.Errorf("%v, want a refused start function", err)
	}
}

func TestLEB128(t *testing.T) {
	for _, v := range []uint64{0, 1, 127, 128, 300, math.MaxUint32, math.MaxUint64} {
		r := &reader{b: appendULEB(nil, v)}
		if got := r.uleb(64); got != v || r.err != nil || len(r.b) != 0 {
			t.Errorf("uleb %d: %d %v", v, got, r.err)
		}
	}
	for _, v := range []int64{0, 1, -1, 63, 64, -64, -65, math.MinInt32, math.MaxInt32, math.MinInt64, math.MaxInt64} {
		r := &reader{b: appendSLEB(nil, v)}
		if got := r.sleb(64); got != v || r.err != nil || len(r.b) != 0 {
			t.Errorf("sleb %d: %d %v", v, got, r.err)
		}
	}
	r := &reader{b: appendULEB(nil, math.MaxUint32+1)}
	if r.u32(); r.err == nil {
		t.Error("a u32 past 2^32 was read")
	}
}

func TestSegmentsSkipZerosAndMergeNearbyRanges(t *testing.T) {
	mem := make([]byte, 3*65536)
	mem[10], mem[20] = 1, 2 // one segment: a gap under mergeGap
	mem[1000] = 3           // another
	mem[2*65536+5] = 4      // the zero page between is skipped
	got := segments(mem)
	want := [][2]int{{10, 21}, {1000, 1001}, {2*65536 + 5, 2*65536 + 6}}
	if len(got) != len(want) {
		t.Fatalf("segments %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("segments %v, want %v", got, want)
		}
	}
	if dataBytes(mem) != 13 {
		t.Errorf("data bytes %d", dataBytes(mem))
	}
	if len(segments(make([]byte, 65536))) != 0 {
		t.Error("a zero page has a segment")
	}
}
