package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"

	"github.com/ncruces/go-sqlite3"
)

// snapImage is the committed image of an open store's database, kept
// between snapshots and brought up to date from the frames its WAL gained
// since the last one, so that a snapshot neither backs the database up
// through a second SQLite connection (which the driver opens and closes
// for each backup) nor reads the whole WAL again.
//
// It is exact because the store's connection is the database's only
// writer (exclusive locking) and a snapshot is taken with no transaction
// open: the committed database is then the file's pages with the WAL's
// committed frames over them, the newest frame of a page winning, as
// SQLite's recovery reads the WAL (the salts of its header, checksums
// that verify from the first frame on, up to the last commit frame, whose
// database size ends the image). A checkpoint copies frames into the file
// and the next commit starts the WAL again under a new header, so a header
// other than the one the image was read under means: build it again from
// the file. Anything else unexpected (no page 1, a WAL header SQLite would
// not recover from, a page size that differs, a database that grew by a
// page no frame wrote) fails with errLayout, and the caller serialises
// through SQLite instead.
type snapImage struct {
	img    []byte // the committed database, whole pages
	ps     int    // its page size
	valid  bool
	hdr    [walHeaderSize]byte // the WAL header the frames were read under
	off    int64               // where the WAL goes on after the last commit applied; 0: no WAL read
	s1, s2 uint32              // the WAL's checksum there
	bigEnd bool
	fresh  []uint32 // pages past the image's end a commit wrote (reused)
	// gen is the WAL's header generation the header was read at (walGen),
	// 0 when unknown: while the WAL file reports the same, its header is
	// the one in hdr and is not read again.
	gen uint64
	// tailReads counts the updates that took their frames from the WAL
	// file's memory (walTailer), for the tests.
	tailReads int
}

// walGenner is a WAL file that reports when its header may have changed
// (storeFile).
type walGenner interface{ walGen() uint64 }

// maxImage is the largest image a store keeps; a larger database is
// snapshotted as before (checkpointed and read from its file).
const maxImage = serializeBelow

// imageFile is a file the image is read from: one of the store's own
// SQLite file handles, or the file opened by its path.
type imageFile interface {
	io.ReaderAt
	Size() (int64, error)
}

// update brings the image up to the committed state of the database at
// path (its file and its WAL), read through db and wal when they are not
// nil (the connection's own handles: no open and close per snapshot), or
// else opened by their paths.
func (m *snapImage) update(path string, db, wal imageFile) error {
	if err := m.read(path, db, wal); err != nil {
		m.reset()
		return err
	}
	return nil
}

// reset forgets the image (its memory too: a store holds it only while it
// is exact).
func (m *snapImage) reset() {
	*m = snapImage{tailReads: m.tailReads}
}

func (m *snapImage) read(path string, db, w imageFile) error {
	if w == nil {
		f, err := openScanFile(path + "-wal")
		if os.IsNotExist(err) {
			// No WAL: the file is the database.
			m.off = 0
			return m.readFile(path, db, 0)
		}
		if err != nil {
			return errLayout
		}
		defer f.Close()
		w = f
	}
	var gen uint64
	if g, ok := unwrapFile(w).(walGenner); ok {
		gen = g.walGen()
		if gen != 0 && gen == m.gen && m.valid && m.off != 0 {
			// The header the image was read under, unchanged: only the
			// frames after m.off are new.
			return m.readFrames(w)
		}
	}
	m.gen = 0
	var hdr [walHeaderSize]byte
	n, err := w.ReadAt(hdr[:], 0)
	switch {
	case err != nil && !errors.Is(err, io.EOF):
		return errLayout
	case n == 0:
		// An empty WAL (truncated after a checkpoint copied it all): the
		// file is the database.
		m.off = 0
		return m.readFile(path, db, 0)
	case n < walHeaderSize:
		return errLayout
	}
	if !m.valid || m.off == 0 || hdr != m.hdr {
		ps, bigEnd, s1, s2, err := walHeader(hdr[:])
		if err != nil {
			return err
		}
		if err := m.readFile(path, db, ps); err != nil {
			return err
		}
		m.hdr, m.off, m.s1, m.s2, m.bigEnd = hdr, walHeaderSize, s1, s2, bigEnd
	}
	m.gen = gen
	return m.readFrames(w)
}

// readFile makes the database file the image, read through f (nil: opened
// by its path). ps, when not 0, is the page size its WAL says.
func (m *snapImage) readFile(path string, f imageFile, ps int) error {
	m.valid = false
	if f == nil {
		sf, err := openScanFile(path)
		if err != nil {
			return errLayout
		}
		defer sf.Close()
		f = sf
	}
	size, err := f.Size()
	if err != nil || size < 100 || size > maxImage {
		return errLayout
	}
	if cap(m.img) < int(size) {
		m.img = make([]byte, size)
	}
	m.img = m.img[:size]
	if _, err := f.ReadAt(m.img, 0); err != nil {
		return errLayout
	}
	fps, err := imagePageSize(m.img)
	if err != nil || (ps != 0 && ps != fps) || size%int64(fps) != 0 {
		return errLayout
	}
	// The file is whole where its header says so: SQLite reads the size
	// from the header when it is valid for the header's change counter.
	be := binary.BigEndian
	if be.Uint32(m.img[92:]) == be.Uint32(m.img[24:]) && int64(be.Uint32(m.img[28:])) != size/int64(fps) {
		return errLayout
	}
	m.ps, m.valid = fps, true
	return nil
}

// imagePageSize checks page 1's header and returns the page size.
func imagePageSize(b []byte) (int, error) {
	if len(b) < 100 || !bytes.Equal(b[:16], []byte("SQLite format 3\x00")) {
		return 0, errLayout
	}
	ps := int(binary.BigEndian.Uint16(b[16:18]))
	if ps == 1 {
		ps = 65536
	}
	if ps < 512 || ps&(ps-1) != 0 {
		return 0, errLayout
	}
	return ps, nil
}

// walTailer is a WAL file that keeps in memory what was written under its
// header (storeFile).
type walTailer interface {
	walTail(off int64) ([]byte, bool)
	walTailUsed(off int64)
}

// readFrames reads the WAL from m.off on and applies each commit in it, in
// order, stopping at the first frame SQLite's recovery would not take
// (which, in a WAL kept at its size and started again over its old frames,
// is usually just past the new ones: it reads in steps, not to the file's
// end). Frames after the last commit frame (a transaction rolled back
// after it spilled pages) are left for the next read. A WAL file that kept
// what was written under its header gives the frames from memory: nothing
// past them was written under that header, so nothing there is valid.
func (m *snapImage) readFrames(w imageFile) error {
	if t, ok := unwrapFile(w).(walTailer); ok {
		if b, ok := t.walTail(m.off); ok {
			s := frameScan{s1: m.s1, s2: m.s2}
			if _, err := s.scan(m, b); err != nil {
				return err
			}
			m.off += int64(s.start)
			t.walTailUsed(m.off)
			m.tailReads++
			return nil
		}
	}
	bp := walBufs.Get().(*[]byte)
	defer walBufs.Put(bp)
	chunk := 8 * (walFrameHeaderSize + m.ps)
	b := (*bp)[:0]
	s := frameScan{s1: m.s1, s2: m.s2}
	for {
		n := len(b)
		if cap(b) < n+chunk {
			b = append(b[:cap(b)], make([]byte, n+chunk-cap(b))...)
		}
		b = b[:n+chunk]
		k, err := w.ReadAt(b[n:], m.off+int64(n))
		b = b[:n+k]
		end := errors.Is(err, io.EOF)
		if err != nil && !end {
			*bp = b[:0]
			return errLayout
		}
		stopped, err := s.scan(m, b)
		if err != nil {
			*bp = b[:0]
			return err
		}
		if stopped || end {
			break
		}
		if len(b) >= maxWALRead {
			*bp = b[:0]
			return errLayout
		}
		chunk *= 2
	}
	*bp = b[:0]
	m.off += int64(s.start)
	return nil
}

// frameScan checks and applies the frames of a WAL read from the image's
// offset, in one or more steps over a growing buffer; s1 and s2 are the
// running checksum, from the image's.
type frameScan struct {
	off    int // the next frame to check
	start  int // the first frame of the commit under way
	s1, s2 uint32
}

// scan goes on through b (the WAL from m.off, as far as it was read) and
// applies each commit it completes; stopped: a frame SQLite's recovery
// would not take.
func (s *frameScan) scan(m *snapImage, b []byte) (stopped bool, err error) {
	step := walFrameHeaderSize + m.ps
	for ; s.off+step <= len(b); s.off += step {
		fh, data := b[s.off:s.off+walFrameHeaderSize], b[s.off+walFrameHeaderSize:s.off+step]
		var ok bool
		if s.s1, s.s2, ok = walFrameValid(m.bigEnd, m.hdr[16:24], fh, data, s.s1, s.s2); !ok {
			return true, nil
		}
		if nPage := binary.BigEndian.Uint32(fh[4:]); nPage != 0 { // a commit frame
			if err := m.commit(b[s.start:s.off+step], nPage); err != nil {
				return false, err
			}
			s.start = s.off + step
			m.s1, m.s2 = s.s1, s.s2
		}
	}
	return false, nil
}

// commit applies the frames of one commit (headers and pages) to the
// image, whose size becomes nPage pages.
func (m *snapImage) commit(frames []byte, nPage uint32) error {
	step := walFrameHeaderSize + m.ps
	if int64(nPage)*int64(m.ps) > maxImage {
		return errLayout
	}
	had := len(m.img) / m.ps
	m.fresh = m.fresh[:0]
	for off := 0; off+step <= len(frames); off += step {
		pgno := binary.BigEndian.Uint32(frames[off:])
		if pgno > nPage {
			continue // truncated by this commit
		}
		at := int(pgno-1) * m.ps
		if end := at + m.ps; end > len(m.img) {
			if end > cap(m.img) {
				m.img = append(m.img[:cap(m.img)], make([]byte, end-cap(m.img))...)
			}
			m.img = m.img[:end]
		}
		copy(m.img[at:at+m.ps], frames[off+walFrameHeaderSize:off+step])
		if int(pgno) > had {
			m.fresh = append(m.fresh, pgno)
		}
	}
	// A database that grew has every new page in this commit.
	for p := had + 1; p <= int(nPage); p++ {
		if !hasPage(m.fresh, uint32(p)) {
			return errLayout
		}
	}
	if size := int(nPage) * m.ps; size <= len(m.img) {
		m.img = m.img[:size]
	} else {
		return errLayout
	}
	return nil
}

func hasPage(ps []uint32, p uint32) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

// snapshot copies the image into buf[:0] (grown as needed), with the
// database size in page 1's header set to its number of pages, as a
// backup writes it.
func (m *snapImage) snapshot(buf []byte) ([]byte, error) {
	ps, err := imagePageSize(m.img)
	if err != nil || ps != m.ps || len(m.img)%ps != 0 || m.img[18] != 2 || m.img[19] != 2 {
		// Not a WAL database (read and write versions 2): unexpected.
		return nil, errLayout
	}
	buf = append(buf[:0], m.img...)
	binary.BigEndian.PutUint32(buf[28:], uint32(len(buf)/ps))
	return buf, nil
}

// files returns the connection's own handles on the database file and its
// WAL, for the image to read through; nil for one it does not have open
// (the WAL before the first read), which the image then opens by its path.
func (s *Store) files() (db, wal imageFile) {
	if v, err := s.conn.FileControl(storeSchema, sqlite3.FCNTL_FILE_POINTER); err == nil {
		db, _ = v.(imageFile)
	}
	if v, err := s.conn.FileControl(storeSchema, sqlite3.FCNTL_JOURNAL_POINTER); err == nil {
		wal, _ = v.(imageFile)
	}
	return db, wal
}
