package engine

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// imageMemory is the linear memory of a pre-initialised image (issue 38),
// written once into a sealed memfd: nothing can change the file's bytes or
// its size after it is sealed. Each instance of the image maps it
// copy-on-write over the start of its own address range (mapImage), so an
// instance starts from the image without a byte being copied, reads share
// the file's pages, and each page it writes becomes a private copy of its
// own that no other mapping of the file sees.
type imageMemory struct {
	fd   int
	size uint64 // bytes: the image's memory, a multiple of the wasm page
	// view is a private read-only mapping of the whole file: the image's
	// bytes to copy from (back into the pages an instance wrote, or into
	// a memory that could not be mapped).
	view []byte
}

// newImageMemory writes mem, the memory of an image, into a new sealed
// memfd.
func newImageMemory(mem []byte) (*imageMemory, error) {
	if len(mem) == 0 || len(mem)%wasmPage != 0 {
		return nil, fmt.Errorf("an image memory of %d bytes", len(mem))
	}
	fd, err := unix.MemfdCreate("wasmkeep-image", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING|unix.MFD_NOEXEC_SEAL)
	if err == unix.EINVAL { // a kernel before MFD_NOEXEC_SEAL (6.3)
		fd, err = unix.MemfdCreate("wasmkeep-image", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	}
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	fail := func(what string, err error) (*imageMemory, error) {
		unix.Close(fd)
		return nil, fmt.Errorf("image memory: %s: %w", what, err)
	}
	if err := unix.Ftruncate(fd, int64(len(mem))); err != nil {
		return fail("ftruncate", err)
	}
	// Only the pages that hold something are written: the rest of the
	// file stays a hole, which reads as zeros.
	for off := 0; off < len(mem); off += pageSize {
		p := mem[off : off+pageSize]
		if isZero(p) {
			continue
		}
		if n, err := unix.Pwrite(fd, p, int64(off)); err != nil || n != len(p) {
			return fail("pwrite", fmt.Errorf("%d of %d bytes: %v", n, len(p), err))
		}
	}
	const seals = unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		return fail("seal", err)
	}
	if got, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0); err != nil || got&seals != seals {
		return fail("seals", fmt.Errorf("%#x, %v", got, err))
	}
	view, err := unix.Mmap(fd, 0, len(mem), unix.PROT_READ, unix.MAP_PRIVATE)
	if err != nil {
		return fail("mmap", err)
	}
	m := &imageMemory{fd: fd, size: uint64(len(mem)), view: view}
	// Closed once no class and no range refers to it; a mapping made from
	// it holds the file by itself.
	runtime.AddCleanup(m, func(f imageMemoryFile) {
		_ = unix.Munmap(f.view)
		_ = unix.Close(f.fd)
	}, imageMemoryFile{fd, view})
	return m, nil
}

type imageMemoryFile struct {
	fd   int
	view []byte
}

// bytes returns the size of the image's memory.
func (m *imageMemory) bytes() uint64 { return m.size }

// copyTo writes the image's memory into b (up to the shorter of the two).
func (m *imageMemory) copyTo(b []byte) { copy(b, m.view) }

// pageSize is the system's page: the unit of a mapping, of a
// copy-on-write copy and of /proc/self/pagemap.
var pageSize = os.Getpagesize()

func isZero(b []byte) bool {
	for len(b) >= 8 {
		if binary.NativeEndian.Uint64(b) != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// mmapFixed maps over b where it lies (MAP_FIXED, which replaces whatever
// b held).
func mmapFixed(b []byte, prot, flags, fd int) error {
	_, _, e := unix.Syscall6(unix.SYS_MMAP, uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)),
		uintptr(prot), uintptr(flags|unix.MAP_FIXED), uintptr(fd), 0)
	if e != 0 {
		return e
	}
	return nil
}

// mapFile maps the file fd copy-on-write over b; a test makes it fail as
// a system short of memory would.
var mapFile = func(b []byte, fd int) error {
	return mmapFixed(b, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE, fd)
}

// mapImage maps img copy-on-write over the start of the range, replacing
// whatever the range held there, and leaves nothing committed past it: the
// range reads as the image, and grows past it into fresh zero pages. False
// when it could not: the range is then as a fresh reservation, nothing
// committed, or lost (see lose) if even that could not be restored.
func (r *reservation) mapImage(img *imageMemory) bool {
	n := int(img.size)
	if n > len(r.mem) {
		return false
	}
	if r.image != nil {
		// Another image's (or this one's) mapping may reach past n:
		// none of it may stay.
		if r.unmapImage(); r.mem == nil {
			return false
		}
	}
	if !r.shrink(img.size) {
		return false
	}
	if mapFile(r.mem[:n], img.fd) != nil {
		r.unmapImage()
		return false
	}
	r.image, r.committed, r.written = img, n, 0
	return true
}

// unmapImage makes the range a fresh reservation again, nothing
// committed: the image's mapping and every page committed past it are
// replaced by inaccessible anonymous pages. Should the system refuse, the
// range is lost (see lose).
func (r *reservation) unmapImage() {
	if r.committed > 0 && mmapFixed(r.mem[:r.committed], unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE, -1) != nil {
		r.lose()
		return
	}
	r.image, r.committed, r.written = nil, 0, 0
}

// lose forgets a range whose mapping a failed MAP_FIXED may have left with
// a hole, without unmapping it: the system may since have placed another
// mapping in the hole, which unmapping the range would take away. Its
// address space stays reserved for good (the system refuses a MAP_FIXED
// mapping only when short of memory for its own records).
func (r *reservation) lose() {
	r.mem, r.committed, r.image, r.written = nil, 0, nil, 0
}

// resetImage makes a range mapped from an image read as the image again,
// after an instance ran on it, and says false if it could not (the range
// must then be released). Every page past the image is dropped and made
// inaccessible again, as scrub does. Within the image, a page the instance
// wrote is a private copy (copy-on-write): the file's bytes are copied
// back into it, and it stays in place for the next instance of the image,
// which then writes to it without a page fault. Every other page is still
// the file's, which no one can change (it is sealed).
//
// Which pages were written is read from /proc/self/pagemap: a page is the
// file's when it is present and file-backed, or absent and not swapped out
// (never touched since mapped: it would be read from the file); every
// other page (present and anonymous, swapped out, or anything the kernel
// reports otherwise) gets the image's bytes copied back. Without pagemap,
// every private page is dropped with madvise(MADV_DONTNEED), after which
// the mapping reads the file again.
func (r *reservation) resetImage() bool {
	img := r.image
	n := int(img.size)
	if !r.shrink(img.size) {
		return false
	}
	written, ok := readWritten(r.mem[:n])
	if !ok {
		if unix.Madvise(r.mem[:n], unix.MADV_DONTNEED) != nil {
			return false
		}
		r.written = 0
		return true
	}
	var w uint64
	for _, s := range written {
		copy(r.mem[s[0]:s[1]], img.view[s[0]:s[1]])
		w += uint64(s[1] - s[0])
	}
	r.written = w
	return true
}

// Bits of a /proc/self/pagemap entry.
const (
	pmPresent = 1 << 63
	pmSwapped = 1 << 62
	pmFile    = 1 << 61
)

// readWritten is writtenPages; a test makes it fail as a system without
// /proc/self/pagemap would.
var readWritten = writtenPages

var pagemap = struct {
	once sync.Once
	f    *os.File
	bufs sync.Pool
}{}

// writtenPages returns the byte ranges of b, merged, whose pages are not
// the pages of the file b maps (see resetImage); false when pagemap cannot
// be read.
func writtenPages(b []byte) ([][2]int, bool) {
	pagemap.once.Do(func() {
		pagemap.f, _ = os.Open("/proc/self/pagemap")
	})
	if pagemap.f == nil || len(b)%pageSize != 0 {
		return nil, false
	}
	n := len(b) / pageSize
	bp, _ := pagemap.bufs.Get().(*[]byte)
	if bp == nil || len(*bp) < 8*n {
		bp = new([]byte)
		*bp = make([]byte, 8*n)
	}
	defer pagemap.bufs.Put(bp)
	buf := (*bp)[:8*n]
	at := int64(uintptr(unsafe.Pointer(unsafe.SliceData(b))) / uintptr(pageSize) * 8)
	if got, err := pagemap.f.ReadAt(buf, at); err != nil || got != len(buf) {
		return nil, false
	}
	var out [][2]int
	for i := range n {
		e := binary.NativeEndian.Uint64(buf[8*i:])
		if e&pmPresent != 0 && e&pmFile != 0 && e&pmSwapped == 0 || e&(pmPresent|pmSwapped) == 0 {
			continue // the file's page, or none yet
		}
		start, end := i*pageSize, (i+1)*pageSize
		if l := len(out) - 1; l >= 0 && out[l][1] == start {
			out[l][1] = end
		} else {
			out = append(out, [2]int{start, end})
		}
	}
	return out, true
}
