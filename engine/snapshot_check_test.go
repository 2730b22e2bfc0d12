package engine_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ncruces/go-sqlite3"

	"github.com/wasmkeep/alarms/engine"
)

// hostSnapshot returns the snapshot of a database the host wrote, with an
// alarm, a failure count and a guest value.
func hostSnapshot(t testing.TB) []byte {
	t.Helper()
	st, err := engine.OpenStore(filepath.Join(t.TempDir(), "a.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.SetAlarm(1234); err != nil {
		t.Fatal(err)
	}
	if err := st.SetFailures(2); err != nil {
		t.Fatal(err)
	}
	if err := st.KVPut([]byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	b, err := st.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sqliteSnapshot returns the file of a database made by running sql.
func sqliteSnapshot(t testing.TB, sql string) []byte {
	t.Helper()
	p := filepath.Join(t.TempDir(), "x.db")
	conn, err := sqlite3.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.Exec(sql); err != nil {
		t.Fatal(err)
	}
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCheckSnapshot(t *testing.T) {
	good := hostSnapshot(t)
	const hostTables = `CREATE TABLE _wasmkeep_alarm (
	id    INTEGER PRIMARY KEY CHECK (id = 1),
	at_ms INTEGER NOT NULL
);`
	corrupt := append([]byte(nil), good...)
	for i := 4096; i < len(corrupt); i += 97 { // leave the header, spoil the pages
		corrupt[i] ^= 0x5a
	}
	cases := []struct {
		name string
		data []byte
		says string // "" for a snapshot that passes
	}{
		{"the host's own snapshot", good, ""},
		{"an empty database", sqliteSnapshot(t, "PRAGMA user_version = 0"), ""},
		{"one of the host's tables alone", sqliteSnapshot(t, hostTables), ""},
		{"not a database", []byte("this is not an SQLite database, nor close to one"), "not a database this host wrote"},
		{"a truncated snapshot", good[:len(good)/2], "not a database this host wrote"},
		{"spoiled pages", corrupt, "not a database this host wrote"},
		{"a table the host does not create", sqliteSnapshot(t, "CREATE TABLE users (name TEXT)"), `a table "users" the host does not create`},
		{"kv defined otherwise", sqliteSnapshot(t, "CREATE TABLE kv (key TEXT, value TEXT)"), `its table "kv" is not defined as the host defines it`},
		{"a trigger", sqliteSnapshot(t, hostTables+" CREATE TRIGGER tr AFTER DELETE ON _wasmkeep_alarm BEGIN SELECT 1; END;"), `a trigger "tr"`},
		{"a view", sqliteSnapshot(t, "CREATE VIEW kv AS SELECT 1 AS key, 2 AS value"), `a view "kv"`},
	}
	// Twice: the checks share connections, and a check after a bad
	// snapshot judges as a first check would.
	for _, tc := range append(cases, cases...) {
		err := engine.CheckSnapshot(tc.data)
		switch {
		case tc.says == "" && err != nil:
			t.Errorf("%s: %v, want it accepted", tc.name, err)
		case tc.says != "" && (!errors.Is(err, engine.ErrBadSnapshot) || !strings.Contains(err.Error(), tc.says)):
			t.Errorf("%s: %v, want ErrBadSnapshot saying %q", tc.name, err, tc.says)
		}
	}
}

// BenchmarkCheckSnapshot measures the check a takeover's restore runs on
// the snapshot it read (the host's own, 24 KiB): CPU per check.
//
//	go test ./engine -run '^$' -bench CheckSnapshot
func BenchmarkCheckSnapshot(b *testing.B) {
	good := hostSnapshot(b)
	b.ReportAllocs()
	for b.Loop() {
		if err := engine.CheckSnapshot(good); err != nil {
			b.Fatal(err)
		}
	}
}
