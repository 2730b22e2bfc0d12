package preinit

// StateAt reports whether mem holds a consistent ChaCha8 state at off.
func StateAt(mem []byte, off int) bool {
	_, ok := stateAt(mem, off)
	return ok
}

// FindGenerators is findGenerators.
var FindGenerators = findGenerators

// FreshState writes a state keyed with key into mem at off.
func FreshState(mem []byte, off int, key [32]byte) { freshState(mem[off:off+stateSize], key) }
