package preinit

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// This file reads and writes the parts of the WebAssembly binary format
// (core specification, chapter 5) that an image changes: the import,
// memory, global, export, start, data count and data sections are decoded;
// every other section is kept as its bytes, and the code section is only
// scanned for the instructions that rule an image out.

// Section ids.
const (
	secCustom    = 0
	secType      = 1
	secImport    = 2
	secFunction  = 3
	secTable     = 4
	secMemory    = 5
	secGlobal    = 6
	secExport    = 7
	secStart     = 8
	secElement   = 9
	secCode      = 10
	secData      = 11
	secDataCount = 12
	secTag       = 13
)

// order is where each known section goes: sections must come in this order
// (custom sections may go anywhere).
var order = map[byte]int{
	secType: 1, secImport: 2, secFunction: 3, secTable: 4, secMemory: 5, secTag: 6,
	secGlobal: 7, secExport: 8, secStart: 9, secElement: 10, secDataCount: 11,
	secCode: 12, secData: 13,
}

// External kinds of imports and exports.
const (
	kindFunc   = 0
	kindTable  = 1
	kindMemory = 2
	kindGlobal = 3
)

// Value types.
const (
	valI32       = 0x7f
	valI64       = 0x7e
	valF32       = 0x7d
	valF64       = 0x7c
	valV128      = 0x7b
	valFuncref   = 0x70
	valExternref = 0x6f
)

var errDecode = errors.New("malformed module")

type section struct {
	id   byte
	body []byte
}

type importEntry struct {
	module, name string
	kind         byte
	mutable      bool // a global's
}

type limits struct {
	flags    byte
	min, max uint32
}

type global struct {
	typ     byte
	mutable bool
	init    []byte // the constant expression, its end included
}

type export struct {
	name string
	kind byte
	idx  uint32
}

type dataSegment struct {
	passive bool
}

// module is a decoded module: its sections in order, and what was decoded
// of them.
type module struct {
	sections  []section
	imports   []importEntry
	importedG uint32 // imported globals
	memories  []limits
	globals   []global
	exports   []export
	hasStart  bool
	dataCount bool
	data      []dataSegment
	// tableWrite and dataInstr name the first instruction found in the
	// code that changes a table, or that uses a data segment at run time.
	tableWrite, dataInstr string
}

// reader decodes from a byte slice; the first error sticks.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: "+format, append([]any{errDecode}, args...)...)
	}
}

func (r *reader) byte() byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) == 0 {
		r.fail("unexpected end")
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) bytes(n uint64) []byte {
	if r.err != nil {
		return nil
	}
	if uint64(len(r.b)) < n {
		r.fail("unexpected end")
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

// uleb reads an unsigned LEB128 of at most bits bits.
func (r *reader) uleb(bits uint) uint64 {
	var v uint64
	for shift := uint(0); ; shift += 7 {
		c := r.byte()
		if r.err != nil {
			return 0
		}
		if shift >= bits || (shift+7 > bits && c&0x7f>>(bits-shift) != 0) {
			r.fail("LEB128 too long")
			return 0
		}
		v |= uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			return v
		}
	}
}

func (r *reader) u32() uint32 { return uint32(r.uleb(32)) }

// sleb reads a signed LEB128 of at most bits bits.
func (r *reader) sleb(bits uint) int64 {
	var v int64
	var shift uint
	for {
		c := r.byte()
		if r.err != nil {
			return 0
		}
		if shift >= bits {
			r.fail("LEB128 too long")
			return 0
		}
		v |= int64(c&0x7f) << shift
		shift += 7
		if c&0x80 == 0 {
			if shift < 64 && c&0x40 != 0 {
				v |= -1 << shift
			}
			return v
		}
	}
}

func (r *reader) name() string {
	b := r.bytes(uint64(r.u32()))
	if r.err == nil && !utf8.Valid(b) {
		r.fail("name is not UTF-8")
	}
	return string(b)
}

func (r *reader) limits() limits {
	l := limits{flags: r.byte()}
	l.min = r.u32()
	if l.flags&1 != 0 {
		l.max = r.u32()
	}
	return l
}

// parse decodes a module.
func parse(wasm []byte) (*module, error) {
	if len(wasm) < 8 || string(wasm[:4]) != "\x00asm" || string(wasm[4:8]) != "\x01\x00\x00\x00" {
		return nil, fmt.Errorf("%w: not a WebAssembly 1.0 binary", errDecode)
	}
	m := &module{}
	r := &reader{b: wasm[8:]}
	last := 0
	for len(r.b) > 0 && r.err == nil {
		id := r.byte()
		body := r.bytes(uint64(r.u32()))
		if r.err != nil {
			break
		}
		if id != secCustom {
			o, ok := order[id]
			if !ok {
				return nil, fmt.Errorf("%w: unknown section %d", errDecode, id)
			}
			if o <= last {
				return nil, fmt.Errorf("%w: section %d out of order", errDecode, id)
			}
			last = o
		}
		m.sections = append(m.sections, section{id, body})
		if err := m.decode(id, body); err != nil {
			return nil, err
		}
	}
	if r.err != nil {
		return nil, r.err
	}
	return m, nil
}

func (m *module) decode(id byte, body []byte) error {
	r := &reader{b: body}
	switch id {
	case secImport:
		for n := r.u32(); n > 0 && r.err == nil; n-- {
			e := importEntry{module: r.name(), name: r.name(), kind: r.byte()}
			switch e.kind {
			case kindFunc:
				r.u32()
			case kindTable:
				r.byte()
				r.limits()
			case kindMemory:
				r.limits()
			case kindGlobal:
				r.byte()
				e.mutable = r.byte() == 1
				m.importedG++
			default:
				r.fail("import kind %d", e.kind)
			}
			m.imports = append(m.imports, e)
		}
	case secMemory:
		for n := r.u32(); n > 0 && r.err == nil; n-- {
			m.memories = append(m.memories, r.limits())
		}
	case secGlobal:
		for n := r.u32(); n > 0 && r.err == nil; n-- {
			g := global{typ: r.byte(), mutable: r.byte() == 1}
			g.init = r.constExpr()
			m.globals = append(m.globals, g)
		}
	case secExport:
		for n := r.u32(); n > 0 && r.err == nil; n-- {
			m.exports = append(m.exports, export{name: r.name(), kind: r.byte(), idx: r.u32()})
		}
	case secStart:
		r.u32()
		m.hasStart = true
	case secDataCount:
		r.u32()
		m.dataCount = true
	case secData:
		for n := r.u32(); n > 0 && r.err == nil; n-- {
			var s dataSegment
			switch flags := r.u32(); flags {
			case 0:
				r.constExpr()
			case 1:
				s.passive = true
			case 2:
				r.u32()
				r.constExpr()
			default:
				r.fail("data segment flags %d", flags)
			}
			r.bytes(uint64(r.u32()))
			m.data = append(m.data, s)
		}
	case secCode:
		for n := r.u32(); n > 0 && r.err == nil; n-- {
			body := &reader{b: r.bytes(uint64(r.u32()))}
			for groups := body.u32(); groups > 0 && body.err == nil; groups-- {
				body.u32()
				body.byte()
			}
			for len(body.b) > 0 && body.err == nil {
				switch op := body.instr(); op {
				case "table.set", "table.grow", "table.fill", "table.copy", "table.init", "elem.drop":
					if m.tableWrite == "" {
						m.tableWrite = op
					}
				case "memory.init", "data.drop":
					if m.dataInstr == "" {
						m.dataInstr = op
					}
				}
			}
			if body.err != nil {
				return body.err
			}
		}
	default:
		return nil
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail("section %d has %d bytes too many", id, len(r.b))
	}
	return r.err
}

// constExpr reads a constant expression and returns it, its end included.
func (r *reader) constExpr() []byte {
	start := r.b
	for r.err == nil {
		if r.instr() == "end" && r.err == nil {
			// Only a constant expression's own end is read here: constant
			// expressions have no blocks.
			return start[:len(start)-len(r.b)]
		}
	}
	return nil
}

// instr reads one instruction and returns the name of those the caller
// looks for ("end", and those that change tables or use data segments),
// or "" for any other.
func (r *reader) instr() string {
	op := r.byte()
	if r.err != nil {
		return ""
	}
	switch {
	case op == 0x0b:
		return "end"
	case op <= 0x01, op == 0x05, op == 0x0f, op == 0x1a, op == 0x1b, op >= 0x45 && op <= 0xc4, op == 0xd1:
		// no immediates
	case op >= 0x02 && op <= 0x04: // block, loop, if
		if len(r.b) > 0 && (r.b[0] == 0x40 || isValType(r.b[0])) {
			r.byte()
		} else {
			r.sleb(33)
		}
	case op == 0x0c, op == 0x0d, op == 0x10, op == 0x12, op >= 0x20 && op <= 0x24, op == 0x25, op == 0xd2:
		r.u32()
	case op == 0x26:
		r.u32()
		return "table.set"
	case op == 0x0e: // br_table
		for n := r.u32(); n > 0 && r.err == nil; n-- {
			r.u32()
		}
		r.u32()
	case op == 0x11, op == 0x13: // call_indirect, return_call_indirect
		r.u32()
		r.u32()
	case op == 0x1c: // select t*
		for n := r.u32(); n > 0 && r.err == nil; n-- {
			r.byte()
		}
	case op >= 0x28 && op <= 0x3e:
		r.memarg()
	case op == 0x3f, op == 0x40:
		r.u32()
	case op == 0x41:
		r.sleb(32)
	case op == 0x42:
		r.sleb(64)
	case op == 0x43:
		r.bytes(4)
	case op == 0x44:
		r.bytes(8)
	case op == 0xd0:
		r.byte()
	case op == 0xfc:
		switch sub := r.u32(); {
		case sub <= 7:
		case sub == 8:
			r.u32()
			r.u32()
			return "memory.init"
		case sub == 9:
			r.u32()
			return "data.drop"
		case sub == 10:
			r.u32()
			r.u32()
		case sub == 11:
			r.u32()
		case sub == 12:
			r.u32()
			r.u32()
			return "table.init"
		case sub == 13:
			r.u32()
			return "elem.drop"
		case sub == 14:
			r.u32()
			r.u32()
			return "table.copy"
		case sub == 15:
			r.u32()
			return "table.grow"
		case sub == 16:
			r.u32()
		case sub == 17:
			r.u32()
			return "table.fill"
		default:
			r.fail("instruction 0xfc %d", sub)
		}
	case op == 0xfd: // SIMD
		switch sub := r.u32(); {
		case sub <= 11, sub == 92, sub == 93:
			r.memarg()
		case sub == 12, sub == 13:
			r.bytes(16)
		case sub >= 21 && sub <= 34:
			r.byte()
		case sub >= 84 && sub <= 91:
			r.memarg()
			r.byte()
		case sub <= 0xff || sub >= 0x100 && sub <= 0x113:
		default:
			r.fail("instruction 0xfd %d", sub)
		}
	case op == 0xfe: // threads
		if sub := r.u32(); sub == 3 {
			r.byte()
		} else {
			r.memarg()
		}
	default:
		r.fail("instruction 0x%02x", op)
	}
	return ""
}

func (r *reader) memarg() {
	align := r.u32()
	if align&(1<<6) != 0 { // multi-memory: a memory index follows
		r.u32()
	}
	r.uleb(64)
}

func isValType(b byte) bool {
	switch b {
	case valI32, valI64, valF32, valF64, valV128, valFuncref, valExternref:
		return true
	}
	return false
}

// Encoding.

func appendULEB(b []byte, v uint64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			b = append(b, c|0x80)
			continue
		}
		return append(b, c)
	}
}

func appendSLEB(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func appendName(b []byte, s string) []byte {
	return append(appendULEB(b, uint64(len(s))), s...)
}

func appendLimits(b []byte, l limits) []byte {
	b = append(b, l.flags)
	b = appendULEB(b, uint64(l.min))
	if l.flags&1 != 0 {
		b = appendULEB(b, uint64(l.max))
	}
	return b
}

// constOf is the constant expression of a global of type typ whose value
// has the bits v.
func constOf(typ byte, v uint64) []byte {
	switch typ {
	case valI32:
		return append(appendSLEB([]byte{0x41}, int64(int32(uint32(v)))), 0x0b)
	case valI64:
		return append(appendSLEB([]byte{0x42}, int64(v)), 0x0b)
	case valF32:
		b := []byte{0x43, 0, 0, 0, 0, 0x0b}
		putLE(b[1:5], v)
		return b
	case valF64:
		b := []byte{0x44, 0, 0, 0, 0, 0, 0, 0, 0, 0x0b}
		putLE(b[1:9], v)
		return b
	}
	panic("preinit: no constant of type " + fmt.Sprint(typ))
}

func putLE(b []byte, v uint64) {
	for i := range b {
		b[i] = byte(v >> (8 * i))
	}
}

func encodeGlobals(gs []global) []byte {
	b := appendULEB(nil, uint64(len(gs)))
	for _, g := range gs {
		mut := byte(0)
		if g.mutable {
			mut = 1
		}
		b = append(b, g.typ, mut)
		b = append(b, g.init...)
	}
	return b
}

func encodeExports(es []export) []byte {
	b := appendULEB(nil, uint64(len(es)))
	for _, e := range es {
		b = appendName(b, e.name)
		b = append(b, e.kind)
		b = appendULEB(b, uint64(e.idx))
	}
	return b
}

func encodeMemories(ls []limits) []byte {
	b := appendULEB(nil, uint64(len(ls)))
	for _, l := range ls {
		b = appendLimits(b, l)
	}
	return b
}

// encode writes a module of the given sections.
func encode(sections []section) []byte {
	n := 8
	for _, s := range sections {
		n += 1 + 5 + len(s.body)
	}
	b := make([]byte, 0, n)
	b = append(b, "\x00asm\x01\x00\x00\x00"...)
	for _, s := range sections {
		b = append(b, s.id)
		b = appendULEB(b, uint64(len(s.body)))
		b = append(b, s.body...)
	}
	return b
}

// withSection returns sections with s in place of the section of its id,
// or inserted where its id goes; a nil body removes the section.
func withSection(sections []section, id byte, body []byte) []section {
	out := make([]section, 0, len(sections)+1)
	done := false
	for _, s := range sections {
		if s.id == id {
			if body != nil {
				out = append(out, section{id, body})
			}
			done = true
			continue
		}
		if !done && body != nil && s.id != secCustom && order[s.id] > order[id] {
			out = append(out, section{id, body})
			done = true
		}
		out = append(out, s)
	}
	if !done && body != nil {
		// After the last non-custom section, ahead of trailing custom ones.
		i := len(out)
		for i > 0 && out[i-1].id == secCustom {
			i--
		}
		out = append(out[:i], append([]section{{id, body}}, out[i:]...)...)
	}
	return out
}
