package engine

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
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

// A commit writes its WAL frames, each a header and a page, in one system
// call, however many there are, and what it wrote is what a reopened
// store reads.
func TestACommitWritesItsWALFramesInOneCall(t *testing.T) {
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
		if got := wal.sysWrites - writes0; got != 1 {
			t.Errorf("commit %d wrote %d frames in %d system calls, want 1", i, frames, got)
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

// WAL frames held back for the rest of their commit (here a frame header,
// and a whole frame that is not a commit frame) are on the file before
// anything else reads, sizes, syncs, truncates or locks it, or writes
// elsewhere; a commit frame is on it when the write of its page returns.
func TestHeldWALFramesAreWrittenBeforeAnythingElse(t *testing.T) {
	frame := func(fill string, commit bool) []byte {
		b := []byte(strings.Repeat(fill, walFrameHeaderSize+4096))
		if commit {
			binary.BigEndian.PutUint32(b[4:], 7)
		} else {
			binary.BigEndian.PutUint32(b[4:], 0)
		}
		return b
	}
	open := func(t *testing.T) (*storeFile, string) {
		p := filepath.Join(t.TempDir(), "a.db-wal")
		if err := os.WriteFile(p, make([]byte, 32), 0o644); err != nil {
			t.Fatal(err)
		}
		vf, err := openStoreFile(p, vfs.OPEN_WAL|vfs.OPEN_READWRITE)
		if err != nil {
			t.Fatal(err)
		}
		return vf.(*storeFile), p
	}
	write := func(t *testing.T, f *storeFile, fr []byte, off int64) {
		t.Helper()
		if n, err := f.WriteAt(fr[:walFrameHeaderSize], off); n != walFrameHeaderSize || err != nil {
			t.Fatalf("WriteAt: %d, %v", n, err)
		}
		if n, err := f.WriteAt(fr[walFrameHeaderSize:], off+walFrameHeaderSize); n != 4096 || err != nil {
			t.Fatalf("WriteAt: %d, %v", n, err)
		}
	}
	t.Run("commit frame", func(t *testing.T) {
		f, p := open(t)
		defer f.Close()
		first, last := frame("a", false), frame("b", true)
		write(t, f, first, 32)
		if f.sysWrites != 0 {
			t.Fatalf("a frame that is not a commit's last was written at once (%d calls)", f.sysWrites)
		}
		write(t, f, last, 32+int64(len(first)))
		if f.sysWrites != 1 {
			t.Fatalf("a commit of two frames took %d system calls, want 1", f.sysWrites)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if want := string(first) + string(last); string(b[32:]) != want {
			t.Fatal("the commit's frames are not on the file as written")
		}
	})
	hdr := []byte(strings.Repeat("h", walFrameHeaderSize))
	whole := frame("f", false)
	for _, c := range []struct {
		name string
		op   func(f *storeFile) error
	}{
		{"read", func(f *storeFile) error { _, err := f.ReadAt(make([]byte, 4), 0); return err }},
		{"size", func(f *storeFile) error { _, err := f.Size(); return err }},
		{"sync", func(f *storeFile) error { return f.Sync(vfs.SYNC_NORMAL) }},
		{"truncate", func(f *storeFile) error { return f.Truncate(1 << 16) }},
		{"lock", func(f *storeFile) error { return f.Lock(vfs.LOCK_SHARED) }},
		{"unlock", func(f *storeFile) error { return f.Unlock(vfs.LOCK_NONE) }},
		{"a write elsewhere", func(f *storeFile) error { _, err := f.WriteAt([]byte("x"), 0); return err }},
		{"close", func(f *storeFile) error { return f.Close() }},
	} {
		for _, held := range [][]byte{hdr, whole} {
			t.Run(fmt.Sprintf("%s/%d bytes", c.name, len(held)), func(t *testing.T) {
				f, p := open(t)
				defer f.Close()
				if c.name == "unlock" {
					if err := f.Lock(vfs.LOCK_SHARED); err != nil {
						t.Fatal(err)
					}
				}
				if len(held) == len(hdr) {
					if n, err := f.WriteAt(hdr, 32); n != len(hdr) || err != nil {
						t.Fatalf("WriteAt: %d, %v", n, err)
					}
				} else {
					write(t, f, held, 32)
				}
				if f.sysWrites != 0 {
					t.Fatalf("written at once (%d calls), not held", f.sysWrites)
				}
				if err := c.op(f); err != nil {
					t.Fatal(err)
				}
				b, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				if len(b) < 32+len(held) || string(b[32:32+len(held)]) != string(held) {
					t.Fatalf("after %s the file does not hold the held bytes past its first 32", c.name)
				}
			})
		}
	}
}

// A snapshot after a commit reads the WAL once, for the frames the commit
// added: the WAL's header, which only the store itself can change while
// it is open, is read again only when it may have changed. Once the WAL
// started again under a header the store wrote, the snapshot takes the
// frames from what the store wrote, and reads none.
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
		if restarts > 0 {
			want = 0
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
	if restarts < 2 {
		t.Fatalf("the WAL started again %d times: the test did not see the frames kept under a header the store wrote", restarts)
	}
}

// The frames a snapshot takes from what the store wrote (once the WAL
// started again under a header the store wrote) make the database a
// backup makes, whatever the commits wrote: transactions rolled back after
// they spilled frames into the WAL (a small page cache), frames of an open
// transaction written again in place, commits larger than the WAL file
// keeps in memory (the snapshot reads those from the file), checkpoints
// that empty the WAL, and several commits between snapshots.
func TestASnapshotTakesTheFramesTheStoreWrote(t *testing.T) {
	steps := 120
	if testing.Short() {
		steps = 50
	}
	dir := t.TempDir()
	tailReads, rewrites, large := 0, 0, 0
	for seed := range 3 {
		rnd := rand.New(rand.NewPCG(uint64(seed), 16))
		p := filepath.Join(dir, fmt.Sprintf("s%d.db", seed))
		st, err := OpenStore(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.conn.Exec(`PRAGMA ` + storeSchema + `.cache_size=6`); err != nil {
			t.Fatal(err)
		}
		if _, err := st.SnapshotTo(nil); err != nil { // the image asks for the frames from now on
			t.Fatal(err)
		}
		var buf []byte
		for step := range steps {
			name := fmt.Sprintf("seed %d step %d", seed, step)
			randomTx(t, st, rnd, byte(step), randomTxShape{writes: 6, keys: 8, maxValue: 8000, deletes: true})
			switch rnd.IntN(12) {
			case 0, 1: // the next commit starts the WAL again, under a new header
				err = st.conn.Exec(`PRAGMA wal_checkpoint(PASSIVE)`)
			case 2: // the WAL emptied
				err = st.conn.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`)
			case 3: // a commit past what the WAL file keeps in memory
				large++
				for _, v := range [][]byte{bytes.Repeat([]byte{byte(step)}, walBufMax+rnd.IntN(8192)), nil} {
					if err = st.Begin(); err == nil {
						if v != nil {
							err = st.KVPut([]byte("large"), v)
						} else {
							err = st.KVDelete([]byte("large")) // and gone again, to keep the database under the image's size
						}
						if err == nil {
							err = st.Commit()
						}
					}
					if err != nil {
						break
					}
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			if rnd.IntN(3) == 0 {
				continue // frames of several commits in one snapshot
			}
			img := snapshotFromImage(t, name, st, buf)
			sameAsBackup(t, name, dir, st, img)
			buf = img
		}
		_, wal := storeFiles(t, st)
		tailReads += st.img.tailReads
		rewrites += wal.rewrites
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d snapshots took the frames from memory; %d frames written again in place; %d large commits", tailReads, rewrites, large)
	if tailReads == 0 || rewrites == 0 || large == 0 {
		t.Fatal("the test did not see frames taken from memory, written again in place, and commits too large to keep")
	}
}
