package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
)

// ReadAlarm reads the committed alarm of the actor database at path, for a
// host's start-up scan: its time in Unix milliseconds and whether one is set.
//
// A closed database is its file and the committed frames its WAL keeps
// (see OpenStore). ReadAlarm reads the alarm row from them directly, two
// pages, the newest committed frame of each taking the place of the file's
// page, as SQLite's recovery of the WAL would (valid frames: the salts of
// the WAL header, and checksums that verify from the first frame on; the
// state is that of the last commit frame among them). It does not open the
// database through SQLite, which costs far more than the read. Whenever
// that is not certain (a rollback journal with content beside the file, a
// WAL whose header is not one SQLite would recover, or any layout it does
// not expect) it opens the database through SQLite instead. Either way the
// database is the only source: nothing is cached beside it. No database may
// be open for writing on path meanwhile. A database whose schema version
// (its header's user_version, in the file or the WAL) is newer than this
// build reads is refused, as OpenStore refuses it: an error wrapping a
// *format.NewerError, nothing of it read past its header.
func ReadAlarm(path string) (atMs int64, ok bool, err error) {
	atMs, ok, done, err := readAlarmFile(path)
	if err != nil {
		return 0, false, err
	}
	if done {
		return atMs, ok, nil
	}
	st, err := OpenStore(path)
	if err != nil {
		return 0, false, err
	}
	defer st.Close()
	atMs, ok, err = st.Alarm()
	if err != nil {
		return 0, false, fmt.Errorf("read alarm %s: %w", path, err)
	}
	return atMs, ok, nil
}

// errLayout says the file is not laid out as readAlarmFile expects: SQLite
// reads it instead.
var errLayout = errors.New("unexpected layout")

// maxWALRead is the largest WAL readAlarmFile reads; past it SQLite does.
// Stores keep theirs far smaller (walCheckpointPages, closeCheckpointBytes).
const maxWALRead = 4 << 20

// readAlarmFile reads the alarm from the database file and its WAL. done is
// false when only SQLite can say (a journal with content, a WAL it does not
// read, an unexpected layout); err is set only for an I/O error on a file
// it could read.
func readAlarmFile(path string) (atMs int64, ok, done bool, err error) {
	if fi, err := os.Stat(path + "-journal"); err == nil && fi.Size() > 0 {
		return 0, false, false, nil
	} else if err != nil && !os.IsNotExist(err) {
		return 0, false, false, nil
	}
	f, err := openScanFile(path)
	if err != nil {
		return 0, false, false, nil
	}
	defer f.Close()
	bp := walBufs.Get().(*[]byte)
	defer walBufs.Put(bp)
	wal, err := readWALFile(path+"-wal", bp)
	if err != nil {
		return 0, false, false, nil
	}
	atMs, ok, err = readAlarmRow(f, wal)
	if errors.Is(err, errLayout) {
		return 0, false, false, nil
	}
	if err != nil {
		return 0, false, false, fmt.Errorf("read alarm %s: %w", path, err)
	}
	return atMs, ok, true, nil
}

// walBufs holds the buffers WALs are read into (*[]byte), one per scan
// reader at a time.
var walBufs = sync.Pool{New: func() any { return new([]byte) }}

// readWALFile reads the WAL at path into *buf (grown as needed) and its
// committed frames: nil without a WAL or a committed frame, errLayout for
// one it leaves to SQLite (too large, or see readWAL) or that it cannot
// read.
func readWALFile(path string, buf *[]byte) (*walPages, error) {
	w, err := openScanFile(path)
	if os.IsNotExist(err) {
		return nil, nil
	} else if err != nil {
		return nil, errLayout
	}
	defer w.Close()
	size, err := w.Size()
	switch {
	case err != nil || size > maxWALRead:
		return nil, errLayout
	case size == 0:
		return nil, nil
	}
	n := int(size)
	if cap(*buf) < n {
		*buf = make([]byte, n)
	}
	b := (*buf)[:n]
	if _, err := w.ReadAt(b, 0); err != nil {
		return nil, errLayout
	}
	return readWAL(b)
}

// The WAL format (https://www.sqlite.org/fileformat2.html#walformat).
const (
	walHeaderSize      = 32
	walFrameHeaderSize = 24
	walMagic           = 0x377f0682 // | 1: checksums of big-endian words
	walVersion         = 3007000
)

// walPages is the committed state a WAL adds to its database file: its
// frames up to the last valid commit frame, the newest of a page winning.
type walPages struct {
	pageSize int
	nPage    uint32 // the database's size in pages after that commit
	frames   []walFrame
}

type walFrame struct {
	pgno uint32
	data []byte
}

// page returns the newest committed frame of page pgno.
func (w *walPages) page(pgno uint32) ([]byte, bool) {
	for i := len(w.frames) - 1; i >= 0; i-- {
		if w.frames[i].pgno == pgno {
			return w.frames[i].data, true
		}
	}
	return nil, false
}

// readWAL reads the committed frames of a WAL as SQLite's recovery does.
// It returns nil when no frame is committed (the file alone is the state),
// and errLayout for a header SQLite would not recover from (a torn or
// foreign header, another version), which it leaves to SQLite. The frames
// point into b.
func readWAL(b []byte) (*walPages, error) {
	if len(b) < walHeaderSize {
		return nil, errLayout
	}
	ps, bigEnd, s1, s2, err := walHeader(b[:walHeaderSize])
	if err != nil {
		return nil, err
	}
	salt := b[16:24]
	w := &walPages{pageSize: ps}
	committed := 0 // frames up to the last commit frame
	step := walFrameHeaderSize + ps
	for off := walHeaderSize; off+step <= len(b); off += step {
		fh, data := b[off:off+walFrameHeaderSize], b[off+walFrameHeaderSize:off+step]
		var ok bool
		if s1, s2, ok = walFrameValid(bigEnd, salt, fh, data, s1, s2); !ok {
			break
		}
		w.frames = append(w.frames, walFrame{binary.BigEndian.Uint32(fh[0:]), data})
		if n := binary.BigEndian.Uint32(fh[4:]); n != 0 { // a commit frame
			committed, w.nPage = len(w.frames), n
		}
	}
	if committed == 0 {
		return nil, nil
	}
	w.frames = w.frames[:committed]
	return w, nil
}

// walHeader checks a WAL header as SQLite's recovery does and returns its
// page size, byte order and checksum.
func walHeader(h []byte) (ps int, bigEnd bool, s1, s2 uint32, err error) {
	be := binary.BigEndian
	magic := be.Uint32(h[0:])
	if magic&^1 != walMagic || be.Uint32(h[4:]) != walVersion {
		return 0, false, 0, 0, errLayout
	}
	p := be.Uint32(h[8:])
	if p < 512 || p > 65536 || p&(p-1) != 0 {
		return 0, false, 0, 0, errLayout
	}
	bigEnd = magic&1 == 1
	s1, s2 = walChecksum(bigEnd, h[:24], 0, 0)
	if s1 != be.Uint32(h[24:]) || s2 != be.Uint32(h[28:]) {
		return 0, false, 0, 0, errLayout
	}
	return int(p), bigEnd, s1, s2, nil
}

// walFrameValid reports whether the frame of header fh and page data is
// one SQLite's recovery takes after the checksum (s1, s2) of the frames
// before it: a page number, the header's salt, and a checksum that
// continues theirs, which it returns.
func walFrameValid(bigEnd bool, salt, fh, data []byte, s1, s2 uint32) (uint32, uint32, bool) {
	be := binary.BigEndian
	if be.Uint32(fh[0:]) == 0 || !bytes.Equal(fh[8:16], salt) {
		return s1, s2, false
	}
	s1, s2 = walChecksum(bigEnd, fh[:8], s1, s2)
	s1, s2 = walChecksum(bigEnd, data, s1, s2)
	if s1 != be.Uint32(fh[16:]) || s2 != be.Uint32(fh[20:]) {
		return s1, s2, false
	}
	return s1, s2, true
}

// walChecksum continues SQLite's WAL checksum (s1, s2) over b, a multiple
// of 8 bytes long, read as 32-bit words of the given byte order.
// Each order has a loop of its own, so the reads are inlined (a snapshot
// checksums every frame the WAL gained since the last one).
func walChecksum(bigEnd bool, b []byte, s1, s2 uint32) (uint32, uint32) {
	if bigEnd {
		for i := 0; i+8 <= len(b); i += 8 {
			s1 += binary.BigEndian.Uint32(b[i:]) + s2
			s2 += binary.BigEndian.Uint32(b[i+4:]) + s1
		}
		return s1, s2
	}
	for i := 0; i+8 <= len(b); i += 8 {
		s1 += binary.LittleEndian.Uint32(b[i:]) + s2
		s2 += binary.LittleEndian.Uint32(b[i+4:]) + s1
	}
	return s1, s2
}

// readAlarmRow finds _wasmkeep_alarm in the schema on page 1 and reads its
// one row (id 1) from its root page, each page from the WAL's committed
// frames when they hold it (wal may be nil), else from the file. Both must
// be leaf table pages without overflow, as they are for the host's schema
// (the table holds one row).
func readAlarmRow(f io.ReaderAt, wal *walPages) (int64, bool, error) {
	// first is the file's first 4 KiB, read with the header when the WAL
	// has no page 1: page 1 itself at the default page size.
	var hdr, first []byte
	// readPage reads page pgno (from 1) of size ps.
	readPage := func(pgno int64, ps int) ([]byte, error) {
		if wal != nil {
			if pgno > int64(wal.nPage) || ps != wal.pageSize {
				return nil, errLayout
			}
			if p, ok := wal.page(uint32(pgno)); ok {
				return p, nil
			}
		}
		if pgno == 1 && len(first) == ps {
			return first, nil
		}
		page := make([]byte, ps)
		if _, err := f.ReadAt(page, (pgno-1)*int64(ps)); err != nil {
			if errors.Is(err, io.EOF) {
				return nil, errLayout // empty or short: SQLite decides
			}
			return nil, err
		}
		return page, nil
	}
	if p, ok := wal.page1(); ok {
		hdr = p[:100]
		// The file's own header is checked too, as OpenStore checks it.
		var fh [sqliteHeaderSize]byte
		if _, err := f.ReadAt(fh[:], 0); err == nil {
			if err := headerSchema(fh[:]); err != nil {
				return 0, false, err
			}
		}
	} else {
		first = make([]byte, 4096)
		n, err := f.ReadAt(first, 0)
		if n < 100 {
			if err == nil || errors.Is(err, io.EOF) {
				return 0, false, errLayout
			}
			return 0, false, err
		}
		first, hdr = first[:n], first[:100]
	}
	if !bytes.Equal(hdr[:16], []byte("SQLite format 3\x00")) {
		return 0, false, errLayout
	}
	// A later build's schema is not read: the alarm row may mean another
	// thing there (docs/design.md#format-versions).
	if err := headerSchema(hdr); err != nil {
		return 0, false, err
	}
	pageSize := int(binary.BigEndian.Uint16(hdr[16:18]))
	if pageSize == 1 {
		pageSize = 65536
	}
	if pageSize < 512 || pageSize&(pageSize-1) != 0 || hdr[18] > 2 || hdr[19] > 2 {
		return 0, false, errLayout
	}
	usable := pageSize - int(hdr[20])
	page, err := readPage(1, pageSize)
	if err != nil {
		return 0, false, err
	}
	var root int64
	found := false
	err = leafCells(page, 100, usable, func(_ int64, rec []byte) error {
		cols, err := record(rec)
		if err != nil {
			return err
		}
		if len(cols) < 4 || !cols[0].isText("table") || !cols[1].isText("_wasmkeep_alarm") || cols[3].typ != colInt {
			return nil
		}
		root, found = cols[3].i, true
		return nil
	})
	if err != nil {
		return 0, false, err
	}
	if !found || root < 2 {
		return 0, false, errLayout
	}
	if page, err = readPage(root, pageSize); err != nil {
		return 0, false, err
	}
	var at int64
	ok := false
	err = leafCells(page, 0, usable, func(rowid int64, rec []byte) error {
		cols, err := record(rec)
		if err != nil {
			return err
		}
		// (id INTEGER PRIMARY KEY, at_ms INTEGER): id is the rowid, stored as NULL.
		if rowid != 1 || len(cols) != 2 || cols[0].typ != colNull || cols[1].typ != colInt || ok {
			return errLayout
		}
		at, ok = cols[1].i, true
		return nil
	})
	if err != nil {
		return 0, false, err
	}
	return at, ok, nil
}

// page1 returns the WAL's committed page 1, if it holds one.
func (w *walPages) page1() ([]byte, bool) {
	if w == nil {
		return nil, false
	}
	p, ok := w.page(1)
	return p, ok && len(p) >= 100
}

// leafCells calls fn with each cell of the leaf table page whose b-tree
// header starts at off. A cell whose payload overflows is errLayout.
func leafCells(page []byte, off, usable int, fn func(rowid int64, rec []byte) error) error {
	if off+8 > len(page) || page[off] != 0x0D {
		return errLayout
	}
	n := int(binary.BigEndian.Uint16(page[off+3 : off+5]))
	ptrs := off + 8
	if ptrs+2*n > usable {
		return errLayout
	}
	for i := 0; i < n; i++ {
		c := int(binary.BigEndian.Uint16(page[ptrs+2*i:]))
		if c < ptrs+2*n || c >= usable {
			return errLayout
		}
		size, k := varint(page[c:usable])
		if k == 0 {
			return errLayout
		}
		c += k
		rowid, k := varint(page[c:usable])
		if k == 0 {
			return errLayout
		}
		c += k
		// Payloads longer than usable-35 spill to overflow pages.
		if size > uint64(usable-35) || c+int(size) > usable {
			return errLayout
		}
		if err := fn(int64(rowid), page[c:c+int(size)]); err != nil {
			return err
		}
	}
	return nil
}

type colType int

const (
	colNull colType = iota
	colInt
	colOther
	colText
)

type column struct {
	typ  colType
	i    int64
	text []byte
}

func (c column) isText(s string) bool { return c.typ == colText && string(c.text) == s }

// record decodes a record: a header of serial types, then the values.
func record(rec []byte) ([]column, error) {
	hlen, k := varint(rec)
	if k == 0 || hlen > uint64(len(rec)) || hlen < uint64(k) {
		return nil, errLayout
	}
	h, body := rec[k:hlen], rec[hlen:]
	var cols []column
	for len(h) > 0 {
		st, k := varint(h)
		if k == 0 {
			return nil, errLayout
		}
		h = h[k:]
		var n int
		c := column{typ: colInt}
		switch {
		case st == 0:
			c.typ = colNull
		case st >= 1 && st <= 6:
			n = [...]int{0, 1, 2, 3, 4, 6, 8}[st]
		case st == 7:
			c.typ, n = colOther, 8
		case st == 8 || st == 9:
			c.i = int64(st - 8)
		case st >= 12:
			n = int((st - 12) / 2)
			c.typ = colOther
			if st%2 == 1 {
				c.typ = colText
			}
		default:
			return nil, errLayout
		}
		if n > len(body) {
			return nil, errLayout
		}
		v := body[:n]
		body = body[n:]
		switch {
		case c.typ == colInt && n > 0:
			x := int64(int8(v[0])) // sign-extended big-endian
			for _, b := range v[1:] {
				x = x<<8 | int64(b)
			}
			c.i = x
		case c.typ == colText:
			c.text = v
		}
		cols = append(cols, c)
	}
	return cols, nil
}

// varint decodes SQLite's big-endian varint (1 to 9 bytes); k is 0 when b
// ends first.
func varint(b []byte) (v uint64, k int) {
	for i := 0; i < 8; i++ {
		if i >= len(b) {
			return 0, 0
		}
		v = v<<7 | uint64(b[i]&0x7f)
		if b[i]&0x80 == 0 {
			return v, i + 1
		}
	}
	if len(b) < 9 {
		return 0, 0
	}
	return v<<8 | uint64(b[8]), 9
}
