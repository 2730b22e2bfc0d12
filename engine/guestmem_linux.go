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
	// image, when set, is mapped copy-on-write over the range's first
	// image.size bytes (see mapImage), which are committed; written is
	// how many of those bytes are pages of the range's own (private
	// copies the last instance wrote, reset to the image's bytes by
	// resetImage), the rest being the image's shared pages.
	image   *imageMemory
	written uint64
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

// scrub makes the range as a fresh reservation whose first keep bytes are
// committed, all of it reading zero, or says false (the range must then be
// released): whatever an instance wrote in it is gone, so the range may
// serve another actor's instance (see memBudget's pool).
//
// Why nothing written survives, by construction: an instance can only have
// written within the committed prefix, since every page past it has been
// PROT_NONE since the range was reserved (a write there faults). That
// prefix is split in two. Its first keep bytes are cleared with stores
// (their pages stay resident, which is the point of reusing the range: the
// next instance's writes fault no page in). The rest, up to what was
// committed, is dropped with madvise(MADV_DONTNEED), after which a private
// anonymous mapping's pages read back as zero-filled pages from the
// system, and made PROT_NONE again, as it was before it was committed.
// keep and the committed size are multiples of the 64 KiB wasm page, so
// the madvise and mprotect ranges are page-aligned.
//
// A range mapped from an image is reset to the image instead (see
// resetImage).
func (r *reservation) scrub(keep uint64) bool {
	if r.image != nil {
		return r.resetImage()
	}
	k := int(min(keep, uint64(r.committed)))
	if k < r.committed {
		tail := r.mem[k:r.committed]
		if unix.Madvise(tail, unix.MADV_DONTNEED) != nil || mprotect(tail, unix.PROT_NONE) != nil {
			return false
		}
		r.committed = k
	}
	clear(r.mem[:k])
	return true
}

// shrink is scrub for a range already scrubbed (all it holds reads zero):
// it only gives back the committed pages past keep, clearing nothing.
//
// A range mapped from an image, shrunk within the image, is no longer
// mapped from it (see unmapImage): nothing of the image stays in it.
func (r *reservation) shrink(keep uint64) bool {
	if r.image != nil && keep < r.image.size {
		r.unmapImage()
		return r.mem != nil
	}
	if keep >= uint64(r.committed) {
		return true
	}
	tail := r.mem[keep:r.committed]
	if unix.Madvise(tail, unix.MADV_DONTNEED) != nil || mprotect(tail, unix.PROT_NONE) != nil {
		return false
	}
	r.committed = int(keep)
	return true
}

// size is the length of the range. held is the memory it holds of its
// own: the bytes committed in it, or for a range mapped from an image, the
// bytes of the pages written (the image's pages are shared by every
// mapping of it).
func (r *reservation) size() uint64 { return uint64(len(r.mem)) }
func (r *reservation) held() uint64 {
	if r.image != nil {
		return r.written + uint64(r.committed) - r.image.size
	}
	return uint64(r.committed)
}

// mapped returns the image the range is mapped from, or nil.
func (r *reservation) mapped() *imageMemory { return r.image }

// release returns the range to the system. Nothing may use it after.
func (r *reservation) release() {
	if r.mem != nil {
		_ = unix.Munmap(r.mem)
	}
	r.mem, r.committed, r.image, r.written = nil, 0, nil, 0
}
