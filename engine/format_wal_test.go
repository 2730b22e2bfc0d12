package engine

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/wasmkeep/alarms/format"
)

// A later build that changed the schema version with a commit, and
// stopped cleanly, left the new header in the WAL (a close keeps it), not
// in the file: OpenStore refuses the version SQLite reads through the WAL
// before any statement of the store runs, the scan reads it from the WAL's
// page 1, and the file and its WAL are left byte for byte. A later
// version in the file's header is refused by both too when the WAL holds
// an earlier page 1, so that the scan never takes an actor OpenStore
// refuses.
func TestASchemaVersionInTheWALIsRefused(t *testing.T) {
	for _, inWAL := range []bool{true, false} {
		testSchemaVersionBesideTheWAL(t, inWAL)
	}
}

func testSchemaVersionBesideTheWAL(t *testing.T, inWAL bool) {
	p := filepath.Join(t.TempDir(), "a.db")
	st := writeAlarm(t, p, 1000, true)
	v := 2 // in the WAL's page 1, the file's header at 0
	if !inWAL {
		v = 1 // in the WAL's page 1, and the file's header set to 2 below
	}
	if err := st.conn.Exec(`PRAGMA ` + storeSchema + `.user_version = ` + strconv.Itoa(v)); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if !inWAL {
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt([]byte{0, 0, 0, 2}, userVersionAt); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	read := func() (db, wal []byte) {
		t.Helper()
		db, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		wal, err = os.ReadFile(p + "-wal")
		if err != nil {
			t.Fatal(err)
		}
		return db, wal
	}
	db, wal := read()
	if v := binary.BigEndian.Uint32(db[userVersionAt:]); (v > format.SchemaVersion) == inWAL || len(wal) == 0 {
		t.Fatalf("the file's header says schema version %d, the WAL has %d bytes", v, len(wal))
	}
	newer := func(what string, err error) {
		t.Helper()
		if ne, ok := format.As(err); !ok || ne.Kind != format.Schema || ne.Version != 2 {
			t.Fatalf("version 2 in the WAL %v: %s: %v; want a newer schema format version 2", inWAL, what, err)
		}
	}
	s, err := OpenStore(p)
	if err == nil {
		s.Close()
	}
	newer("OpenStore", err)
	_, _, err = ReadAlarm(p)
	newer("ReadAlarm", err)
	if db2, wal2 := read(); string(db2) != string(db) || string(wal2) != string(wal) {
		t.Fatal("the refused database or its WAL changed")
	}
}
