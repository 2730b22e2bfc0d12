package lazyfs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// requireEnv, set to 1, makes a FUSE that cannot be mounted fail the test
// rather than skip it.
const requireEnv = "WASMKEEP_REQUIRE_FUSE"

// FS is a mounted lazy file system (see Mount).
type FS struct {
	t       testing.TB
	backing string // absolute
	mnt     string
	dev     uint64 // the backing directory's device: every file is on it

	// mu orders every change made through the mount against the others
	// and against Cut: a change's undo record is taken, and the change
	// made, under it, and a cut copies under it.
	mu sync.Mutex
	// content holds, by inode number, the writes and truncations of each
	// file since its last sync, oldest first. A file created since has a
	// first record of size 0: until it is synced it is empty.
	content map[uint64][]undo
	// names holds the name changes no sync of their directory covers
	// yet, oldest first.
	names []nameUndo
	// kept holds open the files that undoing a name change can bring
	// back (removed or replaced since their directory's last sync), so
	// that their data can still be read.
	kept  map[uint64]*keptFile
	stats Stats
}

// undo is what one write or truncation replaced: the file's size before
// it, and the bytes it overwrote or cut off at off.
type undo struct {
	off  int64
	old  []byte
	size int64
}

// entry is what a directory entry names: an inode number (0: no entry).
type entry struct {
	ino uint64
	dir bool
}

// nameUndo is one name change: what name in dir named before it.
type nameUndo struct {
	dir  string // relative to the root, "" for the root
	name string
	prev entry
}

type keptFile struct {
	f    *os.File
	refs int // the records of names whose prev is this file
}

// Stats counts what reached the file system through the mount.
type Stats struct {
	Writes      int // writes (and fallocates)
	Truncates   int
	Syncs       int // fsync and fdatasync of files
	DirSyncs    int // fsync and fdatasync of directories
	NameChanges int // names created, removed, renamed
	// FileSyncs counts the syncs of each file by its path from the root
	// when it was synced.
	FileSyncs map[string]int
}

// CutStats says what a cut undid.
type CutStats struct {
	Files        int // regular files in the copy
	UndoneWrites int // writes and truncations undone in the copy's files
	UndoneNames  int // name changes undone
}

// Mount mounts a lazy file system over the directory backing and returns
// its mount point, a new directory unmounted when the test ends. The
// backing directory must not be changed other than through the mount
// while it is mounted; what it holds when mounted counts as synced.
//
// When FUSE cannot be mounted here (no /dev/fuse, no right to mount and no
// fusermount), Mount skips the test saying why; with WASMKEEP_REQUIRE_FUSE=1
// in the environment it fails it.
func Mount(t testing.TB, backing string) (mountpoint string, lazy *FS) {
	t.Helper()
	abs, err := filepath.Abs(backing)
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(abs, &st); err != nil {
		t.Fatalf("lazyfs: the backing directory: %v", err)
	}
	if reason := fuseDevice(); reason != "" {
		unavailable(t, reason)
	}
	lazy = &FS{
		t: t, backing: abs, dev: st.Dev,
		content: map[uint64][]undo{},
		kept:    map[uint64]*keptFile{},
		stats:   Stats{FileSyncs: map[string]int{}},
	}
	lazy.mnt = t.TempDir()
	mount := func(direct bool) (*fuse.Server, error) {
		rootOps, err := fs.NewLoopbackRoot(abs)
		if err != nil {
			return nil, err
		}
		root := &node{LoopbackNode: rootOps.(*fs.LoopbackNode), fs: lazy}
		return fs.Mount(lazy.mnt, root, &fs.Options{MountOptions: fuse.MountOptions{
			FsName: "lazyfs", Name: "lazyfs",
			// mount(2) itself (root), or else fusermount.
			DirectMountStrict: direct,
			// Every write must reach the file system: no writeback
			// cache, no passthrough straight to the backing file (the
			// files are opened with direct I/O as well).
			DisabledCapabilities: fuse.CAP_WRITEBACK_CACHE | fuse.CAP_PASSTHROUGH,
			DisableXAttrs:        true,
		}})
	}
	server, direct := mount(true)
	if direct != nil {
		// Not allowed to mount(2): fusermount does it for a user.
		var err error
		server, err = mount(false)
		if err != nil {
			unavailable(t, fmt.Sprintf("cannot mount FUSE at %s: mount(2): %v; fusermount: %v", lazy.mnt, direct, err))
		}
	}
	var st0 unix.Stat_t
	if err := unix.Stat(lazy.mnt, &st0); err != nil {
		t.Fatalf("lazyfs: %v", err)
	}
	t.Cleanup(func() {
		if err := server.Unmount(); err != nil {
			// Files on the mount still open (the test failed half-way,
			// or leaked them). Closing them at the process's exit would
			// wait for this process, the server, to answer: it hangs.
			// Abort the connection instead, and detach the mount.
			t.Errorf("lazyfs: unmount %s: %v: files on it are still open; aborting it (%v) and detaching it (%v)",
				lazy.mnt, err, abort(st0.Dev), unix.Unmount(lazy.mnt, unix.MNT_DETACH))
		}
		lazy.mu.Lock()
		defer lazy.mu.Unlock()
		for ino, k := range lazy.kept {
			k.f.Close()
			delete(lazy.kept, ino)
		}
	})
	return lazy.mnt, lazy
}

// abort aborts the FUSE connection of the mount on device dev through the
// fuse control file system (mounted if it is not, as at boot): what is
// waiting on it fails with ENOTCONN, and so does what comes after.
func abort(dev uint64) error {
	const ctl = "/sys/fs/fuse/connections"
	// The connection is named by the kernel's form of the device number.
	p := filepath.Join(ctl, fmt.Sprint(uint64(unix.Major(dev))<<20|uint64(unix.Minor(dev))), "abort")
	if _, err := os.Stat(p); os.IsNotExist(err) {
		if err := unix.Mount("fusectl", ctl, "fusectl", 0, ""); err != nil {
			return fmt.Errorf("mount fusectl at %s: %w", ctl, err)
		}
	}
	return os.WriteFile(p, []byte("1"), 0)
}

// fuseDevice says why /dev/fuse cannot be used, or "" if it can.
func fuseDevice() string {
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return "/dev/fuse missing"
	}
	if err != nil {
		return fmt.Sprintf("cannot open /dev/fuse: %v", err)
	}
	f.Close()
	return ""
}

func unavailable(t testing.TB, reason string) {
	t.Helper()
	if os.Getenv(requireEnv) == "1" {
		t.Fatalf("lazyfs: %s (and %s=1 requires FUSE)", reason, requireEnv)
	}
	t.Skipf("lazyfs: %s", reason)
}

// Stats returns what reached the file system so far.
func (l *FS) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.stats
	s.FileSyncs = map[string]int{}
	for k, v := range l.stats.FileSyncs {
		s.FileSyncs[k] = v
	}
	return s
}

// Cut copies into the directory dst (created if need be) what a power cut
// at this instant would leave of the file system: every file's writes and
// truncations since its last sync undone, and every directory's name
// changes since its last sync. Changes through the mount wait meanwhile,
// so the copy is of one instant. It must be called from the test's
// goroutine: it fails the test on an error.
func (l *FS) Cut(dst string) CutStats {
	l.t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	st, err := l.cut(dst)
	if err != nil {
		l.t.Fatalf("lazyfs: cut: %v", err)
	}
	return st
}

func (l *FS) cut(dst string) (CutStats, error) {
	var cs CutStats
	// The names now, in the backing directory.
	tree := map[string]map[string]entry{}
	paths := map[uint64]string{} // where each file is now
	var walk func(rel string) error
	walk = func(rel string) error {
		des, err := os.ReadDir(filepath.Join(l.backing, rel))
		if err != nil {
			return err
		}
		m := map[string]entry{}
		tree[rel] = m
		for _, de := range des {
			p := filepath.Join(rel, de.Name())
			var st unix.Stat_t
			if err := unix.Lstat(filepath.Join(l.backing, p), &st); err != nil {
				return err
			}
			if st.Dev != l.dev {
				return fmt.Errorf("%s: on another file system than the backing directory", p)
			}
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFDIR:
				m[de.Name()] = entry{ino: st.Ino, dir: true}
				if err := walk(p); err != nil {
					return err
				}
			case unix.S_IFREG:
				m[de.Name()] = entry{ino: st.Ino}
				paths[st.Ino] = p
			default:
				return fmt.Errorf("%s: neither a file nor a directory", p)
			}
		}
		return nil
	}
	if err := walk(""); err != nil {
		return cs, err
	}
	// The names at the directories' last syncs.
	for i := len(l.names) - 1; i >= 0; i-- {
		r := l.names[i]
		m := tree[r.dir]
		if m == nil {
			m = map[string]entry{}
			tree[r.dir] = m
		}
		if r.prev.ino == 0 {
			delete(m, r.name)
		} else {
			m[r.name] = r.prev
		}
	}
	cs.UndoneNames = len(l.names)
	// The files at their last syncs.
	var emit func(rel string) error
	emit = func(rel string) error {
		if err := os.MkdirAll(filepath.Join(dst, rel), 0o755); err != nil {
			return err
		}
		m := tree[rel]
		for _, name := range slices.Sorted(maps.Keys(m)) {
			e, p := m[name], filepath.Join(rel, name)
			if e.dir {
				if err := emit(p); err != nil {
					return err
				}
				continue
			}
			b, err := l.data(e.ino, paths)
			if err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			recs := l.content[e.ino]
			cs.UndoneWrites += len(recs)
			cs.Files++
			if err := os.WriteFile(filepath.Join(dst, p), undoAll(b, recs), 0o644); err != nil {
				return err
			}
		}
		return nil
	}
	return cs, emit("")
}

// data reads what the file numbered ino holds now: from where it is in
// the backing directory, or, removed, from its kept descriptor.
func (l *FS) data(ino uint64, paths map[uint64]string) ([]byte, error) {
	if p, ok := paths[ino]; ok {
		return os.ReadFile(filepath.Join(l.backing, p))
	}
	k := l.kept[ino]
	if k == nil {
		return nil, fmt.Errorf("inode %d: neither in the backing directory nor kept", ino)
	}
	fi, err := k.f.Stat()
	if err != nil {
		return nil, err
	}
	b := make([]byte, fi.Size())
	if _, err := k.f.ReadAt(b, 0); err != nil && err != io.EOF {
		return nil, err
	}
	return b, nil
}

// undoAll undoes recs, newest first, on the file's bytes b.
func undoAll(b []byte, recs []undo) []byte {
	for i := len(recs) - 1; i >= 0; i-- {
		r := recs[i]
		if end := r.off + int64(len(r.old)); int64(len(b)) < end {
			b = append(b, make([]byte, end-int64(len(b)))...)
		}
		copy(b[r.off:], r.old)
		if r.size < int64(len(b)) {
			b = b[:r.size]
		} else if r.size > int64(len(b)) {
			b = append(b, make([]byte, r.size-int64(len(b)))...)
		}
	}
	return b
}

// recordWrite notes, before n bytes are written at off in the file
// numbered ino (open at fd), what they replace.
func (l *FS) recordWrite(ino uint64, fd int, off, n int64) syscall.Errno {
	recs := l.content[ino]
	if len(recs) > 0 && recs[0].size == 0 {
		// Created since its last sync: empty after a cut, whatever
		// is written.
		return 0
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fs.ToErrno(err)
	}
	r := undo{off: off, size: st.Size}
	if off < st.Size {
		r.old = make([]byte, min(st.Size, off+n)-off)
		if errno := preadFull(fd, r.old, off); errno != 0 {
			return errno
		}
	}
	l.content[ino] = append(recs, r)
	return 0
}

// recordTruncate notes, before the file numbered ino (open at fd) is cut
// or extended to size, what it replaces.
func (l *FS) recordTruncate(ino uint64, fd int, size int64) syscall.Errno {
	recs := l.content[ino]
	if len(recs) > 0 && recs[0].size == 0 {
		return 0
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fs.ToErrno(err)
	}
	r := undo{off: size, size: st.Size}
	if size < st.Size {
		r.old = make([]byte, st.Size-size)
		if errno := preadFull(fd, r.old, size); errno != 0 {
			return errno
		}
	}
	l.content[ino] = append(recs, r)
	return 0
}

func preadFull(fd int, b []byte, off int64) syscall.Errno {
	for n := 0; n < len(b); {
		m, err := unix.Pread(fd, b[n:], off+int64(n))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fs.ToErrno(err)
		}
		if m == 0 {
			return syscall.EIO // the file is shorter than its size
		}
		n += m
	}
	return 0
}

// changeName notes that name in dir named prev before a change.
func (l *FS) changeName(dir, name string, prev entry) {
	l.names = append(l.names, nameUndo{dir: dir, name: name, prev: prev})
	l.stats.NameChanges++
}

// keep holds the regular file at path (numbered ino) open while a record
// of a name change may bring it back.
func (l *FS) keep(ino uint64, path string) syscall.Errno {
	if k := l.kept[ino]; k != nil {
		k.refs++
		return 0
	}
	f, err := os.Open(path)
	if err != nil {
		return fs.ToErrno(err)
	}
	l.kept[ino] = &keptFile{f: f, refs: 1}
	return 0
}

func (l *FS) release(ino uint64) {
	k := l.kept[ino]
	if k == nil {
		return
	}
	if k.refs--; k.refs == 0 {
		k.f.Close()
		delete(l.kept, ino)
	}
}

// syncDir makes the name changes in dir durable.
func (l *FS) syncDir(dir string) {
	l.stats.DirSyncs++
	keep := l.names[:0]
	for _, r := range l.names {
		if r.dir != dir {
			keep = append(keep, r)
			continue
		}
		if r.prev.ino != 0 && !r.prev.dir {
			l.release(r.prev.ino)
		}
	}
	clear(l.names[len(keep):])
	l.names = keep
}

// lstatEntry returns what the backing path names (ino 0: nothing).
func lstatEntry(path string) (entry, uint32, syscall.Errno) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		if err == unix.ENOENT {
			return entry{}, 0, 0
		}
		return entry{}, 0, fs.ToErrno(err)
	}
	return entry{ino: st.Ino, dir: st.Mode&unix.S_IFMT == unix.S_IFDIR}, st.Mode & unix.S_IFMT, 0
}

// node is a loopback node whose changes are recorded (see FS).
type node struct {
	*fs.LoopbackNode
	fs *FS
}

var (
	_ fs.NodeWrapChilder     = (*node)(nil)
	_ fs.NodeWriter          = (*node)(nil)
	_ fs.NodeWritever        = (*node)(nil)
	_ fs.NodeSetattrer       = (*node)(nil)
	_ fs.NodeAllocater       = (*node)(nil)
	_ fs.NodeFsyncer         = (*node)(nil)
	_ fs.NodeOpener          = (*node)(nil)
	_ fs.NodeCreater         = (*node)(nil)
	_ fs.NodeMknoder         = (*node)(nil)
	_ fs.NodeMkdirer         = (*node)(nil)
	_ fs.NodeUnlinker        = (*node)(nil)
	_ fs.NodeRmdirer         = (*node)(nil)
	_ fs.NodeRenamer         = (*node)(nil)
	_ fs.NodeLinker          = (*node)(nil)
	_ fs.NodeSymlinker       = (*node)(nil)
	_ fs.NodeTmpfiler        = (*node)(nil)
	_ fs.NodeCopyFileRanger  = (*node)(nil)
	_ fs.NodeOpendirHandler  = (*node)(nil)
	_ fs.FileFsyncdirer      = (*dir)(nil)
	_ fs.FileReaddirenter    = (*dir)(nil)
	_ fs.FileReleasedirer    = (*dir)(nil)
	_ fs.FileSeekdirer       = (*dir)(nil)
	_ fs.FileReader          = (*file)(nil)
	_ fs.FileReleaser        = (*file)(nil)
	_ fs.FileFlusher         = (*file)(nil)
	_ fs.FileGetattrer       = (*file)(nil)
	_ fs.FileSetattrer       = (*file)(nil)
	_ fs.FileStatxer         = (*file)(nil)
	_ fs.FileLseeker         = (*file)(nil)
	_ fs.FilePassthroughFder = (*fs.LoopbackFile)(nil) // which file hides
)

func (n *node) WrapChild(ctx context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	return &node{LoopbackNode: ops.(*fs.LoopbackNode), fs: n.fs}
}

// rel is the node's path from the root ("" for the root).
func (n *node) rel() string { return n.Path(n.Root()) }

func (n *node) backingPath(name string) string {
	return filepath.Join(n.fs.backing, n.rel(), name)
}

func (n *node) ino() uint64 { return n.StableAttr().Ino }

func (n *node) Write(ctx context.Context, fh fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	f, ok := fh.(*file)
	if !ok {
		return 0, syscall.EBADF
	}
	n.fs.mu.Lock()
	defer n.fs.mu.Unlock()
	if errno := n.fs.recordWrite(n.ino(), f.fd(), off, int64(len(data))); errno != 0 {
		return 0, errno
	}
	n.fs.stats.Writes++
	return f.lf.Write(ctx, data, off)
}

func (n *node) Writev(ctx context.Context, fh fs.FileHandle, data [][]byte, off int64) (uint32, syscall.Errno) {
	return n.Write(ctx, fh, slices.Concat(data...), off)
}

func (n *node) Allocate(ctx context.Context, fh fs.FileHandle, off, size uint64, mode uint32) syscall.Errno {
	f, ok := fh.(*file)
	if !ok {
		return syscall.EBADF
	}
	n.fs.mu.Lock()
	defer n.fs.mu.Unlock()
	if errno := n.fs.recordWrite(n.ino(), f.fd(), int64(off), int64(size)); errno != 0 {
		return errno
	}
	n.fs.stats.Writes++
	return f.lf.Allocate(ctx, off, size, mode)
}

func (n *node) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	size, ok := in.GetSize()
	if !ok {
		return n.LoopbackNode.Setattr(ctx, fh, in, out)
	}
	n.fs.mu.Lock()
	defer n.fs.mu.Unlock()
	if f, ok := fh.(*file); ok {
		if errno := n.fs.recordTruncate(n.ino(), f.fd(), int64(size)); errno != 0 {
			return errno
		}
	} else {
		of, err := os.Open(n.backingPath(""))
		if err != nil {
			return fs.ToErrno(err)
		}
		errno := n.fs.recordTruncate(n.ino(), int(of.Fd()), int64(size))
		of.Close()
		if errno != 0 {
			return errno
		}
	}
	n.fs.stats.Truncates++
	return n.LoopbackNode.Setattr(ctx, fh, in, out)
}

// Fsync (fsync, fdatasync) makes the file's writes durable; the backing
// file is not synced, only the record of what a cut undoes changes. A
// directory's goes to syncDir (through dir.Fsyncdir).
func (n *node) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	n.fs.mu.Lock()
	defer n.fs.mu.Unlock()
	if n.IsDir() {
		n.fs.syncDir(n.rel())
		return 0
	}
	delete(n.fs.content, n.ino())
	n.fs.stats.Syncs++
	n.fs.stats.FileSyncs[n.rel()]++
	return 0
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if flags&syscall.O_TRUNC != 0 && flags&syscall.O_ACCMODE != syscall.O_RDONLY {
		// (The kernel truncates with a setattr unless asked for atomic
		// O_TRUNC, which this file system is not: a guard.)
		n.fs.mu.Lock()
		defer n.fs.mu.Unlock()
		of, err := os.Open(n.backingPath(""))
		if err != nil {
			return nil, 0, fs.ToErrno(err)
		}
		errno := n.fs.recordTruncate(n.ino(), int(of.Fd()), 0)
		of.Close()
		if errno != 0 {
			return nil, 0, errno
		}
		n.fs.stats.Truncates++
	}
	fh, flags, errno := n.LoopbackNode.Open(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	return &file{lf: fh.(*fs.LoopbackFile)}, flags | fuse.FOPEN_DIRECT_IO, 0
}

func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	n.fs.mu.Lock()
	defer n.fs.mu.Unlock()
	p := n.backingPath(name)
	prev, typ, errno := lstatEntry(p)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	if prev.ino != 0 && typ == unix.S_IFREG && flags&syscall.O_TRUNC != 0 && flags&syscall.O_EXCL == 0 {
		of, err := os.Open(p)
		if err != nil {
			return nil, nil, 0, fs.ToErrno(err)
		}
		errno := n.fs.recordTruncate(prev.ino, int(of.Fd()), 0)
		of.Close()
		if errno != 0 {
			return nil, nil, 0, errno
		}
		n.fs.stats.Truncates++
	}
	ch, fh, fl, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	if prev.ino == 0 {
		n.fs.created(n.rel(), name, ch.StableAttr().Ino)
	}
	return ch, &file{lf: fh.(*fs.LoopbackFile)}, fl | fuse.FOPEN_DIRECT_IO, 0
}

// created notes a new file: empty until synced, named until its directory
// is synced. Any record of an earlier file with the same number (removed
// for good) is dropped.
func (l *FS) created(dir, name string, ino uint64) {
	l.content[ino] = []undo{{}}
	l.changeName(dir, name, entry{})
}

// Mknod makes regular files only (as Create): nothing else is modelled.
func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if mode&syscall.S_IFMT != syscall.S_IFREG && mode&syscall.S_IFMT != 0 {
		return nil, syscall.ENOTSUP
	}
	n.fs.mu.Lock()
	defer n.fs.mu.Unlock()
	ch, errno := n.LoopbackNode.Mknod(ctx, name, mode, rdev, out)
	if errno != 0 {
		return nil, errno
	}
	n.fs.created(n.rel(), name, ch.StableAttr().Ino)
	return ch, 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	n.fs.mu.Lock()
	defer n.fs.mu.Unlock()
	ch, errno := n.LoopbackNode.Mkdir(ctx, name, mode, out)
	if errno != 0 {
		return nil, errno
	}
	n.fs.changeName(n.rel(), name, entry{})
	return ch, 0
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	n.fs.mu.Lock()
	defer n.fs.mu.Unlock()
	prev, _, errno := lstatEntry(n.backingPath(name))
	if errno != 0 {
		return errno
	}
	if errno := n.LoopbackNode.Rmdir(ctx, name); errno != 0 {
		return errno
	}
	n.fs.changeName(n.rel(), name, prev)
	return 0
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	n.fs.mu.Lock()
	defer n.fs.mu.Unlock()
	p := n.backingPath(name)
	prev, typ, errno := lstatEntry(p)
	if errno != 0 {
		return errno
	}
	if prev.ino == 0 {
		return syscall.ENOENT
	}
	if typ != unix.S_IFREG {
		return syscall.ENOTSUP // nothing else is made here
	}
	if errno := n.fs.keep(prev.ino, p); errno != 0 {
		return errno
	}
	if errno := n.LoopbackNode.Unlink(ctx, name); errno != 0 {
		n.fs.release(prev.ino)
		return errno
	}
	n.fs.changeName(n.rel(), name, prev)
	return 0
}

// Rename renames files; a directory, which the model names by its path,
// cannot be moved (EXDEV, as across file systems). The change is two
// name changes, one in each directory, each undone unless its directory
// was synced: a cut may leave the file under both names, or neither, which
// is as much as POSIX promises.
func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	n.fs.mu.Lock()
	defer n.fs.mu.Unlock()
	from, to := n.backingPath(name), np.backingPath(newName)
	src, styp, errno := lstatEntry(from)
	if errno != 0 {
		return errno
	}
	dst, dtyp, errno := lstatEntry(to)
	if errno != 0 {
		return errno
	}
	if src.ino == 0 {
		return syscall.ENOENT
	}
	if src.dir || dst.dir {
		return syscall.EXDEV
	}
	if styp != unix.S_IFREG || (dst.ino != 0 && dtyp != unix.S_IFREG) {
		return syscall.ENOTSUP
	}
	// Both may lose their names: the source if the change is swapped
	// (RENAME_EXCHANGE), the destination if replaced.
	if errno := n.fs.keep(src.ino, from); errno != 0 {
		return errno
	}
	if dst.ino != 0 {
		if errno := n.fs.keep(dst.ino, to); errno != 0 {
			n.fs.release(src.ino)
			return errno
		}
	}
	if errno := n.LoopbackNode.Rename(ctx, name, np.LoopbackNode, newName, flags); errno != 0 {
		n.fs.release(src.ino)
		if dst.ino != 0 {
			n.fs.release(dst.ino)
		}
		return errno
	}
	n.fs.changeName(n.rel(), name, src)
	n.fs.changeName(np.rel(), newName, dst)
	return 0
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	t, ok := target.(*node)
	if !ok {
		return nil, syscall.EXDEV
	}
	n.fs.mu.Lock()
	defer n.fs.mu.Unlock()
	ch, errno := n.LoopbackNode.Link(ctx, t.LoopbackNode, name, out)
	if errno != 0 {
		return nil, errno
	}
	n.fs.changeName(n.rel(), name, entry{})
	return ch, 0
}

// Symlink is not modelled.
func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.ENOTSUP
}

// Tmpfile (O_TMPFILE) is not modelled: its callers fall back to a name.
func (n *node) Tmpfile(ctx context.Context, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.ENOTSUP
}

// CopyFileRange answers ENOSYS: the kernel then copies with reads and
// writes, which are recorded.
func (n *node) CopyFileRange(ctx context.Context, fhIn fs.FileHandle, offIn uint64, out *fs.Inode, fhOut fs.FileHandle, offOut, size, flags uint64) (uint32, syscall.Errno) {
	return 0, syscall.ENOSYS
}

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fl, errno := n.LoopbackNode.OpendirHandle(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	return &dir{ds: fh, n: n}, fl, 0
}

// dir is an open directory whose fsync and fdatasync (FSYNCDIR) make its
// name changes durable.
type dir struct {
	ds fs.FileHandle // the loopback's
	n  *node
}

func (d *dir) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	d.n.fs.mu.Lock()
	defer d.n.fs.mu.Unlock()
	d.n.fs.syncDir(d.n.rel())
	return 0
}

func (d *dir) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	return d.ds.(fs.FileReaddirenter).Readdirent(ctx)
}

func (d *dir) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	if s, ok := d.ds.(fs.FileSeekdirer); ok {
		return s.Seekdir(ctx, off)
	}
	return syscall.ENOTSUP
}

func (d *dir) Releasedir(ctx context.Context, flags uint32) {
	if r, ok := d.ds.(fs.FileReleasedirer); ok {
		r.Releasedir(ctx, flags)
	}
}

// file is an open file: the loopback's, without its passthrough (every
// write must come to node.Write) and without the calls node makes itself
// (writes, syncs, fallocate).
type file struct {
	lf *fs.LoopbackFile
}

func (f *file) fd() int {
	fd, _ := f.lf.PassthroughFd() // the descriptor, for the records' reads
	return fd
}

func (f *file) Read(ctx context.Context, buf []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	return f.lf.Read(ctx, buf, off)
}

func (f *file) Release(ctx context.Context) syscall.Errno { return f.lf.Release(ctx) }
func (f *file) Flush(ctx context.Context) syscall.Errno   { return f.lf.Flush(ctx) }

func (f *file) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	return f.lf.Getattr(ctx, out)
}

func (f *file) Setattr(ctx context.Context, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return f.lf.Setattr(ctx, in, out)
}

func (f *file) Statx(ctx context.Context, flags, mask uint32, out *fuse.StatxOut) syscall.Errno {
	return f.lf.Statx(ctx, flags, mask, out)
}

func (f *file) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	return f.lf.Lseek(ctx, off, whence)
}
