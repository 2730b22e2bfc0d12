package engine

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/ncruces/go-sqlite3"
	"github.com/ncruces/go-sqlite3/util/ioutil"
	"github.com/ncruces/go-sqlite3/vfs/readervfs"
)

// ErrBadSnapshot is the cause of CheckSnapshot's errors: the bytes are not
// an SQLite database the host wrote.
var ErrBadSnapshot = errors.New("not a database this host wrote")

// schemaObject is one row of sqlite_schema.
type schemaObject struct{ typ, name, table, sql string }

var (
	hostSchemaOnce sync.Once
	hostSchema     map[string]schemaObject // by type and name
	hostSchemaErr  error
)

// readSchema returns the objects of a database by "type name".
// schema is the name of the attached database to read ("main" for the
// connection's own).
func readSchema(conn *sqlite3.Conn, schema string) (map[string]schemaObject, error) {
	st, _, err := conn.Prepare(`SELECT type, name, tbl_name, coalesce(sql, '') FROM ` + schema + `.sqlite_schema`)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	out := map[string]schemaObject{}
	for st.Step() {
		o := schemaObject{st.ColumnText(0), st.ColumnText(1), st.ColumnText(2), st.ColumnText(3)}
		out[o.typ+" "+o.name] = o
	}
	return out, st.Err()
}

// expectedSchema is the schema OpenStore creates, with the table of
// idempotency keys, which the first event that records one creates.
func expectedSchema() (map[string]schemaObject, error) {
	hostSchemaOnce.Do(func() {
		conn, err := sqlite3.Open(":memory:")
		if err != nil {
			hostSchemaErr = err
			return
		}
		defer conn.Close()
		if hostSchemaErr = conn.Exec(schema + idemSchema); hostSchemaErr == nil {
			hostSchema, hostSchemaErr = readSchema(conn, "main")
		}
	})
	return hostSchema, hostSchemaErr
}

// CheckSnapshot tells whether a snapshot read from the bucket is a database
// the host could have written, before it replaces anything: SQLite reads it
// whole (PRAGMA quick_check), and every object in it (table, index,
// trigger, view) is one of the host's, with the host's definition. Tables
// of the host that are missing are fine (opening creates them). The bytes
// are read where they are, as an immutable database attached to one of
// the connections kept for checks: nothing is written to disk and no
// connection is opened for each check (a takeover's restore runs one). The
// error wraps ErrBadSnapshot and says why, except for a snapshot whose
// container or schema is of a later format than this build reads
// (CheckSnapshotFormat, checked first): that error wraps a
// *format.NewerError, and the snapshot is not this host's to judge (a
// later build reads it).
func CheckSnapshot(data []byte) error {
	if err := CheckSnapshotFormat(data); err != nil {
		return err
	}
	pc, err := checkConns.get()
	if err != nil {
		return fmt.Errorf("a connection to check a snapshot: %w", err)
	}
	got, reusable, err := checkAttached(pc, data)
	if reusable {
		checkConns.put(pc)
	} else {
		pc.close()
	}
	if err != nil {
		return badSnapshot("%v", err)
	}
	return judgeSchema(got)
}

// badSnapshot is an error wrapping ErrBadSnapshot that says why.
func badSnapshot(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadSnapshot, fmt.Sprintf(format, args...))
}

// judgeSchema tells whether got, the objects of a snapshot's database, are
// all the host's, each as the host defines it: nil, or an error wrapping
// ErrBadSnapshot naming the first that is not.
func judgeSchema(got map[string]schemaObject) error {
	want, err := expectedSchema()
	if err != nil {
		return fmt.Errorf("the host's schema: %w", err)
	}
	for k, o := range got {
		w, ok := want[k]
		if !ok {
			return badSnapshot("it has a %s %q the host does not create", o.typ, o.name)
		}
		if w != o {
			return badSnapshot("its %s %q is not defined as the host defines it", o.typ, o.name)
		}
	}
	return nil
}

// checkedObjects has SQLite read the database attached under storeSchema
// whole (PRAGMA quick_check) and returns its objects. It reads, and
// writes nothing.
func checkedObjects(conn *sqlite3.Conn) (map[string]schemaObject, error) {
	st, _, err := conn.Prepare(`PRAGMA ` + storeSchema + `.quick_check(1)`)
	if err != nil {
		return nil, err
	}
	result := ""
	if st.Step() {
		result = st.ColumnText(0)
	}
	err = st.Err()
	st.Close()
	if err != nil {
		return nil, err
	}
	if result != "ok" {
		return nil, fmt.Errorf("integrity check: %.200s", result)
	}
	return readSchema(conn, storeSchema)
}

// checkRestored checks, as CheckSnapshot checks the bytes, the database
// a restore just wrote from a snapshot and attached under storeSchema,
// before anything is written to it (attachDB, with check): nil, or an
// error wrapping ErrBadSnapshot. attachErr is the ATTACH's own error, if
// it failed. An error of the file rather than of its contents (an I/O
// error, no descriptor or memory left) is returned as it is: the
// snapshot may be good.
func checkRestored(conn *sqlite3.Conn, attachErr error) error {
	got, err := map[string]schemaObject(nil), attachErr
	if err == nil {
		got, err = checkedObjects(conn)
	}
	if err != nil {
		if localFault(err) {
			return err
		}
		return badSnapshot("%v", err)
	}
	return judgeSchema(got)
}

// localFault reports whether err, from SQLite reading a database file, is
// one of the file's access rather than of the bytes in it.
func localFault(err error) bool {
	for _, c := range []sqlite3.ErrorCode{sqlite3.IOERR, sqlite3.CANTOPEN, sqlite3.FULL, sqlite3.NOMEM,
		sqlite3.BUSY, sqlite3.LOCKED, sqlite3.PERM, sqlite3.READONLY, sqlite3.INTERRUPT, sqlite3.ABORT} {
		if errors.Is(err, c) {
			return true
		}
	}
	return false
}

// checkSeq names the snapshots being checked.
var checkSeq atomic.Uint64

// checkAttached attaches data to a pooled connection as an immutable
// database, checks that SQLite reads it whole and returns its objects. A
// snapshot's header says WAL mode; the connection's exclusive locking
// keeps the WAL index in its own memory, and the reader VFS has no WAL
// file to offer, so SQLite reads the pages as they are.
// reusable is false when the connection could not be brought back to
// holding nothing attached: it is then closed, not kept.
func checkAttached(pc *pooledConn, data []byte) (got map[string]schemaObject, reusable bool, err error) {
	name := "wasmkeep-check-" + strconv.FormatUint(checkSeq.Add(1), 10)
	readervfs.Create(name, ioutil.NewSizeReaderAt(bytes.NewReader(data)))
	defer readervfs.Delete(name)
	if err := pc.attach.BindText(1, "file:"+name+"?vfs=reader"); err != nil {
		return nil, true, err
	}
	err = pc.attach.Exec()
	pc.attach.ClearBindings()
	if err != nil {
		return nil, true, err
	}
	defer func() { reusable = pc.detachDB() == nil }()
	got, err = checkedObjects(pc.conn)
	return got, true, err
}
