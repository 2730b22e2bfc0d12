package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/ncruces/go-sqlite3"

	"github.com/wasmkeep/alarms/hostmod"
	"github.com/wasmkeep/alarms/internal/diskfault"
	"github.com/wasmkeep/alarms/internal/iohook"
)

// schema creates an actor's tables: the alarm's (hostmod.AlarmSchema);
// everything the host owns is under the _wasmkeep_ prefix; the guest's
// own data is in kv, the only table a guest can reach (through kv-get,
// kv-put and kv-delete).
var schema = hostmod.AlarmSchema("") + `
CREATE TABLE IF NOT EXISTS kv (
	key   BLOB PRIMARY KEY,
	value BLOB NOT NULL
);`

// Store is one actor's SQLite database: its alarm, the host's meta rows and
// the guest's key-value data. A Store is not safe for concurrent use: the
// actor runs one event at a time.
type Store struct {
	path string
	pc   *pooledConn
	conn *sqlite3.Conn // pc.conn
	// rows are the alarm's tables and the transactions (hostmod.Rows);
	// stmts the guest's data and the checkpoint, prepared on first use
	// (see stmt).
	rows  hostmod.Rows // kept in the Store: a wake allocates no Rows
	stmts [nStmts]*sqlite3.Stmt
	// failed is set when SQLite returned an error: the connection is
	// closed with the store rather than reused (so is it when rows
	// failed).
	failed bool

	// ahead are the database's file and its WAL while they read ahead
	// (see storeFile): until the store ends its first transaction.
	ahead [2]readAheader
	// wal is the WAL's file as a deferrer (CommitDeferred), found with
	// ahead's when the database is attached, or at the first deferred
	// commit.
	wal deferrer

	img snapImage // the committed image snapshots copy (see SnapshotTo)
	// imageMisses counts the snapshots of a small database that could not
	// use the image and were serialised through SQLite.
	imageMisses int
}

// fail notes an error from SQLite (see failed) and returns it. A write
// that found the disk full is SQLITE_FULL, which the driver returns
// without the system's error: it is given ENOSPC back, so that a host
// tells a full disk from other failures with errors.Is(err,
// syscall.ENOSPC), as it does for the files written beside the database.
func (s *Store) fail(err error) error {
	if err != nil {
		s.failed = true
		err = hostmod.WithENOSPC(err)
	}
	return err
}

// writeFile writes a new file at path (see diskfault); a write that
// failed leaves no file, and what it wrote no space taken.
func writeFile(path string, data []byte) error {
	err := writeFileFit(path, data)
	if err != nil {
		_ = os.Remove(path)
	}
	return err
}

func writeFileFit(path string, data []byte) error {
	if k := diskfault.Fit(path, len(data)); k < len(data) {
		// The tests' full disk: what fits is written, then ENOSPC.
		if err := os.WriteFile(path, data[:max(k, 0)], 0o644); err != nil {
			return err
		}
		return &os.PathError{Op: "write", Path: path, Err: syscall.ENOSPC}
	}
	return os.WriteFile(path, data, 0o644)
}

// The statements a Store runs, each prepared once per open, on first use.
type stmtID int

const (
	stKVGet stmtID = iota
	stKVPut
	stKVDel
	stCheckpoint
	stIdemGet
	stIdemPut
	stIdemTrim
	stIdemKeys
	nStmts
)

// Every name is qualified with storeSchema (a): the actor's database is
// attached to a pooled connection under that name (see OpenStore), and
// nothing of an actor's may land in the connection's own main database,
// which outlives it.
var stmtSQL = [nStmts]string{
	stKVGet:      `SELECT value FROM a.kv WHERE key = ?`,
	stKVPut:      `INSERT INTO a.kv (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value`,
	stKVDel:      `DELETE FROM a.kv WHERE key = ?`,
	stCheckpoint: `PRAGMA a.wal_checkpoint(PASSIVE)`,
	// The idempotency keys (idempotency.go): the trim keeps the newest
	// key, and of the others those within ?1 keys and ?2 bytes of
	// responses, counted newest first.
	stIdemGet: `SELECT request, reply FROM a._wasmkeep_idempotency WHERE key = ?`,
	stIdemPut: `INSERT INTO a._wasmkeep_idempotency (key, request, reply, at_ms) VALUES (?, ?, ?, ?)`,
	stIdemTrim: `DELETE FROM a._wasmkeep_idempotency WHERE seq IN (SELECT seq FROM (
		SELECT seq, row_number() OVER w AS n, sum(length(reply)) OVER w AS total
		FROM a._wasmkeep_idempotency WINDOW w AS (ORDER BY seq DESC))
		WHERE n > 1 AND (n > ?1 OR total > ?2))`,
	stIdemKeys: `SELECT key FROM a._wasmkeep_idempotency ORDER BY seq`,
}

// schemaIn is schema with every table in storeSchema.
var schemaIn = strings.ReplaceAll(schema, "CREATE TABLE IF NOT EXISTS ", "CREATE TABLE IF NOT EXISTS "+storeSchema+".")

// rowsSQL are the alarm's statements (hostmod.Rows) in storeSchema: a
// missing table is created with the rest of the schema, and a transaction
// is a deferred BEGIN (see Begin).
var rowsSQL = hostmod.NewRowsSQL(hostmod.RowsConfig{Schema: storeSchema, Create: schemaIn, Begin: "BEGIN"})

// stmt returns the prepared statement id, preparing it on its first use
// since the open: an actor woken for one event prepares only what that
// event runs. A table that is missing (the schema is not created on each
// open: a new database starts from the template) is created with the rest
// of the schema, and the statement prepared again. Exec leaves a statement
// reset; one stepped row by row is reset when its caller is done with it.
func (s *Store) stmt(id stmtID) (*sqlite3.Stmt, error) {
	if st := s.stmts[id]; st != nil {
		return st, nil
	}
	st, _, err := s.conn.Prepare(stmtSQL[id])
	if err != nil && strings.Contains(err.Error(), "no such table") {
		if err = s.conn.Exec(schemaIn); err == nil {
			st, _, err = s.conn.Prepare(stmtSQL[id])
		}
	}
	if err != nil {
		return nil, s.fail(err)
	}
	s.stmts[id] = st
	return st, nil
}

// OpenStore opens (creating if needed) the actor database at path. The file
// uses WAL with synchronous=NORMAL: a commit is in the WAL, written, before
// it returns, so it survives a crash of the process at any point; on a
// power loss or an OS crash the last commits before it may roll back (the
// WAL is synced only when it starts anew and before each checkpoint), and
// the database stays consistent (the checkpoint syncs the WAL before it
// copies it into the file, and the file before the WAL is reset).
//
// The database is held in exclusive locking mode: its WAL index lives in
// the process's memory (no -shm file, no shared mapping), and no other
// connection can read or write the file while it is open.
//
// Closing does not checkpoint: the committed frames stay in the WAL for the
// next open, which recovers them, as it would after a crash. That keeps
// exactly the promise above, since the database file is only ever written
// by a checkpoint, which syncs the WAL first; and it spares each close its
// two fsyncs, and the next commit the fsync of a WAL started anew. The
// automatic checkpoint (at walCheckpointPages) bounds the WAL of an open
// database, and a close checkpoints one past closeCheckpointBytes, which
// bounds what a sleeping actor keeps beside its file and what ReadAlarm
// reads. A new database starts as a copy of an empty one made once per
// process, which saves the fsyncs of creating the schema and switching to
// WAL in every new file.
//
// The database is attached, under storeSchema, to a connection taken from
// a pool (see pooledConn) and detached from it on Close, which closes the
// file and releases its lock; the connection, whose own main database is
// an empty in-memory one that no statement of a Store names, goes back to
// the pool. Only the host's statements run on it (a guest reaches its
// data through kv-get, kv-put and kv-delete), every one naming
// storeSchema. A connection is reused only after a clean DETACH in a
// store that saw no error from SQLite; any other is closed.
//
// An existing database whose schema version (its header's user_version)
// is newer than this build reads, as after a rollback onto a data
// directory a later build wrote, is refused with an error wrapping a
// *format.NewerError and left as it is (docs/design.md#format-versions):
// its file's header is read before SQLite opens it, and the version SQLite
// then sees (a WAL may hold a newer page 1) before anything else runs.
func OpenStore(path string) (*Store, error) { return openStore(path, false, false) }

// openStore is OpenStore; durable syncs a new database's file, and its
// directory, before the database is named, and sets the database to sync
// its WAL at each commit (synchronous=FULL; WithDurableCommits); restored
// checks the database as CheckSnapshot checks a snapshot, before anything
// is written to it (see OpenRestored).
func openStore(path string, durable, restored bool) (*Store, error) {
	if _, err := os.Lstat(path); os.IsNotExist(err) {
		if err := createFromTemplate(path, durable); err != nil {
			return nil, fmt.Errorf("create %s: %w", path, err)
		}
	} else if !restored {
		// A later build's database: refused before SQLite opens it, so
		// nothing of it (nor a WAL beside it) is written. One restored
		// just now has the snapshot's header, whose version its format
		// check read, and the attach reads it again before anything is
		// written (checkAttachedSchema; OpenRestored removes it whole).
		if err := checkLocalSchema(path); err != nil {
			return nil, fmt.Errorf("open %s: %w", path, err)
		}
	}
	s, err := attachStore(path, durable, restored)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return s, nil
}

// attachStore opens the database at path on a pooled connection. A
// connection that failed to take it is closed, never pooled: it may hold
// it attached.
func attachStore(path string, durable, check bool) (*Store, error) {
	pc, err := connPool.get()
	if err != nil {
		return nil, err
	}
	if err := pc.attachDB(path, durable, check); err != nil {
		pc.close()
		return nil, err
	}
	if err := checkAttachedSchema(pc.conn); err != nil {
		pc.close() // no checkpoint on close: the WAL stays as it is
		return nil, err
	}
	s := &Store{path: path, pc: pc, conn: pc.conn, rows: *hostmod.NewRows(pc.conn, rowsSQL)}
	for i, op := range []sqlite3.FcntlOpcode{sqlite3.FCNTL_FILE_POINTER, sqlite3.FCNTL_JOURNAL_POINTER} {
		if v, err := pc.conn.FileControl(storeSchema, op); err == nil {
			f := unwrapFile(v)
			s.ahead[i], _ = f.(readAheader)
			if op == sqlite3.FCNTL_JOURNAL_POINTER {
				s.wal, _ = f.(deferrer)
			}
		}
	}
	return s, nil
}

// endReadAhead stops the database's files reading ahead: the reads that
// gain from it (the WAL's recovery, the schema, the first pages read) are
// those of the open and the first transaction, and an open store keeps
// no buffer beyond them.
func (s *Store) endReadAhead() {
	for i, f := range s.ahead {
		if f != nil {
			f.dropReadAhead()
			s.ahead[i] = nil
		}
	}
}

var template struct {
	once sync.Once
	img  []byte
	err  error
}

// createFromTemplate writes an empty actor database at path: written beside
// it and renamed, so a crash leaves either no file or a whole one. durable
// syncs the file before the rename and the directory after it, so that a
// power loss too leaves either no file or a whole one, and not the name
// without its contents.
func createFromTemplate(path string, durable bool) error {
	template.once.Do(func() { template.img, template.err = makeTemplate() })
	if template.err != nil {
		return template.err
	}
	tmp := path + ".new"
	if err := writeFile(tmp, template.img); err != nil {
		return err
	}
	if durable {
		if err := syncPath(tmp); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	if durable {
		return syncPath(filepath.Dir(path))
	}
	return nil
}

// syncPath syncs the file or directory at path.
func syncPath(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// makeTemplate creates an empty database the way OpenStore sets one up,
// creates the schema, checkpoints the WAL into the file, closes it and
// returns the file.
func makeTemplate() ([]byte, error) {
	dir, err := os.MkdirTemp("", "wasmkeep-template-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	p := filepath.Join(dir, "empty.db")
	s, err := attachStore(p, false, false)
	if err != nil {
		return nil, err
	}
	// The close does not checkpoint: this one does, so that the template
	// is whole in its one file.
	if err := s.fail(s.conn.Exec(schemaIn + `PRAGMA a.wal_checkpoint(TRUNCATE);`)); err != nil {
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

// Close closes the database. An open transaction rolls back. The WAL stays
// as it is, committed frames and all (see OpenStore), unless it holds more
// than closeCheckpointBytes: then they are checkpointed into the file
// first and the WAL truncated. The database is detached from its
// connection, which goes back to the pool if nothing failed.
func (s *Store) Close() error {
	if s == nil || s.conn == nil {
		return nil
	}
	_ = s.rows.Rollback()
	if fi, err := os.Stat(s.path + "-wal"); err == nil && fi.Size() > closeCheckpointBytes {
		// Best effort: a failed checkpoint leaves the WAL whole, which the
		// next open recovers.
		_ = s.fail(s.conn.Exec(`PRAGMA a.wal_checkpoint(TRUNCATE)`))
	}
	if err := s.rows.Close(); err != nil || s.rows.Failed() {
		s.failed = true
	}
	for i, st := range s.stmts {
		if st != nil {
			if err := st.Close(); err != nil {
				s.failed = true
			}
			s.stmts[i] = nil
		}
	}
	s.endReadAhead()
	pc := s.pc
	s.pc, s.conn = nil, nil
	err := pc.detachDB()
	if err != nil || s.failed {
		pc.close()
	} else {
		connPool.put(pc)
	}
	if err != nil {
		return fmt.Errorf("close %s: %w", s.path, err)
	}
	return nil
}

// Begin starts a transaction, for writes as for reads. It is a deferred
// BEGIN, not BEGIN IMMEDIATE: the database is held in exclusive locking
// mode (see OpenStore), so no other connection can take it in between
// and the first write never waits or fails for a lock; and BEGIN
// IMMEDIATE would open a write transaction on every database of the
// connection, its own empty main database included, which each commit
// then ends too (about a twentieth of an event that sets an alarm).
// Each statement opens the transaction on the database it names.
func (s *Store) Begin() error { return s.rows.Begin() }

// Commit commits the open transaction.
func (s *Store) Commit() error {
	err := s.rows.Commit()
	s.endReadAhead()
	return err
}

// deferrer is a WAL file whose commit's sync can be deferred: a WAL the
// node journal covers (storeFile, on Linux).
type deferrer interface {
	deferNextSync(replicated bool) bool
	endDefer()
	deferred() Durability
}

// Durability is what a deferred commit waits on: Wait returns once the
// commit is durable, or the error that keeps it from being so (every
// later commit then fails too).
type Durability interface{ Wait() error }

// CommitDeferred commits the open transaction without waiting for it to
// be durable, where the node journal covers the database's WAL (Commit
// otherwise, and d is nil): the commit is in the WAL, and in the
// journal's next batch, which is asked for at once; d.Wait waits for it.
// A checkpoint of this store waits for it before it writes the database
// file. The caller must not let anyone learn of the commit before d.Wait
// returns (an output gate), nor let the database be opened again or
// checkpointed by another store meanwhile: the engine's actor waits for
// it at the start of its next call.
func (s *Store) CommitDeferred() (d Durability, err error) { return s.commitDeferred(false) }

// commitDeferred is CommitDeferred; replicated says the commit is a
// delivery whose upload, which the host makes before anything learns of
// it, is expected to make it durable first: the journal's batch is then
// asked for within a longer delay (journal.nudge).
func (s *Store) commitDeferred(replicated bool) (d Durability, err error) {
	if s.wal == nil {
		if v, err := s.conn.FileControl(storeSchema, sqlite3.FCNTL_JOURNAL_POINTER); err == nil {
			s.wal, _ = unwrapFile(v).(deferrer)
		}
	}
	w := s.wal
	if w == nil || !w.deferNextSync(replicated) {
		return nil, s.Commit()
	}
	err = s.Commit()
	w.endDefer()
	return w.deferred(), err
}

// Rollback rolls the open transaction back; without one it does nothing.
func (s *Store) Rollback() error {
	if !s.rows.InTx() {
		return nil
	}
	err := s.rows.Rollback()
	s.endReadAhead()
	return err
}

// InTx reports whether a transaction is open.
func (s *Store) InTx() bool { return s.rows.InTx() }

// The alarm's rows (hostmod.Rows), in the actor's database.

// Alarm reads the alarm: its time in Unix milliseconds and whether one is set.
func (s *Store) Alarm() (atMs int64, ok bool, err error) { return s.rows.Alarm() }

// SetAlarm sets the alarm to atMs, replacing any.
func (s *Store) SetAlarm(atMs int64) error { return s.rows.SetAlarm(atMs) }

// ClearAlarm removes the alarm, if any.
func (s *Store) ClearAlarm() error { return s.rows.ClearAlarm() }

// Meta reads a meta value.
func (s *Store) Meta(key string) (value string, ok bool, err error) { return s.rows.Meta(key) }

// SetMeta writes a meta value.
func (s *Store) SetMeta(key, value string) error { return s.rows.SetMeta(key, value) }

// DeleteMeta removes a meta value.
func (s *Store) DeleteMeta(key string) error { return s.rows.DeleteMeta(key) }

// State reads the alarm, the failure count and the meta rows
// MetaAlarmIndexed and MetaInitDone with one statement
// (hostmod.Rows.State).
func (s *Store) State() (hostmod.CommittedState, error) { return s.rows.State() }

// Failures reads the committed failure count of the pending alarm (0 when
// none is recorded).
func (s *Store) Failures() (int, error) { return s.rows.Failures() }

// SetFailures writes the failure count; 0 removes the row.
func (s *Store) SetFailures(n int) error { return s.rows.SetFailures(n) }

// DeadLetter reads the dead letter; ok is false when no alarm was given up.
func (s *Store) DeadLetter() (d hostmod.DeadLetter, ok bool, err error) { return s.rows.DeadLetter() }

// SetDeadLetter writes the dead letter.
func (s *Store) SetDeadLetter(d hostmod.DeadLetter) error { return s.rows.SetDeadLetter(d) }

// KVGet reads a guest value; ok is false when the key is absent.
func (s *Store) KVGet(key []byte) (value []byte, ok bool, err error) {
	st, err := s.stmt(stKVGet)
	if err != nil {
		return nil, false, err
	}
	defer st.Reset()
	if err := st.BindBlob(1, blob(key)); err != nil {
		return nil, false, err
	}
	if st.Step() {
		return st.ColumnBlob(0, nil), true, nil
	}
	return nil, false, s.fail(st.Err())
}

// KVPut writes a guest value.
func (s *Store) KVPut(key, value []byte) error {
	st, err := s.stmt(stKVPut)
	if err != nil {
		return err
	}
	if err := st.BindBlob(1, blob(key)); err != nil {
		return err
	}
	if err := st.BindBlob(2, blob(value)); err != nil {
		return err
	}
	return s.fail(st.Exec())
}

// KVDelete removes a guest value.
func (s *Store) KVDelete(key []byte) error {
	st, err := s.stmt(stKVDel)
	if err != nil {
		return err
	}
	if err := st.BindBlob(1, blob(key)); err != nil {
		return err
	}
	return s.fail(st.Exec())
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
// checkpoints it into the database file (a variable for the power-cut
// tests, which checkpoint more often).
var walCheckpointPages = defaultWALCheckpointPages

const defaultWALCheckpointPages = 128

// walSizeLimit is the size, in bytes, to which SQLite cuts an open
// database's WAL file when the WAL starts again after a checkpoint (its
// journal_size_limit): the size walCheckpointPages frames of 4 KiB pages
// take. Commits after the restart write over the file in place; with no
// room kept (a limit of 0) each of them wrote past the end of the file,
// and the file system allocated its blocks anew, which made a commit cost
// a quarter more. A WAL that grew past the limit in one large commit is
// cut back to it. A WAL file over closeCheckpointBytes is checkpointed
// and truncated when its database closes, so a sleeping actor keeps no
// more than that.
const walSizeLimit = walHeaderSize + defaultWALCheckpointPages*(walFrameHeaderSize+4096)

// closeCheckpointBytes is the WAL size past which a close checkpoints it:
// a sleeping actor keeps at most 128 KiB of WAL (31 frames of 4 KiB pages)
// beside its file.
const closeCheckpointBytes = 128 << 10

// serializeBelow is the database file size under which Snapshot
// serialises rather than checkpoints.
const serializeBelow = 512 << 10

// Snapshot returns the committed database as one SQLite file image, for
// replication. It must not be called while a transaction is open.
func (s *Store) Snapshot() ([]byte, error) { return s.SnapshotTo(nil) }

// SnapshotTo is Snapshot into buf[:0] (grown when too small): a replicating
// host that uploads one snapshot after another reuses its buffers. The
// image of a large database, read from the checkpointed file, is a new
// slice. A small database's snapshot is a copy of the image the store
// keeps (snapImage: as large as the database, up to serializeBelow, for
// as long as the store is open), brought up to date from the frames the
// WAL gained since the last snapshot.
func (s *Store) SnapshotTo(buf []byte) ([]byte, error) {
	if s.rows.InTx() {
		return nil, errors.New("snapshot: a transaction is open")
	}
	// The image the store keeps, brought up to date from the frames the
	// WAL gained since the last snapshot (snapImage): a small database
	// costs a read of those frames and a copy.
	db, wal := s.files()
	if s.img.update(s.path, db, wal) == nil {
		if b, err := s.img.snapshot(buf); err == nil {
			return b, nil
		}
		s.img.reset()
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
	} else {
		s.imageMisses++
	}
	b, err := serialize(s.conn, storeSchema, buf)
	if err != nil {
		s.failed = true
		return nil, fmt.Errorf("snapshot %s: %w", s.path, err)
	}
	return b, nil
}

// checkpointedFile copies the WAL into the database file and reads the
// file; ok is false if the checkpoint did not copy every frame or the
// file could not be read, and the caller serialises instead. (Another
// connection reading an older state cannot hold the checkpoint back: the
// store locks the file exclusively.)
func (s *Store) checkpointedFile() (b []byte, ok bool) {
	st, err := s.stmt(stCheckpoint)
	if err != nil {
		return nil, false
	}
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
	b, err = os.ReadFile(s.path)
	if err != nil || len(b) == 0 {
		return nil, false
	}
	return b, true
}

// SyncDatabase makes the database at path durable as it stands: the file,
// its WAL (if any) and their directory, each synced. A restore
// (WriteSnapshot) writes the file without a sync, and without the node
// journal a commit does not sync the WAL either; a host that records the
// local file as matching a snapshot (the node's sidecar) syncs it first,
// or a power cut may leave that record beside an older or emptied file.
// The WAL's commits in the node journal are durable already: Actor.Settle
// waits for the last of them.
func SyncDatabase(path string) error {
	for _, p := range []string{path, path + "-wal", filepath.Dir(path)} {
		if err := syncPath(p); os.IsNotExist(err) {
			continue
		} else if err != nil {
			return fmt.Errorf("sync %s: %w", p, err)
		}
		if h := iohook.Func; h != nil {
			h("sync", p, 0, 0)
		}
	}
	return nil
}

// WriteSnapshot replaces the database file at path with a snapshot's bytes
// (no database may be open on it). Its WAL and shared-memory files go too,
// once the bytes are written beside it: a write that fails (a full disk)
// leaves the database as it was, WAL and all.
func WriteSnapshot(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := writeFile(tmp, data); err != nil {
		return err
	}
	if err := forgetWAL(path); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	for _, p := range []string{path + "-wal", path + "-shm"} {
		if err := removeFile(p); err != nil && !os.IsNotExist(err) {
			_ = os.Remove(tmp)
			return err
		}
	}
	return renameFile(tmp, path)
}

// MoveDatabase renames the closed database at from, with its WAL (which
// may hold commits: see OpenStore), to to. The WAL goes first: a crash in
// between leaves each WAL beside its own file's name.
func MoveDatabase(from, to string) error {
	if err := forgetWAL(from); err != nil {
		return err
	}
	if err := forgetWAL(to); err != nil {
		return err
	}
	if err := os.Rename(from+"-wal", to+"-wal"); err != nil && !os.IsNotExist(err) {
		return err
	}
	_ = os.Remove(from + "-shm")
	return os.Rename(from, to)
}

// RemoveDatabase removes the database file at path with its WAL and
// shared-memory files.
func RemoveDatabase(path string) error {
	if err := forgetWAL(path); err != nil {
		return err
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := removeFile(p); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	return nil
}

// forgetWAL is called before the WAL of the database at path is removed,
// renamed or replaced: the node journal covering it (WithJournal), if it
// holds records of it, syncs it in its own file and forgets them, so that
// no replay writes them again into a WAL that is gone, or another's.
func forgetWAL(path string) error {
	if j := journalFor(path + "-wal"); j != nil {
		if err := j.forget(path + "-wal"); err != nil {
			return fmt.Errorf("journal: forget the WAL of %s: %w", path, err)
		}
	}
	return nil
}
