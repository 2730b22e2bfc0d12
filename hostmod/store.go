package hostmod

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/ncruces/go-sqlite3"

	"github.com/wasmkeep/alarms/alarmindex"
)

// Meta keys in the _wasmkeep_meta table.
const (
	// MetaAlarmFailures is the committed failure count of the pending alarm.
	MetaAlarmFailures = "alarm_failures"
	// MetaAlarmIndexed names the index entry that stands for the alarm
	// (docs/design.md#the-index: "<at>/<tag>", empty for none). Written by the index updater.
	MetaAlarmIndexed = alarmindex.MetaAlarmIndexed
	// MetaOwnerFence is the one-line change an owner uploads before it removes
	// entries as stale (docs/design.md#r2).
	MetaOwnerFence = alarmindex.MetaOwnerFence
	// MetaInitDone records that on-init ran and committed.
	MetaInitDone = "init_done"
)

// schema creates the host's tables. Everything the host owns is under the
// _wasmkeep_ prefix; the guest's own data is in kv, the only table a guest
// can reach (through kv-get, kv-put and kv-delete).
const schema = `
CREATE TABLE IF NOT EXISTS _wasmkeep_alarm (
	id    INTEGER PRIMARY KEY CHECK (id = 1),
	at_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS _wasmkeep_meta (
	key   TEXT PRIMARY KEY,
	value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS kv (
	key   BLOB PRIMARY KEY,
	value BLOB NOT NULL
);`

// Store is one actor's SQLite database: its alarm, the host's meta rows and
// the guest's key-value data. A Store is not safe for concurrent use: the
// actor runs one event at a time.
type Store struct {
	path string
	conn *sqlite3.Conn

	getAlarm, putAlarm, delAlarm *sqlite3.Stmt
	getMeta, putMeta, delMeta    *sqlite3.Stmt
	kvGet, kvPut, kvDel          *sqlite3.Stmt
	checkpoint                   *sqlite3.Stmt
	begin, commit, rollback      *sqlite3.Stmt // prepared once: no parse per event
	beginRead                    *sqlite3.Stmt
	inTx                         bool
}

// OpenStore opens (creating if needed) the actor database at path. The file
// uses WAL with synchronous=NORMAL: a commit is in the WAL, written, before
// it returns, so it survives a crash of the process at any point; on a
// power loss or an OS crash the last commits before it may roll back (the
// WAL is synced only before each checkpoint), and the database stays
// consistent (the checkpoint syncs the WAL before it copies it into the
// file, and the file before the WAL is reset). The WAL persists: closing
// checkpoints it into the file and truncates it to an empty file, which
// the next open reuses rather than creating one. A new database starts as
// a copy of an empty one made once per process, which saves the fsyncs of
// creating the schema and switching to WAL in every new file.
func OpenStore(path string) (*Store, error) {
	if _, err := os.Lstat(path); os.IsNotExist(err) {
		if err := createFromTemplate(path); err != nil {
			return nil, fmt.Errorf("create %s: %w", path, err)
		}
	}
	conn, err := sqlite3.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	s := &Store{path: path, conn: conn}
	if err := s.init(); err != nil {
		conn.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return s, nil
}

func (s *Store) init() error {
	// Snapshots of small databases leave the WAL alone (see Snapshot), so
	// the automatic checkpoint bounds it: at walCheckpointPages pages
	// (512 KiB), not SQLite's 1,000 (4 MiB per open actor).
	if err := s.conn.Exec(`PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=5000; PRAGMA journal_size_limit=0; PRAGMA wal_autocheckpoint=` + strconv.Itoa(walCheckpointPages) + `;`); err != nil {
		return err
	}
	if _, err := s.conn.FileControl("main", sqlite3.FCNTL_PERSIST_WAL, true); err != nil {
		return err
	}
	if err := s.conn.Exec(schema); err != nil {
		return err
	}
	prep := []struct {
		dst **sqlite3.Stmt
		sql string
	}{
		{&s.getAlarm, `SELECT at_ms FROM _wasmkeep_alarm WHERE id = 1`},
		{&s.putAlarm, `INSERT INTO _wasmkeep_alarm (id, at_ms) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET at_ms = excluded.at_ms`},
		{&s.delAlarm, `DELETE FROM _wasmkeep_alarm WHERE id = 1`},
		{&s.getMeta, `SELECT value FROM _wasmkeep_meta WHERE key = ?`},
		{&s.putMeta, `INSERT INTO _wasmkeep_meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value`},
		{&s.delMeta, `DELETE FROM _wasmkeep_meta WHERE key = ?`},
		{&s.kvGet, `SELECT value FROM kv WHERE key = ?`},
		{&s.kvPut, `INSERT INTO kv (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value`},
		{&s.kvDel, `DELETE FROM kv WHERE key = ?`},
		{&s.checkpoint, `PRAGMA wal_checkpoint(PASSIVE)`},
		{&s.begin, `BEGIN IMMEDIATE`},
		{&s.beginRead, `BEGIN`},
		{&s.commit, `COMMIT`},
		{&s.rollback, `ROLLBACK`},
	}
	for _, p := range prep {
		st, _, err := s.conn.Prepare(p.sql)
		if err != nil {
			return err
		}
		*p.dst = st
	}
	return nil
}

var template struct {
	once sync.Once
	img  []byte
	err  error
}

// createFromTemplate writes an empty actor database at path: written beside
// it and renamed, so a crash leaves either no file or a whole one.
func createFromTemplate(path string) error {
	template.once.Do(func() { template.img, template.err = makeTemplate() })
	if template.err != nil {
		return template.err
	}
	tmp := path + ".new"
	if err := os.WriteFile(tmp, template.img, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// makeTemplate creates an empty database the way OpenStore sets one up,
// closes it (its WAL checkpointed and emptied) and returns the file.
func makeTemplate() ([]byte, error) {
	dir, err := os.MkdirTemp("", "wasmkeep-template-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	p := filepath.Join(dir, "empty.db")
	conn, err := sqlite3.Open(p)
	if err != nil {
		return nil, err
	}
	s := &Store{path: p, conn: conn}
	if err := s.init(); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.Close(); err != nil {
		return nil, err
	}
	if fi, err := os.Stat(p + "-wal"); err == nil && fi.Size() > 0 {
		return nil, errors.New("template: the WAL was not checkpointed on close")
	}
	return os.ReadFile(p)
}

// Path is the database file.
func (s *Store) Path() string { return s.path }

// Close closes the database. An open transaction rolls back.
func (s *Store) Close() error {
	if s == nil || s.conn == nil {
		return nil
	}
	for _, st := range []*sqlite3.Stmt{s.getAlarm, s.putAlarm, s.delAlarm, s.getMeta, s.putMeta, s.delMeta, s.kvGet, s.kvPut, s.kvDel, s.checkpoint, s.begin, s.beginRead, s.commit, s.rollback} {
		if st != nil {
			st.Close()
		}
	}
	err := s.conn.Close()
	s.conn = nil
	if err == nil {
		s.removeSHM()
	}
	return err
}

// removeSHM removes the shared-memory file a closed database leaves. The
// WAL persists (kept as an empty file, so the next open need not create
// it), and with it SQLite keeps the -shm, 32 KiB per actor; with the WAL
// empty (the close checkpointed it: no other connection had the database
// open) the -shm holds nothing the next open needs.
func (s *Store) removeSHM() {
	if fi, err := os.Stat(s.path + "-wal"); err == nil && fi.Size() == 0 {
		_ = os.Remove(s.path + "-shm")
	}
}

// Begin starts a write transaction (BEGIN IMMEDIATE).
func (s *Store) Begin() error {
	if s.inTx {
		return errors.New("transaction already open")
	}
	if err := run(s.begin); err != nil {
		return err
	}
	s.inTx = true
	return nil
}

// run steps a prepared statement that returns no rows, and resets it.
func run(st *sqlite3.Stmt) error {
	err := st.Exec()
	if rerr := st.Reset(); err == nil {
		err = rerr
	}
	return err
}

// Commit commits the open transaction.
func (s *Store) Commit() error {
	if !s.inTx {
		return errors.New("no open transaction")
	}
	err := run(s.commit)
	if err != nil {
		_ = run(s.rollback)
	}
	s.inTx = false
	return err
}

// Rollback rolls the open transaction back; without one it does nothing.
func (s *Store) Rollback() error {
	if !s.inTx {
		return nil
	}
	s.inTx = false
	return run(s.rollback)
}

// read runs f, which only reads, in one read transaction: the reads see
// one state and take the database's read lock once rather than once each.
func (s *Store) read(f func() error) error {
	if s.inTx {
		return f()
	}
	if err := run(s.beginRead); err != nil {
		return err
	}
	if err := f(); err != nil {
		_ = run(s.rollback)
		return err
	}
	return run(s.commit)
}

// InTx reports whether a transaction is open.
func (s *Store) InTx() bool { return s.inTx }

// Alarm reads the alarm: its time in Unix milliseconds and whether one is set.
func (s *Store) Alarm() (atMs int64, ok bool, err error) {
	st := s.getAlarm
	defer st.Reset()
	if st.Step() {
		return st.ColumnInt64(0), true, nil
	}
	return 0, false, st.Err()
}

// SetAlarm sets the alarm to atMs, replacing any.
func (s *Store) SetAlarm(atMs int64) error {
	st := s.putAlarm
	defer st.Reset()
	if err := st.BindInt64(1, atMs); err != nil {
		return err
	}
	return st.Exec()
}

// ClearAlarm removes the alarm, if any.
func (s *Store) ClearAlarm() error {
	st := s.delAlarm
	defer st.Reset()
	return st.Exec()
}

// Meta reads a meta value.
func (s *Store) Meta(key string) (value string, ok bool, err error) {
	st := s.getMeta
	defer st.Reset()
	if err := st.BindText(1, key); err != nil {
		return "", false, err
	}
	if st.Step() {
		return st.ColumnText(0), true, nil
	}
	return "", false, st.Err()
}

// SetMeta writes a meta value.
func (s *Store) SetMeta(key, value string) error {
	st := s.putMeta
	defer st.Reset()
	if err := st.BindText(1, key); err != nil {
		return err
	}
	if err := st.BindText(2, value); err != nil {
		return err
	}
	return st.Exec()
}

// DeleteMeta removes a meta value.
func (s *Store) DeleteMeta(key string) error {
	st := s.delMeta
	defer st.Reset()
	if err := st.BindText(1, key); err != nil {
		return err
	}
	return st.Exec()
}

// Failures reads the committed failure count of the pending alarm (0 when
// none is recorded).
func (s *Store) Failures() (int, error) {
	v, ok, err := s.Meta(MetaAlarmFailures)
	if err != nil || !ok {
		return 0, err
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("meta %s: malformed value %q", MetaAlarmFailures, v)
	}
	return n, nil
}

// SetFailures writes the failure count; 0 removes the row.
func (s *Store) SetFailures(n int) error {
	if n <= 0 {
		return s.DeleteMeta(MetaAlarmFailures)
	}
	return s.SetMeta(MetaAlarmFailures, strconv.Itoa(n))
}

// KVGet reads a guest value; ok is false when the key is absent.
func (s *Store) KVGet(key []byte) (value []byte, ok bool, err error) {
	st := s.kvGet
	defer st.Reset()
	if err := st.BindBlob(1, blob(key)); err != nil {
		return nil, false, err
	}
	if st.Step() {
		return st.ColumnBlob(0, nil), true, nil
	}
	return nil, false, st.Err()
}

// KVPut writes a guest value.
func (s *Store) KVPut(key, value []byte) error {
	st := s.kvPut
	defer st.Reset()
	if err := st.BindBlob(1, blob(key)); err != nil {
		return err
	}
	if err := st.BindBlob(2, blob(value)); err != nil {
		return err
	}
	return st.Exec()
}

// KVDelete removes a guest value.
func (s *Store) KVDelete(key []byte) error {
	st := s.kvDel
	defer st.Reset()
	if err := st.BindBlob(1, blob(key)); err != nil {
		return err
	}
	return st.Exec()
}

// blob makes an empty key or value a zero-length blob: SQLite binds a nil
// slice as NULL, and a NULL key matches no key, not even another NULL (so
// kv-put of the empty key twice stored two rows, and kv-get never found
// them).
func blob(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// walCheckpointPages is the WAL size, in pages, at which a commit
// checkpoints it into the database file.
const walCheckpointPages = 128

// serializeBelow is the database file size under which Snapshot
// serialises rather than checkpoints.
const serializeBelow = 512 << 10

// Snapshot returns the committed database as one SQLite file image, for
// replication. It must not be called while a transaction is open.
func (s *Store) Snapshot() ([]byte, error) { return s.SnapshotTo(nil) }

// SnapshotTo is Snapshot into buf[:0] (grown when too small): a replicating
// host that uploads one snapshot after another reuses its buffers. The
// image of a large database, read from the checkpointed file, is a new
// slice.
func (s *Store) SnapshotTo(buf []byte) ([]byte, error) {
	if s.inTx {
		return nil, errors.New("snapshot: a transaction is open")
	}
	// A serialisation copies every page through a second connection, WAL
	// included, and writes nothing: for a small database (most actors')
	// it costs a fifth of a complete checkpoint, whose two fsyncs (and the
	// one of the next commit, which starts the WAL again) dominate. For a
	// larger one, copying the pages costs more than the checkpoint and
	// reading the file; with no transaction open and this the only
	// connection, the checkpoint leaves the whole committed database in
	// the file.
	if fi, err := os.Stat(s.path); err == nil && fi.Size() >= serializeBelow {
		if b, ok := s.checkpointedFile(); ok {
			return b, nil
		}
	}
	b, err := serialize(s.conn, "main", buf)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", s.path, err)
	}
	return b, nil
}

// checkpointedFile copies the WAL into the database file and reads the
// file; ok is false if the checkpoint could not complete (another
// connection reading an older state) or the file could not be read.
func (s *Store) checkpointedFile() (b []byte, ok bool) {
	st := s.checkpoint
	defer st.Reset()
	// One row: busy, frames in the WAL, frames checkpointed. A passive
	// checkpoint does not wait for readers; it is complete when it copied
	// every frame.
	if !st.Step() || st.ColumnInt(0) != 0 || st.ColumnInt(1) != st.ColumnInt(2) {
		return nil, false
	}
	if st.Step() || st.Err() != nil {
		return nil, false
	}
	b, err := os.ReadFile(s.path)
	if err != nil || len(b) == 0 {
		return nil, false
	}
	return b, true
}

// WriteSnapshot replaces the database file at path with a snapshot's bytes
// (no database may be open on it). Its WAL and shared-memory files go too.
func WriteSnapshot(path string, data []byte) error {
	for _, p := range []string{path + "-wal", path + "-shm"} {
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// RemoveDatabase removes the database file at path with its WAL and
// shared-memory files.
func RemoveDatabase(path string) error {
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	return nil
}
