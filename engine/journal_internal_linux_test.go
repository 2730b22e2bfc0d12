package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A journal file used again holds the records of its earlier generation
// past the new ones; the replay reads only the new generation's, even
// when an old record starts exactly where the new ones end.
func TestAReusedJournalFileReplaysOnlyItsOwnGeneration(t *testing.T) {
	root, wal := oneDatabase(t)
	twoRecordFiles(t)
	j, err := openJournal(root)
	if err != nil {
		t.Fatal(err)
	}
	defer j.close()
	put := waitedPut(t, j, wal)
	put(0, rec16("old-1"))   // file 0
	put(100, rec16("old-2")) // file 0, full
	put(200, rec16("x-3"))   // file 1
	put(300, rec16("x-4"))   // file 1, full
	put(0, rec16("new-1"))   // file 0 again, where old-1 was; old-2 follows it
	for deadline := time.Now().Add(10 * time.Second); j.stats().Retired < 2; {
		if time.Now().After(deadline) {
			t.Fatal("file 1 was not retired")
		}
		time.Sleep(time.Millisecond)
	}
	got := replayedWAL(t, root)
	if !bytes.HasPrefix(got, rec16("new-1")) {
		t.Fatalf("the WAL after the replay starts %q, want the new generation's record", got[:min(len(got), 16)])
	}
	if bytes.Contains(got, []byte("old-2")) {
		t.Fatal("the replay wrote a record of the file's earlier generation")
	}
}

// rec16 is a 16-byte record's bytes, s padded with dots.
func rec16(s string) []byte { return []byte(s + "................")[:16] }

// twoRecordFiles makes the journal files opened during the test hold two
// of rec16's records each (to a WAL named a.db-wal), so that they take turns
// every second record.
func twoRecordFiles(t *testing.T) {
	size := int64(recHdrSize + len("a.db-wal") + 16)
	prev := journalFileSize
	journalFileSize = journalHdrSize + 2*size
	t.Cleanup(func() { journalFileSize = prev })
}

// waitedPut returns what appends a write of data at off in wal to j and
// waits until it is durable.
func waitedPut(t *testing.T, j *journal, wal string) func(off int64, data []byte) {
	return func(off int64, data []byte) {
		t.Helper()
		b, err := j.append(recWrite, wal, off, data)
		if err != nil {
			t.Fatal(err)
		}
		if err := j.wait(b); err != nil {
			t.Fatal(err)
		}
	}
}

// A WAL frame of a page mostly free is packed in the journal (its runs of
// zeros left out) and written again whole by the replay; bytes that do
// not pack, and writes shorter than a word, are kept as they are.
func TestPackedWritesReplayAsWritten(t *testing.T) {
	root, wal := oneDatabase(t)
	frame := make([]byte, 4120) // a frame's header and a 4 KiB page
	copy(frame, "frame header and the page's header")
	copy(frame[2000:], "a cell in the middle")
	copy(frame[len(frame)-13:], "the last row!") // ends off a word
	noise := make([]byte, 4120)
	for i := range noise {
		noise[i] = byte(i*7 + 1)
	}
	short := []byte("abc")
	writes := []struct {
		off  int64
		data []byte
	}{{0, frame}, {4120, noise}, {8240, short}, {8243, make([]byte, 64)}}
	j, err := openJournal(root)
	if err != nil {
		t.Fatal(err)
	}
	var want []byte
	for _, w := range writes {
		before := j.stats().Bytes
		b, err := j.append(recWrite, wal, w.off, w.data)
		if err != nil {
			t.Fatal(err)
		}
		if err := j.wait(b); err != nil {
			t.Fatal(err)
		}
		n := j.stats().Bytes - before
		plain := int64(recHdrSize + len("a.db-wal") + len(w.data))
		if len(w.data) == len(frame) && &w.data[0] == &frame[0] && n > plain/10 {
			t.Errorf("the frame of a page mostly free took %d bytes of the journal, %d as it is", n, plain)
		}
		if n > plain {
			t.Errorf("a write of %d bytes took %d bytes of the journal, more than its %d as it is", len(w.data), n, plain)
		}
		want = append(want[:w.off], w.data...)
	}
	// The records are in the journal's file, not retired; a start after
	// a reboot writes them again, over a WAL the disk lost.
	if got := replayedWAL(t, root); !bytes.Equal(got, want) {
		t.Fatalf("the WAL after the replay differs from what was written (%d bytes against %d)", len(got), len(want))
	}
	j.close()
}

// oneDatabase makes a directory with one database, a.db, and returns it
// with the database's WAL's path; every journal opened from now on starts
// as after a reboot (it replays).
func oneDatabase(t *testing.T) (root, wal string) {
	t.Cleanup(SetJournalRebootEachStart())
	root = t.TempDir()
	db := filepath.Join(root, "a.db")
	if err := os.WriteFile(db, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return root, db + "-wal"
}

// replayedWAL copies a.db and the journal's files under root (the
// journal open, as a power cut would leave them, and no WAL: the disk lost
// it) to a new directory, starts a journal there as after a reboot (it
// replays), and returns the WAL it wrote.
func replayedWAL(t *testing.T, root string) []byte {
	t.Helper()
	after := t.TempDir()
	copyFiles(t, root, after, "a.db", ".wasmkeep-journal/journal-0", ".wasmkeep-journal/journal-1")
	return walAfterStart(t, after)
}

// copyFiles copies the files named (relative to src) to dst.
func copyFiles(t *testing.T, src, dst string, files ...string) {
	t.Helper()
	for _, p := range files {
		b, err := os.ReadFile(filepath.Join(src, p))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dst, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, p), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// walAfterStart starts a journal in dir (as after a reboot: it replays),
// closes it and returns a.db's WAL.
func walAfterStart(t *testing.T, dir string) []byte {
	t.Helper()
	re, err := openJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	re.close()
	got, err := os.ReadFile(filepath.Join(dir, "a.db-wal"))
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// A journal file a later build left live (a crash, then this older build
// started) is refused, naming the file, and left as it is: its records
// may be the only copy of acknowledged commits, in a form this build may
// not know.
func TestAJournalOfALaterBuildIsRefused(t *testing.T) {
	root := t.TempDir()
	j, err := openJournal(root)
	if err != nil {
		t.Fatal(err)
	}
	j.close()
	name := filepath.Join(root, journalDirName, "journal-0")
	fd, err := unix.Open(name, unix.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	var h [32]byte
	binary.BigEndian.PutUint32(h[0:], journalMagic)
	binary.BigEndian.PutUint32(h[4:], journalVersion+1)
	binary.BigEndian.PutUint64(h[8:], 99)
	binary.BigEndian.PutUint32(h[16:], journalLive)
	binary.BigEndian.PutUint32(h[20:], crc32.Checksum(h[:20], crcTable))
	if err := pwriteFull(fd, h[:], 0); err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	_, err = openJournal(root)
	if !errors.Is(err, errNewerJournal) || !strings.Contains(err.Error(), name) {
		t.Fatalf("a journal of a later format opened with %v, want it refused naming %s", err, name)
	}
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b[:32], h[:]) {
		t.Fatal("the refused journal file's header was written over")
	}
}

// What packZeros packs, unpackZeros gives back; and what it did not pack
// is refused (a write cut short too), never read past its end.
func FuzzPackZeros(f *testing.F) {
	f.Add([]byte{}, uint16(0), uint16(0))
	f.Add([]byte("x"), uint16(4000), uint16(8))
	f.Add([]byte("header"), uint16(4120), uint16(2001))
	f.Fuzz(func(t *testing.T, lit []byte, size, at uint16) {
		p := make([]byte, int(size)+len(lit))
		copy(p[int(at)%(len(p)+1):], lit)
		b := packZeros(nil, p)
		got, err := unpackZeros(b)
		if err != nil || !bytes.Equal(got, p) {
			t.Fatalf("packed %d bytes, unpacked %d (%v)", len(p), len(got), err)
		}
		for i := range b {
			// A record cut short (a torn write) never reads as a write.
			if q, err := unpackZeros(b[:i]); err == nil {
				t.Fatalf("a packed write cut at %d of %d bytes read as %d bytes", i, len(b), len(q))
			}
		}
		_, _ = unpackZeros(lit) // any bytes: an error or a write, never a panic
	})
}

// BenchmarkPackZeros packs a WAL frame as an actor writes one: its
// header, a page whose few rows sit at its end, the rest free.
//
//	go test ./engine -run '^$' -bench PackZeros
func BenchmarkPackZeros(b *testing.B) {
	p := make([]byte, 24+4096)
	for i := range 24 + 12 {
		p[i] = byte(i + 1)
	}
	for i := len(p) - 300; i < len(p); i++ {
		p[i] = byte(i)
	}
	var out []byte
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		out = packZeros(out[:0], p)
	}
}

// A start replays both journal files when both are live, then retires
// them, the older generation first: a cut between the two retirements
// leaves the newer file live, whose records, replayed once more, write
// what the WAL holds already. Left live, the older file's records would
// be laid over the newer ones written at the same offsets (a WAL that
// started anew), and the newest commits lost.
func TestAStartRetiresTheOlderJournalFileFirst(t *testing.T) {
	root, wal := oneDatabase(t)
	twoRecordFiles(t)
	crash, cut := t.TempDir(), t.TempDir()
	var headers atomic.Int32
	restore := SetIOHook(func(op, name string, off, n int64) {
		if op == "write" && off == 0 && strings.HasPrefix(name, crash+"/") && strings.Contains(name, "journal-") {
			if headers.Add(1) == 2 {
				// The start after the crash, between its two retirements.
				copyFiles(t, crash, cut, "a.db", "a.db-wal", ".wasmkeep-journal/journal-0", ".wasmkeep-journal/journal-1")
			}
		}
	})
	defer restore()
	j, err := openJournal(root)
	if err != nil {
		t.Fatal(err)
	}
	closeJ := sync.OnceFunc(func() { j.close() })
	defer closeJ()
	put := waitedPut(t, j, wal)
	put(0, rec16("old-1"))   // file 0, a first generation
	put(100, rec16("old-2")) // file 0, full
	put(0, rec16("mid-3"))   // file 1, the next generation
	put(100, rec16("mid-4")) // file 1, full: written no more until retired
	copyFiles(t, root, crash, ".wasmkeep-journal/journal-1")
	put(0, rec16("new-5")) // file 0 again, a third generation, where mid-3 was
	// The crash: new-5 durable, file 1 not yet retired (as it stood
	// once full), so both files are live, file 0 the newer.
	copyFiles(t, root, crash, "a.db", ".wasmkeep-journal/journal-0")
	closeJ()
	var gens [2]uint64
	for i := range gens {
		fd, err := unix.Open(filepath.Join(crash, ".wasmkeep-journal", fmt.Sprintf("journal-%d", i)), unix.O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		gen, state, _, ok, err := readJournalHeader(fd)
		unix.Close(fd)
		if err != nil || !ok || state != journalLive {
			t.Fatalf("the crash's journal file %d: state %d (%v, %v), want live: the test sees nothing", i, state, ok, err)
		}
		gens[i] = gen
	}
	if gens[0] <= gens[1] {
		t.Fatalf("the crash's journal files have generations %v, want file 0 the newer: the test sees nothing", gens)
	}
	// The start after the crash replays both; cut between its two
	// retirements, the start after that replays what is still live.
	re, err := openJournal(crash)
	if err != nil {
		t.Fatal(err)
	}
	re.close()
	if n := headers.Load(); n < 2 {
		t.Fatalf("the start after the crash wrote %d journal headers, want a retirement of each file", n)
	}
	got := walAfterStart(t, cut)
	if !bytes.HasPrefix(got, rec16("new-5")) || !bytes.Equal(got[100:116], rec16("mid-4")) {
		t.Fatalf("the WAL after a cut between the retirements starts %q and holds %q at 100, want the newest records, new-5 and mid-4", got[:min(len(got), 16)], got[100:min(len(got), 116)])
	}
}
