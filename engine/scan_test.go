package engine

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/wasmkeep/alarms/abi"
)

func writeAlarm(t *testing.T, path string, at int64, set bool) *Store {
	t.Helper()
	st, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Begin(); err != nil {
		t.Fatal(err)
	}
	if set {
		err = st.SetAlarm(at)
	} else {
		err = st.ClearAlarm()
	}
	if err == nil {
		err = st.SetMeta("k", "v")
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Commit(); err != nil {
		t.Fatal(err)
	}
	return st
}

// ReadAlarm reads, from a cleanly closed database file alone, the alarm
// SQLite reads: every width of integer the file format stores, and none.
func TestReadAlarmFromTheFile(t *testing.T) {
	dir := t.TempDir()
	for i, at := range []int64{0, 1, 127, 128, 255, 32767, 40000, 1 << 23, 1<<31 + 5, 1 << 40, 1_800_000_000_123, abi.MaxAlarmMillis} {
		p := filepath.Join(dir, "a.db")
		_ = RemoveDatabase(p)
		writeAlarm(t, p, at, true).Close()
		got, ok, done, err := readAlarmFile(p)
		if err != nil || !done || !ok || got != at {
			t.Fatalf("case %d: alarm %d read from the file as %d, %v (read from the file: %v), %v", i, at, got, ok, done, err)
		}
		// Set, then cleared: none.
		writeAlarm(t, p, 0, false).Close()
		if _, ok, done, err := readAlarmFile(p); err != nil || !done || ok {
			t.Fatalf("case %d: a cleared alarm read from the file as set=%v (read from the file: %v), %v", i, ok, done, err)
		}
	}
	// A fresh database with no alarm ever set.
	p := filepath.Join(dir, "fresh.db")
	st, err := OpenStore(p)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	if _, ok, done, err := readAlarmFile(p); err != nil || !done || ok {
		t.Fatalf("fresh database: set=%v, read from the file %v, %v", ok, done, err)
	}
}

// With commits in the WAL beside the file (the database closed, still
// open, or its process killed), the file alone is stale: the scan reads the
// WAL's committed frames over it, and sees what SQLite sees.
func TestReadAlarmWithWALReadsItsCommittedFrames(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a.db")
	writeAlarm(t, p, 1000, true).Close()
	st := writeAlarm(t, p, 2000, true) // committed to the WAL, still open
	if fi, err := os.Stat(p + "-wal"); err != nil || fi.Size() == 0 {
		t.Fatalf("expected a WAL with content beside the open database: %v", err)
	}
	if at, ok, done, err := readAlarmFile(p); err != nil || !done || !ok || at != 2000 {
		t.Fatalf("read from the file and its WAL: %d, %v (done %v), %v; want 2000", at, ok, done, err)
	}
	// As after a crash: copy the file and its WAL, never closed.
	crashed := filepath.Join(dir, "crashed.db")
	for _, s := range []string{"", "-wal"} {
		b, err := os.ReadFile(p + s)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(crashed+s, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()
	at, ok, err := ReadAlarm(crashed)
	if err != nil || !ok || at != 2000 {
		t.Fatalf("ReadAlarm after a crash: %d, %v, %v; want the committed 2000", at, ok, err)
	}
	// A rollback journal with content: only SQLite can say.
	if err := os.WriteFile(crashed+"-journal", []byte("hot"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, done, _ := readAlarmFile(crashed); done {
		t.Fatal("read the file beside a journal with content")
	}
}

// A file that is not laid out as expected goes to SQLite, which reports it.
func TestReadAlarmOddFiles(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "junk.db")
	if err := os.WriteFile(p, []byte("not a database, not at all, and long enough to have a header of one hundred bytes ............"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, done, _ := readAlarmFile(p); done {
		t.Fatal("read a junk file as a database")
	}
	if _, _, err := ReadAlarm(p); err == nil {
		t.Fatal("ReadAlarm of a junk file: no error")
	}
	// A database of another shape (no _wasmkeep_alarm table).
	other := filepath.Join(dir, "other.db")
	st, err := OpenStore(other)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.conn.Exec(`DROP TABLE _wasmkeep_alarm`); err != nil {
		t.Fatal(err)
	}
	st.Close()
	if _, _, done, _ := readAlarmFile(other); done {
		t.Fatal("read a database without the alarm table from the file")
	}
}
