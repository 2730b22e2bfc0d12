package engine

import (
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/ncruces/go-sqlite3"
	"github.com/ncruces/go-sqlite3/vfs"
	"golang.org/x/sys/unix"

	"github.com/wasmkeep/alarms/internal/diskfault"
	"github.com/wasmkeep/alarms/internal/iohook"
)

// storeFile is an actor's database file or its WAL, opened by storeVFS
// with the bare system calls. It locks as SQLite's unix VFS and the
// driver's "os" VFS do, with open file description locks on the same
// bytes (the pending byte, the reserved byte, the shared range), so a
// connection of any other SQLite, in this process or another, sees the
// locks it expects.
//
// Reads under the exclusive lock read ahead: the first read of a database
// file while it holds the exclusive lock (which a database in exclusive
// locking mode takes before it reads its first page) reads its first
// dbReadAhead bytes, and the read of a WAL's header (at offset 0) reads
// its first walReadAhead bytes (a WAL without shared memory is only read
// in exclusive locking mode, under its database's exclusive lock); later
// reads within those bytes are served from them. The bytes are dropped at
// the first write or truncation of the file, when its lock is released,
// when it closes, and when the store ends its first transaction
// (dropReadAhead): until then no other connection can change the file,
// so what was read is what the file holds.
type storeFile struct {
	fd      int
	name    string
	flags   vfs.OpenFlag
	lock    vfs.LockLevel
	psow    bool
	keepWAL bool
	syncDir bool // a WAL created by this open: its directory is synced once

	ahead   *[]byte // read-ahead buffer, from readAheadBufs
	aheadN  int     // bytes of ahead read from offset 0
	aheadOK bool    // the read-ahead may still be taken (before the first write)

	sysReads  int // pread calls made, for the tests
	sysWrites int // pwrite and pwritev calls made, for the tests
	rewrites  int // writes into the kept tail, for the tests

	// A WAL's writes are gathered (wb, from file offset wbOff) and written
	// together: SQLite writes a frame as two writes, its header and then
	// its page, and a commit as its frames one after the other. The file
	// holds what follows on from the last write and writes it all in one
	// system call once the commit frame's page is in (a frame whose header
	// gives a database size), once walBufMax bytes wait, or before
	// anything else is done on the file. A commit of any number of frames
	// is one write, and when it returns, all of it is written. wbDone is
	// how much of wb is written; lastHdr where in wb the last frame header
	// is, while the next write may be its page (-1: none).
	//
	// Once the store's snapshot image asked for them (tailWanted), the
	// bytes written since the WAL's header stay in wb after they are
	// written (tailOK), until the image took them (walTailUsed): it reads
	// a commit's frames from there rather than back from the file.
	wb         *[]byte
	wbOff      int64 // -1: no write yet to follow on from
	wbDone     int
	lastHdr    int
	tailWanted bool
	// tailOK: wb holds every byte written since the WAL's header from
	// wbOff on, so the file holds nothing written under that header past
	// wb's end.
	tailOK bool

	// hdrGen changes whenever the file's first walHeaderSize bytes may
	// have (a write there, a truncation) and differs between files: the
	// same value means the same file with the same header (walGen).
	hdrGen uint64

	// wal is whether the database header last read (the first 20 bytes
	// of a database file) says the database is in WAL mode.
	wal bool

	// j is the node journal of a WAL under its root (WithJournal): each
	// write and truncation is appended to it once made, and a sync waits
	// for the journal's batch holding the file's last record (jb) to be
	// durable, rather than syncing the file.
	j  *journal
	jb *jbatch
	// deferSync makes the next sync that has records to wait for leave
	// them in pending rather than wait (a deferred commit: Store.
	// CommitDeferred), and deferredNow says it did; any later sync, a
	// checkpoint's among them, waits for pending.
	deferSync   bool
	deferredNow bool
	// deferReplicated: the deferred commit is a delivery the host's
	// upload is expected to make durable first (journal.nudge).
	deferReplicated bool
	pending         *jbatch
}

// journalWait is a deferred commit's batch: Wait returns once it is
// durable.
type journalWait struct {
	j *journal
	b *jbatch
}

func (w journalWait) Wait() error { return w.j.await(w.b) }

// deferNextSync makes the file's next sync a deferred one, and reports
// whether it can be: only a WAL the journal covers. replicated says the
// host's upload is expected to make the commit durable first
// (journal.nudge).
func (f *storeFile) deferNextSync(replicated bool) bool {
	if f.j == nil {
		return false
	}
	f.deferSync, f.deferredNow, f.deferReplicated = true, false, replicated
	return true
}

// endDefer ends what deferNextSync began.
func (f *storeFile) endDefer() { f.deferSync = false }

// deferred returns what to wait for until the records of the sync
// deferred since deferNextSync are durable (nil: no sync was, the commit
// wrote nothing; or a later sync in the commit, a checkpoint's, waited
// for them already).
func (f *storeFile) deferred() Durability {
	if !f.deferredNow || f.pending == nil {
		return nil
	}
	return journalWait{f.j, f.pending}
}

var (
	_ vfs.FileLockState          = (*storeFile)(nil)
	_ vfs.FilePersistWAL         = (*storeFile)(nil)
	_ vfs.FilePowersafeOverwrite = (*storeFile)(nil)
	_ vfs.FileHasMoved           = (*storeFile)(nil)
)

// Lock bytes, as in SQLite's unix VFS.
const (
	pendingByte  = 0x40000000
	reservedByte = pendingByte + 1
	sharedFirst  = pendingByte + 2
	sharedSize   = 510
)

func openStoreFile(name string, flags vfs.OpenFlag) (vfs.File, error) {
	oflags := unix.O_RDWR | unix.O_CLOEXEC | unix.O_NOFOLLOW
	if flags&vfs.OPEN_CREATE != 0 {
		oflags |= unix.O_CREAT
	}
	if flags&vfs.OPEN_EXCLUSIVE != 0 {
		oflags |= unix.O_EXCL
	}
	for {
		fd, err := unix.Open(name, oflags, 0o666)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EISDIR {
			return nil, vfs.SystemError(&os.PathError{Op: "open", Path: name, Err: err}, sqlite3.CANTOPEN_ISDIR)
		}
		if err != nil {
			return nil, vfs.SystemError(&os.PathError{Op: "open", Path: name, Err: err}, sqlite3.CANTOPEN)
		}
		f := &storeFile{
			fd: fd, name: name, flags: flags, psow: true, aheadOK: true, hdrGen: fileGens.Add(1),
			wbOff: -1, lastHdr: -1,
			syncDir: flags&vfs.OPEN_WAL != 0 && flags&vfs.OPEN_CREATE != 0,
		}
		if flags&vfs.OPEN_WAL != 0 {
			f.j = journalFor(name)
		}
		return f, nil
	}
}

func (f *storeFile) Close() error {
	f.dropReadAhead()
	ferr := f.flushHeld()
	f.resetBuf(-1)
	if f.fd < 0 {
		return nil
	}
	fd := f.fd
	f.fd, f.lock = -1, vfs.LOCK_NONE
	// Closing the only descriptor of the open file description releases
	// its locks.
	if err := unix.Close(fd); err != nil {
		return vfs.SystemError(err, sqlite3.IOERR_CLOSE)
	}
	return ferr
}

// dropReadAhead gives the read-ahead buffer back and takes no more.
func (f *storeFile) dropReadAhead() {
	f.aheadOK = false
	if f.ahead != nil {
		readAheadBufs.Put(f.ahead)
		f.ahead, f.aheadN = nil, 0
	}
}

func (f *storeFile) ReadAt(p []byte, off int64) (n int, err error) {
	if err := f.flushHeld(); err != nil {
		return 0, err
	}
	if f.ahead == nil && f.aheadOK {
		f.readAhead(len(p), off)
	}
	if f.ahead != nil && off >= 0 && off+int64(len(p)) <= int64(f.aheadN) {
		n = copy(p, (*f.ahead)[off:])
	} else {
		n, err = f.pread(p, off)
	}
	if off == 0 && n >= 20 && f.flags&vfs.OPEN_MAIN_DB != 0 {
		// The file format's read and write versions: 2 and 2 for WAL.
		f.wal = p[18] == 2 && p[19] == 2
	}
	return n, err
}

func (f *storeFile) walHeader() bool { return f.wal }

// fileGens numbers the states of the store files' headers (hdrGen).
var fileGens atomic.Uint64

// walGen returns a value that stays the same for as long as the file's
// header does: the file is the only writer of itself while its store
// holds the exclusive lock.
func (f *storeFile) walGen() uint64 { return f.hdrGen }

// readAhead fills the read-ahead buffer for the read of n bytes at off,
// when it is the read that starts one: the WAL's header, or a database
// file's first read under a lock.
func (f *storeFile) readAhead(n int, off int64) {
	size := 0
	switch {
	case f.flags&vfs.OPEN_WAL != 0 && off == 0:
		size = walReadAhead
	case f.flags&vfs.OPEN_MAIN_DB != 0 && f.lock == vfs.LOCK_EXCLUSIVE && off+int64(n) <= dbReadAhead:
		size = dbReadAhead
	default:
		return
	}
	b := readAheadBufs.Get().(*[]byte)
	for {
		// One read: what a short one leaves out is read when asked for.
		m, err := unix.Pread(f.fd, (*b)[:size], 0)
		f.sysReads++
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			readAheadBufs.Put(b)
			return // the read itself reports it
		}
		f.ahead, f.aheadN = b, m
		return
	}
}

func (f *storeFile) pread(p []byte, off int64) (int, error) {
	n := 0
	for n < len(p) {
		m, err := unix.Pread(f.fd, p[n:], off+int64(n))
		f.sysReads++
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, vfs.SystemError(err, sqlite3.IOERR_READ)
		}
		if m == 0 {
			return n, io.EOF
		}
		n += m
	}
	return n, nil
}

// WriteAt writes p at off; on a WAL, with the writes before and after it
// that follow on (wb).
func (f *storeFile) WriteAt(p []byte, off int64) (int, error) {
	f.dropReadAhead()
	if off < walHeaderSize {
		f.hdrGen = fileGens.Add(1)
	}
	if f.flags&vfs.OPEN_WAL == 0 {
		return f.pwrite(p, off)
	}
	end := f.wbOff + int64(f.wbLen())
	header := off == 0 && len(p) == walHeaderSize
	if f.wbOff < 0 || off != end || header {
		if err := f.flushHeld(); err != nil {
			return 0, err
		}
		switch {
		case header:
			// The WAL starts again: every frame after this header is
			// written from here on.
			f.resetBuf(0)
			f.tailOK = f.tailWanted
		case f.tailOK && off >= f.wbOff && off+int64(len(p)) <= end:
			// A frame of the open transaction written again in place
			// (SQLite rewrites a page, or the checksums from it on).
			n, err := f.pwrite(p, off)
			if err != nil {
				f.forgetBuf()
				return n, err
			}
			copy((*f.wb)[off-f.wbOff:], p)
			f.rewrites++
			return n, nil
		default:
			f.tailOK = false
			f.resetBuf(off)
		}
	}
	if f.wb == nil {
		f.wb = walWriteBufs.Get().(*[]byte)
		*f.wb = (*f.wb)[:0]
	}
	at := len(*f.wb)
	*f.wb = append(*f.wb, p...)
	if len(p) == walFrameHeaderSize {
		f.lastHdr = at
		return len(p), nil
	}
	commit := f.lastHdr >= 0 && f.lastHdr+walFrameHeaderSize == at &&
		binary.BigEndian.Uint32((*f.wb)[f.lastHdr+4:]) != 0
	f.lastHdr = -1
	if commit || len(*f.wb)-f.wbDone >= walBufMax {
		if err := f.flushHeld(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// walBufMax is the most a WAL file holds in memory: the writes waiting to
// be written, and the frames kept for the snapshot image; past it they are
// written, and a longer tail is dropped (the image reads the file).
const walBufMax = 256 << 10

// walWriteBufs holds the buffers of WAL files' writes (*[]byte).
var walWriteBufs = sync.Pool{New: func() any { return new([]byte) }}

func (f *storeFile) wbLen() int {
	if f.wb == nil {
		return 0
	}
	return len(*f.wb)
}

// resetBuf empties wb (its buffer goes back to the pool), the next write
// following on from off.
func (f *storeFile) resetBuf(off int64) {
	if f.wb != nil {
		walWriteBufs.Put(f.wb)
		f.wb = nil
	}
	f.wbOff, f.wbDone, f.lastHdr = off, 0, -1
}

// forgetBuf drops wb and the tail: no write follows on from what the file
// is known to hold.
func (f *storeFile) forgetBuf() {
	f.tailOK = false
	f.resetBuf(-1)
}

// flushHeld writes what waits in wb, in one call (what a short write
// leaves, in more); then it keeps wb only as the snapshot's tail.
func (f *storeFile) flushHeld() error {
	n := f.wbLen()
	if f.wbDone == n {
		return nil
	}
	if _, err := f.pwrite((*f.wb)[f.wbDone:], f.wbOff+int64(f.wbDone)); err != nil {
		// What the file holds is unknown now: nothing follows on.
		f.forgetBuf()
		return err
	}
	f.wbDone = n
	if n > walBufMax {
		f.tailOK = false
	}
	if !f.tailOK {
		f.resetBuf(f.wbOff + int64(n))
	}
	return nil
}

// walTail returns the bytes of the WAL from off to the end of what was
// written under its header, from memory; ok is false when the file does
// not have them there (and from its next header on, it keeps them). The
// bytes are the file's until its next write: take them before.
func (f *storeFile) walTail(off int64) (b []byte, ok bool) {
	f.tailWanted = true
	if err := f.flushHeld(); err != nil || !f.tailOK || off < f.wbOff || off > f.wbOff+int64(f.wbLen()) {
		return nil, false
	}
	if f.wb == nil {
		return nil, true
	}
	return (*f.wb)[off-f.wbOff:], true
}

// walTailUsed drops the tail's bytes before off, which the image took.
func (f *storeFile) walTailUsed(off int64) {
	n := f.wbLen()
	if !f.tailOK || f.wbDone != n || off <= f.wbOff || off > f.wbOff+int64(n) {
		return
	}
	k := int(off - f.wbOff)
	if k == n {
		f.resetBuf(off)
		return
	}
	b := *f.wb
	*f.wb = b[:copy(b, b[k:])]
	f.wbOff, f.wbDone, f.lastHdr = off, n-k, -1
}

func (f *storeFile) pwrite(p []byte, off int64) (int, error) {
	if h := iohook.Func; h != nil {
		h("write", f.name, off, int64(len(p)))
	}
	n := 0
	for n < len(p) {
		q := p[n:]
		if k := diskfault.Fit(f.name, len(q)); k < len(q) {
			// The tests' full disk: what fits is written, then ENOSPC.
			if k <= 0 {
				return n, writeError(unix.ENOSPC)
			}
			q = q[:k]
		}
		m, err := unix.Pwrite(f.fd, q, off+int64(n))
		f.sysWrites++
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, writeError(err)
		}
		n += m
	}
	if f.j != nil {
		// Made, then recorded: a record's write is always in the file
		// before the journal's file holding it is retired.
		b, err := f.j.append(recWrite, f.name, off, p)
		if err != nil {
			return 0, vfs.SystemError(err, sqlite3.IOERR_WRITE)
		}
		f.jb = b
	}
	return n, nil
}

func writeError(err error) error {
	if err == unix.ENOSPC {
		return vfs.SystemError(err, sqlite3.FULL)
	}
	return vfs.SystemError(err, sqlite3.IOERR_WRITE)
}

func (f *storeFile) Truncate(size int64) error {
	f.dropReadAhead()
	f.hdrGen = fileGens.Add(1)
	if err := f.flushHeld(); err != nil {
		return err
	}
	if size < f.wbOff+int64(f.wbLen()) {
		// Into what was written: nothing follows on from it now.
		f.forgetBuf()
	}
	if h := iohook.Func; h != nil {
		h("truncate", f.name, size, 0)
	}
	for {
		err := unix.Ftruncate(f.fd, size)
		if err == unix.EINTR {
			continue
		}
		if err == nil && f.j != nil {
			var b *jbatch
			if b, err = f.j.append(recTruncate, f.name, size, nil); err == nil {
				f.jb = b
			}
		}
		return vfs.SystemError(err, sqlite3.IOERR_TRUNCATE)
	}
}

// Sync syncs the file's data (SQLite trusts Linux's fdatasync for every
// sync), and once, for a WAL this open created, its directory, so that the
// WAL's name survives a power loss with its frames.
func (f *storeFile) Sync(vfs.SyncFlag) error {
	if err := f.flushHeld(); err != nil {
		return err
	}
	if f.j != nil {
		// The journal holds every write and truncation of this WAL not
		// yet synced in it, and replays them at start after a cut (the
		// WAL's name too: it recreates the file).
		if f.deferSync && f.jb != nil {
			// A deferred commit: its records are durable with the
			// journal's next batch, which is asked for now; the actor's
			// next call waits for it (Actor.wake).
			f.pending, f.jb, f.deferredNow = f.jb, nil, true
			f.j.nudge(f.deferReplicated)
			return nil
		}
		b := f.jb
		if b == nil {
			// Nothing since a deferred commit: a later sync (a
			// checkpoint's, before it writes the database file) waits
			// for it.
			b = f.pending
		}
		if b != nil {
			if err := f.j.wait(b); err != nil {
				return vfs.SystemError(err, sqlite3.IOERR_FSYNC)
			}
			f.jb, f.pending = nil, nil
		}
		return nil
	}
	fileSyncing.Add(1)
	defer fileSyncing.Add(-1)
	if err := fdatasync(f.fd); err != nil {
		return vfs.SystemError(err, sqlite3.IOERR_FSYNC)
	}
	if h := iohook.Func; h != nil {
		h("sync", f.name, 0, 0)
	}
	if f.syncDir {
		f.syncDir = false
		d, err := unix.Open(filepath.Dir(f.name), unix.O_RDONLY|unix.O_CLOEXEC|unix.O_DIRECTORY, 0)
		if err != nil {
			return nil // as SQLite's unix VFS: a directory it cannot open is not an error
		}
		defer unix.Close(d)
		if err := fdatasync(d); err != nil {
			return vfs.SystemError(err, sqlite3.IOERR_DIR_FSYNC)
		}
	}
	return nil
}

func fdatasync(fd int) error {
	for {
		if err := unix.Fdatasync(fd); err != unix.EINTR {
			return err
		}
	}
}

func (f *storeFile) Size() (int64, error) {
	if err := f.flushHeld(); err != nil {
		return 0, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(f.fd, &st); err != nil {
		return 0, vfs.SystemError(err, sqlite3.IOERR_FSTAT)
	}
	return st.Size, nil
}

func (f *storeFile) SectorSize() int { return 4096 }

func (f *storeFile) DeviceCharacteristics() vfs.DeviceCharacteristic {
	c := vfs.IOCAP_SUBPAGE_READ
	if f.psow {
		c |= vfs.IOCAP_POWERSAFE_OVERWRITE
	}
	return c
}

func (f *storeFile) LockState() vfs.LockLevel        { return f.lock }
func (f *storeFile) PersistWAL() bool                { return f.keepWAL }
func (f *storeFile) SetPersistWAL(keep bool)         { f.keepWAL = keep }
func (f *storeFile) PowersafeOverwrite() bool        { return f.psow }
func (f *storeFile) SetPowersafeOverwrite(psow bool) { f.psow = psow }

// HasMoved reports whether the file's name no longer names this file.
func (f *storeFile) HasMoved() (bool, error) {
	var st, byName unix.Stat_t
	if err := unix.Fstat(f.fd, &st); err != nil {
		return false, err
	}
	if err := unix.Stat(f.name, &byName); err != nil {
		if err == unix.ENOENT {
			return true, nil
		}
		return false, err
	}
	return st.Dev != byName.Dev || st.Ino != byName.Ino, nil
}

// Lock takes the lock level SQLite asks for, as its unix VFS does: a
// shared lock is a read lock on the shared range, taken only while no
// writer holds the pending byte; reserved is a write lock on the reserved
// byte; exclusive a write lock on the shared range, after the pending
// byte. No call waits: a lock held elsewhere is SQLITE_BUSY.
func (f *storeFile) Lock(lock vfs.LockLevel) error {
	if err := f.flushHeld(); err != nil {
		return err
	}
	if f.lock >= lock {
		return nil
	}
	switch lock {
	case vfs.LOCK_SHARED:
		if f.lock != vfs.LOCK_NONE {
			return sqlite3.IOERR_LOCK
		}
		held, err := f.testLock(pendingByte, 1)
		if err != nil {
			return vfs.SystemError(err, sqlite3.IOERR_LOCK)
		}
		if held {
			return sqlite3.BUSY
		}
		if err := f.setLock(unix.F_RDLCK, sharedFirst, sharedSize, sqlite3.IOERR_RDLOCK); err != nil {
			return err
		}
	case vfs.LOCK_RESERVED:
		if f.lock != vfs.LOCK_SHARED {
			return sqlite3.IOERR_LOCK
		}
		if err := f.setLock(unix.F_WRLCK, reservedByte, 1, sqlite3.IOERR_LOCK); err != nil {
			return err
		}
	case vfs.LOCK_EXCLUSIVE:
		if f.lock == vfs.LOCK_NONE {
			return sqlite3.IOERR_LOCK
		}
		if f.lock == vfs.LOCK_RESERVED {
			if err := f.setLock(unix.F_WRLCK, pendingByte, 1, sqlite3.IOERR_LOCK); err != nil {
				return err
			}
			f.lock = vfs.LOCK_PENDING
		}
		if err := f.setLock(unix.F_WRLCK, sharedFirst, sharedSize, sqlite3.IOERR_LOCK); err != nil {
			return err
		}
	default:
		return sqlite3.IOERR_LOCK
	}
	f.lock = lock
	return nil
}

// Unlock lowers the lock to shared (keeping the read lock on the shared
// range, dropping the pending and reserved bytes) or to none.
func (f *storeFile) Unlock(lock vfs.LockLevel) error {
	if err := f.flushHeld(); err != nil {
		return err
	}
	if f.lock <= lock {
		return nil
	}
	switch lock {
	case vfs.LOCK_SHARED:
		if f.lock >= vfs.LOCK_EXCLUSIVE {
			if err := f.setLock(unix.F_RDLCK, sharedFirst, sharedSize, sqlite3.IOERR_RDLOCK); err != nil {
				return err
			}
		}
		f.lock = vfs.LOCK_SHARED
		return f.setLock(unix.F_UNLCK, pendingByte, 2, sqlite3.IOERR_UNLOCK)
	case vfs.LOCK_NONE:
		f.dropReadAhead()
		f.lock = vfs.LOCK_NONE
		return f.setLock(unix.F_UNLCK, 0, 0, sqlite3.IOERR_UNLOCK)
	}
	return sqlite3.IOERR_UNLOCK
}

func (f *storeFile) CheckReservedLock() (bool, error) {
	if f.lock >= vfs.LOCK_RESERVED {
		return true, nil
	}
	held, err := f.testLock(reservedByte, 1)
	if err != nil {
		return false, vfs.SystemError(err, sqlite3.IOERR_CHECKRESERVEDLOCK)
	}
	return held, nil
}

// testLock reports whether another open file description holds a write
// lock on the bytes.
func (f *storeFile) testLock(start, n int64) (bool, error) {
	for {
		lk := unix.Flock_t{Type: unix.F_WRLCK, Start: start, Len: n}
		err := unix.FcntlFlock(uintptr(f.fd), unix.F_OFD_GETLK, &lk)
		if err == unix.EINTR {
			continue
		}
		return err == nil && lk.Type == unix.F_WRLCK, err
	}
}

// setLock sets or clears an open file description lock on the bytes
// without waiting: a lock held elsewhere is SQLITE_BUSY.
func (f *storeFile) setLock(typ int16, start, n int64, code sqlite3.ExtendedErrorCode) error {
	for {
		lk := unix.Flock_t{Type: typ, Start: start, Len: n}
		err := unix.FcntlFlock(uintptr(f.fd), unix.F_OFD_SETLK, &lk)
		switch err {
		case nil:
			return nil
		case unix.EINTR:
			continue
		case unix.EACCES, unix.EAGAIN, unix.EBUSY, unix.ENOLCK, unix.EDEADLK, unix.ETIMEDOUT:
			if typ == unix.F_UNLCK {
				return vfs.SystemError(err, code)
			}
			return sqlite3.BUSY
		}
		return vfs.SystemError(err, code)
	}
}
