package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"unsafe"

	"github.com/tetratelabs/wazero"

	"github.com/wasmkeep/alarms/abi"
)

// imageBytes returns the memory of an image of n pages: each 4 KiB page
// starts and ends with a byte of its own and of seed, every third page is
// all zero (a hole in the file), and the last byte is seed.
func imageBytes(n int, seed byte) []byte {
	b := make([]byte, n*page)
	for p := 0; p < len(b)/4096; p++ {
		if p%3 == 2 {
			continue
		}
		b[p*4096] = byte(p) ^ seed
		b[p*4096+100] = seed
		b[p*4096+4095] = byte(p>>8) | 1
	}
	b[len(b)-1] = seed
	return b
}

func newTestImage(t *testing.T, n int, seed byte) (*imageMemory, []byte) {
	t.Helper()
	want := imageBytes(n, seed)
	img, err := newImageMemory(bytes.Clone(want))
	if err != nil {
		t.Fatal(err)
	}
	return img, want
}

// startImageInstance starts an instance of c, a module without data, on a
// memory that starts from img, as the engine starts an instance of a
// class whose image is mapped.
func startImageInstance(t *testing.T, e *Engine, r wazero.Runtime, c wazero.CompiledModule, img *imageMemory) *poolInstance {
	t.Helper()
	g := &guestMemory{e: e, id: abi.ActorID{Tenant: "t", Class: "c", Name: "a"}, image: img}
	mod, err := r.InstantiateModule(g.with(context.Background()), c, wazero.NewModuleConfig().WithName(""))
	if err != nil {
		t.Fatal(err)
	}
	return &poolInstance{t: t, g: g, mod: mod}
}

// is fails unless the memory, as read and as the guest loads each page's
// first and last byte, is want followed by zeros.
func (p *poolInstance) is(want []byte, when string) {
	p.t.Helper()
	b, _ := p.all()
	if len(b) < len(want) {
		p.t.Fatalf("%s: a memory of %d bytes, want at least %d", when, len(b), len(want))
	}
	if i := firstDiff(b[:len(want)], want); i >= 0 {
		p.t.Fatalf("%s: byte %d is %#x, want the image's %#x", when, i, b[i], want[i])
	}
	if i := bytes.IndexFunc(b[len(want):], func(r rune) bool { return r != 0 }); i >= 0 {
		p.t.Fatalf("%s: byte %d past the image is not zero", when, len(want)+i)
	}
	for a := 0; a < len(b); a += 4096 {
		for _, at := range []int{a, a + 4095} {
			w := byte(0)
			if at < len(want) {
				w = want[at]
			}
			if got := p.call("load", uint64(at)); got != uint64(w) {
				p.t.Fatalf("%s: the guest loads %#x at %d, want %#x", when, got, at, w)
			}
		}
	}
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// Instances started from one mapped image: each starts as the image, and
// none sees what another writes, neither in the image's pages (those the
// file holds and its holes) nor in the pages it grows into; the image's
// file is never changed. A closed instance's range, pooled, serves the
// next instance of the image as the image again; of another image, as
// that image, nothing of the first left past its end; of no image, as
// zeros.
func TestInstancesOfAMappedImageShareNothing(t *testing.T) {
	ctx := context.Background()
	e := &Engine{mem: newMemBudget(1 << 30), owned: true}
	r := wazero.NewRuntime(ctx)
	defer r.Close(ctx)
	compile := func(min, max byte) wazero.CompiledModule {
		c, err := r.CompileModule(ctx, poolModule(min, max))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	big := compile(32, 128) // 2 MiB, up to 8
	img, want := newTestImage(t, 32, 0x5a)
	if img.bytes() != 2<<20 {
		t.Fatalf("an image of %d bytes", img.bytes())
	}

	a := startImageInstance(t, e, r, big, img)
	b := startImageInstance(t, e, r, big, img)
	for _, p := range []*poolInstance{a, b} {
		if p.g.res == nil || p.g.res.mapped() != img {
			t.Fatal("the instance's memory is not mapped from the image")
		}
	}
	a.is(want, "a new instance")
	b.is(want, "a second new instance")
	_, at := a.all()

	// a writes in every page, b in some; each sees its own writes only.
	a.dirty(0xaa)
	b.call("store", 0, 0xbb)
	b.call("store", 2*4096+7, 0xbb) // a hole of the file
	bw := bytes.Clone(want)
	bw[0], bw[2*4096+7] = 0xbb, 0xbb
	b.is(bw, "after a wrote to every page")
	if got := a.call("load", 2*4096+7); got != 0xaa {
		t.Fatalf("a loads %#x where it wrote 0xaa, after b's store", got)
	}

	// Each grows; the new pages are zero and its own.
	if a.call("grow", 16) != 32 || b.call("grow", 16) != 32 {
		t.Fatal("the instances did not grow")
	}
	a.call("store", 40*page, 0xcc)
	b.is(bw, "after both grew and a wrote to its new page")
	if a.call("load", 40*page) != 0xcc || a.call("load", 40*page+1) != 0 {
		t.Fatal("a's grown page does not hold what it wrote")
	}
	if !bytes.Equal(img.view, want) {
		t.Fatal("the image's file changed")
	}

	// b is closed by wazero, not idle: its range is released, and the
	// pool holds a's range alone below.
	if err := b.mod.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// a closes in no call: its range is pooled, mapped from the image,
	// holding the pages a wrote, reset to the image's bytes.
	a.close()
	if len(e.mem.pool) != 1 || e.mem.pool[0].mapped() != img {
		t.Fatalf("%d ranges pooled after a closed", len(e.mem.pool))
	}
	if m := e.Memory(); m.Pooled == 0 || m.Pooled > 2<<20 {
		t.Fatalf("a pooled image range holds %d bytes, want its written pages, at most the image", m.Pooled)
	}
	c := startImageInstance(t, e, r, big, img)
	if _, p := c.all(); p != at {
		t.Fatal("the next instance of the image did not take a's range")
	}
	if c.g.res.mapped() != img || c.call("size") != 32 {
		t.Fatal("a pooled range is not the image again")
	}
	c.is(want, "an instance on a's range")
	if c.call("grow", 96) != 32 {
		t.Fatal("the instance on a's range did not grow")
	}
	c.is(want, "an instance on a's range, grown to the module's maximum")
	if uint32(c.call("grow", 1)) != 0xffffffff {
		t.Fatal("the memory grew past the module's maximum")
	}
	c.dirty(0xdd)
	c.close()

	// The range of an image serves an instance of another image, shorter:
	// it is that image, and past its end, zeros (not the first image's
	// pages).
	other, wantOther := newTestImage(t, 24, 0x33)
	d := startImageInstance(t, e, r, compile(24, 128), other)
	if _, p := d.all(); p != at || d.g.res.mapped() != other {
		t.Fatal("an instance of another image did not take the pooled range, mapped from its image")
	}
	d.is(wantOther, "an instance of another image")
	if d.call("grow", 8) != 24 {
		t.Fatal("the other image's instance did not grow")
	}
	d.is(wantOther, "an instance of another image, grown over where the first image ended")
	d.dirty(0xee)
	d.close()

	// And an instance of no image: zeros.
	z := startPoolInstance(t, e, r, compile(32, 64))
	if _, p := z.all(); p != at || z.g.res.mapped() != nil {
		t.Fatal("an instance of no image did not take the pooled range, unmapped")
	}
	z.zero("an instance of no image on an image's range")
	if z.call("grow", 32) != 32 {
		t.Fatal("the instance of no image did not grow")
	}
	z.zero("an instance of no image on an image's range, grown")
	z.close()
	if !bytes.Equal(img.view, want) || !bytes.Equal(other.view, wantOther) {
		t.Fatal("an image's file changed")
	}
	for _, r := range e.mem.shut() {
		r.release()
	}
}

// Where the image cannot be mapped (the system refuses) or pagemap cannot
// be read, an instance still starts as the image, and what one wrote never
// reaches the next.
func TestAnImageThatCannotBeMappedIsCopied(t *testing.T) {
	ctx := context.Background()
	r := wazero.NewRuntime(ctx)
	defer r.Close(ctx)
	c, err := r.CompileModule(ctx, poolModule(32, 64))
	if err != nil {
		t.Fatal(err)
	}
	img, want := newTestImage(t, 32, 0x77)

	t.Run("no pagemap", func(t *testing.T) {
		defer func(f func([]byte) ([][2]int, bool)) { readWritten = f }(readWritten)
		readWritten = func([]byte) ([][2]int, bool) { return nil, false }
		e := &Engine{mem: newMemBudget(1 << 30), owned: true}
		a := startImageInstance(t, e, r, c, img)
		a.dirty(0x11)
		a.close()
		if len(e.mem.pool) != 1 || e.Memory().Pooled != 0 {
			t.Fatalf("%d ranges pooled, %d bytes: want one, its written pages dropped", len(e.mem.pool), e.Memory().Pooled)
		}
		b := startImageInstance(t, e, r, c, img)
		if b.g.res.mapped() != img {
			t.Fatal("the pooled range is not mapped from the image")
		}
		b.is(want, "the next instance")
		b.close()
		for _, r := range e.mem.shut() {
			r.release()
		}
	})

	t.Run("the mapping refused", func(t *testing.T) {
		defer func(f func([]byte, int) error) { mapFile = f }(mapFile)
		mapFile = func([]byte, int) error { return errors.New("refused") }
		e := &Engine{mem: newMemBudget(1 << 30), owned: true}
		a := startImageInstance(t, e, r, c, img)
		if a.g.res != nil && a.g.res.mapped() != nil {
			t.Fatal("a refused mapping is mapped")
		}
		a.is(want, "an instance whose image could not be mapped")
		a.dirty(0x22)
		a.close()
		b := startImageInstance(t, e, r, c, img)
		b.is(want, "the next instance whose image could not be mapped")
		b.close()
		for _, r := range e.mem.shut() {
			r.release()
		}
	})
}

// resetImage copies the image back into exactly the pages an instance
// wrote, as pagemap tells them, and leaves the image's own pages shared.
func TestResetCopiesBackTheWrittenPages(t *testing.T) {
	img, want := newTestImage(t, 32, 0x42)
	res := reserve(64 << 20)
	if res == nil {
		t.Skip("no range can be reserved")
	}
	defer res.release()
	if !res.mapImage(img) {
		t.Fatal("the image was not mapped")
	}
	b := res.grow(img.bytes())
	sum := 0
	for i := 0; i < len(b); i += 4096 {
		sum += int(b[i]) // read every page: the file's pages, not written
	}
	written := []int{0, 1, 5, 2*4096 + 3, 31 * page}
	for _, at := range written {
		b[at]++
	}
	got, ok := writtenPages(b)
	if !ok {
		t.Skip("no /proc/self/pagemap")
	}
	wantRuns := [][2]int{{0, 4096}, {2 * 4096, 3 * 4096}, {31 * page, 31*page + 4096}}
	if pageSize != 4096 {
		t.Skipf("pages of %d bytes", pageSize)
	}
	if fmt.Sprint(got) != fmt.Sprint(wantRuns) {
		t.Fatalf("written pages %v, want %v (read %d)", got, wantRuns, sum)
	}
	if !res.resetImage() {
		t.Fatal("reset failed")
	}
	if res.held() != 3*4096 {
		t.Fatalf("the reset range holds %d bytes of its own, want 3 pages", res.held())
	}
	if i := firstDiff(b, want); i >= 0 {
		t.Fatalf("byte %d not reset", i)
	}
	if p := unsafe.SliceData(res.mem); p != unsafe.SliceData(b) {
		t.Fatal("the range moved")
	}
}
