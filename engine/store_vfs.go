package engine

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/ncruces/go-sqlite3/vfs"
)

// storeVFSName is the VFS the pooled connections use, and so every actor
// database attached to them (an ATTACH without a URI takes its
// connection's VFS). It is the driver's "os" VFS with two things made
// cheaper for a database that is opened, used for one event and closed,
// thousands of times a second:
//
//   - the full path of a database: an absolute, clean path whose last
//     component is not a symbolic link is its own full path (one lstat),
//     where the "os" VFS resolves every component (an lstat each). A
//     directory that is a link names the same directory either way, so
//     the WAL beside the file is the same file; a file that is a link is
//     resolved as before, so its WAL goes beside its target.
//   - on Linux, an actor's database file and its WAL are opened with the
//     bare system calls (storeFile): an os.File tries to register each
//     file with the runtime's poller and the "os" VFS asks each whether
//     its file system has F2FS's atomic writes, six system calls more per
//     file, for files that never block and a feature only a rollback
//     journal uses; the first reads under the exclusive lock read
//     ahead, so the WAL's recovery reads the WAL in one system call
//     rather than one per frame; and a commit's WAL frames are written
//     in one system call, and kept for the snapshot's image until it
//     took them, so that it need not read them back.
//
// Everything else (temporary files, a rollback journal, deletes, access
// checks, and the files of other platforms) goes to the "os" VFS.
const storeVFSName = "wasmkeep-store"

var osVFS vfs.VFSFilename

func init() {
	osVFS = vfs.Find("os").(vfs.VFSFilename)
	vfs.Register(storeVFSName, storeVFS{})
}

type storeVFS struct{}

func (storeVFS) Open(name string, flags vfs.OpenFlag) (vfs.File, vfs.OpenFlag, error) {
	return osVFS.Open(name, flags)
}

func (storeVFS) OpenFilename(name *vfs.Filename, flags vfs.OpenFlag) (vfs.File, vfs.OpenFlag, error) {
	if name != nil && flags&(vfs.OPEN_MAIN_DB|vfs.OPEN_WAL) != 0 && flags&vfs.OPEN_READWRITE != 0 {
		f, err := openStoreFile(name.String(), flags)
		if err == nil {
			return f, flags, nil
		}
		if err != errNoStoreFile {
			return nil, flags, err
		}
	}
	return osVFS.OpenFilename(name, flags)
}

func (storeVFS) Delete(name string, syncDir bool) error { return osVFS.Delete(name, syncDir) }

func (storeVFS) Access(name string, flags vfs.AccessFlag) (bool, error) {
	return osVFS.Access(name, flags)
}

func (storeVFS) FullPathname(name string) (string, error) {
	if filepath.IsAbs(name) && filepath.Clean(name) == name {
		fi, err := os.Lstat(name)
		if err == nil && fi.Mode()&fs.ModeSymlink == 0 || errors.Is(err, fs.ErrNotExist) {
			return name, nil
		}
	}
	return osVFS.FullPathname(name)
}

// errNoStoreFile: the platform has no storeFile; the "os" VFS opens it.
var errNoStoreFile = errors.New("no store file on this platform")

// Read-ahead sizes: a sleeping actor's WAL holds at most
// closeCheckpointBytes (a close checkpoints a larger one), which its
// recovery reads whole; the first pages of its database file hold the
// schema and the roots of its tables.
const (
	walReadAhead = closeCheckpointBytes
	dbReadAhead  = 32 << 10
)

// unwrapFile returns the file a VFS file wraps (the driver wraps every
// main database file, for its checksums option), or v.
func unwrapFile(v any) any {
	for {
		u, ok := v.(vfs.FileUnwrap)
		if !ok {
			return v
		}
		v = u.Unwrap()
	}
}

// readAheader is a file that reads ahead until told to stop (storeFile).
type readAheader interface{ dropReadAhead() }

var readAheadBufs = sync.Pool{New: func() any { b := make([]byte, walReadAhead); return &b }}
