package engine

import (
	"math"
	"unsafe"

	"golang.org/x/sys/unix"
)

// reservation is a range of address space reserved for one instance's
// linear memory, up to the largest it may grow to. Its pages are
// inaccessible until committed; committing more makes them readable and
// writable where they are, so a memory.grow copies nothing and moves
// nothing, and the pages the instance already touched stay as they are.
// Released, the range goes back to the system at once, whatever the Go
// heap is doing.
type reservation struct {
	mem       []byte // the whole range
	committed int    // bytes from the start that are readable and writable
}

// reserve reserves n bytes of address space (no memory is committed, nor
// counted by the system against its overcommit limit), or returns nil (a
// size past what an int holds, on a 32-bit system, included: the memory
// is then a Go slice).
func reserve(n uint64) *reservation {
	if n == 0 || n > 1<<40 || n > math.MaxInt || addressSpaceLimited() {
		return nil
	}
	b, err := unix.Mmap(-1, 0, int(n), unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return nil
	}
	return &reservation{mem: b}
}

// grow makes the first size bytes usable and returns them, or nil when the
// range is too short or the system refuses.
func (r *reservation) grow(size uint64) []byte {
	if size > uint64(len(r.mem)) {
		return nil
	}
	if n := int(size); n > r.committed {
		if err := mprotect(r.mem[r.committed:n], unix.PROT_READ|unix.PROT_WRITE); err != nil {
			return nil
		}
		r.committed = n
	}
	return unsafe.Slice(unsafe.SliceData(r.mem), size)[:size:size]
}

// mprotect is unix.Mprotect; a test makes it fail as a system short of
// memory would.
var mprotect = unix.Mprotect

// addressSpaceLimited says whether the process runs under a limit on its
// address space (RLIMIT_AS, ulimit -v). Under one, no range is reserved:
// ranges reserved up to each instance's largest size would spend the
// limit that the Go heap, and everything else, must grow into.
func addressSpaceLimited() bool {
	var l unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_AS, &l); err != nil {
		return true
	}
	return l.Cur != unix.RLIM_INFINITY
}

// release returns the range to the system. Nothing may use it after.
func (r *reservation) release() {
	_ = unix.Munmap(r.mem)
	r.mem, r.committed = nil, 0
}
