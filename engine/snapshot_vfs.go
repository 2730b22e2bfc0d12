package engine

import (
	"io"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/ncruces/go-sqlite3"
	"github.com/ncruces/go-sqlite3/vfs"
)

// snapshotVFS is the VFS a serialisation backs the database up into: each
// backup's destination is a byte slice of its own, registered under a name
// no other backup uses, so concurrent snapshots of different actors do not
// queue on one slot, and the slice can be the caller's buffer, reused from
// one snapshot to the next.
const snapshotVFSName = "wasmkeep-snapshot"

var (
	snapshotFiles sync.Map // name -> *snapshotFile, while its backup runs
	snapshotSeq   atomic.Uint64
)

func init() { vfs.Register(snapshotVFSName, snapshotVFS{}) }

// serialize backs the schema of conn up into buf[:0], growing it as needed,
// and returns the database image.
func serialize(conn *sqlite3.Conn, schema string, buf []byte) ([]byte, error) {
	name := "snapshot-" + strconv.FormatUint(snapshotSeq.Add(1), 10) + ".db"
	f := &snapshotFile{b: buf[:0]}
	snapshotFiles.Store(name, f)
	defer snapshotFiles.Delete(name)
	if err := conn.Backup(schema, "file:"+name+"?nolock=1&vfs="+snapshotVFSName); err != nil {
		return nil, err
	}
	return f.b, nil
}

type snapshotVFS struct{}

func (snapshotVFS) Open(name string, flags vfs.OpenFlag) (vfs.File, vfs.OpenFlag, error) {
	if flags&vfs.OPEN_MAIN_DB == 0 {
		return nil, flags, sqlite3.CANTOPEN // no journal: the file is in memory
	}
	f, ok := snapshotFiles.Load(name)
	if !ok {
		return nil, flags, sqlite3.CANTOPEN
	}
	return f.(*snapshotFile), flags | vfs.OPEN_MEMORY, nil
}

func (snapshotVFS) Delete(string, bool) error { return sqlite3.IOERR_DELETE }

func (snapshotVFS) Access(name string, _ vfs.AccessFlag) (bool, error) {
	_, ok := snapshotFiles.Load(name)
	return ok, nil
}

func (snapshotVFS) FullPathname(name string) (string, error) { return name, nil }

// snapshotFile is a backup's destination: a byte slice that grows as pages
// are written (to the size the backup announces first, when it does).
// One backup uses it, on one goroutine.
type snapshotFile struct{ b []byte }

func (f *snapshotFile) ReadAt(p []byte, off int64) (int, error) {
	n := 0
	if off < int64(len(f.b)) {
		n = copy(p, f.b[off:])
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *snapshotFile) WriteAt(p []byte, off int64) (int, error) {
	if end := off + int64(len(p)); end > int64(len(f.b)) {
		f.grow(end)
	}
	copy(f.b[off:], p)
	return len(p), nil
}

// grow extends the file to size bytes, zeroed (a reused buffer holds an
// earlier snapshot's pages).
func (f *snapshotFile) grow(size int64) {
	old := len(f.b)
	if int64(cap(f.b)) >= size {
		f.b = f.b[:size]
		clear(f.b[old:])
		return
	}
	f.b = append(f.b, make([]byte, size-int64(old))...)
}

func (f *snapshotFile) Truncate(size int64) error {
	if size < int64(len(f.b)) {
		f.b = f.b[:size]
	}
	return nil
}

// SizeHint implements vfs.FileSizeHint: the backup says the final size
// first, so the slice grows once.
func (f *snapshotFile) SizeHint(size int64) error {
	if size > int64(len(f.b)) {
		f.grow(size)
	}
	return nil
}

func (f *snapshotFile) Size() (int64, error)           { return int64(len(f.b)), nil }
func (*snapshotFile) Close() error                     { return nil }
func (*snapshotFile) Sync(vfs.SyncFlag) error          { return nil }
func (*snapshotFile) Lock(vfs.LockLevel) error         { return nil } // nolock=1: never called
func (*snapshotFile) Unlock(vfs.LockLevel) error       { return nil }
func (*snapshotFile) CheckReservedLock() (bool, error) { return false, nil }
func (*snapshotFile) SectorSize() int                  { return 0 }

func (*snapshotFile) DeviceCharacteristics() vfs.DeviceCharacteristic {
	return vfs.IOCAP_ATOMIC | vfs.IOCAP_SEQUENTIAL | vfs.IOCAP_SAFE_APPEND |
		vfs.IOCAP_POWERSAFE_OVERWRITE | vfs.IOCAP_SUBPAGE_READ
}
