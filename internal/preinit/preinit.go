// Package preinit builds pre-initialised images of WebAssembly reactors,
// the Wizer way: it runs a module's initialisation (its start function,
// then _initialize) once, in a private wazero runtime, captures the linear
// memory and the mutable globals it leaves, and writes a new module whose
// global initialisers are the captured values, whose memory starts at the
// captured size with the captured non-zero bytes as its data, and which
// has neither the start function nor the _initialize export. An instance
// of the image starts where an instance of the original stood once its
// initialisation had returned, without running it.
//
// What cannot be captured faithfully is refused with an error wrapping
// ErrRefused; the caller then runs the original module. abi/ABI.md says
// which guests may be pre-initialised and what such a guest sees.
package preinit

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/tetratelabs/wazero/sys"
)

// Initialize is the export that runs a reactor's initialisation.
const Initialize = "_initialize"

// wasiModule is the WASI import module; the private runtime serves it as
// an engine does.
const wasiModule = wasi_snapshot_preview1.ModuleName

// Export names the instrumented copy adds to read the state it leaves.
const (
	globalExport = "wasmkeep-preinit-global-"
	memoryExport = "wasmkeep-preinit-memory"
)

// ErrRefused is wrapped by every error that says a module cannot be
// pre-initialised faithfully (as opposed to a module that is malformed).
var ErrRefused = errors.New("cannot be pre-initialised")

// ErrNothingToRun is wrapped by the error for a module that has neither a
// start function nor an _initialize export: its image would be itself.
var ErrNothingToRun = errors.New("the module has no initialisation to run")

// Refusal is the error of a module that cannot be pre-initialised: Reason
// says why. It wraps ErrRefused, and Cause when there is one (a trap, an
// exit).
type Refusal struct {
	Reason string
	Cause  error
}

func (e *Refusal) Error() string {
	s := "preinit: " + ErrRefused.Error() + ": " + e.Reason
	if e.Cause != nil {
		s += ": " + e.Cause.Error()
	}
	return s
}

// Unwrap returns ErrRefused and the cause.
func (e *Refusal) Unwrap() []error { return []error{ErrRefused, e.Cause} }

func refuse(format string, args ...any) error {
	return &Refusal{Reason: fmt.Sprintf(format, args...)}
}

// Config is how the initialisation runs.
type Config struct {
	// MemoryLimitPages bounds the memory as the engine's runtime does
	// (0: 65536 pages).
	MemoryLimitPages uint32
	// Cache is the compilation cache of the private runtime (nil: none).
	Cache wazero.CompilationCache
	// Walltime is the wall clock the initialisation reads (nil: the
	// system's), at millisecond resolution as the engine gives it.
	Walltime func() time.Time
	// Timeout bounds the initialisation (0: 30 s).
	Timeout time.Duration
}

// Reads is what the initialisation read from outside the module. Each
// value it read is baked into the image and shared by all its instances.
type Reads struct {
	Random bool // random_get
	Clock  bool // the wall or the monotonic clock
	Output bool // wrote to stdout or stderr (the image run's output is discarded)
}

// Any reports whether the initialisation read anything from outside.
func (r Reads) Any() bool { return r.Random || r.Clock || r.Output }

func (r Reads) String() string {
	s := ""
	add := func(b bool, name string) {
		if b {
			if s != "" {
				s += ", "
			}
			s += name
		}
	}
	add(r.Random, "random numbers")
	add(r.Clock, "the clock")
	add(r.Output, "output")
	if s == "" {
		return "nothing"
	}
	return s
}

// Image is a pre-initialised module.
type Image struct {
	// Wasm is the rewritten module.
	Wasm []byte
	// Bare is Wasm without its data segments: its memory starts at the
	// image's size, all zero. An instance of Bare is an instance of the
	// image only when whoever supplies its memory (a wazero memory
	// allocator) fills it with Memory before any of its code runs, as a
	// host that maps Memory copy-on-write into each instance does; nil
	// when the module has no memory.
	Bare []byte
	// Memory is the linear memory as the initialisation left it, Pages
	// pages long (nil when the module has no memory).
	Memory []byte
	// Source is the SHA-256 of the module it was made from: an image is
	// used only for a module of that hash.
	Source [32]byte
	// Pages is the memory's size, in 64 KiB pages, when initialisation
	// returned: the image's minimum.
	Pages uint32
	// DataBytes is how many bytes the image's data segments hold, and
	// Segments how many there are.
	DataBytes, Segments int
	// Reads is what the initialisation read from outside.
	Reads Reads
	// Init is how long the image run's instantiation and initialisation
	// took: what each instance that runs its initialisation pays at its
	// start, and an instance of the image does not.
	Init time.Duration
	// Generators are the random number generators of a Go runtime that the
	// initialisation seeded from the random numbers it read, found in
	// Memory; a host gives each instance seeds of its own with Reseed
	// (generators.go). Empty for any other module.
	Generators []Generator
}

// Reseedable reports whether the initialisation read random numbers as a
// Go runtime's start does (once, 32 bytes: only then are Generators looked
// for) and its generators were found, which Reseed gives each instance
// afresh.
func (im *Image) Reseedable() bool { return len(im.Generators) > 0 }

// For reports whether the image was made from wasm.
func (im *Image) For(wasm []byte) bool { return im.Source == sha256.Sum256(wasm) }

// Build runs wasm's initialisation and returns its image, or an error: a
// *Refusal (wrapping ErrRefused) for a module that cannot be
// pre-initialised, one wrapping ErrNothingToRun, or one that says the
// module is malformed.
func Build(ctx context.Context, wasm []byte, cfg Config) (*Image, error) {
	m, err := parse(wasm)
	if err != nil {
		return nil, fmt.Errorf("preinit: %w", err)
	}
	if err := m.check(); err != nil {
		return nil, err
	}
	initExport := -1
	for i, e := range m.exports {
		if e.name == Initialize && e.kind == kindFunc {
			initExport = i
		}
	}
	if initExport < 0 && !m.hasStart {
		return nil, fmt.Errorf("preinit: %w", ErrNothingToRun)
	}

	// The instrumented copy exports every mutable global and the memory.
	exports := append([]export(nil), m.exports...)
	memExport := ""
	for _, e := range m.exports {
		if e.kind == kindMemory && e.idx == 0 {
			memExport = e.name
		}
	}
	if memExport == "" && len(m.memories) == 1 {
		memExport = memoryExport
		exports = append(exports, export{name: memoryExport, kind: kindMemory})
	}
	for i, g := range m.globals {
		if g.mutable {
			exports = append(exports, export{name: fmt.Sprint(globalExport, i), kind: kindGlobal, idx: m.importedG + uint32(i)})
		}
	}
	instrumented := encode(withSection(m.sections, secExport, encodeExports(exports)))

	st, err := run(ctx, instrumented, m, memExport, cfg)
	if err != nil {
		return nil, err
	}

	// The image: the original with the captured state.
	im := &Image{Source: sha256.Sum256(wasm), Pages: st.pages, Reads: st.reads, Init: st.init}
	if st.reads.Random && st.randomCalls == goRuntimeRandomReads && st.randomBytes == goRuntimeRandomBytes {
		// Perhaps a Go runtime: run it again, on other random numbers, to
		// find the generators they seeded (generators.go).
		again, err := run(ctx, instrumented, m, memExport, cfg)
		if err != nil {
			return nil, err
		}
		im.Generators = findGenerators(st.memory, again.memory)
	}
	sections := m.sections
	if len(m.globals) > 0 {
		gs := append([]global(nil), m.globals...)
		for i := range gs {
			if gs[i].mutable {
				gs[i].init = constOf(gs[i].typ, st.globals[i])
			}
		}
		sections = withSection(sections, secGlobal, encodeGlobals(gs))
	}
	if initExport >= 0 {
		kept := append(append([]export(nil), m.exports[:initExport]...), m.exports[initExport+1:]...)
		sections = withSection(sections, secExport, encodeExports(kept))
	}
	sections = withSection(sections, secStart, nil)
	if len(m.memories) == 1 {
		mems := []limits{m.memories[0]}
		mems[0].min = st.pages
		sections = withSection(sections, secMemory, encodeMemories(mems))
		data, n := dataSection(st.memory)
		im.DataBytes, im.Segments = dataBytes(st.memory), n
		// Without data segments, and so without a data count (check
		// refused every instruction that names a segment).
		im.Bare = encode(withSection(withSection(sections, secData, nil), secDataCount, nil))
		im.Memory = st.memory
		sections = withSection(sections, secData, data)
		if m.dataCount {
			sections = withSection(sections, secDataCount, appendULEB(nil, uint64(n)))
		}
	}
	im.Wasm = encode(sections)
	return im, nil
}

// check refuses what an image cannot hold.
func (m *module) check() error {
	for _, im := range m.imports {
		switch {
		case im.kind == kindMemory:
			return refuse("imports its memory (%s %q): its contents belong to the host", im.module, im.name)
		case im.kind == kindGlobal && im.mutable:
			return refuse("imports a mutable global (%s %q): its value belongs to the host", im.module, im.name)
		case im.kind == kindGlobal:
			return refuse("imports a global (%s %q), which the engine does not provide", im.module, im.name)
		case im.kind == kindTable:
			return refuse("imports a table (%s %q): its contents belong to the host", im.module, im.name)
		}
	}
	if len(m.memories) > 1 {
		return refuse("defines %d memories; an image holds one", len(m.memories))
	}
	for _, l := range m.memories {
		if l.flags&^1 != 0 {
			return refuse("its memory is shared or 64-bit (limits flags %#x)", l.flags)
		}
	}
	for i, g := range m.globals {
		if g.mutable && g.typ != valI32 && g.typ != valI64 && g.typ != valF32 && g.typ != valF64 {
			return refuse("mutable global %d holds a %s, which cannot be read back as a constant", m.importedG+uint32(i), typeName(g.typ))
		}
	}
	for i, s := range m.data {
		if s.passive {
			return refuse("data segment %d is passive (memory.init may copy it after initialisation)", i)
		}
	}
	if m.dataInstr != "" {
		return refuse("its code uses %s, which refers to data segments the image replaces", m.dataInstr)
	}
	if m.tableWrite != "" {
		return refuse("its code uses %s: a table changed during initialisation is not captured", m.tableWrite)
	}
	return nil
}

func typeName(t byte) string {
	switch t {
	case valV128:
		return "v128"
	case valFuncref:
		return "funcref"
	case valExternref:
		return "externref"
	}
	return fmt.Sprintf("type %#x", t)
}

// state is what an initialisation left.
type state struct {
	memory  []byte
	pages   uint32
	globals map[int]uint64 // by defined global's index
	reads   Reads
	init    time.Duration
	// randomCalls and randomBytes count the reads of random numbers
	// (WASI random_get) and the bytes they asked for.
	randomCalls, randomBytes int
}

// hostCall is the panic value of a non-WASI import called during
// initialisation.
type hostCall struct{ module, name string }

// nanoBase is the origin of the monotonic clock of an image run. It is
// set after wazero's own (a package initialises after those it imports),
// so an instance of an image, whose clock is wazero's, never reads a
// monotonic time earlier than its initialisation did.
var nanoBase = time.Now()

// run instantiates the instrumented module, runs its initialisation, and
// reads its state.
func run(ctx context.Context, wasm []byte, m *module, memExport string, cfg Config) (*state, error) {
	rc := wazero.NewRuntimeConfig().WithCloseOnContextDone(true)
	if cfg.MemoryLimitPages != 0 {
		rc = rc.WithMemoryLimitPages(cfg.MemoryLimitPages)
	}
	if cfg.Cache != nil {
		rc = rc.WithCompilationCache(cfg.Cache)
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	r := wazero.NewRuntimeWithConfig(ctx, rc)
	defer r.Close(context.WithoutCancel(ctx))
	cm, err := r.CompileModule(ctx, wasm)
	if err != nil {
		return nil, fmt.Errorf("preinit: compile: %w", err)
	}

	// WASI as the engine serves it, watched; every other import refuses.
	var reads struct {
		random, clock, output    atomic.Bool
		randomCalls, randomBytes atomic.Int64
	}
	wasi := wasi_snapshot_preview1.NewBuilder(r)
	if _, err := wasi.Instantiate(ctx); err != nil {
		return nil, fmt.Errorf("preinit: instantiate WASI: %w", err)
	}
	hosts := map[string]wazero.HostModuleBuilder{}
	for _, f := range cm.ImportedFunctions() {
		mod, name, _ := f.Import()
		switch {
		case mod == wasiModule:
			// No arguments, environment variables or pre-opened
			// directories, as the engine gives its instances.
			continue
		case hosts[mod] == nil:
			hosts[mod] = r.NewHostModuleBuilder(mod)
		}
		call := hostCall{mod, name}
		hosts[mod].NewFunctionBuilder().
			WithGoModuleFunction(api.GoModuleFunc(func(context.Context, api.Module, []uint64) { panic(call) }), f.ParamTypes(), f.ResultTypes()).
			Export(name)
	}
	for mod, b := range hosts {
		if _, err := b.Instantiate(ctx); err != nil {
			return nil, fmt.Errorf("preinit: stand in for %s: %w", mod, err)
		}
	}

	mc := wazero.NewModuleConfig().
		WithName("").
		WithStartFunctions(). // run below, to tell a trap in one from the other
		WithRandSource(readerFunc(func(p []byte) (int, error) {
			reads.random.Store(true)
			reads.randomCalls.Add(1)
			reads.randomBytes.Add(int64(len(p)))
			return randReader.Read(p)
		})).
		WithWalltime(func() (int64, int32) {
			reads.clock.Store(true)
			t := time.Now()
			if cfg.Walltime != nil {
				t = cfg.Walltime()
			}
			return t.Unix(), int32(t.Nanosecond())
		}, sys.ClockResolution(time.Millisecond)).
		WithNanotime(func() int64 {
			reads.clock.Store(true)
			return time.Since(nanoBase).Nanoseconds()
		}, 1).
		WithStdout(writerFunc(func(p []byte) (int, error) { reads.output.Store(true); return len(p), nil })).
		WithStderr(writerFunc(func(p []byte) (int, error) { reads.output.Store(true); return len(p), nil }))

	began := time.Now()
	mod, err := r.InstantiateModule(ctx, cm, mc)
	if err != nil {
		return nil, initError(ctx, "its start function", err)
	}
	if fn := mod.ExportedFunction(Initialize); fn != nil {
		if _, err := fn.Call(ctx); err != nil {
			return nil, initError(ctx, Initialize, err)
		}
	}

	st := &state{globals: map[int]uint64{}, init: time.Since(began)}
	for i, g := range m.globals {
		if g.mutable {
			eg := mod.ExportedGlobal(fmt.Sprint(globalExport, i))
			if eg == nil {
				return nil, fmt.Errorf("preinit: global %d was not exported", i)
			}
			st.globals[i] = eg.Get()
		}
	}
	if memExport != "" {
		mem := mod.ExportedMemory(memExport)
		if mem == nil {
			return nil, fmt.Errorf("preinit: the memory was not exported")
		}
		size := mem.Size()
		buf, ok := mem.Read(0, size)
		if !ok {
			return nil, fmt.Errorf("preinit: read %d bytes of memory", size)
		}
		st.memory = append([]byte(nil), buf...)
		st.pages = size / 65536
	}
	st.reads = Reads{
		Random: reads.random.Load(), Clock: reads.clock.Load(), Output: reads.output.Load(),
	}
	st.randomCalls, st.randomBytes = int(reads.randomCalls.Load()), int(reads.randomBytes.Load())
	return st, nil
}

// initError is the refusal of an initialisation that failed.
func initError(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		return &Refusal{Reason: what + " did not return in time", Cause: err}
	}
	var hc hostCall
	if errors.As(err, &hc) {
		return refuse("%s calls %s %q: a host call during initialisation cannot be captured", what, hc.module, hc.name)
	}
	var exit *sys.ExitError
	if errors.As(err, &exit) {
		return &Refusal{Reason: what + " exited", Cause: err}
	}
	return &Refusal{Reason: what + " failed", Cause: err}
}

func (h hostCall) Error() string { return "host call " + h.module + " " + h.name }

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// randReader is the random source of an image run, as an engine's.
var randReader io.Reader = rand.Reader

// mergeGap is how many zero bytes a data segment holds rather than end
// and start another: a segment costs about 8 bytes in the module and a
// copy call at instantiation.
const mergeGap = 64

// segments returns the ranges [start, end) of mem that hold non-zero
// bytes, merged across gaps of zeros shorter than mergeGap.
func segments(mem []byte) [][2]int {
	var out [][2]int
	i, n := 0, len(mem)
	for {
		for i+8 <= n && binary.LittleEndian.Uint64(mem[i:]) == 0 {
			i += 8
		}
		for i < n && mem[i] == 0 {
			i++
		}
		if i >= n {
			return out
		}
		start, last := i, i
		for i < n && i-last <= mergeGap {
			if mem[i] != 0 {
				last = i
			}
			i++
		}
		out = append(out, [2]int{start, last + 1})
		i = last + 1
	}
}

// dataSection returns a data section that writes mem's non-zero bytes,
// and its number of segments.
func dataSection(mem []byte) ([]byte, int) {
	segs := segments(mem)
	n := 0
	for _, s := range segs {
		n += s[1] - s[0] + 16
	}
	b := appendULEB(make([]byte, 0, n+5), uint64(len(segs)))
	for _, s := range segs {
		b = append(b, 0) // active, memory 0
		b = append(appendSLEB(append(b, 0x41), int64(int32(uint32(s[0])))), 0x0b)
		b = appendULEB(b, uint64(s[1]-s[0]))
		b = append(b, mem[s[0]:s[1]]...)
	}
	return b, len(segs)
}

// dataBytes is how many bytes of mem the data section holds.
func dataBytes(mem []byte) int {
	n := 0
	for _, s := range segments(mem) {
		n += s[1] - s[0]
	}
	return n
}
