package engine

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ncruces/go-sqlite3"
)

// A store and a connection of another VFS (the driver's own "os", as a
// tool reading an actor's file would use) keep out of each other: while
// the store is open the other connection can neither read nor write, and
// while the other holds a transaction the store cannot open; once the
// store closes, the other reads its commits, WAL and all.
func TestAStoreAndAnotherSQLiteExcludeEachOther(t *testing.T) {
	p := filepath.Join(t.TempDir(), "a.db")
	st := writeAlarm(t, p, 1234, true)
	other, err := sqlite3.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	readAlarm := func() (int64, error) {
		s, _, err := other.Prepare(`SELECT at_ms FROM _wasmkeep_alarm WHERE id = 1`)
		if err != nil {
			return 0, err
		}
		defer s.Close()
		if !s.Step() {
			return 0, s.Err()
		}
		return s.ColumnInt64(0), nil
	}
	if _, err := readAlarm(); err == nil {
		t.Fatal("another connection read a database a store holds open")
	}
	if err := other.Exec(`INSERT INTO kv (key, value) VALUES (x'01', x'02')`); err == nil {
		t.Fatal("another connection wrote to a database a store holds open")
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if at, err := readAlarm(); err != nil || at != 1234 {
		t.Fatalf("after the store closed, another connection read %d, %v; want 1234", at, err)
	}
	if err := other.Exec(`BEGIN IMMEDIATE`); err != nil {
		t.Fatal(err)
	}
	if st, err := OpenStore(p); err == nil {
		st.Close()
		t.Fatal("a store opened a database another connection is writing")
	} else if !strings.Contains(err.Error(), "locked") && !strings.Contains(err.Error(), "busy") {
		t.Fatalf("the open: %v; want the database locked", err)
	}
	if err := other.Exec(`ROLLBACK`); err != nil {
		t.Fatal(err)
	}
}

// A database whose file is a symbolic link keeps its WAL beside the link's
// target, where a connection opening the target finds it; a directory that
// is a link is the directory it names.
func TestALinkedDatabaseKeepsItsWALBesideItsTarget(t *testing.T) {
	dir := t.TempDir()
	real, link := filepath.Join(dir, "real.db"), filepath.Join(dir, "link.db")
	writeAlarm(t, real, 1, true).Close()
	if err := os.Symlink(real, link); err != nil {
		t.Skip("no symbolic links here:", err)
	}
	writeAlarm(t, link, 2, true).Close()
	if _, err := os.Lstat(link + "-wal"); !os.IsNotExist(err) {
		t.Fatalf("a WAL beside the link: %v", err)
	}
	if at, ok, err := ReadAlarm(real); err != nil || !ok || at != 2 {
		t.Fatalf("the target's alarm: %d, %v, %v; want 2", at, ok, err)
	}

	linkDir := filepath.Join(t.TempDir(), "d")
	if err := os.Symlink(dir, linkDir); err != nil {
		t.Fatal(err)
	}
	writeAlarm(t, filepath.Join(linkDir, "real.db"), 3, true).Close()
	if at, ok, err := ReadAlarm(real); err != nil || !ok || at != 3 {
		t.Fatalf("through the linked directory: %d, %v, %v; want 3", at, ok, err)
	}
}
