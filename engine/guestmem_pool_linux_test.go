package engine

import (
	"bytes"
	"context"
	"testing"
	"unsafe"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/wasmkeep/alarms/abi"
)

// poolModule returns a module whose exported memory starts at min pages
// (above a kept memory's largest) and may grow to max, with functions
// store(addr, byte), load(addr) byte, grow(pages) and size() in pages.
func poolModule(min, max byte) []byte {
	sec := func(id byte, body ...byte) []byte { return append([]byte{id, byte(len(body))}, body...) }
	name := func(s string) []byte { return append([]byte{byte(len(s))}, s...) }
	body := func(code ...byte) []byte { return append([]byte{byte(len(code) + 1), 0}, code...) }
	var m []byte
	m = append(m, 0, 'a', 's', 'm', 1, 0, 0, 0)
	m = append(m, sec(1, 3,
		0x60, 2, 0x7f, 0x7f, 0, // (i32, i32) -> ()
		0x60, 1, 0x7f, 1, 0x7f, // (i32) -> i32
		0x60, 0, 1, 0x7f)...) // () -> i32
	m = append(m, sec(3, 4, 0, 1, 1, 2)...)
	leb := func(n byte) []byte { // up to 255
		if n < 0x80 {
			return []byte{n}
		}
		return []byte{n | 0x80, 1}
	}
	m = append(m, sec(5, append(append([]byte{1, 1}, leb(min)...), leb(max)...)...)...)
	var ex []byte
	ex = append(ex, 5)
	for i, n := range []string{"store", "load", "grow", "size"} {
		ex = append(append(ex, name(n)...), 0, byte(i))
	}
	ex = append(append(ex, name("memory")...), 2, 0)
	m = append(m, sec(7, ex...)...)
	var code []byte
	code = append(code, 4)
	code = append(code, body(0x20, 0, 0x20, 1, 0x3a, 0, 0, 0x0b)...) // i32.store8
	code = append(code, body(0x20, 0, 0x2d, 0, 0, 0x0b)...)          // i32.load8_u
	code = append(code, body(0x20, 0, 0x40, 0, 0x0b)...)             // memory.grow
	code = append(code, body(0x3f, 0, 0x0b)...)                      // memory.size
	m = append(m, sec(10, code...)...)
	return m
}

// poolInstance is one instance on a guestMemory of the engine e, as the
// engine starts one.
type poolInstance struct {
	t   *testing.T
	g   *guestMemory
	mod api.Module
}

func startPoolInstance(t *testing.T, e *Engine, r wazero.Runtime, c wazero.CompiledModule) *poolInstance {
	t.Helper()
	g := &guestMemory{e: e, id: abi.ActorID{Tenant: "t", Class: "c", Name: "a"}}
	mod, err := r.InstantiateModule(g.with(context.Background()), c, wazero.NewModuleConfig().WithName(""))
	if err != nil {
		t.Fatal(err)
	}
	return &poolInstance{t: t, g: g, mod: mod}
}

func (p *poolInstance) call(name string, args ...uint64) uint64 {
	p.t.Helper()
	r, err := p.mod.ExportedFunction(name).Call(context.Background(), args...)
	if err != nil {
		p.t.Fatalf("%s%v: %v", name, args, err)
	}
	if len(r) == 0 {
		return 0
	}
	return r[0]
}

// all returns the memory as the guest sees it, and its first byte's address.
func (p *poolInstance) all() ([]byte, *byte) {
	m := p.mod.Memory()
	b, ok := m.Read(0, m.Size())
	if !ok {
		p.t.Fatal("the memory cannot be read whole")
	}
	return b, unsafe.SliceData(b)
}

// zero fails unless every byte of the memory, and every page's first and
// last byte as the guest loads them, is zero.
func (p *poolInstance) zero(when string) {
	p.t.Helper()
	b, _ := p.all()
	if i := bytes.IndexFunc(b, func(r rune) bool { return r != 0 }); i >= 0 {
		p.t.Fatalf("%s: byte %d of %d is not zero: another instance's data", when, i, len(b))
	}
	for a := uint64(0); a < uint64(len(b)); a += 4096 {
		if p.call("load", a) != 0 || p.call("load", a+4095) != 0 {
			p.t.Fatalf("%s: the guest loads another instance's data at page %d", when, a/4096)
		}
	}
}

// dirty writes into every byte of the memory, and the guest into each
// page's first and last byte.
func (p *poolInstance) dirty(v byte) {
	b, _ := p.all()
	for i := range b {
		b[i] = v
	}
	for a := uint64(0); a < uint64(len(b)); a += 4096 {
		p.call("store", a, uint64(v)+1)
		p.call("store", a+4095, uint64(v)+1)
	}
}

// close closes the instance as its actor does, idle.
func (p *poolInstance) close() {
	p.g.closingIdle()
	if err := p.mod.Close(context.Background()); err != nil {
		p.t.Fatal(err)
	}
}

// Instances of two actors in turn on one reused range: the second sees
// none of what the first wrote, neither in its initial pages, nor in the
// pages the first grew into (the last one included), and a range longer
// than an instance needs behaves as a fresh memory of its own size
// (memory.size, memory.grow up to the module's maximum and no further, a
// trap past the end).
func TestAPooledRangeHoldsNothingOfTheLastInstance(t *testing.T) {
	ctx := context.Background()
	e := &Engine{mem: newMemBudget(1 << 30), owned: true}
	r := wazero.NewRuntime(ctx)
	defer r.Close(ctx)
	big, err := r.CompileModule(ctx, poolModule(32, 128)) // 2 MiB, up to 8
	if err != nil {
		t.Fatal(err)
	}
	small, err := r.CompileModule(ctx, poolModule(32, 64)) // 2 MiB, up to 4
	if err != nil {
		t.Fatal(err)
	}

	first := startPoolInstance(t, e, r, big)
	if first.g.res == nil {
		t.Fatal("a 2 MiB memory has no range of its own")
	}
	_, at := first.all()
	first.dirty(0xaa)
	if first.call("grow", 96) != 32 {
		t.Fatal("the first instance did not grow")
	}
	first.dirty(0xbb) // its last page included
	first.close()
	if m := e.Memory(); m.Pooled != 2<<20 || m.InUse != 0 || len(e.mem.pool) != 1 {
		t.Fatalf("after the first instance closed: %+v, %d pooled", m, len(e.mem.pool))
	}

	second := startPoolInstance(t, e, r, big)
	if _, p := second.all(); p != at {
		t.Fatal("the second instance did not reuse the first's range")
	}
	if m := e.Memory(); m.Pooled != 0 || m.InUse != 2<<20 {
		t.Fatalf("with the range reused: %+v", m)
	}
	if second.call("size") != 32 {
		t.Fatal("a reused memory does not start at the module's size")
	}
	second.zero("the second instance's initial pages")
	if second.call("grow", 96) != 32 {
		t.Fatal("the second instance did not grow")
	}
	second.zero("the pages the second instance grew into")
	if uint32(second.call("grow", 1)) != 0xffffffff {
		t.Fatal("a reused memory grew past the module's maximum")
	}
	second.dirty(0xcc)
	second.close()

	// A range longer than the module may grow to, reused.
	third := startPoolInstance(t, e, r, small)
	if _, p := third.all(); p != at {
		t.Fatal("the third instance did not reuse the range")
	}
	if third.call("size") != 32 {
		t.Fatal("a reused longer range does not start at the module's size")
	}
	third.zero("the third instance's initial pages")
	if _, err := third.mod.ExportedFunction("load").Call(ctx, 32*page); err == nil {
		t.Fatal("a load past the memory's end did not trap")
	}
	if third.call("grow", 32) != 32 || third.call("size") != 64 {
		t.Fatal("a reused longer range did not grow to the module's maximum")
	}
	third.zero("the pages the third instance grew into")
	if uint32(third.call("grow", 1)) != 0xffffffff {
		t.Fatal("a reused longer range grew past the module's maximum")
	}
	if b, _ := third.all(); len(b) != 64*page {
		t.Fatalf("the memory is %d bytes, want %d", len(b), 64*page)
	}
	third.close()
	if m := e.Memory(); m.InUse != 0 || m.Pooled != 2<<20 || len(e.mem.pool) != 1 {
		t.Fatalf("after every instance closed: %+v, %d pooled", m, len(e.mem.pool))
	}
}

// poolMemory returns a memory of 2 MiB, able to grow to 8, pooled or
// not once freed.
func poolMemory(t *testing.T, e *Engine) *guestMemory {
	t.Helper()
	g := &guestMemory{e: e, id: abi.ActorID{Tenant: "t", Class: "c", Name: "a"}, max: 8 << 20}
	if b := g.Reallocate(2 << 20); len(b) != 2<<20 {
		t.Fatalf("a memory of %d bytes", len(b))
	}
	return g
}

// The pool holds at most poolLargest ranges, and at most its share of the
// budget; a memory freed in a call, or closed by wazero rather than its
// actor, is never pooled; room gives pooled ranges back before it fails,
// and Close gives back all.
func TestThePoolIsBounded(t *testing.T) {
	e := &Engine{mem: newMemBudget(1 << 30), owned: true}
	var gs []*guestMemory
	for range poolLargest + 6 {
		gs = append(gs, poolMemory(t, e))
	}
	for _, g := range gs {
		g.closingIdle()
		g.Free()
	}
	if m := e.Memory(); len(e.mem.pool) != poolLargest || m.Pooled != poolLargest*(2<<20) || m.InUse != 0 {
		t.Fatalf("%d ranges pooled, %+v", len(e.mem.pool), m)
	}

	// Bytes: a budget of 16 MiB pools 4 MiB.
	e = &Engine{mem: newMemBudget(16 << 20), owned: true}
	gs = gs[:0]
	for range 4 {
		gs = append(gs, poolMemory(t, e))
	}
	for _, g := range gs {
		g.closingIdle()
		g.Free()
	}
	if m := e.Memory(); len(e.mem.pool) != 2 || m.Pooled != 4<<20 || m.InUse != 0 {
		t.Fatalf("a 16 MiB budget: %d ranges pooled, %+v", len(e.mem.pool), m)
	}
	// Pooled bytes count against the budget; room gives them back first.
	if e.mem.take(13 << 20) {
		t.Fatal("the budget gave 13 MiB with 4 pooled of 16")
	}
	held := e.mem.pool[0].mem
	if !e.room(13 << 20) {
		t.Fatal("room did not give pooled ranges back")
	}
	if m := e.Memory(); m.InUse != 13<<20 || m.Pooled != 2<<20 || len(e.mem.pool) != 1 {
		t.Fatalf("after room for 13 MiB: %+v, %d pooled", m, len(e.mem.pool))
	}
	if mapped(t, &held[0]) {
		t.Fatal("a range given back for room is still mapped")
	}
	e.mem.give(13 << 20)

	// Not idle (wazero closed it), or freed during a call: released.
	g := poolMemory(t, e) // takes the pooled range
	g.Free()
	g = poolMemory(t, e)
	g.closingIdle()
	g.enter()
	g.Free()
	g.exit()
	if m := e.Memory(); len(e.mem.pool) != 0 || m.Pooled != 0 || m.InUse != 0 {
		t.Fatalf("memories closed by wazero or in a call: %d pooled, %+v", len(e.mem.pool), m)
	}
	g = poolMemory(t, e)
	g.closingIdle()
	g.Free()
	if len(e.mem.pool) != 1 {
		t.Fatalf("%d ranges pooled, want 1", len(e.mem.pool))
	}
	for _, r := range e.mem.shut() {
		r.release()
	}
	g = poolMemory(t, e)
	g.closingIdle()
	g.Free()
	if m := e.Memory(); len(e.mem.pool) != 0 || m.Pooled != 0 || m.InUse != 0 {
		t.Fatalf("after shut: %d pooled, %+v", len(e.mem.pool), m)
	}
}
