package preinit

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse: decoding any bytes returns a module or an error, never
// panics, and a module decoded writes back to the same bytes.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.wasm"))
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, wasm []byte) {
		m, err := parse(wasm)
		if err != nil {
			return
		}
		_ = m.check()
		if out := encode(m.sections); !bytes.Equal(out, wasm) && canonicalLengths(wasm) {
			t.Errorf("re-encoded module differs")
		}
	})
}

// canonicalLengths reports whether every section length of a parsed
// module is written in its shortest LEB128, as encode writes it.
func canonicalLengths(wasm []byte) bool {
	r := &reader{b: wasm[8:]}
	for len(r.b) > 0 {
		r.byte()
		before := len(r.b)
		n := r.u32()
		if before-len(r.b) != len(appendULEB(nil, uint64(n))) {
			return false
		}
		r.bytes(uint64(n))
	}
	return true
}
