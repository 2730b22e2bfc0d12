package hostmod

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ncruces/go-sqlite3"
	"github.com/ncruces/go-sqlite3/vfs"
)

// storeFiles returns the store's database file and WAL as the store VFS
// opened them.
func storeFiles(t *testing.T, s *Store) (db, wal *storeFile) {
	t.Helper()
	for i, op := range []sqlite3.FcntlOpcode{sqlite3.FCNTL_FILE_POINTER, sqlite3.FCNTL_JOURNAL_POINTER} {
		v, err := s.conn.FileControl(storeSchema, op)
		if err != nil {
			t.Fatal(err)
		}
		f, ok := unwrapFile(v).(*storeFile)
		if !ok {
			t.Fatalf("file %d of the store is a %T, not opened by the store VFS", i, v)
		}
		if i == 0 {
			db = f
		} else {
			wal = f
		}
	}
	return db, wal
}

// Opening a sleeping actor's database reads its WAL (the recovery of
// every frame) in one system call and its file's first pages in another,
// and what it reads is the committed state.
func TestAnOpenReadsTheWALInOneRead(t *testing.T) {
	p := filepath.Join(t.TempDir(), "a.db")
	st := writeAlarm(t, p, 1, true)
	for i := int64(2); i <= 7; i++ {
		if err := st.Begin(); err != nil {
			t.Fatal(err)
		}
		if err := st.SetAlarm(i); err != nil {
			t.Fatal(err)
		}
		if err := st.KVPut([]byte{byte(i)}, make([]byte, 300)); err != nil {
			t.Fatal(err)
		}
		if err := st.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p + "-wal")
	if err != nil || fi.Size() < 8*4096 || fi.Size() > closeCheckpointBytes {
		t.Fatalf("the WAL: %v, %v; want the commits in it", fi, err)
	}
	st, err = OpenStore(p)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	at, ok, err := st.Alarm()
	if err != nil || !ok || at != 7 {
		t.Fatalf("alarm %d, %v, %v; want 7", at, ok, err)
	}
	db, wal := storeFiles(t, st)
	if wal.sysReads != 1 {
		t.Errorf("the open read the WAL in %d system calls, want 1", wal.sysReads)
	}
	// The header, read before the lock, and then the first pages.
	if db.sysReads > 2 {
		t.Errorf("the open read the database file in %d system calls, want 2", db.sysReads)
	}
	// The first transaction's end gives the buffers back: an open store
	// keeps none.
	if err := st.Begin(); err != nil {
		t.Fatal(err)
	}
	if err := st.Commit(); err != nil {
		t.Fatal(err)
	}
	if db.ahead != nil || wal.ahead != nil {
		t.Error("a store kept its read-ahead buffers past its first transaction")
	}
}

// What a file read ahead is dropped when the file is written, truncated
// or unlocked: a read after any of them sees the file as it is.
func TestReadAheadSeesTheFileAsItIs(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f.db")
	if err := os.WriteFile(p, []byte(strings.Repeat("a", 8192)), 0o644); err != nil {
		t.Fatal(err)
	}
	vf, err := openStoreFile(p, vfs.OPEN_MAIN_DB|vfs.OPEN_READWRITE)
	if err != nil {
		t.Fatal(err)
	}
	f := vf.(*storeFile)
	defer f.Close()
	read := func(off int64) string {
		t.Helper()
		b := make([]byte, 4)
		if _, err := f.ReadAt(b, off); err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	lock := func() {
		t.Helper()
		if err := f.Lock(vfs.LOCK_SHARED); err != nil {
			t.Fatal(err)
		}
		if got := read(0); got != "aaaa" || f.ahead != nil {
			t.Fatalf("read %q under a shared lock, ahead %v; want no read-ahead", got, f.ahead != nil)
		}
		if err := f.Lock(vfs.LOCK_EXCLUSIVE); err != nil {
			t.Fatal(err)
		}
	}
	lock()
	if got := read(0); got != "aaaa" {
		t.Fatalf("read %q", got)
	}
	if f.ahead == nil {
		t.Fatal("the first read under the lock did not read ahead")
	}
	if _, err := f.WriteAt([]byte("bbbb"), 100); err != nil {
		t.Fatal(err)
	}
	if got := read(100); got != "bbbb" {
		t.Fatalf("after a write, read %q; want bbbb", got)
	}

	// Unlocked, another writer may change the file.
	g, err := openStoreFile(p, vfs.OPEN_MAIN_DB|vfs.OPEN_READWRITE)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	f.aheadOK = true
	if got := read(200); got != "aaaa" || f.ahead == nil {
		t.Fatalf("read %q, ahead %v", got, f.ahead != nil)
	}
	if err := f.Unlock(vfs.LOCK_NONE); err != nil {
		t.Fatal(err)
	}
	if _, err := g.WriteAt([]byte("cccc"), 200); err != nil {
		t.Fatal(err)
	}
	lock()
	if got := read(200); got != "cccc" {
		t.Fatalf("after another writer's change while unlocked, read %q; want cccc", got)
	}

	f.aheadOK = true
	if got := read(300); got != "aaaa" || f.ahead == nil {
		t.Fatalf("read %q, ahead %v", got, f.ahead != nil)
	}
	if err := f.Truncate(4096); err != nil {
		t.Fatal(err)
	}
	if n, err := f.ReadAt(make([]byte, 4), 5000); n != 0 || err == nil {
		t.Fatalf("past the truncated end: %d bytes, %v; want none", n, err)
	}
}

// A commit writes each WAL frame, its header and its page, in one system
// call, and what it wrote is what a reopened store reads.
func TestACommitWritesEachWALFrameInOneCall(t *testing.T) {
	p := filepath.Join(t.TempDir(), "a.db")
	st := writeAlarm(t, p, 1, true)
	_, wal := storeFiles(t, st)
	for i := int64(2); i <= 20; i++ {
		size0, err := wal.Size()
		if err != nil {
			t.Fatal(err)
		}
		writes0 := wal.sysWrites
		if err := st.Begin(); err != nil {
			t.Fatal(err)
		}
		if err := st.SetAlarm(i); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 { // a second page in some commits
			if err := st.KVPut([]byte{byte(i)}, make([]byte, 300)); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.Commit(); err != nil {
			t.Fatal(err)
		}
		size1, err := wal.Size()
		if err != nil {
			t.Fatal(err)
		}
		if size1 <= size0 {
			continue // the WAL started again after a checkpoint: not a plain append
		}
		frames := (size1 - size0) / (walFrameHeaderSize + 4096)
		if frames < 1 || (size1-size0)%(walFrameHeaderSize+4096) != 0 {
			t.Fatalf("commit %d grew the WAL by %d bytes, not whole frames", i, size1-size0)
		}
		if got := int64(wal.sysWrites - writes0); got != frames {
			t.Errorf("commit %d wrote %d frames in %d system calls, want %d", i, frames, got, frames)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := OpenStore(p)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if at, ok, err := st.Alarm(); err != nil || !ok || at != 20 {
		t.Fatalf("reopened: alarm %d, %v, %v; want 20", at, ok, err)
	}
	for i := 3; i <= 18; i += 3 {
		if v, ok, err := st.KVGet([]byte{byte(i)}); err != nil || !ok || len(v) != 300 {
			t.Fatalf("reopened: key %d: %d bytes, %v, %v", i, len(v), ok, err)
		}
	}
}

// A WAL frame header held back for its page is on the file before
// anything else reads, sizes, syncs, truncates or locks it, or writes
// elsewhere.
func TestAHeldFrameHeaderIsWrittenBeforeAnythingElse(t *testing.T) {
	hdr := []byte(strings.Repeat("h", walFrameHeaderSize))
	for _, c := range []struct {
		name string
		op   func(f *storeFile) error
	}{
		{"read", func(f *storeFile) error { _, err := f.ReadAt(make([]byte, 4), 0); return err }},
		{"size", func(f *storeFile) error { _, err := f.Size(); return err }},
		{"sync", func(f *storeFile) error { return f.Sync(vfs.SYNC_NORMAL) }},
		{"truncate", func(f *storeFile) error { return f.Truncate(4096) }},
		{"lock", func(f *storeFile) error { return f.Lock(vfs.LOCK_SHARED) }},
		{"unlock", func(f *storeFile) error { return f.Unlock(vfs.LOCK_NONE) }},
		{"a write elsewhere", func(f *storeFile) error { _, err := f.WriteAt([]byte("x"), 0); return err }},
		{"close", func(f *storeFile) error { return f.Close() }},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "a.db-wal")
			if err := os.WriteFile(p, make([]byte, 32), 0o644); err != nil {
				t.Fatal(err)
			}
			vf, err := openStoreFile(p, vfs.OPEN_WAL|vfs.OPEN_READWRITE)
			if err != nil {
				t.Fatal(err)
			}
			f := vf.(*storeFile)
			defer f.Close()
			if c.name == "unlock" {
				if err := f.Lock(vfs.LOCK_SHARED); err != nil {
					t.Fatal(err)
				}
			}
			if n, err := f.WriteAt(hdr, 32); n != len(hdr) || err != nil {
				t.Fatalf("WriteAt: %d, %v", n, err)
			}
			if err := c.op(f); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) < 32+len(hdr) || string(b[32:32+len(hdr)]) != string(hdr) {
				t.Fatalf("after %s the file holds %q past its first 32 bytes; want the header", c.name, b[min(32, len(b)):])
			}
		})
	}
}

// A snapshot after a commit reads the WAL once, for the frames the commit
// added: the WAL's header, which only the store itself can change while
// it is open, is read again only when it may have changed.
func TestASnapshotReadsOnlyTheNewFrames(t *testing.T) {
	p := filepath.Join(t.TempDir(), "a.db")
	st := writeAlarm(t, p, 1, true)
	defer st.Close()
	if _, err := st.SnapshotTo(nil); err != nil { // builds the image
		t.Fatal(err)
	}
	_, wal := storeFiles(t, st)
	var buf []byte
	restarts := 0
	for i := int64(2); i <= 400; i++ {
		before := wal.hdrGen
		if err := st.Begin(); err != nil {
			t.Fatal(err)
		}
		if err := st.SetAlarm(i); err != nil {
			t.Fatal(err)
		}
		if err := st.Commit(); err != nil {
			t.Fatal(err)
		}
		restarted := wal.hdrGen != before // a checkpoint, and the WAL started again
		reads, misses, from := wal.sysReads, st.imageMisses, st.img.off
		img, err := st.SnapshotTo(buf)
		if err != nil {
			t.Fatal(err)
		}
		if st.imageMisses != misses {
			t.Fatalf("commit %d: the snapshot was serialised, not copied from the image", i)
		}
		if st.img.gen != wal.hdrGen {
			t.Fatalf("commit %d: the image is at header generation %d, the WAL at %d", i, st.img.gen, wal.hdrGen)
		}
		size, err := wal.Size()
		if err != nil {
			t.Fatal(err)
		}
		// One read of the new frames (and of what follows them, in steps
		// of 8 frames, up to the first frame that is not the WAL's); a
		// second finds the end of the file when that read reaches it.
		want := 1
		if from+8*(walFrameHeaderSize+4096) > size {
			want = 2
		}
		if restarted {
			restarts++
		} else if got := wal.sysReads - reads; got != want {
			t.Errorf("commit %d: the snapshot made %d reads of the WAL, want %d", i, got, want)
		}
		if i%25 == 0 {
			if got, want := openImage(t, filepath.Join(t.TempDir(), "r.db"), img), dump(t, st.conn); got != want {
				t.Fatalf("commit %d: the snapshot holds\n%s\nthe store holds\n%s", i, got, want)
			}
		}
		buf = img
	}
	if restarts == 0 {
		t.Fatal("the WAL never started again: the test did not see a new header")
	}
}
