package preinit_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/wasmkeep/alarms/internal/preinit"
	"github.com/wasmkeep/alarms/internal/testguest"
)

// instantiateImage makes an instance of an image, its imports other than
// WASI standing in (none is called: an image runs no code as it starts).
func instantiateImage(t *testing.T, r wazero.Runtime, cm wazero.CompiledModule) api.Module {
	t.Helper()
	ctx := context.Background()
	m, err := r.InstantiateModule(ctx, cm, wazero.NewModuleConfig().WithName("").WithStartFunctions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(ctx) })
	return m
}

// A Go guest's image holds its runtime's generators, keyed by the random
// numbers its start read; an instance that Reseed gave fresh keys holds
// generators of its own: consistent states (what the runtime's own Init
// leaves), keyed unlike the image's and unlike another instance's. An
// instance not reseeded holds the image's, which is what Reseed is for.
func TestAGoImageHoldsItsRuntimesGeneratorsAndReseedGivesEachInstanceItsOwn(t *testing.T) {
	ctx := context.Background()
	wasm := testguest.Build(t, testguest.Scripted)
	im, err := preinit.Build(ctx, wasm, preinit.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if !im.Reads.Random || !im.Reseedable() {
		t.Fatalf("a Go guest's image: reads %v, generators %v; want its runtime's generators found", im.Reads, im.Generators)
	}
	cheap := 0
	for _, g := range im.Generators {
		if g.Cheap {
			cheap++
		}
	}
	// The global generator and the thread's, with its cheap one.
	if len(im.Generators) != 2 || cheap != 1 {
		t.Errorf("generators %+v; want two, one with a cheap generator after it", im.Generators)
	}

	r := wazero.NewRuntime(ctx)
	defer r.Close(ctx)
	wasi_snapshot_preview1.MustInstantiate(ctx, r)
	cm, err := r.CompileModule(ctx, im.Wasm)
	if err != nil {
		t.Fatal(err)
	}
	hosts := map[string]wazero.HostModuleBuilder{}
	for _, f := range cm.ImportedFunctions() {
		mod, name, _ := f.Import()
		if mod == wasi_snapshot_preview1.ModuleName {
			continue
		}
		if hosts[mod] == nil {
			hosts[mod] = r.NewHostModuleBuilder(mod)
		}
		hosts[mod].NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(context.Context, api.Module, []uint64) { t.Error("a host function was called") }), f.ParamTypes(), f.ResultTypes()).Export(name)
	}
	for _, b := range hosts {
		if _, err := b.Instantiate(ctx); err != nil {
			t.Fatal(err)
		}
	}

	state := func(m api.Module, g preinit.Generator) []byte {
		b, ok := m.Memory().Read(g.Offset, preinit.CheapOffset+8)
		if !ok {
			t.Fatalf("generator at %d past the memory's end", g.Offset)
		}
		return bytes.Clone(b)
	}
	plain := instantiateImage(t, r, cm)
	a, b := instantiateImage(t, r, cm), instantiateImage(t, r, cm)
	for _, m := range []api.Module{a, b} {
		if err := preinit.Reseed(m.Memory(), im.Generators, rand.Reader); err != nil {
			t.Fatal(err)
		}
	}
	for _, g := range im.Generators {
		image := im.Memory[g.Offset : g.Offset+preinit.CheapOffset+8]
		if !bytes.Equal(state(plain, g), image) {
			t.Errorf("generator at %d: an instance not reseeded differs from the image", g.Offset)
		}
		sa, sb := state(a, g), state(b, g)
		key := func(s []byte) []byte { return s[256:288] }
		if bytes.Equal(key(sa), key(image)) || bytes.Equal(key(sb), key(image)) || bytes.Equal(key(sa), key(sb)) {
			t.Errorf("generator at %d: keys image %x, instance a %x, b %x; want three different", g.Offset, key(image), key(sa), key(sb))
		}
		if i, n, c := binary.LittleEndian.Uint32(sa[288:]), binary.LittleEndian.Uint32(sa[292:]), binary.LittleEndian.Uint32(sa[296:]); i != 0 || n != 32 || c != 0 {
			t.Errorf("generator at %d reseeded: i %d, n %d, c %d; want 0, 32, 0 as a fresh Init leaves it", g.Offset, i, n, c)
		}
		if !preinit.StateAt(sa, 0) {
			t.Errorf("generator at %d reseeded: not a consistent state (its buffer is not its key's first block)", g.Offset)
		}
		cheapA, cheapImage := sa[preinit.CheapOffset:], image[preinit.CheapOffset:]
		if g.Cheap == bytes.Equal(cheapA, cheapImage) {
			t.Errorf("generator at %d (cheap %v): the word after it %x, the image's %x", g.Offset, g.Cheap, cheapA, cheapImage)
		}
	}
}

// Of two runs' memories, only a generator whose key differs between them
// was seeded from the random numbers read: one keyed with a constant of
// the program's own (a math/rand/v2.ChaCha8 it means to repeat) is the
// same in both and left as it is, and so is anything that only looks like
// a state.
func TestAGeneratorKeyedWithAConstantIsLeftAsItIs(t *testing.T) {
	a, b := make([]byte, 8192), make([]byte, 8192)
	constant := [32]byte{1, 2, 3}
	preinit.FreshState(a, 1024, constant)
	preinit.FreshState(b, 1024, constant)
	preinit.FreshState(a, 4096, [32]byte{4})
	preinit.FreshState(b, 4096, [32]byte{5})
	// The cheap generator after it differs too.
	a[4096+preinit.CheapOffset], b[4096+preinit.CheapOffset] = 7, 8
	// Counters of a state over a buffer that is not its block.
	preinit.FreshState(a, 6144, [32]byte{6})
	preinit.FreshState(b, 6144, [32]byte{7})
	a[6144], b[6144] = a[6144]^1, b[6144]^1
	got := preinit.FindGenerators(a, b)
	if want := []preinit.Generator{{Offset: 4096, Cheap: true}}; len(got) != 1 || got[0] != want[0] {
		t.Errorf("generators %+v, want %+v", got, want)
	}
}
