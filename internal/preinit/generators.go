package preinit

import (
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"

	"github.com/tetratelabs/wazero/api"
)

// Seeds of a Go runtime in an image (docs/design.md#images-and-seeds).
//
// A Go program reads 32 random bytes once as its runtime starts, keys its
// global generator with them, and seeds from that the generator of its
// thread (on wasip1, the only one) and a cheaper one beside it; from then
// on math/rand, math/rand/v2, map iteration and new maps' hash seeds draw
// from those. Every instance of an image would draw the same numbers. The
// generators are ChaCha8 (the C2SP chacha8rand design that
// internal/chacha8rand implements and math/rand/v2.ChaCha8 exposes), held
// as a state of 32 buffered outputs, a 4-word key and three counters:
//
//	offset   0  buf  [32]uint64: the block of the key at counter c
//	offset 256  seed [4]uint64:  the key
//	offset 288  i, n, c uint32:  next output, outputs in buf, counter
//
// A state is recognised by its own arithmetic: buf must be the block its
// key makes at its counter, which nothing else in memory is by chance.
// The initialisation runs twice, on different random numbers, and a
// generator counts only if both runs hold one at the same offset with
// different keys: seeded from what was read, not a generator the program
// keyed with a constant of its own (whose sequence it means to repeat).
// Reseed then writes, in each instance before any of its code runs, a
// freshly keyed state at each, and fresh bytes in the word after one where
// the two runs differed there too (the thread's cheap generator).

// Generator is where an image's memory holds a random number generator's
// state that the initialisation seeded from what it read.
type Generator struct {
	// Offset is the state's offset in the memory.
	Offset uint32
	// Cheap: the 8 bytes after the state (at Offset+CheapOffset) differ
	// between the two runs too: a generator seeded along with it (a Go
	// thread's cheaprand), given fresh bytes as well.
	Cheap bool
}

const (
	// stateSize is a ChaCha8 state's size: buf, seed, i, n and c.
	stateSize = 300
	// CheapOffset is where, after a state, the word Generator.Cheap names
	// starts: the state padded to 8 bytes.
	CheapOffset = 304
	// goRuntimeRandomReads and goRuntimeRandomBytes are how a Go runtime
	// reads random numbers as it starts: once, 32 bytes.
	goRuntimeRandomReads = 1
	goRuntimeRandomBytes = 32
)

// stateAt reports whether mem holds a ChaCha8 state at off, and its key.
func stateAt(mem []byte, off int) (key [32]byte, ok bool) {
	if off < 0 || off+stateSize > len(mem) {
		return key, false
	}
	s := mem[off : off+stateSize]
	i, n, c := binary.LittleEndian.Uint32(s[288:]), binary.LittleEndian.Uint32(s[292:]), binary.LittleEndian.Uint32(s[296:])
	switch {
	case c == 12 && n == 28: // the last block before the key is replaced
	case (c == 0 || c == 4 || c == 8) && n == 32:
	default:
		return key, false
	}
	if i > n {
		return key, false
	}
	copy(key[:], s[256:288])
	if key == ([32]byte{}) {
		return key, false
	}
	// The outputs of the key from counter 0 are its blocks in turn, each
	// 32 words but the last (28): buf must be the block at c.
	g := rand.NewChaCha8(key)
	for range c / 4 * 32 {
		g.Uint64()
	}
	for k := range int(n) {
		if g.Uint64() != binary.LittleEndian.Uint64(s[8*k:]) {
			return key, false
		}
	}
	return key, true
}

// findGenerators returns the generators that memories a and b, of two runs
// of one initialisation on different random numbers, hold at the same
// offset with different keys.
func findGenerators(a, b []byte) []Generator {
	var gens []Generator
	for off := 0; off+stateSize <= min(len(a), len(b)); off += 8 {
		// Cheap tests first: the counters of a state.
		if binary.LittleEndian.Uint32(a[off+292:]) < 28 || binary.LittleEndian.Uint32(b[off+292:]) < 28 {
			continue
		}
		ka, ok := stateAt(a, off)
		if !ok {
			continue
		}
		kb, ok := stateAt(b, off)
		if !ok || ka == kb {
			continue
		}
		g := Generator{Offset: uint32(off)}
		if end := off + CheapOffset + 8; end <= len(a) && end <= len(b) {
			g.Cheap = string(a[off+CheapOffset:end]) != string(b[off+CheapOffset:end])
		}
		gens = append(gens, g)
		off += stateSize - stateSize%8 // the next one starts after this one
	}
	return gens
}

// Reseed gives an instance of an image generators of its own: at each of
// gens, a state keyed with 32 bytes read from entropy, as the runtime's
// own Init leaves one (its first block computed, nothing drawn), and for
// a Cheap one 8 more bytes after it. Call it once the instance is made and
// before any of its code runs.
func Reseed(mem api.Memory, gens []Generator, entropy io.Reader) error {
	var buf [CheapOffset + 8]byte
	for _, g := range gens {
		var key [32]byte
		if _, err := io.ReadFull(entropy, key[:]); err != nil {
			return fmt.Errorf("preinit: reseed: %w", err)
		}
		st := buf[:stateSize]
		freshState(st, key)
		if !mem.Write(g.Offset, st) {
			return fmt.Errorf("preinit: reseed: a generator at %d is past the memory's end", g.Offset)
		}
		if g.Cheap {
			cheap := buf[CheapOffset:]
			if _, err := io.ReadFull(entropy, cheap); err != nil {
				return fmt.Errorf("preinit: reseed: %w", err)
			}
			if !mem.Write(g.Offset+CheapOffset, cheap) {
				return fmt.Errorf("preinit: reseed: a generator at %d is past the memory's end", g.Offset)
			}
		}
	}
	return nil
}

// freshState writes into st (stateSize bytes) the state keyed with key as
// the runtime's own Init leaves it: its first block computed, nothing
// drawn.
func freshState(st []byte, key [32]byte) {
	gen := rand.NewChaCha8(key)
	for k := range 32 {
		binary.LittleEndian.PutUint64(st[8*k:], gen.Uint64())
	}
	copy(st[256:288], key[:])
	binary.LittleEndian.PutUint32(st[288:], 0)  // i
	binary.LittleEndian.PutUint32(st[292:], 32) // n
	binary.LittleEndian.PutUint32(st[296:], 0)  // c
}
