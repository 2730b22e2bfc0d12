package lazyfs_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/wasmkeep/alarms/internal/lazyfs"
)

// mount mounts a lazy file system over a new directory.
func mount(t *testing.T) (string, *lazyfs.FS) {
	t.Helper()
	mnt, l := lazyfs.Mount(t, t.TempDir())
	var st unix.Statfs_t
	if err := unix.Statfs(mnt, &st); err != nil {
		t.Fatal(err)
	}
	if st.Type != unix.FUSE_SUPER_MAGIC {
		t.Fatalf("%s is not a FUSE mount (type %#x)", mnt, st.Type)
	}
	return mnt, l
}

// cut returns the files of a cut at this instant, path to contents.
func cut(t *testing.T, l *lazyfs.FS) map[string]string {
	t.Helper()
	dst := t.TempDir()
	l.Cut(dst)
	files := map[string]string{}
	err := filepath.WalkDir(dst, func(p string, e os.DirEntry, err error) error {
		if err != nil || p == dst {
			return err
		}
		rel, _ := filepath.Rel(dst, p)
		if e.IsDir() {
			files[rel+"/"] = ""
			return nil
		}
		b, err := os.ReadFile(p)
		files[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func want(t *testing.T, got map[string]string, want map[string]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("the cut holds %v, want %v", got, want)
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Fatalf("the cut holds %v, want %v", got, want)
		}
	}
}

func create(t *testing.T, path, data string) *os.File {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if _, err := f.WriteAt([]byte(data), 0); err != nil {
		t.Fatal(err)
	}
	return f
}

func fdatasync(t *testing.T, f *os.File) {
	t.Helper()
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		t.Fatal(err)
	}
}

func syncDir(t *testing.T, dir string) {
	t.Helper()
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := unix.Fdatasync(int(d.Fd())); err != nil {
		t.Fatal(err)
	}
}

func writeAt(t *testing.T, f *os.File, data string, off int64) {
	t.Helper()
	if _, err := f.WriteAt([]byte(data), off); err != nil {
		t.Fatal(err)
	}
}

// A file's writes and truncations since its last sync are undone by a
// cut, those before it kept; the mount itself shows every write.
func TestACutUndoesTheWritesSinceTheFilesLastSync(t *testing.T) {
	mnt, l := mount(t)
	f := create(t, filepath.Join(mnt, "f"), "hello")
	fdatasync(t, f)
	syncDir(t, mnt)
	want(t, cut(t, l), map[string]string{"f": "hello"})

	writeAt(t, f, " world", 5)
	writeAt(t, f, "J", 0)
	if err := f.Truncate(8); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(mnt, "f")); string(b) != "Jello wo" {
		t.Fatalf("the mount reads %q", b)
	}
	want(t, cut(t, l), map[string]string{"f": "hello"})

	if err := f.Sync(); err != nil { // fsync, as fdatasync
		t.Fatal(err)
	}
	want(t, cut(t, l), map[string]string{"f": "Jello wo"})

	// A truncation and an extension past the old end, both undone.
	if err := f.Truncate(2); err != nil {
		t.Fatal(err)
	}
	writeAt(t, f, "xyz", 10)
	want(t, cut(t, l), map[string]string{"f": "Jello wo"})

	s := l.Stats()
	if s.Writes != 4 || s.Truncates != 2 || s.Syncs != 2 || s.FileSyncs["f"] != 2 || s.DirSyncs != 1 {
		t.Fatalf("stats %+v: want 4 writes, 2 truncations, 2 syncs of f, 1 of the directory", s)
	}
}

// A write larger than the kernel's largest FUSE request (it is split) is
// undone whole, and what a cut copies is of one instant.
func TestACutUndoesALargeWriteWhole(t *testing.T) {
	mnt, l := mount(t)
	old := bytes.Repeat([]byte("a"), 300<<10)
	f := create(t, filepath.Join(mnt, "f"), string(old))
	fdatasync(t, f)
	syncDir(t, mnt)
	writeAt(t, f, string(bytes.Repeat([]byte("b"), 1<<20)), 4096)
	if n := l.Stats().Writes; n < 3 {
		t.Fatalf("%d writes reached the file system: the 1 MiB write should come in pieces", n)
	}
	want(t, cut(t, l), map[string]string{"f": string(old)})
}

// A new file's name needs its directory's sync, and its contents the
// file's: one without the other leaves no file or an empty one.
func TestANewFileNeedsItsDirectorysSync(t *testing.T) {
	mnt, l := mount(t)
	f := create(t, filepath.Join(mnt, "f"), "data")
	fdatasync(t, f)
	want(t, cut(t, l), map[string]string{})

	g := create(t, filepath.Join(mnt, "g"), "more")
	syncDir(t, mnt)
	want(t, cut(t, l), map[string]string{"f": "data", "g": ""})
	fdatasync(t, g)
	want(t, cut(t, l), map[string]string{"f": "data", "g": "more"})

	// In a new directory: the directory's own name needs its parent's
	// sync.
	sub := filepath.Join(mnt, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	h := create(t, filepath.Join(sub, "h"), "deep")
	fdatasync(t, h)
	syncDir(t, sub)
	want(t, cut(t, l), map[string]string{"f": "data", "g": "more"})
	syncDir(t, mnt)
	want(t, cut(t, l), map[string]string{"f": "data", "g": "more", "sub/": "", "sub/h": "deep"})
}

// A removal and a rename are undone until their directory's sync; a file
// a cut brings back has its synced contents, even when it was written
// after it lost its name.
func TestACutUndoesRemovalsAndRenames(t *testing.T) {
	mnt, l := mount(t)
	a := create(t, filepath.Join(mnt, "a"), "A")
	b := create(t, filepath.Join(mnt, "b"), "B")
	fdatasync(t, a)
	fdatasync(t, b)
	syncDir(t, mnt)

	if err := os.Rename(filepath.Join(mnt, "a"), filepath.Join(mnt, "b")); err != nil {
		t.Fatal(err)
	}
	writeAt(t, b, "b", 0) // the replaced file, open still
	want(t, cut(t, l), map[string]string{"a": "A", "b": "B"})
	syncDir(t, mnt)
	want(t, cut(t, l), map[string]string{"b": "A"})

	if err := os.Remove(filepath.Join(mnt, "b")); err != nil {
		t.Fatal(err)
	}
	writeAt(t, a, "x", 0)
	want(t, cut(t, l), map[string]string{"b": "A"})
	fdatasync(t, a)
	want(t, cut(t, l), map[string]string{"b": "x"})
	syncDir(t, mnt)
	want(t, cut(t, l), map[string]string{})

	// Written, synced, renamed over an existing name in a second
	// directory, only the first of the two directories synced: the file
	// is under neither name, and the name it replaced is back.
	sub := filepath.Join(mnt, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	c := create(t, filepath.Join(mnt, "c"), "C")
	d := create(t, filepath.Join(sub, "d"), "D")
	fdatasync(t, c)
	fdatasync(t, d)
	syncDir(t, sub)
	syncDir(t, mnt)
	if err := os.Rename(filepath.Join(mnt, "c"), filepath.Join(sub, "d")); err != nil {
		t.Fatal(err)
	}
	syncDir(t, mnt)
	want(t, cut(t, l), map[string]string{"sub/": "", "sub/d": "D"})
	syncDir(t, sub)
	want(t, cut(t, l), map[string]string{"sub/": "", "sub/d": "C"})
}

// The backing directory holds everything written, the cut only what was
// synced; closing a file does not sync it.
func TestTheBackingDirectoryHoldsEveryWrite(t *testing.T) {
	backing := t.TempDir()
	mnt, l := lazyfs.Mount(t, backing)
	f := create(t, filepath.Join(mnt, "f"), "synced")
	fdatasync(t, f)
	syncDir(t, mnt)
	writeAt(t, f, "SYNCED, NOT", 0)
	if b, _ := os.ReadFile(filepath.Join(backing, "f")); string(b) != "SYNCED, NOT" {
		t.Fatalf("the backing file holds %q", b)
	}
	want(t, cut(t, l), map[string]string{"f": "synced"})
	// Closing is not syncing.
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	want(t, cut(t, l), map[string]string{"f": "synced"})
}

// tb records a test's errors and cleanups rather than acting on them.
type tb struct {
	testing.TB
	errs     []string
	cleanups []func()
}

func (r *tb) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}
func (r *tb) Cleanup(f func()) { r.cleanups = append(r.cleanups, f) }

// A mount left with a file open when its test ends cannot be unmounted:
// the test fails, and the connection is aborted, so that closing the file
// later (at the latest when the process exits, which would otherwise wait
// on itself, the server) does not hang.
func TestAMountLeftWithAFileOpenIsAborted(t *testing.T) {
	r := &tb{TB: t}
	mnt, _ := lazyfs.Mount(r, t.TempDir())
	f := create(t, filepath.Join(mnt, "f"), "open")
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
	if len(r.errs) != 1 || !strings.Contains(r.errs[0], "still open") {
		t.Fatalf("the test's errors: %q; want one, that a file is still open", r.errs)
	}
	if _, err := f.WriteAt([]byte("x"), 0); !errors.Is(err, unix.ENOTCONN) {
		t.Fatalf("a write after the abort: %v, want ENOTCONN", err)
	}
	if err := f.Close(); err != nil && !errors.Is(err, unix.ENOTCONN) {
		t.Fatal(err)
	}
}
