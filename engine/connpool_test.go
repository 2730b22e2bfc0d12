package engine

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/ncruces/go-sqlite3"
)

// drainPool closes the idle connections, so that a test starts from an
// empty pool, and does so again when it ends.
func drainPool(t *testing.T) {
	t.Helper()
	drain := func() {
		connPool.mu.Lock()
		idle := connPool.idle
		connPool.idle = nil
		connPool.mu.Unlock()
		for _, pc := range idle {
			pc.close()
		}
	}
	drain()
	t.Cleanup(drain)
}

func idleConns() []*pooledConn {
	connPool.mu.Lock()
	defer connPool.mu.Unlock()
	return append([]*pooledConn(nil), connPool.idle...)
}

// databasesOf lists the databases a connection has (main, and any attached).
func databasesOf(t *testing.T, conn *sqlite3.Conn) []string {
	t.Helper()
	st, _, err := conn.Prepare(`SELECT name FROM pragma_database_list`)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var names []string
	for st.Step() {
		names = append(names, st.ColumnText(0))
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}

// checkIdleClean fails unless every idle connection has nothing but its
// empty main database: no actor's file attached, no table of an actor's.
func checkIdleClean(t *testing.T) {
	t.Helper()
	for _, pc := range idleConns() {
		if dbs := databasesOf(t, pc.conn); len(dbs) != 1 || dbs[0] != "main" {
			t.Errorf("an idle connection has the databases %v; want main alone", dbs)
		}
		if err := pc.conn.Exec(`SELECT * FROM kv`); err == nil || !strings.Contains(err.Error(), "no such table") {
			t.Errorf("an idle connection reads a kv table: %v", err)
		}
	}
}

// An actor's store opened on the connection another actor's store used
// sees only its own kv, alarm and meta; after the close, the connection
// reaches nothing of the first actor's, and the file is free for any
// other connection.
func TestAStoreOnAReusedConnectionSeesOnlyItsOwn(t *testing.T) {
	drainPool(t)
	dir := t.TempDir()
	p, q := filepath.Join(dir, "p.db"), filepath.Join(dir, "q.db")
	a, err := OpenStore(p)
	if err != nil {
		t.Fatal(err)
	}
	pc := a.pc
	if err := a.Begin(); err != nil {
		t.Fatal(err)
	}
	if err := a.KVPut([]byte("k"), []byte("p's")); err != nil {
		t.Fatal(err)
	}
	if err := a.SetAlarm(1234); err != nil {
		t.Fatal(err)
	}
	if err := a.SetMeta("x", "p's"); err != nil {
		t.Fatal(err)
	}
	if err := a.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	checkIdleClean(t)

	// The file is free: a connection of its own reads p's commit.
	other, err := sqlite3.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	st, _, err := other.Prepare(`SELECT value FROM kv WHERE key = x'6b'`)
	if err != nil {
		t.Fatalf("another connection after the close: %v", err)
	}
	if !st.Step() || st.ColumnText(0) != "p's" {
		t.Errorf("another connection after the close read %v", st.Err())
	}
	st.Close()
	other.Close()

	b, err := OpenStore(q)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.pc != pc {
		t.Fatal("the second store did not reuse the first one's connection")
	}
	if v, ok, err := b.KVGet([]byte("k")); err != nil || ok {
		t.Errorf("q's kv-get of p's key: %q, %v, %v; want nothing", v, ok, err)
	}
	if at, ok, err := b.Alarm(); err != nil || ok {
		t.Errorf("q's alarm: %d, %v, %v; want none", at, ok, err)
	}
	if v, ok, err := b.Meta("x"); err != nil || ok {
		t.Errorf("q's meta x: %q, %v, %v; want none", v, ok, err)
	}
	if err := b.KVPut([]byte("k"), []byte("q's")); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	// Each file kept its own.
	for path, want := range map[string]string{p: "p's", q: "q's"} {
		s, err := OpenStore(path)
		if err != nil {
			t.Fatal(err)
		}
		if v, ok, err := s.KVGet([]byte("k")); err != nil || !ok || string(v) != want {
			t.Errorf("%s: kv-get %q, %v, %v; want %q", filepath.Base(path), v, ok, err, want)
		}
		s.Close()
	}
}

// An open that fails (a file that is not a database, a directory that does
// not exist) names the file, leaves no connection in the pool with
// anything attached, and the next open works.
func TestAFailedOpenLeavesNoConnectionHalfAttached(t *testing.T) {
	drainPool(t)
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.db")
	if err := os.WriteFile(bad, []byte(strings.Repeat("not a database ", 512)), 0o644); err != nil {
		t.Fatal(err)
	}
	// A pooled connection to start from, so that the failed opens take it.
	good := filepath.Join(dir, "good.db")
	writeAlarm(t, good, 42, true).Close()
	for _, p := range []string{bad, filepath.Join(dir, "missing", "a.db")} {
		st, err := OpenStore(p)
		if err == nil {
			st.Close()
			t.Fatalf("%s opened", p)
		}
		if !strings.Contains(err.Error(), p) {
			t.Errorf("the error does not name the file: %v", err)
		}
		checkIdleClean(t)
	}
	// A database the ATTACH takes but whose settings fail (an in-memory
	// one has no WAL to keep): the connection has it attached when the
	// open fails, and must not be pooled.
	if st, err := attachStore(":memory:", false, false); err == nil {
		st.Close()
		t.Fatal("an in-memory database took the store's settings")
	}
	checkIdleClean(t)
	st, err := OpenStore(good)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if at, ok, err := st.Alarm(); err != nil || !ok || at != 42 {
		t.Fatalf("the alarm after the failed opens: %d, %v, %v; want 42", at, ok, err)
	}
}

// A store whose statements met an error from SQLite closes its connection
// rather than return it to the pool.
func TestAStoreThatMetAnErrorDoesNotPoolItsConnection(t *testing.T) {
	drainPool(t)
	p := filepath.Join(t.TempDir(), "a.db")
	st := writeAlarm(t, p, 1, true)
	// A meta table of another shape: writing meta fails in SQLite.
	if err := st.conn.Exec(`DROP TABLE a._wasmkeep_meta; CREATE TABLE a._wasmkeep_meta (key TEXT PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	if err := st.SetMeta("x", "y"); err == nil {
		t.Fatal("the meta write succeeded")
	}
	pc := st.pc
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	for _, idle := range idleConns() {
		if idle == pc {
			t.Fatal("the connection that met an error is back in the pool")
		}
	}
}

// The pool keeps at most maxIdleConns connections, however many stores
// were open at once.
func TestThePoolKeepsAFewIdleConnections(t *testing.T) {
	drainPool(t)
	dir := t.TempDir()
	n := maxIdleConns + 8
	stores := make([]*Store, n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stores[i], errs[i] = OpenStore(filepath.Join(dir, strings.Repeat("x", i+1)+".db"))
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
		if err := stores[i].Close(); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(idleConns()); got != maxIdleConns {
		t.Fatalf("%d idle connections after %d stores closed; want %d", got, n, maxIdleConns)
	}
	checkIdleClean(t)
}

// Each attached database gets the settings an actor's database needs:
// WAL, synchronous=NORMAL, exclusive locking, a WAL file kept at the
// size of walCheckpointPages frames; a database that is not in WAL mode
// (one written by another SQLite, say) is switched to it.
func TestAnAttachedDatabaseHasTheStoreSettings(t *testing.T) {
	drainPool(t)
	dir := t.TempDir()
	rollback, err := sqlite3.Open(filepath.Join(dir, "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	if err := rollback.Exec(`PRAGMA journal_mode=DELETE; PRAGMA synchronous=FULL; ` + schema); err != nil {
		t.Fatal(err)
	}
	if err := rollback.Close(); err != nil {
		t.Fatal(err)
	}
	// The second and third on a reused connection.
	for i, name := range []string{"a.db", "b.db", "c.db"} {
		st, err := OpenStore(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		for pragma, want := range map[string]string{
			"journal_mode":       "wal",
			"synchronous":        "1",
			"locking_mode":       "exclusive",
			"journal_size_limit": strconv.Itoa(walSizeLimit),
		} {
			s, _, err := st.conn.Prepare(`PRAGMA ` + storeSchema + `.` + pragma)
			if err != nil {
				t.Fatal(err)
			}
			if !s.Step() || s.ColumnText(0) != want {
				t.Errorf("store %d: %s is %q; want %q", i, pragma, s.ColumnText(0), want)
			}
			s.Close()
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// A store closed in the middle of a transaction rolls it back and returns
// its connection to the pool (a DETACH fails inside a transaction).
func TestAStoreClosedInATransactionRollsBackAndPoolsItsConnection(t *testing.T) {
	drainPool(t)
	p := filepath.Join(t.TempDir(), "a.db")
	st, err := OpenStore(p)
	if err != nil {
		t.Fatal(err)
	}
	pc := st.pc
	if err := st.Begin(); err != nil {
		t.Fatal(err)
	}
	if err := st.KVPut([]byte("k"), []byte("uncommitted")); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatalf("close in a transaction: %v", err)
	}
	st, err = OpenStore(p)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if st.pc != pc {
		t.Error("the connection was not reused after a close in a transaction")
	}
	if v, ok, err := st.KVGet([]byte("k")); err != nil || ok {
		t.Errorf("kv-get after a close in a transaction: %q, %v, %v; want nothing", v, ok, err)
	}
}

// Once the automatic checkpoint has copied the WAL into the database and
// the WAL starts again, its file keeps its size, so that the commits after
// it write over it in place; the close of a database whose WAL file is
// that large checkpoints it and truncates it, so that a sleeping actor
// keeps no more than closeCheckpointBytes of WAL.
func TestARestartedWALKeepsItsFileUntilTheClose(t *testing.T) {
	p := filepath.Join(t.TempDir(), "a.db")
	st, err := OpenStore(p)
	if err != nil {
		t.Fatal(err)
	}
	salt := func() string {
		b, err := os.ReadFile(p + "-wal")
		if err != nil || len(b) < walHeaderSize {
			t.Fatalf("read the WAL header: %v (%d bytes)", err, len(b))
		}
		return string(b[16:24])
	}
	commit := func(i int) {
		if err := st.Begin(); err != nil {
			t.Fatal(err)
		}
		if err := st.SetAlarm(int64(1000 + i)); err != nil {
			t.Fatal(err)
		}
		if err := st.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	commit(0)
	first := salt()
	i := 1
	for ; salt() == first; i++ {
		if i > 4*walCheckpointPages {
			t.Fatalf("the WAL did not start again after %d commits", i)
		}
		commit(i)
	}
	commit(i)
	fi, err := os.Stat(p + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() <= closeCheckpointBytes || fi.Size() > walSizeLimit {
		t.Errorf("after the WAL started again: its file is %d bytes; want it kept, over %d and at most %d", fi.Size(), closeCheckpointBytes, walSizeLimit)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(p + "-wal"); err != nil || fi.Size() != 0 {
		t.Errorf("after the close: WAL %v, %v; want an empty file", fi.Size(), err)
	}
	st, err = OpenStore(p)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if at, ok, err := st.Alarm(); err != nil || !ok || at != int64(1000+i) {
		t.Errorf("after reopening: alarm %d, %v, %v; want %d", at, ok, err, 1000+i)
	}
}
