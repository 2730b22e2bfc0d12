package engine

import (
	"testing"

	"github.com/wasmkeep/alarms/abi"
)

// The memory of an instance its actor closed in no call is kept and serves
// the next instance of its size, zeroed; the memory of one closed any
// other way (by wazero when a call's deadline passed, while the guest may
// still be running) is not kept.
func TestOnlyAnIdleInstancesMemoryIsKept(t *testing.T) {
	e := &Engine{mem: &memBudget{max: 1 << 30}, owned: true}
	id := abi.ActorID{Tenant: "t", Class: "c", Name: "a"}
	start := func() (*guestMemory, []byte) {
		g := &guestMemory{e: e, id: id}
		b := g.Reallocate(page)
		if len(b) != page {
			t.Fatalf("a memory of %d bytes, want %d", len(b), page)
		}
		return g, b
	}
	g, b := start()
	b[100] = 1
	g.Free() // as at a deadline
	if e.mem.kept.bytes != 0 {
		t.Fatal("the memory of an instance closed in a call was kept")
	}
	g, b = start()
	b[100] = 2
	g.closingIdle()
	g.Free()
	if e.mem.kept.bytes != page {
		t.Fatalf("%d bytes kept after an idle close, want %d", e.mem.kept.bytes, page)
	}
	_, c := start()
	if &c[0] != &b[0] {
		t.Fatal("the next instance of the size did not take the kept memory")
	}
	if c[100] != 0 {
		t.Fatal("a kept memory was handed on with the earlier instance's bytes")
	}
	if e.mem.kept.bytes != 0 {
		t.Fatalf("%d bytes still kept", e.mem.kept.bytes)
	}
}

const page = 65536
