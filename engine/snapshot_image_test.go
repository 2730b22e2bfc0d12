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
)

// dump reads every row of the host's tables and the guest's, in key order,
// through conn: what a database holds.
func dump(t *testing.T, conn *sqlite3.Conn) string {
	t.Helper()
	var b strings.Builder
	for _, q := range []string{
		`SELECT id, at_ms FROM ` + storeSchema + `._wasmkeep_alarm ORDER BY id`,
		`SELECT key, value FROM ` + storeSchema + `._wasmkeep_meta ORDER BY key`,
		`SELECT hex(key), hex(value) FROM ` + storeSchema + `.kv ORDER BY key`,
	} {
		st, _, err := conn.Prepare(q)
		if err != nil {
			t.Fatal(err)
		}
		for st.Step() {
			fmt.Fprintf(&b, "%s|%s\n", st.ColumnText(0), st.ColumnText(1))
		}
		if err := st.Err(); err != nil {
			t.Fatal(err)
		}
		st.Close()
		b.WriteString("--\n")
	}
	return b.String()
}

// openImage writes a snapshot to a file of its own, opens it as a restore
// would, checks its integrity and returns its rows.
func openImage(t *testing.T, path string, img []byte) string {
	t.Helper()
	if err := WriteSnapshot(path, img); err != nil {
		t.Fatal(err)
	}
	st, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ic, _, err := st.conn.Prepare(`PRAGMA ` + storeSchema + `.integrity_check`)
	if err != nil {
		t.Fatal(err)
	}
	defer ic.Close()
	if !ic.Step() || ic.ColumnText(0) != "ok" {
		t.Fatalf("integrity_check of the image: %q (%v)", ic.ColumnText(0), ic.Err())
	}
	return dump(t, st.conn)
}

// pageOneHeaderBytes are the bytes of page 1 a backup writes for its own
// copy (the change counter, the database size, the schema cookie, the
// version-valid-for number): an image may differ there and nowhere else.
func headerByteABackupWrites(i int) bool {
	return (i >= 24 && i < 32) || (i >= 40 && i < 44) || (i >= 92 && i < 100)
}

// A snapshot copies the image the store keeps from its file and its WAL:
// over random sequences of events (alarms, meta rows, guest values of up
// to several pages that grow the database and free pages again, events
// rolled back, checkpoints after which the next commit starts the WAL
// again over the old frames, a checkpoint that empties the WAL, VACUUM
// shrinking the database, closes and opens), each snapshot is taken from
// the image (the same whether read through the connection's file handles
// or from the files opened by their paths), not serialised through
// SQLite, and it is the database a
// backup through SQLite makes, page for page (page 1's header aside, where
// the backup writes its own change counter and schema cookie): opened as a
// restore opens it, it passes integrity_check and holds every row the
// store holds. Its header says WAL (read and write versions 2) and its
// size in pages.
func TestSnapshotImageIsTheDatabaseABackupMakes(t *testing.T) {
	seeds, steps := 8, 30
	if testing.Short() {
		seeds = 3
	}
	dir := t.TempDir()
	images, restarts := 0, 0
	for seed := range seeds {
		rnd := rand.New(rand.NewPCG(uint64(seed), 15))
		p := filepath.Join(dir, fmt.Sprintf("s%d.db", seed))
		st, err := OpenStore(p)
		if err != nil {
			t.Fatal(err)
		}
		var buf []byte
		var byPath snapImage
		for step := range steps {
			name := fmt.Sprintf("seed %d step %d", seed, step)
			randomTx(t, st, rnd, byte(step), randomTxShape{writes: 4, keys: 10, maxValue: 12000, deletes: true})
			switch rnd.IntN(10) {
			case 0: // the next commit starts the WAL again, over the old frames
				err = st.conn.Exec(`PRAGMA wal_checkpoint(PASSIVE)`)
				restarts++
			case 1: // the WAL emptied: the file alone is the database
				err = st.conn.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`)
			case 2: // the database shrinks
				err = st.conn.Exec(`VACUUM ` + storeSchema)
			case 3: // asleep and awake again
				if err = st.Close(); err == nil {
					st, err = OpenStore(p)
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			if rnd.IntN(3) == 0 {
				continue // frames of several steps in one update
			}
			img := snapshotFromImage(t, name, st, buf)
			images++
			// The same image read from the files opened by their paths
			// (when the connection's handles are not at hand).
			if err := byPath.update(p, nil, nil); err != nil {
				t.Fatalf("%s: the image from the paths: %v", name, err)
			}
			if fromPaths, err := byPath.snapshot(nil); err != nil || !bytes.Equal(fromPaths, img) {
				t.Fatalf("%s: the image from the paths differs (%v)", name, err)
			}
			sameAsBackup(t, name, dir, st, img)
			buf = img
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d snapshots from the image; %d checkpoints", images, restarts)
}

// snapshotFromImage takes st's snapshot into buf and checks that it was
// copied from the image the store keeps, not serialised.
func snapshotFromImage(t *testing.T, name string, st *Store, buf []byte) []byte {
	t.Helper()
	misses := st.imageMisses
	img, err := st.SnapshotTo(buf)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if st.imageMisses != misses {
		t.Fatalf("%s: the snapshot was serialised, not copied from the image", name)
	}
	return img
}

// sameAsBackup checks that img is the database a backup of st makes, page
// for page, and that opened as a restore opens it, it holds what st holds.
func sameAsBackup(t *testing.T, name, dir string, st *Store, img []byte) {
	t.Helper()
	ref, err := serialize(st.conn, storeSchema, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(img) != len(ref) {
		t.Fatalf("%s: image of %d bytes, the backup's %d", name, len(img), len(ref))
	}
	for i := range img {
		if img[i] != ref[i] && !headerByteABackupWrites(i) {
			t.Fatalf("%s: byte %d (page %d) differs from the backup's", name, i, i/4096+1)
		}
	}
	if img[18] != 2 || img[19] != 2 {
		t.Fatalf("%s: read and write versions %d, %d: not WAL", name, img[18], img[19])
	}
	if n := binary.BigEndian.Uint32(img[28:]); int(n)*4096 != len(img) {
		t.Fatalf("%s: the header says %d pages, the image has %d bytes", name, n, len(img))
	}
	if got, want := openImage(t, filepath.Join(dir, "restored.db"), img), dump(t, st.conn); got != want {
		t.Fatalf("%s: the image holds\n%s\nthe store holds\n%s", name, got, want)
	}
}

// A WAL the image cannot be read from (here its header's checksum no
// longer verifies, which SQLite's recovery would not take) is left to
// SQLite: the snapshot is serialised, and it is still the committed
// database. So is one of a database past the image's size, checkpointed
// and read from its file.
func TestSnapshotImageFallsBackToABackup(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a.db")
	st, err := OpenStore(p)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	put := func(k string, n int) {
		t.Helper()
		if err := st.Begin(); err != nil {
			t.Fatal(err)
		}
		if err := st.KVPut([]byte(k), bytes.Repeat([]byte("v"), n)); err != nil {
			t.Fatal(err)
		}
		if err := st.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	check := func(what string, misses int) {
		t.Helper()
		img, err := st.SnapshotTo(nil)
		if err != nil {
			t.Fatal(err)
		}
		if st.imageMisses != misses {
			t.Fatalf("%s: %d snapshots serialised, want %d", what, st.imageMisses, misses)
		}
		if got, want := openImage(t, filepath.Join(dir, "restored.db"), img), dump(t, st.conn); got != want {
			t.Fatalf("%s: the snapshot holds\n%s\nthe store holds\n%s", what, got, want)
		}
	}
	put("a", 10)
	check("from the image", 0)
	put("b", 10)
	f, err := os.OpenFile(p+"-wal", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	var c [1]byte
	if _, err := f.ReadAt(c[:], 27); err != nil {
		t.Fatal(err)
	}
	c[0] ^= 1
	if _, err := f.WriteAt(c[:], 27); err != nil {
		t.Fatal(err)
	}
	f.Close()
	put("c", 10)
	// While the store is open its own file handle is the WAL's only
	// writer (the exclusive lock), and the image reads the header again
	// only when that handle changed it: a header changed behind the
	// store's back is read when the image is next built anew.
	st.img.reset()
	check("a WAL header whose checksum fails", 1)
	for i := range 200 { // the file grows past serializeBelow
		put(fmt.Sprintf("big%d", i), 3000)
	}
	check("past the image's size (checkpointed and read from its file)", 1)
}
