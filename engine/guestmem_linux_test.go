package engine

import (
	"errors"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/wasmkeep/alarms/abi"
)

// mapped says whether the system still has the page at p mapped (msync
// fails with ENOMEM on an address nothing maps).
func mapped(t *testing.T, p *byte) bool {
	t.Helper()
	err := unix.Msync(unsafe.Slice(p, 4096), unix.MS_ASYNC)
	if err != nil && !errors.Is(err, unix.ENOMEM) {
		t.Fatalf("msync: %v", err)
	}
	return err == nil
}

// largeMemory returns the memory of a new instance whose largest size is
// 64 MiB, on an engine of its own with a budget of 1 GiB.
func largeMemory() (*Engine, *guestMemory) {
	e := &Engine{mem: &memBudget{max: 1 << 30}, owned: true}
	return e, &guestMemory{e: e, id: abi.ActorID{Tenant: "t", Class: "c", Name: "a"}, max: 64 << 20}
}

// A memory larger than a kept one grows where it is: its address stays,
// what the guest wrote stays, nothing is copied, and the budget counts
// exactly the bytes asked for (no slack for future growth). Freed in no
// call, its range goes back to the system at once.
func TestALargeMemoryGrowsInPlace(t *testing.T) {
	e, g := largeMemory()
	b := g.Reallocate(2 << 20)
	if len(b) != 2<<20 || g.res == nil {
		t.Fatalf("a 2 MiB memory: %d bytes, reserved %v", len(b), g.res != nil)
	}
	b[0], b[len(b)-1] = 7, 8
	for size := uint64(2<<20) + page; size <= 8<<20; size += page {
		c := g.Reallocate(size)
		if uint64(len(c)) != size {
			t.Fatalf("grown to %d bytes, want %d", len(c), size)
		}
		if unsafe.SliceData(c) != unsafe.SliceData(b) {
			t.Fatalf("growing to %d bytes moved the memory", size)
		}
		if c[0] != 7 || c[2<<20-1] != 8 {
			t.Fatalf("growing to %d bytes lost what was written", size)
		}
		c[size-1] = 9 // the new pages are writable
		if e.mem.used != size {
			t.Fatalf("the budget counts %d bytes for a memory of %d", e.mem.used, size)
		}
	}
	if c := g.Reallocate(64<<20 + page); c != nil {
		t.Fatal("a memory grew past its largest size")
	}
	g.closingIdle()
	g.Free()
	if g.res != nil || e.mem.used != 0 || e.mem.kept.bytes != 0 {
		t.Fatalf("after Free: reserved %v, %d bytes counted, %d kept", g.res != nil, e.mem.used, e.mem.kept.bytes)
	}
	if mapped(t, &b[0]) {
		t.Fatal("the memory's range is still mapped after Free")
	}
}

// A memory freed while guest code runs on it (a runtime closed under a
// running call) keeps its range until the call returns: returned to the
// system at once, the guest's next write would fault and end the process.
func TestALargeMemoryFreedDuringACallIsReleasedWhenTheCallReturns(t *testing.T) {
	e, g := largeMemory()
	b := g.Reallocate(2 << 20)
	g.enter()
	g.Free() // as wazero's runtime.Close does
	if e.mem.used != 0 {
		t.Fatalf("%d bytes still counted after Free", e.mem.used)
	}
	b[len(b)-1]++ // the guest still running writes on
	if g.res == nil || !mapped(t, &b[0]) {
		t.Fatal("the range was released under a running call")
	}
	g.exit()
	if g.res != nil || mapped(t, &b[0]) {
		t.Fatal("the range was not released when the call returned")
	}
}

// Under a limit on the process's address space (ulimit -v), however large,
// no range is reserved: the memory is a Go slice, so that reserved ranges
// never spend the room the Go heap must grow into.
func TestNoRangeIsReservedUnderAnAddressSpaceLimit(t *testing.T) {
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_AS, &old); err != nil {
		t.Fatal(err)
	}
	if old.Cur != unix.RLIM_INFINITY {
		t.Skip("the process already runs under an address space limit")
	}
	limited := old
	limited.Cur = 1 << 62 // finite, and far above anything the test uses
	if err := unix.Setrlimit(unix.RLIMIT_AS, &limited); err != nil {
		t.Fatal(err)
	}
	e, g := largeMemory()
	b := g.Reallocate(2 << 20)
	reserved := g.res != nil
	if err := unix.Setrlimit(unix.RLIMIT_AS, &old); err != nil {
		t.Fatal(err)
	}
	if reserved {
		t.Fatal("a range was reserved under an address space limit")
	}
	if len(b) != 2<<20 || e.mem.used < 2<<20 {
		t.Fatalf("the memory as a Go slice: %d bytes, %d counted", len(b), e.mem.used)
	}
	g.Free()
}

// When the system will not make a reserved range usable (short of memory),
// a new instance's memory is a Go slice instead, and a growth of a memory
// in a range fails as memory.grow (-1 for the guest) without harm to what
// the guest holds.
func TestAReservedRangeTheSystemWillNotCommitFallsBack(t *testing.T) {
	refuse := func([]byte, int) error { return unix.ENOMEM }
	defer func(f func([]byte, int) error) { mprotect = f }(mprotect)

	e, g := largeMemory()
	mprotect = refuse
	b := g.Reallocate(2 << 20)
	if len(b) != 2<<20 || g.res != nil || e.mem.used != 2<<20 {
		t.Fatalf("a new memory the system would not commit: %d bytes, reserved %v, %d counted", len(b), g.res != nil, e.mem.used)
	}
	b[len(b)-1] = 1
	g.Free()

	g = &guestMemory{e: e, id: g.id, max: g.max}
	mprotect = unix.Mprotect
	b = g.Reallocate(2 << 20)
	b[0] = 7
	mprotect = refuse
	if c := g.Reallocate(3 << 20); c != nil {
		t.Fatal("a growth the system would not commit succeeded")
	}
	if g.res == nil || len(g.buf) != 2<<20 || g.buf[0] != 7 {
		t.Fatalf("after a refused growth: reserved %v, %d bytes, first byte %d", g.res != nil, len(g.buf), g.buf[0])
	}
	mprotect = unix.Mprotect
	if c := g.Reallocate(3 << 20); len(c) != 3<<20 || c[0] != 7 {
		t.Fatal("the memory did not grow once the system could commit it")
	}
	g.Free()
	if e.mem.used != 0 {
		t.Fatalf("%d bytes still counted after Free", e.mem.used)
	}
}
