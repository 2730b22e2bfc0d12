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
)

// walCase is a database file and its WAL as a process killed at some point
// would leave them, and what was done to the WAL.
type walCase struct {
	name     string
	db, wal  []byte
	mustRead bool // a whole WAL: the scan must read it, not leave it to SQLite
}

// sqliteAlarm is SQLite's answer: the alarm of the files of c, opened
// through SQLite (which recovers the WAL) in a directory of their own.
func sqliteAlarm(t *testing.T, dir string, c walCase) (int64, bool) {
	t.Helper()
	p := writeCase(t, dir, c)
	st, err := OpenStore(p)
	if err != nil {
		t.Fatalf("%s: SQLite opens the files: %v", c.name, err)
	}
	defer st.Close()
	at, ok, err := st.Alarm()
	if err != nil {
		t.Fatalf("%s: SQLite reads the alarm: %v", c.name, err)
	}
	return at, ok
}

func writeCase(t *testing.T, dir string, c walCase) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "a.db")
	_ = RemoveDatabase(p)
	if err := os.WriteFile(p, c.db, 0o644); err != nil {
		t.Fatal(err)
	}
	if c.wal != nil {
		if err := os.WriteFile(p+"-wal", c.wal, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// checkAgainstSQLite reads the alarm of c from the files, as the scan does,
// and through SQLite: the two agree whenever the scan reads it itself.
func checkAgainstSQLite(t *testing.T, dir string, c walCase) (read bool) {
	t.Helper()
	p := writeCase(t, filepath.Join(dir, "scan"), c)
	at, ok, done, err := readAlarmFile(p)
	if err != nil {
		t.Fatalf("%s: %v", c.name, err)
	}
	if !done {
		if c.mustRead {
			t.Fatalf("%s: a whole WAL left to SQLite", c.name)
		}
		return false
	}
	wantAt, wantOK := sqliteAlarm(t, filepath.Join(dir, "sqlite"), c)
	if at != wantAt || ok != wantOK {
		t.Fatalf("%s: read from the files: alarm %d (set %v); SQLite: %d (set %v)", c.name, at, ok, wantAt, wantOK)
	}
	return true
}

// frames returns the number of whole frames of a WAL and their size.
func frames(wal []byte) (n, step int) {
	if len(wal) < walHeaderSize {
		return 0, 0
	}
	step = walFrameHeaderSize + int(binary.BigEndian.Uint32(wal[8:]))
	return (len(wal) - walHeaderSize) / step, step
}

// withSaltFrom gives frames i and after of a WAL another salt than its
// header's, with checksums that continue those of the frames before them,
// as frames left from before the WAL began again would have if their
// checksums happened to match: the salt alone tells SQLite's recovery
// they are not part of this WAL.
func withSaltFrom(wal []byte, i int) []byte {
	out := bytes.Clone(wal)
	bigEnd := binary.BigEndian.Uint32(out[0:])&1 == 1
	s1, s2 := walChecksum(bigEnd, out[:24], 0, 0)
	n, step := frames(out)
	for j := range n {
		f := out[walHeaderSize+j*step : walHeaderSize+(j+1)*step]
		if j >= i {
			f[8] ^= 0x5a
		}
		s1, s2 = walChecksum(bigEnd, f[:8], s1, s2)
		s1, s2 = walChecksum(bigEnd, f[24:], s1, s2)
		if j >= i {
			binary.BigEndian.PutUint32(f[16:], s1)
			binary.BigEndian.PutUint32(f[20:], s2)
		}
	}
	return out
}

// toBigEndian rewrites a WAL's checksums as a big-endian machine writes
// them (magic 0x377f0683): the header's, and each frame's as far as the
// frames are valid; the rest stay as they were (invalid either way).
func toBigEndian(wal []byte) []byte {
	out := bytes.Clone(wal)
	if len(out) < walHeaderSize {
		return out
	}
	be := binary.BigEndian
	le1, le2 := walChecksum(false, out[:24], 0, 0)
	valid := le1 == be.Uint32(out[24:]) && le2 == be.Uint32(out[28:])
	be.PutUint32(out[0:], walMagic|1)
	b1, b2 := walChecksum(true, out[:24], 0, 0)
	be.PutUint32(out[24:], b1)
	be.PutUint32(out[28:], b2)
	n, step := frames(out)
	for i := 0; i < n && valid; i++ {
		f := out[walHeaderSize+i*step : walHeaderSize+(i+1)*step]
		if !bytes.Equal(f[8:16], out[16:24]) || be.Uint32(f[0:]) == 0 {
			break
		}
		le1, le2 = walChecksum(false, f[:8], le1, le2)
		le1, le2 = walChecksum(false, f[24:], le1, le2)
		if le1 != be.Uint32(f[16:]) || le2 != be.Uint32(f[20:]) {
			break
		}
		b1, b2 = walChecksum(true, f[:8], b1, b2)
		b1, b2 = walChecksum(true, f[24:], b1, b2)
		be.PutUint32(f[16:], b1)
		be.PutUint32(f[20:], b2)
	}
	return out
}

// The scan's reading of a WAL is SQLite's: over random sequences of events
// (alarms set, moved and cleared, meta rows, guest values of up to several
// pages, some events rolled back, checkpoints that let the next commit
// start the WAL again over the old frames, closes and opens), the files as
// a kill at any commit would leave them read the same alarm from the file
// and its WAL as through SQLite, and so do the same files with the WAL cut
// at any byte (a torn frame, a commit whose last frames never reached the
// disk), at a frame boundary inside a commit (frames of no commit), with a
// byte of a frame or of the header's checksum changed, with frames whose
// salt is not the header's, and with the checksums of a big-endian machine.
// Cuts and changes fall after the frames a checkpoint synced (a power loss
// loses only unsynced writes; a checkpoint syncs the WAL before it copies
// it into the file, so the file may be ahead of any earlier cut). Whole
// WALs are read, never left to SQLite; the others may be.
func TestReadAlarmFromTheWALAsSQLiteDoes(t *testing.T) {
	seeds, steps := 12, 20
	if testing.Short() {
		seeds = 4
	}
	dir := t.TempDir()
	read, fellBack, restarts := 0, 0, 0
	for seed := range seeds {
		rnd := rand.New(rand.NewPCG(uint64(seed), 9))
		p := filepath.Join(dir, fmt.Sprintf("s%d", seed), "a.db")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		st, err := OpenStore(p)
		if err != nil {
			t.Fatal(err)
		}
		// synced is how many frames of the WAL a checkpoint synced: those
		// up to the last checkpoint since the WAL began again.
		var prevDB, prevSalt []byte
		synced := 0
		for step := range steps {
			randomTx(t, st, rnd, byte(step), randomTxShape{writes: 3, keys: 6, maxValue: 9000})
			switch rnd.IntN(8) {
			case 0: // the next commit starts the WAL again, over the old frames
				if err := st.conn.Exec(`PRAGMA wal_checkpoint(PASSIVE)`); err != nil {
					t.Fatal(err)
				}
				restarts++
			case 1: // asleep and awake again
				if err := st.Close(); err != nil {
					t.Fatal(err)
				}
				if st, err = OpenStore(p); err != nil {
					t.Fatal(err)
				}
			}
			db, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			wal, err := os.ReadFile(p + "-wal")
			if err != nil {
				t.Fatal(err)
			}
			var salt []byte
			if len(wal) >= walHeaderSize {
				salt = wal[16:24]
			}
			n, fstep := frames(wal)
			switch {
			case !bytes.Equal(db, prevDB): // checkpointed: every frame
				synced = n
			case !bytes.Equal(salt, prevSalt): // the WAL began again
				synced = 0
			}
			prevDB, prevSalt = db, bytes.Clone(salt)
			name := fmt.Sprintf("seed %d step %d", seed, step)
			cases := []walCase{
				{name: name + " whole", db: db, wal: wal, mustRead: true},
				{name: name + " big-endian", db: db, wal: toBigEndian(wal), mustRead: true},
			}
			if len(wal) >= walHeaderSize { // a header torn as it began again: no frame counts
				bad := bytes.Clone(wal)
				bad[24+rnd.IntN(8)] ^= 1 << rnd.IntN(8)
				cases = append(cases, walCase{name: name + " header checksum changed", db: db, wal: bad})
			}
			if n > synced {
				from := walHeaderSize + synced*fstep // the first unsynced byte
				if synced == 0 {
					from = 0 // a header written anew is not synced either
				}
				cases = append(cases, walCase{name: name + " cut at a byte", db: db, wal: wal[:from+rnd.IntN(len(wal)-from+1)]})
				cases = append(cases, walCase{name: name + " cut at a frame", db: db, wal: wal[:walHeaderSize+(synced+rnd.IntN(n-synced))*fstep]})
				flipped := bytes.Clone(wal)
				flipped[walHeaderSize+synced*fstep+rnd.IntN((n-synced)*fstep)] ^= 1 << rnd.IntN(8)
				cases = append(cases, walCase{name: name + " a byte changed", db: db, wal: flipped})
				big := toBigEndian(wal)
				cases = append(cases, walCase{name: name + " big-endian cut", db: db, wal: big[:walHeaderSize+synced*fstep+rnd.IntN((n-synced)*fstep)]})
				cases = append(cases, walCase{name: name + " frames of another salt", db: db, wal: withSaltFrom(wal, synced+rnd.IntN(n-synced))})
			}
			for _, c := range cases {
				if checkAgainstSQLite(t, filepath.Join(dir, "check"), c) {
					read++
				} else {
					fellBack++
				}
			}
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d cases read from the files, %d left to SQLite; %d checkpoints", read, fellBack, restarts)
}

// A closed store keeps its commits in its WAL, no shared-memory file, and
// the scan reads them; past closeCheckpointBytes the close checkpoints and
// empties the WAL, and the file alone holds everything.
func TestAClosedStoreKeepsItsCommitsInTheWAL(t *testing.T) {
	p := filepath.Join(t.TempDir(), "a.db")
	writeAlarm(t, p, 1234, true).Close()
	if fi, err := os.Stat(p + "-wal"); err != nil || fi.Size() == 0 {
		t.Fatalf("the WAL of a closed store is empty or missing (%v); want its commit in it", err)
	}
	if _, err := os.Stat(p + "-shm"); !os.IsNotExist(err) {
		t.Fatalf("a shared-memory file beside the database: %v", err)
	}
	if at, ok, done, err := readAlarmFile(p); err != nil || !done || !ok || at != 1234 {
		t.Fatalf("read from the closed store's files: %d, %v (done %v), %v", at, ok, done, err)
	}
	st, err := OpenStore(p)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 40 { // 40 commits of a 4 KiB value: more than 128 KiB of WAL
		if err := st.Begin(); err != nil {
			t.Fatal(err)
		}
		err := st.KVPut([]byte(fmt.Sprint(i)), bytes.Repeat([]byte{1}, 4000))
		if err == nil {
			err = st.SetAlarm(int64(5000 + i))
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if fi, err := os.Stat(p + "-wal"); err != nil || fi.Size() <= closeCheckpointBytes {
		t.Fatalf("the WAL before the close is not past %d bytes (%v)", closeCheckpointBytes, err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(p + "-wal"); err == nil && fi.Size() != 0 {
		t.Fatalf("the WAL after a close past %d bytes: %d bytes; want it checkpointed and empty", closeCheckpointBytes, fi.Size())
	}
	if at, ok, done, err := readAlarmFile(p); err != nil || !done || !ok || at != 5039 {
		t.Fatalf("read from the checkpointed file: %d, %v (done %v), %v; want 5039", at, ok, done, err)
	}
}

// While a store is open, no other connection reads or writes its file:
// the lock is exclusive, so the WAL index can live in the process's memory.
func TestAnOpenStoreLocksOutOtherConnections(t *testing.T) {
	p := filepath.Join(t.TempDir(), "a.db")
	st := writeAlarm(t, p, 1, true)
	defer st.Close()
	other, err := OpenStore(p)
	if err == nil {
		other.Close()
		t.Fatal("a second store opened a database that is open")
	}
	if !strings.Contains(err.Error(), "locked") {
		t.Fatalf("a second open: %v; want the database locked", err)
	}
}

// A database moved aside takes the commits of its WAL with it.
func TestMoveDatabaseTakesTheWAL(t *testing.T) {
	dir := t.TempDir()
	p, q := filepath.Join(dir, "a.db"), filepath.Join(dir, "a.db.replaced")
	writeAlarm(t, p, 1000, true).Close()
	writeAlarm(t, p, 2000, true).Close() // in the WAL
	if err := MoveDatabase(p, q); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"", "-wal"} {
		if _, err := os.Stat(p + s); !os.IsNotExist(err) {
			t.Fatalf("%s left behind: %v", p+s, err)
		}
	}
	if at, ok, err := ReadAlarm(q); err != nil || !ok || at != 2000 {
		t.Fatalf("the moved database's alarm: %d, %v, %v; want 2000", at, ok, err)
	}
	st, err := OpenStore(q)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if at, ok, err := st.Alarm(); err != nil || !ok || at != 2000 {
		t.Fatalf("the moved database opened: %d, %v, %v; want 2000", at, ok, err)
	}
}

// The schema is not created on each open: a database missing a table (one
// made before the template, cut short while its schema was created) gets
// it on the first statement that needs it.
func TestAStoreMissingATableCreatesIt(t *testing.T) {
	p := filepath.Join(t.TempDir(), "a.db")
	st := writeAlarm(t, p, 7, true)
	if err := st.conn.Exec(`DROP TABLE kv`); err != nil {
		t.Fatal(err)
	}
	st.Close()
	if st, err := OpenStore(p); err != nil {
		t.Fatal(err)
	} else {
		defer st.Close()
		if err := st.KVPut([]byte("k"), []byte("v")); err != nil {
			t.Fatalf("kv-put without the kv table: %v", err)
		}
		if v, ok, err := st.KVGet([]byte("k")); err != nil || !ok || string(v) != "v" {
			t.Fatalf("kv-get: %q, %v, %v", v, ok, err)
		}
		if at, ok, err := st.Alarm(); err != nil || !ok || at != 7 {
			t.Fatalf("the alarm: %d, %v, %v; want 7", at, ok, err)
		}
	}
}

// fdsOn counts the process's file descriptors open on path or a file
// beside it (path-wal, path-shm, path-journal); -1 without /proc.
func fdsOn(path string) int {
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	n := 0
	for _, e := range es {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && strings.HasPrefix(target, path) {
			n++
		}
	}
	return n
}

// An open store holds two file descriptors, the database and its WAL (a
// node's fd budget counts on it), and a closed one none.
func TestAnOpenStoreHoldsTwoFileDescriptors(t *testing.T) {
	p := filepath.Join(t.TempDir(), "a.db")
	if fdsOn(p) < 0 {
		t.Skip("no /proc/self/fd")
	}
	st := writeAlarm(t, p, 1, true)
	if _, ok, err := st.KVGet([]byte("k")); err != nil || ok {
		t.Fatal(ok, err)
	}
	if n := fdsOn(p); n != 2 {
		t.Errorf("an open store holds %d file descriptors on its files; want 2", n)
	}
	st.Close()
	if n := fdsOn(p); n != 0 {
		t.Errorf("a closed store holds %d file descriptors on its files; want none", n)
	}
}

// randomTxShape says what randomTx may write: up to writes changes, kv
// keys among keys, values of up to maxValue bytes, and kv deletes or not.
type randomTxShape struct {
	writes, keys, maxValue int
	deletes                bool
}

// randomTx runs one transaction of random writes on st (the alarm set or
// cleared, meta rows, kv rows of byte fill), committed five times in six
// and rolled back otherwise.
func randomTx(t *testing.T, st *Store, rnd *rand.Rand, fill byte, shape randomTxShape) {
	t.Helper()
	if err := st.Begin(); err != nil {
		t.Fatal(err)
	}
	kinds := 5
	if shape.deletes {
		kinds = 6
	}
	for range 1 + rnd.IntN(shape.writes) {
		var err error
		switch rnd.IntN(kinds) {
		case 0, 1:
			err = st.SetAlarm(rnd.Int64N(1 << 45))
		case 2:
			err = st.ClearAlarm()
		case 3:
			err = st.SetMeta(fmt.Sprintf("m%d", rnd.IntN(8)), strings.Repeat("m", rnd.IntN(300)))
		case 4:
			err = st.KVPut([]byte(fmt.Sprintf("k%d", rnd.IntN(shape.keys))), bytes.Repeat([]byte{fill}, rnd.IntN(shape.maxValue)))
		case 5:
			err = st.KVDelete([]byte(fmt.Sprintf("k%d", rnd.IntN(shape.keys))))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	var err error
	if rnd.IntN(6) == 0 {
		err = st.Rollback()
	} else {
		err = st.Commit()
	}
	if err != nil {
		t.Fatal(err)
	}
}
